//! One timed run of a workload over one peer: Braid (braid-net), kernel TCP
//! (tokio) or QUIC (quinn), the receiver at one end and the sender at the
//! other ([`Ends`]: both on 127.0.0.1 in this process, or hosts of an
//! emulator testbed).
//!
//! Every run measures the same interval: from just before the client starts
//! connecting until the receiver holds every byte. Listening sockets (and
//! the client's socket) are opened before the clock starts; handshakes are
//! inside the interval. Both ends stay open until the sender has taken its
//! counters, then close.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid::framing::{FrameReader, FrameWriter};
use braid::stats::ConnectionStats;
use braid::{Endpoint, EndpointConfig};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::place::Ends;
use super::quic::{QuicConfigs, SERVER_NAME};
use super::Peer;
use crate::template::{ResultExt, TemplateError};

/// What is sent.
#[derive(Debug, Clone)]
pub enum Workload {
    /// `bytes` in application chunks of `chunk` bytes (messages for Braid,
    /// writes for the byte streams).
    Bulk {
        /// Payload bytes in all.
        bytes: u64,
        /// Bytes per chunk.
        chunk: usize,
        /// One chunk's content (the last chunk is a prefix of it).
        payload: Bytes,
    },
    /// `count` messages of `payload.len()` bytes, pipelined; on byte
    /// streams each is a length-prefixed frame.
    Messages {
        /// Messages in all.
        count: u64,
        /// Every message's content.
        payload: Bytes,
    },
}

impl Workload {
    /// Application payload bytes the receiver must get.
    pub fn total_bytes(&self) -> u64 {
        match self {
            Workload::Bulk { bytes, .. } => *bytes,
            Workload::Messages { count, payload } => count * payload.len() as u64,
        }
    }

    /// The pieces to send, in order: chunks or messages.
    fn pieces(&self) -> impl Iterator<Item = Bytes> + '_ {
        let (n, last) = match self {
            Workload::Bulk { bytes, chunk, .. } => {
                let c = *chunk as u64;
                (bytes.div_ceil(c), (bytes - bytes.saturating_sub(1) / c * c) as usize)
            }
            Workload::Messages { count, payload } => (*count, payload.len()),
        };
        let payload = match self {
            Workload::Bulk { payload, .. } | Workload::Messages { payload, .. } => payload,
        };
        (0..n).map(move |i| if i + 1 == n { payload.slice(..last) } else { payload.clone() })
    }

    fn is_messages(&self) -> bool {
        matches!(self, Workload::Messages { .. })
    }
}

/// Counts received bytes into a shared counter (read for progress) without
/// touching it on every message.
struct Counter {
    got: u64,
    shown: u64,
    shared: Arc<AtomicU64>,
}

impl Counter {
    fn new(shared: Arc<AtomicU64>) -> Self {
        shared.store(0, Ordering::Relaxed);
        Counter { got: 0, shown: 0, shared }
    }

    fn add(&mut self, n: usize) {
        self.got += n as u64;
        if self.got - self.shown >= 1 << 20 {
            self.shown = self.got;
            self.shared.store(self.got, Ordering::Relaxed);
        }
    }

    fn finish(&self) {
        self.shared.store(self.got, Ordering::Relaxed);
    }
}

/// Result of one run.
#[derive(Debug, Clone, Copy)]
pub struct RunResult {
    /// From just before connecting to the receiver holding every byte.
    pub elapsed: Duration,
    /// Braid's sender-side counters.
    pub braid_stats: Option<ConnectionStats>,
    /// quinn's path MTU at the end of the run (quinn only).
    pub quinn_mtu: Option<u16>,
}

/// What each peer's ends need.
#[derive(Clone)]
pub struct PeerConfigs {
    /// Braid's endpoint configuration (both ends).
    pub braid: EndpointConfig,
    /// The server's and the client's security when Braid is encrypted
    /// (each a fresh identity pinned to the other's).
    pub braid_security: Option<(braid_net::Security, braid_net::Security)>,
    /// quinn's, for the quinn peer.
    pub quic: Option<QuicConfigs>,
    /// Kernel TCP's congestion control on the sender (`TCP_CONGESTION`);
    /// `None`: the kernel's default.
    pub tcp_cc: Option<String>,
}

/// The channels joining the two ends of a run: the receiver's address to
/// the sender, the instant the receiver had every byte back to the sender,
/// and the sender's "done, close" to the receiver.
struct ServerLinks {
    addr: oneshot::Sender<SocketAddr>,
    end: oneshot::Sender<Instant>,
    release: oneshot::Receiver<()>,
}

/// One run of `w` over `peer` between `ends`; `received` counts the bytes
/// the receiver holds, for progress.
pub async fn run(
    peer: Peer,
    w: Arc<Workload>,
    cfgs: &PeerConfigs,
    ends: &Ends<'_>,
    received: Arc<AtomicU64>,
) -> Result<RunResult, TemplateError> {
    let (addr_tx, addr_rx) = oneshot::channel();
    let (end_tx, end_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    let links = ServerLinks { addr: addr_tx, end: end_tx, release: release_rx };
    let total = w.total_bytes();
    let (server_ip, client_ip) = (ends.server.ip, ends.client.ip);
    let server = match peer {
        Peer::Braid => {
            let mut cfg = EndpointConfig { accept_incoming: true, ..cfgs.braid.clone() };
            if let Some((server, _)) = &cfgs.braid_security {
                cfg.security = server.clone();
            }
            ends.server.spawn(move || braid_server(server_ip, cfg, total, received, links))?
        }
        Peer::Tcp => {
            let messages = w.is_messages();
            ends.server.spawn(move || tcp_server(server_ip, total, messages, received, links))?
        }
        Peer::Quinn => {
            let cfg = cfgs.quic.clone().context("quinn run without a quinn configuration")?;
            let messages = w.is_messages();
            ends.server.spawn(move || quinn_server(server_ip, cfg.server, total, messages, received, links))?
        }
    };
    let Ok(addr) = addr_rx.await else {
        return Err(server.wait().await.err().unwrap_or_else(|| TemplateError::failed("the receiver did not listen")));
    };
    let client = match peer {
        Peer::Braid => {
            let mut cfg = EndpointConfig { accept_incoming: false, ..cfgs.braid.clone() };
            if let Some((_, client)) = &cfgs.braid_security {
                cfg.security = client.clone();
            }
            ends.client.spawn(move || braid_client(client_ip, cfg, w, addr, end_rx))?
        }
        Peer::Tcp => {
            let cc = cfgs.tcp_cc.clone();
            ends.client.spawn(move || tcp_client(w, addr, cc, end_rx))?
        }
        Peer::Quinn => {
            let cfg = cfgs.quic.clone().context("quinn run without a quinn configuration")?;
            ends.client.spawn(move || quinn_client(client_ip, cfg.client, w, addr, end_rx))?
        }
    };
    match client.wait().await {
        Ok(Sent { start, end, braid_stats, quinn_mtu }) => {
            let _ = release_tx.send(());
            server.wait().await?;
            Ok(RunResult { elapsed: end.saturating_duration_since(start), braid_stats, quinn_mtu })
        }
        Err(e) => {
            // The receiver's own error explains a sender that lost it.
            drop(release_tx);
            match tokio::time::timeout(Duration::from_secs(1), server.wait()).await {
                Ok(Err(server_error)) => Err(server_error),
                _ => Err(e),
            }
        }
    }
}

/// What the sending end reports.
struct Sent {
    start: Instant,
    end: Instant,
    braid_stats: Option<ConnectionStats>,
    quinn_mtu: Option<u16>,
}

fn receiver_gone(peer: &str) -> TemplateError {
    TemplateError::Failed(format!("{peer}: the receiver stopped before it had every byte"))
}

async fn braid_server(
    ip: std::net::IpAddr,
    cfg: EndpointConfig,
    total: u64,
    received: Arc<AtomicU64>,
    links: ServerLinks,
) -> Result<(), TemplateError> {
    let server = Endpoint::bind_with(SocketAddr::new(ip, 0), cfg).context("braid server socket")?;
    let _ = links.addr.send(server.local_addr());
    let conn = server.accept().await.context("braid server closed")?;
    let mut count = Counter::new(received);
    while count.got < total {
        let m = conn.recv_message().await.context("braid receive")?;
        count.add(m.len());
    }
    count.finish();
    let _ = links.end.send(Instant::now());
    let _ = links.release.await;
    Ok(())
}

async fn braid_client(
    ip: std::net::IpAddr,
    cfg: EndpointConfig,
    w: Arc<Workload>,
    addr: SocketAddr,
    end: oneshot::Receiver<Instant>,
) -> Result<Sent, TemplateError> {
    let client = Endpoint::bind_with(SocketAddr::new(ip, 0), cfg).context("braid client socket")?;
    let start = Instant::now();
    let conn = client.connect(addr).await.context("braid connect")?;
    for piece in w.pieces() {
        conn.send_message(piece).await.context("braid send")?;
    }
    let end = end.await.map_err(|_| receiver_gone("braid"))?;
    let stats = conn.stats();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
    client.close();
    Ok(Sent { start, end, braid_stats: Some(stats), quinn_mtu: None })
}

async fn tcp_server(
    ip: std::net::IpAddr,
    total: u64,
    messages: bool,
    received: Arc<AtomicU64>,
    links: ServerLinks,
) -> Result<(), TemplateError> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await.context("tcp listen")?;
    let _ = links.addr.send(listener.local_addr().context("tcp listen address")?);
    let (mut stream, _) = listener.accept().await.context("tcp accept")?;
    let mut count = Counter::new(received);
    if messages {
        let mut frames = FrameReader::new(&mut stream);
        while count.got < total {
            let m = frames.recv().await.context("tcp receive")?.context("tcp stream ended early")?;
            count.add(m.len());
        }
    } else {
        let mut buf = vec![0u8; 256 << 10];
        while count.got < total {
            let n = stream.read(&mut buf).await.context("tcp read")?;
            crate::ensure!(n > 0, "tcp stream ended early");
            count.add(n);
        }
    }
    count.finish();
    let _ = links.end.send(Instant::now());
    let _ = links.release.await;
    Ok(())
}

async fn tcp_client(
    w: Arc<Workload>,
    addr: SocketAddr,
    cc: Option<String>,
    end: oneshot::Receiver<Instant>,
) -> Result<Sent, TemplateError> {
    let start = Instant::now();
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .context("tcp socket")?;
    if let Some(cc) = &cc {
        crate::template::builtin::exon::tcp_run::set_congestion_control(&socket, cc)?;
    }
    let mut stream = socket.connect(addr).await.context("tcp connect")?;
    if w.is_messages() {
        let mut frames = FrameWriter::new(&mut stream);
        for piece in w.pieces() {
            frames.send(&piece).await.context("tcp send")?;
        }
        frames.flush().await.context("tcp flush")?;
    } else {
        for piece in w.pieces() {
            stream.write_all(&piece).await.context("tcp write")?;
        }
    }
    let end = end.await.map_err(|_| receiver_gone("tcp"))?;
    let _ = stream.shutdown().await;
    Ok(Sent { start, end, braid_stats: None, quinn_mtu: None })
}

async fn quinn_server(
    ip: std::net::IpAddr,
    cfg: quinn::ServerConfig,
    total: u64,
    messages: bool,
    received: Arc<AtomicU64>,
    links: ServerLinks,
) -> Result<(), TemplateError> {
    let server = quinn::Endpoint::server(cfg, SocketAddr::new(ip, 0)).context("quinn server socket")?;
    let _ = links.addr.send(server.local_addr().context("quinn server address")?);
    let incoming = server.accept().await.context("quinn server closed")?;
    let conn = incoming.await.context("quinn handshake")?;
    let mut stream = conn.accept_uni().await.context("quinn accept stream")?;
    let mut count = Counter::new(received);
    if messages {
        let mut frames = FrameReader::new(&mut stream);
        while count.got < total {
            let m = frames.recv().await.context("quinn receive")?.context("quinn stream ended early")?;
            count.add(m.len());
        }
    } else {
        while count.got < total {
            let chunk = stream.read_chunk(usize::MAX, true).await.context("quinn read")?;
            count.add(chunk.context("quinn stream ended early")?.bytes.len());
        }
    }
    count.finish();
    let _ = links.end.send(Instant::now());
    let _ = links.release.await;
    conn.close(0u32.into(), b"done");
    server.close(0u32.into(), b"done");
    Ok(())
}

async fn quinn_client(
    ip: std::net::IpAddr,
    cfg: quinn::ClientConfig,
    w: Arc<Workload>,
    addr: SocketAddr,
    end: oneshot::Receiver<Instant>,
) -> Result<Sent, TemplateError> {
    let mut client = quinn::Endpoint::client(SocketAddr::new(ip, 0)).context("quinn client socket")?;
    client.set_default_client_config(cfg);
    let start = Instant::now();
    let conn = client.connect(addr, SERVER_NAME).context("quinn connect")?.await.context("quinn connect")?;
    let mut stream = conn.open_uni().await.context("quinn open stream")?;
    if w.is_messages() {
        let mut frames = FrameWriter::new(&mut stream);
        for piece in w.pieces() {
            frames.send(&piece).await.context("quinn send")?;
        }
        frames.flush().await.context("quinn flush")?;
    } else {
        for piece in w.pieces() {
            stream.write_chunk(piece).await.context("quinn write")?;
        }
    }
    let _ = stream.finish();
    let end = end.await.map_err(|_| receiver_gone("quinn"))?;
    let quinn_mtu = Some(conn.stats().path.current_mtu);
    conn.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(2), client.wait_idle()).await;
    Ok(Sent { start, end, braid_stats: None, quinn_mtu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_add_up() {
        let payload = Bytes::from(vec![1u8; 10]);
        for bytes in [0u64, 1, 9, 10, 11, 95, 100] {
            let w = Workload::Bulk { bytes, chunk: 10, payload: payload.clone() };
            let sizes: Vec<usize> = w.pieces().map(|p| p.len()).collect();
            assert_eq!(sizes.iter().sum::<usize>() as u64, bytes, "{bytes}: {sizes:?}");
            assert!(sizes.iter().all(|&s| s > 0 && s <= 10));
        }
        let w = Workload::Messages { count: 3, payload: Bytes::from_static(b"abcd") };
        assert_eq!(w.pieces().count(), 3);
        assert_eq!(w.total_bytes(), 12);
    }
}
