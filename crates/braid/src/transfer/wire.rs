//! The control messages of the file-transfer protocol and their encoding.
//!
//! Every control message starts with the 4-byte magic `BRFT`, a version
//! byte and a kind byte. The offer and the verdict carry a JSON body, so
//! fields can be added without a version bump (unknown fields are ignored);
//! the version changes only when the sequence of messages does. The trailer
//! is fixed: the 32-byte SHA-256 of the data.
//!
//! ```text
//! sender                                receiver
//!   OFFER  {name, size, content}  ──▶
//!   data messages (raw bytes, summing to `size`) ──▶
//!   DONE   sha256[32]             ──▶
//!                                 ◀──  VERDICT {ok, bytes, sha256, error}
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// Protocol version spoken by this build.
pub const VERSION: u8 = 1;
const MAGIC: &[u8; 4] = b"BRFT";
const KIND_OFFER: u8 = 1;
const KIND_DONE: u8 = 2;
const KIND_VERDICT: u8 = 3;
const HEADER_LEN: usize = 6;
/// Largest JSON body accepted; offers and verdicts are a few hundred bytes.
const MAX_BODY: usize = 64 << 10;

/// What the data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// The contents of a file; the receiver may save it.
    File,
    /// Generated test data (`braid send --bytes`); never saved.
    Generated,
}

/// The sender's announcement of what follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// Suggested file name (the receiver sanitizes it).
    pub name: Option<String>,
    /// Exact number of data bytes that follow.
    pub size: u64,
    /// What the data is.
    pub content: Content,
}

/// The receiver's answer after the trailer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Size and digest matched (and the file, if any, was saved).
    pub ok: bool,
    /// Data bytes received.
    pub bytes: u64,
    /// SHA-256 the receiver computed, lowercase hex.
    pub sha256: String,
    /// Why `ok` is false.
    pub error: Option<String>,
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Opens a transfer.
    Offer(Offer),
    /// Ends the data, with its SHA-256.
    Done([u8; 32]),
    /// Closes the transfer.
    Verdict(Verdict),
}

/// A message that is not the control message expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Too short, or without the `BRFT` magic.
    #[error("not a Braid file-transfer message")]
    NotControl,
    /// Spoken by a newer or older build.
    #[error("unsupported file-transfer protocol version {0} (this build speaks {VERSION})")]
    Version(u8),
    /// Unknown kind byte.
    #[error("unknown file-transfer message kind {0}")]
    Kind(u8),
    /// The body does not decode.
    #[error("malformed file-transfer message: {0}")]
    Body(String),
}

impl Control {
    /// Encode with magic, version and kind.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        out.put_slice(MAGIC);
        out.put_u8(VERSION);
        match self {
            Control::Offer(o) => {
                out.put_u8(KIND_OFFER);
                out.put_slice(&serde_json::to_vec(o).expect("offer serializes"));
            }
            Control::Done(digest) => {
                out.put_u8(KIND_DONE);
                out.put_slice(digest);
            }
            Control::Verdict(v) => {
                out.put_u8(KIND_VERDICT);
                out.put_slice(&serde_json::to_vec(v).expect("verdict serializes"));
            }
        }
        out.freeze()
    }

    /// Decode; never panics on any input.
    pub fn decode(msg: &[u8]) -> Result<Control, WireError> {
        if msg.len() < HEADER_LEN || &msg[..4] != MAGIC {
            return Err(WireError::NotControl);
        }
        if msg[4] != VERSION {
            return Err(WireError::Version(msg[4]));
        }
        let body = &msg[HEADER_LEN..];
        let json_err = |e: serde_json::Error| WireError::Body(e.to_string());
        match msg[5] {
            KIND_OFFER | KIND_VERDICT if body.len() > MAX_BODY => {
                Err(WireError::Body(format!("body of {} bytes is too large", body.len())))
            }
            KIND_OFFER => serde_json::from_slice(body).map(Control::Offer).map_err(json_err),
            KIND_VERDICT => serde_json::from_slice(body).map(Control::Verdict).map_err(json_err),
            KIND_DONE => <[u8; 32]>::try_from(body)
                .map(Control::Done)
                .map_err(|_| WireError::Body(format!("digest of {} bytes, expected 32", body.len()))),
            k => Err(WireError::Kind(k)),
        }
    }
}

/// Lowercase hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_control() -> impl Strategy<Value = Control> {
        prop_oneof![
            (proptest::option::of("\\PC{0,40}"), any::<u64>(), any::<bool>()).prop_map(|(name, size, f)| {
                Control::Offer(Offer { name, size, content: if f { Content::File } else { Content::Generated } })
            }),
            any::<[u8; 32]>().prop_map(Control::Done),
            (any::<bool>(), any::<u64>(), "[0-9a-f]{64}", proptest::option::of("\\PC{0,40}"))
                .prop_map(|(ok, bytes, sha256, error)| Control::Verdict(Verdict { ok, bytes, sha256, error })),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(c in any_control()) {
            prop_assert_eq!(Control::decode(&c.encode()), Ok(c));
        }

        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Control::decode(&data);
            let mut framed = b"BRFT\x01".to_vec();
            framed.extend_from_slice(&data);
            let _ = Control::decode(&framed);
        }
    }

    #[test]
    fn rejects_other_versions_and_kinds() {
        assert_eq!(Control::decode(b"BRFT\x02\x01{}"), Err(WireError::Version(2)));
        assert_eq!(Control::decode(b"BRFT\x01\x09"), Err(WireError::Kind(9)));
        assert_eq!(Control::decode(b"hello world"), Err(WireError::NotControl));
        assert!(matches!(Control::decode(b"BRFT\x01\x02short"), Err(WireError::Body(_))));
    }

    #[test]
    fn unknown_offer_fields_are_ignored() {
        let msg = b"BRFT\x01\x01{\"name\":\"a\",\"size\":3,\"content\":\"file\",\"mode\":420}";
        assert_eq!(
            Control::decode(msg),
            Ok(Control::Offer(Offer { name: Some("a".into()), size: 3, content: Content::File }))
        );
    }
}
