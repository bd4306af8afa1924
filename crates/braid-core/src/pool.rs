//! Reusable byte buffers handed out as [`Bytes`] that come back to their
//! pool when the last reference is dropped, from any thread.
//!
//! Why: a buffer of a hundred KiB or more comes from the allocator's
//! `mmap`, and glibc gives freed memory at the top of a heap back to the
//! kernel, so allocating such a buffer afresh for every message or chunk
//! costs a page fault and a zeroed page per 4 KiB: about a tenth of the CPU
//! of a loopback transfer of 128 KiB messages (braid-proto), and of a
//! receiver taking many small files in 1 MiB bundles (braid-transfer). A
//! pooled buffer is reused with its pages already mapped.
//!
//! A pool is bounded by [`PoolLimits`]: idle buffers in count and in bytes,
//! and the capacities worth pooling (a small buffer comes cheaply from the
//! allocator's own free lists, so pooling it would only add a lock; a huge
//! one would hold too much memory idle). A buffer the pool has no room for
//! is freed at once. Buffers in use are the user's to account for.
//!
//! ```
//! use braid_core::pool::{BufferPool, PoolLimits};
//! let pool = BufferPool::new(PoolLimits { max_idle_buffers: 4, ..PoolLimits::default() });
//! let mut buf = pool.take_len(1000);
//! buf.fill(7);
//! let first = buf.as_ptr();
//! let bytes = pool.bytes(buf);
//! drop(bytes);
//! assert_eq!(pool.idle(), 1);
//! assert_eq!(pool.take_empty(500).as_ptr(), first, "the same memory, reused");
//! ```

use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// How much a [`BufferPool`] keeps idle, and which buffers it takes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLimits {
    /// Idle buffers kept at most.
    pub max_idle_buffers: usize,
    /// Capacity of all idle buffers together, in bytes, at most.
    pub max_idle_bytes: usize,
    /// Capacities worth pooling; other buffers are allocated and freed as
    /// usual (and [`BufferPool::take_empty`] of a smaller size takes no
    /// lock).
    pub capacities: RangeInclusive<usize>,
}

impl Default for PoolLimits {
    /// No limit: set the ones that matter.
    fn default() -> Self {
        PoolLimits { max_idle_buffers: usize::MAX, max_idle_bytes: usize::MAX, capacities: 0..=usize::MAX }
    }
}

/// A bounded pool of reusable byte buffers. Share it with an [`Arc`].
#[derive(Debug)]
pub struct BufferPool {
    idle: Mutex<Idle>,
    limits: PoolLimits,
}

#[derive(Debug, Default)]
struct Idle {
    buffers: Vec<Vec<u8>>,
    /// Capacity of `buffers`, in bytes.
    bytes: usize,
}

impl BufferPool {
    /// An empty pool within `limits`.
    pub fn new(limits: PoolLimits) -> Arc<BufferPool> {
        Arc::new(BufferPool { idle: Mutex::new(Idle::default()), limits })
    }

    /// An empty buffer with room for at least `capacity` bytes: an idle
    /// one if one is large enough (the most recently returned, whose
    /// memory is likeliest in cache), else a new one.
    pub fn take_empty(&self, capacity: usize) -> Vec<u8> {
        match self.reuse(capacity) {
            Some(mut buf) => {
                buf.clear();
                buf
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// A buffer of exactly `len` bytes. Its contents are unspecified
    /// (zeros, or what a previous user left): callers overwrite all of it.
    /// Only bytes beyond what a reused buffer held before are written.
    pub fn take_len(&self, len: usize) -> Vec<u8> {
        match self.reuse(len) {
            Some(mut buf) => {
                buf.resize(len, 0);
                buf
            }
            None => vec![0u8; len],
        }
    }

    /// `buf` as [`Bytes`] that return it to this pool when the last
    /// reference is dropped (if its capacity is one the pool keeps).
    pub fn bytes(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        if !self.limits.capacities.contains(&buf.capacity()) {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Pooled { buf, pool: Arc::clone(self) })
    }

    /// Idle buffers now.
    pub fn idle(&self) -> usize {
        self.lock().buffers.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reuse(&self, capacity: usize) -> Option<Vec<u8>> {
        if capacity < *self.limits.capacities.start() {
            return None;
        }
        let mut idle = self.lock();
        let i = idle.buffers.iter().rposition(|b| b.capacity() >= capacity)?;
        let buf = idle.buffers.swap_remove(i);
        idle.bytes -= buf.capacity();
        Some(buf)
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut idle = self.lock();
        if idle.buffers.len() < self.limits.max_idle_buffers
            && idle.bytes.saturating_add(buf.capacity()) <= self.limits.max_idle_bytes
        {
            idle.bytes += buf.capacity();
            idle.buffers.push(buf);
        }
    }
}

/// The owner behind a pooled [`Bytes`].
struct Pooled {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_reference_drops_and_are_reused() {
        let pool = BufferPool::new(PoolLimits { max_idle_buffers: 2, ..PoolLimits::default() });
        let mut buf = pool.take_len(8);
        buf.copy_from_slice(b"abcdefgh");
        let first = buf.as_ptr();
        let bytes = pool.bytes(buf);
        let part = bytes.slice(2..4);
        drop(bytes);
        assert_eq!(pool.idle(), 0, "a slice still holds the buffer");
        assert_eq!(&part[..], b"cd");
        drop(part);
        assert_eq!(pool.idle(), 1);
        // Reused: the same allocation, at the length asked.
        let again = pool.take_len(4);
        assert_eq!((again.as_ptr(), again.len()), (first, 4));
        assert_eq!(pool.idle(), 0);
        // Empty when asked empty, still the same memory.
        drop(pool.bytes(again));
        let empty = pool.take_empty(8);
        assert!(empty.is_empty() && empty.capacity() >= 8 && empty.as_ptr() == first);
        // A larger request than any idle buffer allocates anew.
        drop(pool.bytes(empty));
        assert_eq!(pool.take_len(100).len(), 100);
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn idle_buffers_are_bounded_in_count_and_bytes() {
        let pool = BufferPool::new(PoolLimits { max_idle_buffers: 2, ..PoolLimits::default() });
        let held: Vec<Bytes> = (0..5).map(|_| pool.bytes(pool.take_len(16))).collect();
        drop(held);
        assert_eq!(pool.idle(), 2);

        let pool = BufferPool::new(PoolLimits { max_idle_bytes: 100, ..PoolLimits::default() });
        let held: Vec<Bytes> = (0..5).map(|_| pool.bytes(Vec::with_capacity(30))).collect();
        drop(held);
        assert_eq!(pool.idle(), 3, "three of 30 bytes fit in 100");
    }

    #[test]
    fn only_capacities_in_range_are_pooled() {
        let pool = BufferPool::new(PoolLimits { capacities: 64..=1024, ..PoolLimits::default() });
        drop(pool.bytes(Vec::with_capacity(63)));
        drop(pool.bytes(Vec::with_capacity(1025)));
        assert_eq!(pool.idle(), 0);
        drop(pool.bytes(Vec::with_capacity(64)));
        assert_eq!(pool.idle(), 1);
        // Below the range no idle buffer is taken (and no lock).
        assert_eq!(pool.take_empty(10).capacity(), 10);
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn buffers_dropped_on_other_threads_come_back() {
        let pool = BufferPool::new(PoolLimits::default());
        let bytes = pool.bytes(pool.take_len(1 << 16));
        std::thread::spawn(move || drop(bytes)).join().unwrap();
        assert_eq!(pool.idle(), 1);
    }
}
