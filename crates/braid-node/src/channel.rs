//! Channels of the connection-oriented transports (seed 000 §III-C):
//! created on first use, messages queued while the connection opens, kept
//! while used, closed after being idle.
//!
//! One task per channel owns the connection and a FIFO queue, which gives
//! FIFO order per destination. Every transport with channels (TCP and
//! Braid; Exon has none) plugs in through [`Link`]; the table, the
//! queueing, idle closing and notifications are shared.
//!
//! The idle close must not race with a sender: senders register a pending
//! message under the table lock before queueing it, and the task only
//! closes (removing itself from the table, under the same lock) when
//! nothing is pending. So a message is either sent on the old connection
//! or, after the close, opens a new one, never both at once: FIFO holds
//! across an idle close.
//!
//! A destination can have two channels per transport, one per [`Lane`]:
//! the DATA interceptor's bulk stream travels on the `Bulk` lane, so the
//! application's own messages to the same destination (control messages,
//! seed 000 Fig. 8) never queue behind it: not in the channel's queue,
//! not in the kernel's unsent bytes, not behind TCP's loss recovery
//! (head-of-line blocking). FIFO order holds per channel, which is what
//! each transport promises per destination: DATA's messages have no order
//! with respect to the application's other messages anyway (DATA picks
//! their transport).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::notify::Notifier;
use crate::stats::{bump, Counters, TransportCounters};
use crate::{FailReason, Transport};

/// Resolves, with a reason, once the transport saw the connection die.
pub(crate) type ClosedSignal = Pin<Box<dyn Future<Output = String> + Send>>;

/// An open connection of a transport with channels.
pub(crate) trait Link: Send + 'static {
    /// Hand `frame` (TCP: with its length prefix) to the transport;
    /// returns once the transport took it (waiting while it applies
    /// backpressure).
    fn send(&mut self, frame: &crate::wire::Encoded) -> impl Future<Output = Result<(), String>> + Send;
    /// Hand `frames` to the transport in order, as one hand-over where
    /// the transport allows (TCP: one write and one TLS flush; Braid: one
    /// lock of the endpoint and one wake of its driver); returns once it
    /// took them all. On an error none counts as sent (some may still
    /// arrive: the connection is lost either way).
    fn send_batch(&mut self, frames: &[&crate::wire::Encoded]) -> impl Future<Output = Result<(), String>> + Send;
    /// Cumulative transport bytes the peer acknowledged, when the
    /// transport can know (Braid; TCP on Linux, from `TCP_INFO`); `None`
    /// otherwise.
    fn acked(&self) -> Option<u64>;
    /// A handle that reads [`Link::acked`] without borrowing the link, so
    /// acknowledgements keep being reported while a send waits for
    /// backpressure to ease; `None` when the transport cannot know.
    fn ack_probe(&self) -> Option<AckProbe>;
    /// Transport bytes one frame of `len` bytes adds to the count of
    /// [`Link::acked`].
    fn cost(&self, len: usize) -> u64;
    /// Close gracefully; true if everything sent was acknowledged.
    fn close(self) -> impl Future<Output = bool> + Send;
}

/// Reads the cumulative acknowledged byte count of a link.
pub(crate) type AckProbe = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// Send `frames` on `link`, releasing notifications of acknowledged
/// messages meanwhile (a send can wait long on a congested or stalled
/// connection, while earlier messages are being acknowledged).
async fn send_polling<L: Link>(
    link: &mut L,
    probe: &Option<AckProbe>,
    frames: &[&crate::wire::Encoded],
    awaiting: &mut Awaiting,
    poll: &mut tokio::time::Interval,
) -> Result<(), String> {
    let send = link.send_batch(frames);
    tokio::pin!(send);
    loop {
        tokio::select! {
            biased;
            r = &mut send => return r,
            _ = poll.tick(), if probe.is_some() && !awaiting.0.is_empty() => {
                if let Some(a) = probe.as_ref().and_then(|p| p()) {
                    awaiting.release(a);
                }
            }
        }
    }
}

/// A message on its way through a channel.
pub(crate) struct Outgoing {
    pub(crate) frame: crate::wire::Encoded,
    pub(crate) notifier: Notifier,
}

struct Handle {
    id: u64,
    tx: mpsc::Sender<Outgoing>,
    pending: Arc<AtomicUsize>,
}

/// Which of a destination's channels of a transport a message takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    /// The application's messages.
    Default,
    /// The DATA interceptor's bulk stream.
    Bulk,
}

type Key = (Transport, SocketAddr, Lane);

/// The channel table of a node.
pub(crate) struct Channels {
    map: Mutex<HashMap<Key, Handle>>,
    next_id: AtomicU64,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What a channel task needs from its node.
#[derive(Clone)]
pub(crate) struct ChannelEnv {
    pub(crate) channels: Arc<Channels>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) queue: usize,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Channels {
    pub(crate) fn new() -> Self {
        Channels { map: Mutex::new(HashMap::new()), next_id: AtomicU64::new(0), tasks: Mutex::new(Vec::new()) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Handle>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of open (or opening) channels.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// Remove channel `id` from the table (if it is still there) and stop
    /// its queue from accepting messages.
    fn retire(&self, key: Key, id: u64, rx: &mut mpsc::Receiver<Outgoing>) {
        let mut m = self.map();
        if m.get(&key).is_some_and(|h| h.id == id) {
            m.remove(&key);
        }
        rx.close();
    }

    /// Remove channel `id` if nothing is pending for it; true if removed.
    fn retire_if_idle(&self, key: Key, id: u64, pending: &AtomicUsize, rx: &mut mpsc::Receiver<Outgoing>) -> bool {
        let mut m = self.map();
        if pending.load(Ordering::Acquire) != 0 {
            return false;
        }
        if m.get(&key).is_some_and(|h| h.id == id) {
            m.remove(&key);
        }
        rx.close();
        true
    }

    /// Close the channels to `addr` over `transport` (every lane): each is
    /// forgotten here, so its task, once the messages already queued on it
    /// are sent, finds its queue ended and closes its connection
    /// gracefully (the path the idle timeout takes). A later message to
    /// `addr` opens a new channel. Returns how many channels were closed.
    pub(crate) fn close_to(&self, transport: Transport, addr: SocketAddr) -> usize {
        let mut m = self.map();
        let before = m.len();
        // Dropping the handle drops the map's sender; senders still in
        // `send` hold clones only until their message is queued.
        m.retain(|&(t, a, _), _| !(t == transport && a == addr));
        before - m.len()
    }

    /// Take the task handles (to wait for them at close).
    pub(crate) fn take_tasks(&self) -> Vec<tokio::task::JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Queue `outs` in order on the channel to `key`, opening it with
    /// `connect` if there is none. A run of messages registers with the
    /// channel once, under one lock of the table.
    pub(crate) async fn send<L, F, C>(env: &ChannelEnv, key: Key, outs: Vec<Outgoing>, connect: C)
    where
        L: Link,
        F: Future<Output = Result<(L, ClosedSignal), String>> + Send + 'static,
        C: FnOnce() -> F,
    {
        let mut outs = outs.into_iter();
        // A message handed back by a queue that closed.
        let mut held: Option<Outgoing> = None;
        let mut connect = Some(connect);
        // Messages are retried only if the channel they were queued on was
        // retired before taking them: they never reached a connection (at
        // most once holds), and whatever that channel held before them
        // either went out or failed (FIFO holds).
        for _ in 0..3 {
            let remaining = outs.len() + usize::from(held.is_some());
            if remaining == 0 {
                return;
            }
            let tx = {
                let mut m = env.channels.map();
                match m.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        let h = e.into_mut();
                        h.pending.fetch_add(remaining, Ordering::AcqRel);
                        h.tx.clone()
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let Some(connect) = connect.take() else { break };
                        let id = env.channels.next_id.fetch_add(1, Ordering::Relaxed);
                        let (tx, rx) = mpsc::channel(env.queue);
                        // What fits is queued before the channel's task
                        // exists: a connection refused at once then fails
                        // it with the reason (ConnectFailed) instead of
                        // closing the queue in front of it.
                        while let Some(out) = held.take().or_else(|| outs.next()) {
                            if let Err(full) = tx.try_send(out) {
                                held = Some(full.into_inner());
                                break;
                            }
                        }
                        let pending = Arc::new(AtomicUsize::new(remaining));
                        let task = tokio::spawn(run::<L, F>(env.clone(), key, id, rx, pending.clone(), connect()));
                        let mut tasks = env.channels.tasks.lock().unwrap_or_else(|e| e.into_inner());
                        tasks.retain(|t| !t.is_finished());
                        tasks.push(task);
                        e.insert(Handle { id, tx: tx.clone(), pending });
                        tx
                    }
                }
            };
            // Room for as many as the queue holds at once, reserved in one
            // go (issue 23: a run of small messages pays one semaphore
            // acquisition, not one per message). A closed queue consumes
            // nothing.
            let mut closed = false;
            loop {
                let left = outs.len() + usize::from(held.is_some());
                if left == 0 {
                    break;
                }
                match tx.reserve_many(left.min(env.queue)).await {
                    Ok(permits) => {
                        for permit in permits {
                            if let Some(out) = held.take().or_else(|| outs.next()) {
                                permit.send(out);
                            }
                        }
                    }
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
            if !closed {
                return;
            }
            if *env.shutdown.borrow() {
                break;
            }
            // Let the retired channel's task finish failing its queue.
            tokio::task::yield_now().await;
        }
        for out in held.into_iter().chain(outs) {
            bump(&env.counters.messages_failed);
            out.notifier.failed(FailReason::ConnectionLost("channel closed before the message was sent".into()));
        }
    }
}

fn fail_all(rx: &mut mpsc::Receiver<Outgoing>, counters: &Counters, reason: &FailReason) {
    while let Ok(out) = rx.try_recv() {
        bump(&counters.messages_failed);
        out.notifier.failed(reason.clone());
    }
}

/// Messages sent whose acknowledgement is awaited (only those with a
/// notification), with the cumulative transport byte count that covers
/// them.
struct Awaiting(VecDeque<(u64, Notifier)>);

impl Awaiting {
    fn release(&mut self, acked: u64) {
        while self.0.front().is_some_and(|(end, _)| *end <= acked) {
            if let Some((_, n)) = self.0.pop_front() {
                n.delivered();
            }
        }
    }
    fn fail(&mut self, counters: &Counters, reason: &FailReason) {
        for (_, n) in self.0.drain(..) {
            bump(&counters.messages_failed);
            n.failed(reason.clone());
        }
    }
}

/// How often acknowledgements are polled while notifications wait for
/// them (neither Braid's counters nor `TCP_INFO` notify changes).
const ACK_POLL: Duration = Duration::from_millis(2);

/// Book a message the link took: the transport's counters, the
/// cumulative transport byte count, the `sent` notification, and (when
/// the link reports acknowledgements) its place among those awaiting one.
fn record_sent<L: Link>(
    link: &L,
    tc: Option<&TransportCounters>,
    len: usize,
    mut notifier: Notifier,
    sent_bytes: &mut u64,
    awaiting: &mut Awaiting,
) {
    if let Some(tc) = tc {
        tc.on_sent(len);
    }
    *sent_bytes += link.cost(len);
    notifier.sent();
    // Asking the link is not free (Braid's counters take the endpoint's
    // lock): only for a notification that waits for it.
    if notifier.is_wanted() && link.acked().is_some() {
        awaiting.0.push_back((*sent_bytes, notifier));
    }
}

async fn run<L: Link, F>(
    env: ChannelEnv,
    key: Key,
    id: u64,
    mut rx: mpsc::Receiver<Outgoing>,
    pending: Arc<AtomicUsize>,
    connect: F,
) where
    F: Future<Output = Result<(L, ClosedSignal), String>> + Send + 'static,
{
    let (transport, addr, _) = key;
    let counters = env.counters.clone();
    let tc = counters.transport(transport);
    let opened = match tokio::time::timeout(env.connect_timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(format!("no connection within {:?}", env.connect_timeout)),
    };
    let (mut link, mut closed) = match opened {
        Ok(l) => l,
        Err(reason) => {
            tracing::debug!(%transport, %addr, %reason, "channel failed to open");
            bump(&counters.channel_failures);
            env.channels.retire(key, id, &mut rx);
            fail_all(&mut rx, &counters, &FailReason::ConnectFailed { transport, addr, reason });
            return;
        }
    };
    bump(&counters.channels_opened);
    tracing::debug!(%transport, %addr, "channel open");
    let mut shutdown = env.shutdown.clone();
    let mut sent_bytes: u64 = 0;
    let mut awaiting = Awaiting(VecDeque::new());
    let mut idle_deadline = Instant::now() + env.idle_timeout;
    let mut poll = tokio::time::interval(ACK_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let probe = link.ack_probe();
    let mut batch: Vec<Outgoing> = Vec::with_capacity(BATCH_FRAMES);
    loop {
        tokio::select! {
            biased;
            reason = &mut closed => {
                lost(&env, key, id, &mut rx, &mut awaiting, link.acked(), reason);
                return;
            }
            m = rx.recv() => {
                let Some(out) = m else { break };
                take_batch(out, &mut rx, &mut batch);
                pending.fetch_sub(batch.len(), Ordering::AcqRel);
                let frames: Vec<&crate::wire::Encoded> = batch.iter().map(|o| &o.frame).collect();
                let sent = send_polling(&mut link, &probe, &frames, &mut awaiting, &mut poll).await;
                drop(frames);
                match sent {
                    Ok(()) => {
                        for out in batch.drain(..) {
                            record_sent(&link, tc, out.frame.frame_len(), out.notifier, &mut sent_bytes, &mut awaiting);
                        }
                    }
                    Err(reason) => {
                        for out in batch.drain(..) {
                            bump(&counters.messages_failed);
                            out.notifier.failed(FailReason::ConnectionLost(reason.clone()));
                        }
                        lost(&env, key, id, &mut rx, &mut awaiting, link.acked(), reason);
                        return;
                    }
                }
                idle_deadline = Instant::now() + env.idle_timeout;
            }
            _ = poll.tick(), if !awaiting.0.is_empty() => {
                if let Some(a) = link.acked() {
                    awaiting.release(a);
                }
            }
            _ = tokio::time::sleep_until(idle_deadline) => {
                if env.channels.retire_if_idle(key, id, &pending, &mut rx) {
                    bump(&counters.channels_idle_closed);
                    tracing::debug!(%transport, %addr, "channel idle, closing");
                    break;
                }
                idle_deadline = Instant::now() + env.idle_timeout;
            }
            _ = crate::node::stopped(&mut shutdown) => {
                env.channels.retire(key, id, &mut rx);
                break;
            }
        }
    }
    // Closing: what is still queued (only possible at shutdown) is sent
    // first, then the connection is closed gracefully.
    while let Ok(out) = rx.try_recv() {
        let len = out.frame.frame_len();
        match link.send(&out.frame).await {
            Ok(()) => record_sent(&link, tc, len, out.notifier, &mut sent_bytes, &mut awaiting),
            Err(reason) => {
                bump(&counters.messages_failed);
                out.notifier.failed(FailReason::ConnectionLost(reason.clone()));
                fail_all(&mut rx, &counters, &FailReason::ConnectionLost(reason.clone()));
                awaiting.fail(&counters, &FailReason::ConnectionLost(reason));
                return;
            }
        }
    }
    let acked_before_close = link.acked();
    if link.close().await {
        awaiting.release(u64::MAX);
    } else {
        if let Some(a) = acked_before_close {
            awaiting.release(a);
        }
        awaiting.fail(&counters, &FailReason::ConnectionLost("connection ended before every message was acknowledged".into()));
    }
}

/// At most this many messages go to the transport in one hand-over.
/// A batch is what queued while the previous one was being written (no
/// message waits for a batch to fill: Nagle-free), so it grows only when
/// the application outpaces the transport; the bounds keep the time
/// between two checks of the connection's state, and TCP's gather copy,
/// small.
const BATCH_FRAMES: usize = 128;
/// At most this many frame bytes in one hand-over (a message larger than
/// this goes alone).
const BATCH_BYTES: usize = 64 << 10;

/// `first` and whatever else is queued behind it, within the bounds.
fn take_batch(first: Outgoing, rx: &mut mpsc::Receiver<Outgoing>, batch: &mut Vec<Outgoing>) {
    let mut bytes = first.frame.frame_len();
    batch.push(first);
    while batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
        match rx.try_recv() {
            Ok(out) => {
                bytes += out.frame.frame_len();
                batch.push(out);
            }
            Err(_) => break,
        }
    }
}

/// The connection is gone: what the peer acknowledged by then (`acked`,
/// the link's last count) is delivered, everything else fails. The count
/// is read once more here because acknowledgements are only polled every
/// [`ACK_POLL`]: a peer that closes right after reading everything would
/// otherwise turn messages it acknowledged into failures.
fn lost(
    env: &ChannelEnv,
    key: Key,
    id: u64,
    rx: &mut mpsc::Receiver<Outgoing>,
    awaiting: &mut Awaiting,
    acked: Option<u64>,
    reason: String,
) {
    let (transport, addr, _) = key;
    tracing::debug!(%transport, %addr, %reason, "channel lost");
    bump(&env.counters.channel_failures);
    env.channels.retire(key, id, rx);
    if let Some(a) = acked {
        awaiting.release(a);
    }
    let r = FailReason::ConnectionLost(reason);
    awaiting.fail(&env.counters, &r);
    fail_all(rx, &env.counters, &r);
}

/// Bytes of Braid's length prefix (a QUIC-style varint) for a message of
/// `len` bytes: what Braid's stream offsets count on top of the message.
pub(crate) fn braid_varint_len(len: usize) -> u64 {
    match len {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}
