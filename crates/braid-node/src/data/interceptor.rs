//! The DATA interceptor (seed 000 §IV-A, `DataNetwork`): sits between the
//! application and the node, passes every message through except those
//! whose transport is [`Transport::Data`], which it queues per
//! destination and releases with [`DataFlow`], each resolved to `Tcp` or
//! `Braid`.
//!
//! Released messages go on the node's bulk lane: per destination a TCP
//! and a Braid channel of their own, apart from the channels of the
//! application's messages. A control message sent over TCP to the same
//! destination while the stream runs (seed 000 Fig. 8) so waits neither
//! behind the stream's part of the TCP channel's queue, nor behind the
//! kernel's unsent bytes of the stream (`TCP_NOTSENT_LOWAT`), nor behind
//! the stream's retransmissions (TCP delivers in order: a ping written
//! after a lost data segment waits at least one more RTT, several in a
//! loss episode). What it still shares with the stream is the path's
//! bottleneck queue, which the bulk lane's Braid connections keep short:
//! they run BBR ([`crate::NodeConfig::bulk_congestion_control`]), where a
//! loss-based controller would keep it full. The paper's conclusion (§VI) asks for exactly this
//! separation of control and data channels; DATA gives it without the
//! application opening anything.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{
    DataFlow, EpisodeReport, FlowConfig, LearnerConfig, PatternSelection, RandomSelection, Ratio, RatioPolicy,
    SelectionPolicy, StaticRatio, TdLearner,
};
use crate::{Address, ConfigError, DataHeader, DeliveryStatus, Message, Node, SendError, Transport};

/// How the ratio is set.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyConfig {
    /// A fixed ratio.
    Static(Ratio),
    /// The TD(λ) learner.
    Learner(LearnerConfig),
}

/// How each message's transport is drawn from the ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectionConfig {
    /// Bernoulli per message, from a seed.
    Random {
        /// Seed of the draws.
        seed: u64,
    },
    /// The p / p+1 patterns.
    Pattern,
}

/// The interceptor's configuration. Default: the learner with the paper's
/// parameters, pattern selection, a window of 16 messages.
#[derive(Debug, Clone, PartialEq)]
pub struct DataConfig {
    /// Ratio policy.
    pub policy: PolicyConfig,
    /// Selection policy.
    pub selection: SelectionConfig,
    /// Window and reward.
    pub flow: FlowConfig,
    /// Data messages queued per destination before `send` waits.
    pub queue: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            policy: PolicyConfig::Learner(LearnerConfig::default()),
            selection: SelectionConfig::Pattern,
            flow: FlowConfig::default(),
            queue: 64,
        }
    }
}

impl DataConfig {
    /// Check every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.flow.validate()?;
        if self.queue == 0 {
            return Err(ConfigError { field: "queue", expected: "at least 1 message" });
        }
        if let PolicyConfig::Learner(l) = &self.policy {
            l.validate()?;
        }
        Ok(())
    }

    fn build(&self, stream: u64, now: braid_core::Instant) -> Result<DataFlow, ConfigError> {
        let policy: Box<dyn RatioPolicy> = match &self.policy {
            PolicyConfig::Static(r) => Box::new(StaticRatio::new(*r)),
            PolicyConfig::Learner(l) => {
                // Each stream explores with its own draws.
                Box::new(TdLearner::new(LearnerConfig { seed: l.seed.wrapping_add(stream), ..l.clone() })?)
            }
        };
        let selection: Box<dyn SelectionPolicy> = match self.selection {
            SelectionConfig::Random { seed } => Box::new(RandomSelection::new(policy.ratio(), seed.wrapping_add(stream))),
            SelectionConfig::Pattern => Box::new(PatternSelection::new(policy.ratio())),
        };
        DataFlow::new(policy, selection, self.flow, now)
    }
}

/// A data stream's statistics.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DataStats {
    /// Signed ratio in force (−1 TCP … 1 Braid).
    pub ratio: f64,
    /// Data messages sent over TCP.
    pub tcp_messages: u64,
    /// Data messages sent over Braid.
    pub braid_messages: u64,
    /// Body bytes taken by the transports.
    pub bytes: u64,
    /// Body bytes the receiving transports acknowledged (taken, where the
    /// transport cannot know).
    pub delivered_bytes: u64,
    /// Data messages that failed.
    pub failed: u64,
    /// The most recent episodes (at most 4096).
    pub episodes: Vec<EpisodeReport>,
}

const MAX_EPISODES: usize = 4096;

struct Stream<H> {
    tx: mpsc::Sender<Message<H>>,
    stats: watch::Receiver<DataStats>,
    pending: Arc<AtomicUsize>,
}

/// The DATA interceptor over a node.
///
/// ```no_run
/// use braid_node::data::{DataConfig, DataInterceptor};
/// use braid_node::{BasicAddress, BasicHeader, Message, Node, NodeConfig, Transport};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
/// let b: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
/// let data = DataInterceptor::new(a.clone(), DataConfig::default())?;
/// let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Data);
/// for _ in 0..100 {
///     data.send(Message::raw(h.clone(), vec![0u8; 65_000])).await?;
/// }
/// data.flush().await;
/// println!("{:?}", data.stats(b.local_addr()).map(|s| s.ratio));
/// # Ok(()) }
/// ```
pub struct DataInterceptor<H: DataHeader> {
    node: Node<H>,
    config: DataConfig,
    streams: Mutex<HashMap<SocketAddr, Stream<H>>>,
    next_stream: AtomicU64,
    epoch: tokio::time::Instant,
    flushed: Arc<tokio::sync::Notify>,
}

impl<H: DataHeader> DataInterceptor<H> {
    /// Intercept `node`'s data messages.
    pub fn new(node: Node<H>, config: DataConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(DataInterceptor {
            node,
            config,
            streams: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(0),
            epoch: tokio::time::Instant::now(),
            flushed: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// The node underneath.
    pub fn node(&self) -> &Node<H> {
        &self.node
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Stream<H>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send `msg`: through the DATA stream of its destination if its
    /// transport is `Data`, else straight to the node. Waits while the
    /// stream's queue is full.
    pub async fn send(&self, msg: Message<H>) -> Result<(), SendError> {
        if msg.header().transport() != Transport::Data {
            return self.node.send(msg).await;
        }
        let dst = msg.header().destination().as_socket();
        let (tx, pending) = {
            let mut streams = self.streams();
            if let std::collections::hash_map::Entry::Vacant(slot) = streams.entry(dst) {
                let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
                let now = braid_core::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64);
                let flow = self
                    .config
                    .build(id, now)
                    .map_err(|e| SendError::Encode { what: "data stream", reason: e.to_string() })?;
                let (tx, rx) = mpsc::channel(self.config.queue);
                let (stats_tx, stats) = watch::channel(DataStats { ratio: flow.ratio().signed(), ..Default::default() });
                let pending = Arc::new(AtomicUsize::new(0));
                tokio::spawn(run_stream(
                    self.node.clone(),
                    rx,
                    flow,
                    stats_tx,
                    self.epoch,
                    pending.clone(),
                    self.flushed.clone(),
                ));
                slot.insert(Stream { tx, stats, pending });
            }
            let s = &streams[&dst];
            s.pending.fetch_add(1, Ordering::AcqRel);
            (s.tx.clone(), s.pending.clone())
        };
        tx.send(msg).await.map_err(|_| {
            pending.fetch_sub(1, Ordering::AcqRel);
            SendError::Closed
        })
    }

    /// The statistics of the stream to `dst` (a node's base address).
    pub fn stats(&self, dst: SocketAddr) -> Option<DataStats> {
        self.streams().get(&dst).map(|s| s.stats.borrow().clone())
    }

    /// Wait until every data message handed to `send` was taken by its
    /// transport (or failed).
    pub async fn flush(&self) {
        loop {
            let notified = self.flushed.notified();
            let busy = self.streams().values().any(|s| s.pending.load(Ordering::Acquire) > 0);
            if !busy {
                return;
            }
            // Also poll: a notification may race with the check above.
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

/// What became of a released message.
enum Done {
    /// Taken by its transport (`ok`) or failed before.
    Sent { transport: Transport, ok: bool, bytes: u64, latency: Duration },
    /// Acknowledged by the receiving transport (or, where the transport
    /// cannot know, taken) `latency` after release: the bytes the reward
    /// counts.
    Delivered { bytes: u64, latency: Duration },
}

async fn run_stream<H: DataHeader>(
    node: Node<H>,
    mut rx: mpsc::Receiver<Message<H>>,
    mut flow: DataFlow,
    stats: watch::Sender<DataStats>,
    epoch: tokio::time::Instant,
    pending: Arc<AtomicUsize>,
    flushed: Arc<tokio::sync::Notify>,
) {
    let to_core = |t: tokio::time::Instant| braid_core::Instant::from_nanos((t - epoch).as_nanos() as u64);
    let from_core = |t: braid_core::Instant| epoch + t.since_epoch();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut backlog: Option<Message<H>> = None;
    let mut input_open = true;
    // Since when the window has had room and nothing to send.
    let mut idle_since: Option<tokio::time::Instant> = None;
    let finish = |ok: bool, pending: &AtomicUsize| {
        if pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            flushed.notify_waiters();
        }
        ok
    };
    loop {
        // Release while the window has room.
        while flow.can_release() {
            let msg = match backlog.take() {
                Some(m) => m,
                None => match rx.try_recv() {
                    Ok(m) => m,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        input_open = false;
                        break;
                    }
                },
            };
            if let Some(since) = idle_since.take() {
                flow.add_idle(since.elapsed());
            }
            let now = tokio::time::Instant::now();
            let mut msg = msg;
            let t = flow.release(to_core(now));
            msg.header_mut().set_transport(t);
            let bytes = match msg.encode_body() {
                Ok(n) => n as u64,
                Err(e) => {
                    tracing::warn!(error = %e, "data message dropped");
                    flow.on_failed(t);
                    finish(false, &pending);
                    stats.send_modify(|s| s.failed += 1);
                    continue;
                }
            };
            match node.send_notify_bulk(msg).await {
                Ok(mut notify) => {
                    stats.send_modify(|s| match t {
                        Transport::Braid => s.braid_messages += 1,
                        _ => s.tcp_messages += 1,
                    });
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        let ok = notify.sent().await.is_ok();
                        let _ = done.send(Done::Sent { transport: t, ok, bytes, latency: now.elapsed() });
                        // `Sent` is final where the transport cannot
                        // confirm delivery: it counts as delivered then.
                        if ok && matches!(notify.outcome().await, DeliveryStatus::Delivered | DeliveryStatus::Sent) {
                            let _ = done.send(Done::Delivered { bytes, latency: now.elapsed() });
                        }
                    });
                }
                Err(e) => {
                    // A closing node refuses everything still queued:
                    // expected at shutdown, not worth a warning each.
                    if e == SendError::Closed {
                        tracing::debug!("data message refused: node closed");
                    } else {
                        tracing::warn!(error = %e, "data message refused by the node");
                    }
                    flow.on_failed(t);
                    finish(false, &pending);
                    stats.send_modify(|s| s.failed += 1);
                }
            }
        }
        if flow.can_release() && backlog.is_none() && idle_since.is_none() && input_open {
            idle_since = Some(tokio::time::Instant::now());
        }
        if !input_open && flow.in_flight() == 0 && backlog.is_none() {
            return;
        }
        let deadline = from_core(flow.deadline());
        tokio::select! {
            Some(d) = done_rx.recv() => match d {
                Done::Sent { transport, ok: true, bytes, latency } => {
                    flow.on_sent(transport, bytes, latency);
                    stats.send_modify(|s| s.bytes += bytes);
                    finish(true, &pending);
                }
                Done::Sent { transport, ok: false, .. } => {
                    flow.on_failed(transport);
                    stats.send_modify(|s| s.failed += 1);
                    finish(false, &pending);
                }
                Done::Delivered { bytes, latency } => {
                    flow.on_delivered(bytes, latency);
                    stats.send_modify(|s| s.delivered_bytes += bytes);
                }
            },
            m = rx.recv(), if flow.can_release() && backlog.is_none() && input_open => match m {
                Some(m) => backlog = Some(m),
                None => input_open = false,
            },
            _ = tokio::time::sleep_until(deadline) => {
                let now = tokio::time::Instant::now();
                if let Some(since) = idle_since {
                    flow.add_idle(now - since);
                    idle_since = Some(now);
                }
                if let Some(rep) = flow.on_time(to_core(now)) {
                    stats.send_modify(|s| {
                        s.ratio = rep.next_ratio;
                        if s.episodes.len() >= MAX_EPISODES {
                            s.episodes.remove(0);
                        }
                        s.episodes.push(rep);
                    });
                }
            }
        }
    }
}
