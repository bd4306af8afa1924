//! Exon wire format, version 1.
//!
//! One datagram carries any number of frames between two logical nodes:
//!
//! ```text
//! magic:u8 (0xE1: Exon, version 1)  src_node:u64  dst_node:u64
//! frames...  (to the end of the datagram)
//!
//! 0x01 REQSLOTS  s n l                      Algorithm 1, line 43/45
//! 0x02 SLOTS     s r n                      line 58/93
//! 0x03 TOKEN     s r msg_len offset len data   line 33/73/90 (one fragment)
//! 0x04 ACK       r k s_1 Δs_2 … Δs_k        line 81, many slots at once
//! 0x05 NACK      r k s_1 Δs_2 … Δs_k        slot of a forgotten incarnation: resend
//! 0x06 STALE     r k s_1 Δs_2 … Δs_k        incarnation from before a restart: fate unknown
//! 0x07 FRAGACK   s r k (start, len)…        byte ranges of a fragmented token held
//! ```
//!
//! This is the insecure form (`--insecure-no-auth`), whose node IDs anyone
//! can forge. An authenticated node sends the same frames sealed in a
//! session ([`crate::secure`]): a sealed datagram has no node IDs (its
//! session names the peer), only `0xE4 receiver_index:u32 counter:u64`,
//! then the encrypted frames and the tag.
//!
//! Node identifiers are big-endian `u64`; every other integer is a QUIC
//! varint (RFC 9000 §16, via [`braid_proto::wire::write_varint`]). Slot
//! lists are ascending, delta-encoded (`Δ ≥ 1`). Peers are named by node
//! ID, never by address, so a node may change address mid-conversation.
//!
//! Decoding is total: any byte string yields a [`Datagram`] or a
//! [`DecodeError`], never a panic (property-tested), and decoded values
//! respect the limits below, so the state machine can trust them.

use bytes::{Buf, Bytes};

use braid_proto::wire::{varint_len, write_varint, DecodeError as VarintError};

use crate::NodeId;

/// First byte of every Exon datagram: 0xE0 | version.
pub const MAGIC: u8 = 0xE1;
/// Bytes before the first frame.
pub const HEADER_LEN: usize = 17;
/// Largest message Exon carries (16 MiB), fragmented across datagrams.
pub const MAX_MESSAGE: u64 = 16 << 20;
/// Most slots in one ACK, NACK or STALE frame.
pub const MAX_LIST: u64 = 512;
/// Most byte ranges in one FRAGACK frame.
pub const MAX_RANGES: u64 = 64;
/// Largest clock value on the wire (varint limit).
pub const CLOCK_MAX: u64 = braid_proto::wire::VARINT_MAX;
/// Largest encoded TOKEN frame header (type and five 8-byte varints).
pub const TOKEN_OVERHEAD_MAX: usize = 1 + 5 * 8;

const T_REQSLOTS: u8 = 0x01;
const T_SLOTS: u8 = 0x02;
const T_TOKEN: u8 = 0x03;
const T_ACK: u8 = 0x04;
const T_NACK: u8 = 0x05;
const T_STALE: u8 = 0x06;
const T_FRAGACK: u8 = 0x07;

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the header.
    #[error("datagram shorter than the {HEADER_LEN}-byte header")]
    Short,
    /// Not an Exon version 1 datagram.
    #[error("bad magic byte {0:#04x}: expected {MAGIC:#04x}")]
    BadMagic(u8),
    /// A frame ended in the middle of a field.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// Unknown frame type.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrame(u8),
    /// A field is outside its allowed range.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

impl From<VarintError> for DecodeError {
    fn from(e: VarintError) -> Self {
        match e {
            VarintError::Truncated(what) => DecodeError::Truncated(what),
            _ => DecodeError::Invalid("varint"),
        }
    }
}

/// An Exon protocol message (Algorithm 1) or one of the extensions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Frame {
    /// Request `n` slots starting at sender clock `s`; the receiver may
    /// forget slots below the garbage-collection frontier `l` (line 43).
    /// `n = 0, l = s` closes the half-connection (line 45).
    ReqSlots { s: u64, n: u64, l: u64 },
    /// Slots `s..s+n` exist in receiver incarnation `r` (line 58); `n = 0`
    /// is the receiver's keep-alive (line 93).
    Slots { s: u64, r: u64, n: u64 },
    /// One fragment of the message of token `(s, r)`: bytes
    /// `offset..offset+data.len()` of a `len`-byte message (line 33).
    Token {
        s: u64,
        r: u64,
        len: u64,
        offset: u64,
        data: Bytes,
    },
    /// Tokens `(s, r)` for each `s` are consumed: forget them (line 81).
    Ack { r: u64, slots: Vec<u64> },
    /// Incarnation `r` was forgotten while these slots were unconsumed:
    /// their tokens can never be delivered, send the messages again.
    Nack { r: u64, slots: Vec<u64> },
    /// Incarnation `r` predates the receiver's last restart: whether these
    /// tokens were delivered is unknowable.
    Stale { r: u64, slots: Vec<u64> },
    /// The receiver holds these byte ranges `[start, end)` of the
    /// fragmented message of token `(s, r)`.
    FragAck {
        s: u64,
        r: u64,
        ranges: Vec<(u64, u64)>,
    },
}

impl Frame {
    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Frame::ReqSlots { s, n, l } => 1 + varint_len(*s) + varint_len(*n) + varint_len(*l),
            Frame::Slots { s, r, n } => 1 + varint_len(*s) + varint_len(*r) + varint_len(*n),
            Frame::Token {
                s,
                r,
                len,
                offset,
                data,
            } => token_len(*s, *r, *len, *offset, data.len()),
            Frame::Ack { r, slots } | Frame::Nack { r, slots } | Frame::Stale { r, slots } => {
                list_len(*r, slots)
            }
            Frame::FragAck { s, r, ranges } => {
                let mut n = 1 + varint_len(*s) + varint_len(*r) + varint_len(ranges.len() as u64);
                for (a, b) in ranges {
                    n += varint_len(*a) + varint_len(b - a);
                }
                n
            }
        }
    }

    /// Appends the frame. Lists must be ascending and within the limits
    /// (the state machine builds them so).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::ReqSlots { s, n, l } => {
                out.push(T_REQSLOTS);
                for v in [s, n, l] {
                    write_varint(out, *v);
                }
            }
            Frame::Slots { s, r, n } => {
                out.push(T_SLOTS);
                for v in [s, r, n] {
                    write_varint(out, *v);
                }
            }
            Frame::Token {
                s,
                r,
                len,
                offset,
                data,
            } => encode_token(out, *s, *r, *len, *offset, data),
            Frame::Ack { r, slots } => encode_list(out, T_ACK, *r, slots),
            Frame::Nack { r, slots } => encode_list(out, T_NACK, *r, slots),
            Frame::Stale { r, slots } => encode_list(out, T_STALE, *r, slots),
            Frame::FragAck { s, r, ranges } => {
                out.push(T_FRAGACK);
                write_varint(out, *s);
                write_varint(out, *r);
                write_varint(out, ranges.len() as u64);
                for (a, b) in ranges {
                    write_varint(out, *a);
                    write_varint(out, b - a);
                }
            }
        }
    }
}

/// Encoded size of a TOKEN frame carrying `n` bytes.
pub fn token_len(s: u64, r: u64, len: u64, offset: u64, n: usize) -> usize {
    1 + varint_len(s) + varint_len(r) + varint_len(len) + varint_len(offset) + varint_len(n as u64)
        + n
}

/// Appends a TOKEN frame: what [`Frame::encode`] writes for
/// `Frame::Token { s, r, len, offset, data }`, straight from a borrowed
/// fragment (the sender's hot path builds no frame).
pub fn encode_token(out: &mut Vec<u8>, s: u64, r: u64, len: u64, offset: u64, data: &[u8]) {
    // The header is assembled on the stack, each varint stored as a whole
    // 8-byte word of which only its length counts, and appended at once:
    // this runs once per small message.
    let mut head = [0u8; TOKEN_OVERHEAD_MAX + 7];
    head[0] = T_TOKEN;
    let mut n = 1;
    for v in [s, r, len, offset, data.len() as u64] {
        let (word, k) = varint_word(v);
        head[n..n + 8].copy_from_slice(&word.to_be_bytes());
        n += k;
    }
    out.reserve(n + data.len());
    out.extend_from_slice(&head[..n]);
    out.extend_from_slice(data);
}

/// `v` (clamped to [`CLOCK_MAX`]) as a QUIC varint (RFC 9000 §16) in the
/// leading bytes of a big-endian word, and its length: what
/// [`write_varint`] appends, built without branching on the buffer.
#[inline]
fn varint_word(v: u64) -> (u64, usize) {
    let v = v.min(CLOCK_MAX);
    if v < 1 << 6 {
        (v << 56, 1)
    } else if v < 1 << 14 {
        ((0x4000 | v) << 48, 2)
    } else if v < 1 << 30 {
        ((0x8000_0000 | v) << 32, 4)
    } else {
        (0xc000_0000_0000_0000 | v, 8)
    }
}

fn list_len(r: u64, slots: &[u64]) -> usize {
    let mut n = 1 + varint_len(r) + varint_len(slots.len() as u64);
    let mut prev = None;
    for &s in slots {
        n += varint_len(prev.map_or(s, |p: u64| s - p));
        prev = Some(s);
    }
    n
}

fn encode_list(out: &mut Vec<u8>, ty: u8, r: u64, slots: &[u64]) {
    out.push(ty);
    write_varint(out, r);
    write_varint(out, slots.len() as u64);
    let mut prev = None;
    for &s in slots {
        write_varint(out, prev.map_or(s, |p: u64| s - p));
        prev = Some(s);
    }
}

/// Writes the datagram header.
pub fn encode_header(out: &mut Vec<u8>, src: NodeId, dst: NodeId) {
    out.push(MAGIC);
    out.extend_from_slice(&src.0.to_be_bytes());
    out.extend_from_slice(&dst.0.to_be_bytes());
}

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Sending node.
    pub src: NodeId,
    /// Node it is for.
    pub dst: NodeId,
    /// Its frames, in order.
    pub frames: Vec<Frame>,
}

impl Datagram {
    /// Decodes a whole datagram; payload bytes share `bytes`' buffer.
    ///
    /// ```
    /// use braid_exon::{wire::{self, Datagram, Frame}, NodeId};
    /// let mut buf = Vec::new();
    /// wire::encode_header(&mut buf, NodeId(1), NodeId(2));
    /// Frame::ReqSlots { s: 7, n: 4, l: 7 }.encode(&mut buf);
    /// let d = Datagram::decode(bytes::Bytes::from(buf)).unwrap();
    /// assert_eq!(d.frames, [Frame::ReqSlots { s: 7, n: 4, l: 7 }]);
    /// assert!(Datagram::decode(bytes::Bytes::from_static(b"\xE1short")).is_err());
    /// ```
    pub fn decode(bytes: Bytes) -> Result<Datagram, DecodeError> {
        let mut frames = Vec::new();
        let (src, dst) = Datagram::decode_into(bytes, &mut frames)?;
        Ok(Datagram { src, dst, frames })
    }

    /// Decodes a whole datagram into `frames` (cleared first, so that a
    /// receiver reuses one list), returning its source and destination.
    /// On an error `frames` is left empty: a batch is taken whole or not
    /// at all.
    pub fn decode_into(
        mut bytes: Bytes,
        frames: &mut Vec<Frame>,
    ) -> Result<(NodeId, NodeId), DecodeError> {
        frames.clear();
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::Short);
        }
        let magic = bytes.get_u8();
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let src = NodeId(bytes.get_u64());
        let dst = NodeId(bytes.get_u64());
        decode_frames(bytes, frames)?;
        Ok((src, dst))
    }
}

/// Decodes a run of frames (the plaintext of a sealed datagram, or what
/// follows an insecure datagram's header) into `frames`, cleared first.
/// On an error `frames` is left empty: a batch is taken whole or not at
/// all.
pub fn decode_frames(bytes: Bytes, frames: &mut Vec<Frame>) -> Result<(), DecodeError> {
    frames.clear();
    let mut cur = Cursor {
        buf: &bytes,
        pos: 0,
    };
    while cur.remaining() > 0 {
        match decode_frame(&bytes, &mut cur) {
            Ok(f) => frames.push(f),
            Err(e) => {
                frames.clear();
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A read position in the frames of a datagram. Fields are read from the
/// slice (the receiver's hot path: a datagram holds hundreds of frames);
/// only a TOKEN's payload becomes a `Bytes`, sharing the datagram's buffer.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// One byte; the caller checked there is one.
    fn u8(&mut self) -> u8 {
        let v = self.buf[self.pos];
        self.pos += 1;
        v
    }

    /// A QUIC varint (RFC 9000 §16): the top two bits of the first byte
    /// give its length, 1, 2, 4 or 8 bytes, big-endian.
    fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let rest = &self.buf[self.pos..];
        let Some(&first) = rest.first() else {
            return Err(DecodeError::Truncated(what));
        };
        let len = 1usize << (first >> 6);
        let Some(bytes) = rest.get(1..len) else {
            return Err(DecodeError::Truncated(what));
        };
        let v = bytes
            .iter()
            .fold(u64::from(first & 0x3f), |v, &b| (v << 8) | u64::from(b));
        self.pos += len;
        Ok(v)
    }
}

fn decode_frame(whole: &Bytes, b: &mut Cursor<'_>) -> Result<Frame, DecodeError> {
    let ty = b.u8();
    Ok(match ty {
        T_REQSLOTS => {
            let s = b.varint("REQSLOTS s")?;
            let n = b.varint("REQSLOTS n")?;
            let l = b.varint("REQSLOTS l")?;
            // The range s..s+n must be representable; l ≤ s: the sender
            // never holds tokens at or above its clock.
            if s.checked_add(n).is_none_or(|e| e > CLOCK_MAX) {
                return Err(DecodeError::Invalid("REQSLOTS range"));
            }
            if l > s {
                return Err(DecodeError::Invalid("REQSLOTS frontier above clock"));
            }
            Frame::ReqSlots { s, n, l }
        }
        T_SLOTS => {
            let s = b.varint("SLOTS s")?;
            let r = b.varint("SLOTS r")?;
            let n = b.varint("SLOTS n")?;
            if s.checked_add(n).is_none_or(|e| e > CLOCK_MAX) {
                return Err(DecodeError::Invalid("SLOTS range"));
            }
            Frame::Slots { s, r, n }
        }
        T_TOKEN => {
            let s = b.varint("TOKEN s")?;
            let r = b.varint("TOKEN r")?;
            let len = b.varint("TOKEN len")?;
            let offset = b.varint("TOKEN offset")?;
            let n = b.varint("TOKEN data length")?;
            if len > MAX_MESSAGE {
                return Err(DecodeError::Invalid("TOKEN message length"));
            }
            if offset.checked_add(n).is_none_or(|e| e > len) {
                return Err(DecodeError::Invalid("TOKEN fragment range"));
            }
            if (b.remaining() as u64) < n {
                return Err(DecodeError::Truncated("TOKEN data"));
            }
            // An empty fragment only makes sense for an empty message.
            if n == 0 && len != 0 {
                return Err(DecodeError::Invalid("TOKEN empty fragment"));
            }
            let start = b.pos;
            b.pos += n as usize;
            let data = whole.slice(start..b.pos);
            Frame::Token {
                s,
                r,
                len,
                offset,
                data,
            }
        }
        T_ACK | T_NACK | T_STALE => {
            let r = b.varint("list r")?;
            let k = b.varint("list count")?;
            if k == 0 || k > MAX_LIST {
                return Err(DecodeError::Invalid("list count"));
            }
            let mut slots = Vec::with_capacity(k as usize);
            let mut prev: Option<u64> = None;
            for _ in 0..k {
                let d = b.varint("list slot")?;
                let s = match prev {
                    None => d,
                    Some(_) if d == 0 => return Err(DecodeError::Invalid("list not ascending")),
                    Some(p) => p
                        .checked_add(d)
                        .filter(|v| *v <= CLOCK_MAX)
                        .ok_or(DecodeError::Invalid("list slot"))?,
                };
                slots.push(s);
                prev = Some(s);
            }
            match ty {
                T_ACK => Frame::Ack { r, slots },
                T_NACK => Frame::Nack { r, slots },
                _ => Frame::Stale { r, slots },
            }
        }
        T_FRAGACK => {
            let s = b.varint("FRAGACK s")?;
            let r = b.varint("FRAGACK r")?;
            let k = b.varint("FRAGACK count")?;
            if k == 0 || k > MAX_RANGES {
                return Err(DecodeError::Invalid("FRAGACK count"));
            }
            let mut ranges = Vec::with_capacity(k as usize);
            for _ in 0..k {
                let start = b.varint("FRAGACK start")?;
                let len = b.varint("FRAGACK length")?;
                let end = start.checked_add(len).filter(|e| *e <= MAX_MESSAGE);
                match end {
                    Some(end) if len > 0 => ranges.push((start, end)),
                    _ => return Err(DecodeError::Invalid("FRAGACK range")),
                }
            }
            Frame::FragAck { s, r, ranges }
        }
        other => return Err(DecodeError::UnknownFrame(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The decoder's slice varint reads what `braid_proto`'s reads,
        /// consumes as many bytes, and fails where it fails.
        #[test]
        fn varint_agrees_with_braid_proto(raw in proptest::collection::vec(any::<u8>(), 0..10)) {
            let mut cur = Cursor { buf: &raw, pos: 0 };
            let mut reference = Bytes::from(raw.clone());
            let ours = cur.varint("v");
            let theirs = braid_proto::wire::read_varint(&mut reference, "v").map_err(DecodeError::from);
            prop_assert_eq!(ours, theirs);
            if ours.is_ok() {
                prop_assert_eq!(cur.remaining(), reference.len());
            }
        }

        /// A TOKEN frame encoded on the stack is what appending its fields
        /// one by one with `braid_proto`'s varint writer gives.
        #[test]
        fn token_encoding_agrees_with_write_varint(
            fields in proptest::array::uniform4(prop_oneof![0u64..70, 0u64..20_000, 0u64..(1 << 31), any::<u64>()]),
            data in proptest::collection::vec(any::<u8>(), 0..80),
            prefix in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            let [s, r, len, offset] = fields;
            let mut ours = prefix.clone();
            encode_token(&mut ours, s, r, len, offset, &data);
            let mut reference = prefix;
            reference.push(T_TOKEN);
            for v in [s, r, len, offset, data.len() as u64] {
                write_varint(&mut reference, v);
            }
            reference.extend_from_slice(&data);
            prop_assert_eq!(ours, reference);
        }
    }
}
