//! Arbitrary bytes sent to an established, authenticated connection (under
//! its real connection ID, so they reach packet opening) are dropped and
//! counted, never delivered and never a panic.
#![no_main]

use std::sync::Arc;

use braid_core::Instant;
use braid_identity::Identity;
use braid_proto::wire::{PacketType, PublicHeader, VERSION};
use braid_proto::{AcceptAnyKey, Endpoint, EndpointConfig, Event, Security};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fn config(seed: u8, accept: bool) -> EndpointConfig {
    let security = Security::authenticated(Identity::from_seed(&[seed; 32]), Arc::new(AcceptAnyKey));
    EndpointConfig { accept_incoming: accept, security, ..Default::default() }
}

fuzz_target!(|data: &[u8]| {
    let (a, b) = ("192.0.2.1:1".parse().unwrap(), "192.0.2.2:1".parse().unwrap());
    let mut client = Endpoint::new(config(1, false), 1);
    let mut server = Endpoint::new(config(2, true), 2);
    let now = Instant::from_nanos(1_000_000_000);
    let conn = client.connect(now, b).unwrap();
    client.send_message(conn, Bytes::from_static(b"hello")).unwrap();
    let mut buf = Vec::new();
    let mut server_cid = None;
    let mut accepted = None;
    for _ in 0..10 {
        while let Some(t) = client.poll_transmit(now, 1, &mut buf) {
            let d = Bytes::copy_from_slice(&buf[..t.size]);
            if let Ok(h) = PublicHeader::decode(&d) {
                if h.ty == PacketType::Data {
                    server_cid = Some(h.dst_cid);
                }
            }
            server.handle_datagram(now, a, d);
        }
        while let Some(t) = server.poll_transmit(now, 1, &mut buf) {
            client.handle_datagram(now, b, Bytes::copy_from_slice(&buf[..t.size]));
        }
        while let Some(e) = server.poll_event() {
            if let Event::Accepted(h) = e {
                accepted = Some(h);
            }
        }
    }
    let (Some(cid), Some(h)) = (server_cid, accepted) else { panic!("no handshake") };
    while let Ok(Some(_)) = server.recv_message(h) {}
    for chunk in data.split(|&x| x == 0xff) {
        let mut d = vec![VERSION, PacketType::Data as u8];
        d.extend_from_slice(&cid.to_be_bytes());
        d.extend_from_slice(chunk);
        server.handle_datagram(now, a, Bytes::from(d));
        assert_eq!(server.recv_message(h), Ok(None), "forged bytes were delivered");
    }
});
