//! Braid's message framing (coalesced small messages, varint-length-
//! prefixed in the connection's stream) fed the input as that stream, cut
//! into DATA frames of input-chosen sizes, reordered and duplicated, on a
//! real connection: never a panic; a well-formed stream delivers exactly
//! its messages; an oversized length aborts the connection, counted in
//! `malformed_packets`. The body is shared with the stable proptest
//! `crates/braid-proto/tests/message_framing.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/braid-proto/tests/framing/mod.rs"]
mod framing;

fuzz_target!(|data: &[u8]| {
    framing::check(data);
});
