//! The node (seed 000 §III): one message interface over every transport,
//! the transport chosen per message by its header.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::channel::{ChannelEnv, Channels, Lane, Outgoing};
use crate::inbox::{Inbox, TryDeliver};
use crate::notify::{Notifier, Notify};
use crate::stats::{bump, Counters};
use crate::udp::Udp;
use crate::{
    wire, Address, FailReason, Header, Message, MessageBatch, NodeConfig, NodeError, NodeStats, Received, SendError, Transport,
    VnodeId,
};
use crate::receiver::Receiver;

/// What the background tasks share: the inbox and the counters.
pub(crate) struct Core<H> {
    pub(crate) counters: Arc<Counters>,
    pub(crate) inbox: Inbox<H>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) max_frame_size: usize,
    /// The adaptation actuators' settings and live Braid connections.
    pub(crate) actuators: Arc<crate::adapt::Actuators>,
    /// The installed rule set, if any ([`Node::set_rules`]).
    pub(crate) rules: Mutex<Option<crate::rules::Runtime>>,
    /// A rule set is installed: the send and receive paths report events.
    pub(crate) rules_on: AtomicBool,
    /// Bumped at every install, so the timer task of a replaced rule set
    /// stops.
    pub(crate) rules_generation: std::sync::atomic::AtomicU64,
}

/// The node has been closed.
pub(crate) struct NodeGone;

impl<H> Core<H> {
    /// Reports an event concerning destination `dst` (a node's base
    /// address) to the rule runtime, if one runs.
    pub(crate) fn rule_event(&self, dst: SocketAddr, ev: crate::rules::NodeEvent) {
        if self.rules_on.load(Ordering::Relaxed) {
            if let Some(rt) = self.rules.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                rt.event(dst, ev);
                // A lost connection is rare and may call for a change at
                // once (seed 001 §6.3 evaluates on events); per-message
                // events wait for the timer, so a message never pays for
                // an evaluation.
                if ev == crate::rules::NodeEvent::Closed {
                    rt.tick(&self.actuators);
                }
            }
        }
    }
}

impl<H: Header> Core<H> {
    /// Frames received together over a reliable transport, in order:
    /// decoded and queued, waiting for room, with one reservation of
    /// queue room per run of messages to the same queue (issue 23).
    /// Malformed frames are dropped and counted, as are messages to an
    /// unknown vnode (by the inbox). `msgs` is scratch space, left empty.
    pub(crate) async fn receive_frames(
        &self,
        frames: impl IntoIterator<Item = Bytes>,
        transport: Transport,
        msgs: &mut Vec<Received<H>>,
    ) -> Result<(), NodeGone> {
        msgs.clear();
        for frame in frames {
            if let Some(msg) = self.decode(frame, transport) {
                self.rule_event(msg.header().source().as_socket(), crate::rules::NodeEvent::Received);
                msgs.push(msg);
            }
        }
        match self.inbox.deliver_many(msgs, &self.counters).await {
            Err(FailReason::NodeClosed) => Err(NodeGone),
            // Unknown vnode: dropped and counted by the inbox.
            _ => Ok(()),
        }
    }

    /// A datagram: decode and queue it if there is room, else drop it.
    pub(crate) fn receive_datagram(&self, frame: Bytes) {
        if let Some(msg) = self.decode(frame, Transport::Udp) {
            self.rule_event(msg.header().source().as_socket(), crate::rules::NodeEvent::Received);
            match self.inbox.try_deliver(msg, &self.counters) {
                Ok(()) | Err(TryDeliver::Full | TryDeliver::Unknown | TryDeliver::Closed) => {}
            }
        }
    }

    /// Decode a frame; a batch's messages beyond the frame (counted by
    /// the transport's reader) are added to the transport's count of
    /// messages received.
    fn decode(&self, frame: Bytes, transport: Transport) -> Option<Received<H>> {
        match wire::decode_any::<H>(frame) {
            Ok(wire::Decoded::One(header, body)) => Some(Received::Message(Message::from_wire(header, body))),
            Ok(wire::Decoded::Batch(batch)) => {
                if let Some(c) = self.counters.transport(transport) {
                    c.on_received_many(batch.len() - 1, 0);
                }
                if self.rules_on.load(Ordering::Relaxed) {
                    for _ in 1..batch.len() {
                        self.rule_event(batch.header().source().as_socket(), crate::rules::NodeEvent::Received);
                    }
                }
                Some(Received::Batch(batch))
            }
            Err(e) => {
                bump(&self.counters.malformed_frames);
                tracing::debug!(%transport, error = %e, "malformed frame dropped");
                None
            }
        }
    }
}

struct Inner<H> {
    core: Arc<Core<H>>,
    local: SocketAddr,
    transports: Vec<Transport>,
    udp_max_datagram: usize,
    tcp_notsent_lowat: Option<u32>,
    /// TLS for TCP channels; `None` under `InsecureNoAuth`.
    tls: Option<braid_tls::TlsSettings>,
    /// The node's public key; `None` under `InsecureNoAuth`.
    public_key: Option<braid_identity::PublicKey>,
    policy: braid_identity::TrustPolicy,
    /// Transport configuration of bulk-lane Braid connections, if not
    /// the endpoint's.
    bulk_braid: Option<braid_net::TransportConfig>,
    udp: Option<Arc<Udp>>,
    braid: Option<braid_net::Endpoint>,
    exon: Option<Arc<crate::exon::Exon>>,
    env: ChannelEnv,
    shutdown: watch::Sender<bool>,
    main_rx: tokio::sync::Mutex<Receiver<H>>,
    listeners: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
    close_wait: std::time::Duration,
}

impl<H> Inner<H> {
    /// Refuse new messages and tell every task to stop.
    fn stop(&self) {
        self.closed.store(true, Ordering::Release);
        self.shutdown.send_replace(true);
    }

    fn take_listeners(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<H> Drop for Inner<H> {
    fn drop(&mut self) {
        // Channels flush what is queued and close in the background.
        self.stop();
        for l in self.take_listeners() {
            l.abort();
        }
        if let Some(e) = &self.braid {
            e.close();
        }
    }
}

/// A node: sends messages over the transport their header names and
/// receives from every transport it runs.
///
/// Semantics per transport (see [`Transport`]): UDP is unordered and at
/// most once, and refuses messages larger than one datagram; TCP and Braid
/// keep FIFO order per destination and are at most once across a
/// connection failure (what was handed to a connection that broke is not
/// sent again). Channels (TCP, Braid) are opened on first use, messages
/// wait in the channel's queue while it opens, and a channel is closed
/// after [`NodeConfig::idle_timeout`] without traffic. A message whose
/// destination is this node (same IP and base port) never touches the
/// network: it is put in the receiving (virtual) node's queue as it is,
/// typed values unserialized.
///
/// Cloning is cheap; the node shuts down when the last clone (and the last
/// [`Vnode`]) is dropped, or at [`Node::close`].
///
/// ```no_run
/// use braid_node::{Address, BasicAddress, BasicHeader, Message, Node, NodeConfig, Transport};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
/// let b: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
/// let (src, dst) = (BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()));
/// a.send(Message::raw(BasicHeader::new(src, dst, Transport::Tcp), &b"hello"[..])).await?;
/// let m = b.recv().await.unwrap();
/// assert_eq!(&m.raw_bytes().unwrap()[..], b"hello");
/// # Ok(()) }
/// ```
pub struct Node<H> {
    inner: Arc<Inner<H>>,
}

impl<H> Clone for Node<H> {
    fn clone(&self) -> Self {
        Node { inner: self.inner.clone() }
    }
}

impl<H> std::fmt::Debug for Node<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("local", &self.inner.local).field("transports", &self.inner.transports).finish()
    }
}

struct Bound {
    base: SocketAddr,
    udp: Option<Udp>,
    tcp: Option<TcpListener>,
    braid: Option<braid_net::Endpoint>,
    exon: Option<crate::exon::Exon>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(e) = &self.braid {
            e.close();
        }
    }
}

fn with_port(addr: SocketAddr, base: u16, t: Transport) -> Option<SocketAddr> {
    base.checked_add(t.port_offset()).map(|p| SocketAddr::new(addr.ip(), p))
}

/// Bind every transport at `base + offset`; port 0 lets the first one
/// (lowest offset) pick the base.
async fn try_bind(addr: SocketAddr, transports: &[Transport], config: &NodeConfig) -> Result<Bound, NodeError> {
    let mut b = Bound { base: addr, udp: None, tcp: None, braid: None, exon: None };
    let mut base: Option<u16> = (addr.port() != 0).then_some(addr.port());
    for &t in transports {
        let at = match base {
            Some(p) => with_port(addr, p, t).ok_or(NodeError::NoFreePorts(transports.to_vec()))?,
            None => SocketAddr::new(addr.ip(), 0),
        };
        let bind_err = |source| NodeError::Bind { transport: t, addr: at, source };
        let got = match t {
            Transport::Udp => {
                let u = Udp::bind(at, config.udp_loss).map_err(bind_err)?;
                let got = u.socket.local_addr().map_err(bind_err)?;
                b.udp = Some(u);
                got
            }
            Transport::Tcp => {
                let l = TcpListener::bind(at).await.map_err(bind_err)?;
                let got = l.local_addr().map_err(bind_err)?;
                b.tcp = Some(l);
                got
            }
            Transport::Braid => {
                let e = braid_net::Endpoint::bind_with(at, config.braid.clone()).map_err(|e| match e {
                    braid_net::NetError::Bind { source, .. } | braid_net::NetError::Socket { source, .. } => bind_err(source),
                    e => NodeError::Braid(e),
                })?;
                let got = e.local_addr();
                b.braid = Some(e);
                got
            }
            Transport::Exon => {
                let e = crate::exon::Exon::bind(at, config.exon.clone()).await.map_err(bind_err)?;
                let got = e.local_addr();
                b.exon = Some(e);
                got
            }
            Transport::Data => {
                return Err(NodeError::TransportUnavailable { transport: t, reason: "not a listening transport" })
            }
        };
        if base.is_none() {
            base = Some(got.port().checked_sub(t.port_offset()).ok_or(NodeError::NoFreePorts(transports.to_vec()))?);
        }
    }
    b.base = SocketAddr::new(addr.ip(), base.unwrap_or(addr.port()));
    Ok(b)
}

impl<H: Header> Node<H> {
    /// Start a node at `addr` (IP and base port; port 0 picks a free base
    /// port such that every transport's port is free). Must be called
    /// within a tokio runtime.
    pub async fn bind(addr: SocketAddr, mut config: NodeConfig) -> Result<Node<H>, NodeError> {
        config.validate()?;
        tokio::runtime::Handle::try_current().map_err(|_| NodeError::NoRuntime)?;
        if addr.ip().is_unspecified() {
            return Err(NodeError::UnspecifiedAddress(addr));
        }
        // One identity and trust store for Braid (Noise) and TCP (TLS 1.3).
        let keys = config.security.load()?;
        config.braid.security = crate::braid_link::security(keys.as_ref());
        config.exon.security = crate::exon::security(keys.as_ref());
        let tls = match &keys {
            Some((identity, trust)) => Some(
                braid_tls::TlsSettings::new(identity, trust.clone())
                    .map_err(|e| NodeError::Security(e.to_string()))?
                    .trusting_own_key()
                    .with_handshake_timeout(config.connect_timeout),
            ),
            None => None,
        };
        let public_key = keys.as_ref().map(|(identity, _)| identity.public_key());
        let mut transports = Vec::new();
        for &t in &config.transports {
            match t {
                Transport::Data => {
                    return Err(NodeError::TransportUnavailable {
                        transport: t,
                        reason: "`data` is a pseudo-transport: wrap the node in a DataInterceptor",
                    })
                }
                _ if !transports.contains(&t) => transports.push(t),
                _ => {}
            }
        }
        transports.sort_by_key(|t| t.port_offset());
        let ephemeral = addr.port() == 0;
        let mut bound = None;
        for attempt in 0..64 {
            match try_bind(addr, &transports, &config).await {
                Ok(b) => {
                    bound = Some(b);
                    break;
                }
                Err(NodeError::Bind { .. } | NodeError::NoFreePorts(_)) if ephemeral => continue,
                // A node closed a moment ago releases its sockets when its
                // tasks end, shortly after `close` returns (Braid's driver
                // holds its socket until its task is dropped): retry a
                // fixed port for up to ~0.3 s.
                Err(NodeError::Bind { source, .. }) if source.kind() == std::io::ErrorKind::AddrInUse && attempt < 30 => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e),
            }
        }
        let mut bound = bound.ok_or_else(|| NodeError::NoFreePorts(transports.clone()))?;

        let counters = Arc::new(Counters::default());
        let (shutdown_tx, shutdown) = watch::channel(false);
        let (inbox, main_rx) = Inbox::new(config.recv_queue);
        let core = Arc::new(Core {
            counters: counters.clone(),
            inbox,
            shutdown: shutdown.clone(),
            max_frame_size: config.max_frame_size,
            actuators: Arc::new(crate::adapt::Actuators::default()),
            rules: Mutex::new(None),
            rules_on: AtomicBool::new(false),
            rules_generation: std::sync::atomic::AtomicU64::new(0),
        });
        let mut listeners = Vec::new();
        let udp = bound.udp.take().map(Arc::new);
        if let Some(u) = &udp {
            listeners.push(tokio::spawn(crate::udp::recv_loop(core.clone(), u.clone())));
        }
        if let Some(l) = bound.tcp.take() {
            listeners.push(tokio::spawn(crate::tcp::accept_loop(core.clone(), l, tls.clone())));
        }
        let braid = bound.braid.take();
        if let Some(e) = &braid {
            listeners.push(tokio::spawn(crate::braid_link::accept_loop(core.clone(), e.clone())));
        }
        let exon = bound.exon.take().map(Arc::new);
        if let Some(e) = &exon {
            listeners.push(tokio::spawn(crate::exon::recv_loop(core.clone(), e.clone())));
            listeners.push(tokio::spawn(crate::exon::outcome_loop(core.clone(), e.clone())));
        }
        let env = ChannelEnv {
            channels: Arc::new(Channels::new()),
            counters,
            idle_timeout: config.idle_timeout,
            connect_timeout: config.connect_timeout,
            queue: config.channel_queue,
            shutdown,
        };
        tracing::debug!(addr = %bound.base, ?transports, "node bound");
        Ok(Node {
            inner: Arc::new(Inner {
                core,
                local: bound.base,
                transports,
                udp_max_datagram: config.udp_max_datagram,
                tcp_notsent_lowat: config.tcp_notsent_lowat,
                tls,
                public_key,
                policy: config.security.policy(),
                bulk_braid: config.bulk_congestion_control.map(|cc| braid_net::TransportConfig {
                    congestion_control: cc,
                    ..config.braid.transport.clone()
                }),
                udp,
                braid,
                exon,
                env,
                shutdown: shutdown_tx,
                main_rx: tokio::sync::Mutex::new(Receiver::new(main_rx)),
                listeners: Mutex::new(listeners),
                closed: AtomicBool::new(false),
                close_wait: config.connect_timeout,
            }),
        })
    }

    /// The node's IP and base port: what its addresses name.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// The node's public key (what peers list in their known hosts);
    /// `None` when it runs without authentication (`InsecureNoAuth`).
    pub fn public_key(&self) -> Option<braid_identity::PublicKey> {
        self.inner.public_key
    }

    /// The trust policy its TCP and Braid peers are judged by.
    pub fn trust_policy(&self) -> braid_identity::TrustPolicy {
        self.inner.policy
    }

    /// The transports this node runs.
    pub fn transports(&self) -> &[Transport] {
        &self.inner.transports
    }

    /// Whether `addr` names this node (same IP and base port).
    pub fn is_local(&self, addr: &H::Addr) -> bool {
        addr.as_socket() == self.inner.local
    }

    /// Send `msg` without notification. Returns once the message is queued
    /// (waiting while its channel's queue is full); `Err` if it cannot be
    /// sent at all.
    pub async fn send(&self, mut msg: Message<H>) -> Result<(), SendError> {
        self.override_transport(&mut msg);
        self.send_with(msg, Notifier::none(), Lane::Default).await
    }

    /// Send `msg` and get its delivery notifications.
    pub async fn send_notify(&self, msg: Message<H>) -> Result<Notify, SendError> {
        self.send_notify_on(msg, Lane::Default).await
    }

    /// [`Node::send_notify`] on the bulk lane: a TCP or Braid channel of
    /// its own per destination, for the DATA interceptor (see the
    /// `channel` module).
    pub(crate) async fn send_notify_bulk(&self, msg: Message<H>) -> Result<Notify, SendError> {
        self.send_notify_on(msg, Lane::Bulk).await
    }

    /// A transport chosen for the destination ([`Node::set_transport_for`])
    /// replaces the header's.
    fn override_transport(&self, msg: &mut Message<H>) {
        self.override_header_transport(msg.header_mut());
    }

    /// The transport chosen for `header`'s destination, if it replaces
    /// the header's.
    fn transport_override(&self, header: &H) -> Option<Transport> {
        let actuators = &self.inner.core.actuators;
        if !actuators.any_transport_override() {
            return None;
        }
        actuators
            .transport_for(header.destination().as_socket())
            .filter(|&t| header.transport() != t && header.transport() != Transport::Data)
    }

    fn override_header_transport(&self, header: &mut H) {
        if let Some(t) = self.transport_override(header) {
            if !header.override_transport(t) {
                tracing::trace!(transport = %t, "header type cannot change its transport: sent as it asks");
            }
        }
    }

    async fn send_notify_on(&self, mut msg: Message<H>, lane: Lane) -> Result<Notify, SendError> {
        // The bulk lane is DATA's: its per-message choice stands.
        if lane == Lane::Default {
            self.override_transport(&mut msg);
        }
        let (n, notify) = Notifier::pair(self.confirms(msg.header()));
        self.send_with(msg, n, lane).await?;
        Ok(notify)
    }

    /// Whether what goes as `header` says will be reported
    /// [`DeliveryStatus::Delivered`](crate::DeliveryStatus::Delivered)
    /// (see [`Notify::confirms_delivery`]).
    fn confirms(&self, header: &H) -> bool {
        self.is_local(header.destination())
            || match header.transport() {
                Transport::Braid | Transport::Exon => true,
                Transport::Tcp => crate::tcp::CAN_CONFIRM,
                Transport::Udp | Transport::Data => false,
            }
    }

    async fn send_with(&self, msg: Message<H>, notifier: Notifier, lane: Lane) -> Result<(), SendError> {
        let prepared = self.prepare(msg)?;
        self.dispatch(vec![(prepared, notifier)], lane).await
    }

    /// Send `msgs` without notifications, in order: [`Node::send`] for a
    /// run of messages, as an application with many small messages at
    /// hand uses it. Every message is checked and encoded first: if one
    /// cannot be sent at all, none is sent and the error says why.
    /// Consecutive messages to the same destination over the same
    /// transport are then handed over together (issue 23 item 3): one
    /// queue registration per TCP or Braid channel, whose task writes
    /// them in as few system calls as fit, and one `send_many` of Exon,
    /// which packs them into as few datagrams as fit. Returns once every
    /// message is queued.
    ///
    /// ```no_run
    /// # use braid_node::{BasicAddress, BasicHeader, Message, Node, NodeConfig, Transport};
    /// # async fn f(node: Node<BasicHeader>, peer: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    /// let h = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(peer), Transport::Braid);
    /// node.send_many((0..64u8).map(|i| Message::raw(h.clone(), vec![i; 64]))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_many(&self, msgs: impl IntoIterator<Item = Message<H>>) -> Result<(), SendError> {
        let mut prepared = Vec::new();
        for mut msg in msgs {
            self.override_transport(&mut msg);
            prepared.push((self.prepare(msg)?, Notifier::none()));
        }
        let mut run = Vec::new();
        let mut prepared = prepared.into_iter().peekable();
        while let Some(p) = prepared.next() {
            let key = p.0.group();
            run.push(p);
            while key.is_some() && prepared.peek().is_some_and(|n| n.0.group() == key) {
                run.extend(prepared.next());
            }
            self.dispatch(std::mem::take(&mut run), Lane::Default).await?;
        }
        Ok(())
    }

    /// Send the messages of `batch`, in order, without notifications
    /// ([`Node::send_batch_notify`] gives one for the whole batch):
    /// [`Node::send_many`] for messages that share a header, at the cost
    /// of a length and a copy per message (issue 23 item 3). Returns once
    /// the batch is queued.
    ///
    /// The batch travels as one frame (see the `wire` module: the header
    /// once, then the bodies), or, if that frame would exceed the
    /// transport's unit, as several consecutive frames, each a batch of
    /// its own: UDP's unit is [`NodeConfig::udp_max_datagram`], Exon's its
    /// largest message (16 MiB), TCP's and Braid's
    /// [`NodeConfig::max_frame_size`]. Splitting rather than refusing keeps
    /// a batch's size the application's choice, not the transport's. A body
    /// that does not fit a frame even alone is refused with
    /// [`SendError::TooLarge`] before anything is queued.
    ///
    /// Semantics per transport: over TCP and Braid the frames go on the
    /// destination's channel, in order with the messages `send` and
    /// `send_many` put there (FIFO per destination, at most once across a
    /// connection failure, frame by frame). Over Exon each frame is one
    /// Exon message: delivered exactly once, all of its messages or none of
    /// them; a split batch's frames are delivered independently, in no
    /// particular order (Exon is unordered). Over UDP each frame is one
    /// datagram, lost or delivered whole. A destination on this host gets
    /// the batch as it is, without encoding. The receiver gets a batch
    /// from [`Node::recv_batch`], or its messages one by one from
    /// [`Node::recv`] and [`Node::recv_many`].
    ///
    /// ```no_run
    /// use braid_node::{BasicAddress, BasicHeader, MessageBatch, Node, NodeConfig, Transport};
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
    /// let b: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
    /// let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Braid);
    /// let mut batch = MessageBatch::builder(h);
    /// for i in 0..1000u32 {
    ///     batch.push(&i.to_le_bytes());
    /// }
    /// a.send_batch(batch.build()).await?;
    /// let mut n = 0;
    /// while n < 1000 {
    ///     let got = b.recv_batch().await.expect("open");
    ///     for body in got.iter() {
    ///         assert_eq!(body, (n as u32).to_le_bytes());
    ///         n += 1;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn send_batch(&self, batch: MessageBatch<H>) -> Result<(), SendError> {
        self.send_batch_with(batch, false).await.map(drop)
    }

    /// [`Node::send_batch`] with one delivery notification for the whole
    /// batch, whatever number of frames it travels in (issue 23 item 3:
    /// an application that needs confirmations pays one [`Notify`] per
    /// batch, not one per message). Its status is
    /// [`DeliveryStatus::Delivered`](crate::DeliveryStatus::Delivered) once
    /// every frame was delivered, in each transport's meaning of it as for
    /// [`Node::send_notify`] (Braid: acknowledged; TCP: acknowledged by the
    /// peer's kernel; Exon: delivered exactly once; this host: in the
    /// receiver's queue), `Failed` as soon as one frame failed (the first
    /// failure's reason; over TCP and Braid the frames after it fail too,
    /// over Exon some may still be delivered), and `Sent`, final, once
    /// every frame was handed to a transport that cannot confirm (UDP). An
    /// empty batch is at once `Delivered` (`Sent` over UDP).
    ///
    /// The frames are completed by the transports as single messages are,
    /// into one shared count of the frames outstanding: no task, channel
    /// or notification per frame.
    ///
    /// ```no_run
    /// use braid_node::{BasicAddress, BasicHeader, DeliveryStatus, MessageBatch, Node, Transport};
    /// # async fn f(node: Node<BasicHeader>, peer: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    /// let h = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(peer), Transport::Braid);
    /// let mut batch = MessageBatch::builder(h);
    /// for i in 0..1000u32 {
    ///     batch.push(&i.to_le_bytes());
    /// }
    /// let mut notify = node.send_batch_notify(batch.build()).await?;
    /// match notify.outcome().await {
    ///     DeliveryStatus::Delivered => println!("all 1000 acknowledged"),
    ///     DeliveryStatus::Failed(reason) => println!("not all delivered: {reason}"),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn send_batch_notify(&self, batch: MessageBatch<H>) -> Result<Notify, SendError> {
        match self.send_batch_with(batch, true).await? {
            Some(notify) => Ok(notify),
            // `send_batch_with` makes one whenever it is asked to.
            None => Err(SendError::Closed),
        }
    }

    /// What [`Node::send_batch`] and [`Node::send_batch_notify`] share;
    /// `notify`: make (and return) the batch's notification.
    async fn send_batch_with(&self, mut batch: MessageBatch<H>, notify: bool) -> Result<Option<Notify>, SendError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        // Only a header that changes loses the frame its builder wrote.
        if self.transport_override(batch.header()).is_some() {
            self.override_header_transport(batch.header_mut());
        }
        let confirms = notify && self.confirms(batch.header());
        if batch.is_empty() {
            return Ok(notify.then(|| {
                // Nothing to wait for: at once the final status.
                let (mut n, note) = Notifier::pair(confirms);
                if confirms {
                    n.delivered();
                } else {
                    n.sent();
                }
                note
            }));
        }
        let transport = batch.header().transport();
        if transport == Transport::Data {
            return Err(SendError::UnresolvedData);
        }
        let dst = batch.header().destination().clone();
        let counters = &inner.core.counters;
        if self.is_local(&dst) {
            let n = batch.len() as u64;
            let (notifier, note) = match notify {
                true => {
                    let (notifier, note) = Notifier::pair(true);
                    (notifier, Some(note))
                }
                false => (Notifier::none(), None),
            };
            // Reflected in-process (seed 000 §III-B): not encoded.
            return match inner.core.inbox.deliver(Received::Batch(batch), counters).await {
                Ok(()) => {
                    counters.local_deliveries.fetch_add(n, Ordering::Relaxed);
                    notifier.delivered();
                    Ok(note)
                }
                Err(FailReason::UnknownVnode(v)) => Err(SendError::UnknownVnode(v)),
                Err(_) => Err(SendError::Closed),
            };
        }
        if !inner.transports.contains(&transport) {
            return Err(SendError::TransportDisabled(transport));
        }
        let base = dst.as_socket();
        let to = dst.transport_addr(transport).ok_or(SendError::NoTransportPort(base, transport))?;
        let limit = match transport {
            Transport::Udp => inner.udp_max_datagram,
            Transport::Exon => crate::exon::EXON_MAX_MESSAGE.min(inner.core.max_frame_size),
            _ => inner.core.max_frame_size,
        };
        let frames = wire::encode_batch(&batch, limit, transport)?;
        // The transports count frames as they take them; a frame's further
        // messages are counted here, so that the counts are of messages.
        if let Some(c) = counters.transport(transport) {
            c.add_messages_sent(batch.len() - frames.len());
        }
        if inner.core.rules_on.load(Ordering::Relaxed) {
            for _ in frames.len()..batch.len() {
                inner.core.rule_event(base, crate::rules::NodeEvent::Sent);
            }
        }
        let (notifiers, note) = if notify {
            let (members, note) = Notifier::group(confirms, frames.len());
            (members, Some(note))
        } else {
            (Vec::new(), None)
        };
        let mut notifiers = notifiers.into_iter();
        let run = frames
            .into_iter()
            .map(|frame| (Prepared::Wire { transport, base, to, frame }, notifiers.next().unwrap_or_else(Notifier::none)))
            .collect();
        self.dispatch(run, Lane::Default).await?;
        Ok(note)
    }

    /// Check `msg` and encode it for its transport, or keep it whole for
    /// a destination on this host.
    fn prepare(&self, msg: Message<H>) -> Result<Prepared<H>, SendError> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        let transport = msg.header().transport();
        if transport == Transport::Data {
            return Err(SendError::UnresolvedData);
        }
        let dst = msg.header().destination().clone();
        if self.is_local(&dst) {
            return Ok(Prepared::Local(msg));
        }
        if !inner.transports.contains(&transport) {
            return Err(SendError::TransportDisabled(transport));
        }
        let base = dst.as_socket();
        let to = dst.transport_addr(transport).ok_or(SendError::NoTransportPort(base, transport))?;
        let (header, kind, body) = msg.into_wire_parts()?;
        let frame = wire::encode(&header, kind, &body)?;
        if transport == Transport::Udp && frame.frame_len() > inner.udp_max_datagram {
            return Err(SendError::TooLarge { transport, size: frame.frame_len(), max: inner.udp_max_datagram });
        }
        if transport == Transport::Exon {
            crate::exon::check_size(&frame)?;
        }
        Ok(Prepared::Wire { transport, base, to, frame })
    }

    /// Hand prepared messages to their transport: one message, or a run
    /// of messages to one destination over one transport with channels
    /// or Exon ([`Prepared::group`]).
    async fn dispatch(&self, mut run: Vec<(Prepared<H>, Notifier)>, lane: Lane) -> Result<(), SendError> {
        let inner = &self.inner;
        let Some((first, _)) = run.first() else { return Ok(()) };
        let (transport, base, to) = match first {
            Prepared::Local(_) => {
                let counters = &inner.core.counters;
                for (p, notifier) in run {
                    let Prepared::Local(msg) = p else { continue };
                    // Reflected in-process (seed 000 §III-B): no serialization.
                    match inner.core.inbox.deliver(Received::Message(msg), counters).await {
                        Ok(()) => {
                            bump(&counters.local_deliveries);
                            notifier.delivered();
                        }
                        Err(FailReason::UnknownVnode(v)) => return Err(SendError::UnknownVnode(v)),
                        Err(_) => return Err(SendError::Closed),
                    }
                }
                return Ok(());
            }
            Prepared::Wire { transport, base, to, .. } => (*transport, *base, *to),
        };
        for _ in 0..run.len() {
            inner.core.rule_event(base, crate::rules::NodeEvent::Sent);
        }
        let outgoing = |run: Vec<(Prepared<H>, Notifier)>| -> Vec<Outgoing> {
            run.into_iter()
                .filter_map(|(p, notifier)| match p {
                    Prepared::Wire { frame, .. } => Some(Outgoing { frame, notifier }),
                    Prepared::Local(_) => None,
                })
                .collect()
        };
        match transport {
            Transport::Udp => {
                let udp = inner.udp.as_ref().ok_or(SendError::TransportDisabled(transport))?;
                for out in outgoing(std::mem::take(&mut run)) {
                    let mut notifier = out.notifier;
                    match udp.send(&inner.core, &out.frame.frame(), to).await {
                        Ok(()) => notifier.sent(),
                        Err(r) => {
                            bump(&inner.core.counters.messages_failed);
                            notifier.failed(r);
                        }
                    }
                }
                Ok(())
            }
            Transport::Tcp => {
                let core = inner.core.clone();
                let lowat = inner.tcp_notsent_lowat;
                let tls = inner.tls.clone();
                let outs = outgoing(run);
                Channels::send(&inner.env, (transport, to, lane), outs, move || crate::tcp::connect(core, to, lowat, tls)).await;
                Ok(())
            }
            Transport::Braid => {
                let core = inner.core.clone();
                let endpoint = inner.braid.clone().ok_or(SendError::TransportDisabled(transport))?;
                let with = if lane == Lane::Bulk { inner.bulk_braid.clone() } else { None };
                let outs = outgoing(run);
                Channels::send(&inner.env, (transport, to, lane), outs, move || crate::braid_link::connect(core, endpoint, base, to, with))
                    .await;
                Ok(())
            }
            Transport::Exon => {
                let exon = inner.exon.as_ref().ok_or(SendError::TransportDisabled(transport))?;
                exon.send_many(&inner.core, outgoing(run), to).await
            }
            Transport::Data => Err(SendError::TransportDisabled(transport)),
        }
    }

    /// The next message for the node itself (not for a virtual node);
    /// `None` once the node is closed and its queue empty.
    pub async fn recv(&self) -> Option<Message<H>> {
        let mut rx = self.inner.main_rx.lock().await;
        let mut shutdown = self.inner.core.shutdown.clone();
        rx.recv(&mut shutdown).await
    }

    /// Wait for the next message for the node itself, then append it and
    /// whatever else is queued, up to `max` in all, to `out`: [`Node::recv`]
    /// for a receiver that keeps up with many small messages (one lock of
    /// the queue per run, issue 23 item 3). A received batch is split into
    /// its messages (what does not fit `max` waits for the next call).
    /// Returns how many were appended: 0 only once the node is closed and
    /// its queue empty (or `max` is 0).
    pub async fn recv_many(&self, out: &mut Vec<Message<H>>, max: usize) -> usize {
        let mut rx = self.inner.main_rx.lock().await;
        let mut shutdown = self.inner.core.shutdown.clone();
        rx.recv_many(&mut shutdown, out, max).await
    }

    /// The next batch for the node itself: a batch as it was sent (or
    /// what [`Node::recv`] left of one), a message sent alone as a batch
    /// of one. `None` once the node is closed and its queue empty. Batches
    /// and single messages come out in the order they arrived, whichever
    /// of `recv`, `recv_many` and `recv_batch` reads them.
    ///
    /// ```no_run
    /// # async fn f(node: braid_node::Node<braid_node::BasicHeader>) {
    /// while let Some(batch) = node.recv_batch().await {
    ///     for body in batch.iter() {
    ///         println!("{} bytes from {:?}", body.len(), batch.header().src);
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn recv_batch(&self) -> Option<MessageBatch<H>> {
        let mut rx = self.inner.main_rx.lock().await;
        let mut shutdown = self.inner.core.shutdown.clone();
        rx.recv_batch(&mut shutdown, &self.inner.core.counters).await
    }

    /// Register virtual node `id`: messages whose destination names it are
    /// queued for the returned handle.
    pub fn vnode(&self, id: VnodeId) -> Result<Vnode<H>, NodeError> {
        let rx = self.inner.core.inbox.register(id).ok_or(NodeError::VnodeTaken(id))?;
        Ok(Vnode { node: self.clone(), id, rx: tokio::sync::Mutex::new(Receiver::new(rx)) })
    }

    /// Whether virtual node `id` is registered here.
    pub fn has_vnode(&self, id: VnodeId) -> bool {
        self.inner.core.inbox.has_vnode(id)
    }

    /// The node's counters.
    pub fn stats(&self) -> NodeStats {
        self.inner.core.counters.snapshot()
    }

    /// Channels open (or opening) now.
    pub fn open_channels(&self) -> usize {
        self.inner.env.channels.len()
    }

    /// Close this node's channels to the node at `dst` (its base address)
    /// over `transport` (TCP or Braid; the others keep no channels): what
    /// they hold is sent first, then each connection closes gracefully, as
    /// after an idle timeout, without waiting for one. A later message to
    /// `dst` opens a new channel. Returns how many channels were closed
    /// (one per lane in use).
    ///
    /// ```no_run
    /// # async fn f(node: braid_node::Node<braid_node::BasicHeader>, peer: std::net::SocketAddr) {
    /// let closed = node.close_channels_to(peer, braid_node::Transport::Braid);
    /// assert!(closed <= 2);
    /// # }
    /// ```
    pub fn close_channels_to(&self, dst: SocketAddr, transport: Transport) -> usize {
        let Some(to) = with_port(dst, dst.port(), transport) else { return 0 };
        let closed = self.inner.env.channels.close_to(transport, to);
        self.inner.core.counters.channels_closed.fetch_add(closed as u64, Ordering::Relaxed);
        closed
    }

    /// Stop: refuse new messages, send what the channels still hold and
    /// close them gracefully (waiting at most `NodeConfig::connect_timeout`),
    /// stop listening. Messages already received can still be read.
    pub async fn close(&self) {
        let inner = &self.inner;
        inner.stop();
        let tasks = inner.env.channels.take_tasks();
        let _ = tokio::time::timeout(inner.close_wait, async {
            for t in tasks {
                let _ = t.await;
            }
        })
        .await;
        // The listeners stop at the shutdown signal; waiting for them
        // releases their sockets, so the ports can be bound again.
        for l in inner.take_listeners() {
            let _ = l.await;
        }
        if let Some(e) = &inner.braid {
            e.close();
            let _ = tokio::time::timeout(inner.close_wait, e.wait_idle()).await;
        }
        if let Some(e) = &inner.exon {
            e.close().await;
        }
    }
}

/// Adaptation: the actuators (see [`crate::adapt`]) and the rule runtime
/// (see [`crate::rules`]). Destinations are named by their node's base
/// address (what [`Address::as_socket`] gives).
impl<H: Header> Node<H> {
    /// Send every later message to `dst` over `transport`, whatever its
    /// header asks for (the header is rewritten, so the receiver sees the
    /// transport used); `None` goes back to the header's choice. Messages
    /// the DATA interceptor sends keep DATA's choice. Err if the node does
    /// not run `transport`, or it is `data`.
    pub fn set_transport_for(&self, dst: SocketAddr, transport: Option<Transport>) -> Result<(), crate::ActuatorError> {
        self.inner.core.actuators.set_transport(dst, transport, &self.inner.transports)
    }

    /// The transport chosen for `dst`, if one was.
    pub fn transport_for(&self, dst: SocketAddr) -> Option<Transport> {
        self.inner.core.actuators.transport_for(dst)
    }

    /// Switch the congestion controller of the Braid connections to `dst`
    /// live (the new one continues from the old one's window and RTT
    /// state), and of those opened to it later. Returns how many live
    /// connections were switched.
    pub fn set_congestion_control(&self, dst: SocketAddr, cc: braid_net::CcAlgorithm) -> Result<usize, crate::ActuatorError> {
        self.inner.core.actuators.set_congestion_control(dst, cc)
    }

    /// Set the priority (0 to 100; 0 = LEDBAT, less than best effort, p > 0
    /// = p TCP flows' share) of the Braid connections to `dst`, switching
    /// them to the priority controller first if they run another. Returns
    /// how many live connections were changed.
    pub fn set_priority(&self, dst: SocketAddr, priority: f64) -> Result<usize, crate::ActuatorError> {
        self.inner.core.actuators.set_priority(dst, priority)
    }

    /// Schedule the Braid connections to `dst` with the shipped ProgMP
    /// scheduler `name` (`min_rtt`, `redundant`, ...).
    pub fn set_scheduler(&self, dst: SocketAddr, name: &str) -> Result<usize, crate::ActuatorError> {
        self.inner.core.actuators.set_scheduler(dst, name)
    }

    /// Set scheduler register `R{register}` (1 to 6) of the Braid
    /// connections to `dst`.
    pub fn set_register(&self, dst: SocketAddr, register: u8, value: i64) -> Result<usize, crate::ActuatorError> {
        self.inner.core.actuators.set_register(dst, register, value)
    }

    /// What was set for the Braid connections to `dst`.
    pub fn braid_settings(&self, dst: SocketAddr) -> crate::BraidSettings {
        self.inner.core.actuators.braid_settings(dst)
    }

    /// The congestion controller each live Braid connection to `dst` runs
    /// now, with its parameters.
    pub fn braid_congestion(&self, dst: SocketAddr) -> Vec<braid_net::CongestionParameters> {
        self.inner.core.actuators.connections(dst).iter().filter_map(|c| c.congestion_parameters().ok()).collect()
    }

    /// Run the rule set `source` (braid-rules syntax, checked against
    /// [`crate::rules::vocabulary`] of this node's transports), replacing
    /// any installed one. The rules run per destination until
    /// [`Node::clear_rules`] or the node closes.
    pub fn set_rules_source(&self, source: &str, config: crate::RulesConfig) -> Result<(), crate::RulesError> {
        let rules = braid_rules::compile(source, &crate::rules::vocabulary(&self.inner.transports))?;
        self.set_rules(&rules, config)
    }

    /// Run the parsed rule set `rules` (see [`Node::set_rules_source`]).
    pub fn set_rules(&self, rules: &braid_rules::RuleSet, config: crate::RulesConfig) -> Result<(), crate::RulesError> {
        let runtime = crate::rules::Runtime::new(rules, &self.inner.transports, config)?;
        let core = &self.inner.core;
        let generation = core.rules_generation.fetch_add(1, Ordering::AcqRel) + 1;
        *core.rules.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
        core.rules_on.store(true, Ordering::Release);
        tokio::spawn(rule_timer(Arc::downgrade(core), generation));
        Ok(())
    }

    /// Stop running rules (what they set stays set).
    pub fn clear_rules(&self) {
        let core = &self.inner.core;
        core.rules_generation.fetch_add(1, Ordering::AcqRel);
        core.rules_on.store(false, Ordering::Release);
        *core.rules.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Sample and evaluate the rules of every destination now (the timer
    /// does this every [`crate::RulesConfig::interval`]); returns how many
    /// actions were applied. Zero without rules.
    pub fn evaluate_rules(&self) -> usize {
        let core = &self.inner.core;
        match core.rules.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(rt) => rt.tick(&core.actuators),
            None => 0,
        }
    }

    /// The rule runtime's counters (zeros without rules).
    pub fn rule_stats(&self) -> crate::RuleStats {
        self.inner.core.rules.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| r.stats()).unwrap_or_default()
    }

    /// The actions the rules applied, oldest first (the last 4096).
    pub fn rule_log(&self) -> Vec<crate::AppliedAction> {
        self.inner.core.rules.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| r.log().to_vec()).unwrap_or_default()
    }
}

/// Evaluates the rules of generation `generation` on their timer until
/// they are replaced or the node goes. Holds the core weakly: the timer
/// never keeps a node alive.
async fn rule_timer<H: Header>(core: std::sync::Weak<Core<H>>, generation: u64) {
    let mut shutdown = match core.upgrade() {
        Some(c) => c.shutdown.clone(),
        None => return,
    };
    loop {
        let wake = {
            let Some(c) = core.upgrade() else { return };
            if c.rules_generation.load(Ordering::Acquire) != generation {
                return;
            }
            let guard = c.rules.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                // At least 1 ms apart, so a window boundary already passed
                // cannot spin the loop.
                Some(rt) => rt.next_wake().max(std::time::Instant::now() + std::time::Duration::from_millis(1)),
                None => return,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = stopped(&mut shutdown) => return,
        }
        let Some(c) = core.upgrade() else { return };
        if c.rules_generation.load(Ordering::Acquire) != generation {
            return;
        }
        let mut guard = c.rules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rt) = guard.as_mut() {
            rt.tick(&c.actuators);
        }
    }
}

/// A message checked and made ready for its transport ([`Node::prepare`]).
enum Prepared<H> {
    /// For this host: delivered in-process, unserialized.
    Local(Message<H>),
    /// Encoded for `transport` to `to`, the transport's address of the
    /// node at `base`.
    Wire { transport: Transport, base: SocketAddr, to: SocketAddr, frame: wire::Encoded },
}

impl<H> Prepared<H> {
    /// What consecutive messages must share to be handed over together:
    /// a transport that takes runs (TCP, Braid, Exon) and the address;
    /// `None` for a message that goes alone.
    fn group(&self) -> Option<(Transport, SocketAddr)> {
        match self {
            Prepared::Wire { transport: t @ (Transport::Tcp | Transport::Braid | Transport::Exon), to, .. } => Some((*t, *to)),
            _ => None,
        }
    }
}

/// A virtual node: its own receive queue on a shared node. Dropping it
/// unregisters it (messages for it are then dropped and counted).
pub struct Vnode<H: Header> {
    node: Node<H>,
    id: VnodeId,
    rx: tokio::sync::Mutex<Receiver<H>>,
}

impl<H: Header> Vnode<H> {
    /// Its id.
    pub fn id(&self) -> VnodeId {
        self.id
    }

    /// The node it lives on.
    pub fn node(&self) -> &Node<H> {
        &self.node
    }

    /// The next message for this virtual node; `None` once the node is
    /// closed and the queue empty.
    pub async fn recv(&self) -> Option<Message<H>> {
        let mut rx = self.rx.lock().await;
        let mut shutdown = self.node.inner.core.shutdown.clone();
        rx.recv(&mut shutdown).await
    }

    /// [`Node::recv_many`] for this virtual node.
    pub async fn recv_many(&self, out: &mut Vec<Message<H>>, max: usize) -> usize {
        let mut rx = self.rx.lock().await;
        let mut shutdown = self.node.inner.core.shutdown.clone();
        rx.recv_many(&mut shutdown, out, max).await
    }

    /// [`Node::recv_batch`] for this virtual node.
    pub async fn recv_batch(&self) -> Option<MessageBatch<H>> {
        let mut rx = self.rx.lock().await;
        let mut shutdown = self.node.inner.core.shutdown.clone();
        rx.recv_batch(&mut shutdown, &self.node.inner.core.counters).await
    }

    /// Send a batch through the node (see [`Node::send_batch`]).
    pub async fn send_batch(&self, batch: MessageBatch<H>) -> Result<(), SendError> {
        self.node.send_batch(batch).await
    }

    /// Send a batch through the node with one notification for it (see
    /// [`Node::send_batch_notify`]).
    pub async fn send_batch_notify(&self, batch: MessageBatch<H>) -> Result<Notify, SendError> {
        self.node.send_batch_notify(batch).await
    }

    /// Send through the node (see [`Node::send`]).
    pub async fn send(&self, msg: Message<H>) -> Result<(), SendError> {
        self.node.send(msg).await
    }

    /// Send through the node with notifications.
    pub async fn send_notify(&self, msg: Message<H>) -> Result<Notify, SendError> {
        self.node.send_notify(msg).await
    }
}

impl<H: Header> Drop for Vnode<H> {
    fn drop(&mut self) {
        self.node.inner.core.inbox.unregister(self.id);
    }
}

/// Resolves once the node is shutting down.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`: drop it here.
    let _ = shutdown.wait_for(|s| *s).await.is_ok();
}
