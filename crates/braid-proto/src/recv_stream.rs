//! The receiving half of a connection's message stream: reassembly of
//! out-of-order data, parsing of length-prefixed messages, and the
//! receive-window (flow-control) limit announced to the peer.
//!
//! Flow control counts unread complete messages and out-of-order data
//! against the window, but not the message being assembled at the head of
//! the stream; otherwise a message larger than the window could never
//! complete. Memory is thus bounded by `window + max_message_size`.
//!
//! Complete messages stay where they arrived: a message inside one DATA
//! frame is a range of that frame's bytes (a *segment*, shared by every
//! message of the frame), and only a message that spans frames is copied,
//! into a buffer of its own. Taking a batch ([`RecvStream::pop_batch`])
//! hands over segments and ranges, so a frame of twenty small messages
//! costs one reference-count change, not twenty (issue 23).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use braid_core::pool::BufferPool;
use bytes::Bytes;

use crate::message_pool::message_pool;
use crate::recv_batch::RecvBatch;

/// Stream offset below which a peer may send before it has heard our
/// first limit. Both ends assume it.
pub const INITIAL_MAX_DATA: u64 = 64 * 1024;

/// The peer broke the stream's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("data beyond the flow-control limit ({end} > {limit})")]
    FlowControl { end: u64, limit: u64 },
    #[error("message of {size} bytes exceeds the limit of {max}")]
    TooLarge { size: u64, max: u64 },
    #[error("out-of-order data exceeds the receive buffer")]
    BufferExceeded,
}

#[derive(Debug)]
enum Parse {
    /// Reading a varint length prefix.
    Prefix { buf: [u8; 8], have: usize },
    /// Reading a message body.
    Body { remaining: u64, buf: Vec<u8>, stream_len: u64 },
}

/// A complete message not yet read: bytes `start..end` of segment
/// `segment`.
#[derive(Debug, Clone, Copy)]
struct ReadyMessage {
    segment: u64,
    start: usize,
    end: usize,
    /// Stream bytes it took, its length prefix included.
    stream_len: u64,
}

/// Reassembly buffer and message parser.
#[derive(Debug)]
pub struct RecvStream {
    /// Every byte below has been received and parsed.
    next: u64,
    out_of_order: BTreeMap<u64, Bytes>,
    out_of_order_bytes: u64,
    parse: Parse,
    /// Complete messages not yet read, in order.
    ready: VecDeque<ReadyMessage>,
    /// The buffers `ready` points into; `segments[0]` is segment number
    /// `first_segment`. A segment is dropped once no ready message points
    /// into it.
    segments: VecDeque<Bytes>,
    first_segment: u64,
    /// Stream bytes (prefixes included) of the messages in `ready`.
    ready_stream_bytes: u64,
    window: u64,
    max_message_size: u64,
    /// Highest limit announced to the peer.
    announced: u64,
    /// Buffers for messages that span packets, reused once read.
    pool: Arc<BufferPool>,
}

impl RecvStream {
    pub fn new(window: u64, max_message_size: u64) -> Self {
        RecvStream {
            next: 0,
            out_of_order: BTreeMap::new(),
            out_of_order_bytes: 0,
            parse: Parse::Prefix { buf: [0; 8], have: 0 },
            ready: VecDeque::new(),
            segments: VecDeque::new(),
            first_segment: 0,
            ready_stream_bytes: 0,
            window,
            max_message_size,
            announced: INITIAL_MAX_DATA,
            pool: message_pool(),
        }
    }

    /// Stream bytes received in order.
    pub fn received_in_order(&self) -> u64 {
        self.next
    }

    /// Takes the next complete message.
    pub fn pop(&mut self) -> Option<Bytes> {
        let m = self.ready.pop_front()?;
        self.ready_stream_bytes -= m.stream_len;
        let msg = self.segments[(m.segment - self.first_segment) as usize].slice(m.start..m.end);
        self.drop_read_segments();
        Some(msg)
    }

    /// Moves up to `max` complete messages into `batch`; how many.
    pub fn pop_batch(&mut self, batch: &mut RecvBatch, max: usize) -> usize {
        let n = max.min(self.ready.len());
        let mut last: Option<u64> = None;
        for m in self.ready.drain(..n) {
            if last != Some(m.segment) {
                batch.push_segment(self.segments[(m.segment - self.first_segment) as usize].clone());
                last = Some(m.segment);
            }
            batch.push_range(m.start..m.end);
            self.ready_stream_bytes -= m.stream_len;
        }
        self.drop_read_segments();
        n
    }

    /// Drops the segments before the one the next ready message points
    /// into (all of them when none is ready).
    fn drop_read_segments(&mut self) {
        let keep_from = self.ready.front().map_or(self.first_segment + self.segments.len() as u64, |m| m.segment);
        while self.first_segment < keep_from && self.segments.pop_front().is_some() {
            self.first_segment += 1;
        }
    }

    /// The limit we would announce now (never below one already announced).
    pub fn limit(&self) -> u64 {
        let credit_base = self.next - self.ready_stream_bytes;
        (credit_base + self.window).max(self.announced).max(INITIAL_MAX_DATA)
    }

    /// Records that `limit()` was announced, returning it.
    pub fn announce(&mut self) -> u64 {
        self.announced = self.limit();
        self.announced
    }

    /// The limit grew enough since it was last announced that the peer
    /// should hear it without waiting for data to acknowledge (it may be
    /// blocked on it).
    pub fn window_update_due(&self) -> bool {
        self.limit() - self.announced >= self.window / 4
    }

    /// DATA frame bytes `[offset, offset + data.len())`. Returns the number
    /// of complete messages that became ready.
    pub fn on_data(&mut self, offset: u64, mut data: Bytes) -> Result<usize, StreamError> {
        let end = offset + data.len() as u64;
        if end > self.announced.max(INITIAL_MAX_DATA) {
            return Err(StreamError::FlowControl { end, limit: self.announced });
        }
        if end <= self.next {
            return Ok(0); // duplicate
        }
        let before = self.ready.len();
        if offset > self.next {
            match self.out_of_order.get(&offset) {
                Some(existing) if existing.len() >= data.len() => {}
                existing => {
                    let old = existing.map_or(0, |e| e.len() as u64);
                    self.out_of_order_bytes += data.len() as u64 - old;
                    if self.out_of_order_bytes > 4 * self.window.max(INITIAL_MAX_DATA) {
                        return Err(StreamError::BufferExceeded);
                    }
                    // A copy: data held until the gap fills must not keep
                    // the caller's datagram buffer alive (the driver reuses
                    // its receive buffer once every slice of it is gone).
                    self.out_of_order.insert(offset, Bytes::copy_from_slice(&data));
                }
            }
            return Ok(0);
        }
        let skip = (self.next - offset) as usize;
        let _ = data.split_to(skip);
        self.deliver(data)?;
        // Pull in out-of-order segments that are now contiguous.
        while let Some(entry) = self.out_of_order.first_entry() {
            if *entry.key() > self.next {
                break;
            }
            let seg_offset = *entry.key();
            let mut seg = entry.remove();
            self.out_of_order_bytes -= seg.len() as u64;
            let seg_end = seg_offset + seg.len() as u64;
            if seg_end > self.next {
                let _ = seg.split_to((self.next - seg_offset) as usize);
                self.deliver(seg)?;
            }
        }
        Ok(self.ready.len() - before)
    }

    /// Parses in-order bytes starting at `self.next`.
    fn deliver(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.next += bytes.len() as u64;
        // The segment number `bytes` gets once a message is found whole in
        // it (it is stored once, however many messages it holds).
        let mut segment: Option<u64> = None;
        let mut pos = 0;
        while pos < bytes.len() {
            match &mut self.parse {
                Parse::Prefix { buf, have } => {
                    let (len, need) = if *have == 0 {
                        // The common case: the whole prefix is here.
                        let need = 1usize << (bytes[pos] >> 6);
                        if bytes.len() - pos < need {
                            buf[..bytes.len() - pos].copy_from_slice(&bytes[pos..]);
                            *have = bytes.len() - pos;
                            pos = bytes.len();
                            continue;
                        }
                        // A one-byte prefix (messages under 64 bytes) is the
                        // length itself.
                        let len = if need == 1 {
                            u64::from(bytes[pos])
                        } else {
                            crate::wire::read_varint(&mut &bytes[pos..pos + need], "message length")
                                .map_err(|_| StreamError::TooLarge { size: u64::MAX, max: self.max_message_size })?
                        };
                        pos += need;
                        (len, need)
                    } else {
                        let need = 1usize << (buf[0] >> 6);
                        let n = (need - *have).min(bytes.len() - pos);
                        buf[*have..*have + n].copy_from_slice(&bytes[pos..pos + n]);
                        *have += n;
                        pos += n;
                        if *have < need {
                            continue;
                        }
                        let len = crate::wire::read_varint(&mut &buf[..need], "message length")
                            .map_err(|_| StreamError::TooLarge { size: u64::MAX, max: self.max_message_size })?;
                        (len, need)
                    };
                    if len > self.max_message_size {
                        return Err(StreamError::TooLarge { size: len, max: self.max_message_size });
                    }
                    let stream_len = need as u64 + len;
                    if (bytes.len() - pos) as u64 >= len {
                        // Fast path: the whole body is here; no copy.
                        let seg = *segment.get_or_insert_with(|| {
                            self.segments.push_back(bytes.clone());
                            self.first_segment + self.segments.len() as u64 - 1
                        });
                        let end = pos + len as usize;
                        self.push_ready(ReadyMessage { segment: seg, start: pos, end, stream_len });
                        pos = end;
                        self.parse = Parse::Prefix { buf: [0; 8], have: 0 };
                    } else {
                        let cap = len.min(16 << 20) as usize;
                        self.parse = Parse::Body { remaining: len, buf: self.pool.take_empty(cap), stream_len };
                    }
                }
                Parse::Body { remaining, buf, stream_len } => {
                    let n = (*remaining).min((bytes.len() - pos) as u64) as usize;
                    buf.extend_from_slice(&bytes[pos..pos + n]);
                    pos += n;
                    *remaining -= n as u64;
                    if *remaining == 0 {
                        let msg = self.pool.bytes(std::mem::take(buf));
                        let stream_len = *stream_len;
                        let end = msg.len();
                        self.segments.push_back(msg);
                        let seg = self.first_segment + self.segments.len() as u64 - 1;
                        self.push_ready(ReadyMessage { segment: seg, start: 0, end, stream_len });
                        self.parse = Parse::Prefix { buf: [0; 8], have: 0 };
                    }
                }
            }
        }
        // A zero-length message whose prefix was the last byte.
        Ok(())
    }

    fn push_ready(&mut self, msg: ReadyMessage) {
        self.ready_stream_bytes += msg.stream_len;
        self.ready.push_back(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_stream::SendStream;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the packetization, order of arrival and duplication, the
        /// receiver yields exactly the messages that were sent.
        #[test]
        fn reassembles_any_arrival_order(
            sizes in prop::collection::vec(0usize..3000, 1..20),
            max_len in 1u64..700,
            order_seed in any::<u64>(),
        ) {
            let mut tx = SendStream::new();
            let msgs: Vec<Bytes> = sizes.iter().enumerate()
                .map(|(i, &n)| Bytes::from((0..n).map(|j| (i * 31 + j) as u8).collect::<Vec<_>>()))
                .collect();
            for m in &msgs { tx.push(m.clone()); }
            let mut chunks = Vec::new();
            while let Some(c) = tx.next_chunk(max_len, u64::MAX) {
                let mut buf = Vec::new();
                tx.write_chunk(&mut buf, &c);
                chunks.push((c.offset, Bytes::from(buf)));
            }
            // Shuffle deterministically and duplicate some.
            let mut state = order_seed | 1;
            let mut order: Vec<usize> = (0..chunks.len()).collect();
            for i in (1..order.len()).rev() {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let mut rx = RecvStream::new(1 << 30, 1 << 20);
            rx.announced = u64::MAX;
            for &i in order.iter().chain(order.iter().step_by(3)) {
                rx.on_data(chunks[i].0, chunks[i].1.clone()).unwrap();
            }
            let mut got = Vec::new();
            while let Some(m) = rx.pop() { got.push(m); }
            prop_assert_eq!(got, msgs);
        }
    }

    proptest! {
        /// Messages taken one by one and in batches of any size come out
        /// whole and in order, the window credit comes back in full, and
        /// no buffer is kept once everything was taken.
        #[test]
        fn batches_and_single_pops_take_every_message_once(
            sizes in prop::collection::vec(0usize..2500, 1..40),
            max_len in 1u64..1500,
            takes in prop::collection::vec(0usize..6, 1..40),
        ) {
            let mut tx = SendStream::new();
            let msgs: Vec<Bytes> = sizes.iter().enumerate()
                .map(|(i, &n)| Bytes::from((0..n).map(|j| (i * 13 + j) as u8).collect::<Vec<_>>()))
                .collect();
            for m in &msgs { tx.push(m.clone()); }
            let mut rx = RecvStream::new(1 << 30, 1 << 20);
            rx.announce();
            while let Some(c) = tx.next_chunk(max_len, u64::MAX) {
                let mut buf = Vec::new();
                tx.write_chunk(&mut buf, &c);
                rx.on_data(c.offset, Bytes::from(buf)).unwrap();
            }
            let mut got: Vec<Bytes> = Vec::new();
            let mut batch = RecvBatch::new();
            for &t in takes.iter().cycle().take(msgs.len() + 1) {
                if t == 0 {
                    if let Some(m) = rx.pop() { got.push(m); }
                } else {
                    batch.clear();
                    let n = rx.pop_batch(&mut batch, t);
                    prop_assert_eq!(n, batch.len());
                    got.extend((0..n).map(|i| batch.bytes(i).unwrap()));
                }
            }
            while let Some(m) = rx.pop() { got.push(m); }
            prop_assert_eq!(got, msgs);
            prop_assert_eq!(rx.ready_stream_bytes, 0);
            prop_assert!(rx.segments.is_empty(), "{} segments kept", rx.segments.len());
        }
    }

    #[test]
    fn a_frame_of_small_messages_is_one_segment() {
        let mut tx = SendStream::new();
        for i in 0..20u8 {
            tx.push(Bytes::from(vec![i; 64]));
        }
        let mut rx = RecvStream::new(1 << 20, 1 << 20);
        let c = tx.next_chunk(1400, u64::MAX).unwrap();
        let mut buf = Vec::new();
        tx.write_chunk(&mut buf, &c);
        assert_eq!(rx.on_data(0, Bytes::from(buf)).unwrap(), 20);
        assert_eq!(rx.segments.len(), 1);
        let mut batch = RecvBatch::new();
        assert_eq!(rx.pop_batch(&mut batch, 100), 20);
        assert!(batch.iter().enumerate().all(|(i, m)| m == &[i as u8; 64][..]));
        assert!(rx.segments.is_empty());
    }

    #[test]
    fn flow_control_limit_counts_unread_messages() {
        let mut rx = RecvStream::new(100_000, 1 << 20);
        assert_eq!(rx.announce(), 100_000);
        let mut data = vec![0x40 | 0x03, 0xe8]; // varint 1000
        data.extend(vec![1u8; 1000]);
        rx.on_data(0, Bytes::from(data)).unwrap();
        assert_eq!(rx.limit(), 100_000); // 1002 unread bytes hold credit back
        rx.pop().unwrap();
        assert_eq!(rx.limit(), 101_002);
        assert!(matches!(
            rx.on_data(200_000, Bytes::from_static(b"x")),
            Err(StreamError::FlowControl { .. })
        ));
    }

    #[test]
    fn oversized_message_is_rejected_from_its_prefix() {
        let mut rx = RecvStream::new(100_000, 10);
        assert_eq!(
            rx.on_data(0, Bytes::from_static(&[11])),
            Err(StreamError::TooLarge { size: 11, max: 10 })
        );
    }
}
