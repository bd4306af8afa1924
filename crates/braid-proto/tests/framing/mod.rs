//! Braid's message framing under bad input (issue 23, "a malformed batch
//! is dropped and counted, never a panic"): the body shared by
//! `tests/message_framing.rs` (a proptest, on stable) and the fuzz target
//! `fuzz/fuzz_targets/braid_messages.rs` (which includes this file).
//!
//! Coalesced small messages travel as one byte stream of varint-length-
//! prefixed messages (`recv_stream.rs`), cut into DATA frames wherever the
//! sender's packets end. [`check`] establishes a real connection (bare
//! protocol, so forged packets reach the frames) and sends the server the
//! input as that stream, cut into DATA frames of input-chosen sizes,
//! delivered out of order and duplicated as the input says. Whatever the
//! bytes: no panic; if the stream is well formed (no length above the
//! limit) the server delivers exactly the messages a one-pass reference
//! parse finds, in order, and the connection stays up with nothing
//! counted malformed; a length above the limit aborts the connection as a
//! protocol violation, counted in `malformed_packets`, and what was
//! delivered is a prefix of the reference's messages.

use braid_core::Instant;
use braid_proto::wire::{encode_data_frame, encode_data_header, PacketType, PublicHeader};
use std::net::SocketAddr;

use braid_proto::{CloseReason, ConnectionHandle, Endpoint, EndpointConfig, Event, Security, TransportConfig};
use bytes::Bytes;

/// The server's largest message: small, so that the input reaches it.
pub const MAX_MESSAGE: u64 = 2048;

/// The messages of `stream` parsed in one pass (complete ones only), and
/// whether a length above `max` ended it.
pub fn reference(stream: &[u8], max: u64) -> (Vec<Vec<u8>>, bool) {
    let mut msgs = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let need = 1usize << (stream[pos] >> 6);
        if stream.len() - pos < need {
            break;
        }
        let mut len = u64::from(stream[pos] & 0x3f);
        for &b in &stream[pos + 1..pos + need] {
            len = (len << 8) | u64::from(b);
        }
        if len > max {
            return (msgs, true);
        }
        let start = pos + need;
        if ((stream.len() - start) as u64) < len {
            break;
        }
        msgs.push(stream[start..start + len as usize].to_vec());
        pos = start + len as usize;
    }
    (msgs, false)
}

fn config(accept: bool) -> EndpointConfig {
    let transport = TransportConfig { max_message_size: MAX_MESSAGE, ..TransportConfig::default() };
    EndpointConfig { accept_incoming: accept, security: Security::Insecure, transport, ..Default::default() }
}

/// Opens a connection from `client` (at `a`) to `server` (at `b`) with a
/// first message `hello` (stream offsets 0..6), in one instant: the
/// server's connection ID (as the client's Data packets carry it) and the
/// server's handle of the connection. Shared with the fuzz target
/// `sealed`, which forges packets under that ID.
pub fn establish(client: &mut Endpoint, server: &mut Endpoint, now: Instant, a: SocketAddr, b: SocketAddr) -> (u64, ConnectionHandle) {
    let conn = client.connect(now, b).expect("connect");
    // A real first message: its Data packet names the server's connection
    // ID, and it takes stream offsets 0..6.
    client.send_message(conn, Bytes::from_static(b"hello")).expect("send");
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
    (cid, h)
}

/// Runs the property on `data`: byte 0 picks the DATA frame size (1 to
/// 256 bytes), byte 1 the delivery (bit 0: each pair of frames swapped,
/// bit 1: every third frame sent twice), the rest is the stream after a
/// first message of the client's own. Panics if the property fails.
pub fn check(data: &[u8]) {
    let (Some(&size), Some(&order)) = (data.first(), data.get(1)) else { return };
    let body = &data[2..];
    let (a, b) = ("192.0.2.1:1".parse().unwrap(), "192.0.2.2:1".parse().unwrap());
    let mut client = Endpoint::new(config(false), 1);
    let mut server = Endpoint::new(config(true), 2);
    let now = Instant::from_nanos(1_000_000_000);
    let (cid, h) = establish(&mut client, &mut server, now, a, b);
    let mut buf = Vec::new();
    let mut stream = vec![0x05];
    stream.extend_from_slice(b"hello");
    let first = stream.len() as u64;
    stream.extend_from_slice(body);
    let (want, violation) = reference(&stream, MAX_MESSAGE);

    // The input's stream as DATA frames, one per packet, in the order and
    // with the duplicates the input asks for.
    let size = usize::from(size) + 1;
    let frames: Vec<(u64, &[u8])> =
        body.chunks(size).enumerate().map(|(i, c)| (first + (i * size) as u64, c)).collect();
    let mut order_of: Vec<usize> = (0..frames.len()).collect();
    if order & 1 == 1 {
        for pair in order_of.chunks_mut(2) {
            pair.reverse();
        }
    }
    if order & 2 == 2 {
        let again: Vec<usize> = order_of.iter().copied().step_by(3).collect();
        order_of.extend(again);
    }
    let mut delivered = Vec::new();
    let drain = |server: &mut Endpoint, delivered: &mut Vec<Vec<u8>>| {
        while let Ok(Some(m)) = server.recv_message(h) {
            delivered.push(m.to_vec());
        }
    };
    for (k, &i) in order_of.iter().enumerate() {
        let (offset, chunk) = frames[i];
        let mut d = Vec::new();
        encode_data_header(&mut d, cid, 0, 1_000 + k as u64, 1, 0);
        encode_data_frame(&mut d, offset, chunk, false);
        server.handle_datagram(now, a, Bytes::from(d));
        while server.poll_transmit(now, 1, &mut buf).is_some() {}
        // Reading as the application does, between packets: after the
        // abort the connection is gone and reads stop.
        if server.close_reason(h).is_none() {
            drain(&mut server, &mut delivered);
        }
    }
    let reason = server.close_reason(h);
    let malformed = server.connection_stats(h).map(|s| s.malformed_packets);
    drain(&mut server, &mut delivered);
    if violation {
        assert!(matches!(reason, Some(CloseReason::ProtocolViolation(_))), "{reason:?}");
        assert_eq!(malformed, Some(1), "the violation is counted once");
        assert!(delivered.len() <= want.len() && delivered[..] == want[..delivered.len()], "delivered messages are not a prefix of the stream's");
    } else {
        assert_eq!(reason, None, "a well-formed stream closed the connection");
        assert_eq!(malformed, Some(0));
        assert_eq!(delivered, want, "messages lost, altered or invented");
    }
}
