//! Recycled chunk buffers.
//!
//! Every chunk needs a buffer of up to a chunk's size: the sender's readers fill one from the
//! source files, the receiver's data streams read a frame into one. A fresh allocation of that
//! size comes from the allocator's `mmap` and is returned to the kernel when freed, so each chunk
//! paid a page fault and a zeroed page per 4 KiB twice per transfer (once per side): a tenth of
//! the receiver's CPU when many small files arrive in 1 MiB bundles. Buffers come instead from a
//! [`BufferPool`] (braid-core): handed out as `Bytes` that return to the pool when their last
//! reference is dropped (after the chunk was sent, or written), and reused with their pages
//! already mapped.
//!
//! Memory: a buffer in use is counted by the staging area that holds its chunk; only idle
//! buffers are extra, and the pool keeps at most [`MAX_IDLE_BUFFERS`] of them, and never more
//! than the staging cap (the rest are freed).

use std::sync::Arc;

pub use braid_core::pool::BufferPool;
use braid_core::pool::PoolLimits;

/// Idle buffers a transfer side keeps at most: the turnover between a buffer's release and the
/// next read is about one buffer per worker, and the tuner rarely runs more than this many
/// workers per stage on small chunks; more idle buffers would only hold memory.
pub const MAX_IDLE_BUFFERS: usize = 16;

/// A pool for chunks of `chunk_size` under a staging cap of `cap` bytes: its idle buffers never
/// hold more than the cap (nor [`MAX_IDLE_BUFFERS`]).
pub fn chunk_pool(chunk_size: u64, cap: u64) -> Arc<BufferPool> {
    BufferPool::new(PoolLimits { max_idle_buffers: idle_chunks(chunk_size, cap), ..PoolLimits::default() })
}

/// Idle chunk buffers that fit under the staging cap, 1 to [`MAX_IDLE_BUFFERS`].
fn idle_chunks(chunk_size: u64, cap: u64) -> usize {
    let fit = usize::try_from(cap / chunk_size.max(1)).unwrap_or(usize::MAX);
    fit.clamp(1, MAX_IDLE_BUFFERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_chunks_stay_under_the_staging_cap() {
        assert_eq!(idle_chunks(4, 8), 2);
        assert_eq!(idle_chunks(1, 1 << 30), MAX_IDLE_BUFFERS);
        assert_eq!(idle_chunks(8, 8), 1);
        assert_eq!(idle_chunks(16, 8), 1, "at least one");
        let pool = chunk_pool(4, 8);
        let held: Vec<bytes::Bytes> = (0..5).map(|_| pool.bytes(pool.take_len(4))).collect();
        drop(held);
        assert_eq!(pool.idle(), 2);
    }
}
