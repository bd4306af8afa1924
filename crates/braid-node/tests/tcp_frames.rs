//! The Node's TCP batch decoder on bad input (issue 23, "a malformed batch
//! is dropped and counted, never a panic"), on stable; `frames/mod.rs`
//! holds what the fuzz target `node_tcp_frames` shares. Bytes arrive in reads of any
//! size up to 64 KiB; [`TcpFrames`] cuts frames out of them and
//! [`decode_frame`] decodes each. Whatever the bytes and however they are
//! split into reads: no panic; the frames cut are those of one pass over
//! the whole stream (reads do not matter); a bad length prefix ends the
//! stream where it stands; every frame cut decodes or is refused (the
//! node's `malformed_frames`), and well-formed frames among garbage ones
//! decode to exactly their messages.

use std::net::SocketAddr;

mod frames;

use braid_node::{BasicAddress, BasicHeader, FrameLengthError, TcpFrames, Transport};
use frames::{read, reference};
use proptest::prelude::*;

/// A well-formed frame carrying `body` raw, as the node's wire module
/// writes it: version 1, header length (LEB128), postcard header, kind 0.
fn frame(body: &[u8], port: u16) -> Vec<u8> {
    let a: SocketAddr = ([127, 0, 0, 1], port).into();
    let header = BasicHeader::new(BasicAddress::new(a), BasicAddress::new(a), Transport::Tcp);
    let h = postcard::to_allocvec(&header).unwrap();
    assert!(h.len() < 128);
    let mut f = vec![1, h.len() as u8];
    f.extend_from_slice(&h);
    f.push(0);
    f.extend_from_slice(body);
    f
}

fn prefixed(f: &[u8]) -> Vec<u8> {
    let mut v = (f.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(f);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The fuzz target's body.
    #[test]
    fn fuzz_body_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..4096)) {
        frames::check(&data);
    }

    /// Arbitrary bytes, arbitrary reads, small and large frame limits.
    #[test]
    fn arbitrary_bytes_never_panic_and_reads_do_not_matter(
        stream in prop::collection::vec(any::<u8>(), 0..4096),
        reads in prop::collection::vec(1usize..700, 1..8),
        max in prop_oneof![Just(64usize), Just(1000), Just(64 << 20)],
    ) {
        let got = read(&stream, &reads, max);
        let (want, error) = reference(&stream, max);
        prop_assert_eq!(got.frames.iter().map(|f| f.to_vec()).collect::<Vec<_>>(), want);
        prop_assert_eq!(got.error, error);
        prop_assert_eq!(got.messages.len() + got.batches.len() + got.malformed, got.frames.len());
    }

    /// Byte streams that mostly look like frames: length prefixes that fit,
    /// with bodies of arbitrary bytes (their version byte is never 1, so
    /// each is malformed), among well-formed frames; then perhaps a bad
    /// prefix and more bytes. Every well-formed frame decodes to its
    /// message, every garbage one is counted, nothing after a bad prefix
    /// is taken.
    #[test]
    fn well_formed_frames_survive_garbage_around_them(
        parts in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 1..300)), 0..40),
        reads in prop::collection::vec(1usize..3000, 1..8),
        bad_tail in prop::option::of((prop_oneof![Just(0u32), Just(u32::MAX), 2049u32..1_000_000], prop::collection::vec(any::<u8>(), 0..64))),
    ) {
        const MAX: usize = 2048;
        let mut stream = Vec::new();
        let mut bodies = Vec::new();
        let mut garbage = 0;
        for (i, (good, bytes)) in parts.iter().enumerate() {
            if *good {
                stream.extend(prefixed(&frame(bytes, i as u16)));
                bodies.push(bytes.clone());
            } else {
                let mut g = bytes.clone();
                if g[0] == 1 {
                    g[0] = 2;
                }
                stream.extend(prefixed(&g));
                garbage += 1;
            }
        }
        if let Some((len, after)) = &bad_tail {
            stream.extend(len.to_be_bytes());
            stream.extend(frame(b"never", 9)); // after the bad prefix: not a frame
            stream.extend(after);
        }
        let got = read(&stream, &reads, MAX);
        prop_assert_eq!(got.malformed, garbage);
        let raw: Vec<Vec<u8>> = got.messages.into_iter().map(|m| m.raw_bytes().unwrap().to_vec()).collect();
        prop_assert_eq!(raw, bodies);
        prop_assert_eq!(got.error.is_some(), bad_tail.is_some());
    }
}

/// A frame split at every byte boundary arrives whole; the reader keeps
/// room for a frame it has the prefix of.
#[test]
fn a_frame_split_anywhere_arrives_whole() {
    let f = prefixed(&frame(&[7; 100], 1));
    for cut in 0..=f.len() {
        let got = read(&f, &[cut.max(1), f.len()], 1 << 20);
        assert_eq!(got.frames.len(), 1, "cut at {cut}");
        assert_eq!(got.messages[0].raw_bytes().map(|b| b.to_vec()), Some(vec![7; 100]));
    }
}

/// The limit is inclusive; 0 and limit + 1 end the stream with an error
/// that names both.
#[test]
fn frame_lengths_outside_the_limit_are_refused() {
    let mut f = TcpFrames::new(100);
    f.push(&prefixed(&[5; 100]));
    assert_eq!(f.next_frame().unwrap().map(|b| b.len()), Some(100));
    f.push(&101u32.to_be_bytes());
    let e = f.next_frame().unwrap_err();
    assert_eq!(e, FrameLengthError { len: 101, max: 100 });
    assert_eq!(e.to_string(), "frame of 101 bytes outside 1..=100");
    let mut f = TcpFrames::new(100);
    f.push(&[0, 0, 0, 0]);
    assert_eq!(f.next_frame(), Err(FrameLengthError { len: 0, max: 100 }));
}
