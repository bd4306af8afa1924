//! Reused buffers for messages that span several packets.
//!
//! A message larger than one packet is assembled by copying each packet's
//! payload into one buffer, which the application then owns as [`Bytes`].
//! Allocating that buffer afresh for every message made the allocator map
//! and unmap it again and again (glibc serves 128 KiB and more with `mmap`
//! and returns freed memory at the top of a heap to the kernel), so each
//! 4 KiB of every message cost a page fault: about a tenth of the CPU of a
//! loopback transfer of 128 KiB messages.
//!
//! Instead a message's [`Bytes`] owns a [`PooledBuffer`]: when the
//! application drops the last reference, the buffer goes back to the pool
//! of its connection and the next message is assembled in memory that is
//! already mapped. The pool is bounded ([`MAX_POOLED_BYTES`] in all,
//! buffers of at most [`MAX_POOLED_CAPACITY`] bytes), so it holds at most
//! a few MiB per connection however the application behaves, and a buffer
//! the pool has no room for is freed at once.
//!
//! Small messages (below [`MIN_POOLED_LEN`]) are not pooled: the allocator
//! serves them from memory it keeps, so a pool would only add a lock.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Messages shorter than this are allocated as usual.
pub(crate) const MIN_POOLED_LEN: usize = 16 * 1024;
/// Most bytes of buffers a pool keeps: enough for the messages a fast
/// sender has in flight towards a reader that lags a little (a 128 KiB
/// message at a time, up to half the default receive window), far below
/// what the receive window itself lets unread messages take.
pub(crate) const MAX_POOLED_BYTES: usize = 8 << 20;
/// Larger buffers are freed rather than kept.
pub(crate) const MAX_POOLED_CAPACITY: usize = 4 << 20;

/// Free message buffers of one connection, shared with the [`Bytes`] handed
/// to the application (they return their buffer on drop, from any thread).
#[derive(Debug, Default, Clone)]
pub(crate) struct MessagePool {
    free: Arc<Mutex<Free>>,
}

#[derive(Debug, Default)]
struct Free {
    buffers: Vec<Vec<u8>>,
    /// Capacity of `buffers`, in bytes.
    bytes: usize,
}

impl MessagePool {
    /// An empty buffer with room for `len` bytes: a pooled one if one is
    /// large enough, else a new one. Not pooled below [`MIN_POOLED_LEN`].
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        if len >= MIN_POOLED_LEN {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = free.buffers.iter().position(|b| b.capacity() >= len) {
                let buf = free.buffers.swap_remove(i);
                free.bytes -= buf.capacity();
                return buf;
            }
        }
        Vec::with_capacity(len)
    }

    /// A finished message: `buf` as [`Bytes`] that return it here when the
    /// last reference is dropped.
    pub(crate) fn freeze(&self, buf: Vec<u8>) -> Bytes {
        if buf.capacity() < MIN_POOLED_LEN || buf.capacity() > MAX_POOLED_CAPACITY {
            return Bytes::from(buf);
        }
        Bytes::from_owner(PooledBuffer { buf, pool: self.clone() })
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.bytes + buf.capacity() <= MAX_POOLED_BYTES {
            buf.clear();
            free.bytes += buf.capacity();
            free.buffers.push(buf);
        }
    }

    #[cfg(test)]
    fn pooled(&self) -> usize {
        self.free.lock().unwrap().buffers.len()
    }
}

/// A message's buffer, owned by its [`Bytes`]; back to the pool on drop.
struct PooledBuffer {
    buf: Vec<u8>,
    pool: MessagePool,
}

impl AsRef<[u8]> for PooledBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_message_lends_its_buffer_to_the_next() {
        let pool = MessagePool::default();
        let mut buf = pool.take(100_000);
        buf.extend_from_slice(&[7; 100_000]);
        let first_ptr = buf.as_ptr();
        let msg = pool.freeze(buf);
        let part = msg.slice(10..20);
        drop(msg);
        // A slice still refers to the buffer: not back yet.
        assert_eq!(pool.pooled(), 0);
        assert_eq!(&part[..], &[7; 10]);
        drop(part);
        assert_eq!(pool.pooled(), 1);
        let again = pool.take(100_000);
        assert_eq!(again.as_ptr(), first_ptr);
        assert!(again.is_empty());
    }

    #[test]
    fn the_pool_is_bounded_and_small_or_huge_buffers_are_not_pooled() {
        let pool = MessagePool::default();
        let fit = MAX_POOLED_BYTES / MIN_POOLED_LEN;
        let msgs: Vec<Bytes> = (0..fit + 3)
            .map(|_| {
                let mut b = pool.take(MIN_POOLED_LEN);
                b.resize(MIN_POOLED_LEN, 1);
                pool.freeze(b)
            })
            .collect();
        drop(msgs);
        assert_eq!(pool.pooled(), fit);

        let pool = MessagePool::default();
        drop(pool.freeze(vec![0; 100]));
        drop(pool.freeze(Vec::with_capacity(MAX_POOLED_CAPACITY + 1)));
        assert_eq!(pool.pooled(), 0);
    }

    #[test]
    fn a_pooled_buffer_too_small_is_not_used() {
        let pool = MessagePool::default();
        let mut b = pool.take(MIN_POOLED_LEN);
        b.resize(MIN_POOLED_LEN, 1);
        drop(pool.freeze(b));
        let big = pool.take(2 * MIN_POOLED_LEN);
        assert!(big.capacity() >= 2 * MIN_POOLED_LEN);
        assert_eq!(pool.pooled(), 1);
    }

    #[test]
    fn messages_dropped_on_other_threads_return_their_buffers() {
        let pool = MessagePool::default();
        let mut b = pool.take(MIN_POOLED_LEN);
        b.resize(MIN_POOLED_LEN, 3);
        let msg = pool.freeze(b);
        std::thread::spawn(move || drop(msg)).join().unwrap();
        assert_eq!(pool.pooled(), 1);
    }
}
