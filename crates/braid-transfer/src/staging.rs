//! The staging area between transfer stages (seed 002 §3, "staging area"; §4.6 memory limit).
//!
//! Readers put hashed chunks in, network workers (or, on the receiver, writers) take them out.
//! The area holds at most `cap` bytes: a [`StagingArea::push`] that would exceed it waits until
//! consumers have released enough (backpressure through a semaphore of bytes), so memory never
//! grows past the cap however fast readers are. A chunk's bytes are released when the
//! [`StagedChunk`] taken out is dropped, i.e. when the consumer is done with it. Chunks come out
//! in the order they went in.
//!
//! The default cap is the paper's: a share of the free memory (30% of `MemAvailable`), bounded
//! here by 2 GiB so one transfer cannot take a large machine's memory.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use thiserror::Error;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Default chunk size: 4 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;
/// Upper bound of the default cap: 2 GiB.
pub const DEFAULT_CAP_LIMIT: u64 = 2 << 30;
/// Share of `MemAvailable` the default cap takes (the paper's 30%).
pub const DEFAULT_CAP_SHARE: f64 = 0.3;

/// Staging configuration errors and misuse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StagingError {
    /// The cap cannot hold one chunk.
    #[error("staging memory {cap} bytes is below one chunk: the minimum is {min} bytes (the chunk size)")]
    CapBelowChunk {
        /// The configured cap.
        cap: u64,
        /// The minimum, the chunk size.
        min: u64,
    },
    /// A zero chunk size.
    #[error("chunk size must be at least 1 byte")]
    ZeroChunk,
    /// A chunk larger than the configured chunk size (it could never fit fairly).
    #[error("chunk of {len} bytes exceeds the chunk size {chunk_size}")]
    ChunkTooLarge {
        /// The chunk's length.
        len: u64,
        /// The configured chunk size.
        chunk_size: u64,
    },
    /// The area was closed; no more chunks are accepted.
    #[error("staging area is closed")]
    Closed,
    /// `/proc/meminfo` could not be read or has no `MemAvailable` line.
    #[error("cannot read MemAvailable from /proc/meminfo: {0}")]
    MemInfo(String),
}

/// Chunk size and byte cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingConfig {
    chunk_size: u64,
    cap: u64,
}

impl StagingConfig {
    /// A configuration; the cap must hold at least one chunk.
    pub fn new(chunk_size: u64, cap: u64) -> Result<Self, StagingError> {
        if chunk_size == 0 {
            return Err(StagingError::ZeroChunk);
        }
        if cap < chunk_size {
            return Err(StagingError::CapBelowChunk { cap, min: chunk_size });
        }
        // The semaphore counts permits in `usize` and takes them in `u32` steps.
        if chunk_size > u64::from(u32::MAX) {
            return Err(StagingError::ChunkTooLarge { len: chunk_size, chunk_size: u64::from(u32::MAX) });
        }
        let cap = cap.min(Semaphore::MAX_PERMITS as u64);
        Ok(StagingConfig { chunk_size, cap })
    }

    /// 4 MiB chunks and [`default_cap`] from this machine's `/proc/meminfo`.
    pub fn from_system() -> Result<Self, StagingError> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| StagingError::MemInfo(e.to_string()))?;
        StagingConfig::new(DEFAULT_CHUNK_SIZE, default_cap(&meminfo)?)
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The byte cap.
    pub fn cap(&self) -> u64 {
        self.cap
    }
}

/// The default cap from the text of `/proc/meminfo`: min(30% of `MemAvailable`, 2 GiB).
///
/// ```
/// let meminfo = "MemTotal: 16000000 kB\nMemAvailable: 1000000 kB\n";
/// assert_eq!(braid_transfer::staging::default_cap(meminfo).unwrap(), 307_200_000);
/// ```
pub fn default_cap(meminfo: &str) -> Result<u64, StagingError> {
    let line = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .ok_or_else(|| StagingError::MemInfo("no MemAvailable line".into()))?;
    let mut fields = line.split_whitespace().skip(1);
    let value: u64 = fields
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| StagingError::MemInfo(format!("unreadable line `{line}`")))?;
    let bytes = match fields.next() {
        Some("kB") => value.saturating_mul(1024),
        None => value,
        Some(unit) => return Err(StagingError::MemInfo(format!("unknown unit `{unit}` in `{line}`"))),
    };
    Ok(((bytes as f64 * DEFAULT_CAP_SHARE) as u64).min(DEFAULT_CAP_LIMIT))
}

/// A piece of one file: where it belongs and its BLAKE3 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Index of the file in the manifest.
    pub file: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// The data.
    pub data: Bytes,
    /// BLAKE3 of `data`.
    pub hash: blake3::Hash,
}

impl Chunk {
    /// A chunk of `data`, hashing it.
    pub fn new(file: u64, offset: u64, data: Bytes) -> Self {
        let hash = blake3::hash(&data);
        Chunk { file, offset, data, hash }
    }

    /// Whether `data` still matches `hash` (after the network).
    pub fn verify(&self) -> bool {
        blake3::hash(&self.data) == self.hash
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

/// A chunk taken out of the staging area; its bytes count against the cap until it is dropped.
#[derive(Debug)]
pub struct StagedChunk {
    chunk: Chunk,
    _permit: OwnedSemaphorePermit,
    held: Arc<AtomicU64>,
}

impl StagedChunk {
    /// The chunk.
    pub fn chunk(&self) -> &Chunk {
        &self.chunk
    }
}

impl std::ops::Deref for StagedChunk {
    type Target = Chunk;
    fn deref(&self) -> &Chunk {
        &self.chunk
    }
}

impl Drop for StagedChunk {
    fn drop(&mut self) {
        self.held.fetch_sub(self.chunk.len(), Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct Queue {
    chunks: VecDeque<(Chunk, OwnedSemaphorePermit)>,
    closed: bool,
}

/// The bounded staging area. Share it between tasks with an [`Arc`].
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use braid_transfer::staging::{Chunk, StagingArea, StagingConfig};
///
/// let area = StagingArea::new(StagingConfig::new(4, 8).unwrap());
/// area.push(Chunk::new(0, 0, "abcd".into())).await.unwrap();
/// area.close();
/// let staged = area.pop().await.unwrap();
/// assert!(staged.verify());
/// assert_eq!(area.held_bytes(), 4);
/// drop(staged);
/// assert_eq!(area.held_bytes(), 0);
/// assert!(area.pop().await.is_none());
/// # });
/// ```
#[derive(Debug)]
pub struct StagingArea {
    config: StagingConfig,
    room: Arc<Semaphore>,
    queue: Mutex<Queue>,
    ready: Notify,
    /// Signalled whenever a chunk is taken out (or the area closes): producers bounding their
    /// read-ahead wait on it.
    taken: Notify,
    held: Arc<AtomicU64>,
    peak: AtomicU64,
}

impl StagingArea {
    /// An empty area.
    pub fn new(config: StagingConfig) -> Self {
        StagingArea {
            room: Arc::new(Semaphore::new(config.cap as usize)),
            config,
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
            taken: Notify::new(),
            held: Arc::new(AtomicU64::new(0)),
            peak: AtomicU64::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> StagingConfig {
        self.config
    }

    /// Adds a chunk, waiting while the area is full.
    pub async fn push(&self, chunk: Chunk) -> Result<(), StagingError> {
        if chunk.len() > self.config.chunk_size {
            return Err(StagingError::ChunkTooLarge { len: chunk.len(), chunk_size: self.config.chunk_size });
        }
        // `len <= chunk_size <= u32::MAX`, checked above and in `StagingConfig::new`.
        let permits = u32::try_from(chunk.len()).map_err(|_| StagingError::ChunkTooLarge {
            len: chunk.len(),
            chunk_size: self.config.chunk_size,
        })?;
        let permit = Arc::clone(&self.room).acquire_many_owned(permits).await.map_err(|_| StagingError::Closed)?;
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.closed {
            return Err(StagingError::Closed);
        }
        let held = self.held.fetch_add(chunk.len(), Ordering::AcqRel) + chunk.len();
        self.peak.fetch_max(held, Ordering::AcqRel);
        queue.chunks.push_back((chunk, permit));
        drop(queue);
        self.ready.notify_one();
        Ok(())
    }

    /// Takes the oldest chunk, waiting while the area is empty; `None` once it is closed and
    /// drained.
    pub async fn pop(&self) -> Option<StagedChunk> {
        loop {
            let notified = self.ready.notified();
            {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((chunk, permit)) = queue.chunks.pop_front() {
                    let more = !queue.chunks.is_empty() || queue.closed;
                    drop(queue);
                    if more {
                        // Pass the wake-up on: another consumer may be waiting for the rest.
                        self.ready.notify_one();
                    }
                    self.taken.notify_waiters();
                    return Some(StagedChunk { chunk, _permit: permit, held: Arc::clone(&self.held) });
                }
                if queue.closed {
                    drop(queue);
                    self.ready.notify_one();
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Accepts no more chunks; consumers drain what is left, then get `None`.
    pub fn close(&self) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
        // Producers waiting for room fail with `Closed` instead of waiting forever.
        self.room.close();
        self.ready.notify_waiters();
        self.ready.notify_one();
        self.taken.notify_waiters();
    }

    /// Bytes held now (queued or taken out and not yet dropped).
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// The most bytes ever held at once.
    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// Chunks queued and not yet taken out.
    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).chunks.len()
    }

    /// Waits until fewer than `limit` chunks are queued, or the area is closed.
    ///
    /// The cap bounds memory; this bounds read-ahead. A producer much faster than its consumers
    /// (a file read from page cache for a network-bound transfer) would otherwise fill the whole
    /// cap, by default 30% of free memory, holding a gigabyte for a 1 GiB file while the consumers
    /// only ever need the next chunk each.
    pub async fn wait_queued_below(&self, limit: usize) {
        loop {
            let taken = self.taken.notified();
            tokio::pin!(taken);
            // Registered before the check, so a chunk taken in between still wakes us.
            taken.as_mut().enable();
            {
                let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if queue.chunks.len() < limit || queue.closed {
                    return;
                }
            }
            taken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    #[test]
    fn cap_below_one_chunk_is_refused_with_both_numbers() {
        let err = StagingConfig::new(4 << 20, 1 << 20).unwrap_err();
        assert_eq!(err, StagingError::CapBelowChunk { cap: 1 << 20, min: 4 << 20 });
        let text = err.to_string();
        assert!(text.contains("1048576") && text.contains("4194304"), "{text}");
        assert_eq!(StagingConfig::new(0, 10), Err(StagingError::ZeroChunk));
    }

    #[test]
    fn default_cap_is_30_percent_of_available_up_to_2_gib() {
        assert_eq!(default_cap("MemAvailable:   1000 kB").unwrap(), 307_200);
        assert_eq!(default_cap("MemAvailable: 100000000 kB").unwrap(), DEFAULT_CAP_LIMIT);
        assert!(default_cap("MemTotal: 5 kB").is_err());
        assert!(default_cap("MemAvailable: x kB").is_err());
        // This machine's value is positive and within the bound.
        let config = StagingConfig::from_system().unwrap();
        assert!(config.cap() >= config.chunk_size() && config.cap() <= DEFAULT_CAP_LIMIT);
    }

    #[test]
    fn a_full_area_blocks_the_reader_until_a_chunk_is_released() {
        runtime().block_on(async {
            let area = Arc::new(StagingArea::new(StagingConfig::new(10, 20).unwrap()));
            area.push(Chunk::new(0, 0, Bytes::from(vec![1; 10]))).await.unwrap();
            area.push(Chunk::new(0, 10, Bytes::from(vec![2; 10]))).await.unwrap();
            let blocked = tokio::time::timeout(Duration::from_millis(100), area.push(Chunk::new(0, 20, Bytes::from(vec![3; 10]))));
            assert!(blocked.await.is_err(), "a push into a full area must wait");
            assert_eq!(area.held_bytes(), 20);
            let first = area.pop().await.unwrap();
            // Taking a chunk out does not free its bytes: the consumer still holds them.
            let still = tokio::time::timeout(Duration::from_millis(50), area.push(Chunk::new(0, 20, Bytes::from(vec![3; 10]))));
            assert!(still.await.is_err());
            drop(first);
            let writer = Arc::clone(&area);
            tokio::time::timeout(Duration::from_secs(1), writer.push(Chunk::new(0, 20, Bytes::from(vec![3; 10]))))
                .await
                .expect("released bytes admit the next chunk")
                .unwrap();
            assert_eq!(area.peak_bytes(), 20);
            area.close();
            assert!(area.push(Chunk::new(0, 30, Bytes::from(vec![4; 1]))).await.is_err());
            assert_eq!(area.pop().await.unwrap().offset, 10);
            assert_eq!(area.pop().await.unwrap().offset, 20);
            assert!(area.pop().await.is_none());
        });
    }

    #[test]
    fn read_ahead_waits_for_a_chunk_to_be_taken_or_the_area_to_close() {
        runtime().block_on(async {
            let area = Arc::new(StagingArea::new(StagingConfig::new(10, 1000).unwrap()));
            area.push(Chunk::new(0, 0, Bytes::from(vec![1; 10]))).await.unwrap();
            area.push(Chunk::new(0, 10, Bytes::from(vec![2; 10]))).await.unwrap();
            tokio::time::timeout(Duration::from_millis(100), area.wait_queued_below(3)).await.expect("2 queued is below 3");
            let waiting = tokio::spawn({
                let area = Arc::clone(&area);
                async move { area.wait_queued_below(2).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!waiting.is_finished(), "two queued chunks are not below two");
            let _taken = area.pop().await.unwrap();
            tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("a chunk taken out wakes the producer").unwrap();
            let closing = tokio::spawn({
                let area = Arc::clone(&area);
                async move { area.wait_queued_below(1).await }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            area.close();
            tokio::time::timeout(Duration::from_secs(1), closing).await.expect("closing wakes the producer").unwrap();
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Random chunk sizes through a small cap with concurrent producers and consumers: held
        /// bytes never exceed the cap, every chunk arrives intact, and each producer's chunks
        /// arrive in its order.
        #[test]
        fn memory_never_exceeds_the_cap(
            sizes in proptest::collection::vec(1usize..=64, 1..200),
            cap in 64u64..256,
            producers in 1usize..4,
            consumers in 1usize..4,
        ) {
            let expected: usize = sizes.iter().sum();
            let (peak, received) = runtime().block_on(async move {
                let area = Arc::new(StagingArea::new(StagingConfig::new(64, cap).unwrap()));
                let over = Arc::new(AtomicU64::new(0));
                let mut tasks = Vec::new();
                for p in 0..producers {
                    let area = Arc::clone(&area);
                    let sizes = sizes.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut offset = 0u64;
                        for (i, len) in sizes.into_iter().enumerate().filter(|(i, _)| i % producers == p) {
                            let data: Vec<u8> = (0..len).map(|b| (b + i) as u8).collect();
                            area.push(Chunk::new(p as u64, offset, data.into())).await.unwrap();
                            offset += len as u64;
                        }
                    }));
                }
                let mut sinks = Vec::new();
                for _ in 0..consumers {
                    let area = Arc::clone(&area);
                    let over = Arc::clone(&over);
                    sinks.push(tokio::spawn(async move {
                        let mut got = Vec::new();
                        while let Some(staged) = area.pop().await {
                            if area.held_bytes() > area.config().cap() {
                                over.fetch_add(1, Ordering::Relaxed);
                            }
                            assert!(staged.verify());
                            got.push((staged.file, staged.offset, staged.data.len()));
                            tokio::task::yield_now().await;
                        }
                        got
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
                area.close();
                let mut received = Vec::new();
                for s in sinks {
                    received.push(s.await.unwrap());
                }
                assert_eq!(over.load(Ordering::Relaxed), 0);
                (area.peak_bytes(), received)
            });
            prop_assert!(peak <= cap);
            let total: usize = received.iter().flatten().map(|r| r.2).sum();
            prop_assert_eq!(total, expected);
            for sink in &received {
                for p in 0..producers as u64 {
                    let offsets: Vec<u64> = sink.iter().filter(|r| r.0 == p).map(|r| r.1).collect();
                    prop_assert!(offsets.windows(2).all(|w| w[0] < w[1]), "out of order: {offsets:?}");
                }
            }
        }
    }
}
