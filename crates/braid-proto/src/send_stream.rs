//! The sending half of a connection's message stream.
//!
//! Each message enters the byte stream as a varint length prefix followed by
//! its bytes, so boundaries survive any re-packetization and empty messages
//! are representable. The application's `Bytes` are kept without copying
//! until every byte of the message is acknowledged. Frames never cross a
//! message boundary; the frame that ends one is flagged `message_end`.
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

#[derive(Debug)]
struct Message {
    /// Stream offset of the length prefix.
    offset: u64,
    prefix: [u8; 8],
    prefix_len: u8,
    /// The application's tag (ProgMP packet `USER`).
    user: i64,
    data: Bytes,
}

impl Message {
    fn len(&self) -> u64 {
        u64::from(self.prefix_len) + self.data.len() as u64
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
        // On the stack: no allocation per message.
        let (prefix, prefix_len) = wire::varint_array(data.len() as u64);
        let msg = Message { offset: self.end, prefix, prefix_len: prefix_len as u8, user, data };
        self.end = msg.end();
        self.messages.push_back(msg);
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
        let prefix_len = usize::from(msg.prefix_len);
        if pos < prefix_len {
            let n = (prefix_len - pos).min(left);
            out.extend_from_slice(&msg.prefix[pos..pos + n]);
            pos += n;
            left -= n;
        }
        if left > 0 {
            let start = pos - prefix_len;
            out.extend_from_slice(&msg.data[start..start + left]);
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
            self.messages.pop_front();
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

    #[test]
    fn chunks_never_cross_messages_and_flag_ends() {
        let mut s = SendStream::new();
        s.push(Bytes::from_static(b"hello"));
        s.push(Bytes::new());
        s.push(Bytes::from_static(b"world!"));
        let chunks = drain(&mut s, 4);
        let stream: Vec<u8> = chunks.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(stream, b"\x05hello\x00\x06world!");
        let ends: Vec<bool> = chunks.iter().map(|(c, _)| c.message_end).collect();
        assert_eq!(ends, [false, true, true, false, true]);
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
