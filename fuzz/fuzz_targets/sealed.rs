//! Arbitrary bytes sent to an established, authenticated connection (under
//! its real connection ID, so they reach packet opening) are dropped and
//! counted, never delivered and never a panic.
#![no_main]

use std::sync::Arc;

use braid_core::Instant;
use braid_identity::Identity;
use braid_proto::wire::{PacketType, VERSION};
use braid_proto::{AcceptAnyKey, Endpoint, EndpointConfig, Security};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

// The connection set-up shared with the framing property (`establish`).
#[allow(dead_code)]
#[path = "../../crates/braid-proto/tests/framing/mod.rs"]
mod framing;

fn config(seed: u8, accept: bool) -> EndpointConfig {
    let security = Security::authenticated(Identity::from_seed(&[seed; 32]), Arc::new(AcceptAnyKey));
    EndpointConfig { accept_incoming: accept, security, ..Default::default() }
}

fuzz_target!(|data: &[u8]| {
    let (a, b) = ("192.0.2.1:1".parse().unwrap(), "192.0.2.2:1".parse().unwrap());
    let mut client = Endpoint::new(config(1, false), 1);
    let mut server = Endpoint::new(config(2, true), 2);
    let now = Instant::from_nanos(1_000_000_000);
    let (cid, h) = framing::establish(&mut client, &mut server, now, a, b);
    while let Ok(Some(_)) = server.recv_message(h) {}
    for chunk in data.split(|&x| x == 0xff) {
        let mut d = vec![VERSION, PacketType::Data as u8];
        d.extend_from_slice(&cid.to_be_bytes());
        d.extend_from_slice(chunk);
        server.handle_datagram(now, a, Bytes::from(d));
        assert_eq!(server.recv_message(h), Ok(None), "forged bytes were delivered");
    }
});
