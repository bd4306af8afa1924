//! Exon on a real UDP socket: a tokio driver task around the sans-IO
//! [`ExonNode`].
//!
//! Owns: the socket, the driver task, the mapping of protocol time to the
//! monotonic clock, the durable clock's fsyncs and the journal's group
//! commits (both off the driver task), and the async API:
//! [`ExonSocket::send`], [`ExonSocket::send_many`] and
//! [`ExonSocket::send_copies`] (wait while the
//! peer's window is full: backpressure; with a journal, return once the
//! messages are durable), [`ExonSocket::next_outcome`] and
//! [`ExonSocket::outcomes_many`] (one [`Outcome`] per [`MessageId`] once
//! acknowledged, or in doubt after a restart of a peer that keeps no
//! journal), [`ExonSocket::recv`] and [`ExonSocket::recv_many`].
//!
//! # Message rate
//!
//! Small messages cost system calls and wake-ups, not bytes. The driver
//! packs the messages queued by one wake-up into full datagrams (the node
//! puts many tokens, acknowledgements and control frames in each), sends
//! all datagrams for a peer with one segmented send (UDP GSO) and takes
//! in up to 32 datagrams, or GRO runs of them, per receive call
//! (`recvmmsg`), both through quinn-udp. Whatever a wake-up
//! delivers crosses to the application as one batch per channel, and
//! [`ExonSocket::send_many`] hands the driver a batch in one command,
//! which the node takes with one look-up of the peer
//! ([`ExonNode::send_batch`]); [`ExonSocket::send_copies`] copies a batch
//! into one buffer its messages share (no allocation per message).
//!
//! # Durability
//!
//! With [`SocketConfig::journal`] set, the node's sender and receiver
//! records live in a [`FileJournal`] next to the clock file (see
//! [`braid_exon::journal`]): every accepted message is delivered exactly
//! once even if either process crashes and restarts with the same files.
//! The driver commits everything one wake-up changed with one append and
//! one fsync, and lets out the frames, replies and messages that depend on
//! it only afterwards; it rewrites the journal as a checkpoint when it has
//! grown to twice the last checkpoint (and at least
//! [`SocketConfig::compact_bytes`]).
//! [`ExonSocket::durability`] counts what that costs where it is paid:
//! group commits (one fdatasync each) as they return, and the messages
//! that waited for them (the group commit rate, messages per fsync).
//!
//! # Security
//!
//! By default every datagram is sealed in an authenticated session
//! ([`braid_exon::secure`]): the socket has an [`Identity`] (its node ID is
//! derived from the public key, never chosen) and judges peers' keys with a
//! [`PeerVerifier`] (known hosts, trust on first use); see
//! [`ExonSecurity`]. The session layer's randomness is seeded from the OS
//! CSPRNG at every bind. [`ExonSecurity::InsecureNoAuth`] runs the bare
//! protocol, for benchmarks of it only.
//!
//! Must not depend on: protocol logic (all of it is in `braid-exon`),
//! `braid-net` (patterns only), the facade.
//!
//! ```no_run
//! # async fn demo() -> Result<(), braid_exon_net::Error> {
//! use braid_exon_net::{ExonSocket, SocketConfig, Outcome};
//!
//! // Fresh identities, any peer key accepted (the default security).
//! let a = ExonSocket::bind("127.0.0.1:0".parse().unwrap(), SocketConfig::default()).await?;
//! let b = ExonSocket::bind("127.0.0.1:0".parse().unwrap(), SocketConfig::default()).await?;
//! // Learn b's key at its address (judged by a's verifier), then send.
//! let b_id = a.connect(b.local_addr()).await?;
//! let id = a.send(b_id, bytes::Bytes::from_static(b"hi")).await?;
//! let (from, msg) = b.recv().await.unwrap();
//! assert_eq!((from, &msg[..]), (a.id(), &b"hi"[..]));
//! assert_eq!(a.next_outcome().await, Some((id, Outcome::Delivered)));
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use braid_core::Instant;
use braid_exon::clock::{ClockStore, ClockStoreError, FileClockStore, MemClockStore};
use braid_exon::journal::{FileJournal, JournalError, JournalStore, Record};
use braid_exon::wire::MAX_MESSAGE;
pub use braid_exon::{
    AcceptAnyKey, DiscoveryError, Identity, PeerVerifier, PublicKey, Security, SecurityStats,
};
use braid_exon::{
    Event, ExonNode, MessageId, NodeConfig, NodeId, NodeStats, RestoreError, SendError,
};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

mod durability;
mod udp;
pub use durability::DurabilityStats;
use udp::{Receiver, Udp};

/// Where the node clock is kept.
#[derive(Debug, Clone, Default)]
pub enum ClockFile {
    /// In memory: a restarted process starts from 0 and may reuse
    /// identifiers, so exactly-once does not survive a crash. For tests.
    #[default]
    Memory,
    /// In this file, fsynced before identifiers derived from it leave.
    Path(PathBuf),
}

/// How an [`ExonSocket`] authenticates.
#[derive(Clone, Default)]
// A configuration value made once per node: the identity inline is simpler
// than a box and costs nothing that matters.
#[allow(clippy::large_enum_variant)]
pub enum ExonSecurity {
    /// Authenticated sessions with a fresh identity made at bind (from the
    /// OS CSPRNG), accepting any peer's key: every datagram encrypted and
    /// authenticated, node IDs unforgeable, but peers not checked against
    /// known hosts. The default until a node's own identity is configured.
    #[default]
    EphemeralIdentity,
    /// Authenticated sessions with an Exon identity made at bind (from the
    /// OS CSPRNG) and endorsed by `node` (its signature over the Exon key,
    /// `braid_exon::Endorsement`): peers judge `node`'s key, as they do for
    /// the node's other transports, while every bind has an Exon ID of its
    /// own (processes sharing a key file stay distinct peers, and a
    /// restarted process is a new peer, not a resumed one). What a node
    /// with a key file uses.
    Endorsed {
        /// The node's long-term key pair (its key file).
        node: Identity,
        /// The trust decision for peers' (endorsing) keys.
        verifier: Arc<dyn PeerVerifier>,
    },
    /// Authenticated sessions with this identity, peers judged by
    /// `verifier` (e.g. over `braid_identity::TrustStore::authorize`).
    Authenticated {
        /// This node's key pair (its node ID is derived from it).
        identity: Identity,
        /// The trust decision for peers' keys.
        verifier: Arc<dyn PeerVerifier>,
    },
    /// INSECURE, NO AUTHENTICATION (`--insecure-no-auth`): the bare
    /// protocol, plaintext, node ID chosen here and forgeable by anyone.
    /// For benchmarks of the protocol alone.
    InsecureNoAuth {
        /// The ID this node claims.
        id: NodeId,
    },
}

impl ExonSecurity {
    /// True unless insecure.
    pub fn is_authenticated(&self) -> bool {
        !matches!(self, ExonSecurity::InsecureNoAuth { .. })
    }

    /// The protocol's security value (an ephemeral identity is made here).
    fn resolve(&self) -> Result<Security, Error> {
        Ok(match self {
            ExonSecurity::EphemeralIdentity => Security::authenticated(
                Identity::generate_os().map_err(|e| Error::Randomness(e.to_string()))?,
                Arc::new(AcceptAnyKey),
            ),
            ExonSecurity::Endorsed { node, verifier } => Security::endorsed(
                Identity::generate_os().map_err(|e| Error::Randomness(e.to_string()))?,
                node,
                verifier.clone(),
            ),
            ExonSecurity::Authenticated { identity, verifier } => {
                Security::authenticated(identity.clone(), verifier.clone())
            }
            ExonSecurity::InsecureNoAuth { id } => Security::InsecureNoAuth { id: *id },
        })
    }
}

impl std::fmt::Debug for ExonSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExonSecurity::EphemeralIdentity => f.write_str("EphemeralIdentity"),
            ExonSecurity::Endorsed { node, .. } => f
                .debug_struct("Endorsed")
                .field("node_key", &node.public_key())
                .finish_non_exhaustive(),
            ExonSecurity::Authenticated { identity, .. } => f
                .debug_struct("Authenticated")
                .field("public_key", &identity.public_key())
                .finish_non_exhaustive(),
            ExonSecurity::InsecureNoAuth { id } => {
                f.debug_struct("InsecureNoAuth").field("id", id).finish()
            }
        }
    }
}

/// 32 bytes from the OS CSPRNG: the session layer's seed for one bind.
fn os_seed() -> Result<[u8; 32], Error> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Randomness(e.to_string()))?;
    Ok(seed)
}

/// Configuration of an [`ExonSocket`].
#[derive(Debug, Clone)]
pub struct SocketConfig {
    /// The protocol and transmitter settings.
    pub node: NodeConfig,
    /// The durable clock.
    pub clock: ClockFile,
    /// The durable journal of sender and receiver records: with it, a
    /// crash of this process loses and duplicates nothing (restart with
    /// the same clock and journal files). `None`: only the clock is
    /// durable, and messages a crash catches unacknowledged end in doubt.
    pub journal: Option<PathBuf>,
    /// Smallest journal worth compacting, in bytes.
    pub compact_bytes: u64,
    /// Size datagrams to the path MTU where the socket knows it: a socket
    /// bound to a loopback address reaches only the loopback device, so
    /// its datagrams grow to that device's MTU (64 KiB on Linux, read from
    /// the kernel), up to [`braid_exon::MAX_DATAGRAM_SIZE`] and never below
    /// `node.max_datagram_size`. Elsewhere, and when off,
    /// `node.max_datagram_size` as configured.
    pub loopback_mtu: bool,
    /// Authentication and encryption (on by default).
    pub security: ExonSecurity,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            node: NodeConfig::default(),
            clock: ClockFile::default(),
            journal: None,
            compact_bytes: 64 << 20,
            loopback_mtu: true,
            security: ExonSecurity::default(),
        }
    }
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered at the destination, exactly once.
    Delivered,
    /// The destination restarted before acknowledging it: delivered at
    /// most once, perhaps never.
    InDoubt,
}

/// Errors of the socket API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or using the socket failed.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// The clock file could not be read or written.
    #[error(transparent)]
    Clock(#[from] ClockStoreError),
    /// The journal file could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal does not replay (another node's, or damaged).
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// The message was refused (with [`ExonSocket::send_many`]: the whole
    /// batch was).
    #[error(transparent)]
    Send(SendError),
    /// [`ExonSocket::send_many`] failed after the node had accepted some
    /// of the batch: those, in order, will have outcomes; the rest were
    /// not sent.
    #[error("{} of the batch accepted, then: {source}", accepted.len())]
    SendMany {
        /// The messages accepted before the error.
        accepted: Vec<MessageId>,
        /// Why the next one was refused.
        source: SendError,
    },
    /// The driver task has stopped (socket closed or fatal error).
    #[error("the Exon driver has stopped")]
    Closed,
    /// Learning the key (or ID) of the node at an address failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The OS CSPRNG failed (no identity or seed could be made).
    #[error("OS randomness unavailable: {0}")]
    Randomness(String),
    /// An insecure peer was added to an authenticated socket.
    #[error("an authenticated socket names peers by key, not by a chosen node ID")]
    InsecurePeer,
}

/// Most datagrams taken in (or commands) before the node is polled for
/// output: bounds the time a busy socket keeps the driver from sending.
const BATCH: usize = 256;

/// Most commands taken in per wake-up.
const COMMAND_BATCH: usize = 64;

/// A group commit's outcome: the journal position made durable, and the
/// journal's size when it was a checkpoint.
type CommitResult = Result<(u64, Option<u64>), JournalError>;

/// The driver's durability counters, shared with the socket.
type Durability = Arc<durability::Counters>;

/// What a batched send is answered with: the identifiers, or those
/// accepted before an error and the error.
type ManyResult = Result<Vec<MessageId>, (Vec<MessageId>, SendError)>;

/// Where the driver answers a send.
enum Reply {
    /// [`ExonSocket::send`].
    One(oneshot::Sender<Result<MessageId, SendError>>),
    /// [`ExonSocket::send_many`].
    Many(oneshot::Sender<ManyResult>),
}

/// The messages of one send call not yet handed to the node.
enum Msgs {
    One(Option<Bytes>),
    Many(std::vec::IntoIter<Bytes>),
}

impl Msgs {
    fn peek_len(&self) -> Option<usize> {
        match self {
            Msgs::One(m) => m.as_ref().map(Bytes::len),
            Msgs::Many(it) => it.as_slice().first().map(Bytes::len),
        }
    }

    fn take(&mut self) -> Option<Bytes> {
        match self {
            Msgs::One(m) => m.take(),
            Msgs::Many(it) => it.next(),
        }
    }
}

/// A send call in progress: what is left of it, the identifiers of what
/// the node accepted, and where to answer.
struct Sending {
    peer: NodeId,
    msgs: Msgs,
    ids: Vec<MessageId>,
    reply: Reply,
}

impl Sending {
    /// Answers with the identifiers of the accepted messages, or with
    /// `error` (and those accepted before it).
    fn answer(self, error: Option<SendError>) {
        match (self.reply, error) {
            (Reply::One(tx), None) => {
                let r = self
                    .ids
                    .first()
                    .copied()
                    // An empty send never reaches the driver.
                    .ok_or(SendError::TooLarge(0));
                let _ = tx.send(r);
            }
            (Reply::One(tx), Some(e)) => {
                let _ = tx.send(Err(e));
            }
            (Reply::Many(tx), None) => {
                let _ = tx.send(Ok(self.ids));
            }
            (Reply::Many(tx), Some(e)) => {
                let _ = tx.send(Err((self.ids, e)));
            }
        }
    }
}

/// Where a discovery is answered.
type DiscoveryReply = oneshot::Sender<Result<NodeId, DiscoveryError>>;

enum Command {
    Send(Sending),
    AddPeer(PublicKey, SocketAddr),
    AddInsecurePeer(NodeId, SocketAddr),
    Discover(SocketAddr, DiscoveryReply),
    Close,
}

/// The application's end of a channel on which the driver hands over a
/// batch per wake-up.
struct Inbox<T> {
    rx: mpsc::UnboundedReceiver<Vec<T>>,
    ready: VecDeque<T>,
}

impl<T> Inbox<T> {
    fn new(rx: mpsc::UnboundedReceiver<Vec<T>>) -> Self {
        Inbox {
            rx,
            ready: VecDeque::new(),
        }
    }

    /// The next item; `None` once the driver stopped. Cancel-safe.
    async fn next(&mut self) -> Option<T> {
        loop {
            if let Some(x) = self.ready.pop_front() {
                return Some(x);
            }
            let batch = self.rx.recv().await?;
            self.ready.extend(batch);
        }
    }

    /// Appends at least one item to `out` (waiting for it) and whatever
    /// else has arrived; returns how many, 0 once the driver stopped.
    /// Cancel-safe.
    async fn many(&mut self, out: &mut Vec<T>) -> usize {
        let before = out.len();
        if self.ready.is_empty() {
            match self.rx.recv().await {
                Some(batch) if out.is_empty() => *out = batch,
                Some(batch) => out.extend(batch),
                None => return 0,
            }
        } else {
            out.extend(self.ready.drain(..));
        }
        while let Ok(batch) = self.rx.try_recv() {
            out.extend(batch);
        }
        out.len() - before
    }
}

/// An Exon node on a UDP socket.
pub struct ExonSocket {
    id: NodeId,
    public_key: Option<PublicKey>,
    local: SocketAddr,
    commands: mpsc::UnboundedSender<Command>,
    received: tokio::sync::Mutex<Inbox<(NodeId, Bytes)>>,
    outcomes: tokio::sync::Mutex<Inbox<(MessageId, Outcome)>>,
    stats: Arc<Mutex<NodeStats>>,
    durability: Durability,
    driver: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ExonSocket {
    /// Binds `addr` and starts the driver task. The node's ID comes from
    /// `cfg.security` (its identity's key, or the insecure ID).
    pub async fn bind(addr: SocketAddr, cfg: SocketConfig) -> Result<ExonSocket, Error> {
        let security = cfg.security.resolve()?;
        let id = security.node_id();
        let seed = os_seed()?;
        let mut store: Box<dyn ClockStore + Send> = match &cfg.clock {
            ClockFile::Memory => Box::new(MemClockStore::default()),
            ClockFile::Path(p) => Box::new(FileClockStore::new(p)),
        };
        let clock = store.load()?;
        let mut node_cfg = cfg.node.clone();
        if cfg.loopback_mtu {
            if let Some(size) = udp::loopback_payload(addr) {
                node_cfg.max_datagram_size = node_cfg.max_datagram_size.max(size);
            }
        }
        let (node, journal) = match &cfg.journal {
            Some(path) => {
                node_cfg.machine.journal = true;
                let mut j = FileJournal::new(path);
                let records = j.load()?;
                let node =
                    ExonNode::restore(node_cfg, security, seed, clock, records, Instant::ZERO)?;
                (node, Some(Arc::new(Mutex::new(j))))
            }
            None => (ExonNode::new(node_cfg, security, seed, clock), None),
        };
        let public_key = node.public_key();
        let udp = Udp::bind(addr)?;
        let local = udp.local_addr()?;
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (received_tx, received) = mpsc::unbounded_channel();
        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let stats = Arc::new(Mutex::new(NodeStats::default()));
        let durability = Durability::default();
        let driver = Driver {
            stats: stats.clone(),
            durability: durability.clone(),
            clock_on_disk: matches!(cfg.clock, ClockFile::Path(_)),
            node,
            udp,
            epoch: tokio::time::Instant::now(),
            store: Arc::new(Mutex::new(store)),
            journal,
            compact_bytes: cfg.compact_bytes,
            last_checkpoint: 0,
            durable: 0,
            unconfirmed_sends: VecDeque::new(),
            unconfirmed_received: VecDeque::new(),
            commands: command_rx,
            received: received_tx,
            outcomes: outcome_tx,
            parked: VecDeque::new(),
            events: Vec::new(),
            discovering: HashMap::new(),
        };
        let task = tokio::spawn(driver.run());
        Ok(ExonSocket {
            id,
            public_key,
            local,
            commands,
            received: tokio::sync::Mutex::new(Inbox::new(received)),
            outcomes: tokio::sync::Mutex::new(Inbox::new(outcomes)),
            stats,
            durability,
            driver: Mutex::new(Some(task)),
        })
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// This node's static public key (authenticated sockets).
    pub fn public_key(&self) -> Option<PublicKey> {
        self.public_key
    }

    /// Tells the node that the node with key `key` is at `addr` (an
    /// authenticated datagram from it updates this); returns its ID. The
    /// key is trusted as given (the handshake proves the peer holds it).
    pub fn add_peer(&self, key: &PublicKey, addr: SocketAddr) -> Result<NodeId, Error> {
        self.commands
            .send(Command::AddPeer(*key, addr))
            .map_err(|_| Error::Closed)?;
        Ok(NodeId::of(key))
    }

    /// INSECURE: tells an insecure socket that node `id` is at `addr`.
    pub fn add_insecure_peer(&self, id: NodeId, addr: SocketAddr) -> Result<(), Error> {
        if self.public_key.is_some() {
            return Err(Error::InsecurePeer);
        }
        self.commands
            .send(Command::AddInsecurePeer(id, addr))
            .map_err(|_| Error::Closed)
    }

    /// Learns who the node at `addr` is and adds it as a peer: an
    /// authenticated socket asks for its key and judges it with its
    /// verifier (the handshake that follows proves it), an insecure one
    /// asks for its ID. Returns the peer's ID.
    pub async fn connect(&self, addr: SocketAddr) -> Result<NodeId, Error> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Discover(addr, tx))
            .map_err(|_| Error::Closed)?;
        Ok(rx.await.map_err(|_| Error::Closed)??)
    }

    /// Sends `data` to `peer` exactly once. Waits while the window of
    /// unacknowledged messages to `peer` is full and, with a journal, until
    /// the message is durable (accepted).
    pub async fn send(&self, peer: NodeId, data: Bytes) -> Result<MessageId, Error> {
        if data.len() as u64 > MAX_MESSAGE {
            return Err(Error::Send(SendError::TooLarge(data.len())));
        }
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Send(Sending {
                peer,
                msgs: Msgs::One(Some(data)),
                ids: Vec::new(),
                reply: Reply::One(tx),
            }))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?.map_err(Error::Send)
    }

    /// Sends each of `msgs` to `peer` exactly once, in one command to the
    /// driver (which packs them into as few datagrams as fit): the
    /// batched [`send`](Self::send). Waits until the window has taken
    /// them all and, with a journal, until they are durable; returns
    /// their identifiers in order.
    ///
    /// A message over the 16 MiB limit refuses the whole batch
    /// ([`SendError::TooLarge`]). An error after some were accepted (the
    /// peer unknown, the clock exhausted) is [`Error::SendMany`], naming
    /// those accepted: their outcomes follow as usual.
    pub async fn send_many(&self, peer: NodeId, msgs: Vec<Bytes>) -> Result<Vec<MessageId>, Error> {
        if let Some(m) = msgs.iter().find(|m| m.len() as u64 > MAX_MESSAGE) {
            return Err(Error::Send(SendError::TooLarge(m.len())));
        }
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        let ids = Vec::with_capacity(msgs.len());
        self.commands
            .send(Command::Send(Sending {
                peer,
                msgs: Msgs::Many(msgs.into_iter()),
                ids,
                reply: Reply::Many(tx),
            }))
            .map_err(|_| Error::Closed)?;
        match rx.await.map_err(|_| Error::Closed)? {
            Ok(ids) => Ok(ids),
            Err((accepted, e)) if accepted.is_empty() => Err(Error::Send(e)),
            Err((accepted, source)) => Err(Error::SendMany { accepted, source }),
        }
    }

    /// Sends a copy of each of `msgs` to `peer` exactly once:
    /// [`send_many`](Self::send_many) for messages the application keeps
    /// (or writes into a scratch buffer of its own). The copies share one
    /// buffer, freed once the last of them is acknowledged: one allocation
    /// per call rather than one per message.
    ///
    /// ```no_run
    /// # async fn f(sock: braid_exon_net::ExonSocket, peer: braid_exon::NodeId) -> Result<(), braid_exon_net::Error> {
    /// let scratch = vec![7u8; 64 * 1024];
    /// let msgs: Vec<&[u8]> = scratch.chunks(64).collect();
    /// let ids = sock.send_copies(peer, &msgs).await?;
    /// assert_eq!(ids.len(), 1024);
    /// # Ok(()) }
    /// ```
    pub async fn send_copies<M: AsRef<[u8]>>(
        &self,
        peer: NodeId,
        msgs: &[M],
    ) -> Result<Vec<MessageId>, Error> {
        if let Some(m) = msgs.iter().find(|m| m.as_ref().len() as u64 > MAX_MESSAGE) {
            return Err(Error::Send(SendError::TooLarge(m.as_ref().len())));
        }
        let total = msgs.iter().map(|m| m.as_ref().len()).sum();
        let mut buf = Vec::with_capacity(total);
        for m in msgs {
            buf.extend_from_slice(m.as_ref());
        }
        let buf = Bytes::from(buf);
        let mut at = 0;
        let copies = msgs
            .iter()
            .map(|m| {
                let end = at + m.as_ref().len();
                let copy = buf.slice(at..end);
                at = end;
                copy
            })
            .collect();
        self.send_many(peer, copies).await
    }

    /// The next message received, or `None` once the driver stopped.
    pub async fn recv(&self) -> Option<(NodeId, Bytes)> {
        self.received.lock().await.next().await
    }

    /// Appends the messages received (waiting for at least one) to `out`
    /// and returns how many: what the driver's latest wake-ups delivered,
    /// in one go. 0 once the driver stopped.
    pub async fn recv_many(&self, out: &mut Vec<(NodeId, Bytes)>) -> usize {
        self.received.lock().await.many(out).await
    }

    /// The next outcome of a message sent, or `None` once the driver
    /// stopped.
    pub async fn next_outcome(&self) -> Option<(MessageId, Outcome)> {
        self.outcomes.lock().await.next().await
    }

    /// Appends the outcomes known (waiting for at least one) to `out` and
    /// returns how many; 0 once the driver stopped.
    pub async fn outcomes_many(&self, out: &mut Vec<(MessageId, Outcome)>) -> usize {
        self.outcomes.lock().await.many(out).await
    }

    /// The node's counters (datagrams, retransmissions, malformed input),
    /// as of the driver's latest step.
    pub fn stats(&self) -> NodeStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// What durability cost so far: group commits (fsyncs), checkpoints,
    /// clock writes, and the messages that waited for a commit. Counted by
    /// the driver as each fsync returns; all zero without a journal and
    /// with the clock in memory.
    pub fn durability(&self) -> DurabilityStats {
        self.durability.snapshot()
    }

    /// Stops the driver (unacknowledged messages are abandoned) and waits
    /// for it.
    pub async fn close(&self) {
        let _ = self.commands.send(Command::Close);
        let task = self.driver.lock().ok().and_then(|mut d| d.take());
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

impl Drop for ExonSocket {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close);
    }
}

struct Driver {
    node: ExonNode,
    udp: Udp,
    epoch: tokio::time::Instant,
    store: Arc<Mutex<Box<dyn ClockStore + Send>>>,
    commands: mpsc::UnboundedReceiver<Command>,
    received: mpsc::UnboundedSender<Vec<(NodeId, Bytes)>>,
    outcomes: mpsc::UnboundedSender<Vec<(MessageId, Outcome)>>,
    /// Sends waiting for room in their peer's window, in order.
    parked: VecDeque<Sending>,
    /// The journal, when kept.
    journal: Option<Arc<Mutex<FileJournal>>>,
    compact_bytes: u64,
    /// Journal size right after the last checkpoint.
    last_checkpoint: u64,
    /// Journal position known durable.
    durable: u64,
    /// Sends whose journal position is not durable yet, with the error
    /// that ended them early, if any.
    unconfirmed_sends: VecDeque<(u64, Sending, Option<SendError>)>,
    /// Received messages whose `Taken` is not durable yet.
    unconfirmed_received: VecDeque<(u64, Vec<(NodeId, Bytes)>)>,
    /// Where [`ExonSocket::stats`] reads the counters.
    stats: Arc<Mutex<NodeStats>>,
    /// Where [`ExonSocket::durability`] reads its counters.
    durability: Durability,
    /// The clock is a file (its writes are fsynced and counted).
    clock_on_disk: bool,
    /// Events of one wake-up (kept for its allocation).
    events: Vec<Event>,
    /// Discoveries in progress, by address.
    discovering: HashMap<SocketAddr, Vec<DiscoveryReply>>,
}

impl Driver {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn deadline(&self, t: Instant) -> tokio::time::Instant {
        let far = std::time::Duration::from_secs(3600);
        self.epoch + t.since_epoch().min(self.epoch.elapsed() + far)
    }

    /// Hands a send call to the node, parking it (or what is left of it)
    /// while the window is full.
    fn try_send(&mut self, s: Sending) {
        // Keep order: nothing overtakes a parked send to the same peer.
        if self.parked.iter().any(|p| p.peer == s.peer) {
            self.parked.push_back(s);
            return;
        }
        if let Some(s) = self.feed(s) {
            self.parked.push_back(s);
        }
    }

    /// Hands messages of `s` to the node while its window has room;
    /// returns `s` if some are left for later.
    fn feed(&mut self, mut s: Sending) -> Option<Sending> {
        let now = self.now();
        if let Msgs::Many(it) = &mut s.msgs {
            // The batched send: the node looks the peer up once.
            if let Err(e) = self.node.send_batch(now, s.peer, it, &mut s.ids) {
                self.answer(s, Some(e));
                return None;
            }
            if !it.as_slice().is_empty() {
                return Some(s); // the window is full: the rest waits
            }
            self.answer(s, None);
            return None;
        }
        while let Some(len) = s.msgs.peek_len() {
            // Asking first keeps the message: a refused one would be gone.
            if !self.node.has_room(s.peer, len) {
                return Some(s);
            }
            let Some(data) = s.msgs.take() else { break };
            match self.node.send(now, s.peer, data) {
                Ok(id) => s.ids.push(id),
                Err(e) => {
                    self.answer(s, Some(e));
                    return None;
                }
            }
        }
        self.answer(s, None);
        None
    }

    /// Answers a send: at once, or once its journal position is durable.
    fn answer(&mut self, s: Sending, error: Option<SendError>) {
        let seq = self.node.journal_seq();
        if !s.ids.is_empty() && seq > self.durable {
            self.unconfirmed_sends.push_back((seq, s, error));
        } else {
            s.answer(error);
        }
    }

    /// The journal is durable up to `seq`: answer the sends and hand over
    /// the messages that waited for it.
    fn confirmed(&mut self, seq: u64) {
        self.durable = self.durable.max(seq);
        self.node.journal_persisted(seq);
        while self
            .unconfirmed_sends
            .front()
            .is_some_and(|u| u.0 <= self.durable)
        {
            if let Some((_, s, e)) = self.unconfirmed_sends.pop_front() {
                self.durability.sends_released(s.ids.len());
                s.answer(e);
            }
        }
        while self
            .unconfirmed_received
            .front()
            .is_some_and(|u| u.0 <= self.durable)
        {
            if let Some((_, batch)) = self.unconfirmed_received.pop_front() {
                self.durability.receipts_released(batch.len());
                let _ = self.received.send(batch);
            }
        }
    }

    /// Starts a group commit (or, when the journal has grown, a
    /// checkpoint) off the driver task, if one is due.
    /// Returns whether one started.
    fn start_commit(&mut self, done: &mpsc::UnboundedSender<CommitResult>) -> bool {
        let Some(journal) = self.journal.clone() else {
            return false;
        };
        let mut records: Vec<Record> = Vec::new();
        let (records, checkpoint) = match self.node.take_journal(&mut records) {
            Some(_) => (records, false),
            None => {
                // Only a grown journal is compacted: building a checkpoint
                // copies the whole state, too much for every wake-up.
                let size = journal.lock().map(|j| j.size()).unwrap_or(0);
                if size < self.compact_bytes.max(2 * self.last_checkpoint) {
                    return false;
                }
                match self.node.checkpoint() {
                    Some(records) => (records, true),
                    None => return false,
                }
            }
        };
        let seq = self.node.journal_seq();
        let tx = done.clone();
        let counters = self.durability.clone();
        tokio::task::spawn_blocking(move || {
            let r = match journal.lock() {
                Ok(mut j) => {
                    let r = if checkpoint {
                        j.rewrite(&records)
                    } else {
                        j.append(&records)
                    };
                    // Counted here, where the fsync happened (an empty
                    // append writes and syncs nothing).
                    match (&r, checkpoint) {
                        (Ok(()), true) => counters.checkpointed(),
                        (Ok(()), false) if !records.is_empty() => counters.committed(records.len()),
                        _ => {}
                    }
                    r.map(|()| (seq, checkpoint.then(|| j.size())))
                }
                Err(_) => Ok((0, None)),
            };
            let _ = tx.send(r);
        });
        true
    }

    fn retry_parked(&mut self) {
        let mut still = VecDeque::new();
        let mut blocked: Vec<NodeId> = Vec::new();
        while let Some(s) = self.parked.pop_front() {
            if blocked.contains(&s.peer) {
                still.push_back(s);
                continue;
            }
            if let Some(s) = self.feed(s) {
                blocked.push(s.peer);
                still.push_back(s);
            }
        }
        self.parked = still;
    }

    /// Sends everything the node has to send, a segmented send per peer
    /// batch, and hands the events out.
    async fn flush(&mut self, buf: &mut Vec<u8>) {
        let now = self.now();
        let max = self.udp.max_segments(self.node.config().max_datagram_size);
        while let Some(t) = self.node.poll_transmit_batch(now, buf, max) {
            self.udp.send(t.dst, &buf[..t.size], t.segment_size).await;
        }
        let mut events = std::mem::take(&mut self.events);
        self.node.poll_events(&mut events);
        // One journal position covers the whole batch: the last `Taken`.
        let seq = self.node.journal_seq();
        // Sized at once: a wake-up may hand over thousands of messages.
        let n_received = events
            .iter()
            .filter(|e| matches!(e, Event::Received { .. }))
            .count();
        let mut received = Vec::with_capacity(n_received);
        let mut outcomes = Vec::with_capacity(events.len() - n_received);
        for ev in events.drain(..) {
            match ev {
                Event::Received { from, data } => received.push((from, data)),
                Event::Delivered { id, .. } => outcomes.push((id, Outcome::Delivered)),
                Event::InDoubt { id, .. } => outcomes.push((id, Outcome::InDoubt)),
            }
        }
        self.events = events;
        if !received.is_empty() {
            if seq > self.durable {
                self.unconfirmed_received.push_back((seq, received));
            } else {
                let _ = self.received.send(received);
            }
        }
        if !outcomes.is_empty() {
            let _ = self.outcomes.send(outcomes);
            if !self.parked.is_empty() {
                self.retry_parked();
            }
        }
        while let Some((addr, result)) = self.node.poll_discovered() {
            for reply in self.discovering.remove(&addr).unwrap_or_default() {
                let _ = reply.send(result.clone());
            }
        }
        if let Ok(mut s) = self.stats.lock() {
            *s = *self.node.stats();
        }
    }

    /// Takes in whatever has arrived, up to [`BATCH`] datagrams, before
    /// answering: under load one datagram of acknowledgements then answers
    /// many tokens (fewer datagrams, fewer system calls); when idle
    /// nothing waits.
    fn receive(&mut self, rx: &mut Receiver, dgrams: &mut Vec<(SocketAddr, Bytes)>) {
        let mut taken = 0;
        while taken < BATCH {
            dgrams.clear();
            match rx.recv(&self.udp, dgrams) {
                Ok(n) => taken += n.max(1),
                // WouldBlock: drained. Other errors (ICMP unreachable
                // reported on the socket): nothing to take in now.
                Err(_) => break,
            }
            let now = self.now();
            for (src, payload) in dgrams.drain(..) {
                self.node.handle_datagram(now, src, payload);
            }
        }
    }

    async fn run(mut self) {
        let mut buf = Vec::with_capacity(65_536);
        let mut rx = Receiver::new();
        let mut dgrams = Vec::with_capacity(BATCH);
        let (persisted_tx, mut persisted_rx) =
            mpsc::unbounded_channel::<Result<u64, ClockStoreError>>();
        let mut persisting = false;
        let (committed_tx, mut committed_rx) = mpsc::unbounded_channel::<CommitResult>();
        let mut committing = false;
        loop {
            self.flush(&mut buf).await;
            if !committing {
                committing = self.start_commit(&committed_tx);
            }
            if !persisting {
                if let Some(limit) = self.node.clock_request() {
                    persisting = true;
                    let store = self.store.clone();
                    let tx = persisted_tx.clone();
                    let counted = self.clock_on_disk.then(|| self.durability.clone());
                    // fsync off the driver task.
                    tokio::task::spawn_blocking(move || {
                        let r = match store.lock() {
                            Ok(mut s) => s.persist(limit).map(|()| {
                                if let Some(c) = counted {
                                    c.clock_written();
                                }
                                limit
                            }),
                            Err(_) => Ok(0),
                        };
                        let _ = tx.send(r);
                    });
                }
            }
            let deadline = self.node.poll_timeout().map(|t| self.deadline(t));
            tokio::select! {
                r = self.udp.readable() => {
                    if r.is_ok() {
                        self.receive(&mut rx, &mut dgrams);
                    }
                }
                cmd = self.commands.recv() => {
                    // Likewise for sends: queued ones go in together, so
                    // small messages share datagrams.
                    let mut next = cmd;
                    let mut taken = 0;
                    loop {
                        match next {
                            Some(Command::Send(s)) => self.try_send(s),
                            Some(Command::AddPeer(key, addr)) => {
                                self.node.add_peer(&key, addr);
                            }
                            Some(Command::AddInsecurePeer(id, addr)) => {
                                self.node.add_insecure_peer(id, addr);
                            }
                            Some(Command::Discover(addr, reply)) => {
                                let now = self.now();
                                let waiting = self.discovering.entry(addr).or_default();
                                if waiting.is_empty() {
                                    self.node.discover(now, addr);
                                }
                                waiting.push(reply);
                            }
                            Some(Command::Close) | None => {
                                // A commit in flight still completes: let
                                // out what waited for it (answers,
                                // messages) before stopping.
                                if committing {
                                    if let Some(Ok((seq, _))) = committed_rx.recv().await {
                                        self.confirmed(seq);
                                    }
                                }
                                return;
                            }
                        }
                        taken += 1;
                        if taken == COMMAND_BATCH {
                            break;
                        }
                        match self.commands.try_recv() {
                            Ok(c) => next = Some(c),
                            Err(_) => break,
                        }
                    }
                }
                Some(r) = committed_rx.recv() => {
                    committing = false;
                    match r {
                        Ok((seq, checkpoint)) => {
                            if let Some(size) = checkpoint {
                                self.last_checkpoint = size;
                            }
                            self.confirmed(seq);
                        }
                        // Without a durable journal nothing may leave: stop.
                        Err(e) => {
                            tracing::error!("Exon driver stops: {e}");
                            return;
                        }
                    }
                }
                Some(r) = persisted_rx.recv() => {
                    persisting = false;
                    match r {
                        Ok(limit) => self.node.clock_persisted(limit),
                        // Without a durable clock nothing may leave: stop.
                        Err(e) => {
                            tracing::error!("Exon driver stops: {e}");
                            return;
                        }
                    }
                }
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let now = self.now();
                    self.node.handle_timeout(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `send_copies` delivers a copy of each borrowed message exactly once,
    /// batches parked behind a small window included, with an outcome for
    /// each; a message over the limit refuses the whole call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copies_arrive_once_each() {
        const N: usize = 3_000;
        let any = "127.0.0.1:0".parse().unwrap();
        let mut small = SocketConfig::default();
        small.node.machine.max_outstanding = 400;
        let a = ExonSocket::bind(any, small).await.unwrap();
        let b = ExonSocket::bind(any, SocketConfig::default()).await.unwrap();
        let peer = a.connect(b.local_addr()).await.unwrap();
        let too_big = vec![vec![0u8; 8], vec![0u8; (16 << 20) + 1]];
        assert!(matches!(
            a.send_copies(peer, &too_big).await,
            Err(Error::Send(SendError::TooLarge(_)))
        ));
        // Messages of different lengths (1 to 100 bytes), numbered.
        let scratch: Vec<Vec<u8>> = (0..N)
            .map(|i| {
                let mut m = (i as u32).to_be_bytes().to_vec();
                m.resize(4 + i % 97, i as u8);
                m
            })
            .collect();
        let run = async {
            let mut ids = Vec::new();
            for chunk in scratch.chunks(1_000) {
                let msgs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                ids.extend(a.send_copies(peer, &msgs).await.unwrap());
            }
            let mut seen = vec![0u32; N];
            let (mut got, mut batch) = (0, Vec::new());
            while got < N {
                batch.clear();
                assert!(b.recv_many(&mut batch).await > 0);
                for (_, m) in &batch {
                    let i = u32::from_be_bytes(m[..4].try_into().unwrap()) as usize;
                    assert_eq!(&m[..], &scratch[i][..]);
                    seen[i] += 1;
                    got += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "each message exactly once");
            let mut outcomes = Vec::new();
            while outcomes.len() < N {
                assert!(a.outcomes_many(&mut outcomes).await > 0);
            }
            assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Delivered));
            let mut delivered: Vec<MessageId> = outcomes.iter().map(|(id, _)| *id).collect();
            delivered.sort_unstable();
            ids.sort_unstable();
            assert_eq!(delivered, ids);
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), run)
            .await
            .expect("all delivered within 30 s");
        a.close().await;
        b.close().await;
    }
}
