//! Any byte string decodes to a packet or a typed error, never a panic;
//! a decoded packet's frames iterate without panicking.
#![no_main]

use braid_proto::wire::{Frame, Packet};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = Packet::decode(Bytes::copy_from_slice(data)) {
        for frame in packet.frames() {
            if let Frame::Ack(ack) = frame {
                for (lo, hi) in ack.ranges() {
                    assert!(lo <= hi);
                }
            }
        }
    }
});
