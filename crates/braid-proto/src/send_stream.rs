//! The sending half of a connection's message stream.
//!
//! Each message enters the byte stream as a varint length prefix followed by
//! its bytes, so boundaries survive any re-packetization and empty messages
//! are representable. The application's `Bytes` are kept without copying
//! until every byte of the message is acknowledged. Frames never cross a
//! message boundary; the frame that ends one is flagged `message_end`.

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
    pub fn push(&mut self, data: Bytes) {
        let mut prefix_buf = Vec::with_capacity(8);
        wire::write_varint(&mut prefix_buf, data.len() as u64);
        let mut prefix = [0u8; 8];
        prefix[..prefix_buf.len()].copy_from_slice(&prefix_buf);
        let msg = Message { offset: self.end, prefix, prefix_len: prefix_buf.len() as u8, data };
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
