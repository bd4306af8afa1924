//! The wire protocol between a sender and a receiver (seed 002 §3: the stages talk through
//! control messages and chunk streams).
//!
//! A transfer runs over one *control* stream and any number of *data* streams. Every stream
//! carries frames: a 4-byte little-endian length, then a one-byte kind, then the body.
//!
//! * kind 0, control: the body is one postcard-encoded [`Message`].
//! * kind 1, chunk: the body is a postcard-encoded [`ChunkHeader`] followed by the raw payload
//!   of exactly `header.len` bytes (raw, so a 4 MiB payload is read once and never re-encoded).
//!
//! Frames longer than [`MAX_FRAME_LEN`] are refused before anything is allocated, so a peer
//! cannot make the other side allocate without bound. Decoding is total: any byte string is a
//! frame or a typed [`ProtocolError`], never a panic (property-tested below).
//!
//! Sequence: the sender opens the control stream with [`Message::Hello`] (protocol version,
//! transfer id, chunk plan parameters, manifest); the receiver answers [`Message::Resume`] with
//! the chunks its journal already holds; each data stream starts with [`Message::Attach`] and
//! then carries chunk frames only. On the control stream the receiver sends
//! [`Message::Refetch`] for a chunk whose hash failed, [`Message::WriterState`] once per probe
//! interval (for the sender's write-stage tuner), [`Message::FilesDone`] per written chunk that finished files, and
//! finally [`Message::Done`] or [`Message::Error`]; the sender sends [`Message::SetWriters`].

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::buffer::BufferPool;
use crate::transport::ReceiveBatching;

/// Version spoken by this implementation; a receiver refuses any other.
pub const PROTOCOL_VERSION: u32 = 4;
/// Largest frame body (kind byte included): 64 MiB. Bounds a chunk and the manifest.
pub const MAX_FRAME_LEN: u32 = 64 << 20;
/// Largest chunk size the protocol carries (leaves room for the header within a frame).
pub const MAX_CHUNK_SIZE: u64 = 32 << 20;

const KIND_CONTROL: u8 = 0;
const KIND_CHUNK: u8 = 1;

/// A frame that cannot be read or written.
#[derive(Debug, Error)]
pub enum ProtocolError {
    /// The stream failed.
    #[error("stream I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame")]
    Truncated,
    /// A length prefix above the maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The announced or encoded length.
        len: u64,
        /// The limit ([`MAX_FRAME_LEN`] or tighter).
        max: u32,
    },
    /// An empty frame (no kind byte).
    #[error("empty frame: expected a kind byte")]
    Empty,
    /// An unknown kind byte.
    #[error("unknown frame kind {0}: expected 0 (control) or 1 (chunk)")]
    UnknownKind(u8),
    /// The body does not decode.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's reason.
        reason: String,
    },
    /// A chunk frame whose payload length differs from its header.
    #[error("chunk header says {declared} bytes but the frame carries {actual}")]
    PayloadLength {
        /// `header.len`.
        declared: u64,
        /// Bytes after the header.
        actual: u64,
    },
    /// A message that is valid but not expected here.
    #[error("unexpected message: expected {expected}, got {got}")]
    Unexpected {
        /// What the protocol expects at this point.
        expected: &'static str,
        /// What arrived.
        got: String,
    },
}

/// What a manifest entry is, on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireKind {
    /// A regular file: size and data extents `(offset, len)` in increasing order.
    File {
        /// Size in bytes, holes included.
        size: u64,
        /// Data extents.
        extents: Vec<(u64, u64)>,
    },
    /// A directory.
    Dir,
    /// A symbolic link and its target's bytes.
    Symlink {
        /// The target (raw bytes: Unix link targets need not be UTF-8).
        target: Vec<u8>,
    },
}

/// One manifest entry on the wire (no source path: the receiver never learns it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEntry {
    /// `/`-separated relative path; the receiver validates it.
    pub path: String,
    /// Kind.
    pub kind: WireKind,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
}

/// Chunk plan parameters and manifest, the content of [`Message::Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// BLAKE3 of the manifest and plan parameters (see `plan::transfer_id`).
    pub transfer_id: [u8; 32],
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Files smaller than this are bundled.
    pub bundle_threshold: u64,
    /// How often the receiver reports its writer state, in milliseconds.
    pub probe_interval_ms: u64,
    /// Writers the receiver starts with (the sender's write tuner or pin).
    pub writers: u32,
    /// The manifest.
    pub entries: Vec<WireEntry>,
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Sender → receiver, first on the control stream.
    Hello(Hello),
    /// Sender → receiver, first on each data stream.
    Attach {
        /// The transfer this stream belongs to.
        transfer_id: [u8; 32],
    },
    /// Receiver → sender: plan indices of chunks already finished (from the journal).
    Resume {
        /// Finished chunk indices.
        have: Vec<u64>,
    },
    /// Receiver → sender: the chunk starting at `(file, offset)` failed its hash; send it again.
    Refetch {
        /// File index of the chunk's first segment.
        file: u64,
        /// Offset of the chunk's first segment.
        offset: u64,
    },
    /// Receiver → sender, once per probe interval: the write stage.
    WriterState {
        /// Writers running.
        writers: u32,
        /// Bytes waiting in the receiver's staging area.
        staged_bytes: u64,
        /// Write-stage throughput over busy time (bytes/s), see `stats`.
        throughput: f64,
        /// Bytes written and journaled so far in this session.
        written_bytes: u64,
        /// Mean number of writers busy over the interval (protocol 3; see `tuner`, "Idle
        /// workers").
        busy_writers: f64,
        /// Mean number of data streams the receiver left unread over the interval because its
        /// writers had enough queued (protocol 4): streams the sender sees busy that are waiting
        /// for the writers, not for the network (see `tuner`, "Idle workers").
        held_streams: f64,
    },
    /// Sender → receiver: run this many writers (ignored by a receiver with pinned writers).
    SetWriters {
        /// Writer count.
        writers: u32,
    },
    /// Receiver → sender: files are complete, verified and renamed (one message per written
    /// chunk: a bundle finishes hundreds of small files at once, and one message each cost a
    /// system call each).
    FilesDone {
        /// Their manifest indices.
        files: Vec<u64>,
    },
    /// Receiver → sender: the whole transfer is complete.
    Done,
    /// Either way: the transfer failed.
    Error {
        /// What went wrong (names the path or field).
        message: String,
    },
}

impl Message {
    fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Attach { .. } => "Attach",
            Message::Resume { .. } => "Resume",
            Message::Refetch { .. } => "Refetch",
            Message::WriterState { .. } => "WriterState",
            Message::SetWriters { .. } => "SetWriters",
            Message::FilesDone { .. } => "FilesDone",
            Message::Done => "Done",
            Message::Error { .. } => "Error",
        }
    }
}

/// Where a chunk belongs: the first segment's file and offset identify it in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkHeader {
    /// File index of the first segment.
    pub file: u64,
    /// Offset of the first segment.
    pub offset: u64,
    /// Payload length.
    pub len: u64,
    /// BLAKE3 of the payload.
    pub hash: [u8; 32],
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A control message.
    Control(Message),
    /// A chunk and its payload.
    Chunk(ChunkHeader, Bytes),
}

impl Frame {
    /// A short name for error messages.
    pub fn name(&self) -> String {
        match self {
            Frame::Control(m) => m.name().to_string(),
            Frame::Chunk(..) => "Chunk".to_string(),
        }
    }
}

fn malformed(what: &'static str) -> impl Fn(postcard::Error) -> ProtocolError {
    move |e| ProtocolError::Malformed { what, reason: e.to_string() }
}

/// Encodes a control message as a whole frame (length prefix included).
pub fn encode_message(message: &Message) -> Result<Vec<u8>, ProtocolError> {
    let mut out = vec![0u8; 4];
    out.push(KIND_CONTROL);
    let out = postcard::to_extend(message, out).map_err(malformed("message"))?;
    finish_prefix(out)
}

/// Encodes a chunk header as the start of a frame; the payload follows it on the stream.
pub fn encode_chunk_header(header: &ChunkHeader) -> Result<Vec<u8>, ProtocolError> {
    let mut out = vec![0u8; 4];
    out.push(KIND_CHUNK);
    let out = postcard::to_extend(header, out).map_err(malformed("chunk header"))?;
    let body = (out.len() - 4) as u64 + header.len;
    if body > u64::from(MAX_FRAME_LEN) {
        return Err(ProtocolError::FrameTooLarge { len: body, max: MAX_FRAME_LEN });
    }
    let mut out = out;
    out[..4].copy_from_slice(&(body as u32).to_le_bytes());
    Ok(out)
}

fn finish_prefix(mut out: Vec<u8>) -> Result<Vec<u8>, ProtocolError> {
    let body = (out.len() - 4) as u64;
    if body > u64::from(MAX_FRAME_LEN) {
        return Err(ProtocolError::FrameTooLarge { len: body, max: MAX_FRAME_LEN });
    }
    out[..4].copy_from_slice(&(body as u32).to_le_bytes());
    Ok(out)
}

/// Decodes one frame body (after the length prefix).
pub fn decode_body(body: Bytes) -> Result<Frame, ProtocolError> {
    let (&kind, rest) = body.split_first().ok_or(ProtocolError::Empty)?;
    match kind {
        KIND_CONTROL => {
            let (message, tail) = postcard::take_from_bytes::<Message>(rest).map_err(malformed("message"))?;
            if !tail.is_empty() {
                return Err(ProtocolError::Malformed {
                    what: "message",
                    reason: format!("{} trailing bytes", tail.len()),
                });
            }
            Ok(Frame::Control(message))
        }
        KIND_CHUNK => {
            let (header, tail) = postcard::take_from_bytes::<ChunkHeader>(rest).map_err(malformed("chunk header"))?;
            if tail.len() as u64 != header.len {
                return Err(ProtocolError::PayloadLength { declared: header.len, actual: tail.len() as u64 });
            }
            let start = body.len() - tail.len();
            Ok(Frame::Chunk(header, body.slice(start..)))
        }
        other => Err(ProtocolError::UnknownKind(other)),
    }
}

/// Decodes a whole frame (length prefix included); the buffer must hold exactly one frame.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, ProtocolError> {
    if bytes.len() < 4 {
        return Err(ProtocolError::Truncated);
    }
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if len > MAX_FRAME_LEN {
        return Err(ProtocolError::FrameTooLarge { len: u64::from(len), max: MAX_FRAME_LEN });
    }
    let body = &bytes[4..];
    if (body.len() as u64) < u64::from(len) {
        return Err(ProtocolError::Truncated);
    }
    if body.len() as u64 > u64::from(len) {
        return Err(ProtocolError::Malformed { what: "frame", reason: "bytes after the frame".into() });
    }
    decode_body(Bytes::copy_from_slice(body))
}

/// Reads one frame; `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, ProtocolError> {
    read_frame_max(reader, MAX_FRAME_LEN).await
}

/// [`read_frame`] with a tighter bound on the frame length (a data stream's frames are at most
/// a chunk and its header, so a peer cannot make each stream allocate the protocol maximum).
pub async fn read_frame_max<R: AsyncRead + Unpin>(reader: &mut R, max: u32) -> Result<Option<Frame>, ProtocolError> {
    read_frame_in(reader, max, None, None).await
}

/// [`read_frame_max`] into a buffer from `pool` (returned to it when the frame's payload is
/// dropped): a data stream reads a chunk per frame, and a fresh chunk-sized allocation each
/// time costs page faults (see `buffer`). With `batching`, the frame's body is read in few
/// wake-ups (see [`ReceiveBatching`]).
pub async fn read_frame_pooled<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: u32,
    pool: &std::sync::Arc<BufferPool>,
    batching: Option<&ReceiveBatching>,
) -> Result<Option<Frame>, ProtocolError> {
    read_frame_in(reader, max, Some(pool), batching).await
}

/// Fills `buf`, raising the socket's wake-up threshold to what the rest of `buf` certainly
/// brings, and lowering it to 1 again before returning (the next frame's length prefix is small).
pub(crate) async fn read_body<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut [u8], batching: Option<&ReceiveBatching>) -> std::io::Result<()> {
    let Some(batching) = batching else {
        reader.read_exact(buf).await?;
        return Ok(());
    };
    let mut filled = 0;
    let mut threshold = 1;
    let result = loop {
        if filled == buf.len() {
            break Ok(());
        }
        let wanted = batching.threshold(buf.len() - filled);
        if wanted != threshold {
            batching.set(wanted);
            threshold = wanted;
        }
        match reader.read(&mut buf[filled..]).await {
            Ok(0) => break Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    if threshold != 1 {
        batching.set(1);
    }
    result
}

async fn read_frame_in<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: u32,
    pool: Option<&std::sync::Arc<BufferPool>>,
    batching: Option<&ReceiveBatching>,
) -> Result<Option<Frame>, ProtocolError> {
    let max = max.min(MAX_FRAME_LEN);
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader.read(&mut prefix[got..]).await?;
        if n == 0 {
            return if got == 0 { Ok(None) } else { Err(ProtocolError::Truncated) };
        }
        got += n;
    }
    let len = u32::from_le_bytes(prefix);
    if len > max {
        return Err(ProtocolError::FrameTooLarge { len: u64::from(len), max });
    }
    let truncated = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProtocolError::Truncated,
        _ => ProtocolError::Io(e),
    };
    let body = match pool {
        Some(pool) => {
            let mut body = pool.take_len(len as usize);
            read_body(reader, &mut body, batching).await.map_err(truncated)?;
            pool.bytes(body)
        }
        None => {
            let mut body = BytesMut::zeroed(len as usize);
            reader.read_exact(&mut body).await.map_err(truncated)?;
            body.freeze()
        }
    };
    decode_body(body).map(Some)
}

/// Writes one control message (not flushed).
pub async fn write_message<W: AsyncWrite + Unpin>(writer: &mut W, message: &Message) -> Result<(), ProtocolError> {
    writer.write_all(&encode_message(message)?).await?;
    Ok(())
}

/// Writes one control message and flushes it.
pub async fn send_message<W: AsyncWrite + Unpin>(writer: &mut W, message: &Message) -> Result<(), ProtocolError> {
    write_message(writer, message).await?;
    writer.flush().await?;
    Ok(())
}

/// Writes one chunk frame (header and payload); returns the bytes put on the stream.
pub async fn write_chunk<W: AsyncWrite + Unpin>(
    writer: &mut W,
    header: &ChunkHeader,
    payload: &[u8],
) -> Result<u64, ProtocolError> {
    if payload.len() as u64 != header.len {
        return Err(ProtocolError::PayloadLength { declared: header.len, actual: payload.len() as u64 });
    }
    let head = encode_chunk_header(header)?;
    writer.write_all(&head).await?;
    writer.write_all(payload).await?;
    Ok((head.len() + payload.len()) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_messages() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                version: PROTOCOL_VERSION,
                transfer_id: [7; 32],
                chunk_size: 4 << 20,
                bundle_threshold: 64 << 10,
                probe_interval_ms: 1000,
                writers: 2,
                entries: vec![
                    WireEntry {
                        path: "a/b".into(),
                        kind: WireKind::File { size: 10, extents: vec![(0, 10)] },
                        mode: 0o644,
                        mtime_sec: -5,
                        mtime_nsec: 9,
                    },
                    WireEntry { path: "l".into(), kind: WireKind::Symlink { target: vec![0xff, b'x'] }, mode: 0o777, mtime_sec: 0, mtime_nsec: 0 },
                ],
            }),
            Message::Attach { transfer_id: [1; 32] },
            Message::Resume { have: vec![0, 5, u64::MAX] },
            Message::Refetch { file: 3, offset: 1 << 40 },
            Message::WriterState { writers: 4, staged_bytes: 9, throughput: 1.5e9, written_bytes: 3, busy_writers: 2.5, held_streams: 1.5 },
            Message::SetWriters { writers: 7 },
            Message::FilesDone { files: vec![2, 3, u64::MAX] },
            Message::Done,
            Message::Error { message: "disk full at `x`".into() },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for message in sample_messages() {
            let bytes = encode_message(&message).unwrap();
            assert_eq!(decode_frame(&bytes).unwrap(), Frame::Control(message));
        }
    }

    #[test]
    fn oversized_frames_are_refused_before_allocating() {
        let mut bytes = (MAX_FRAME_LEN + 1).to_le_bytes().to_vec();
        bytes.push(0);
        assert!(matches!(decode_frame(&bytes), Err(ProtocolError::FrameTooLarge { .. })));
        let header = ChunkHeader { file: 0, offset: 0, len: u64::from(MAX_FRAME_LEN), hash: [0; 32] };
        assert!(matches!(encode_chunk_header(&header), Err(ProtocolError::FrameTooLarge { .. })));
    }

    #[tokio::test]
    async fn frames_stream_through_a_pipe() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let payload = vec![42u8; 100_000];
        let header = ChunkHeader { file: 1, offset: 2, len: payload.len() as u64, hash: *blake3::hash(&payload).as_bytes() };
        let writer = tokio::spawn(async move {
            send_message(&mut a, &Message::Done).await.unwrap();
            write_chunk(&mut a, &header, &payload).await.unwrap();
            a.shutdown().await.unwrap();
        });
        assert_eq!(read_frame(&mut b).await.unwrap(), Some(Frame::Control(Message::Done)));
        let Some(Frame::Chunk(h, p)) = read_frame(&mut b).await.unwrap() else { panic!("no chunk") };
        assert_eq!(h, header);
        assert_eq!(p.len(), 100_000);
        assert_eq!(read_frame(&mut b).await.unwrap(), None);
        writer.await.unwrap();
        // A stream cut inside a frame is an error, not a clean end.
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[10, 0, 0, 0, 0]).await.unwrap();
        drop(a);
        assert!(matches!(read_frame(&mut b).await, Err(ProtocolError::Truncated)));
    }

    proptest! {
        /// Decoding is total: arbitrary bytes give a frame or an error, never a panic.
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame(&bytes);
            let _ = decode_body(Bytes::from(bytes));
        }

        /// Any single corrupted byte of a valid frame decodes to some frame or a typed error.
        #[test]
        fn corrupted_valid_frames_never_panic(index in 0usize..10, at in any::<prop::sample::Index>(), value in any::<u8>()) {
            let messages = sample_messages();
            let mut bytes = encode_message(&messages[index % messages.len()]).unwrap();
            let i = at.index(bytes.len());
            bytes[i] = value;
            let _ = decode_frame(&bytes);
        }

        /// Chunk frames round-trip for any header and payload.
        #[test]
        fn chunk_frames_round_trip(file in any::<u64>(), offset in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let header = ChunkHeader { file, offset, len: payload.len() as u64, hash: *blake3::hash(&payload).as_bytes() };
            let mut bytes = encode_chunk_header(&header).unwrap();
            bytes.extend_from_slice(&payload);
            prop_assert_eq!(decode_frame(&bytes).unwrap(), Frame::Chunk(header, Bytes::from(payload)));
        }
    }
}
