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

use braid_node::{decode_frame, BasicHeader, FrameLengthError, TcpFrames};
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
    pub malformed: usize,
}

pub fn read(stream: &[u8], reads: &[usize], max: usize) -> Read {
    let mut f = TcpFrames::new(max);
    let mut out = Read { frames: Vec::new(), error: None, messages: Vec::new(), malformed: 0 };
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
                    match decode_frame::<H>(frame) {
                        Ok(m) => out.messages.push(m),
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
    assert_eq!(got.messages.len() + got.malformed, got.frames.len());
}
