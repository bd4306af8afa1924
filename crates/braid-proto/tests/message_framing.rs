//! Braid's message framing fed arbitrary streams, cut into DATA frames of
//! any size, reordered and duplicated (see `framing/mod.rs`, shared with
//! the fuzz target `braid_messages`): never a panic; well-formed streams
//! deliver exactly their messages; an oversized length aborts the
//! connection, counted.

mod framing;

use proptest::prelude::*;

/// Prefixes a message of `len` bytes as the sender does (QUIC varint).
fn message(len: usize, fill: u8) -> Vec<u8> {
    let mut out = Vec::new();
    braid_proto::wire::write_varint(&mut out, len as u64);
    out.extend(std::iter::repeat_n(fill, len));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes: mostly streams that break the framing soon.
    #[test]
    fn arbitrary_streams_never_panic(data in prop::collection::vec(any::<u8>(), 0..3000)) {
        framing::check(&data);
    }

    /// Well-formed runs of small messages (with perhaps one oversized
    /// length and arbitrary bytes after it), as a sender coalescing them
    /// writes: each must come out whole, in order.
    #[test]
    fn coalesced_messages_come_out_whole(
        size in any::<u8>(),
        order in any::<u8>(),
        lens in prop::collection::vec(0usize..300, 0..40),
        bad in prop::option::of((framing::MAX_MESSAGE + 1..1 << 30, prop::collection::vec(any::<u8>(), 0..100))),
    ) {
        let mut data = vec![size, order];
        for (i, &len) in lens.iter().enumerate() {
            data.extend(message(len, i as u8));
        }
        if let Some((len, tail)) = &bad {
            braid_proto::wire::write_varint(&mut data, *len);
            data.extend(tail);
        }
        framing::check(&data);
    }
}

/// The reference parse itself: a zero-length message, a length split
/// from its body, the limit inclusive, and a varint of every width.
#[test]
fn reference_parse() {
    let max = framing::MAX_MESSAGE;
    let mut s = message(0, 0);
    s.extend(message(3, 7));
    s.extend(message(max as usize, 1));
    let (m, bad) = framing::reference(&s, max);
    assert_eq!((m.len(), bad), (3, false));
    assert_eq!((m[0].len(), m[1].clone(), m[2].len()), (0, vec![7; 3], max as usize));
    for len in [63u64, 64, 16_383, 16_384, 1 << 30, (1 << 62) - 1] {
        let mut s = Vec::new();
        braid_proto::wire::write_varint(&mut s, len);
        assert_eq!(framing::reference(&s, max).1, len > max, "{len}");
    }
    // Incomplete body: nothing yet, no violation.
    assert_eq!(framing::reference(&message(10, 1)[..5], max), (vec![], false));
}

/// A few fixed inputs the fuzz target starts from.
#[test]
fn seeds() {
    framing::check(&[]);
    framing::check(&[0, 0]);
    framing::check(&[3, 3, 0x05, b'w', b'o', b'r', b'l', b'd']);
    framing::check(&[0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
}
