//! Recycled chunk buffers.
//!
//! Every chunk needs a buffer of up to a chunk's size: the sender's readers fill one from the
//! source files, the receiver's data streams read a frame into one. A fresh allocation of that
//! size comes from the allocator's `mmap` and is returned to the kernel when freed, so each chunk
//! paid a page fault and a zeroed page per 4 KiB twice per transfer (once per side): a tenth of
//! the receiver's CPU when many small files arrive in 1 MiB bundles. Buffers are instead handed
//! out as [`Bytes`] that come back to the pool when their last reference is dropped (after the
//! chunk was sent, or written), and are reused with their pages already mapped.
//!
//! Memory: a buffer in use is counted by the staging area that holds its chunk; only idle
//! buffers are extra, and the pool keeps at most `max_idle` of them (the rest are freed).

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// Idle buffers a transfer side keeps at most: the turnover between a buffer's release and the
/// next read is about one buffer per worker, and the tuner rarely runs more than this many
/// workers per stage on small chunks; more idle buffers would only hold memory.
pub const MAX_IDLE_BUFFERS: usize = 16;

/// A pool of reusable byte buffers. Share it with an [`Arc`].
#[derive(Debug)]
pub struct BufferPool {
    idle: Mutex<Vec<Vec<u8>>>,
    max_idle: usize,
}

impl BufferPool {
    /// A pool keeping at most `max_idle` idle buffers.
    pub fn new(max_idle: usize) -> Arc<BufferPool> {
        Arc::new(BufferPool { idle: Mutex::new(Vec::new()), max_idle })
    }

    /// A pool for chunks of `chunk_size` under a staging cap of `cap` bytes: its idle buffers
    /// never hold more than the cap (nor [`MAX_IDLE_BUFFERS`]).
    pub fn for_chunks(chunk_size: u64, cap: u64) -> Arc<BufferPool> {
        let fit = usize::try_from(cap / chunk_size.max(1)).unwrap_or(usize::MAX);
        BufferPool::new(fit.clamp(1, MAX_IDLE_BUFFERS))
    }

    /// A buffer of exactly `len` bytes. Its contents are unspecified (zeros, or what a previous
    /// user left): callers overwrite all of it.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.iter().rposition(|b| b.capacity() >= len).map(|i| idle.swap_remove(i))
        };
        match reused {
            Some(mut buf) => {
                // Only bytes beyond what the buffer held before are written (zeros).
                buf.resize(len, 0);
                buf
            }
            None => vec![0u8; len],
        }
    }

    /// `buf` as [`Bytes`] that return it to this pool when the last reference is dropped.
    pub fn bytes(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled { buf, pool: Arc::clone(self) })
    }

    /// Idle buffers now.
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn put(&self, buf: Vec<u8>) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push(buf);
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
        self.pool.put(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_reference_drops_and_are_reused() {
        let pool = BufferPool::new(2);
        let mut buf = pool.take(8);
        buf.copy_from_slice(b"abcdefgh");
        let bytes = pool.bytes(buf);
        let part = bytes.slice(2..4);
        drop(bytes);
        assert_eq!(pool.idle(), 0, "a slice still holds the buffer");
        assert_eq!(&part[..], b"cd");
        drop(part);
        assert_eq!(pool.idle(), 1);
        // Reused: same allocation, resized to what is asked.
        let again = pool.take(4);
        assert_eq!(again.len(), 4);
        assert!(again.capacity() >= 8);
        assert_eq!(pool.idle(), 0);
        // A larger request than any idle buffer allocates anew.
        drop(pool.bytes(again));
        assert_eq!(pool.take(100).len(), 100);
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn the_pool_keeps_at_most_max_idle_buffers() {
        let pool = BufferPool::new(2);
        let held: Vec<Bytes> = (0..5).map(|_| pool.bytes(pool.take(16))).collect();
        drop(held);
        assert_eq!(pool.idle(), 2);
        assert_eq!(BufferPool::for_chunks(4, 8).max_idle, 2);
        assert_eq!(BufferPool::for_chunks(1, 1 << 30).max_idle, MAX_IDLE_BUFFERS);
        assert_eq!(BufferPool::for_chunks(8, 8).max_idle, 1);
    }
}
