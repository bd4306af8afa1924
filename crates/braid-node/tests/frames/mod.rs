//! The Node's TCP batch decoder under bad input (issue 23, "a malformed
//! batch is dropped and counted, never a panic"): the body shared by
//! `tests/tcp_frames.rs` (proptests, on stable) and the fuzz target
//! `fuzz/fuzz_targets/node_tcp_frames.rs` (which includes this file).
//!
//! Bytes arrive in reads of any size up to 64 KiB; [`TcpFrames`] cuts
//! frames out of them and [`decode_frame`] decodes each, as the node's TCP
//! reader does. Whatever the bytes and however they are split into reads:
//! no panic; the frames cut are those of one pass over the whole stream
//! (reads do not matter); a bad length prefix ends the stream where it
//! stands; every frame cut decodes or is refused (what the node counts in
//! `malformed_frames`).
//!
//! Batch frames ([`braid_node::MessageBatch`]) go through the same decoder:
//! [`check_batch`] puts arbitrary bytes after a valid batch frame's header,
//! where the count and the length-prefixed bodies go, so that the input
//! exercises the batch decoder itself rather than the header's.

use braid_node::{decode_frame, BasicHeader, FrameLengthError, MessageBatch, Received, TcpFrames};
use bytes::Bytes;

/// The node's header type in these checks.
pub type H = BasicHeader;

/// The frames of `stream` cut in one pass, with the error that ended it.
pub fn reference(stream: &[u8], max: usize) -> (Vec<Vec<u8>>, Option<FrameLengthError>) {
    let mut frames = Vec::new();
    let mut pos = 0;
    while stream.len() - pos >= 4 {
        let len = u32::from_be_bytes(stream[pos..pos + 4].try_into().unwrap()) as usize;
        if len == 0 || len > max {
            return (frames, Some(FrameLengthError { len, max }));
        }
        if stream.len() - pos - 4 < len {
            break;
        }
        frames.push(stream[pos + 4..pos + 4 + len].to_vec());
        pos += 4 + len;
    }
    (frames, None)
}

/// What a TCP reader makes of `stream` read in pieces of the given sizes
/// (cycled): the frames cut, the error that ended it, and the frames that
/// decoded and that were malformed.
pub struct Read {
    pub frames: Vec<Bytes>,
    pub error: Option<FrameLengthError>,
    pub messages: Vec<braid_node::Message<H>>,
    pub batches: Vec<MessageBatch<H>>,
    pub malformed: usize,
}

pub fn read(stream: &[u8], reads: &[usize], max: usize) -> Read {
    let mut f = TcpFrames::new(max);
    let mut out = Read { frames: Vec::new(), error: None, messages: Vec::new(), batches: Vec::new(), malformed: 0 };
    let mut pos = 0;
    let mut sizes = reads.iter().cycle();
    'reads: while pos < stream.len() {
        let n = (*sizes.next().unwrap()).clamp(1, 64 << 10).min(stream.len() - pos);
        f.push(&stream[pos..pos + n]);
        pos += n;
        loop {
            match f.next_frame() {
                Ok(Some(frame)) => {
                    assert!(!frame.is_empty() && frame.len() <= max);
                    out.frames.push(frame.clone());
                    match decode_frame::<H>(frame.clone()) {
                        Ok(Received::Message(m)) => out.messages.push(m),
                        Ok(Received::Batch(b)) => {
                            assert_batch_within(&b, &frame);
                            out.batches.push(b)
                        }
                        Err(_) => out.malformed += 1,
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(e);
                    break 'reads;
                }
            }
        }
    }
    if out.error.is_none() {
        // Whatever is left is an incomplete frame (or prefix).
        let (cut, _) = reference(stream, max);
        let used: usize = cut.iter().map(|c| c.len() + 4).sum();
        assert_eq!(f.pending(), stream.len() - used);
    }
    out
}

/// Runs the property on `data`: bytes 0 and 1 give two read sizes (1 to
/// 64 KiB, cycled), byte 2 the frame limit (64 B, 1000 B or 64 MiB), the
/// rest is the stream. Panics if the property fails.
pub fn check(data: &[u8]) {
    let [r0, r1, m, ..] = *data else { return };
    let reads = [usize::from(r0) * 257 + 1, usize::from(r1) + 1];
    let max = [64, 1000, 64 << 20][usize::from(m % 3)];
    let stream = &data[3..];
    let got = read(stream, &reads, max);
    let (want, error) = reference(stream, max);
    assert!(got.frames.iter().map(|f| &f[..]).eq(want.iter().map(|w| &w[..])), "frames differ from one pass over the stream");
    assert_eq!(got.error, error);
    assert_eq!(got.messages.len() + got.batches.len() + got.malformed, got.frames.len());
    check_batch(data);
}

/// A decoded batch is what its frame holds: as many bodies as it says,
/// none empty-handed, together no more bytes than the frame.
pub fn assert_batch_within(b: &MessageBatch<H>, frame: &[u8]) {
    assert!(!b.is_empty());
    assert_eq!(b.iter().count(), b.len());
    assert_eq!(b.iter_bytes().count(), b.len());
    let bytes: usize = b.iter().map(<[u8]>::len).sum();
    assert!(bytes + b.len() <= frame.len());
    assert_eq!(b.clone().into_iter().count(), b.len());
}

/// The start of a batch frame from a valid header: version 1, header
/// length and header, kind 2 (raw) or 3 (typed, then an 8-byte type id).
pub fn batch_head(typed: bool) -> Vec<u8> {
    let a: std::net::SocketAddr = ([127, 0, 0, 1], 4000).into();
    let header = BasicHeader::new(braid_node::BasicAddress::new(a), braid_node::BasicAddress::new(a), braid_node::Transport::Tcp);
    let h = postcard::to_allocvec(&header).expect("a header encodes");
    let mut f = vec![1, h.len() as u8];
    f.extend_from_slice(&h);
    if typed {
        f.push(3);
        f.extend_from_slice(&7u64.to_le_bytes());
    } else {
        f.push(2);
    }
    f
}

/// Byte 0 chooses raw or typed; the rest is the batch's count and bodies.
/// Never a panic; the frame decodes as a batch whose bodies are all there,
/// or is refused (what the node counts as malformed); never as a message.
pub fn check_batch(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else { return };
    let mut frame = batch_head(first & 1 == 1);
    frame.extend_from_slice(rest);
    match decode_frame::<H>(Bytes::from(frame.clone())) {
        Ok(Received::Batch(b)) => assert_batch_within(&b, &frame),
        Ok(Received::Message(_)) => panic!("a batch frame decoded as a message"),
        Err(_) => {}
    }
}
