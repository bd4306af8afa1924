//! One end of a message connection over any of the measured transports,
//! behind one small interface: send messages by identifier, receive a
//! batch of whole messages, close.
//!
//! Each transport is used the way an application would use it at its best:
//! - byte streams (kernel TCP with `TCP_NODELAY`, one quinn bidirectional
//!   stream) carry length-prefixed frames; a batch of messages is framed
//!   into one buffer and written at once (what a buffered writer does), and
//!   a read parses every frame it brought, without a copy;
//! - Braid's reliable transport takes and delivers whole messages
//!   (`send_message` / `recv_message`), one connection;
//! - Exon takes batches (`send_copies`: one buffer shared by a batch) and
//!   delivers batches (`recv_many`);
//! - the Node takes and delivers [`MessageBatch`]es (`send_batch`,
//!   `recv_batch`): bodies sharing one header, what a user after rate calls;
//!   with [`Setup::notify`], `send_batch_notify`, keeping at most
//!   [`NodeConfig::channel_queue`] batches unconfirmed (what the channel's
//!   queue lets `send_batch` leave outstanding) and waiting for the oldest
//!   notification beyond that, as an application that needs
//!   confirmations does.
//!
//! A receive waits at most [`TICK`] so that loops can watch their clocks
//! and flags; what is already queued is taken without waiting (a batch), so
//! the timer costs one registration per batch, not per message.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use braid::exon::NodeId;
use braid::exon_net::{ExonSocket, Outcome, SocketConfig};
use braid::node::{
    BasicAddress, BasicHeader, DeliveryStatus, MessageBatch, Node, NodeAuth, NodeConfig, Notify, Transport as NodeTransport,
};
use braid::{Connection, Endpoint, EndpointConfig, RecvBatch};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::super::exon::message::FrameReader;
use super::super::stream::quic::{QuicConfigs, SERVER_NAME};
use super::check::{put, put_frame};
use super::super::exon::message::MIN_SIZE;
use super::Transport;
use crate::fail;
use crate::template::{ResultExt, TemplateError};

/// Longest a receive waits before it returns empty-handed.
pub const TICK: Duration = Duration::from_millis(20);

/// Most messages taken from a message-oriented transport's queue in one
/// batch (bounds the time between two looks at the clock).
const MAX_BATCH: usize = 1024;

/// Longest wait for the oldest delivery notification of a Node run with
/// [`Setup::notify`] while the window of unconfirmed batches is full.
pub const NOTIFY_WAIT: Duration = Duration::from_secs(10);

/// What both ends of a run need, made before either starts: each side's
/// security (fresh identities pinned to each other, or none) and quinn's
/// certificates.
#[derive(Clone)]
pub struct Setup {
    /// The measured transport.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: usize,
    /// Braid's endpoint configuration at the server and at the client.
    pub braid: (EndpointConfig, EndpointConfig),
    /// The nodes' configurations at the server and at the client.
    pub node: (NodeConfig, NodeConfig),
    /// Exon's socket configuration (both ends).
    pub exon: SocketConfig,
    /// quinn's, for the quinn transport.
    pub quic: Option<QuicConfigs>,
    /// The kernel TCP sender's congestion control (`None`: the default).
    pub tcp_cc: Option<String>,
    /// Node transports: send each batch with a delivery notification and
    /// wait for them (see [`Wire::send`]); ignored by the others.
    pub notify: bool,
}

impl Setup {
    /// The setup of `transport`, authenticated and encrypted if
    /// `encrypted` (quinn always is; kernel TCP never).
    pub fn new(transport: Transport, size: usize, encrypted: bool, tcp_cc: Option<String>) -> Result<Setup, TemplateError> {
        let failed = |e: String| TemplateError::Failed(e);
        let mut braid = (EndpointConfig { accept_incoming: true, ..Default::default() }, EndpointConfig::default());
        braid.1.accept_incoming = false;
        let mut exon = SocketConfig::default();
        let mut node_auth = (NodeAuth::insecure(), NodeAuth::insecure());
        if encrypted {
            match transport {
                Transport::Braid => {
                    let (server, client) = braid_net::pinned_pair().map_err(|e| failed(e.to_string()))?;
                    (braid.0.security, braid.1.security) = (server, client);
                }
                Transport::NodeTcp | Transport::NodeBraid | Transport::NodeExon => {
                    node_auth = NodeAuth::pinned_pair().map_err(|e| failed(e.to_string()))?;
                }
                // Exon's default: a fresh identity per socket, every
                // datagram sealed.
                Transport::Exon | Transport::Tcp | Transport::Quinn => {}
            }
        } else {
            exon.security = braid::exon_net::ExonSecurity::InsecureNoAuth { id: NodeId(0) };
        }
        let node_transport = transport.node_transport();
        let node = |auth: NodeAuth| NodeConfig {
            transports: node_transport.into_iter().collect(),
            security: auth,
            ..NodeConfig::default()
        };
        let quic = match transport {
            Transport::Quinn => Some(super::super::stream::quic::configs(&braid.0.transport)?),
            _ => None,
        };
        Ok(Setup { transport, size, braid, node: (node(node_auth.0), node(node_auth.1)), exon, quic, tcp_cc, notify: false })
    }

    /// Exon's configuration of end `id` (insecure ends claim distinct IDs;
    /// authenticated ones derive theirs from their keys).
    fn exon_config(&self, id: u64) -> SocketConfig {
        let mut cfg = self.exon.clone();
        if !cfg.security.is_authenticated() {
            cfg.security = braid::exon_net::ExonSecurity::InsecureNoAuth { id: NodeId(id) };
        }
        cfg
    }
}

/// The receiving (or serving) end before its peer arrived.
pub enum Listener {
    /// A kernel TCP listener.
    Tcp(tokio::net::TcpListener),
    /// A quinn server endpoint.
    Quinn(quinn::Endpoint),
    /// A Braid endpoint accepting connections.
    Braid(Endpoint),
    /// An Exon socket (connectionless: the peer is whoever sends first).
    Exon(Arc<ExonSocket>),
    /// A Node.
    Node(Node<BasicHeader>, NodeTransport),
}

impl Listener {
    /// Binds the server's end of `setup` on `ip`.
    pub async fn bind(setup: &Setup, ip: std::net::IpAddr) -> Result<Listener, TemplateError> {
        let any = SocketAddr::new(ip, 0);
        Ok(match setup.transport {
            Transport::Tcp => Listener::Tcp(tokio::net::TcpListener::bind(any).await.context("tcp listen")?),
            Transport::Quinn => {
                let cfg = setup.quic.clone().context("quinn run without a quinn configuration")?;
                Listener::Quinn(quinn::Endpoint::server(cfg.server, any).context("quinn server socket")?)
            }
            Transport::Braid => Listener::Braid(Endpoint::bind_with(any, setup.braid.0.clone()).context("braid server socket")?),
            Transport::Exon => {
                Listener::Exon(Arc::new(ExonSocket::bind(any, setup.exon_config(0xb)).await.context("exon server socket")?))
            }
            t => {
                let nt = t.node_transport().context("a node transport")?;
                Listener::Node(Node::bind(any, setup.node.0.clone()).await.context("binding the receiving node")?, nt)
            }
        })
    }

    /// The address the client connects to.
    pub fn addr(&self) -> Result<SocketAddr, TemplateError> {
        match self {
            Listener::Tcp(l) => l.local_addr().context("tcp listen address"),
            Listener::Quinn(e) => e.local_addr().context("quinn server address"),
            Listener::Braid(e) => Ok(e.local_addr()),
            Listener::Exon(s) => Ok(s.local_addr()),
            Listener::Node(n, _) => Ok(n.local_addr()),
        }
    }

    /// Waits for the client (for quinn, until it opened its stream and
    /// sent on it) and returns the server's end of the connection.
    pub async fn accept(self, setup: &Setup) -> Result<Wire, TemplateError> {
        let size = setup.size;
        let kind = match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await.context("tcp accept")?;
                s.set_nodelay(true).context("TCP_NODELAY")?;
                let (rd, wr) = s.into_split();
                Kind::Stream(Stream::new(Box::new(rd), Box::new(wr), Closer::Tcp))
            }
            Listener::Quinn(e) => {
                let incoming = e.accept().await.context("quinn server closed")?;
                let conn = incoming.await.context("quinn handshake")?;
                let (wr, rd) = conn.accept_bi().await.context("quinn accept stream")?;
                Kind::Stream(Stream::new(Box::new(rd), Box::new(wr), Closer::Quinn(conn, e)))
            }
            Listener::Braid(e) => {
                let conn = e.accept().await.context("braid server closed")?;
                Kind::Braid(e, conn, RecvBatch::new())
            }
            Listener::Exon(sock) => Kind::Exon(ExonEnd::new(sock, None)),
            Listener::Node(node, t) => Kind::Node(NodeEnd::new(node, t, None, setup)),
        };
        Ok(Wire { kind, size, scratch: Vec::new(), tcp_cc: None })
    }
}

/// Connects the client's end of `setup` from `ip` to the server at `addr`.
pub async fn connect(setup: &Setup, ip: std::net::IpAddr, addr: SocketAddr) -> Result<Wire, TemplateError> {
    let any = SocketAddr::new(ip, 0);
    let mut tcp_cc = None;
    let kind = match setup.transport {
        Transport::Tcp => {
            let socket = tokio::net::TcpSocket::new_v4().context("tcp socket")?;
            if let Some(cc) = &setup.tcp_cc {
                super::super::exon::tcp_run::set_congestion_control(&socket, cc)?;
            }
            let s = socket.connect(addr).await.context("tcp connect")?;
            s.set_nodelay(true).context("TCP_NODELAY")?;
            tcp_cc = Some(congestion_control_of(&s)?);
            let (rd, wr) = s.into_split();
            Kind::Stream(Stream::new(Box::new(rd), Box::new(wr), Closer::Tcp))
        }
        Transport::Quinn => {
            let cfg = setup.quic.clone().context("quinn run without a quinn configuration")?;
            let mut e = quinn::Endpoint::client(any).context("quinn client socket")?;
            e.set_default_client_config(cfg.client);
            let conn = e.connect(addr, SERVER_NAME).context("quinn connect")?.await.context("quinn connect")?;
            let (wr, rd) = conn.open_bi().await.context("quinn open stream")?;
            Kind::Stream(Stream::new(Box::new(rd), Box::new(wr), Closer::Quinn(conn, e)))
        }
        Transport::Braid => {
            let e = Endpoint::bind_with(any, setup.braid.1.clone()).context("braid client socket")?;
            let conn = e.connect(addr).await.context("braid connect")?;
            Kind::Braid(e, conn, RecvBatch::new())
        }
        Transport::Exon => {
            let sock = Arc::new(ExonSocket::bind(any, setup.exon_config(0xa)).await.context("exon client socket")?);
            // The server's key (or insecure ID), asked at its address.
            let peer = sock.connect(addr).await.context("finding the Exon server")?;
            Kind::Exon(ExonEnd::new(sock, Some(peer)))
        }
        t => {
            let nt = t.node_transport().context("a node transport")?;
            let node: Node<BasicHeader> = Node::bind(any, setup.node.1.clone()).await.context("binding the sending node")?;
            let header = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(addr), nt);
            Kind::Node(NodeEnd::new(node, nt, Some(header), setup))
        }
    };
    Ok(Wire { kind, size: setup.size, scratch: Vec::new(), tcp_cc })
}

/// One end of an established message connection.
pub struct Wire {
    kind: Kind,
    size: usize,
    /// The frames of one batch (byte streams).
    scratch: Vec<u8>,
    /// Kernel TCP's congestion control on this connection (client end).
    tcp_cc: Option<String>,
}

/// The congestion control algorithm the kernel runs on TCP socket `s`
/// (`TCP_CONGESTION`).
pub fn congestion_control_of(s: &impl std::os::fd::AsRawFd) -> Result<String, TemplateError> {
    let mut name = [0u8; 32];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, a buffer of `len` bytes, and `len`
    // updated by the kernel to what it wrote.
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_mut_ptr().cast(), &mut len)
    };
    if r != 0 {
        fail!("reading TCP congestion control: {}", std::io::Error::last_os_error());
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

enum Kind {
    Stream(Stream),
    /// The endpoint, its connection and the latest received batch (kept
    /// for its capacity).
    Braid(Endpoint, Connection, RecvBatch),
    Exon(ExonEnd),
    Node(NodeEnd),
}

/// A byte stream's halves and its frame parser.
struct Stream {
    rd: Box<dyn AsyncRead + Unpin + Send>,
    wr: Box<dyn AsyncWrite + Unpin + Send>,
    frames: FrameReader,
    buf: Vec<u8>,
    closer: Closer,
}

/// How a byte stream's connection ends.
enum Closer {
    Tcp,
    Quinn(quinn::Connection, quinn::Endpoint),
}

impl Stream {
    fn new(rd: Box<dyn AsyncRead + Unpin + Send>, wr: Box<dyn AsyncWrite + Unpin + Send>, closer: Closer) -> Stream {
        Stream { rd, wr, frames: FrameReader::default(), buf: vec![0; 256 << 10], closer }
    }
}

/// An Exon socket, its peer (learnt from the first message at the server),
/// and the outcomes of what it sent.
struct ExonEnd {
    sock: Arc<ExonSocket>,
    peer: Option<NodeId>,
    batch: Vec<(NodeId, Bytes)>,
    accepted: u64,
    delivered: Arc<AtomicU64>,
    in_doubt: Arc<AtomicU64>,
}

impl ExonEnd {
    fn new(sock: Arc<ExonSocket>, peer: Option<NodeId>) -> ExonEnd {
        let (delivered, in_doubt) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (d, x, s) = (delivered.clone(), in_doubt.clone(), sock.clone());
        // Outcomes must be taken or they pile up; counted for the
        // exactly-once check.
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while s.outcomes_many(&mut batch).await > 0 {
                for (_, o) in batch.drain(..) {
                    match o {
                        Outcome::Delivered => d.fetch_add(1, Ordering::Relaxed),
                        Outcome::InDoubt => x.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
        });
        ExonEnd { sock, peer, batch: Vec::new(), accepted: 0, delivered, in_doubt }
    }
}

/// A Node, the transport its messages name, and the header they carry (at
/// the server: the reply to the client's first message).
struct NodeEnd {
    node: Node<BasicHeader>,
    transport: NodeTransport,
    header: Option<BasicHeader>,
    /// With notifications: those not yet awaited, oldest first, at most
    /// `window` of them.
    notes: Option<VecDeque<Notify>>,
    window: usize,
    /// Batches whose notification said Delivered.
    notified: u64,
}

impl NodeEnd {
    fn new(node: Node<BasicHeader>, transport: NodeTransport, header: Option<BasicHeader>, setup: &Setup) -> NodeEnd {
        let window = setup.node.1.channel_queue.max(1);
        let notes = setup.notify.then(|| VecDeque::with_capacity(window + 1));
        NodeEnd { node, transport, header, notes, window, notified: 0 }
    }

    /// Send `batch`; with notifications, keep its notification and wait
    /// for the oldest ones while more than the window are unconfirmed.
    async fn send(&mut self, batch: MessageBatch<BasicHeader>) -> Result<(), TemplateError> {
        let Some(notes) = &mut self.notes else {
            return self.node.send_batch(batch).await.context("node send");
        };
        notes.push_back(self.node.send_batch_notify(batch).await.context("node send")?);
        while notes.len() > self.window {
            if let Some(note) = notes.pop_front() {
                self.notified += confirmed(note, NOTIFY_WAIT).await?;
            }
        }
        Ok(())
    }

    /// Wait for every notification still outstanding, at most `bound` in
    /// all; how many batches were confirmed so far (`None` without
    /// notifications).
    async fn settle(&mut self, bound: Duration) -> Result<Option<u64>, TemplateError> {
        let Some(notes) = &mut self.notes else { return Ok(None) };
        let until = tokio::time::Instant::now() + bound;
        while let Some(note) = notes.pop_front() {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            self.notified += confirmed(note, left).await?;
        }
        Ok(Some(self.notified))
    }
}

/// 1 once `note` says Delivered (0 for a transport that ends at Sent); an
/// error if it failed or did not end within `bound`.
async fn confirmed(mut note: Notify, bound: Duration) -> Result<u64, TemplateError> {
    match tokio::time::timeout(bound, note.outcome()).await {
        Ok(DeliveryStatus::Delivered) => Ok(1),
        Ok(DeliveryStatus::Failed(reason)) => fail!("a batch was not delivered: {reason}"),
        // Sent: the transport cannot confirm (none of the Node's here).
        Ok(_) => Ok(0),
        Err(_) => fail!("no delivery notification within {bound:?}"),
    }
}

/// Exon's count of outcomes at one end.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExonOutcomes {
    /// Messages the socket accepted.
    pub accepted: u64,
    /// Reported delivered.
    pub delivered: u64,
    /// Reported in doubt.
    pub in_doubt: u64,
}

impl Wire {
    /// Sends messages `ids`, in order; returns once the transport took
    /// them all (waiting while its flow control says so).
    pub async fn send(&mut self, ids: &[u64]) -> Result<(), TemplateError> {
        let size = self.size;
        match &mut self.kind {
            Kind::Stream(s) => {
                self.scratch.clear();
                for &id in ids {
                    put_frame(&mut self.scratch, id, size);
                }
                s.wr.write_all(&self.scratch).await.context("stream write")?;
            }
            Kind::Braid(_, conn, _) => {
                // A run at once (one lock and one driver wake-up for as many
                // as the send buffer takes), framed into one buffer the
                // application keeps, as the byte streams get theirs.
                self.scratch.clear();
                for &id in ids {
                    put(&mut self.scratch, id, size);
                }
                let msgs: Vec<&[u8]> = self.scratch.chunks(size.max(MIN_SIZE)).collect();
                conn.send_copies(&msgs).await.context("braid send")?;
            }
            Kind::Exon(e) => {
                let peer = e.peer.context("Exon: no peer to send to yet")?;
                // A run at once, framed into one buffer the application
                // keeps, as Braid's; the socket copies it into one buffer
                // the messages share.
                self.scratch.clear();
                for &id in ids {
                    put(&mut self.scratch, id, size);
                }
                let msgs: Vec<&[u8]> = self.scratch.chunks(size.max(MIN_SIZE)).collect();
                e.accepted += e.sock.send_copies(peer, &msgs).await.context("exon send")?.len() as u64;
            }
            Kind::Node(n) => {
                let h = n.header.clone().context("Node: no peer to send to yet")?;
                // A run at once, framed into one buffer the application
                // keeps, as Braid's and Exon's, then copied into one batch
                // (one header, the bodies in one buffer), as they copy it.
                self.scratch.clear();
                for &id in ids {
                    put(&mut self.scratch, id, size);
                }
                let mut batch = MessageBatch::builder(h);
                batch.reserve(self.scratch.len() + 3 * ids.len());
                for m in self.scratch.chunks(size.max(MIN_SIZE)) {
                    batch.push(m);
                }
                n.send(batch.build()).await?;
            }
        }
        Ok(())
    }

    /// Waits up to [`TICK`] for messages and hands each one received to
    /// `f`, as many as arrived together; how many (0 after the wait).
    /// An error if the connection ended.
    pub async fn recv(&mut self, mut f: impl FnMut(&[u8])) -> Result<usize, TemplateError> {
        let mut n = 0;
        match &mut self.kind {
            Kind::Stream(s) => {
                let got = match tokio::time::timeout(TICK, s.rd.read(&mut s.buf)).await {
                    Err(_) => return Ok(0),
                    Ok(r) => r.context("stream read")?,
                };
                crate::ensure!(got > 0, "the stream ended");
                s.frames.extend(&s.buf[..got]);
                while let Some(m) = s.frames.next_frame().map_err(|l| TemplateError::Failed(format!("a frame of {l} bytes")))? {
                    f(m);
                    n += 1;
                }
            }
            Kind::Braid(_, conn, batch) => {
                batch.clear();
                match tokio::time::timeout(TICK, conn.recv_batch(batch, MAX_BATCH)).await {
                    Err(_) => return Ok(0),
                    Ok(r) => r.context("braid receive")?,
                };
                for m in batch.iter() {
                    f(m);
                    n += 1;
                }
            }
            Kind::Exon(e) => {
                e.batch.clear();
                match tokio::time::timeout(TICK, e.sock.recv_many(&mut e.batch)).await {
                    Err(_) => return Ok(0),
                    Ok(0) => fail!("the Exon driver stopped"),
                    Ok(_) => {}
                }
                for (from, m) in &e.batch {
                    e.peer.get_or_insert(*from);
                    f(m);
                    n += 1;
                }
            }
            Kind::Node(node) => {
                let batch = match tokio::time::timeout(TICK, node.node.recv_batch()).await {
                    Err(_) => return Ok(0),
                    Ok(None) => fail!("the node stopped"),
                    Ok(Some(b)) => b,
                };
                if node.header.is_none() {
                    node.header = Some(batch.header().reply(node.transport));
                }
                for m in batch.iter() {
                    f(m);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Exon's outcomes so far (`None` for other transports).
    pub fn exon_outcomes(&self) -> Option<ExonOutcomes> {
        match &self.kind {
            Kind::Exon(e) => Some(ExonOutcomes {
                accepted: e.accepted,
                delivered: e.delivered.load(Ordering::Relaxed),
                in_doubt: e.in_doubt.load(Ordering::Relaxed),
            }),
            _ => None,
        }
    }

    /// Node runs with notifications: waits for those outstanding, at most
    /// `bound`, and returns how many batches were confirmed delivered
    /// (`None` otherwise). An error if one failed or the wait ran out.
    pub async fn settle_notifications(&mut self, bound: Duration) -> Result<Option<u64>, TemplateError> {
        match &mut self.kind {
            Kind::Node(n) => n.settle(bound).await,
            _ => Ok(None),
        }
    }

    /// The congestion control the kernel runs on this end's TCP
    /// connection (`None` for other transports).
    pub fn tcp_congestion_control(&self) -> Option<&str> {
        self.tcp_cc.as_deref()
    }

    /// Closes this end (for Exon, after waiting up to `drain` for the
    /// outcome of every accepted message).
    pub async fn close(self, drain: Duration) -> Option<ExonOutcomes> {
        let outcomes = match self.kind {
            Kind::Stream(mut s) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), s.wr.shutdown()).await;
                if let Closer::Quinn(conn, e) = s.closer {
                    conn.close(0u32.into(), b"done");
                    let _ = tokio::time::timeout(Duration::from_secs(1), e.wait_idle()).await;
                }
                None
            }
            Kind::Braid(e, conn, _) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
                e.close();
                None
            }
            Kind::Exon(e) => {
                let until = tokio::time::Instant::now() + drain;
                let settled = |e: &ExonEnd| e.delivered.load(Ordering::Relaxed) + e.in_doubt.load(Ordering::Relaxed);
                while settled(&e) < e.accepted && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                e.sock.close().await;
                Some(ExonOutcomes {
                    accepted: e.accepted,
                    delivered: e.delivered.load(Ordering::Relaxed),
                    in_doubt: e.in_doubt.load(Ordering::Relaxed),
                })
            }
            Kind::Node(n) => {
                n.node.close().await;
                None
            }
        };
        outcomes
    }
}
