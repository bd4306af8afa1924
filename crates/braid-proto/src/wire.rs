//! Braid wire format, version 3 (version 2 had no encryption, version 1 no
//! paths).
//!
//! Every datagram is one packet:
//!
//! ```text
//! version:u8  type:u8  dst_cid:u64
//! [Initial] src_cid:u64 cookie_len:varint cookie noise_len:varint noise
//! [Retry]   cookie_len:varint cookie key_len:varint key
//! [Accept]  src_cid:u64 noise_len:varint noise
//! [Data]    path_id:varint
//! timestamp_us:varint  echo_timestamp_us:varint  pn:u32
//! frames...  (to the end of the datagram; sealed: ciphertext, then a 16-byte tag)
//! ```
//!
//! Integers are big-endian; `varint` is QUIC's variable-length integer
//! (RFC 9000 §16: two high bits give the length, at most 2^62 − 1). The
//! timestamp is the sender's clock in microseconds since the connection
//! began; the echoed timestamp is the timestamp of the highest-numbered
//! packet the sender has received from its peer on the same path (0 if
//! none). Together with the ACK delay, they give RTT and one-way-delay
//! samples (LEDBAT, and the delay estimators of the ProgMP thesis §5.8.2).
//!
//! **Packet numbers** go on the wire as their low 32 bits, last in the
//! header, and the receiver restores the full number from the largest it
//! has received on the path (RFC 9000 §17.1 and Appendix A.3).
//!
//! **Protection** (see [`crate::crypto`]). The handshake (Initial, Retry)
//! is not encrypted: the Initial's `noise` field carries the Noise IK
//! handshake's first message and the Retry's `key` field the server's
//! Ed25519 public key (empty when the endpoints run without
//! authentication). Accept and Data packets of an authenticated connection
//! are sealed with an AEAD whose associated data is the whole header; the
//! Accept's `noise` field carries the handshake's second message until the
//! client has confirmed. Header protection masks the packet number and the
//! key-phase bit (`0x40` of the type byte), which the type's decoding
//! ignores.
//!
//! **Paths.** A connection may run over several paths (MPTCP's subflows,
//! RFC 8684 §2), each a pair of local and remote addresses with its own
//! packet-number space, like QUIC multipath's (draft-ietf-quic-multipath
//! §2). A Data packet names its path; handshake packets (Initial, Retry,
//! Accept) belong to path 0, the one the handshake runs on. Stream offsets
//! are the connection's data sequence numbers, shared by all paths
//! (RFC 8684 §3.3's DSN), so the receiver reassembles whatever path
//! carried the bytes.
//!
//! Frames: `PADDING` (0x00), `PING` (0x01), `ACK` (0x02: path id, largest,
//! delay, receive-window limit, SACK ranges as in RFC 9000 §19.3),
//! `CLOSE` (0x04: code, reason), `PATH_ABANDON` (0x05: path id; the sender
//! stops using the path, as RFC 8684 §3.4.2's REMOVE_ADDR), `PATH_STATUS`
//! (0x06: path id, sequence number, status 0 = active or 1 = backup, as
//! RFC 8684 §3.3.8's MP_PRIO; a higher sequence number wins),
//! `PATH_CHALLENGE` (0x0a) and `PATH_RESPONSE` (0x0b) (8 bytes each, RFC
//! 9000 §19.17-18: a new path or a peer's new address carries data only
//! once it echoed a challenge sent there) and `DATA`
//! (0x08, +1 when a message ends with this frame: stream offset, length,
//! bytes).
//!
//! Decoding is total: any byte string yields a [`Packet`] or a
//! [`DecodeError`], never a panic (checked by a property test and a
//! cargo-fuzz target).

use bytes::{Buf, BufMut, Bytes};

/// The only version this implementation speaks.
pub const VERSION: u8 = 3;
/// Bytes of the packet number on the wire.
pub const PN_LEN: usize = 4;
/// Longest Noise handshake message accepted.
pub const MAX_NOISE_LEN: usize = 256;
/// Length of the key a Retry may carry (an Ed25519 public key).
pub const SERVER_KEY_LEN: usize = 32;
/// Bits of the type byte that name the packet type (the rest is the key
/// phase, under header protection).
const TYPE_MASK: u8 = 0x3f;
/// Largest path identifier accepted.
pub const MAX_PATH_ID: u64 = u32::MAX as u64;
/// Largest value a varint can hold.
pub const VARINT_MAX: u64 = (1 << 62) - 1;
/// Longest cookie accepted.
pub const MAX_COOKIE_LEN: usize = 64;
/// Longest close reason accepted.
pub const MAX_REASON_LEN: usize = 1024;
/// Most ACK ranges accepted in one frame.
pub const MAX_ACK_RANGES: u64 = 256;

/// Why a datagram could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The datagram ended in the middle of a field.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// The version byte is not one we speak.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// Unknown packet type.
    #[error("unknown packet type {0:#04x}")]
    UnknownPacketType(u8),
    /// Unknown frame type.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrameType(u8),
    /// A field holds a value outside its range.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// Packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Client's handshake request (padded to at least 1200 bytes).
    Initial = 1,
    /// Server's stateless cookie challenge.
    Retry = 2,
    /// Server's acceptance: carries the server's connection ID.
    Accept = 3,
    /// Everything after the handshake.
    Data = 4,
}

/// The fixed part of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub ty: PacketType,
    /// Connection ID chosen by the receiver of this packet (0 in a client's
    /// first Initial, which does not know the server's yet).
    pub dst_cid: u64,
    /// Sender's own connection ID (Initial and Accept only).
    pub src_cid: u64,
    /// Cookie (Initial and Retry only; empty in a first Initial).
    pub cookie: Bytes,
    /// Noise handshake message (Initial, Accept; empty without
    /// authentication and in Accepts once not needed).
    pub noise: Bytes,
    /// The server's Ed25519 public key (Retry only; empty without
    /// authentication).
    pub server_key: Bytes,
    /// Path the packet travels on (Data packets; 0 for the handshake).
    pub path_id: u32,
    /// Packet number, in the path's number space.
    pub pn: u64,
    /// Sender's clock, µs since the connection began.
    pub timestamp_us: u64,
    /// Timestamp of the highest-numbered packet received from the peer.
    pub echo_timestamp_us: u64,
}

/// A frame inside a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Keeps the connection alive and elicits an acknowledgement.
    Ping,
    /// Acknowledges packets and announces the receive window.
    Ack(AckFrame),
    /// Closes the connection.
    Close { code: u64, reason: Bytes },
    /// The sender abandons a path: neither side uses it any more.
    PathAbandon { path_id: u32 },
    /// The sender asks its peer to treat a path as a backup (or not). The
    /// highest `seq` per path wins.
    PathStatus { path_id: u32, seq: u64, backup: bool },
    /// Asks the peer to echo 8 unpredictable bytes: proof that it receives
    /// at the address the packet went to (RFC 9000 §8.2).
    PathChallenge([u8; 8]),
    /// Echoes a [`Frame::PathChallenge`].
    PathResponse([u8; 8]),
    /// Stream bytes `[offset, offset + data.len())`; `message_end` says a
    /// message ends with the last byte.
    Data { offset: u64, data: Bytes, message_end: bool },
}

/// An ACK frame: packet numbers of one path acknowledged, encoded as in
/// RFC 9000 §19.3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckFrame {
    /// The path whose packet numbers are acknowledged.
    pub path_id: u32,
    /// Largest packet number acknowledged.
    pub largest: u64,
    /// Time the receiver held `largest` before acknowledging, µs.
    pub ack_delay_us: u64,
    /// Flow control: the sender may send stream bytes below this offset.
    pub max_data: u64,
    /// Encoded additional ranges (already validated; iterate with
    /// [`AckFrame::ranges`]).
    first_range: u64,
    range_count: u64,
    encoded_ranges: Bytes,
}

impl AckFrame {
    /// Build from inclusive ranges sorted from highest to lowest, disjoint
    /// and non-adjacent, for path 0. Panics in debug builds if they are not.
    pub fn from_ranges(
        ranges_desc: impl IntoIterator<Item = (u64, u64)>,
        ack_delay_us: u64,
        max_data: u64,
    ) -> Option<AckFrame> {
        Self::for_path(0, ranges_desc, ack_delay_us, max_data)
    }

    /// [`AckFrame::from_ranges`] for the packets of path `path_id`.
    pub fn for_path(
        path_id: u32,
        ranges_desc: impl IntoIterator<Item = (u64, u64)>,
        ack_delay_us: u64,
        max_data: u64,
    ) -> Option<AckFrame> {
        let mut iter = ranges_desc.into_iter();
        let (first_lo, largest) = iter.next()?;
        let mut encoded = Vec::new();
        let mut count = 0;
        let mut prev_lo = first_lo;
        for (lo, hi) in iter {
            debug_assert!(hi + 1 < prev_lo, "ACK ranges must be descending and separated");
            let gap = prev_lo - hi - 2;
            write_varint(&mut encoded, gap);
            write_varint(&mut encoded, hi - lo);
            prev_lo = lo;
            count += 1;
        }
        Some(AckFrame {
            path_id,
            largest,
            ack_delay_us,
            max_data,
            first_range: largest - first_lo,
            range_count: count,
            encoded_ranges: Bytes::from(encoded),
        })
    }

    /// Inclusive ranges `(low, high)` acknowledged, highest first.
    pub fn ranges(&self) -> AckRanges<'_> {
        AckRanges {
            next: Some((self.largest - self.first_range, self.largest)),
            buf: &self.encoded_ranges[..],
            remaining: self.range_count,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(FRAME_ACK);
        write_varint(out, u64::from(self.path_id));
        write_varint(out, self.largest);
        write_varint(out, self.ack_delay_us);
        write_varint(out, self.max_data);
        write_varint(out, self.range_count);
        write_varint(out, self.first_range);
        out.extend_from_slice(&self.encoded_ranges);
    }

    /// Decodes the fields after the type byte from `buf[*pos..]`. The
    /// additional ranges are validated and returned as a position range so
    /// the caller can slice them without copying.
    fn decode_raw(buf: &[u8], pos: &mut usize) -> Result<(AckFrame, std::ops::Range<usize>), DecodeError> {
        let mut cur = &buf[*pos..];
        let path_id = read_path_id(&mut cur, "ACK path id")?;
        let largest = varint(&mut cur, "ACK largest")?;
        let ack_delay_us = varint(&mut cur, "ACK delay")?;
        let max_data = varint(&mut cur, "ACK max_data")?;
        let range_count = varint(&mut cur, "ACK range count")?;
        let first_range = varint(&mut cur, "ACK first range")?;
        if range_count > MAX_ACK_RANGES {
            return Err(DecodeError::Invalid("ACK range count"));
        }
        if first_range > largest {
            return Err(DecodeError::Invalid("ACK first range"));
        }
        // Walk the ranges once to validate them, so iteration cannot fail.
        let ranges_start = buf.len() - cur.len();
        let mut smallest = largest - first_range;
        for _ in 0..range_count {
            let gap = varint(&mut cur, "ACK gap")?;
            let len = varint(&mut cur, "ACK range length")?;
            let hi = smallest
                .checked_sub(gap)
                .and_then(|v| v.checked_sub(2))
                .ok_or(DecodeError::Invalid("ACK gap"))?;
            smallest = hi.checked_sub(len).ok_or(DecodeError::Invalid("ACK range length"))?;
        }
        *pos = buf.len() - cur.len();
        let ack = AckFrame {
            path_id,
            largest,
            ack_delay_us,
            max_data,
            first_range,
            range_count,
            encoded_ranges: Bytes::new(),
        };
        Ok((ack, ranges_start..*pos))
    }
}

/// Iterator over the ranges of an [`AckFrame`].
pub struct AckRanges<'a> {
    next: Option<(u64, u64)>,
    buf: &'a [u8],
    remaining: u64,
}

impl Iterator for AckRanges<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        let current = self.next.take()?;
        if self.remaining > 0 {
            self.remaining -= 1;
            // Validated at decode (or built by `from_ranges`): cannot fail.
            let gap = varint(&mut self.buf, "").unwrap_or(0);
            let len = varint(&mut self.buf, "").unwrap_or(0);
            let hi = current.0.saturating_sub(gap + 2);
            self.next = Some((hi.saturating_sub(len), hi));
        }
        Some(current)
    }
}

/// A decoded packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub header: Header,
    /// The frame bytes, validated: [`Packet::frames`] cannot fail.
    payload: Bytes,
}

const FRAME_PADDING: u8 = 0x00;
const FRAME_PING: u8 = 0x01;
const FRAME_ACK: u8 = 0x02;
const FRAME_CLOSE: u8 = 0x04;
const FRAME_PATH_ABANDON: u8 = 0x05;
const FRAME_PATH_STATUS: u8 = 0x06;
const FRAME_DATA: u8 = 0x08;
const FRAME_PATH_CHALLENGE: u8 = 0x0a;
const FRAME_PATH_RESPONSE: u8 = 0x0b;
const FRAME_DATA_END: u8 = 0x09;

impl Packet {
    /// Decode and validate a whole unprotected datagram (packet numbers
    /// taken as they are on the wire: a connection restores them from its
    /// state, see [`expand_pn`]).
    pub fn decode(datagram: Bytes) -> Result<Packet, DecodeError> {
        let public = PublicHeader::decode(&datagram)?;
        let header = public.header(u64::from(public.pn_truncated));
        Packet::from_parts(header, datagram.slice(public.payload_offset..))
    }

    /// A packet of `header` whose frames are `payload` (opened, if it was
    /// sealed), validated.
    pub fn from_parts(header: Header, payload: Bytes) -> Result<Packet, DecodeError> {
        // Validate every frame now, without building them, so processing
        // never meets a bad one half-way through a packet.
        let mut pos = 0;
        while let Some(frame) = decode_raw_frame(&payload, &mut pos)? {
            let allowed = matches!(header.ty, PacketType::Data | PacketType::Accept) || matches!(frame, RawFrame::Ping);
            if !allowed {
                return Err(DecodeError::Invalid("frame in handshake packet"));
            }
        }
        Ok(Packet { header, payload })
    }

    /// The frames, in order (padding skipped).
    pub fn frames(&self) -> Frames<'_> {
        Frames { buf: &self.payload, pos: 0 }
    }

    /// The header, and the frames taking the payload with them (see
    /// [`IntoFrames`]).
    pub fn into_frames(self) -> (Header, IntoFrames) {
        (self.header, IntoFrames { buf: self.payload, pos: 0 })
    }
}

/// Iterator over the frames of a validated [`Packet`]. Frame payloads are
/// slices of the datagram (no copy).
pub struct Frames<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl Iterator for Frames<'_> {
    type Item = Frame;
    fn next(&mut self) -> Option<Frame> {
        // The payload was validated by `Packet::decode`.
        let raw = decode_raw_frame(self.buf, &mut self.pos).ok().flatten()?;
        Some(frame_of(raw, self.buf))
    }
}

/// Iterator over the frames of a validated [`Packet`] that owns its
/// payload ([`Packet::into_frames`]). A DATA frame that runs to the end of
/// the payload, as in every full packet of a bulk transfer, takes the
/// payload itself: no reference-count change on the shared receive buffer,
/// which cost a few percent of a receiver's CPU as a clone and a drop per
/// packet.
pub struct IntoFrames {
    buf: Bytes,
    pos: usize,
}

impl Iterator for IntoFrames {
    type Item = Frame;
    fn next(&mut self) -> Option<Frame> {
        // The payload was validated by `Packet::decode`.
        let raw = decode_raw_frame(&self.buf, &mut self.pos).ok().flatten()?;
        if let RawFrame::Data { offset, data, message_end } = raw {
            let data = if data.end == self.buf.len() {
                // The last frame: the iterator ends with it.
                let mut rest = std::mem::take(&mut self.buf);
                rest.advance(data.start);
                rest
            } else {
                self.buf.slice(data)
            };
            return Some(Frame::Data { offset, data, message_end });
        }
        Some(frame_of(raw, &self.buf))
    }
}

/// The frame `raw` describes, its byte fields slices of `buf`.
fn frame_of(raw: RawFrame, buf: &Bytes) -> Frame {
    match raw {
        RawFrame::Ping => Frame::Ping,
        RawFrame::Ack(mut ack, ranges) => {
            if ack.range_count > 0 {
                ack.encoded_ranges = buf.slice(ranges);
            }
            Frame::Ack(ack)
        }
        RawFrame::Close { code, reason } => Frame::Close { code, reason: buf.slice(reason) },
        RawFrame::PathAbandon { path_id } => Frame::PathAbandon { path_id },
        RawFrame::PathStatus { path_id, seq, backup } => Frame::PathStatus { path_id, seq, backup },
        RawFrame::PathChallenge(token) => Frame::PathChallenge(token),
        RawFrame::PathResponse(token) => Frame::PathResponse(token),
        RawFrame::Data { offset, data, message_end } => Frame::Data { offset, data: buf.slice(data), message_end },
    }
}

/// A frame whose byte fields are positions in the packet payload.
enum RawFrame {
    Ping,
    Ack(AckFrame, std::ops::Range<usize>),
    Close { code: u64, reason: std::ops::Range<usize> },
    PathAbandon { path_id: u32 },
    PathStatus { path_id: u32, seq: u64, backup: bool },
    PathChallenge([u8; 8]),
    PathResponse([u8; 8]),
    Data { offset: u64, data: std::ops::Range<usize>, message_end: bool },
}

fn take(buf: &[u8], pos: &mut usize, len: u64, what: &'static str) -> Result<std::ops::Range<usize>, DecodeError> {
    if ((buf.len() - *pos) as u64) < len {
        return Err(DecodeError::Truncated(what));
    }
    let start = *pos;
    *pos += len as usize;
    Ok(start..*pos)
}

fn varint_at(buf: &[u8], pos: &mut usize, what: &'static str) -> Result<u64, DecodeError> {
    let mut cur = &buf[*pos..];
    let v = varint(&mut cur, what)?;
    *pos = buf.len() - cur.len();
    Ok(v)
}

fn path_id_at(buf: &[u8], pos: &mut usize, what: &'static str) -> Result<u32, DecodeError> {
    let mut cur = &buf[*pos..];
    let v = read_path_id(&mut cur, what)?;
    *pos = buf.len() - cur.len();
    Ok(v)
}

fn read_path_id(cur: &mut &[u8], what: &'static str) -> Result<u32, DecodeError> {
    let v = varint(cur, what)?;
    u32::try_from(v).map_err(|_| DecodeError::Invalid(what))
}

fn decode_raw_frame(buf: &[u8], pos: &mut usize) -> Result<Option<RawFrame>, DecodeError> {
    loop {
        let Some(&ty) = buf.get(*pos) else { return Ok(None) };
        *pos += 1;
        return match ty {
            FRAME_PADDING => continue,
            FRAME_PING => Ok(Some(RawFrame::Ping)),
            FRAME_ACK => {
                let (ack, ranges) = AckFrame::decode_raw(buf, pos)?;
                Ok(Some(RawFrame::Ack(ack, ranges)))
            }
            FRAME_CLOSE => {
                let code = varint_at(buf, pos, "close code")?;
                let len = varint_at(buf, pos, "close reason length")?;
                if len > MAX_REASON_LEN as u64 {
                    return Err(DecodeError::Invalid("close reason length"));
                }
                let reason = take(buf, pos, len, "close reason")?;
                Ok(Some(RawFrame::Close { code, reason }))
            }
            FRAME_PATH_ABANDON => {
                let path_id = path_id_at(buf, pos, "PATH_ABANDON path id")?;
                Ok(Some(RawFrame::PathAbandon { path_id }))
            }
            FRAME_PATH_STATUS => {
                let path_id = path_id_at(buf, pos, "PATH_STATUS path id")?;
                let seq = varint_at(buf, pos, "PATH_STATUS sequence")?;
                let backup = match varint_at(buf, pos, "PATH_STATUS status")? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("PATH_STATUS status")),
                };
                Ok(Some(RawFrame::PathStatus { path_id, seq, backup }))
            }
            FRAME_PATH_CHALLENGE | FRAME_PATH_RESPONSE => {
                let range = take(buf, pos, 8, "path challenge data")?;
                let mut token = [0u8; 8];
                token.copy_from_slice(&buf[range]);
                Ok(Some(if ty == FRAME_PATH_CHALLENGE {
                    RawFrame::PathChallenge(token)
                } else {
                    RawFrame::PathResponse(token)
                }))
            }
            FRAME_DATA | FRAME_DATA_END => {
                let offset = varint_at(buf, pos, "data offset")?;
                let len = varint_at(buf, pos, "data length")?;
                if offset.checked_add(len).is_none_or(|end| end > VARINT_MAX) {
                    return Err(DecodeError::Invalid("data offset"));
                }
                let data = take(buf, pos, len, "data")?;
                Ok(Some(RawFrame::Data { offset, data, message_end: ty == FRAME_DATA_END }))
            }
            other => Err(DecodeError::UnknownFrameType(other)),
        };
    }
}

/// What can be read of a packet before it is opened: everything in the
/// header but the packet number's high bits (and, while sealed, its low
/// ones and the key phase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicHeader {
    pub ty: PacketType,
    pub dst_cid: u64,
    pub src_cid: u64,
    pub cookie: Bytes,
    pub noise: Bytes,
    pub server_key: Bytes,
    pub path_id: u32,
    pub timestamp_us: u64,
    pub echo_timestamp_us: u64,
    /// The low 32 bits of the packet number as on the wire (masked if the
    /// packet is sealed).
    pub pn_truncated: u32,
    /// Where the payload (frames, or ciphertext and tag) starts; the
    /// packet number is the [`PN_LEN`] bytes before it.
    pub payload_offset: usize,
}

impl PublicHeader {
    /// Decodes the header of `datagram`. Total: any bytes give a header
    /// or an error. Its byte fields are slices of the datagram.
    pub fn decode(datagram: &Bytes) -> Result<PublicHeader, DecodeError> {
        PublicHeader::parse(datagram, |range| datagram.slice(range))
    }

    /// [`PublicHeader::decode`] of a plain slice; the byte fields (cookie,
    /// Noise message, key: handshake packets only) are copied.
    pub fn decode_slice(datagram: &[u8]) -> Result<PublicHeader, DecodeError> {
        PublicHeader::parse(datagram, |range| Bytes::copy_from_slice(&datagram[range]))
    }

    fn parse(datagram: &[u8], bytes: impl Fn(std::ops::Range<usize>) -> Bytes) -> Result<PublicHeader, DecodeError> {
        let mut cur: &[u8] = datagram;
        let version = read_u8(&mut cur, "version")?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let ty = match read_u8(&mut cur, "packet type")? & TYPE_MASK {
            1 => PacketType::Initial,
            2 => PacketType::Retry,
            3 => PacketType::Accept,
            4 => PacketType::Data,
            other => return Err(DecodeError::UnknownPacketType(other)),
        };
        let dst_cid = read_u64(&mut cur, "destination connection ID")?;
        let mut src_cid = 0;
        if matches!(ty, PacketType::Initial | PacketType::Accept) {
            src_cid = read_u64(&mut cur, "source connection ID")?;
        }
        let mut cookie = Bytes::new();
        if matches!(ty, PacketType::Initial | PacketType::Retry) {
            cookie = bytes(field(datagram, &mut cur, MAX_COOKIE_LEN, "cookie")?);
        }
        let mut noise = Bytes::new();
        if matches!(ty, PacketType::Initial | PacketType::Accept) {
            noise = bytes(field(datagram, &mut cur, MAX_NOISE_LEN, "noise message")?);
        }
        let mut server_key = Bytes::new();
        if ty == PacketType::Retry {
            server_key = bytes(field(datagram, &mut cur, SERVER_KEY_LEN, "server key")?);
            if !server_key.is_empty() && server_key.len() != SERVER_KEY_LEN {
                return Err(DecodeError::Invalid("server key length"));
            }
        }
        let mut path_id = 0;
        if ty == PacketType::Data {
            path_id = read_path_id(&mut cur, "path id")?;
        }
        let timestamp_us = varint(&mut cur, "timestamp")?;
        let echo_timestamp_us = varint(&mut cur, "echo timestamp")?;
        let (pn, rest) = cur.split_first_chunk::<PN_LEN>().ok_or(DecodeError::Truncated("packet number"))?;
        let pn_truncated = u32::from_be_bytes(*pn);
        let payload_offset = datagram.len() - rest.len();
        Ok(PublicHeader {
            ty,
            dst_cid,
            src_cid,
            cookie,
            noise,
            server_key,
            path_id,
            timestamp_us,
            echo_timestamp_us,
            pn_truncated,
            payload_offset,
        })
    }

    /// The full header, given the packet number restored from it.
    pub fn header(&self, pn: u64) -> Header {
        Header {
            ty: self.ty,
            dst_cid: self.dst_cid,
            src_cid: self.src_cid,
            cookie: self.cookie.clone(),
            noise: self.noise.clone(),
            server_key: self.server_key.clone(),
            path_id: self.path_id,
            pn,
            timestamp_us: self.timestamp_us,
            echo_timestamp_us: self.echo_timestamp_us,
        }
    }
}

/// A length-prefixed byte field of at most `max` bytes: its position in the
/// datagram (empty fields at 0..0, so they cost nothing to turn into bytes).
fn field(datagram: &[u8], cur: &mut &[u8], max: usize, what: &'static str) -> Result<std::ops::Range<usize>, DecodeError> {
    let len = varint(cur, what)?;
    if len > max as u64 {
        return Err(DecodeError::Invalid(what));
    }
    let len = len as usize;
    if cur.len() < len {
        return Err(DecodeError::Truncated(what));
    }
    let start = datagram.len() - cur.len();
    *cur = &cur[len..];
    Ok(if len == 0 { 0..0 } else { start..start + len })
}

/// The full packet number whose low 32 bits are `truncated`, the one
/// closest to the next expected after `largest` (RFC 9000 Appendix A.3).
pub fn expand_pn(largest: Option<u64>, truncated: u32) -> u64 {
    const WIN: u64 = 1 << 32;
    const HALF: u64 = WIN / 2;
    let expected = largest.map_or(0, |l| l + 1);
    let candidate = (expected & !(WIN - 1)) | u64::from(truncated);
    if candidate + HALF <= expected && candidate < (1 << 62) - WIN {
        candidate + WIN
    } else if candidate > expected + HALF && candidate >= WIN {
        candidate - WIN
    } else {
        candidate
    }
}

/// Writes the header of a Data packet (what [`encode_header`] writes for
/// one) without building a [`Header`]: the hot path.
pub fn encode_data_header(out: &mut Vec<u8>, dst_cid: u64, path_id: u32, pn: u64, timestamp_us: u64, echo_us: u64) {
    out.reserve(MAX_DATA_HEADER_LEN);
    let mut fixed = [VERSION, PacketType::Data as u8, 0, 0, 0, 0, 0, 0, 0, 0];
    fixed[2..].copy_from_slice(&dst_cid.to_be_bytes());
    out.extend_from_slice(&fixed);
    write_varint(out, u64::from(path_id));
    write_varint(out, timestamp_us);
    write_varint(out, echo_us);
    out.extend_from_slice(&(pn as u32).to_be_bytes());
}

/// Longest Data packet header: version, type, connection ID, three varints
/// (path id, two timestamps) of at most 8 bytes and the packet number.
pub const MAX_DATA_HEADER_LEN: usize = 1 + 1 + 8 + 3 * 8 + PN_LEN;

/// Writes a packet header into `out`.
pub fn encode_header(out: &mut Vec<u8>, header: &Header) {
    out.push(VERSION);
    out.push(header.ty as u8);
    out.put_u64(header.dst_cid);
    if matches!(header.ty, PacketType::Initial | PacketType::Accept) {
        out.put_u64(header.src_cid);
    }
    if matches!(header.ty, PacketType::Initial | PacketType::Retry) {
        write_varint(out, header.cookie.len() as u64);
        out.extend_from_slice(&header.cookie);
    }
    if matches!(header.ty, PacketType::Initial | PacketType::Accept) {
        write_varint(out, header.noise.len() as u64);
        out.extend_from_slice(&header.noise);
    }
    if header.ty == PacketType::Retry {
        write_varint(out, header.server_key.len() as u64);
        out.extend_from_slice(&header.server_key);
    }
    if header.ty == PacketType::Data {
        write_varint(out, u64::from(header.path_id));
    }
    write_varint(out, header.timestamp_us);
    write_varint(out, header.echo_timestamp_us);
    out.extend_from_slice(&(header.pn as u32).to_be_bytes());
}

/// Writes a frame into `out`.
pub fn encode_frame(out: &mut Vec<u8>, frame: &Frame) {
    match frame {
        Frame::Ping => out.push(FRAME_PING),
        Frame::Ack(ack) => ack.encode(out),
        Frame::Close { code, reason } => {
            out.push(FRAME_CLOSE);
            write_varint(out, *code);
            let reason = &reason[..reason.len().min(MAX_REASON_LEN)];
            write_varint(out, reason.len() as u64);
            out.extend_from_slice(reason);
        }
        Frame::PathAbandon { path_id } => {
            out.push(FRAME_PATH_ABANDON);
            write_varint(out, u64::from(*path_id));
        }
        Frame::PathChallenge(token) => {
            out.push(FRAME_PATH_CHALLENGE);
            out.extend_from_slice(token);
        }
        Frame::PathResponse(token) => {
            out.push(FRAME_PATH_RESPONSE);
            out.extend_from_slice(token);
        }
        Frame::PathStatus { path_id, seq, backup } => {
            out.push(FRAME_PATH_STATUS);
            write_varint(out, u64::from(*path_id));
            write_varint(out, *seq);
            write_varint(out, u64::from(*backup));
        }
        Frame::Data { offset, data, message_end } => {
            encode_data_frame(out, *offset, data, *message_end);
        }
    }
}

/// Writes a DATA frame without building a [`Frame`] (the hot path).
pub fn encode_data_frame(out: &mut Vec<u8>, offset: u64, data: &[u8], message_end: bool) {
    encode_data_frame_header(out, offset, data.len() as u64, message_end);
    out.extend_from_slice(data);
}

/// Writes the header of a DATA frame whose `len` bytes the caller appends.
pub fn encode_data_frame_header(out: &mut Vec<u8>, offset: u64, len: u64, message_end: bool) {
    out.push(if message_end { FRAME_DATA_END } else { FRAME_DATA });
    write_varint(out, offset);
    write_varint(out, len);
}

/// Bytes a DATA frame header takes for this offset and length.
pub fn data_frame_overhead(offset: u64, len: u64) -> usize {
    1 + varint_len(offset) + varint_len(len)
}

/// Appends `n` padding bytes.
#[inline]
pub fn encode_padding(out: &mut Vec<u8>, n: usize) {
    out.resize(out.len() + n, FRAME_PADDING);
}

/// Size of `v` as a varint.
pub fn varint_len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Writes `v` (clamped to [`VARINT_MAX`]) as a varint.
#[inline]
pub fn write_varint(out: &mut Vec<u8>, v: u64) {
    let v = v.min(VARINT_MAX);
    match varint_len(v) {
        1 => out.push(v as u8),
        2 => out.put_u16(0x4000 | v as u16),
        4 => out.put_u32(0x8000_0000 | v as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | v),
    }
}

/// `v` (clamped to [`VARINT_MAX`]) as a varint in the first bytes of an
/// array, and how many bytes it takes.
pub fn varint_array(v: u64) -> ([u8; 8], usize) {
    let v = v.min(VARINT_MAX);
    let len = varint_len(v);
    // The value's low bytes, big-endian, with the length code in the top
    // two bits.
    let code: u64 = match len {
        1 => 0,
        2 => 0x4000,
        4 => 0x8000_0000,
        _ => 0xc000_0000_0000_0000,
    };
    let mut out = [0u8; 8];
    out[..len].copy_from_slice(&(code | v).to_be_bytes()[8 - len..]);
    (out, len)
}

/// Reads a varint, naming `what` if the buffer is too short.
pub fn read_varint<B: Buf>(buf: &mut B, what: &'static str) -> Result<u64, DecodeError> {
    let Some(&first) = buf.chunk().first() else { return Err(DecodeError::Truncated(what)) };
    let len = 1usize << (first >> 6);
    if buf.remaining() < len {
        return Err(DecodeError::Truncated(what));
    }
    Ok(match len {
        1 => u64::from(buf.get_u8() & 0x3f),
        2 => u64::from(buf.get_u16() & 0x3fff),
        4 => u64::from(buf.get_u32() & 0x3fff_ffff),
        _ => buf.get_u64() & 0x3fff_ffff_ffff_ffff,
    })
}

/// [`read_varint`] for a slice, the decoder's hot path (the generic
/// `Buf` version costs twice as much per field).
#[inline]
fn varint(cur: &mut &[u8], what: &'static str) -> Result<u64, DecodeError> {
    let Some(&first) = cur.first() else { return Err(DecodeError::Truncated(what)) };
    let v = match first >> 6 {
        0 => {
            *cur = &cur[1..];
            return Ok(u64::from(first));
        }
        1 => {
            let (b, rest) = cur.split_first_chunk::<2>().ok_or(DecodeError::Truncated(what))?;
            *cur = rest;
            u64::from(u16::from_be_bytes(*b) & 0x3fff)
        }
        2 => {
            let (b, rest) = cur.split_first_chunk::<4>().ok_or(DecodeError::Truncated(what))?;
            *cur = rest;
            u64::from(u32::from_be_bytes(*b) & 0x3fff_ffff)
        }
        _ => {
            let (b, rest) = cur.split_first_chunk::<8>().ok_or(DecodeError::Truncated(what))?;
            *cur = rest;
            u64::from_be_bytes(*b) & 0x3fff_ffff_ffff_ffff
        }
    };
    Ok(v)
}

fn read_u8(buf: &mut &[u8], what: &'static str) -> Result<u8, DecodeError> {
    let (&v, rest) = buf.split_first().ok_or(DecodeError::Truncated(what))?;
    *buf = rest;
    Ok(v)
}

fn read_u64(buf: &mut &[u8], what: &'static str) -> Result<u64, DecodeError> {
    let (bytes, rest) = buf.split_first_chunk::<8>().ok_or(DecodeError::Truncated(what))?;
    *buf = rest;
    Ok(u64::from_be_bytes(*bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(ty: PacketType) -> Header {
        Header {
            ty,
            dst_cid: 0x0102_0304_0506_0708,
            src_cid: if matches!(ty, PacketType::Initial | PacketType::Accept) { 42 } else { 0 },
            cookie: if matches!(ty, PacketType::Initial | PacketType::Retry) {
                Bytes::from_static(b"cookie")
            } else {
                Bytes::new()
            },
            noise: if matches!(ty, PacketType::Initial | PacketType::Accept) {
                Bytes::from_static(b"noise message")
            } else {
                Bytes::new()
            },
            server_key: if ty == PacketType::Retry { Bytes::from_static(&[9; 32]) } else { Bytes::new() },
            path_id: if ty == PacketType::Data { 3 } else { 0 },
            pn: 1234,
            timestamp_us: 99_999,
            echo_timestamp_us: 7,
        }
    }

    #[test]
    fn varint_round_trip_at_boundaries() {
        for v in [0, 63, 64, 16_383, 16_384, 1_073_741_823, 1_073_741_824, VARINT_MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(read_varint(&mut &out[..], "v").unwrap(), v);
            let (array, len) = varint_array(v);
            assert_eq!(array[..len], out[..]);
            let mut cur = &out[..];
            assert_eq!(varint(&mut cur, "v").unwrap(), v);
            assert!(cur.is_empty());
            for cut in 0..out.len() {
                assert_eq!(varint(&mut &out[..cut], "v"), Err(DecodeError::Truncated("v")));
            }
        }
    }

    #[test]
    fn packet_round_trip() {
        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Data));
        let ack = AckFrame::from_ranges([(90, 100), (50, 80), (0, 10)], 250, 1 << 20).unwrap();
        encode_frame(&mut out, &Frame::Ack(ack.clone()));
        encode_frame(&mut out, &Frame::Ping);
        encode_data_frame(&mut out, 1000, b"hello", true);
        encode_data_frame(&mut out, 1005, b"wor", false);
        encode_frame(&mut out, &Frame::Close { code: 7, reason: Bytes::from_static(b"bye") });
        encode_frame(&mut out, &Frame::PathAbandon { path_id: 9 });
        encode_frame(&mut out, &Frame::PathStatus { path_id: 2, seq: 5, backup: true });
        encode_frame(&mut out, &Frame::PathChallenge(*b"12345678"));
        encode_frame(&mut out, &Frame::PathResponse(*b"abcdefgh"));
        encode_padding(&mut out, 10);
        let packet = Packet::decode(Bytes::from(out)).unwrap();
        assert_eq!(packet.header, header(PacketType::Data));
        let frames: Vec<_> = packet.frames().collect();
        assert_eq!(frames.len(), 9);
        assert_eq!(frames[7], Frame::PathChallenge(*b"12345678"));
        assert_eq!(frames[8], Frame::PathResponse(*b"abcdefgh"));
        assert_eq!(frames[5], Frame::PathAbandon { path_id: 9 });
        assert_eq!(frames[6], Frame::PathStatus { path_id: 2, seq: 5, backup: true });
        assert_eq!(frames[0], Frame::Ack(ack.clone()));
        assert_eq!(ack.ranges().collect::<Vec<_>>(), vec![(90, 100), (50, 80), (0, 10)]);
        assert_eq!(
            frames[2],
            Frame::Data { offset: 1000, data: Bytes::from_static(b"hello"), message_end: true }
        );
    }

    #[test]
    fn the_fast_data_header_is_the_general_one() {
        let h = header(PacketType::Data);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode_header(&mut a, &h);
        encode_data_header(&mut b, h.dst_cid, h.path_id, h.pn, h.timestamp_us, h.echo_timestamp_us);
        assert_eq!(a, b);
    }

    #[test]
    fn handshake_headers_round_trip() {
        for ty in [PacketType::Initial, PacketType::Retry, PacketType::Accept] {
            let mut out = Vec::new();
            encode_header(&mut out, &header(ty));
            encode_padding(&mut out, 3);
            assert_eq!(Packet::decode(Bytes::from(out)).unwrap().header, header(ty));
        }
    }

    #[test]
    fn handshake_packets_reject_data_frames() {
        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Initial));
        encode_data_frame(&mut out, 0, b"x", true);
        assert_eq!(
            Packet::decode(Bytes::from(out)),
            Err(DecodeError::Invalid("frame in handshake packet"))
        );
    }

    #[test]
    fn ack_ranges_that_underflow_are_rejected() {
        let mut out = vec![FRAME_ACK];
        for v in [0, 5, 0, 0, 1, 3, 10, 0] {
            write_varint(&mut out, v); // path 0, largest 5, first range 3, then gap 10
        }
        let mut pos = 1;
        assert_eq!(AckFrame::decode_raw(&out, &mut pos).err(), Some(DecodeError::Invalid("ACK gap")));
    }

    #[test]
    fn path_ids_beyond_u32_and_unknown_statuses_are_rejected() {
        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Data));
        // Rewrite the path id (the byte after version, type and CID) as 2^32.
        let mut bad = out[..10].to_vec();
        write_varint(&mut bad, 1 << 32);
        bad.extend_from_slice(&out[11..]);
        assert_eq!(Packet::decode(Bytes::from(bad)), Err(DecodeError::Invalid("path id")));

        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Data));
        out.push(FRAME_PATH_STATUS);
        for v in [1, 1, 2] {
            write_varint(&mut out, v);
        }
        assert_eq!(Packet::decode(Bytes::from(out)), Err(DecodeError::Invalid("PATH_STATUS status")));

        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Data));
        out.push(FRAME_ACK);
        write_varint(&mut out, 1 << 40);
        assert_eq!(Packet::decode(Bytes::from(out)), Err(DecodeError::Invalid("ACK path id")));
    }

    #[test]
    fn handshake_packets_carry_no_path_id() {
        // Path frames, like every frame but PING, are refused in handshake packets.
        let mut out = Vec::new();
        encode_header(&mut out, &header(PacketType::Retry));
        encode_frame(&mut out, &Frame::PathAbandon { path_id: 1 });
        assert_eq!(Packet::decode(Bytes::from(out)), Err(DecodeError::Invalid("frame in handshake packet")));
        let mut a = Vec::new();
        let mut h = header(PacketType::Accept);
        h.path_id = 7; // not encoded: the handshake is on path 0
        encode_header(&mut a, &h);
        assert_eq!(Packet::decode(Bytes::from(a)).unwrap().header.path_id, 0);
    }

    fn arb_ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
        // Descending, separated ranges built from (gap, len) pairs.
        (0u64..1 << 40, prop::collection::vec((0u64..1000, 0u64..1000), 0..20)).prop_map(|(top, parts)| {
            let mut ranges = Vec::new();
            let mut hi = top + 1_000_000;
            for (gap, len) in parts {
                let lo = hi.saturating_sub(len);
                ranges.push((lo, hi));
                if lo < gap + 2 {
                    break;
                }
                hi = lo - gap - 2;
            }
            ranges
        })
    }

    #[test]
    fn packet_numbers_are_restored_near_the_largest_received() {
        // RFC 9000 A.3's example, scaled to 32 bits: the candidate nearest
        // to the expected number wins, across the 2^32 boundary both ways.
        assert_eq!(expand_pn(None, 5), 5);
        assert_eq!(expand_pn(Some(0xa82f_30ea), 0x9b32), 0x9b32 + (1 << 32));
        assert_eq!(expand_pn(Some((1 << 32) - 2), 3), (1 << 32) + 3);
        assert_eq!(expand_pn(Some((1 << 32) + 3), u32::MAX - 1), (1 << 32) - 2);
    }

    proptest! {
        #[test]
        fn packet_numbers_round_trip_within_half_a_window(largest in 0u64..1 << 60, delta in -(1i64 << 31) + 1..1i64 << 31) {
            let pn = (largest as i64 + 1 + delta).max(0) as u64;
            prop_assert_eq!(expand_pn(Some(largest), pn as u32), pn);
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..1500)) {
            if let Ok(p) = Packet::decode(Bytes::from(bytes)) {
                for f in p.frames() {
                    if let Frame::Ack(a) = f { let _ = a.ranges().count(); }
                }
            }
        }

        #[test]
        fn decode_never_panics_on_valid_prefix(tail in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut out = Vec::new();
            encode_header(&mut out, &header(PacketType::Data));
            out.extend_from_slice(&tail);
            let _ = Packet::decode(Bytes::from(out));
        }

        /// `into_frames` yields what `frames` does, and a DATA frame that
        /// ends the payload ends where the payload does (its own bytes).
        #[test]
        fn owned_frames_match_borrowed_frames(
            frames in prop::collection::vec(
                prop_oneof![
                    Just(Frame::Ping),
                    (0u64..1 << 40, prop::collection::vec(any::<u8>(), 0..300), any::<bool>())
                        .prop_map(|(offset, data, message_end)| Frame::Data { offset, data: Bytes::from(data), message_end }),
                ],
                1..6,
            ),
        ) {
            let mut out = Vec::new();
            encode_header(&mut out, &header(PacketType::Data));
            for f in &frames {
                encode_frame(&mut out, f);
            }
            let packet = Packet::decode(Bytes::from(out)).unwrap();
            let borrowed: Vec<Frame> = packet.frames().collect();
            let payload_end = packet.payload.as_ptr() as usize + packet.payload.len();
            let (_, owned) = packet.into_frames();
            let owned: Vec<Frame> = owned.collect();
            prop_assert_eq!(&owned, &frames);
            prop_assert_eq!(&borrowed, &frames);
            if let Some(Frame::Data { data, .. }) = owned.last() {
                if !data.is_empty() {
                    prop_assert_eq!(data.as_ptr() as usize + data.len(), payload_end);
                }
            }
        }

        #[test]
        fn ack_round_trip(ranges in arb_ranges(), delay in 0u64..1 << 30, max_data in 0u64..VARINT_MAX, path_id in any::<u32>()) {
            prop_assume!(!ranges.is_empty());
            let ack = AckFrame::for_path(path_id, ranges.iter().copied(), delay, max_data).unwrap();
            let mut out = Vec::new();
            encode_header(&mut out, &header(PacketType::Data));
            encode_frame(&mut out, &Frame::Ack(ack));
            let packet = Packet::decode(Bytes::from(out)).unwrap();
            let Some(Frame::Ack(decoded)) = packet.frames().next() else { panic!("no ack") };
            prop_assert_eq!(decoded.ranges().collect::<Vec<_>>(), ranges);
            prop_assert_eq!(decoded.ack_delay_us, delay);
            prop_assert_eq!(decoded.path_id, path_id);
            prop_assert_eq!(decoded.max_data, max_data);
        }
    }
}
