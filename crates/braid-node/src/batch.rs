//! Message batches (issue 23 item 3, "the Node over each transport ≥ 0.8×
//! the bare transport's rate"): many bodies that share one header and one
//! body kind, held in one buffer, so that sending and receiving a message
//! of a batch costs a length and a copy instead of a [`Message`] of its own
//! (its header cloned, postcard-encoded and decoded, queued and woken for).
//!
//! The buffer holds the bodies as they travel: each one a LEB128 varint
//! length followed by its bytes. The builder writes that form, the wire
//! frame carries it as is after the header (see [`crate::wire`]), and a
//! received batch keeps the received buffer: every body handed out is a
//! slice of it (zero copy). The builder writes the frame's start (header,
//! kind, room for the count) in front of the first body, so a batch built
//! here goes on the wire without a further copy when it fits one frame.

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::Body;
use crate::{BodyKind, DecodeError, Header, Message, MessageType};

/// Bytes of the LEB128 varint of `n`.
pub(crate) fn varint_len(n: u64) -> usize {
    let bits = 64 - (n | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Append the LEB128 varint of `n`.
pub(crate) fn put_varint(out: &mut BytesMut, mut n: u64) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.put_u8(byte);
            return;
        }
        out.put_u8(byte | 0x80);
    }
}

/// Bytes of the count in a frame the builder wrote: a LEB128 varint padded
/// to its longest form (continuation bits set on leading zero groups), so
/// that its room is known before the count is.
pub(crate) const PADDED_COUNT: usize = 5;

/// Write `n` (below 2³⁵) as a varint of exactly [`PADDED_COUNT`] bytes.
fn put_padded_varint(out: &mut [u8], n: u64) {
    for (i, b) in out.iter_mut().enumerate().take(PADDED_COUNT) {
        let group = ((n >> (7 * i)) & 0x7f) as u8;
        *b = if i + 1 < PADDED_COUNT { group | 0x80 } else { group };
    }
}

/// Read a LEB128 varint of at most 5 bytes (values below 2³⁵, which covers
/// every length the node accepts) at `*pos`, advancing it; `None` if the
/// bytes end first or the varint is longer.
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Why the bodies of a received batch frame were refused (the frame is
/// dropped and counted in [`crate::NodeStats::malformed_frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The count is missing or malformed.
    #[error("batch count missing or malformed")]
    Count,
    /// A batch frame holds at least one body (the sender never frames an
    /// empty batch).
    #[error("empty batch")]
    Empty,
    /// More bodies announced than the frame has bytes for (each body takes
    /// at least its one-byte length).
    #[error("batch announces {count} bodies in {bytes} bytes")]
    CountTooLarge {
        /// The count announced.
        count: u64,
        /// Bytes left for the bodies.
        bytes: usize,
    },
    /// Body `index`'s length is malformed or runs past the frame's end.
    #[error("body {index} of the batch runs past the frame's end")]
    Body {
        /// Its position in the batch.
        index: u64,
    },
    /// Bytes follow the last body.
    #[error("{0} bytes after the batch's last body")]
    Trailing(usize),
}

/// Check that `bodies` holds exactly `count` length-prefixed bodies; the
/// largest body's length.
fn validate(count: u64, bodies: &[u8]) -> Result<usize, BatchError> {
    if count == 0 {
        return Err(BatchError::Empty);
    }
    // Each body takes at least its length byte: a count beyond the bytes
    // left cannot be honest, and bounds the loop by the frame's size.
    if count > bodies.len() as u64 {
        return Err(BatchError::CountTooLarge { count, bytes: bodies.len() });
    }
    let (mut pos, mut max) = (0usize, 0usize);
    for index in 0..count {
        let len = read_varint(bodies, &mut pos).ok_or(BatchError::Body { index })?;
        let len = usize::try_from(len).map_err(|_| BatchError::Body { index })?;
        if len > bodies.len() - pos {
            return Err(BatchError::Body { index });
        }
        pos += len;
        max = max.max(len);
    }
    match bodies.len() - pos {
        0 => Ok(max),
        n => Err(BatchError::Trailing(n)),
    }
}

/// Messages that share one header and one body kind, their bodies in one
/// buffer: what [`crate::Node::send_batch`] sends as one frame (or as few
/// frames as the transport's unit allows) and [`crate::Node::recv_batch`]
/// returns. Bodies come out in the order they were pushed, as `&[u8]`
/// ([`MessageBatch::iter`]) or as [`Bytes`] slices of the batch's buffer
/// ([`MessageBatch::iter_bytes`], no copy).
///
/// ```
/// use braid_node::{BasicAddress, BasicHeader, MessageBatch, Transport};
/// let a = BasicAddress::new("127.0.0.1:7000".parse().unwrap());
/// let mut b = MessageBatch::builder(BasicHeader::new(a, a, Transport::Braid));
/// b.push(b"one");
/// b.push(b"two");
/// let batch = b.build();
/// assert_eq!(batch.len(), 2);
/// assert_eq!(batch.iter().collect::<Vec<_>>(), [&b"one"[..], &b"two"[..]]);
/// ```
#[derive(Clone)]
pub struct MessageBatch<H> {
    header: H,
    kind: BodyKind,
    count: usize,
    /// `count` bodies, each a varint length and its bytes.
    bodies: Bytes,
    /// The whole frame (TCP prefix included) that the builder wrote for
    /// this header, whose tail is `bodies`: sent as it is. Dropped when the
    /// header or the bodies change.
    framed: Option<Bytes>,
}

impl<H: Header> MessageBatch<H> {
    /// A builder of a batch of raw bodies.
    pub fn builder(header: H) -> MessageBatchBuilder<H> {
        MessageBatchBuilder::new(header, BodyKind::Raw)
    }

    /// A builder of a batch of `T` values (postcard-encoded as they are
    /// pushed: a batch is always serialized, even to this host).
    pub fn typed_builder<T: MessageType>(header: H) -> MessageBatchBuilder<H> {
        MessageBatchBuilder::new(header, BodyKind::Typed(T::type_id()))
    }

    /// A batch of one: `msg`'s body (a typed value is encoded), for a
    /// receiver that takes batches of a message sent alone.
    pub(crate) fn of_message(msg: Message<H>) -> Result<Self, crate::SendError> {
        let (header, kind, body) = msg.into_wire_parts()?;
        let mut buf = BytesMut::with_capacity(varint_len(body.len() as u64) + body.len());
        put_varint(&mut buf, body.len() as u64);
        buf.put_slice(&body);
        Ok(MessageBatch { header, kind, count: 1, bodies: buf.freeze(), framed: None })
    }

    /// A received batch: `count` bodies in `bodies`, checked.
    pub(crate) fn from_wire(header: H, kind: BodyKind, count: u64, bodies: Bytes) -> Result<Self, BatchError> {
        validate(count, &bodies)?;
        // `validate` bounded `count` by the bytes of a frame in memory.
        let count = usize::try_from(count).map_err(|_| BatchError::Count)?;
        Ok(MessageBatch { header, kind, count, bodies, framed: None })
    }

    /// The header every message of the batch carries.
    pub fn header(&self) -> &H {
        &self.header
    }

    /// The header, to change (to forward the batch, or set its transport).
    pub fn header_mut(&mut self) -> &mut H {
        self.framed = None;
        &mut self.header
    }

    /// What every body holds.
    pub fn kind(&self) -> BodyKind {
        self.kind
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bodies in their wire form (each a varint length and its bytes).
    pub(crate) fn wire_bodies(&self) -> &Bytes {
        &self.bodies
    }

    /// The frame the builder wrote, if the batch is still as built.
    pub(crate) fn framed(&self) -> Option<&Bytes> {
        self.framed.as_ref()
    }

    /// The bodies, in order.
    pub fn iter(&self) -> Bodies<'_> {
        Bodies { buf: &self.bodies, pos: 0, left: self.count }
    }

    /// The bodies, in order, each a slice of the batch's buffer (no copy).
    pub fn iter_bytes(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.spans().map(|(start, end)| self.bodies.slice(start..end))
    }

    /// Where each body lies in the buffer.
    pub(crate) fn spans(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let buf = &self.bodies[..];
        let mut pos = 0usize;
        (0..self.count).map_while(move |_| {
            let len = usize::try_from(read_varint(buf, &mut pos)?).ok()?;
            let start = pos;
            pos = pos.checked_add(len).filter(|&e| e <= buf.len())?;
            Some((start, pos))
        })
    }

    /// The bodies decoded as `T`s, in order (an error for a batch of
    /// another kind, or a body that is not a `T`).
    pub fn values<T: MessageType>(&self) -> impl Iterator<Item = Result<T, DecodeError>> + '_ {
        let found = self.kind;
        self.iter().map(move |body| {
            if found != BodyKind::Typed(T::type_id()) {
                return Err(DecodeError::WrongType { expected: T::NAME, expected_id: T::type_id(), found });
            }
            postcard::from_bytes(body).map_err(|source| DecodeError::Postcard { name: T::NAME, source })
        })
    }

    /// The first message, taken out of the batch (its body a slice of the
    /// buffer): how a receiver that takes single messages splits a batch,
    /// one message at a time.
    pub fn pop_front(&mut self) -> Option<Message<H>> {
        if self.count == 0 {
            return None;
        }
        let mut pos = 0usize;
        let len = usize::try_from(read_varint(&self.bodies, &mut pos)?).ok()?;
        let end = pos.checked_add(len).filter(|&e| e <= self.bodies.len())?;
        let body = self.bodies.slice(pos..end);
        bytes::Buf::advance(&mut self.bodies, end);
        self.count -= 1;
        self.framed = None;
        let body = match self.kind {
            BodyKind::Raw => Body::Raw(body),
            BodyKind::Typed(type_id) => Body::Encoded { type_id, bytes: body },
        };
        Some(Message::from_wire(self.header.clone(), body))
    }

    /// The first `n` messages as a batch of their own, leaving the rest
    /// (all of them if `n` ≥ [`MessageBatch::len`]).
    pub fn split_to(&mut self, n: usize) -> MessageBatch<H> {
        let n = n.min(self.count);
        let end = self.spans().take(n).last().map_or(0, |(_, end)| end);
        let front = self.bodies.split_to(end);
        self.count -= n;
        self.framed = None;
        MessageBatch { header: self.header.clone(), kind: self.kind, count: n, bodies: front, framed: None }
    }
}

impl<H: Header> IntoIterator for MessageBatch<H> {
    type Item = Message<H>;
    type IntoIter = IntoMessages<H>;
    /// The messages, each with a clone of the header and a slice of the
    /// buffer as its body.
    fn into_iter(self) -> IntoMessages<H> {
        IntoMessages(self)
    }
}

/// The messages of a batch ([`MessageBatch::into_iter`]).
pub struct IntoMessages<H>(MessageBatch<H>);

impl<H: Header> Iterator for IntoMessages<H> {
    type Item = Message<H>;
    fn next(&mut self) -> Option<Message<H>> {
        self.0.pop_front()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.count, Some(self.0.count))
    }
}

impl<H: std::fmt::Debug> std::fmt::Debug for MessageBatch<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBatch")
            .field("header", &self.header)
            .field("kind", &self.kind)
            .field("messages", &self.count)
            .field("bytes", &self.bodies.len())
            .finish()
    }
}

/// The bodies of a batch, in order ([`MessageBatch::iter`]).
pub struct Bodies<'a> {
    buf: &'a [u8],
    pos: usize,
    left: usize,
}

impl<'a> Iterator for Bodies<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let len = usize::try_from(read_varint(self.buf, &mut self.pos)?).ok()?;
        let body = self.buf.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        self.left -= 1;
        Some(body)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// Appends bodies to a batch ([`MessageBatch::builder`]); each push costs
/// a varint and a copy into the batch's one buffer, which starts with the
/// frame's head, so that the batch is sent without another copy.
pub struct MessageBatchBuilder<H> {
    header: H,
    kind: BodyKind,
    count: usize,
    /// The frame's head (TCP prefix, version, header, kind, room for the
    /// count), then the bodies.
    buf: BytesMut,
    /// The head as written for this header (without the count's room);
    /// empty if the header could not be encoded (the batch is then
    /// framed, and the error reported, at send).
    head: Vec<u8>,
    /// Where typed values are encoded before their length is known.
    scratch: Vec<u8>,
}

impl<H: Header> MessageBatchBuilder<H> {
    fn new(header: H, kind: BodyKind) -> Self {
        let head = crate::wire::batch_head(&header, kind).unwrap_or_default();
        let mut b = MessageBatchBuilder { header, kind, count: 0, buf: BytesMut::new(), head, scratch: Vec::new() };
        b.start();
        b
    }

    /// Bytes in front of the first body.
    fn head_len(&self) -> usize {
        if self.head.is_empty() {
            0
        } else {
            self.head.len() + PADDED_COUNT
        }
    }

    /// Write the head into the (empty) buffer.
    fn start(&mut self) {
        if !self.head.is_empty() {
            self.buf.put_slice(&self.head);
            self.buf.put_bytes(0, PADDED_COUNT);
        }
    }

    /// Room for `bytes` more body bytes (and their lengths), so pushes do
    /// not reallocate.
    pub fn reserve(&mut self, bytes: usize) -> &mut Self {
        self.buf.reserve(bytes);
        self
    }

    /// Append a raw body (in a typed batch, it must be a postcard encoding
    /// of the batch's type; [`MessageBatchBuilder::push_value`] makes one).
    pub fn push(&mut self, body: &[u8]) -> &mut Self {
        self.buf.reserve(varint_len(body.len() as u64) + body.len());
        put_varint(&mut self.buf, body.len() as u64);
        self.buf.put_slice(body);
        self.count += 1;
        self
    }

    /// Append `value`, postcard-encoded.
    pub fn push_value<T: MessageType>(&mut self, value: &T) -> Result<&mut Self, crate::SendError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let scratch = postcard::to_extend(value, scratch).map_err(|e| crate::SendError::Encode { what: T::NAME, reason: e.to_string() })?;
        self.push(&scratch);
        self.scratch = scratch;
        Ok(self)
    }

    /// Messages pushed so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the bodies and their lengths so far.
    pub fn bytes(&self) -> usize {
        self.buf.len() - self.head_len()
    }

    /// Complete the head of `buf` (count and TCP's length prefix) and make
    /// the batch.
    fn finish(&self, mut buf: BytesMut, count: usize) -> MessageBatch<H> {
        let head = self.head_len();
        let frame_len = u32::try_from(buf.len() - crate::wire::PREFIX).ok();
        let framed = match frame_len {
            Some(len) if head > 0 && (count as u64) < (1 << 35) => {
                put_padded_varint(&mut buf[head - PADDED_COUNT..head], count as u64);
                buf[..crate::wire::PREFIX].copy_from_slice(&len.to_be_bytes());
                true
            }
            _ => false,
        };
        let frame = buf.freeze();
        let bodies = frame.slice(head..);
        MessageBatch { header: self.header.clone(), kind: self.kind, count, bodies, framed: framed.then_some(frame) }
    }

    /// The batch.
    pub fn build(mut self) -> MessageBatch<H> {
        let buf = std::mem::take(&mut self.buf);
        self.finish(buf, self.count)
    }

    /// The batch built so far, leaving the builder empty, its header and
    /// kind kept: to build batch after batch.
    pub fn take(&mut self) -> MessageBatch<H> {
        let count = std::mem::take(&mut self.count);
        let buf = self.buf.split();
        let batch = self.finish(buf, count);
        self.start();
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BasicAddress, BasicHeader, Transport};
    use proptest::prelude::*;

    fn hdr() -> BasicHeader {
        let a = BasicAddress::new("127.0.0.1:9".parse().unwrap());
        BasicHeader::new(a, a, Transport::Tcp)
    }

    fn batch_of(bodies: &[Vec<u8>]) -> MessageBatch<BasicHeader> {
        let mut b = MessageBatch::builder(hdr());
        for body in bodies {
            b.push(body);
        }
        b.build()
    }

    #[test]
    fn varints_have_their_length() {
        for n in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, (1 << 35) - 1] {
            let mut out = BytesMut::new();
            put_varint(&mut out, n);
            assert_eq!(out.len(), varint_len(n), "{n}");
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Some(n));
            assert_eq!(pos, out.len());
        }
        // Six bytes (≥ 2³⁵) are refused, not wrapped.
        let mut pos = 0;
        assert_eq!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], &mut pos), None);
    }

    #[test]
    fn malformed_bodies_are_refused() {
        // One body of 3 announced, 2 present.
        assert_eq!(validate(1, &[3, b'a', b'b']), Err(BatchError::Body { index: 0 }));
        // Zero-length bodies cannot inflate the count past the bytes.
        assert_eq!(validate(5, &[0, 0, 0]), Err(BatchError::CountTooLarge { count: 5, bytes: 3 }));
        assert_eq!(validate(3, &[0, 0, 0]), Ok(0));
        assert_eq!(validate(1, &[1, b'a', 0]), Err(BatchError::Trailing(1)));
        assert_eq!(validate(0, &[]), Err(BatchError::Empty));
        // A length near u64::MAX is a malformed varint here.
        assert_eq!(validate(1, &[0xff; 10]), Err(BatchError::Body { index: 0 }));
    }

    #[test]
    fn split_and_pop_keep_order() {
        let bodies: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; i as usize]).collect();
        let mut b = batch_of(&bodies);
        let front = b.split_to(4);
        assert_eq!(front.iter().collect::<Vec<_>>(), bodies[..4].iter().map(|v| &v[..]).collect::<Vec<_>>());
        let m = b.pop_front().unwrap();
        assert_eq!(&m.raw_bytes().unwrap()[..], &bodies[4][..]);
        assert_eq!(b.len(), 5);
        let rest: Vec<Bytes> = b.iter_bytes().collect();
        assert_eq!(rest, bodies[5..].iter().map(|v| Bytes::from(v.clone())).collect::<Vec<_>>());
        assert_eq!(b.into_iter().count(), 5);
    }

    #[test]
    fn typed_values_round_trip() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct V(u32, String);
        impl MessageType for V {
            const NAME: &'static str = "test.batch.V";
        }
        let mut b = MessageBatch::typed_builder::<V>(hdr());
        b.push_value(&V(1, "a".into())).unwrap().push_value(&V(2, "bb".into())).unwrap();
        let batch = b.build();
        let got: Vec<V> = batch.values::<V>().collect::<Result<_, _>>().unwrap();
        assert_eq!(got, [V(1, "a".into()), V(2, "bb".into())]);
        let (_, v) = batch.clone().pop_front().unwrap().decode::<V>().unwrap();
        assert_eq!(v, V(1, "a".into()));
        // A raw batch is not a batch of `V`s.
        assert!(batch_of(&[vec![1]]).values::<V>().next().unwrap().is_err());
    }

    proptest! {
        #[test]
        fn bodies_round_trip(bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..40)) {
            let b = batch_of(&bodies);
            prop_assert_eq!(b.len(), bodies.len());
            let again = MessageBatch::<BasicHeader>::from_wire(hdr(), BodyKind::Raw, b.len() as u64, b.wire_bodies().clone()).unwrap();
            prop_assert_eq!(again.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), bodies);
        }

        #[test]
        fn any_bytes_validate_or_are_refused(count in 0u64..300, data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(b) = MessageBatch::<BasicHeader>::from_wire(hdr(), BodyKind::Raw, count, Bytes::from(data.clone())) {
                // Accepted: every body is there, and together they are the bytes.
                let total: usize = b.iter().map(|body| varint_len(body.len() as u64).min(5) + body.len()).sum();
                prop_assert_eq!(b.iter().count() as u64, count);
                prop_assert!(total <= data.len());
            }
        }
    }
}
