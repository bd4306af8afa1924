//! The frame of one message on any transport:
//!
//! ```text
//! version (1 byte, = 1)
//! header length (LEB128 varint) | header (postcard)
//! body kind (1 byte: 0 raw, 1 typed) | type id (8 bytes, little endian, typed only)
//! body (the rest)
//! ```
//!
//! UDP carries one frame per datagram, Braid one frame per message, TCP
//! prefixes each frame with its length (4 bytes, big endian). [`encode`]
//! always writes that prefix, so TCP sends the buffer as is and the others
//! send [`Encoded::frame`], a zero-copy slice past it.

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::{Body, BodyKind};
use crate::{Header, MessageTypeId, SendError};

const VERSION: u8 = 1;
const KIND_RAW: u8 = 0;
const KIND_TYPED: u8 = 1;

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

/// Encode a frame.
pub(crate) fn encode<H: Header>(header: &H, kind: BodyKind, body: &[u8]) -> Result<Encoded, SendError> {
    // Headers are small: serialized on the stack, without an allocation
    // per message; a larger one goes to the heap.
    let mut stack = [0u8; 256];
    let heap;
    let h: &[u8] = match postcard::to_slice(header, &mut stack) {
        Ok(h) => h,
        Err(postcard::Error::SerializeBufferFull) => {
            heap = postcard::to_allocvec(header).map_err(|e| SendError::Encode { what: "header", reason: e.to_string() })?;
            &heap
        }
        Err(e) => return Err(SendError::Encode { what: "header", reason: e.to_string() }),
    };
    let mut out = BytesMut::with_capacity(PREFIX + 1 + 5 + h.len() + 9 + body.len());
    out.put_u32(0);
    out.put_u8(VERSION);
    let mut n = h.len() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.put_u8(byte);
            break;
        }
        out.put_u8(byte | 0x80);
    }
    out.put_slice(h);
    match kind {
        BodyKind::Raw => out.put_u8(KIND_RAW),
        BodyKind::Typed(id) => {
            out.put_u8(KIND_TYPED);
            out.put_u64_le(id.0);
        }
    }
    out.put_slice(body);
    let len = out.len() - PREFIX;
    let len = u32::try_from(len).map_err(|_| SendError::TooLarge { transport: crate::Transport::Tcp, size: len, max: u32::MAX as usize })?;
    out[..PREFIX].copy_from_slice(&len.to_be_bytes());
    Ok(Encoded(out.freeze()))
}

/// Decode a frame; the body shares `frame`'s memory.
pub(crate) fn decode<H: Header>(frame: Bytes) -> Result<(H, Body), WireError> {
    let first = *frame.first().ok_or(WireError::Truncated)?;
    if first != VERSION {
        return Err(WireError::Version(first));
    }
    let mut pos = 1usize;
    let mut len: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *frame.get(pos).ok_or(WireError::Truncated)?;
        pos += 1;
        if shift > 28 {
            return Err(WireError::Varint);
        }
        len |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    let hlen = usize::try_from(len).map_err(|_| WireError::Varint)?;
    let hend = pos.checked_add(hlen).ok_or(WireError::Truncated)?;
    let hbytes = frame.get(pos..hend).ok_or(WireError::Truncated)?;
    let header: H = postcard::from_bytes(hbytes).map_err(|e| WireError::Header(e.to_string()))?;
    let kind = *frame.get(hend).ok_or(WireError::Truncated)?;
    let body = match kind {
        KIND_RAW => Body::Raw(frame.slice(hend + 1..)),
        KIND_TYPED => {
            let id = frame.get(hend + 1..hend + 9).ok_or(WireError::Truncated)?;
            let id = u64::from_le_bytes(id.try_into().map_err(|_| WireError::Truncated)?);
            Body::Encoded { type_id: MessageTypeId(id), bytes: frame.slice(hend + 9..) }
        }
        k => return Err(WireError::Kind(k)),
    };
    Ok((header, body))
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

        #[test]
        fn truncation_is_detected(cut in 0usize..40) {
            let f = encode(&hdr(), BodyKind::Typed(MessageTypeId(7)), b"").unwrap().frame();
            prop_assume!(cut < f.len());
            prop_assert!(decode::<BasicHeader>(f.slice(..cut)).is_err());
        }
    }
}
