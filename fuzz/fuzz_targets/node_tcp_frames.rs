//! The Node's TCP batch decoder: the input as bytes read from a connection
//! in reads of input-chosen sizes, frames cut by `braid_node::TcpFrames`
//! and decoded by `braid_node::decode_frame`, as the node's TCP reader
//! does: never a panic; the frames do not depend on how the bytes were
//! read; a bad length prefix ends the stream; every frame decodes or is
//! counted malformed. The body is shared with the stable proptests
//! `crates/braid-node/tests/tcp_frames.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/braid-node/tests/frames/mod.rs"]
mod frames;

fuzz_target!(|data: &[u8]| {
    frames::check(data);
});
