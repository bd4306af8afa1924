//! The frame of one message on any transport:
//!
//! ```text
//! version (1 byte, = 1)
//! header length (LEB128 varint) | header (postcard)
//! body kind (1 byte: 0 raw, 1 typed) | type id (8 bytes, little endian, typed only)
//! body (the rest)
//! ```
//!
//! A batch frame ([`crate::MessageBatch`], issue 23) has the same start and
//! body kind 2 (raw) or 3 (typed, then the type id), then the number of
//! bodies (varint) and each body as a varint length and its bytes, up to
//! the frame's end:
//!
//! ```text
//! version | header length | header | kind (2 raw, 3 typed) | [type id]
//! count (varint) | count × (length (varint) | body)
//! ```
//!
//! The batch builder writes the count padded to 5 bytes (a varint with
//! continuation bits on its leading zero groups, which decodes as any
//! other), having written the head before it knew the count.
//!
//! A batch whose frame would exceed the transport's unit is split into
//! several frames ([`encode_batch`]), each a batch of its own.
//!
//! UDP carries one frame per datagram, Braid one frame per message, TCP
//! prefixes each frame with its length (4 bytes, big endian). [`encode`]
//! always writes that prefix, so TCP sends the buffer as is and the others
//! send [`Encoded::frame`], a zero-copy slice past it.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{put_varint, read_varint, varint_len, BatchError};
use crate::message::{Body, BodyKind};
use crate::{Header, MessageBatch, MessageTypeId, SendError, Transport};

const VERSION: u8 = 1;
const KIND_RAW: u8 = 0;
const KIND_TYPED: u8 = 1;
const KIND_RAW_BATCH: u8 = 2;
const KIND_TYPED_BATCH: u8 = 3;

/// Why a received frame was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame ended early.
    #[error("frame truncated")]
    Truncated,
    /// Unknown frame version.
    #[error("unknown frame version {0}")]
    Version(u8),
    /// Unknown body kind.
    #[error("unknown body kind {0}")]
    Kind(u8),
    /// The header length varint is malformed.
    #[error("malformed header length")]
    Varint,
    /// The header did not decode as the node's header type.
    #[error("malformed header: {0}")]
    Header(String),
    /// A batch frame's bodies are malformed.
    #[error("malformed batch: {0}")]
    Batch(#[from] BatchError),
}

/// TCP's length prefix.
pub(crate) const PREFIX: usize = 4;

/// An encoded frame, with TCP's length prefix in front.
#[derive(Debug, Clone)]
pub(crate) struct Encoded(pub(crate) Bytes);

impl Encoded {
    /// The frame without the prefix (UDP, Braid).
    pub(crate) fn frame(&self) -> Bytes {
        self.0.slice(PREFIX..)
    }
    /// Length of the frame without the prefix.
    pub(crate) fn frame_len(&self) -> usize {
        self.0.len() - PREFIX
    }
    /// Prefix and frame (TCP).
    pub(crate) fn prefixed(&self) -> &Bytes {
        &self.0
    }
}

/// The frame without the prefix, borrowed.
impl AsRef<[u8]> for Encoded {
    fn as_ref(&self) -> &[u8] {
        &self.0[PREFIX..]
    }
}

/// Run `f` on `header` postcard-encoded. Headers are small: serialized
/// on the stack, without an allocation per message; a larger one goes to
/// the heap.
fn with_header<H: Header, R>(header: &H, f: impl FnOnce(&[u8]) -> R) -> Result<R, SendError> {
    let mut stack = [0u8; 256];
    match postcard::to_slice(header, &mut stack) {
        Ok(h) => Ok(f(h)),
        Err(postcard::Error::SerializeBufferFull) => {
            let heap = postcard::to_allocvec(header).map_err(|e| SendError::Encode { what: "header", reason: e.to_string() })?;
            Ok(f(&heap))
        }
        Err(e) => Err(SendError::Encode { what: "header", reason: e.to_string() }),
    }
}

/// Bytes of a frame's start: version, header length, header, kind and
/// type id.
fn head_len(header: usize, kind: BodyKind) -> usize {
    1 + varint_len(header as u64) + header + 1 + if matches!(kind, BodyKind::Typed(_)) { 8 } else { 0 }
}

/// Write the prefix (zero for now), version, header and kind byte (with
/// the type id of a typed kind).
fn put_head(out: &mut BytesMut, h: &[u8], kind: BodyKind, batch: bool) {
    out.put_u32(0);
    out.put_u8(VERSION);
    put_varint(out, h.len() as u64);
    out.put_slice(h);
    match (kind, batch) {
        (BodyKind::Raw, false) => out.put_u8(KIND_RAW),
        (BodyKind::Raw, true) => out.put_u8(KIND_RAW_BATCH),
        (BodyKind::Typed(id), batch) => {
            out.put_u8(if batch { KIND_TYPED_BATCH } else { KIND_TYPED });
            out.put_u64_le(id.0);
        }
    }
}

/// Set TCP's length prefix of a complete frame.
fn finish(mut out: BytesMut) -> Result<Encoded, SendError> {
    let len = out.len() - PREFIX;
    let len = u32::try_from(len).map_err(|_| SendError::TooLarge { transport: Transport::Tcp, size: len, max: u32::MAX as usize })?;
    out[..PREFIX].copy_from_slice(&len.to_be_bytes());
    Ok(Encoded(out.freeze()))
}

/// The start of a batch frame for `header`: TCP's prefix (zero until the
/// frame is complete), version, header and kind, for the builder to write
/// the count and the bodies after; `None` if the header cannot be encoded.
pub(crate) fn batch_head<H: Header>(header: &H, kind: BodyKind) -> Option<Vec<u8>> {
    with_header(header, |h| {
        let mut out = BytesMut::with_capacity(PREFIX + head_len(h.len(), kind));
        put_head(&mut out, h, kind, true);
        out.to_vec()
    })
    .ok()
}

/// Encode a frame.
pub(crate) fn encode<H: Header>(header: &H, kind: BodyKind, body: &[u8]) -> Result<Encoded, SendError> {
    with_header(header, |h| {
        let mut out = BytesMut::with_capacity(PREFIX + head_len(h.len(), kind) + body.len());
        put_head(&mut out, h, kind, false);
        out.put_slice(body);
        finish(out)
    })?
}

/// Encode `batch` as frames of at most `limit` bytes each (without TCP's
/// prefix): one frame if it fits, else as many as needed, in order, each
/// a batch of consecutive bodies (the header encoded once for all). A body
/// that does not fit a frame even alone is refused as
/// [`SendError::TooLarge`] for `transport`, and nothing is returned: the
/// caller has queued nothing yet. Each body costs one copy into its frame.
pub(crate) fn encode_batch<H: Header>(batch: &MessageBatch<H>, limit: usize, transport: Transport) -> Result<Vec<Encoded>, SendError> {
    // Built here and unchanged: the builder wrote the frame.
    if let Some(frame) = batch.framed() {
        if frame.len() - PREFIX <= limit {
            return Ok(vec![Encoded(frame.clone())]);
        }
    }
    let kind = batch.kind();
    let bodies = batch.wire_bodies();
    with_header(batch.header(), |h| {
        let head = head_len(h.len(), kind);
        let frame = |count: usize, bytes: &[u8]| -> Result<Encoded, SendError> {
            let mut out = BytesMut::with_capacity(PREFIX + head + varint_len(count as u64) + bytes.len());
            put_head(&mut out, h, kind, true);
            put_varint(&mut out, count as u64);
            out.put_slice(bytes);
            finish(out)
        };
        let whole = head + varint_len(batch.len() as u64) + bodies.len();
        if whole <= limit {
            return Ok(vec![frame(batch.len(), bodies)?]);
        }
        // Too large for one frame: cut between bodies (only here does a
        // send look at each body's length).
        let mut frames = Vec::new();
        let (mut start, mut end, mut count) = (0usize, 0usize, 0usize);
        for (_, body_end) in batch.spans() {
            // The body with its length: from the end of the previous one.
            let size = body_end - end;
            if count > 0 && head + varint_len(count as u64 + 1) + (end - start) + size > limit {
                frames.push(frame(count, &bodies[start..end])?);
                (start, count) = (end, 0);
            }
            if count == 0 && head + 1 + size > limit {
                return Err(SendError::TooLarge { transport, size: head + 1 + size, max: limit });
            }
            end = body_end;
            count += 1;
        }
        if count > 0 {
            frames.push(frame(count, &bodies[start..end])?);
        }
        Ok(frames)
    })?
}

/// What a frame holds.
pub(crate) enum Decoded<H> {
    /// One message.
    One(H, Body),
    /// A batch.
    Batch(MessageBatch<H>),
}

/// Decode a frame of either form; bodies share `frame`'s memory.
pub(crate) fn decode_any<H: Header>(frame: Bytes) -> Result<Decoded<H>, WireError> {
    let first = *frame.first().ok_or(WireError::Truncated)?;
    if first != VERSION {
        return Err(WireError::Version(first));
    }
    let mut pos = 1usize;
    let hlen = read_varint(&frame, &mut pos).ok_or(if pos >= frame.len() { WireError::Truncated } else { WireError::Varint })?;
    let hlen = usize::try_from(hlen).map_err(|_| WireError::Varint)?;
    let hend = pos.checked_add(hlen).ok_or(WireError::Truncated)?;
    let hbytes = frame.get(pos..hend).ok_or(WireError::Truncated)?;
    let header: H = postcard::from_bytes(hbytes).map_err(|e| WireError::Header(e.to_string()))?;
    let kind = *frame.get(hend).ok_or(WireError::Truncated)?;
    let type_id = || -> Result<MessageTypeId, WireError> {
        let id = frame.get(hend + 1..hend + 9).ok_or(WireError::Truncated)?;
        Ok(MessageTypeId(u64::from_le_bytes(id.try_into().map_err(|_| WireError::Truncated)?)))
    };
    let (kind, mut pos) = match kind {
        KIND_RAW => return Ok(Decoded::One(header, Body::Raw(frame.slice(hend + 1..)))),
        KIND_TYPED => {
            let type_id = type_id()?;
            return Ok(Decoded::One(header, Body::Encoded { type_id, bytes: frame.slice(hend + 9..) }));
        }
        KIND_RAW_BATCH => (BodyKind::Raw, hend + 1),
        KIND_TYPED_BATCH => (BodyKind::Typed(type_id()?), hend + 9),
        k => return Err(WireError::Kind(k)),
    };
    let count = read_varint(&frame, &mut pos).ok_or(BatchError::Count)?;
    Ok(Decoded::Batch(MessageBatch::from_wire(header, kind, count, frame.slice(pos..))?))
}

/// Decode a single-message frame; the body shares `frame`'s memory (a
/// batch frame is refused: tests of the single form).
#[cfg(test)]
pub(crate) fn decode<H: Header>(frame: Bytes) -> Result<(H, Body), WireError> {
    match decode_any(frame)? {
        Decoded::One(h, body) => Ok((h, body)),
        Decoded::Batch(_) => Err(WireError::Kind(KIND_RAW_BATCH)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BasicAddress, BasicHeader, Message, MessageType, Transport};
    use proptest::prelude::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct T1 {
        a: u32,
        b: String,
    }
    impl MessageType for T1 {
        const NAME: &'static str = "test.T1";
    }

    fn hdr() -> BasicHeader {
        let a = BasicAddress::new("127.0.0.1:9".parse().unwrap());
        BasicHeader::new(a, a.with_vnode(crate::VnodeId(4)), Transport::Braid)
    }

    #[test]
    fn typed_round_trip() {
        let m = Message::typed(hdr(), T1 { a: 5, b: "x".into() });
        let (h, kind, body) = m.into_wire_parts().unwrap();
        let f = encode(&h, kind, &body).unwrap().frame();
        let (h2, body) = decode::<BasicHeader>(f).unwrap();
        assert_eq!(h2, hdr());
        let m = Message::from_wire(h2, body);
        assert!(!m.is_unserialized());
        assert_eq!(m.decode::<T1>().unwrap().1, T1 { a: 5, b: "x".into() });
    }

    /// A header too large for the stack buffer is serialized on the heap,
    /// and round-trips all the same.
    #[test]
    fn large_headers_round_trip() {
        let a = BasicAddress::new("127.0.0.1:9".parse().unwrap());
        let hops: Vec<BasicAddress> = (0..60u16).map(|i| BasicAddress::new(([10, 0, 0, 1], 1000 + i).into())).collect();
        let h = crate::RoutingHeader::routed(a, a, hops, Transport::Braid);
        assert!(postcard::to_allocvec(&h).unwrap().len() > 256, "the test needs a header over 256 bytes");
        let f = encode(&h, BodyKind::Raw, b"body").unwrap().frame();
        let (h2, body) = decode::<crate::RoutingHeader>(f).unwrap();
        assert_eq!(postcard::to_allocvec(&h2).unwrap(), postcard::to_allocvec(&h).unwrap());
        assert_eq!(&Message::from_wire(h2, body).raw_bytes().unwrap()[..], b"body");
    }

    proptest! {
        #[test]
        fn raw_round_trip(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let f = encode(&hdr(), BodyKind::Raw, &body).unwrap().frame();
            let (h, b) = decode::<BasicHeader>(f).unwrap();
            prop_assert_eq!(&h, &hdr());
            let m = Message::from_wire(h, b);
            prop_assert_eq!(&m.raw_bytes().unwrap()[..], &body[..]);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<BasicHeader>(Bytes::from(data.clone()));
            let _ = decode::<crate::RoutingHeader>(Bytes::from(data));
        }

        /// A built batch goes out as the frame its builder wrote (no
        /// copy) when it fits; cut into frames of at most `limit` bytes when
        /// it does not; either way the frames decode to its bodies, in
        /// order, and any prefix of them is refused.
        #[test]
        fn batches_round_trip_whole_or_split(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..150), 1..40),
            limit in 60usize..2000,
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut b = MessageBatch::builder(hdr());
            for body in &bodies {
                b.push(body);
            }
            let batch = b.build();
            let whole = encode_batch(&batch, usize::MAX, Transport::Tcp).unwrap();
            prop_assert_eq!(whole.len(), 1);
            prop_assert_eq!(whole[0].0.as_ptr(), batch.framed().unwrap().as_ptr());
            let longest = bodies.iter().map(Vec::len).max().unwrap_or(0);
            let frames = match encode_batch(&batch, limit, Transport::Udp) {
                Ok(frames) => frames,
                Err(SendError::TooLarge { transport: Transport::Udp, size, max }) => {
                    prop_assert_eq!(max, limit);
                    prop_assert!(size > limit);
                    // Refused only if a body alone cannot fit.
                    prop_assert!(longest + 30 > limit);
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            };
            prop_assert!(frames.iter().all(|f| f.frame_len() <= limit));
            let mut got = Vec::new();
            for f in frames.iter().chain(&whole) {
                match decode_any::<BasicHeader>(f.frame()).unwrap() {
                    Decoded::Batch(b) => {
                        prop_assert_eq!(b.header(), &hdr());
                        got.extend(b.iter().map(<[u8]>::to_vec));
                    }
                    Decoded::One(..) => return Err(TestCaseError::fail("a batch frame decoded as a message")),
                }
            }
            let mut want = bodies.clone();
            want.extend(bodies.iter().cloned());
            prop_assert_eq!(got, want);
            let f = whole[0].frame();
            let at = cut.index(f.len());
            prop_assert!(decode_any::<BasicHeader>(f.slice(..at)).is_err());
        }

        #[test]
        fn truncation_is_detected(cut in 0usize..40) {
            let f = encode(&hdr(), BodyKind::Typed(MessageTypeId(7)), b"").unwrap().frame();
            prop_assume!(cut < f.len());
            prop_assert!(decode::<BasicHeader>(f.slice(..cut)).is_err());
        }
    }
}
