//! The sending half of a connection's message stream.
//!
//! Each message enters the byte stream as a varint length prefix followed by
//! its bytes, so boundaries survive any re-packetization and empty messages
//! are representable. A large message's `Bytes` are kept without copying
//! until every byte of it is acknowledged. Small messages (up to
//! [`PACK_MAX_MESSAGE`] bytes) are copied instead, prefix and body, into
//! a *pack*: one buffer holding a run of consecutive small messages of one
//! tag (issue 23, "small messages at kernel speed"). A pack is one entry of
//! the send buffer, so a run of 64-byte messages costs one entry, one DATA
//! frame per packet and one acknowledgement step per pack instead of one
//! of each per message; copying 64 bytes is cheaper than any of those (the
//! receiver parses message boundaries from the length prefixes anyway, see
//! `recv_stream`). Frames never cross an entry boundary; the frame that
//! ends an entry is flagged `message_end` (a pack ends with a message).
//!
//! Two ways of taking data out: a single-path connection asks for the
//! next chunk that fits a packet ([`SendStream::next_chunk`]); a
//! multipath connection cuts the stream ahead of time into segments, the
//! packets its scheduler sees ([`SendStream::measure`],
//! [`SendStream::encode_range`]). Each message carries the application's
//! tag (ProgMP's packet `USER`), and a segment never mixes tags.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::Bytes;

use crate::range_set::RangeSet;
use crate::wire;

/// Largest message copied into a pack rather than kept as its own entry.
/// Below about a kilobyte the copy costs less than what an entry costs per
/// message (its frame header, its acknowledgement step, the reference
/// count or allocation of its `Bytes`); above it the copy dominates.
pub const PACK_MAX_MESSAGE: usize = 1024;

/// Capacity of one pack: about a dozen full packets, so that the entry
/// costs are shared by hundreds of small messages while a pack's memory,
/// held until its last byte is acknowledged, stays small.
const PACK_CAPACITY: usize = 16 << 10;

/// Empty packs kept for reuse (a steady stream of small messages recycles
/// the same few buffers instead of allocating one per pack).
const SPARE_PACKS: usize = 8;

/// One entry of the send buffer: a message of its own, or a pack of small
/// ones.
#[derive(Debug)]
struct Message {
    /// Stream offset of the entry's first byte (a length prefix).
    offset: u64,
    /// The application's tag (ProgMP packet `USER`), the same for every
    /// message of a pack.
    user: i64,
    body: Body,
}

#[derive(Debug)]
enum Body {
    /// One message: its length prefix, then the application's bytes.
    One { prefix: [u8; 8], prefix_len: u8, data: Bytes },
    /// Consecutive small messages, each prefix and body copied in.
    Packed(Vec<u8>),
}

impl Message {
    fn len(&self) -> u64 {
        match &self.body {
            Body::One { prefix_len, data, .. } => u64::from(*prefix_len) + data.len() as u64,
            Body::Packed(v) => v.len() as u64,
        }
    }
    fn end(&self) -> u64 {
        self.offset + self.len()
    }
}

/// A piece of the stream chosen for the next DATA frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    /// Index of the message in the buffer, valid until the next `on_ack`.
    message: usize,
    pub offset: u64,
    pub len: u64,
    pub message_end: bool,
    pub retransmission: bool,
}

/// A run of stream bytes measured by [`SendStream::measure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Stream bytes.
    pub len: u64,
    /// Bytes its DATA frames take in a packet.
    pub frame_bytes: usize,
    /// It ends a message.
    pub message_end: bool,
    /// The tag of its messages.
    pub user: i64,
}

/// Send buffer, acknowledgement bookkeeping and retransmission queue.
#[derive(Debug, Default)]
pub struct SendStream {
    messages: VecDeque<Message>,
    /// Emptied packs, for reuse.
    spare: Vec<Vec<u8>>,
    /// Every byte below is acknowledged and freed.
    acked_prefix: u64,
    /// Acknowledged ranges above `acked_prefix`.
    acked: RangeSet,
    /// First byte never sent.
    next_unsent: u64,
    /// End of the stream.
    end: u64,
    /// Lost ranges waiting to be sent again.
    retransmit: RangeSet,
    /// Index in `messages` of the message holding `next_unsent`, so new
    /// data is found without a search.
    unsent_message: usize,
}

impl SendStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a message.
    #[cfg(test)]
    pub fn push(&mut self, data: Bytes) {
        self.push_tagged(data, 0);
    }

    /// Appends a message tagged `user`.
    pub fn push_tagged(&mut self, data: Bytes, user: i64) {
        if data.len() <= PACK_MAX_MESSAGE {
            self.push_small(&data, user);
            return;
        }
        // On the stack: no allocation per message.
        let (prefix, prefix_len) = wire::varint_array(data.len() as u64);
        let msg = Message { offset: self.end, user, body: Body::One { prefix, prefix_len: prefix_len as u8, data } };
        self.end = msg.end();
        self.messages.push_back(msg);
    }

    /// Appends a copy of `data` tagged `user` (the application keeps its
    /// buffer).
    pub fn push_copy(&mut self, data: &[u8], user: i64) {
        if data.len() <= PACK_MAX_MESSAGE {
            self.push_small(data, user);
        } else {
            self.push_tagged(Bytes::copy_from_slice(data), user);
        }
    }

    /// Appends a small message to the open pack, or opens a pack.
    fn push_small(&mut self, data: &[u8], user: i64) {
        let (prefix, prefix_len) = wire::varint_array(data.len() as u64);
        let need = prefix_len + data.len();
        if !self.open_pack_fits(need, user) {
            let mut v = self.spare.pop().unwrap_or_default();
            v.reserve_exact(PACK_CAPACITY);
            self.messages.push_back(Message { offset: self.end, user, body: Body::Packed(v) });
        }
        if let Some(Message { body: Body::Packed(v), .. }) = self.messages.back_mut() {
            // A one-byte prefix is pushed, not copied (a call to memcpy
            // per message otherwise).
            match prefix_len {
                1 => v.push(prefix[0]),
                _ => v.extend_from_slice(&prefix[..prefix_len]),
            }
            v.extend_from_slice(data);
        }
        self.end += need as u64;
    }

    /// The last entry is a pack of tag `user` with room for `need` more
    /// bytes, and not all of it has been sent. Appending to a pack that
    /// was sent in full would leave its new bytes behind `unsent_message`,
    /// and no byte of a pack ever changes once written, so what was sent
    /// stays valid whatever is appended.
    fn open_pack_fits(&self, need: usize, user: i64) -> bool {
        let last = self.messages.len().wrapping_sub(1);
        match self.messages.back() {
            Some(Message { user: u, body: Body::Packed(v), .. }) => {
                *u == user && self.unsent_message <= last && v.len() + need <= v.capacity()
            }
            _ => false,
        }
    }

    /// Stream bytes queued or in flight and not yet acknowledged.
    pub fn buffered(&self) -> u64 {
        self.end - self.acked_prefix
    }

    /// Everything queued has been acknowledged.
    pub fn is_fully_acked(&self) -> bool {
        self.acked_prefix == self.end
    }

    /// Stream bytes acknowledged in order.
    pub fn acked_bytes(&self) -> u64 {
        self.acked_prefix
    }

    /// Offset of the first never-sent byte.
    pub fn next_unsent(&self) -> u64 {
        self.next_unsent
    }

    /// Something may be sent: a retransmission, or new data below `max_data`.
    pub fn has_data(&self, max_data: u64) -> bool {
        !self.retransmit.is_empty() || (self.next_unsent < self.end && self.next_unsent < max_data)
    }

    /// Lost data is waiting to be sent again.
    pub fn has_retransmissions(&self) -> bool {
        !self.retransmit.is_empty()
    }

    /// New data is queued but flow control forbids sending it.
    pub fn is_flow_blocked(&self, max_data: u64) -> bool {
        self.retransmit.is_empty() && self.next_unsent < self.end && self.next_unsent >= max_data
    }

    fn message_index(&self, offset: u64) -> Option<usize> {
        let idx = self.messages.partition_point(|m| m.end() <= offset);
        (idx < self.messages.len() && self.messages[idx].offset <= offset).then_some(idx)
    }

    /// Chooses the next chunk of at most `max_len` bytes: lost data first,
    /// then new data below the flow-control limit `max_data`.
    pub fn next_chunk(&mut self, max_len: u64, max_data: u64) -> Option<ChunkRef> {
        if max_len == 0 {
            return None;
        }
        while let Some(range) = self.retransmit.first() {
            let Some(idx) = self.message_index(range.start) else {
                // Already acknowledged and freed.
                self.retransmit.remove(range);
                continue;
            };
            let msg_end = self.messages[idx].end();
            let end = range.end.min(msg_end).min(range.start + max_len);
            self.retransmit.remove(range.start..end);
            return Some(ChunkRef {
                message: idx,
                offset: range.start,
                len: end - range.start,
                message_end: end == msg_end,
                retransmission: true,
            });
        }
        if self.next_unsent >= self.end || self.next_unsent >= max_data {
            return None;
        }
        let idx = self.unsent_message;
        let msg_end = self.messages.get(idx)?.end();
        debug_assert!(self.messages[idx].offset <= self.next_unsent && self.next_unsent < msg_end || msg_end == self.next_unsent);
        let end = msg_end.min(self.next_unsent + max_len).min(max_data);
        if end == msg_end {
            self.unsent_message += 1;
        }
        let chunk = ChunkRef {
            message: idx,
            offset: self.next_unsent,
            len: end - self.next_unsent,
            message_end: end == msg_end,
            retransmission: false,
        };
        self.next_unsent = end;
        Some(chunk)
    }

    /// Copies the bytes of `chunk` into `out`.
    pub fn write_chunk(&self, out: &mut Vec<u8>, chunk: &ChunkRef) {
        let Some(msg) = self.messages.get(chunk.message) else { return };
        debug_assert!(msg.offset <= chunk.offset && chunk.offset + chunk.len <= msg.end());
        let mut pos = (chunk.offset - msg.offset) as usize;
        let mut left = chunk.len as usize;
        match &msg.body {
            Body::Packed(v) => out.extend_from_slice(&v[pos..pos + left]),
            Body::One { prefix, prefix_len, data } => {
                let prefix_len = usize::from(*prefix_len);
                if pos < prefix_len {
                    let n = (prefix_len - pos).min(left);
                    out.extend_from_slice(&prefix[pos..pos + n]);
                    pos += n;
                    left -= n;
                }
                if left > 0 {
                    let start = pos - prefix_len;
                    out.extend_from_slice(&data[start..start + left]);
                }
            }
        }
    }

    /// End of the stream: offset of the next byte to be queued.
    #[cfg(test)]
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Longest run of stream bytes from `offset` whose messages share one
    /// tag and whose DATA frames (split at message ends, as
    /// [`SendStream::encode_range`] writes them) fit in `budget` bytes.
    /// `None` if `offset` is not below the end of the stream or the budget
    /// holds no byte.
    pub fn measure(&self, offset: u64, budget: usize) -> Option<Extent> {
        let mut idx = self.message_index(offset)?;
        let user = self.messages[idx].user;
        let (mut pos, mut left, mut frame_bytes) = (offset, budget, 0usize);
        let mut message_end = false;
        while let Some(msg) = self.messages.get(idx) {
            if msg.user != user {
                break;
            }
            let avail = msg.end() - pos;
            let fixed = 1 + wire::varint_len(pos) + wire::varint_len(avail.min(left as u64));
            if left <= fixed {
                break;
            }
            let len = avail.min((left - fixed) as u64);
            let cost = wire::data_frame_overhead(pos, len) + len as usize;
            debug_assert!(cost <= left);
            left -= cost;
            frame_bytes += cost;
            pos += len;
            message_end = pos == msg.end();
            if !message_end {
                break;
            }
            idx += 1;
        }
        (pos > offset).then_some(Extent { len: pos - offset, frame_bytes, message_end, user })
    }

    /// Writes the DATA frames of `offset .. offset + len`, one per message
    /// piece. Bytes already acknowledged and freed are skipped.
    pub fn encode_range(&self, out: &mut Vec<u8>, offset: u64, len: u64) {
        let end = (offset + len).min(self.end);
        let mut pos = offset.max(self.acked_prefix);
        while pos < end {
            let Some(idx) = self.message_index(pos) else { return };
            let msg = &self.messages[idx];
            let piece_end = end.min(msg.end());
            let chunk = ChunkRef {
                message: idx,
                offset: pos,
                len: piece_end - pos,
                message_end: piece_end == msg.end(),
                retransmission: false,
            };
            wire::encode_data_frame_header(out, chunk.offset, chunk.len, chunk.message_end);
            self.write_chunk(out, &chunk);
            pos = piece_end;
        }
    }

    /// Everything below `offset` has been cut into segments: the chunks of
    /// [`SendStream::next_chunk`] only come from the retransmission queue
    /// below it.
    pub fn skip_unsent_to(&mut self, offset: u64) {
        let offset = offset.clamp(self.next_unsent, self.end);
        self.next_unsent = offset;
        self.unsent_message = self.message_index(offset).unwrap_or(self.messages.len());
    }

    /// `range` was acknowledged. Returns the number of bytes newly acked in
    /// order (freed).
    pub fn on_ack(&mut self, range: Range<u64>) -> u64 {
        let range = range.start.max(self.acked_prefix)..range.end.min(self.end);
        if range.start >= range.end {
            return 0;
        }
        self.retransmit.remove(range.clone());
        self.acked.insert(range);
        let before = self.acked_prefix;
        while let Some(first) = self.acked.first() {
            if first.start > self.acked_prefix {
                break;
            }
            self.acked_prefix = self.acked_prefix.max(first.end);
            self.acked.pop_first();
        }
        while self.messages.front().is_some_and(|m| m.end() <= self.acked_prefix) {
            if let Some(Message { body: Body::Packed(mut v), .. }) = self.messages.pop_front() {
                if self.spare.len() < SPARE_PACKS {
                    v.clear();
                    self.spare.push(v);
                }
            }
            self.unsent_message = self.unsent_message.saturating_sub(1);
        }
        self.acked_prefix - before
    }

    /// `range` was sent in a packet now declared lost: queue what of it is
    /// still unacknowledged. Returns the number of bytes queued.
    pub fn on_lost(&mut self, range: Range<u64>) -> u64 {
        let range = range.start.max(self.acked_prefix)..range.end;
        if range.start >= range.end {
            return 0;
        }
        let mut cursor = range.start;
        let mut queued = 0;
        let acked: Vec<Range<u64>> = self.acked.intersecting(range.clone()).collect();
        for a in acked.into_iter().chain(std::iter::once(range.end..range.end)) {
            if a.start > cursor {
                queued += self.retransmit.insert(cursor..a.start);
            }
            cursor = cursor.max(a.end);
        }
        queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut SendStream, max_len: u64) -> Vec<(ChunkRef, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(c) = s.next_chunk(max_len, u64::MAX) {
            let mut buf = Vec::new();
            s.write_chunk(&mut buf, &c);
            out.push((c, buf));
        }
        out
    }

    /// A message too large to be packed: it keeps its own entry.
    fn big(byte: u8) -> Bytes {
        Bytes::from(vec![byte; PACK_MAX_MESSAGE + 1])
    }

    #[test]
    fn chunks_never_cross_large_messages_and_flag_ends() {
        let mut s = SendStream::new();
        s.push(big(1));
        s.push(big(2));
        let chunks = drain(&mut s, 700);
        let mut expected = Vec::new();
        for b in [1u8, 2] {
            wire::write_varint(&mut expected, PACK_MAX_MESSAGE as u64 + 1);
            expected.extend(vec![b; PACK_MAX_MESSAGE + 1]);
        }
        let stream: Vec<u8> = chunks.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(stream, expected);
        let ends: Vec<bool> = chunks.iter().map(|(c, _)| c.message_end).collect();
        assert_eq!(ends, [false, true, false, true]);
    }

    #[test]
    fn small_messages_share_one_entry_and_one_frame() {
        let mut s = SendStream::new();
        s.push(Bytes::from_static(b"hello"));
        s.push(Bytes::new());
        s.push(Bytes::from_static(b"world!"));
        assert_eq!(s.messages.len(), 1, "one pack");
        let chunks = drain(&mut s, 1400);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].1, b"\x05hello\x00\x06world!");
        assert!(chunks[0].0.message_end);
    }

    #[test]
    fn a_partly_sent_pack_grows_and_a_sent_one_does_not() {
        let mut s = SendStream::new();
        s.push(Bytes::from_static(b"abc"));
        let first = s.next_chunk(2, u64::MAX).unwrap();
        assert_eq!((first.offset, first.len), (0, 2));
        // Partly sent: the next message joins the pack.
        s.push(Bytes::from_static(b"de"));
        assert_eq!(s.messages.len(), 1);
        let rest = drain(&mut s, 1400);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].1, b"bc\x02de");
        // Sent in full: a new pack.
        s.push(Bytes::from_static(b"f"));
        assert_eq!(s.messages.len(), 2);
        assert_eq!(drain(&mut s, 1400)[0].1, b"\x01f");
    }

    #[test]
    fn tags_and_large_messages_end_a_pack() {
        let mut s = SendStream::new();
        s.push_tagged(Bytes::from_static(b"a"), 0);
        s.push_tagged(Bytes::from_static(b"b"), 0);
        s.push_tagged(Bytes::from_static(b"c"), 5);
        s.push_tagged(big(9), 5);
        s.push_tagged(Bytes::from_static(b"d"), 5);
        let users: Vec<i64> = s.messages.iter().map(|m| m.user).collect();
        assert_eq!(users, [0, 5, 5, 5]);
    }

    #[test]
    fn acknowledged_packs_are_reused() {
        let mut s = SendStream::new();
        for _ in 0..3 {
            for _ in 0..(PACK_CAPACITY / 65) {
                s.push(Bytes::from(vec![7u8; 64]));
            }
            let _ = drain(&mut s, 1400);
        }
        assert!(s.messages.len() >= 3);
        let end = s.end;
        s.on_ack(0..end);
        assert!(s.messages.is_empty());
        assert!(!s.spare.is_empty() && s.spare.len() <= SPARE_PACKS);
        assert!(s.spare.iter().all(|v| v.is_empty() && v.capacity() >= PACK_CAPACITY));
        s.push(Bytes::from_static(b"x"));
        assert!(s.spare.len() < SPARE_PACKS, "the new pack came from the spares");
    }

    proptest::proptest! {
        /// Messages pushed while earlier ones are being sent, lost, resent
        /// and acknowledged, in any mix of sizes and tags: the bytes sent
        /// at each offset are the stream of length-prefixed messages, so
        /// the receiver yields exactly the messages pushed.
        #[test]
        fn interleaved_pushes_sends_and_acks_keep_the_stream(
            ops in proptest::collection::vec((0usize..1500, 0i64..2, 1u64..900, 0u8..4), 1..80),
        ) {
            use crate::recv_stream::RecvStream;
            let mut s = SendStream::new();
            let mut rx = RecvStream::new(1 << 30, 1 << 20);
            rx.announce();
            let mut pushed = Vec::new();
            let mut sent: Vec<Range<u64>> = Vec::new();
            for (i, (size, user, max_len, action)) in ops.into_iter().enumerate() {
                let msg = Bytes::from((0..size).map(|j| (i * 7 + j) as u8).collect::<Vec<u8>>());
                s.push_tagged(msg.clone(), user);
                pushed.push(msg);
                match action {
                    // Send one chunk.
                    0 | 1 => {
                        if let Some(c) = s.next_chunk(max_len, u64::MAX) {
                            let mut buf = Vec::new();
                            s.write_chunk(&mut buf, &c);
                            proptest::prop_assert_eq!(buf.len() as u64, c.len);
                            rx.on_data(c.offset, Bytes::from(buf)).unwrap();
                            sent.push(c.offset..c.offset + c.len);
                        }
                    }
                    // Lose the oldest range sent and not yet acknowledged.
                    2 => {
                        if let Some(r) = sent.first().cloned() {
                            s.on_lost(r);
                        }
                    }
                    // Acknowledge it.
                    _ => {
                        if !sent.is_empty() {
                            let r = sent.remove(0);
                            s.on_ack(r);
                        }
                    }
                }
            }
            while let Some(c) = s.next_chunk(700, u64::MAX) {
                let mut buf = Vec::new();
                s.write_chunk(&mut buf, &c);
                rx.on_data(c.offset, Bytes::from(buf)).unwrap();
            }
            let mut got = Vec::new();
            while let Some(m) = rx.pop() {
                got.push(m);
            }
            proptest::prop_assert_eq!(got, pushed);
        }
    }

    #[test]
    fn lost_ranges_are_resent_except_acked_parts() {
        let mut s = SendStream::new();
        s.push(Bytes::from(vec![7u8; 98])); // 2-byte prefix: stream of 100
        let _ = drain(&mut s, 10);
        s.on_ack(20..30);
        assert_eq!(s.on_lost(0..50), 40);
        let again: Vec<_> = drain(&mut s, 100).into_iter().map(|(c, _)| (c.offset, c.len)).collect();
        assert_eq!(again, [(0, 20), (30, 20)]);
        assert_eq!(s.on_ack(0..100), 100);
        assert!(s.is_fully_acked());
        assert_eq!(s.buffered(), 0);
    }

    #[test]
    fn length_prefixes_are_varints() {
        for n in [0usize, 1, 63, 64, 16_383, 16_384] {
            let mut s = SendStream::new();
            s.push(Bytes::from(vec![0u8; n]));
            let mut expected = Vec::new();
            wire::write_varint(&mut expected, n as u64);
            let c = s.next_chunk(8, u64::MAX).unwrap();
            let mut got = Vec::new();
            s.write_chunk(&mut got, &c);
            assert_eq!(got[..expected.len().min(got.len())], expected[..expected.len().min(got.len())]);
        }
    }

    #[test]
    fn measured_extents_encode_to_exactly_their_size() {
        let mut s = SendStream::new();
        s.push_tagged(Bytes::from(vec![1u8; 10]), 0);
        s.push_tagged(Bytes::from(vec![2u8; 3000]), 0);
        s.push_tagged(Bytes::from(vec![3u8; 5]), 7);
        s.push_tagged(Bytes::from(vec![4u8; 5]), 7);
        let mut offset = 0;
        let mut seen = Vec::new();
        while let Some(e) = s.measure(offset, 1400) {
            let mut out = Vec::new();
            s.encode_range(&mut out, offset, e.len);
            assert_eq!(out.len(), e.frame_bytes);
            assert!(e.frame_bytes <= 1400);
            seen.push((offset, e.len, e.message_end, e.user));
            offset += e.len;
        }
        assert_eq!(offset, s.end());
        // The first extent packs the small message and the start of the
        // big one; tags split extents; the two tagged messages share one.
        assert_eq!(seen[0].0, 0);
        assert!(!seen[0].2);
        assert_eq!(seen.last().unwrap().3, 7);
        assert_eq!(seen.last().unwrap().1, 12);
        assert!(seen.iter().filter(|e| e.3 == 0).all(|e| e.0 + e.1 <= 11 + 3002));
        assert!(s.measure(offset, 1400).is_none());
        assert!(s.measure(0, 3).is_none(), "no byte fits in three bytes of frames");
    }

    #[test]
    fn flow_control_limits_new_data_only() {
        let mut s = SendStream::new();
        s.push(Bytes::from(vec![1u8; 1000]));
        let c = s.next_chunk(1500, 100).unwrap();
        assert_eq!(c.len, 100);
        assert!(s.next_chunk(1500, 100).is_none());
        assert!(s.is_flow_blocked(100));
        s.on_lost(0..100);
        assert_eq!(s.next_chunk(1500, 100).unwrap().len, 100);
    }
}
