//! Exon on a real UDP socket: a tokio driver task around the sans-IO
//! [`ExonNode`].
//!
//! Owns: the socket, the driver task, the mapping of protocol time to the
//! monotonic clock, the durable clock's fsyncs and the journal's group
//! commits (both off the driver task), and the async API:
//! [`ExonSocket::send`] (waits while the peer's window is full:
//! backpressure; with a journal, returns once the message is durable),
//! [`ExonSocket::next_outcome`] (one [`Outcome`] per [`MessageId`] once
//! acknowledged, or in doubt after a restart of a peer that keeps no
//! journal) and [`ExonSocket::recv`].
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
//!
//! Must not depend on: protocol logic (all of it is in `braid-exon`),
//! `braid-net` (patterns only), the facade.
//!
//! ```no_run
//! # async fn demo() -> Result<(), braid_exon_net::Error> {
//! use braid_exon_net::{ExonSocket, SocketConfig, Outcome};
//! use braid_exon::NodeId;
//!
//! let a = ExonSocket::bind("127.0.0.1:0".parse().unwrap(), NodeId(1), SocketConfig::default()).await?;
//! let b = ExonSocket::bind("127.0.0.1:0".parse().unwrap(), NodeId(2), SocketConfig::default()).await?;
//! a.add_peer(NodeId(2), b.local_addr())?;
//! let id = a.send(NodeId(2), bytes::Bytes::from_static(b"hi")).await?;
//! let (from, msg) = b.recv().await.unwrap();
//! assert_eq!((from, &msg[..]), (NodeId(1), &b"hi"[..]));
//! assert_eq!(a.next_outcome().await, Some((id, Outcome::Delivered)));
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use braid_core::Instant;
use braid_exon::clock::{ClockStore, ClockStoreError, FileClockStore, MemClockStore};
use braid_exon::journal::{FileJournal, JournalError, JournalStore, Record};
use braid_exon::{
    Event, ExonNode, MessageId, NodeConfig, NodeId, NodeStats, RestoreError, SendError,
};
use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

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
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            node: NodeConfig::default(),
            clock: ClockFile::default(),
            journal: None,
            compact_bytes: 64 << 20,
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
    /// The message was refused.
    #[error(transparent)]
    Send(SendError),
    /// The driver task has stopped (socket closed or fatal error).
    #[error("the Exon driver has stopped")]
    Closed,
}

/// Most datagrams (or commands) taken in before the node is polled for
/// output: bounds the time a busy socket keeps the driver from sending.
const BATCH: usize = 64;

/// Where the driver answers a send.
type Reply = oneshot::Sender<Result<MessageId, SendError>>;

/// A group commit's outcome: the journal position made durable, and the
/// journal's size when it was a checkpoint.
type CommitResult = Result<(u64, Option<u64>), JournalError>;

enum Command {
    Send {
        peer: NodeId,
        data: Bytes,
        reply: Reply,
    },
    AddPeer(NodeId, SocketAddr),
    Close,
}

/// Kernel socket buffers asked for (the kernel caps them at its maximum).
/// The default (about 208 KiB) holds some 90 datagrams, 8 ms at 100 Mbit/s:
/// a driver stalled that long by a busy machine overflows it, and every
/// datagram lost there is a retransmission. TCP autotunes its buffers.
const SOCKET_BUFFER: usize = 8 << 20;

/// A UDP socket bound to `addr` with large kernel buffers.
fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer costs retransmissions, not correctness.
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

/// An Exon node on a UDP socket.
pub struct ExonSocket {
    id: NodeId,
    local: SocketAddr,
    commands: mpsc::UnboundedSender<Command>,
    received: tokio::sync::Mutex<mpsc::UnboundedReceiver<(NodeId, Bytes)>>,
    outcomes: tokio::sync::Mutex<mpsc::UnboundedReceiver<(MessageId, Outcome)>>,
    stats: Arc<Mutex<NodeStats>>,
    driver: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ExonSocket {
    /// Binds `addr` as node `id` and starts the driver task.
    pub async fn bind(
        addr: SocketAddr,
        id: NodeId,
        cfg: SocketConfig,
    ) -> Result<ExonSocket, Error> {
        let mut store: Box<dyn ClockStore + Send> = match &cfg.clock {
            ClockFile::Memory => Box::new(MemClockStore::default()),
            ClockFile::Path(p) => Box::new(FileClockStore::new(p)),
        };
        let clock = store.load()?;
        let mut node_cfg = cfg.node.clone();
        let (node, journal) = match &cfg.journal {
            Some(path) => {
                node_cfg.machine.journal = true;
                let mut j = FileJournal::new(path);
                let records = j.load()?;
                let node = ExonNode::restore(node_cfg, id, clock, records, Instant::ZERO)?;
                (node, Some(Arc::new(Mutex::new(j))))
            }
            None => (ExonNode::new(node_cfg, id, clock), None),
        };
        let socket = bind_udp(addr)?;
        let local = socket.local_addr()?;
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (received_tx, received) = mpsc::unbounded_channel();
        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let stats = Arc::new(Mutex::new(NodeStats::default()));
        let driver = Driver {
            stats: stats.clone(),
            node,
            socket,
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
        };
        let task = tokio::spawn(driver.run());
        Ok(ExonSocket {
            id,
            local,
            commands,
            received: tokio::sync::Mutex::new(received),
            outcomes: tokio::sync::Mutex::new(outcomes),
            stats,
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

    /// Tells the node where `peer` is (a datagram from it updates this).
    pub fn add_peer(&self, peer: NodeId, addr: SocketAddr) -> Result<(), Error> {
        self.commands
            .send(Command::AddPeer(peer, addr))
            .map_err(|_| Error::Closed)
    }

    /// Sends `data` to `peer` exactly once. Waits while the window of
    /// unacknowledged messages to `peer` is full and, with a journal, until
    /// the message is durable (accepted).
    pub async fn send(&self, peer: NodeId, data: Bytes) -> Result<MessageId, Error> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Send { peer, data, reply })
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?.map_err(Error::Send)
    }

    /// The next message received, or `None` once the driver stopped.
    pub async fn recv(&self) -> Option<(NodeId, Bytes)> {
        self.received.lock().await.recv().await
    }

    /// The next outcome of a message sent, or `None` once the driver
    /// stopped.
    pub async fn next_outcome(&self) -> Option<(MessageId, Outcome)> {
        self.outcomes.lock().await.recv().await
    }

    /// The node's counters (datagrams, retransmissions, malformed input),
    /// as of the driver's latest step.
    pub fn stats(&self) -> NodeStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
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
    socket: UdpSocket,
    epoch: tokio::time::Instant,
    store: Arc<Mutex<Box<dyn ClockStore + Send>>>,
    commands: mpsc::UnboundedReceiver<Command>,
    received: mpsc::UnboundedSender<(NodeId, Bytes)>,
    outcomes: mpsc::UnboundedSender<(MessageId, Outcome)>,
    /// Sends waiting for room in their peer's window, in order.
    parked: VecDeque<(NodeId, Bytes, Reply)>,
    /// The journal, when kept.
    journal: Option<Arc<Mutex<FileJournal>>>,
    compact_bytes: u64,
    /// Journal size right after the last checkpoint.
    last_checkpoint: u64,
    /// Journal position known durable.
    durable: u64,
    /// Accepted sends whose journal position is not durable yet.
    unconfirmed_sends: VecDeque<(u64, MessageId, Reply)>,
    /// Received messages whose `Taken` is not durable yet.
    unconfirmed_received: VecDeque<(u64, NodeId, Bytes)>,
    /// Where [`ExonSocket::stats`] reads the counters.
    stats: Arc<Mutex<NodeStats>>,
}

impl Driver {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn deadline(&self, t: Instant) -> tokio::time::Instant {
        let far = std::time::Duration::from_secs(3600);
        self.epoch + t.since_epoch().min(self.epoch.elapsed() + far)
    }

    /// Hands a send to the node, or parks it while the window is full.
    fn try_send(&mut self, peer: NodeId, data: Bytes, reply: Reply) {
        let now = self.now();
        // Keep order: nothing overtakes a parked send to the same peer.
        if self.parked.iter().any(|(p, _, _)| *p == peer) {
            self.parked.push_back((peer, data, reply));
            return;
        }
        match self.node.send(now, peer, data.clone()) {
            Err(SendError::WindowFull(_)) => self.parked.push_back((peer, data, reply)),
            r => self.answer(r, reply),
        }
    }

    /// Answers a send: at once, or once its journal position is durable.
    fn answer(&mut self, r: Result<MessageId, SendError>, reply: Reply) {
        let seq = self.node.journal_seq();
        match r {
            Ok(id) if seq > self.durable => self.unconfirmed_sends.push_back((seq, id, reply)),
            r => {
                let _ = reply.send(r);
            }
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
            let (_, id, reply) = self.unconfirmed_sends.pop_front().expect("checked");
            let _ = reply.send(Ok(id));
        }
        while self
            .unconfirmed_received
            .front()
            .is_some_and(|u| u.0 <= self.durable)
        {
            let (_, from, data) = self.unconfirmed_received.pop_front().expect("checked");
            let _ = self.received.send((from, data));
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
        tokio::task::spawn_blocking(move || {
            let r = match journal.lock() {
                Ok(mut j) => {
                    let r = if checkpoint {
                        j.rewrite(&records)
                    } else {
                        j.append(&records)
                    };
                    r.map(|()| (seq, checkpoint.then(|| j.size())))
                }
                Err(_) => Ok((0, None)),
            };
            let _ = tx.send(r);
        });
        true
    }

    fn retry_parked(&mut self) {
        let now = self.now();
        let mut still = VecDeque::new();
        let mut blocked: Vec<NodeId> = Vec::new();
        while let Some((peer, data, reply)) = self.parked.pop_front() {
            if blocked.contains(&peer) {
                still.push_back((peer, data, reply));
                continue;
            }
            match self.node.send(now, peer, data.clone()) {
                Err(SendError::WindowFull(_)) => {
                    blocked.push(peer);
                    still.push_back((peer, data, reply));
                }
                r => self.answer(r, reply),
            }
        }
        self.parked = still;
    }

    async fn flush(&mut self, buf: &mut Vec<u8>) {
        let now = self.now();
        while let Some(t) = self.node.poll_transmit(now, buf) {
            // A send error (no route, buffer full) is a lost datagram:
            // Exon retransmits.
            let _ = self.socket.send_to(&buf[..t.size], t.dst).await;
        }
        let mut freed = false;
        while let Some(ev) = self.node.poll_event() {
            match ev {
                Event::Received { from, data } => {
                    let seq = self.node.journal_seq();
                    if seq > self.durable {
                        self.unconfirmed_received.push_back((seq, from, data));
                    } else {
                        let _ = self.received.send((from, data));
                    }
                }
                Event::Delivered { id, .. } => {
                    freed = true;
                    let _ = self.outcomes.send((id, Outcome::Delivered));
                }
                Event::InDoubt { id, .. } => {
                    freed = true;
                    let _ = self.outcomes.send((id, Outcome::InDoubt));
                }
            }
        }
        if freed && !self.parked.is_empty() {
            self.retry_parked();
        }
        if let Ok(mut s) = self.stats.lock() {
            *s = *self.node.stats();
        }
    }

    async fn run(mut self) {
        let mut buf = Vec::with_capacity(65_536);
        let mut rbuf = vec![0u8; 65_536];
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
                    // fsync off the driver task.
                    tokio::task::spawn_blocking(move || {
                        let r = match store.lock() {
                            Ok(mut s) => s.persist(limit).map(|()| limit),
                            Err(_) => Ok(0),
                        };
                        let _ = tx.send(r);
                    });
                }
            }
            let deadline = self.node.poll_timeout().map(|t| self.deadline(t));
            tokio::select! {
                r = self.socket.recv_from(&mut rbuf) => {
                    if let Ok((n, src)) = r {
                        let now = self.now();
                        self.node.handle_datagram(now, src, Bytes::copy_from_slice(&rbuf[..n]));
                    }
                    // Take in whatever else has arrived before answering:
                    // under load one datagram of acknowledgements then
                    // answers many tokens (fewer datagrams, fewer syscalls),
                    // and when idle nothing waits.
                    for _ in 0..BATCH {
                        match self.socket.try_recv_from(&mut rbuf) {
                            Ok((n, src)) => {
                                let now = self.now();
                                self.node.handle_datagram(now, src, Bytes::copy_from_slice(&rbuf[..n]));
                            }
                            Err(_) => break,
                        }
                    }
                }
                cmd = self.commands.recv() => {
                    // Likewise for sends: queued ones go in together, so
                    // small messages share datagrams.
                    let mut next = cmd;
                    let mut taken = 0;
                    loop {
                        match next {
                            Some(Command::Send { peer, data, reply }) => self.try_send(peer, data, reply),
                            Some(Command::AddPeer(peer, addr)) => self.node.add_peer(peer, addr),
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
                        if taken == BATCH {
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
