//! Reused buffers for messages that span several packets.
//!
//! A message larger than one packet is assembled by copying each packet's
//! payload into one buffer, which the application then owns as `Bytes`.
//! Allocating that buffer afresh for every message made the allocator map
//! and unmap it again and again, so each 4 KiB of every message cost a
//! page fault: about a tenth of the CPU of a loopback transfer of 128 KiB
//! messages. Each connection's receive stream therefore assembles messages
//! in buffers from its own [`BufferPool`] (braid-core): a message's
//! `Bytes` gives its buffer back when the application drops it, from any
//! thread, and the next message reuses memory already mapped.
//!
//! The pool is bounded ([`MAX_POOLED_BYTES`] idle in all, buffers of
//! [`MIN_POOLED_LEN`] to [`MAX_POOLED_CAPACITY`] bytes), so it holds at
//! most a few MiB per connection however the application behaves. Smaller
//! messages are allocated as usual: the allocator serves them from memory
//! it keeps, so a pool would only add a lock.

use std::sync::Arc;

use braid_core::pool::{BufferPool, PoolLimits};

/// Messages shorter than this are allocated as usual.
pub(crate) const MIN_POOLED_LEN: usize = 16 * 1024;
/// Most bytes of idle buffers a pool keeps: enough for the messages a fast
/// sender has in flight towards a reader that lags a little (a 128 KiB
/// message at a time, up to half the default receive window), far below
/// what the receive window itself lets unread messages take.
pub(crate) const MAX_POOLED_BYTES: usize = 8 << 20;
/// Larger buffers are freed rather than kept.
pub(crate) const MAX_POOLED_CAPACITY: usize = 4 << 20;

/// A connection's pool of message buffers.
pub(crate) fn message_pool() -> Arc<BufferPool> {
    BufferPool::new(PoolLimits {
        max_idle_bytes: MAX_POOLED_BYTES,
        capacities: MIN_POOLED_LEN..=MAX_POOLED_CAPACITY,
        ..PoolLimits::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn the_pool_is_bounded_and_small_or_huge_buffers_are_not_pooled() {
        let pool = message_pool();
        let fit = MAX_POOLED_BYTES / MIN_POOLED_LEN;
        let msgs: Vec<Bytes> = (0..fit + 3)
            .map(|_| {
                let mut b = pool.take_empty(MIN_POOLED_LEN);
                b.resize(MIN_POOLED_LEN, 1);
                pool.bytes(b)
            })
            .collect();
        drop(msgs);
        assert_eq!(pool.idle(), fit);

        let pool = message_pool();
        drop(pool.bytes(vec![0; 100]));
        drop(pool.bytes(Vec::with_capacity(MAX_POOLED_CAPACITY + 1)));
        assert_eq!(pool.idle(), 0);
    }
}
