//! The sender pipeline (seed 002 §3, Fig. 2): reader workers fill the staging area with chunks
//! read from the source storage, network workers each drive one stream and take chunks from the
//! staging area, and once per probe interval the tuner (Marlin per stage, or the Falcon-style
//! shared count) sets each pool's size from the stages' measured throughputs (see `pool` for the
//! busy-time definition). The write stage runs on the receiver; its state arrives on the control
//! stream and its worker count goes back there.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::buffer::BufferPool;
use crate::emulate::Throttle;
use crate::error::{check_interval, EmulatedStorage, IntervalSample, Progress, ProgressFn, TransferError};
use crate::manifest::{Entry, EntryKind, Manifest};
use crate::plan::{transfer_id, wire_entries, Plan, DEFAULT_BUNDLE_THRESHOLD};
use crate::pool::{cpu_seconds, BusyMeter, WorkerSlots};
use crate::protocol::{
    read_frame, send_message, write_chunk, ChunkHeader, Frame, Hello, Message, ProtocolError, MAX_CHUNK_SIZE,
    PROTOCOL_VERSION,
};
use crate::staging::{Chunk, StagingArea, StagingConfig, DEFAULT_CHUNK_SIZE};
use crate::transport::{ByteStream, Connection, Connector, LossCounters, StreamRole};
use crate::tuner::{Concurrency, FalconTuner, MarlinTuner, Observation, Stage, StageObservations, Tuner, TunerConfig};

/// Which tuner sets the worker counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TunerKind {
    /// Marlin: each stage tuned on its own (the default).
    #[default]
    Marlin,
    /// Falcon-style: one shared count for all stages (the ablation).
    Falcon,
}

/// Stages pinned to a fixed worker count (`--read N --net N --write N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pinned {
    /// Readers.
    pub read: Option<usize>,
    /// Network streams.
    pub network: Option<usize>,
    /// Receiver writers.
    pub write: Option<usize>,
}

/// What `braid send` controls.
#[derive(Clone)]
pub struct SendOptions {
    /// Bytes per chunk (1..=32 MiB). Default 4 MiB.
    pub chunk_size: u64,
    /// Files below this are bundled. Default 64 KiB.
    pub bundle_threshold: u64,
    /// Staging cap in bytes; `None` for the default (min(30% of MemAvailable, 2 GiB)).
    pub staging_memory: Option<u64>,
    /// Marlin or Falcon.
    pub tuner: TunerKind,
    /// Tuner parameters (K, B, limits…).
    pub tuner_config: TunerConfig,
    /// Pinned stages.
    pub pinned: Pinned,
    /// Probe interval. Default 3 s (the paper's).
    pub probe_interval: Duration,
    /// Total send rate limit in bytes/s.
    pub bwlimit: Option<f64>,
    /// Emulated source storage.
    pub emulate_read: Option<EmulatedStorage>,
    /// Called once per probe interval.
    pub progress: Option<ProgressFn>,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            bundle_threshold: DEFAULT_BUNDLE_THRESHOLD,
            staging_memory: None,
            tuner: TunerKind::Marlin,
            tuner_config: TunerConfig::default(),
            pinned: Pinned::default(),
            probe_interval: Duration::from_secs(3),
            bwlimit: None,
            emulate_read: None,
            progress: None,
        }
    }
}

impl std::fmt::Debug for SendOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendOptions")
            .field("chunk_size", &self.chunk_size)
            .field("bundle_threshold", &self.bundle_threshold)
            .field("staging_memory", &self.staging_memory)
            .field("tuner", &self.tuner)
            .field("pinned", &self.pinned)
            .field("probe_interval", &self.probe_interval)
            .field("bwlimit", &self.bwlimit)
            .field("emulate_read", &self.emulate_read)
            .finish_non_exhaustive()
    }
}

/// What a finished send did.
#[derive(Debug, Clone, PartialEq)]
pub struct SendSummary {
    /// Payload bytes put on the data streams (re-fetched chunks included).
    pub bytes_sent: u64,
    /// Bytes on the data streams including framing.
    pub wire_bytes: u64,
    /// Payload bytes the receiver already had (resumed, not sent).
    pub resumed_bytes: u64,
    /// Payload bytes of the transfer (holes excluded).
    pub total_bytes: u64,
    /// Files in the transfer.
    pub files: u64,
    /// Entries of any kind.
    pub entries: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// `bytes_sent / seconds`, bytes/s.
    pub throughput_bps: f64,
    /// One sample per probe interval.
    pub samples: Vec<IntervalSample>,
    /// Chunks sent again because the receiver's hash check failed.
    pub refetched_chunks: u64,
    /// Most bytes held in the sender's staging area at once.
    pub peak_staged_bytes: u64,
    /// CPU seconds of this process during the transfer.
    pub cpu_seconds: f64,
}

/// Reader work: plan indices still to read, refetches first.
#[derive(Debug, Default)]
struct ReadQueue {
    refetch: VecDeque<usize>,
    todo: VecDeque<usize>,
}

struct Shared {
    plan: Plan,
    sources: Vec<Entry>,
    queue: Mutex<ReadQueue>,
    work: Notify,
    done: AtomicBool,
    staging: StagingArea,
    buffers: Arc<BufferPool>,
    read_slots: WorkerSlots,
    net_slots: WorkerSlots,
    read_meter: BusyMeter,
    net_meter: BusyMeter,
    retransmitted: AtomicU64,
    segments: AtomicU64,
    /// The smallest round-trip time any stream has seen, µs (`u64::MAX` before one): the path's
    /// base RTT, shared because the streams share the path and a stream opened while a queue
    /// stands never sees it itself.
    base_rtt_us: AtomicU64,
    /// Sum of the streams' queuing delays (smoothed RTT minus base RTT) sampled after each chunk,
    /// µs, and the number of samples: the network stage's standing queue (see the tuner's "A full
    /// bottleneck").
    queue_us_sum: AtomicU64,
    queue_samples: AtomicU64,
    wire_bytes: AtomicU64,
    emulate_read: Option<Throttle>,
    bwlimit: Option<Throttle>,
    connector: Arc<dyn Connector>,
    /// Streams connected ahead of their workers.
    warm: WarmStreams,
    transfer_id: [u8; 32],
    errors: mpsc::UnboundedSender<TransferError>,
}

/// Data streams whose connection started before the session did; each network worker takes
/// one if any is left, else connects its own. Unused ones are aborted or closed with `send`.
struct WarmStreams {
    pending: Mutex<Vec<tokio::task::JoinHandle<io::Result<Connection>>>>,
}

impl WarmStreams {
    fn connect(connector: &Arc<dyn Connector>, streams: usize) -> WarmStreams {
        let pending = (0..streams)
            .map(|_| {
                let connector = Arc::clone(connector);
                tokio::spawn(async move { connector.connect(StreamRole::Data).await })
            })
            .collect();
        WarmStreams { pending: Mutex::new(pending) }
    }

    /// A stream for a new network worker.
    async fn take_or_connect(&self, connector: &dyn Connector) -> Result<Connection, TransferError> {
        let warm = self.pending.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let connected = match warm {
            Some(handle) => handle.await.map_err(|e| TransferError::Remote(format!("connect task failed: {e}")))?,
            None => connector.connect(StreamRole::Data).await,
        };
        connected.map_err(TransferError::Connect)
    }
}

impl Drop for WarmStreams {
    fn drop(&mut self) {
        for handle in self.pending.get_mut().unwrap_or_else(PoisonError::into_inner).drain(..) {
            handle.abort();
        }
    }
}

impl Shared {
    async fn next_work(&self) -> Option<usize> {
        loop {
            let notified = self.work.notified();
            if self.done.load(Ordering::Acquire) {
                return None;
            }
            {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(i) = queue.refetch.pop_front().or_else(|| queue.todo.pop_front()) {
                    return Some(i);
                }
            }
            notified.await;
        }
    }
}

/// Sends `sources` (files and directories, recursively) through streams from `connector`.
///
/// Returns when the receiver confirms that everything is written and verified.
pub async fn send<P: AsRef<Path>>(
    sources: &[P],
    connector: Arc<dyn Connector>,
    options: SendOptions,
) -> Result<SendSummary, TransferError> {
    let started = Instant::now();
    let cpu_start = cpu_seconds();
    check_interval(options.probe_interval)?;
    if !(1..=MAX_CHUNK_SIZE).contains(&options.chunk_size) {
        return Err(TransferError::Option {
            field: "chunk_size",
            value: options.chunk_size.to_string(),
            allowed: "1 byte ..= 32 MiB",
        });
    }
    let staging = match options.staging_memory {
        Some(cap) => StagingConfig::new(options.chunk_size, cap)?,
        None => StagingConfig::new(options.chunk_size, StagingConfig::from_system()?.cap())?,
    };
    let emulate_read = options.emulate_read.map(|e| e.throttle()).transpose()?;
    let bwlimit = options.bwlimit.map(|r| Throttle::new(r, Some(r))).transpose()?;
    let mut tuner = build_tuner(&options)?;

    // The control stream is connected (a round trip, two with TLS) while the sources are walked,
    // not after: the walk of a large tree and the handshake overlap. A failed walk drops it.
    let mut connecting = {
        let connector = Arc::clone(&connector);
        tokio::spawn(async move { options_connect(&*connector, StreamRole::Control).await })
    };
    let _abort_connecting = AbortOnDrop(connecting.abort_handle());
    // So are the first network workers' streams: their handshakes (as long as the control
    // stream's) overlap it and the Hello/Resume exchange instead of following them, and data
    // flows two round trips sooner. A stream announces itself (Attach) only once the receiver's
    // session exists, when its worker takes it.
    let warm = WarmStreams::connect(&connector, tuner.concurrency().network);
    let paths: Vec<PathBuf> = sources.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let probe_from = options.bundle_threshold;
    let manifest = tokio::task::spawn_blocking(move || Manifest::build_probing(&paths, probe_from))
        .await
        .map_err(|e| TransferError::Remote(format!("manifest task failed: {e}")))??;
    let entries = wire_entries(&manifest);
    let plan = Plan::new(&entries, options.chunk_size, options.bundle_threshold)?;
    let id = transfer_id(&entries, options.chunk_size, options.bundle_threshold);
    let files = manifest.entries.iter().filter(|e| matches!(e.kind, EntryKind::File { .. })).count() as u64;
    let entry_count = entries.len() as u64;

    let control = (&mut connecting)
        .await
        .map_err(|e| TransferError::Remote(format!("connect task failed: {e}")))??;
    let (mut control_rd, mut control_wr) = tokio::io::split(control);
    let start = tuner.concurrency();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        transfer_id: id,
        chunk_size: options.chunk_size,
        bundle_threshold: options.bundle_threshold,
        probe_interval_ms: u64::try_from(options.probe_interval.as_millis()).unwrap_or(u64::MAX),
        writers: u32::try_from(start.write).unwrap_or(u32::MAX),
        entries,
    };
    send_message(&mut control_wr, &Message::Hello(hello)).await?;
    let have = match read_frame(&mut control_rd).await? {
        Some(Frame::Control(Message::Resume { have })) => have,
        Some(Frame::Control(Message::Error { message })) => return Err(TransferError::Remote(message)),
        Some(other) => return Err(ProtocolError::Unexpected { expected: "Resume", got: other.name() }.into()),
        None => return Err(TransferError::Disconnected),
    };
    let mut skip = vec![false; plan.chunks.len()];
    for i in have {
        if let Some(s) = usize::try_from(i).ok().and_then(|i| skip.get_mut(i)) {
            *s = true;
        }
    }
    let resumed_bytes: u64 = plan.chunks.iter().zip(&skip).filter(|(_, &s)| s).map(|(c, _)| c.len).sum();
    let total_bytes = plan.total_bytes();
    let todo: VecDeque<usize> = (0..plan.chunks.len()).filter(|&i| !skip[i]).collect();

    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        plan,
        sources: manifest.entries,
        queue: Mutex::new(ReadQueue { refetch: VecDeque::new(), todo }),
        work: Notify::new(),
        done: AtomicBool::new(false),
        staging: StagingArea::new(staging),
        buffers: crate::buffer::chunk_pool(staging.chunk_size(), staging.cap()),
        read_slots: WorkerSlots::new(0),
        net_slots: WorkerSlots::new(0),
        read_meter: BusyMeter::default(),
        net_meter: BusyMeter::default(),
        retransmitted: AtomicU64::new(0),
        segments: AtomicU64::new(0),
        base_rtt_us: AtomicU64::new(u64::MAX),
        queue_us_sum: AtomicU64::new(0),
        queue_samples: AtomicU64::new(0),
        wire_bytes: AtomicU64::new(0),
        emulate_read,
        bwlimit,
        connector,
        warm,
        transfer_id: id,
        errors: errors_tx,
    });

    let mut tasks = JoinSet::new();
    apply(&shared, &mut tasks, start);
    // The receiver's session starts with nothing written, about now: its first report already
    // gives a goodput, not only its second.
    let writer_state = Arc::new(Mutex::new(WriterReport { written: Some((0, Instant::now())), ..WriterReport::default() }));
    let refetched = Arc::new(AtomicU64::new(0));
    let files_done = Arc::new(AtomicU64::new(0));
    let mut control_task = {
        let (shared, writer_state, refetched, files_done) =
            (Arc::clone(&shared), Arc::clone(&writer_state), Arc::clone(&refetched), Arc::clone(&files_done));
        tokio::spawn(async move {
            control_loop(&mut control_rd, &shared, &writer_state, &refetched, &files_done).await
        })
    };
    // The control task must not outlive `send` (a cancelled send leaves nothing running).
    let _abort_control = AbortOnDrop(control_task.abort_handle());

    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + options.probe_interval, options.probe_interval);
    let mut concurrency = start;
    let mut last_tick = Instant::now();
    let mut last_sent = 0u64;
    let mut last_loss = (0u64, 0u64);
    let mut last_queue = (0u64, 0u64);
    let result = loop {
        tokio::select! {
            outcome = &mut control_task => {
                break outcome.unwrap_or_else(|e| Err(TransferError::Remote(format!("control task failed: {e}"))));
            }
            Some(error) = errors_rx.recv() => {
                let _ = send_message(&mut control_wr, &Message::Error { message: error.to_string() }).await;
                break Err(error);
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                let wall = now.duration_since(last_tick).as_secs_f64();
                last_tick = now;
                let read_workers = shared.read_slots.target();
                let net_workers = shared.net_slots.target();
                let read = shared.read_meter.take_sample();
                let network = shared.net_meter.take_sample();
                let (retrans, segs) = (shared.retransmitted.load(Ordering::Acquire), shared.segments.load(Ordering::Acquire));
                let loss = ratio(retrans - last_loss.0, segs - last_loss.1);
                last_loss = (retrans, segs);
                let queue = (shared.queue_us_sum.load(Ordering::Acquire), shared.queue_samples.load(Ordering::Acquire));
                let queuing = standing_queue(queue.0 - last_queue.0, queue.1 - last_queue.1, shared.base_rtt_us.load(Ordering::Acquire));
                last_queue = queue;
                let write = writer_state.lock().unwrap_or_else(PoisonError::into_inner).take(concurrency.write);
                let sent = shared.net_meter.total_bytes();
                samples.push(IntervalSample {
                    elapsed: started.elapsed().as_secs_f64(),
                    concurrency: Concurrency { read: read_workers, network: net_workers, write: write.writers },
                    read_bps: read.throughput,
                    network_bps: network.throughput,
                    write_bps: write.throughput,
                    loss,
                    // What the receiver wrote, once it has reported twice: bytes handed to the
                    // sockets run ahead by whatever their buffers hold (megabytes over many
                    // streams), which made short runs look faster than the link.
                    goodput_bps: write.delivered.unwrap_or((sent - last_sent) as f64 / wall.max(1e-9)),
                });
                last_sent = sent;
                let observations = StageObservations {
                    read: Observation { workers: read_workers, throughput: read.throughput, loss: 0.0, in_use: Some(read.in_use), queuing: None },
                    // A stream the receiver is not reading (its writers have enough) blocks its
                    // worker in a send: busy, but waiting for the writers, not for the network.
                    network: Observation {
                        workers: net_workers,
                        throughput: network.throughput,
                        loss,
                        in_use: Some((network.in_use - write.held_streams).max(0.0)),
                        queuing,
                    },
                    // A report already scored (the receiver's tick has not come round) measures
                    // nothing new: offered under a worker count the tuner does not hold, it is
                    // not scored twice (see `WriterReport`).
                    write: Observation {
                        workers: if write.fresh { write.writers } else { usize::MAX },
                        throughput: write.throughput,
                        loss: 0.0,
                        in_use: write.in_use,
                        queuing: None,
                    },
                };
                let next = match tuner.observe(&observations) {
                    Ok(next) => with_pins(next, options.pinned),
                    Err(e) => break Err(e.into()),
                };
                apply(&shared, &mut tasks, next);
                if next.write != concurrency.write {
                    let writers = u32::try_from(next.write).unwrap_or(u32::MAX);
                    if let Err(e) = send_message(&mut control_wr, &Message::SetWriters { writers }).await {
                        break Err(e.into());
                    }
                }
                concurrency = next;
                if let Some(progress) = &options.progress {
                    progress(&Progress {
                        elapsed: started.elapsed().as_secs_f64(),
                        bytes_done: sent,
                        bytes_total: total_bytes - resumed_bytes,
                        files_done: files_done.load(Ordering::Acquire),
                        files_total: files,
                        concurrency: next,
                    });
                }
            }
        }
    };
    shared.done.store(true, Ordering::Release);
    shared.work.notify_waiters();
    shared.staging.close();
    tasks.abort_all();
    let _ = control_wr.shutdown().await;
    result?;
    let seconds = started.elapsed().as_secs_f64();
    let bytes_sent = shared.net_meter.total_bytes();
    Ok(SendSummary {
        bytes_sent,
        wire_bytes: shared.wire_bytes.load(Ordering::Acquire),
        resumed_bytes,
        total_bytes,
        files,
        entries: entry_count,
        seconds,
        throughput_bps: bytes_sent as f64 / seconds.max(1e-9),
        samples,
        refetched_chunks: refetched.load(Ordering::Acquire),
        peak_staged_bytes: shared.staging.peak_bytes(),
        cpu_seconds: cpu_seconds() - cpu_start,
    })
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64).clamp(0.0, 1.0)
    }
}

async fn options_connect(connector: &dyn Connector, role: StreamRole) -> Result<Box<dyn ByteStream>, TransferError> {
    Ok(connector.connect(role).await.map_err(TransferError::Connect)?.stream)
}

fn build_tuner(options: &SendOptions) -> Result<Tuner, TransferError> {
    let tuner = match options.tuner {
        TunerKind::Marlin => {
            let mut marlin = MarlinTuner::new(options.tuner_config.clone())?;
            for (stage, pin) in [
                (Stage::Read, options.pinned.read),
                (Stage::Network, options.pinned.network),
                (Stage::Write, options.pinned.write),
            ] {
                if let Some(n) = pin {
                    marlin = marlin.pin(stage, n)?;
                }
            }
            Tuner::Marlin(marlin)
        }
        TunerKind::Falcon => {
            for pin in [options.pinned.read, options.pinned.network, options.pinned.write].into_iter().flatten() {
                if pin == 0 {
                    return Err(TransferError::Option { field: "pinned workers", value: "0".into(), allowed: ">= 1" });
                }
            }
            Tuner::Falcon(FalconTuner::new(options.tuner_config.clone())?)
        }
    };
    Ok(tuner)
}

/// Falcon's shared count, with pinned stages overriding it.
fn with_pins(c: Concurrency, pinned: Pinned) -> Concurrency {
    Concurrency {
        read: pinned.read.unwrap_or(c.read),
        network: pinned.network.unwrap_or(c.network),
        write: pinned.write.unwrap_or(c.write),
    }
}

fn apply(shared: &Arc<Shared>, tasks: &mut JoinSet<()>, c: Concurrency) {
    for slot in shared.read_slots.set_target(c.read) {
        let shared = Arc::clone(shared);
        tasks.spawn(async move {
            if let Err(e) = reader(&shared, slot).await {
                let _ = shared.errors.send(e);
            }
            shared.read_slots.release(slot);
        });
    }
    for slot in shared.net_slots.set_target(c.network) {
        let shared = Arc::clone(shared);
        tasks.spawn(async move {
            if let Err(e) = network_worker(&shared, slot).await {
                if !shared.done.load(Ordering::Acquire) {
                    let _ = shared.errors.send(e);
                }
            }
            shared.net_slots.release(slot);
        });
    }
}

/// The receiver's latest report of its write stage.
///
/// The receiver measures on its own ticks, which are not aligned with the sender's; each report is
/// scored once. Scoring the same report on two sender ticks would credit one interval's
/// throughput to whatever setting the tuner moved to in between, and the write search then
/// climbs on stale numbers (it settled at twice the optimum in the engine tests before this).
#[derive(Debug, Default, Clone, Copy)]
struct WriterReport {
    /// The receiver's writer count while it measured; `None` before the first report.
    writers: Option<usize>,
    /// Bytes/s over the writers' busy time.
    throughput: f64,
    /// Mean number of writers busy; `None` before the first report.
    in_use: Option<f64>,
    /// Not yet used by the tuner.
    fresh: bool,
    /// Bytes written so far and when the report arrived (before the first report: none, when
    /// the transfer started).
    written: Option<(u64, Instant)>,
    /// The same of the report before.
    written_before: Option<(u64, Instant)>,
    /// Mean number of data streams the receiver left unread for its writers' sake.
    held_streams: f64,
}

/// One receiver report as the write stage's tuner reads it.
struct WriteStage {
    writers: usize,
    throughput: f64,
    in_use: Option<f64>,
    fresh: bool,
    /// Bytes/s written between the latest two reports.
    delivered: Option<f64>,
    held_streams: f64,
}

impl WriterReport {
    /// This tick's report, marking it used; `assumed` stands in for the writer count before the
    /// first report.
    fn take(&mut self, assumed: usize) -> WriteStage {
        let fresh = std::mem::replace(&mut self.fresh, false);
        let delivered = match (self.written_before, self.written) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => Some(b1.saturating_sub(b0) as f64 / t1.duration_since(t0).as_secs_f64()),
            _ => None,
        };
        WriteStage {
            writers: self.writers.unwrap_or(assumed),
            throughput: self.throughput,
            in_use: self.in_use,
            fresh,
            delivered,
            held_streams: self.held_streams,
        }
    }
}

async fn control_loop<R: tokio::io::AsyncRead + Unpin>(
    control: &mut R,
    shared: &Shared,
    writer_state: &Mutex<WriterReport>,
    refetched: &AtomicU64,
    files_done: &AtomicU64,
) -> Result<(), TransferError> {
    loop {
        match read_frame(control).await? {
            Some(Frame::Control(Message::Refetch { file, offset })) => {
                let index = shared.plan.find(file, offset).ok_or_else(|| ProtocolError::Unexpected {
                    expected: "a refetch of a planned chunk",
                    got: format!("Refetch of file {file} offset {offset}"),
                })?;
                refetched.fetch_add(1, Ordering::AcqRel);
                shared.queue.lock().unwrap_or_else(PoisonError::into_inner).refetch.push_back(index);
                shared.work.notify_one();
            }
            Some(Frame::Control(Message::WriterState { writers, throughput, busy_writers, written_bytes, held_streams, .. })) => {
                let throughput = if throughput.is_finite() && throughput >= 0.0 { throughput } else { 0.0 };
                let in_use = (busy_writers.is_finite() && busy_writers >= 0.0).then_some(busy_writers);
                let held_streams = if held_streams.is_finite() && held_streams >= 0.0 { held_streams } else { 0.0 };
                let mut report = writer_state.lock().unwrap_or_else(PoisonError::into_inner);
                let written_before = report.written;
                *report = WriterReport {
                    writers: Some(writers as usize),
                    throughput,
                    in_use,
                    fresh: true,
                    written: Some((written_bytes, Instant::now())),
                    written_before,
                    held_streams,
                };
            }
            Some(Frame::Control(Message::FilesDone { files })) => {
                files_done.fetch_add(files.len() as u64, Ordering::AcqRel);
            }
            Some(Frame::Control(Message::Done)) => return Ok(()),
            Some(Frame::Control(Message::Error { message })) => return Err(TransferError::Remote(message)),
            Some(other) => {
                return Err(ProtocolError::Unexpected { expected: "a receiver message", got: other.name() }.into())
            }
            None => return Err(TransferError::Disconnected),
        }
    }
}

async fn reader(shared: &Arc<Shared>, slot: usize) -> Result<(), TransferError> {
    let mut throttle = shared.emulate_read.as_ref().map(Throttle::worker);
    while shared.read_slots.keep(slot) {
        // Waiting here is not busy time, so the read stage's measured throughput is unchanged.
        shared.staging.wait_queued_below(read_ahead(shared.net_slots.target())).await;
        let Some(index) = shared.next_work().await else { return Ok(()) };
        let busy = shared.read_meter.start();
        let started = tokio::time::Instant::now();
        let worker_shared = Arc::clone(shared);
        let chunk = tokio::task::spawn_blocking(move || read_chunk(&worker_shared, index))
            .await
            .map_err(|e| TransferError::Remote(format!("reader task failed: {e}")))??;
        let len = chunk.data.len() as u64;
        if let Some(t) = throttle.as_mut() {
            t.consume_since(len, started).await;
        }
        busy.done(len);
        if shared.staging.push(chunk).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Chunks the readers keep queued ahead of `network` network workers: one waiting behind the
/// chunk each worker is sending, so none waits for a reader, and one more for the readers' own
/// jitter. More read-ahead buys nothing once the network is the bottleneck (every queued chunk
/// waits its turn anyway) and costs a chunk of memory each; when reading is the bottleneck the
/// queue stays short whatever the bound.
fn read_ahead(network: usize) -> usize {
    network.max(1) + 1
}

/// Reads one planned chunk's segments and hashes them; checks that no source changed.
fn read_chunk(shared: &Shared, index: usize) -> Result<Chunk, TransferError> {
    let planned = &shared.plan.chunks[index];
    let mut data = shared.buffers.take_len(planned.len as usize);
    let mut at = 0usize;
    // A bundle's files mostly share a directory: it is opened once and each file relative to it,
    // not looked up from the root again per file (path walks were a fifth of the sender's CPU on
    // a tree of small files).
    let mut dir: Option<(&Path, OwnedFd)> = None;
    for segment in &planned.segments {
        let entry = &shared.sources[segment.file as usize];
        let path = &entry.source;
        let file = open_source(path, planned.bundle, &mut dir).map_err(|e| TransferError::io(path, e))?;
        let buf = &mut data[at..at + segment.len as usize];
        file.read_exact_at(buf, segment.offset).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => TransferError::SourceChanged { path: path.clone() },
            _ => TransferError::io(path, e),
        })?;
        let meta = file.metadata().map_err(|e| TransferError::io(path, e))?;
        let EntryKind::File { size, .. } = entry.kind else {
            return Err(TransferError::SourceChanged { path: path.clone() });
        };
        if meta.len() != size || meta.mtime() != entry.mtime_sec || meta.mtime_nsec() != i64::from(entry.mtime_nsec) {
            return Err(TransferError::SourceChanged { path: path.clone() });
        }
        at += segment.len as usize;
    }
    let first = planned.segments[0];
    Ok(Chunk::new(first.file, first.offset, shared.buffers.bytes(data)))
}

/// Opens a source file for reading; a bundle's files through their directory, kept open in
/// `dir` for the next file of the same directory.
fn open_source<'a>(path: &'a Path, bundle: bool, dir: &mut Option<(&'a Path, OwnedFd)>) -> std::io::Result<File> {
    use rustix::fs::{openat, Mode, OFlags};
    let (Some(parent), Some(name), true) = (path.parent(), path.file_name(), bundle) else {
        return File::open(path);
    };
    if dir.as_ref().is_none_or(|(d, _)| *d != parent) {
        // An empty parent is the current directory.
        let at = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        let fd = rustix::fs::open(at, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        *dir = Some((parent, fd));
    }
    let Some((_, fd)) = dir.as_ref() else { return File::open(path) };
    Ok(File::from(openat(fd, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?))
}

async fn network_worker(shared: &Arc<Shared>, slot: usize) -> Result<(), TransferError> {
    let connection = shared.warm.take_or_connect(&*shared.connector).await?;
    let probe = connection.loss;
    let mut stream = connection.stream;
    send_message(&mut stream, &Message::Attach { transfer_id: shared.transfer_id }).await?;
    let mut throttle = shared.bwlimit.as_ref().map(Throttle::worker);
    let mut last = probe.as_ref().and_then(|p| p.counters()).unwrap_or_default();
    while shared.net_slots.keep(slot) {
        let Some(staged) = shared.staging.pop().await else { break };
        let busy = shared.net_meter.start();
        if let Some(t) = throttle.as_mut() {
            t.consume(staged.data.len() as u64).await;
        }
        let header = ChunkHeader {
            file: staged.file,
            offset: staged.offset,
            len: staged.data.len() as u64,
            hash: *staged.hash.as_bytes(),
        };
        let wire = match write_chunk(&mut stream, &header, &staged.data).await {
            Ok(wire) => wire,
            Err(e) => {
                // Give the chunk back so another stream sends it.
                requeue(shared, &header);
                return Err(e.into());
            }
        };
        stream.flush().await.map_err(ProtocolError::from)?;
        busy.done(header.len);
        shared.wire_bytes.fetch_add(wire, Ordering::AcqRel);
        if let Some(now) = probe.as_ref().and_then(|p| p.counters()) {
            record_stream_counters(shared, last, now);
            last = now;
        }
    }
    let _ = stream.shutdown().await;
    Ok(())
}

fn requeue(shared: &Shared, header: &ChunkHeader) {
    if let Some(index) = shared.plan.find(header.file, header.offset) {
        shared.queue.lock().unwrap_or_else(PoisonError::into_inner).refetch.push_back(index);
        shared.work.notify_one();
    }
}

/// Adds a stream's retransmissions and segments since `before` to the transfer's, and samples its
/// standing queue against the transfer's base RTT.
fn record_stream_counters(shared: &Shared, before: LossCounters, now: LossCounters) {
    shared.retransmitted.fetch_add(now.retransmitted.saturating_sub(before.retransmitted), Ordering::AcqRel);
    shared.segments.fetch_add(now.sent.saturating_sub(before.sent), Ordering::AcqRel);
    if now.min_rtt_us > 0 && now.smoothed_rtt_us > 0 {
        let base = shared.base_rtt_us.fetch_min(u64::from(now.min_rtt_us), Ordering::AcqRel).min(u64::from(now.min_rtt_us));
        shared.queue_us_sum.fetch_add(u64::from(now.smoothed_rtt_us).saturating_sub(base), Ordering::AcqRel);
        shared.queue_samples.fetch_add(1, Ordering::AcqRel);
    }
}

/// Below this base RTT the standing queue is judged against it, µs: on a LAN or loopback, host
/// scheduling and interrupt coalescing move the RTT by a fraction of a millisecond with no queue
/// at all, which against a base of tens of microseconds would read as a full bottleneck. A
/// buffer that shallow shows a full link in loss instead (eq. 2).
const SHORTEST_QUEUE_BASE_US: u64 = 4_000;

/// The mean standing queue of `samples` samples summing to `queue_us`, as a fraction of the base
/// RTT (at least [`SHORTEST_QUEUE_BASE_US`]); `None` without samples or a base.
fn standing_queue(queue_us: u64, samples: u64, base_rtt_us: u64) -> Option<f64> {
    (samples > 0 && base_rtt_us > 0 && base_rtt_us != u64::MAX)
        .then(|| queue_us as f64 / samples as f64 / base_rtt_us.max(SHORTEST_QUEUE_BASE_US) as f64)
}

#[cfg(test)]
mod tests {
    use super::standing_queue;

    #[test]
    fn the_standing_queue_is_a_fraction_of_the_base_rtt_judged_against_at_least_4_ms() {
        assert_eq!(standing_queue(0, 0, 20_000), None);
        assert_eq!(standing_queue(10_000, 1, u64::MAX), None);
        // 20 ms base, a mean queue of 5 ms: a quarter of it.
        assert_eq!(standing_queue(50_000, 10, 20_000), Some(0.25));
        // Loopback: 30 µs of jitter over a 20 µs base is no queue.
        assert_eq!(standing_queue(300, 10, 20), Some(30.0 / 4_000.0));
    }
}
