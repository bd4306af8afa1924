//! TLS 1.3 byte streams for the transfer engine (issue 17, item 4 and the
//! errata's "file transfer over kernel TCP is TLS 1.3 too"): [`TlsConnector`]
//! and [`TlsAcceptor`] are [`TcpConnector`](crate::transport::TcpConnector)
//! and [`TcpAcceptor`](crate::transport::TcpAcceptor) with a mutually
//! authenticated TLS handshake (`braid-tls`: Ed25519 raw public keys judged
//! by known hosts) on every stream, control and data alike.
//!
//! Each stream keeps its kernel TCP loss probe (`TCP_INFO` on the socket
//! under the TLS layer), so the network stage's utility (seed 002 eq. 2)
//! sees the same retransmission counters as over plain TCP.
//!
//! The acceptor runs handshakes concurrently in the background and yields
//! only streams whose peer is trusted: a stranger, a wrong key, garbage or a
//! silent client costs one bounded handshake slot until it fails or times
//! out, is counted in [`TlsAcceptor::refusals`], and never ends the receiver
//! (`receive::serve` stops on the first error an acceptor returns). Only a
//! failure of the listening socket itself is returned, as `TcpAcceptor` does.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use braid_identity::{Peer, PublicKey};
use braid_tls::{TlsError, TlsSettings};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::congestion::TcpCongestion;
use crate::transport::{set_stream_options, tcp_socket_hooks, Acceptor, BoxFuture, Connection, Connector, LossProbe, ReceiveBatching, StreamRole};

/// What a handshake proved about the receiver: its key and the cipher
/// suite the stream runs (for a summary's `peer_key` and `cipher`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The receiver's public key, proven by its handshake signature.
    pub key: PublicKey,
    /// The negotiated TLS 1.3 cipher suite, e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher: Option<&'static str>,
}

/// The receiver as the first stream's handshake proved it; shared by the
/// connector's clones (see [`TlsConnector::proven`]).
#[derive(Debug, Clone, Default)]
pub struct ProvenReceiver(Arc<Mutex<Option<Proven>>>);

impl ProvenReceiver {
    /// `None` until a stream has connected.
    pub fn get(&self) -> Option<Proven> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn record(&self, proven: Proven) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(proven);
    }
}

/// TLS 1.3 over kernel TCP to `addr`, authenticating the receiver with
/// `settings` (its key must be trusted for `addr`, or for `name` if given).
#[derive(Debug, Clone)]
pub struct TlsConnector {
    /// The receiver's address.
    pub addr: SocketAddr,
    /// Our identity and trust store.
    pub settings: TlsSettings,
    /// The name the receiver was dialled by (`host` of `host:port`), if any:
    /// known-hosts lines for the name match too, and TOFU records the name.
    pub name: Option<String>,
    /// The streams' congestion control.
    pub congestion: TcpCongestion,
    proven: ProvenReceiver,
}

impl TlsConnector {
    /// A connector to `addr` known by address only.
    pub fn new(addr: SocketAddr, settings: TlsSettings) -> Self {
        TlsConnector { addr, settings, name: None, congestion: TcpCongestion::default(), proven: ProvenReceiver::default() }
    }

    /// What the first stream's handshake proved about the receiver (a
    /// handle that sees streams connected later, by this connector or its
    /// clones).
    pub fn proven(&self) -> ProvenReceiver {
        self.proven.clone()
    }

    /// The same connector, the receiver also known by `name`.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    fn peer(&self) -> io::Result<Peer> {
        match &self.name {
            None => Ok(Peer::addr(self.addr)),
            Some(name) => Peer::named_at(name, self.addr).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("receiver name {name:?}: expected letters, digits, `.`, `-`, `_` (at most 253)"),
                )
            }),
        }
    }
}

impl Connector for TlsConnector {
    fn connect(&self, _role: StreamRole) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            let peer = self.peer()?;
            let tcp = TcpStream::connect(self.addr).await?;
            self.congestion.apply(&tcp)?;
            set_stream_options(&tcp)?;
            let (loss, batching) = hooks(&tcp);
            let (stream, key) = self.settings.connect_peer(tcp, peer).await.map_err(TlsError::into_io)?;
            let cipher = stream.get_ref().1.negotiated_cipher_suite().and_then(|s| s.suite().as_str());
            self.proven.record(Proven { key, cipher });
            Ok(Connection { stream: Box::new(stream), loss, batching })
        })
    }
}

/// Handshakes the acceptor runs at once. Each holds a socket and rustls's
/// buffers (tens of KiB) for at most the handshake timeout; beyond this many,
/// new connections wait in the kernel's backlog, so a flood of silent clients
/// costs bounded memory. The engine opens a few dozen streams per transfer at
/// most, far below it.
pub const MAX_PENDING_HANDSHAKES: usize = 128;

/// Streams handshaken but not yet taken by the receiver.
const READY_QUEUE: usize = 64;

/// How many refusal messages are kept for [`TlsAcceptor::recent_refusals`].
const RECENT_REFUSALS: usize = 32;

/// Called with each failed handshake (to log it as it happens).
pub type RefusalHook = Arc<dyn Fn(&TlsError) + Send + Sync>;

#[derive(Default)]
struct Refusals {
    count: u64,
    recent: VecDeque<String>,
    hook: Option<RefusalHook>,
}

/// A TCP listener whose streams are TLS 1.3, each peer authenticated by
/// `settings` (its key trusted for its address).
pub struct TlsAcceptor {
    local: SocketAddr,
    settings: TlsSettings,
    ready: tokio::sync::Mutex<mpsc::Receiver<io::Result<Connection>>>,
    refusals: Arc<Mutex<Refusals>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor").field("local", &self.local).field("refusals", &self.refusals()).finish()
    }
}

impl TlsAcceptor {
    /// Listens on `addr` (must be called within a tokio runtime: the
    /// handshakes run in background tasks, stopped when this is dropped).
    pub async fn bind(addr: SocketAddr, settings: TlsSettings) -> io::Result<Self> {
        Self::from_listener(TcpListener::bind(addr).await?, settings)
    }

    /// Serves TLS on an already bound listener.
    pub fn from_listener(listener: TcpListener, settings: TlsSettings) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(READY_QUEUE);
        let refusals = Arc::new(Mutex::new(Refusals::default()));
        let task = tokio::spawn(accept_loop(listener, settings.clone(), tx, Arc::clone(&refusals)));
        Ok(TlsAcceptor { local, settings, ready: tokio::sync::Mutex::new(rx), refusals, task })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// The settings handshakes run with.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// Handshakes that failed so far (untrusted keys, clients without a key,
    /// garbage, timeouts).
    pub fn refusals(&self) -> u64 {
        self.lock().count
    }

    /// The messages of the most recent failed handshakes (up to 32, oldest
    /// first); an untrusted client's names its address and key.
    pub fn recent_refusals(&self) -> Vec<String> {
        self.lock().recent.iter().cloned().collect()
    }

    /// Calls `hook` with every later failed handshake, as it fails.
    pub fn set_refusal_hook(&self, hook: RefusalHook) {
        self.lock().hook = Some(hook);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Refusals> {
        self.refusals.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for TlsAcceptor {
    fn drop(&mut self) {
        // Dropping the loop drops its JoinSet, which aborts the pending handshakes.
        self.task.abort();
    }
}

impl Acceptor for TlsAcceptor {
    fn accept(&self) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            // Cancel-safe: a dropped `accept` leaves queued streams in the channel.
            let mut ready = self.ready.lock().await;
            ready.recv().await.unwrap_or_else(|| Err(io::Error::other("the TLS accept loop stopped")))
        })
    }
}

/// Accepts TCP connections and runs their handshakes, at most
/// [`MAX_PENDING_HANDSHAKES`] at once; trusted streams go to `ready`.
async fn accept_loop(
    listener: TcpListener,
    settings: TlsSettings,
    ready: mpsc::Sender<io::Result<Connection>>,
    refusals: Arc<Mutex<Refusals>>,
) {
    let slots = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    let mut handshakes = JoinSet::new();
    loop {
        while handshakes.try_join_next().is_some() {}
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // The listening socket failed: report it as TcpAcceptor would, and stop.
                let _ = ready.send(Err(e)).await;
                return;
            }
        };
        let (settings, ready, refusals) = (settings.clone(), ready.clone(), Arc::clone(&refusals));
        handshakes.spawn(async move {
            let _slot = slot;
            match handshake(&settings, tcp).await {
                Ok(connection) => {
                    let _ = ready.send(Ok(connection)).await;
                }
                Err(e) => record(&refusals, &e),
            }
        });
    }
}

async fn handshake(settings: &TlsSettings, tcp: TcpStream) -> Result<Connection, TlsError> {
    let remote = tcp.peer_addr().map_err(|source| TlsError::Io { peer: unnamed(), source })?;
    set_stream_options(&tcp).map_err(|source| TlsError::Io { peer: Peer::addr(remote), source })?;
    let (loss, batching) = hooks(&tcp);
    let (stream, _key) = settings.accept_from(tcp, remote).await?;
    Ok(Connection { stream: Box::new(stream), loss, batching })
}

fn unnamed() -> Peer {
    Peer::addr(SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn record(refusals: &Mutex<Refusals>, error: &TlsError) {
    let hook = {
        let mut r = refusals.lock().unwrap_or_else(PoisonError::into_inner);
        r.count += 1;
        if r.recent.len() == RECENT_REFUSALS {
            r.recent.pop_front();
        }
        r.recent.push_back(error.to_string());
        r.hook.clone()
    };
    if let Some(hook) = hook {
        hook(error);
    }
}

/// The most a TLS stream holds between the socket and its reader (rustls 0.23): received
/// records not yet decrypted (one record of at most 18,437 bytes, or a handshake message of up
/// to 64 KiB), and decrypted plaintext (reads stop at 16 KiB; one more record may land on top).
/// Rounded up, so receive batching never waits for bytes already read off the socket.
const TLS_HELD_ABOVE: usize = 128 << 10;

/// The socket hooks under the TLS layer.
fn hooks(tcp: &TcpStream) -> (Option<Arc<dyn LossProbe>>, Option<ReceiveBatching>) {
    tcp_socket_hooks(tcp, TLS_HELD_ABOVE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings(me: &Identity, trusted: &Identity) -> TlsSettings {
        let hosts = KnownHosts::parse(&format!("* {}", trusted.public_key()), "test").unwrap();
        TlsSettings::new(me, Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts))).unwrap()
    }

    #[tokio::test]
    async fn streams_are_tls_and_keep_their_loss_probe() {
        let (a, b) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
        let acceptor = TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), settings(&b, &a)).await.unwrap();
        let connector = TlsConnector::new(acceptor.local_addr().unwrap(), settings(&a, &b));
        let (client, server) = tokio::join!(connector.connect(StreamRole::Data), acceptor.accept());
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        client.stream.write_all(&[7u8; 100_000]).await.unwrap();
        client.stream.flush().await.unwrap();
        let mut buf = vec![0u8; 100_000];
        server.stream.read_exact(&mut buf).await.unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        let counters = client.loss.as_ref().unwrap().counters().unwrap();
        // The TLS records and handshake are more segments than the payload alone would need.
        assert!(counters.sent >= 2, "{counters:?}");
        assert!(server.loss.as_ref().unwrap().counters().is_some());
    }

    #[tokio::test]
    async fn strangers_are_counted_and_do_not_end_the_acceptor() {
        let (a, b, stranger) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]), Identity::from_seed(&[3; 32]));
        let acceptor = TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), settings(&b, &a)).await.unwrap();
        let addr = acceptor.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = Arc::clone(&seen);
        acceptor.set_refusal_hook(Arc::new(move |e: &TlsError| seen2.lock().unwrap().push(e.to_string())));
        // A stranger's key, then plain garbage, then the trusted peer.
        let stranger_conn = TlsConnector::new(addr, settings(&stranger, &b));
        let _ = stranger_conn.connect(StreamRole::Control).await;
        let mut raw = TcpStream::connect(addr).await.unwrap();
        raw.write_all(b"not tls at all, not even close\r\n\r\n").await.unwrap();
        let trusted = TlsConnector::new(addr, settings(&a, &b));
        let (client, server) = tokio::join!(trusted.connect(StreamRole::Control), acceptor.accept());
        client.unwrap();
        server.unwrap();
        // Both failures are recorded (the garbage one once the server reads it).
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while acceptor.refusals() < 2 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        let recent = acceptor.recent_refusals();
        assert!(recent.iter().any(|m| m.contains(&stranger.public_key().to_string())), "{recent:?}");
        assert_eq!(seen.lock().unwrap().len() as u64, acceptor.refusals());
    }
}
