//! The receiver (seed 002 §3, the write stage): chunks arriving on the data streams are checked
//! against their BLAKE3 hash (a mismatch is fetched again), staged in the receiver's own bounded
//! staging area (holding no more than the writers can take next; beyond that, and when the area
//! is full, the sockets are not read, which pushes back on the sender through TCP flow control),
//! and written by a pool of writers whose size the sender's write tuner sets (or pinned here). Files are written under a temporary name next to their final one and renamed
//! only when complete and verified on disk against the chunk hashes, so a destination never shows
//! a partial file under its final name. Finished chunks go to the resume journal (`journal`)
//! after their data is `fsync`ed.
//!
//! Every path is validated before anything is written (`plan::validate_entries`: no `..`, not
//! absolute, parents listed first), and existing directories are checked to be real directories
//! (not symlinks), so nothing is written outside the destination.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::buffer::BufferPool;
use crate::emulate::Throttle;
use crate::error::{EmulatedStorage, Progress, ProgressFn, TransferError};
use crate::journal::{journal_path, Journal};
use crate::plan::{validate_entries, Plan};
use crate::pool::{cpu_seconds, BusyMeter, WorkerSlots};
use crate::protocol::{read_frame, read_frame_pooled, send_message, Frame, Hello, Message, ProtocolError, WireEntry, WireKind, PROTOCOL_VERSION};
use crate::staging::{Chunk, StagingArea, StagingConfig};
use crate::transport::{Acceptor, ByteStream, Connection};
use crate::tuner::Concurrency;

/// How long a new stream may take to say what it is.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a session whose sender vanished waits for its data streams to end before it
/// writes what it has and stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What `braid serve --dir DEST` controls.
#[derive(Clone)]
pub struct ReceiveOptions {
    /// Destination directory (created if missing).
    pub dest: PathBuf,
    /// Staging cap in bytes; `None` for the default (min(30% of MemAvailable, 2 GiB)).
    pub staging_memory: Option<u64>,
    /// Pinned writer count (the sender's `SetWriters` is then ignored).
    pub write_workers: Option<usize>,
    /// Most writers the sender may ask for. Default 64.
    pub max_writers: usize,
    /// Emulated destination storage.
    pub emulate_write: Option<EmulatedStorage>,
    /// `fsync` data and journal records (default true; off only for benchmarks of the pipeline).
    pub fsync: bool,
    /// Called once per probe interval.
    pub progress: Option<ProgressFn>,
}

impl ReceiveOptions {
    /// Defaults for `dest`.
    pub fn new(dest: impl Into<PathBuf>) -> Self {
        ReceiveOptions {
            dest: dest.into(),
            staging_memory: None,
            write_workers: None,
            max_writers: 64,
            emulate_write: None,
            fsync: true,
            progress: None,
        }
    }
}

impl std::fmt::Debug for ReceiveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveOptions")
            .field("dest", &self.dest)
            .field("staging_memory", &self.staging_memory)
            .field("write_workers", &self.write_workers)
            .field("max_writers", &self.max_writers)
            .field("emulate_write", &self.emulate_write)
            .field("fsync", &self.fsync)
            .finish_non_exhaustive()
    }
}

/// What a finished receive did.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiveSummary {
    /// The transfer's id.
    pub transfer_id: [u8; 32],
    /// Payload bytes written this session.
    pub bytes_written: u64,
    /// Payload bytes already finished by an earlier session (resumed).
    pub resumed_bytes: u64,
    /// Payload bytes of the transfer.
    pub total_bytes: u64,
    /// Regular files in the transfer.
    pub files: u64,
    /// Wall seconds of this session.
    pub seconds: f64,
    /// `bytes_written / seconds`.
    pub throughput_bps: f64,
    /// Chunks whose hash failed (on arrival or on disk) and were fetched again.
    pub refetched_chunks: u64,
    /// Most bytes in the receiver's staging area at once.
    pub peak_staged_bytes: u64,
    /// CPU seconds of this process during the session.
    pub cpu_seconds: f64,
    /// Writer count per probe interval: (seconds since start, writers).
    pub writer_samples: Vec<(f64, usize)>,
    /// Seconds data streams were left unread because the writers had chunks enough, summed
    /// over streams: about the session's length times the streams when writing is the
    /// bottleneck, about zero otherwise.
    pub stream_seconds_held: f64,
}

type Routes = Arc<Mutex<HashMap<[u8; 32], mpsc::UnboundedSender<Connection>>>>;
type Locks = Arc<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>;

/// Receives one transfer (the first `Hello` that arrives) and returns its outcome.
pub async fn receive_one(acceptor: &dyn Acceptor, options: &ReceiveOptions) -> Result<ReceiveSummary, TransferError> {
    let mut outcome = None;
    run(acceptor, options, Some(1), &mut |r| outcome = Some(r)).await?;
    outcome.unwrap_or(Err(TransferError::Disconnected))
}

/// Receives transfers (several may run at once) until the acceptor fails; `on_transfer` gets
/// each one's outcome as it ends.
pub async fn serve<F>(acceptor: &dyn Acceptor, options: &ReceiveOptions, mut on_transfer: F) -> Result<(), TransferError>
where
    F: FnMut(Result<ReceiveSummary, TransferError>) + Send,
{
    run(acceptor, options, None, &mut on_transfer).await
}

async fn run(
    acceptor: &dyn Acceptor,
    options: &ReceiveOptions,
    limit: Option<usize>,
    on_transfer: &mut (dyn FnMut(Result<ReceiveSummary, TransferError>) + Send),
) -> Result<(), TransferError> {
    let routes: Routes = Arc::default();
    let locks: Locks = Arc::default();
    let (hello_tx, mut hello_rx) = mpsc::unbounded_channel::<(Hello, Box<dyn ByteStream>)>();
    let mut sessions: JoinSet<Result<ReceiveSummary, TransferError>> = JoinSet::new();
    let mut classifiers = JoinSet::new();
    let mut started = 0usize;
    let mut finished = 0usize;
    loop {
        tokio::select! {
            // Accepting continues after the last session started: its data streams arrive later.
            accepted = acceptor.accept() => {
                let connection = accepted.map_err(TransferError::Connect)?;
                let (routes, hello_tx) = (Arc::clone(&routes), hello_tx.clone());
                classifiers.spawn(classify(connection, routes, hello_tx));
                // Reap finished classifiers so the set does not grow.
                while classifiers.try_join_next().is_some() {}
            }
            Some((hello, control)) = hello_rx.recv() => {
                if limit.is_some_and(|l| started >= l) {
                    continue;
                }
                started += 1;
                let (routes, locks, options) = (Arc::clone(&routes), Arc::clone(&locks), options.clone());
                sessions.spawn(session(hello, control, routes, locks, options));
            }
            Some(joined) = sessions.join_next() => {
                finished += 1;
                on_transfer(joined.unwrap_or_else(|e| Err(TransferError::Remote(format!("session task failed: {e}")))));
                if limit.is_some_and(|l| finished >= l) {
                    return Ok(());
                }
            }
        }
    }
}

/// Reads a new stream's first frame: a `Hello` starts a session, an `Attach` joins one.
async fn classify(
    mut connection: Connection,
    routes: Routes,
    hello_tx: mpsc::UnboundedSender<(Hello, Box<dyn ByteStream>)>,
) {
    let Ok(Ok(Some(Frame::Control(first)))) =
        tokio::time::timeout(FIRST_FRAME_TIMEOUT, read_frame(&mut connection.stream)).await
    else {
        return;
    };
    match first {
        Message::Hello(hello) => {
            let _ = hello_tx.send((hello, connection.stream));
        }
        Message::Attach { transfer_id } => {
            let route = routes.lock().unwrap_or_else(PoisonError::into_inner).get(&transfer_id).cloned();
            if let Some(route) = route {
                let _ = route.send(connection);
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Staged,
    Done,
}

struct State {
    status: Vec<Status>,
    hashes: Vec<Option<[u8; 32]>>,
    /// Per chunk: finished by an earlier session (journaled), so read back before its file is
    /// renamed; a chunk of this session was hashed on arrival and written as it was verified.
    carried_over: Vec<bool>,
    /// Per entry: chunks not yet done.
    remaining: Vec<usize>,
    chunks_left: usize,
    files_done: u64,
}

struct Session {
    dest: PathBuf,
    entries: Vec<WireEntry>,
    plan: Plan,
    state: Mutex<State>,
    journal: Mutex<Option<Journal>>,
    staging: StagingArea,
    buffers: Arc<BufferPool>,
    slots: WorkerSlots,
    meter: BusyMeter,
    /// Nanoseconds data streams have spent unread, summed over streams (see `data_reader`).
    held_nanos: AtomicU64,
    refetched: AtomicU64,
    complete: Notify,
    control: mpsc::UnboundedSender<Message>,
    errors: mpsc::UnboundedSender<TransferError>,
    throttle: Option<Throttle>,
    fsync: bool,
}

fn final_path(dest: &Path, entry: &WireEntry) -> PathBuf {
    dest.join(&entry.path)
}

/// `dir/.name.braid-part` next to the final path.
fn temp_path(dest: &Path, entry: &WireEntry) -> PathBuf {
    let (dir, name) = entry.path.rsplit_once('/').unwrap_or(("", entry.path.as_str()));
    dest.join(dir).join(temp_name(name))
}

/// The temporary name of a file named `name`, in the same directory.
fn temp_name(name: &str) -> String {
    format!(".{name}.braid-part")
}

/// How long a finished session waits for the sender to close its control stream.
const LINGER: Duration = Duration::from_secs(5);

async fn session(
    hello: Hello,
    control: Box<dyn ByteStream>,
    routes: Routes,
    locks: Locks,
    options: ReceiveOptions,
) -> Result<ReceiveSummary, TransferError> {
    let (mut control_rd, mut control_wr) = tokio::io::split(control);
    // `read_frame` is not cancel-safe, so the control stream is read by its own task.
    let (frames_tx, frames_rx) = mpsc::unbounded_channel();
    let mut control_reader = tokio::spawn(async move {
        let mut forward = true;
        loop {
            let frame = read_frame(&mut control_rd).await;
            let end = !matches!(frame, Ok(Some(_)));
            // Once the session is over, frames are read and dropped until
            // the sender's end (see the lingering close below).
            forward = forward && frames_tx.send(frame).is_ok();
            if end {
                return;
            }
        }
    });
    let id = hello.transfer_id;
    let mut reported = false;
    let result = session_inner(hello, frames_rx, &mut control_wr, &routes, &locks, options, &mut reported).await;
    routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    if let Err(e) = &result {
        if !reported && !matches!(e, TransferError::Disconnected | TransferError::Remote(_)) {
            let _ = send_message(&mut control_wr, &Message::Error { message: e.to_string() }).await;
        }
    }
    let _ = control_wr.shutdown().await;
    // Lingering close: the last message (Done or Error) is on its way, and
    // the sender closes once it has read it. A TCP socket closed with unread
    // data resets the connection, and the reset discards what the sender
    // has not read yet: a server exiting right after its report made the
    // sender fail with "the peer closed the connection" about one run in
    // ten. So the sender's end is awaited (bounded) before the stream drops.
    if tokio::time::timeout(LINGER, &mut control_reader).await.is_err() {
        control_reader.abort();
    }
    result
}

type FrameResult = Result<Option<Frame>, ProtocolError>;

async fn session_inner<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(
    hello: Hello,
    mut control_frames: mpsc::UnboundedReceiver<FrameResult>,
    control_wr: &mut W,
    routes: &Routes,
    locks: &Locks,
    options: ReceiveOptions,
    reported: &mut bool,
) -> Result<ReceiveSummary, TransferError> {
    let started = Instant::now();
    let cpu_start = cpu_seconds();
    if hello.version != PROTOCOL_VERSION {
        return Err(ProtocolError::Unexpected {
            expected: "protocol version 1",
            got: format!("version {}", hello.version),
        }
        .into());
    }
    validate_entries(&hello.entries)?;
    let plan = Plan::new(&hello.entries, hello.chunk_size, hello.bundle_threshold)?;
    if crate::plan::transfer_id(&hello.entries, hello.chunk_size, hello.bundle_threshold) != hello.transfer_id {
        return Err(ProtocolError::Unexpected {
            expected: "a transfer id that is the BLAKE3 of the manifest",
            got: "a different id".into(),
        }
        .into());
    }
    let staging = match options.staging_memory {
        Some(cap) => StagingConfig::new(hello.chunk_size, cap)?,
        None => StagingConfig::new(hello.chunk_size, StagingConfig::from_system()?.cap())?,
    };
    let throttle = options.emulate_write.map(|e| e.throttle()).transpose()?;
    let probe_interval = Duration::from_millis(hello.probe_interval_ms.clamp(10, 3_600_000));
    let dest = options.dest.clone();
    match fs::metadata(&dest) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(TransferError::DestNotDir { path: dest }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(&dest).map_err(|e| TransferError::io(&dest, e))?
        }
        Err(e) => return Err(TransferError::io(&dest, e)),
    }
    let roots: Vec<&str> = hello.entries.iter().map(|e| e.path.as_str()).filter(|p| !p.contains('/')).collect();
    let jpath = journal_path(&dest, &roots);
    // One session per journal at a time: a restarted sender waits for the old session to drain.
    let lock = Arc::clone(locks.lock().unwrap_or_else(PoisonError::into_inner).entry(jpath.clone()).or_default());
    let _guard = lock.lock_owned().await;

    let entries = hello.entries;
    let fsync = options.fsync;
    let prepared = {
        let (dest, entries, plan, jpath) = (dest.clone(), entries.clone(), plan.clone(), jpath.clone());
        tokio::task::spawn_blocking(move || prepare(&dest, &entries, &plan, &jpath, fsync))
            .await
            .map_err(|e| TransferError::Remote(format!("prepare task failed: {e}")))??
    };
    let resumed_bytes: u64 =
        plan.chunks.iter().zip(&prepared.have).filter(|(_, &h)| h).map(|(c, _)| c.len).sum();
    let total_bytes = plan.total_bytes();
    let files = entries.iter().filter(|e| matches!(e.kind, WireKind::File { .. })).count() as u64;
    let have: Vec<u64> = prepared.have.iter().enumerate().filter(|(_, &h)| h).map(|(i, _)| i as u64).collect();
    let mut remaining = vec![0usize; entries.len()];
    let mut status = vec![Status::Pending; plan.chunks.len()];
    let mut chunks_left = 0;
    for (i, chunk) in plan.chunks.iter().enumerate() {
        if prepared.have[i] {
            status[i] = Status::Done;
        } else {
            chunks_left += 1;
            if !chunk.bundle {
                remaining[chunk.segments[0].file as usize] += 1;
            }
        }
    }

    let (data_tx, mut data_rx) = mpsc::unbounded_channel();
    routes.lock().unwrap_or_else(PoisonError::into_inner).insert(hello.transfer_id, data_tx);
    send_message(control_wr, &Message::Resume { have }).await?;

    let (control_tx, mut control_msgs) = mpsc::unbounded_channel::<Message>();
    let (errors_tx, mut errors_rx) = mpsc::unbounded_channel();
    let initial_writers = options.write_workers.unwrap_or(hello.writers as usize).clamp(1, options.max_writers.max(1));
    let session = Arc::new(Session {
        dest,
        entries,
        plan,
        state: Mutex::new(State {
            status,
            carried_over: prepared.have.clone(),
            hashes: prepared.hashes,
            remaining,
            chunks_left,
            files_done: prepared.files_done,
        }),
        journal: Mutex::new(Some(prepared.journal)),
        staging: StagingArea::new(staging),
        buffers: crate::buffer::chunk_pool(staging.chunk_size(), staging.cap()),
        slots: WorkerSlots::new(0),
        meter: BusyMeter::default(),
        held_nanos: AtomicU64::new(0),
        refetched: AtomicU64::new(0),
        complete: Notify::new(),
        control: control_tx,
        errors: errors_tx,
        throttle,
        fsync,
    });
    let mut writers = JoinSet::new();
    set_writers(&session, &mut writers, initial_writers);
    let mut readers = JoinSet::new();
    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + probe_interval, probe_interval);
    let mut last_tick = (Instant::now(), 0u64);
    let mut check_done = chunks_left == 0;
    let outcome: Result<(), TransferError> = loop {
        if check_done {
            check_done = false;
            if session.state.lock().unwrap_or_else(PoisonError::into_inner).chunks_left == 0 {
                break Ok(());
            }
        }
        let completed = session.complete.notified();
        tokio::select! {
            _ = completed => check_done = true,
            Some(stream) = data_rx.recv() => {
                let session = Arc::clone(&session);
                readers.spawn(async move { data_reader(&session, stream).await });
            }
            Some(message) = control_msgs.recv() => {
                if let Err(e) = send_message(control_wr, &message).await {
                    break Err(e.into());
                }
            }
            Some(error) = errors_rx.recv() => break Err(error),
            frame = control_frames.recv() => match frame.unwrap_or(Ok(None)) {
                Ok(Some(Frame::Control(Message::SetWriters { writers: n }))) => {
                    if options.write_workers.is_none() {
                        let n = (n as usize).clamp(1, options.max_writers.max(1));
                        if n != session.slots.target() {
                            // The next report measures the new count only, not a blend of two.
                            session.meter.take();
                            set_writers(&session, &mut writers, n);
                        }
                    }
                }
                Ok(Some(Frame::Control(Message::Error { message }))) => break Err(TransferError::Remote(message)),
                Ok(Some(other)) => break Err(ProtocolError::Unexpected { expected: "SetWriters", got: other.name() }.into()),
                Ok(None) | Err(_) => break Err(TransferError::Disconnected),
            },
            _ = ticker.tick() => {
                let n = session.slots.target();
                let stage = session.meter.take_sample();
                let now = (Instant::now(), session.held_nanos.load(Ordering::Acquire));
                let wall = now.0.duration_since(last_tick.0).as_secs_f64();
                let held_streams = if wall > 0.0 { now.1.saturating_sub(last_tick.1) as f64 / 1e9 / wall } else { 0.0 };
                last_tick = now;
                samples.push((started.elapsed().as_secs_f64(), n));
                let message = Message::WriterState {
                    writers: u32::try_from(n).unwrap_or(u32::MAX),
                    staged_bytes: session.staging.held_bytes(),
                    throughput: stage.throughput,
                    written_bytes: session.meter.total_bytes(),
                    busy_writers: stage.in_use,
                    held_streams,
                };
                if let Err(e) = send_message(control_wr, &message).await {
                    break Err(e.into());
                }
                if let Some(progress) = &options.progress {
                    let files_done = session.state.lock().unwrap_or_else(PoisonError::into_inner).files_done;
                    progress(&Progress {
                        elapsed: started.elapsed().as_secs_f64(),
                        bytes_done: session.meter.total_bytes(),
                        bytes_total: total_bytes - resumed_bytes,
                        files_done,
                        files_total: files,
                        concurrency: Concurrency { read: 0, network: 0, write: n },
                    });
                }
            }
        }
    };
    let refetched = session.refetched.load(Ordering::Acquire);
    match outcome {
        Ok(()) => {
            readers.abort_all();
            session.staging.close();
            writers.abort_all();
            let finishing = Arc::clone(&session);
            tokio::task::spawn_blocking(move || finish(&finishing))
                .await
                .map_err(|e| TransferError::Remote(format!("finish task failed: {e}")))??;
            // Messages queued by the writers (FilesDone) go out before Done.
            while let Ok(message) = control_msgs.try_recv() {
                send_message(control_wr, &message).await?;
            }
            send_message(control_wr, &Message::Done).await?;
            let seconds = started.elapsed().as_secs_f64();
            let bytes_written = session.meter.total_bytes();
            Ok(ReceiveSummary {
                transfer_id: hello.transfer_id,
                bytes_written,
                resumed_bytes,
                total_bytes,
                files,
                seconds,
                throughput_bps: bytes_written as f64 / seconds.max(1e-9),
                refetched_chunks: refetched,
                peak_staged_bytes: session.staging.peak_bytes(),
                cpu_seconds: cpu_seconds() - cpu_start,
                writer_samples: samples,
                stream_seconds_held: session.held_nanos.load(Ordering::Acquire) as f64 / 1e9,
            })
        }
        Err(error) => {
            // Tell the sender first, so it stops and closes its data streams.
            if !matches!(error, TransferError::Disconnected | TransferError::Remote(_)) {
                let _ = send_message(control_wr, &Message::Error { message: error.to_string() }).await;
                *reported = true;
            }
            // Keep what already arrived: let the data streams end (the sender is gone or told
            // to stop), write every complete staged chunk, journal it, then stop.
            let drain = async {
                while readers.join_next().await.is_some() {}
            };
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
            readers.abort_all();
            session.staging.close();
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, async { while writers.join_next().await.is_some() {} }).await;
            writers.abort_all();
            Err(error)
        }
    }
}

fn set_writers(session: &Arc<Session>, writers: &mut JoinSet<()>, n: usize) {
    for slot in session.slots.set_target(n) {
        let session = Arc::clone(session);
        writers.spawn(async move {
            if let Err(e) = writer(&session, slot).await {
                let _ = session.errors.send(e);
            }
            session.slots.release(slot);
        });
    }
}

/// Room for a chunk header in a data frame (kind byte and postcard varints; at most ~70 bytes).
const CHUNK_HEADER_ROOM: u64 = 256;

async fn data_reader(session: &Arc<Session>, connection: Connection) {
    let Connection { mut stream, batching, .. } = connection;
    let max = u32::try_from(session.plan.chunk_size + CHUNK_HEADER_ROOM).unwrap_or(u32::MAX);
    loop {
        // Read no further ahead of the writers than they can use: the socket keeps the rest, and
        // its closing window slows the sender down to the writers' pace.
        let waiting = Instant::now();
        session.staging.wait_queued_below(write_ahead(session.slots.target())).await;
        session.hold_since(waiting);
        let frame = match read_frame_pooled(&mut stream, max, &session.buffers, batching.as_ref()).await {
            Ok(Some(frame)) => frame,
            // End of stream, or cut inside a frame (the sender died): the stream is over.
            Ok(None) | Err(ProtocolError::Truncated | ProtocolError::Io(_)) => return,
            Err(e) => {
                let _ = session.errors.send(e.into());
                return;
            }
        };
        let Frame::Chunk(header, payload) = frame else {
            let _ = session.errors.send(ProtocolError::Unexpected { expected: "Chunk", got: frame.name() }.into());
            return;
        };
        let Some(index) = session.plan.find(header.file, header.offset).filter(|&i| session.plan.chunks[i].len == header.len)
        else {
            let got = format!("chunk at file {} offset {} of {} bytes", header.file, header.offset, header.len);
            let _ = session.errors.send(ProtocolError::Unexpected { expected: "a planned chunk", got }.into());
            return;
        };
        let hash = blake3::hash(&payload);
        if hash.as_bytes() != &header.hash {
            session.refetched.fetch_add(1, Ordering::AcqRel);
            let _ = session.control.send(Message::Refetch { file: header.file, offset: header.offset });
            continue;
        }
        {
            let mut state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.status[index] != Status::Pending {
                continue;
            }
            state.status[index] = Status::Staged;
        }
        let chunk = Chunk { file: header.file, offset: header.offset, data: payload, hash };
        let waiting = Instant::now();
        if session.staging.push(chunk).await.is_err() {
            return;
        }
        session.hold_since(waiting);
    }
}

impl Session {
    /// Counts the time since `waiting` as a stream left unread for the writers' sake.
    fn hold_since(&self, waiting: Instant) {
        let nanos = u64::try_from(waiting.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.held_nanos.fetch_add(nanos, Ordering::AcqRel);
    }
}

/// Chunks the data streams keep queued ahead of `writers` writers: one behind the chunk each
/// writer is writing, so none waits for the network, and one more for arrival jitter (the mirror
/// of the sender's read-ahead). When writing is the bottleneck, chunks the writers cannot take yet
/// are better left in the sockets than in memory: a full staging area (by default 30% of free
/// memory) bought nothing but memory, because the writers drain it no faster for it being full.
/// When the network is the bottleneck the queue stays short whatever the bound.
fn write_ahead(writers: usize) -> usize {
    writers.max(1) + 1
}

async fn writer(session: &Arc<Session>, slot: usize) -> Result<(), TransferError> {
    let mut throttle = session.throttle.as_ref().map(Throttle::worker);
    while session.slots.keep(slot) {
        let Some(staged) = session.staging.pop().await else { return Ok(()) };
        let busy = session.meter.start();
        let started = tokio::time::Instant::now();
        let len = staged.data.len() as u64;
        let worker = Arc::clone(session);
        let outcome = tokio::task::spawn_blocking(move || write_chunk(&worker, staged.chunk()))
            .await
            .map_err(|e| TransferError::Remote(format!("writer task failed: {e}")))??;
        if let Some(t) = throttle.as_mut() {
            t.consume_since(len, started).await;
        }
        busy.done(len);
        if !outcome.finished.is_empty() {
            let _ = session.control.send(Message::FilesDone { files: outcome.finished });
        }
        for index in outcome.refetch {
            let first = session.plan.chunks[index].segments[0];
            session.refetched.fetch_add(1, Ordering::AcqRel);
            let _ = session.control.send(Message::Refetch { file: first.file, offset: first.offset });
        }
        if outcome.all_done {
            session.complete.notify_one();
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct WriteOutcome {
    finished: Vec<u64>,
    refetch: Vec<usize>,
    all_done: bool,
}

fn journal_op(session: &Session, op: impl FnOnce(&mut Journal) -> io::Result<()>) -> Result<(), TransferError> {
    let mut journal = session.journal.lock().unwrap_or_else(PoisonError::into_inner);
    match journal.as_mut() {
        Some(j) => {
            let path = session.dest.clone();
            op(j).map_err(|e| TransferError::io(path, e))
        }
        None => Ok(()),
    }
}

/// Writes one verified chunk, journals it and finalizes the files it completes.
fn write_chunk(session: &Session, chunk: &Chunk) -> Result<WriteOutcome, TransferError> {
    let index = session.plan.find(chunk.file, chunk.offset).ok_or_else(|| ProtocolError::Unexpected {
        expected: "a planned chunk",
        got: format!("file {} offset {}", chunk.file, chunk.offset),
    })?;
    let planned = &session.plan.chunks[index];
    let hash = *chunk.hash.as_bytes();
    let mut outcome = WriteOutcome::default();
    if planned.bundle {
        return write_bundle(session, index, chunk);
    }
    let segment = planned.segments[0];
    let entry = &session.entries[segment.file as usize];
    let temp = temp_path(&session.dest, entry);
    let file = open_temp(&temp, true)?;
    file.write_all_at(&chunk.data, segment.offset).map_err(|e| TransferError::io(&temp, e))?;
    if session.fsync {
        file.sync_data().map_err(|e| TransferError::io(&temp, e))?;
    }
    drop(file);
    journal_op(session, |j| j.chunk_done(planned.key, hash))?;
    let file_complete = {
        let mut state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.status[index] = Status::Done;
        state.hashes[index] = Some(hash);
        state.carried_over[index] = false;
        let remaining = &mut state.remaining[segment.file as usize];
        *remaining -= 1;
        *remaining == 0
    };
    if file_complete {
        // Only chunks journaled by an earlier session are read back: reading back what this
        // session just wrote reads the page cache, not the medium, and costs a second hash of
        // the whole file at its end (0.4 s of a 1 GiB transfer's tail).
        let (carried, hashes): (Vec<usize>, Vec<Option<[u8; 32]>>) = {
            let state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
            let chunks = &session.plan.file_chunks[segment.file as usize];
            chunks.iter().filter(|&&c| state.carried_over[c]).map(|&c| (c, state.hashes[c])).unzip()
        };
        let bad = if carried.is_empty() { Vec::new() } else { verify_file(&session.plan, &temp, &carried, &hashes)? };
        if bad.is_empty() {
            finalize_file(session, segment.file as usize)?;
            outcome.finished.push(segment.file);
        } else {
            // Data on disk differs from what was verified on arrival (or journaled by an earlier
            // session): those chunks are pending again and fetched anew.
            let mut state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
            for &c in &bad {
                state.status[c] = Status::Pending;
                state.hashes[c] = None;
                state.remaining[segment.file as usize] += 1;
                state.chunks_left += 1;
            }
            outcome.refetch = bad;
        }
    }
    let mut state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
    // This chunk was written; if it was found bad it was counted pending again above.
    state.chunks_left -= 1;
    if !outcome.finished.is_empty() {
        state.files_done += 1;
    }
    outcome.all_done = state.chunks_left == 0;
    Ok(outcome)
}

/// Writes a bundle of small whole files: each under its temporary name, made durable together,
/// verified, then all renamed and journaled in one append.
///
/// Every file operation is relative to its directory, opened once per bundle (a bundle's files
/// mostly share one): a lookup from DEST's root per create and two per rename were the largest
/// part of the receiver's CPU for a tree of small files. The directory's descriptor also makes
/// the renames durable.
fn write_bundle(session: &Session, index: usize, chunk: &Chunk) -> Result<WriteOutcome, TransferError> {
    let planned = &session.plan.chunks[index];
    let hash = *chunk.hash.as_bytes();
    let mut outcome = WriteOutcome::default();
    let mut dirs: Vec<(&str, OwnedFd)> = Vec::new();
    // Per file: its directory in `dirs`, its name, its temporary name, the open file.
    let mut open: Vec<(usize, &str, String, File)> = Vec::with_capacity(planned.segments.len());
    let mut at = 0usize;
    for segment in &planned.segments {
        let entry = &session.entries[segment.file as usize];
        let (dir, name) = entry.path.rsplit_once('/').unwrap_or(("", entry.path.as_str()));
        let d = match dirs.iter().position(|(p, _)| *p == dir) {
            Some(d) => d,
            None => {
                let path = session.dest.join(dir);
                dirs.push((dir, open_dir(&path)?));
                dirs.len() - 1
            }
        };
        let temp = temp_name(name);
        let data = &chunk.data[at..at + segment.len as usize];
        at += segment.len as usize;
        let mut file = create_temp_at(&dirs[d].1, &temp).map_err(|e| TransferError::io(temp_path(&session.dest, entry), e))?;
        file.write_all(data).map_err(|e| TransferError::io(temp_path(&session.dest, entry), e))?;
        open.push((d, name, temp, file));
    }
    if session.fsync {
        sync_together(open.iter().map(|(_, _, _, f)| f)).map_err(|(i, e)| {
            TransferError::io(temp_path(&session.dest, &session.entries[planned.segments[i].file as usize]), e)
        })?;
    }
    // Read every file back (through the descriptor it was written with) and check the bundle's
    // hash before any of them gets its final name.
    let mut hasher = blake3::Hasher::new();
    let mut data = Vec::new();
    for (segment, (_, _, _, file)) in planned.segments.iter().zip(&open) {
        let temp = || temp_path(&session.dest, &session.entries[segment.file as usize]);
        // Exactly the segment's length: the file was created (exclusively) and written here.
        data.resize(segment.len as usize, 0);
        let n = read_at_most(file, &mut data).map_err(|e| TransferError::io(temp(), e))?;
        if n as u64 != segment.len {
            return Err(TransferError::Verify { path: temp() });
        }
        hasher.update(&data[..n]);
    }
    if hasher.finalize().as_bytes() != &hash {
        // The disk gave back something else; fetch the bundle again.
        session.state.lock().unwrap_or_else(PoisonError::into_inner).status[index] = Status::Pending;
        outcome.refetch.push(index);
        return Ok(outcome);
    }
    for (segment, (d, name, temp, file)) in planned.segments.iter().zip(&open) {
        let entry = &session.entries[segment.file as usize];
        apply_metadata_to(file, &temp_path(&session.dest, entry), entry)?;
        rustix::fs::renameat(&dirs[*d].1, temp.as_str(), &dirs[*d].1, *name)
            .map_err(|e| TransferError::io(final_path(&session.dest, entry), e.into()))?;
    }
    if session.fsync {
        // The renames must be durable before the journal says the files are done.
        for (dir, fd) in &dirs {
            rustix::fs::fsync(fd).map_err(|e| TransferError::io(session.dest.join(dir), e.into()))?;
        }
    }
    drop(open);
    let files: Vec<[u8; 32]> = planned.segments.iter().map(|s| session.plan.file_keys[s.file as usize]).collect();
    journal_op(session, |j| j.bundle_done(planned.key, hash, &files))?;
    let mut state = session.state.lock().unwrap_or_else(PoisonError::into_inner);
    state.status[index] = Status::Done;
    state.hashes[index] = Some(hash);
    state.files_done += planned.segments.len() as u64;
    state.chunks_left -= 1;
    outcome.all_done = state.chunks_left == 0;
    outcome.finished = planned.segments.iter().map(|s| s.file).collect();
    Ok(outcome)
}

/// Opens a directory of DEST for `*at` calls. Never through a link: `prepare` checked that every
/// directory of the manifest is a real one, and a link put there since is refused.
fn open_dir(path: &Path) -> Result<OwnedFd, TransferError> {
    use rustix::fs::{open, Mode, OFlags};
    open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| TransferError::io(path, e.into()))
}

/// [`create_temp`] relative to the directory `dir`.
fn create_temp_at(dir: &OwnedFd, name: &str) -> io::Result<File> {
    use rustix::fs::{openat, unlinkat, AtFlags, Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let create = || openat(dir, name, flags, Mode::from_raw_mode(0o600)).map(File::from);
    match create() {
        Err(rustix::io::Errno::EXIST) => {
            match unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(create()?)
        }
        other => Ok(other?),
    }
}

/// Creates a fresh temporary file. Whatever was at `path` is removed first and the file is
/// created exclusively without following links, so a link planted under a temporary name (say,
/// by an earlier transfer's symlink entry) cannot redirect the write outside DEST.
fn create_temp(path: &Path) -> Result<File, TransferError> {
    let create = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    // Usually nothing is there: one system call. A leftover of an earlier run (or anything
    // else, a symlink included) is removed and the file created anew, never followed.
    match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(TransferError::io(path, e)),
            }
            create().map_err(|e| TransferError::io(path, e))
        }
        other => other.map_err(|e| TransferError::io(path, e)),
    }
}

/// Opens an existing temporary file (never through a link).
fn open_temp(path: &Path, write: bool) -> Result<File, TransferError> {
    OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| TransferError::io(path, e))
}

/// Reads back every chunk of a file from `path` and compares it with its hash; returns the plan
/// indices that do not match (or whose hash is unknown).
fn verify_file(plan: &Plan, path: &Path, chunks: &[usize], hashes: &[Option<[u8; 32]>]) -> Result<Vec<usize>, TransferError> {
    let file = open_temp(path, false)?;
    let mut bad = Vec::new();
    let mut buf = Vec::new();
    for (&c, hash) in chunks.iter().zip(hashes) {
        let segment = plan.chunks[c].segments[0];
        buf.resize(segment.len as usize, 0);
        let ok = match (file.read_exact_at(&mut buf, segment.offset), hash) {
            (Ok(()), Some(h)) => blake3::hash(&buf).as_bytes() == h,
            _ => false,
        };
        if !ok {
            bad.push(c);
        }
    }
    Ok(bad)
}

fn apply_metadata(path: &Path, entry: &WireEntry) -> Result<(), TransferError> {
    fs::set_permissions(path, fs::Permissions::from_mode(entry.mode & 0o7777)).map_err(|e| TransferError::io(path, e))?;
    set_mtime(path, entry)
}

/// [`apply_metadata`] through an open descriptor (no path lookups: what a file costs counts when
/// a bundle holds hundreds).
fn apply_metadata_to(file: &File, path: &Path, entry: &WireEntry) -> Result<(), TransferError> {
    use rustix::fs::{fchmod, futimens, Mode};
    fchmod(file, Mode::from_raw_mode((entry.mode & 0o7777) as _)).map_err(|e| TransferError::io(path, e.into()))?;
    futimens(file, &mtime_only(entry)).map_err(|e| TransferError::io(path, e.into()))
}

/// Reads from the start of `file` into `buf` until it is full or the file ends.
fn read_at_most(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Timestamps that set the entry's modification time and leave the access time.
fn mtime_only(entry: &WireEntry) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        last_modification: rustix::fs::Timespec {
            tv_sec: entry.mtime_sec,
            tv_nsec: i64::from(entry.mtime_nsec.min(999_999_999)) as _,
        },
    }
}

fn set_mtime(path: &Path, entry: &WireEntry) -> Result<(), TransferError> {
    use rustix::fs::{utimensat, AtFlags, CWD};
    utimensat(CWD, path, &mtime_only(entry), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| TransferError::io(path, e.into()))
}

/// Sets a complete, verified file's metadata, renames it to its final name and journals it.
fn finalize_file(session: &Session, file: usize) -> Result<(), TransferError> {
    let entry = &session.entries[file];
    let temp = temp_path(&session.dest, entry);
    apply_metadata(&temp, entry)?;
    let target = final_path(&session.dest, entry);
    fs::rename(&temp, &target).map_err(|e| TransferError::io(&target, e))?;
    if session.fsync {
        if let Some(dir) = target.parent() {
            sync_dir(dir)?;
        }
    }
    journal_op(session, |j| j.file_done(session.plan.file_keys[file]))
}

/// Makes the data of freshly written `files` durable with one file-system journal commit for
/// all of them, not one each: write-back of every file is started first (`sync_file_range`,
/// which also allocates their blocks into the running journal transaction), then each is
/// `fdatasync`ed. The first `fdatasync` commits the transaction holding every file's allocation,
/// so the others only wait for their own data, already in flight. (One `fdatasync` per file in
/// turn costs a commit and a device flush each: on ext4 that is what made many small files slow.)
fn sync_together<'a>(files: impl Iterator<Item = &'a File> + Clone) -> Result<(), (usize, io::Error)> {
    for file in files.clone() {
        // SAFETY: a valid, open file descriptor; the call only starts write-back. A failure
        // (a file system without it) is harmless: the fdatasync below does the work then.
        unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
    for (i, file) in files.enumerate() {
        file.sync_data().map_err(|e| (i, e))?;
    }
    Ok(())
}

/// `fsync`s a directory, making the renames into it durable.
fn sync_dir(dir: &Path) -> Result<(), TransferError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| TransferError::io(dir, e))
}

struct Prepared {
    journal: Journal,
    have: Vec<bool>,
    hashes: Vec<Option<[u8; 32]>>,
    files_done: u64,
}

fn file_size(entry: &WireEntry) -> Option<u64> {
    match entry.kind {
        WireKind::File { size, .. } => Some(size),
        _ => None,
    }
}

/// Creates the directories, opens the journal, decides which chunks are already done, creates
/// the temporary files of the rest, and finishes files that need no (more) data.
fn prepare(dest: &Path, entries: &[WireEntry], plan: &Plan, jpath: &Path, fsync: bool) -> Result<Prepared, TransferError> {
    for entry in entries.iter().filter(|e| matches!(e.kind, WireKind::Dir)) {
        let path = final_path(dest, entry);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(TransferError::NotADirectory { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&path).map_err(|e| TransferError::io(&path, e))?,
            Err(e) => return Err(TransferError::io(&path, e)),
        }
    }
    let journal = Journal::open(jpath, fsync).map_err(|e| TransferError::io(jpath, e))?;
    let final_ok = |i: usize| -> bool {
        let entry = &entries[i];
        journal.has_file(&plan.file_keys[i])
            && fs::symlink_metadata(final_path(dest, entry)).is_ok_and(|m| m.is_file() && Some(m.len()) == file_size(entry))
    };
    let done: Vec<bool> = (0..entries.len()).map(|i| file_size(&entries[i]).is_some() && final_ok(i)).collect();
    let mut have = vec![false; plan.chunks.len()];
    let mut hashes = vec![None; plan.chunks.len()];
    for (i, chunk) in plan.chunks.iter().enumerate() {
        let Some(hash) = journal.chunk(&chunk.key) else { continue };
        let ok = if chunk.bundle {
            chunk.segments.iter().all(|s| done[s.file as usize])
        } else {
            let f = chunk.segments[0].file as usize;
            done[f] || fs::symlink_metadata(temp_path(dest, &entries[f])).is_ok_and(|m| m.is_file())
        };
        if ok {
            have[i] = true;
            hashes[i] = Some(hash);
        }
    }
    let session_free = |i: usize| file_size(&entries[i]).is_some() && !done[i];
    let mut files_done = done.iter().filter(|&&d| d).count() as u64;
    let mut journal = journal;
    for (i, entry) in entries.iter().enumerate() {
        if !session_free(i) {
            continue;
        }
        let chunks = &plan.file_chunks[i];
        if chunks.iter().any(|&c| plan.chunks[c].bundle) {
            continue;
        }
        let Some(size) = file_size(entry) else { continue };
        let temp = temp_path(dest, entry);
        let resumed = chunks.iter().any(|&c| have[c]);
        if resumed {
            let file = open_temp(&temp, true)?;
            file.set_len(size).map_err(|e| TransferError::io(&temp, e))?;
        } else {
            let file = create_temp(&temp)?;
            file.set_len(size).map_err(|e| TransferError::io(&temp, e))?;
        }
        if chunks.iter().all(|&c| have[c]) {
            // Nothing to receive (empty, all hole, or every chunk resumed): verify and finish.
            let file_hashes: Vec<_> = chunks.iter().map(|&c| hashes[c]).collect();
            let bad = verify_file(plan, &temp, chunks, &file_hashes)?;
            if bad.is_empty() {
                apply_metadata(&temp, entry)?;
                let target = final_path(dest, entry);
                fs::rename(&temp, &target).map_err(|e| TransferError::io(&target, e))?;
                journal.file_done(plan.file_keys[i]).map_err(|e| TransferError::io(jpath, e))?;
                files_done += 1;
            } else {
                for c in bad {
                    have[c] = false;
                    hashes[c] = None;
                }
            }
        }
    }
    Ok(Prepared { journal, have, hashes, files_done })
}

/// After every file: symlinks (as links), then directory modes and mtimes (deepest first, since
/// creating children changes a directory's mtime), then the journal is removed.
fn finish(session: &Session) -> Result<(), TransferError> {
    use std::os::unix::ffi::OsStrExt;
    for entry in &session.entries {
        let WireKind::Symlink { target } = &entry.kind else { continue };
        let temp = temp_path(&session.dest, entry);
        let _ = fs::remove_file(&temp);
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), &temp).map_err(|e| TransferError::io(&temp, e))?;
        set_mtime(&temp, entry)?;
        let path = final_path(&session.dest, entry);
        fs::rename(&temp, &path).map_err(|e| TransferError::io(&path, e))?;
    }
    let mut dirs: Vec<&WireEntry> = session.entries.iter().filter(|e| matches!(e.kind, WireKind::Dir)).collect();
    dirs.sort_by_key(|e| std::cmp::Reverse(e.path.matches('/').count()));
    for entry in dirs {
        apply_metadata(&final_path(&session.dest, entry), entry)?;
    }
    if session.fsync {
        if let Ok(dir) = File::open(&session.dest) {
            let _ = rustix::fs::syncfs(&dir);
        }
    }
    let journal = session.journal.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(journal) = journal {
        journal.remove().map_err(|e| TransferError::io(&session.dest, e))?;
    }
    Ok(())
}
