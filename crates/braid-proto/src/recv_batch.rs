//! A batch of received messages, handed over as the buffers they arrived
//! in and a range of each: taking twenty small messages that arrived in one
//! packet costs one reference-count change, where a `Bytes` per message
//! costs twenty, each a contended atomic between the thread that received
//! the packet and the thread that reads it (issue 23).

use std::ops::Range;

use bytes::Bytes;

/// Messages received together, in order; filled by
/// [`Endpoint::recv_batch`](crate::Endpoint::recv_batch). Reuse one batch
/// across calls ([`RecvBatch::clear`] keeps its capacity): a steady stream
/// of small messages then allocates nothing per message.
///
/// ```
/// use braid_proto::RecvBatch;
/// let batch = RecvBatch::new();
/// assert!(batch.is_empty());
/// for msg in batch.iter() {
///     println!("{} bytes", msg.len());
/// }
/// ```
#[derive(Debug, Default, Clone)]
pub struct RecvBatch {
    /// The buffers the messages lie in.
    segments: Vec<Bytes>,
    /// Each message: its segment (an index into `segments`) and range.
    messages: Vec<(usize, Range<usize>)>,
}

impl RecvBatch {
    /// An empty batch.
    pub fn new() -> RecvBatch {
        RecvBatch::default()
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// No message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Message `i` (in order of the stream).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let (seg, range) = self.messages.get(i)?;
        Some(&self.segments[*seg][range.clone()])
    }

    /// Message `i` as a `Bytes` of its own (sharing the buffer it arrived
    /// in: no copy), for a message kept beyond the batch.
    pub fn bytes(&self, i: usize) -> Option<Bytes> {
        let (seg, range) = self.messages.get(i)?;
        Some(self.segments[*seg].slice(range.clone()))
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.messages.iter().map(|(seg, range)| &self.segments[*seg][range.clone()])
    }

    /// Bytes of all messages together.
    pub fn total_len(&self) -> usize {
        self.messages.iter().map(|(_, r)| r.len()).sum()
    }

    /// Empties the batch, releasing its buffers and keeping its capacity.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.messages.clear();
    }

    /// The following messages lie in `segment`.
    pub(crate) fn push_segment(&mut self, segment: Bytes) {
        self.segments.push(segment);
    }

    /// A message: `range` of the latest segment.
    pub(crate) fn push_range(&mut self, range: Range<usize>) {
        debug_assert!(!self.segments.is_empty());
        self.messages.push((self.segments.len() - 1, range));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_ranges_of_their_segments() {
        let mut b = RecvBatch::new();
        b.push_segment(Bytes::from_static(b"\x02ab\x01c"));
        b.push_range(1..3);
        b.push_range(4..5);
        b.push_segment(Bytes::from_static(b"whole"));
        b.push_range(0..5);
        assert_eq!(b.len(), 3);
        assert_eq!(b.iter().collect::<Vec<_>>(), [&b"ab"[..], b"c", b"whole"]);
        assert_eq!(b.get(1), Some(&b"c"[..]));
        assert_eq!(b.bytes(2).unwrap(), Bytes::from_static(b"whole"));
        assert_eq!(b.get(3), None);
        assert_eq!(b.total_len(), 8);
        b.clear();
        assert!(b.is_empty() && b.iter().next().is_none());
    }
}
