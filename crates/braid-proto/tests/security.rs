//! Authenticated encryption of the Braid transport, tried as an attacker
//! would: forged and replayed packets, flipped bits, a path hijack by one
//! packet, untrusted keys on either side, endpoints that disagree on
//! authentication, a capture of the wire, and key updates during a long
//! transfer.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use braid_identity::PublicKey;
use braid_proto::wire::{self, Frame, Header, PacketType, PublicHeader};
use braid_proto::{CloseReason, ConnectionHandle, Event, PeerVerifier, Security, TransportConfig};
use bytes::Bytes;
use support::*;

/// Refuses every key, and remembers what it was shown.
#[derive(Debug, Default)]
struct RefuseAll(Mutex<Vec<(SocketAddr, PublicKey)>>);

impl PeerVerifier for RefuseAll {
    fn verify(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.0.lock().unwrap().push((remote, *key));
        Err(format!("key {key} is not in known hosts"))
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Connects A to B and runs until both sides are established.
fn connected(net: &mut Net) -> (ConnectionHandle, ConnectionHandle) {
    let conn = net.a.connect(net.now, addr(B)).unwrap();
    assert!(net.run_until(Duration::from_secs(5), |n| n.a.is_established(conn) && n.accepted().is_some()));
    (conn, net.accepted().unwrap())
}

/// The connection ID packets to the server carry, read off the wire.
fn server_cid(net: &Net) -> u64 {
    net.captured
        .iter()
        .filter(|(to_b, _)| *to_b)
        .filter_map(|(_, d)| PublicHeader::decode(d).ok())
        .find(|h| h.ty == PacketType::Data)
        .map(|h| h.dst_cid)
        .expect("a data packet to the server")
}

/// A plaintext Data packet, as an attacker without the keys can make one.
fn forged(cid: u64, pn: u64, frames: &[Frame]) -> Bytes {
    let header = Header {
        ty: PacketType::Data,
        dst_cid: cid,
        src_cid: 0,
        cookie: Bytes::new(),
        noise: Bytes::new(),
        server_key: Bytes::new(),
        path_id: 0,
        pn,
        timestamp_us: 1,
        echo_timestamp_us: 0,
    };
    let mut out = Vec::new();
    wire::encode_header(&mut out, &header);
    for f in frames {
        wire::encode_frame(&mut out, f);
    }
    out.resize(out.len().max(100), 0);
    Bytes::from(out)
}

/// Sends a small message and waits until B has read it: packets to the
/// server are on the wire (and captured) afterwards.
fn probe(net: &mut Net, conn: ConnectionHandle, server: ConnectionHandle) {
    net.a.send_message(conn, message(999, 10)).unwrap();
    assert!(net.run_until(Duration::from_secs(5), |n| matches!(n.b.recv_message(server), Ok(Some(_)))));
}

/// Asserts two message lists are equal without printing megabytes.
fn same(got: &[Bytes], want: &[Bytes]) {
    assert_eq!(got.len(), want.len(), "message count");
    assert!(got == want, "the messages differ");
}

/// Sends `msgs` on an established connection and collects them at B.
fn deliver(net: &mut Net, conn: ConnectionHandle, server: ConnectionHandle, msgs: &[Bytes]) -> Vec<Bytes> {
    let mut next = 0;
    let mut got = Vec::new();
    net.run_until(Duration::from_secs(60), |net| {
        while next < msgs.len() && net.a.send_message(conn, msgs[next].clone()).is_ok() {
            next += 1;
        }
        while let Ok(Some(m)) = net.b.recv_message(server) {
            got.push(m);
        }
        got.len() == msgs.len()
    });
    got
}

#[test]
fn peers_learn_each_others_keys_and_agree_on_a_suite() {
    let mut net = Net::new(1, TransportConfig::default());
    let (conn, server) = connected(&mut net);
    assert_eq!(net.a.peer_key(conn), Some(identity_b().public_key()));
    assert_eq!(net.b.peer_key(server), Some(identity_a().public_key()));
    assert!(net.a.cipher_suite(conn).is_some());
    assert_eq!(net.a.cipher_suite(conn), net.b.cipher_suite(server));
}

/// A path that duplicates the client's first Initial makes the server send
/// two RETRYs; the second, arriving after the client answered the first,
/// must not restart the client's Noise handshake (the server completes the
/// first one). Found by the simulator's random-link campaign.
#[test]
fn a_duplicated_initial_and_its_second_retry_do_not_stall_the_handshake() {
    for lag_ms in [1, 5, 15, 25] {
        let mut net = Net::new(3, TransportConfig::default());
        net.capture = true;
        let conn = net.a.connect(net.now, addr(B)).unwrap();
        net.flush();
        let (_, first) = net.captured.iter().find(|(to_b, _)| *to_b).cloned().unwrap();
        // The copy arrives `lag_ms` after the original.
        let at = net.now + net.delay + Duration::from_millis(lag_ms);
        net.in_flight.insert((at, u64::MAX), (true, addr(A), first));
        let done = net.run_until(Duration::from_secs(5), |n| n.a.is_established(conn) && n.accepted().is_some());
        assert!(done, "lag {lag_ms} ms: not established, client stats {:?}", net.a.connection_stats(conn));
        let server = net.accepted().unwrap();
        let msgs: Vec<Bytes> = (0..20).map(|i| message(i, 3000)).collect();
        same(&deliver(&mut net, conn, server, &msgs), &msgs);
    }
}

#[test]
fn a_forged_close_does_nothing() {
    let mut net = Net::new(2, TransportConfig::default());
    net.capture = true;
    let (conn, server) = connected(&mut net);
    let msgs: Vec<Bytes> = (0..200).map(|i| message(i, 5000)).collect();
    net.a.send_message(conn, msgs[0].clone()).unwrap();
    net.flush();
    let cid = server_cid(&net);
    for pn in [0, 5, 1 << 20] {
        let close = Frame::Close { code: 0, reason: Bytes::from_static(b"forged") };
        net.b.handle_datagram(net.now, addr(A), forged(cid, pn, &[close]));
    }
    assert_eq!(net.b.connection_stats(server).unwrap().auth_failures, 3);
    let got = deliver(&mut net, conn, server, &msgs[1..]);
    assert_eq!(got.len(), msgs.len() - 1);
    assert!(!net.events_b.iter().any(|e| matches!(e, Event::Closed(..))));
}

#[test]
fn one_packet_from_elsewhere_does_not_move_the_path() {
    let mut net = Net::new(3, TransportConfig::default());
    net.capture = true;
    let (conn, server) = connected(&mut net);
    probe(&mut net, conn, server);
    let cid = server_cid(&net);
    // A very large packet number, from the attacker's address.
    let attacker = addr("203.0.113.66:6666");
    net.b.handle_datagram(net.now, attacker, forged(cid, (1 << 40) + 7, &[Frame::Ping]));
    assert_eq!(net.b.remote_address(server), Some(addr(A)));
    let msgs: Vec<Bytes> = (0..100).map(|i| message(i, 3000)).collect();
    same(&deliver(&mut net, conn, server, &msgs), &msgs);
    assert_eq!(net.b.remote_address(server), Some(addr(A)));
}

#[test]
fn replayed_and_altered_packets_change_nothing() {
    let mut net = Net::new(4, TransportConfig::default());
    net.capture = true;
    let (conn, server) = connected(&mut net);
    net.captured.clear();
    let msgs: Vec<Bytes> = (0..10).map(|i| message(i, 800)).collect();
    same(&deliver(&mut net, conn, server, &msgs), &msgs);
    let to_b: Vec<Bytes> = net.captured.iter().filter(|(to_b, _)| *to_b).map(|(_, d)| d.clone()).collect();
    assert!(!to_b.is_empty());
    // Replays: counted as duplicates, no message delivered twice.
    let dup_before = net.b.connection_stats(server).unwrap().duplicate_packets;
    for d in &to_b {
        net.b.handle_datagram(net.now, addr(A), d.clone());
    }
    let stats = net.b.connection_stats(server).unwrap();
    assert_eq!(stats.duplicate_packets - dup_before, to_b.len() as u64);
    assert_eq!(net.b.recv_message(server), Ok(None));
    // Every single-bit flip of a sealed packet: dropped and counted.
    let sample = &to_b[to_b.len() / 2];
    let fails_before = stats.auth_failures;
    let malformed_before = net.b.stats().malformed_datagrams + net.b.stats().unknown_connection_datagrams;
    for bit in 0..sample.len() * 8 {
        let mut bad = sample.to_vec();
        bad[bit / 8] ^= 1 << (bit % 8);
        net.b.handle_datagram(net.now, addr(A), Bytes::from(bad));
    }
    let dropped = net.b.connection_stats(server).unwrap().auth_failures - fails_before
        + net.b.stats().malformed_datagrams
        + net.b.stats().unknown_connection_datagrams
        - malformed_before;
    assert_eq!(dropped, sample.len() as u64 * 8, "every altered packet is dropped and counted");
    assert_eq!(net.b.recv_message(server), Ok(None));
    // The connection still works.
    let more: Vec<Bytes> = (10..20).map(|i| message(i, 800)).collect();
    same(&deliver(&mut net, conn, server, &more), &more);
}

#[test]
fn a_client_key_the_server_does_not_trust_is_refused_before_any_state() {
    let refuse = Arc::new(RefuseAll::default());
    let a = trusting(identity_a());
    let b = judging(identity_b(), refuse.clone());
    let mut net = Net::with_security(5, TransportConfig::default(), a, b);
    let conn = net.a.connect(net.now, addr(B)).unwrap();
    let closed = net.run_until(Duration::from_secs(5), |n| n.events_a.iter().any(|e| matches!(e, Event::Closed(..))));
    assert!(closed);
    let reason = net.a.close_reason(conn);
    assert!(
        matches!(&reason, Some(CloseReason::Unauthorized(why)) if why.contains("refused this client's key") && why.contains("known hosts")),
        "{reason:?}"
    );
    assert_eq!(net.b.connections().len(), 0);
    assert_eq!(net.b.stats().peers_refused, 1);
    assert_eq!(refuse.0.lock().unwrap().as_slice(), &[(addr(A), identity_a().public_key())]);
    assert!(net.events_b.is_empty(), "{:?}", net.events_b);
}

#[test]
fn a_server_key_the_client_does_not_trust_ends_the_handshake_unanswered() {
    let refuse = Arc::new(RefuseAll::default());
    let a = judging(identity_a(), refuse.clone());
    let b = trusting(identity_b());
    let mut net = Net::with_security(6, TransportConfig::default(), a, b);
    let conn = net.a.connect(net.now, addr(B)).unwrap();
    assert!(net.run_until(Duration::from_secs(5), |n| n.a.close_reason(conn).is_some()));
    assert!(matches!(net.a.close_reason(conn), Some(CloseReason::Unauthorized(why)) if why.contains("known hosts")));
    assert_eq!(refuse.0.lock().unwrap().as_slice(), &[(addr(B), identity_b().public_key())]);
    // The client never sent its identity: the server saw only the first Initial.
    assert_eq!(net.b.connections().len(), 0);
    assert_eq!(net.b.stats().retries_sent, 1);
}

#[test]
fn authenticated_and_insecure_endpoints_refuse_each_other_clearly() {
    for (a, b, expect) in [
        (Security::Insecure, trusting(identity_b()), "requires authentication"),
        (trusting(identity_a()), Security::Insecure, "runs without authentication"),
    ] {
        let mut net = Net::with_security(7, TransportConfig::default(), a, b);
        let conn = net.a.connect(net.now, addr(B)).unwrap();
        assert!(net.run_until(Duration::from_secs(5), |n| n.a.close_reason(conn).is_some()));
        let reason = net.a.close_reason(conn);
        assert!(matches!(&reason, Some(CloseReason::Unauthorized(why)) if why.contains(expect)), "{reason:?}");
        assert_eq!(net.b.connections().len(), 0);
    }
}

#[test]
fn the_wire_carries_no_plaintext_of_the_data() {
    let pattern = b"THE-SECRET-PATTERN-0123456789";
    let payload: Bytes = pattern.iter().copied().cycle().take(20_000).collect::<Vec<u8>>().into();
    for secure in [true, false] {
        let mut net = if secure { Net::new(8, TransportConfig::default()) } else { Net::insecure(8, TransportConfig::default()) };
        net.capture = true;
        let got = transfer(&mut net, std::slice::from_ref(&payload), Duration::from_secs(10));
        same(&got, std::slice::from_ref(&payload));
        let seen = net.captured.iter().any(|(_, d)| d.windows(pattern.len()).any(|w| w == pattern));
        // The insecure run shows the test can see the pattern at all.
        assert_eq!(seen, !secure, "secure={secure}");
    }
}

#[test]
fn keys_update_during_a_long_transfer_without_a_stall() {
    let msgs: Vec<Bytes> = (0..64).map(|i| message(i, 256 << 10)).collect();
    let mut times = Vec::new();
    for interval in [Duration::from_secs(3600), Duration::from_millis(100)] {
        let transport = TransportConfig { key_update_interval: interval, ..TransportConfig::default() };
        let mut net = Net::new(9, transport);
        net.loss = 0.005;
        net.reorder = 0.01;
        let (conn, server) = connected(&mut net);
        let start = net.now;
        same(&deliver(&mut net, conn, server, &msgs), &msgs);
        let elapsed = net.now - start;
        let (a, b) = (net.a.connection_stats(conn).unwrap(), net.b.connection_stats(server).unwrap());
        if interval < Duration::from_secs(1) {
            let updates = (elapsed.as_millis() / interval.as_millis()) as u64;
            assert!(a.key_updates >= updates / 2 && a.key_updates >= 3, "{} updates in {elapsed:?}", a.key_updates);
            assert!(b.key_updates >= 3);
            assert_eq!(a.auth_failures + b.auth_failures, 0, "no packet lost to a key change");
        } else {
            assert_eq!(a.key_updates, 0);
        }
        times.push(elapsed);
    }
    // The same transfer, with and without updates: no stall.
    assert!(times[1].as_secs_f64() <= times[0].as_secs_f64() * 1.05, "{times:?}");
}

#[test]
fn a_flood_of_spoofed_handshakes_and_packets_keeps_no_state() {
    let mut net = Net::new(10, TransportConfig::default());
    net.capture = true;
    let (conn, server) = connected(&mut net);
    probe(&mut net, conn, server);
    let cid = server_cid(&net);
    net.capture = false;
    // 50,000 Initials from spoofed addresses (one client endpoint makes
    // them) and 50,000 forged packets for the live connection.
    let mut spoofer = braid_proto::Endpoint::new(
        braid_proto::EndpointConfig { accept_incoming: false, security: trusting(identity_a()), ..Default::default() },
        99,
    );
    let mut buf = Vec::new();
    for i in 0..50_000u32 {
        let from: SocketAddr = format!("198.51.{}.{}:{}", 100 + (i % 2), i % 250, 1024 + i % 60_000).parse().unwrap();
        let _ = spoofer.connect(net.now, from);
        if let Some(t) = spoofer.poll_transmit(net.now, 1, &mut buf) {
            net.b.handle_datagram(net.now, from, Bytes::copy_from_slice(&buf[..t.size]));
        }
        net.b.handle_datagram(net.now, addr(A), forged(cid, u64::from(i) * 7, &[Frame::Ping]));
        if i % 1000 == 0 {
            // Drain the stateless answers as a socket would.
            while net.b.poll_transmit(net.now, 1, &mut buf).is_some() {}
        }
    }
    assert_eq!(net.b.connections(), vec![server]);
    assert_eq!(net.b.connection_stats(server).unwrap().auth_failures, 50_000);
    let msgs: Vec<Bytes> = (0..50).map(|i| message(i, 4000)).collect();
    same(&deliver(&mut net, conn, server, &msgs), &msgs);
}

/// A flood of cookie-less Initials arriving faster than the socket sends:
/// the RETRY queue stops at its bound (the rest dropped and counted), and
/// the connection's own packets are not stuck behind the queue: they take
/// every other transmission, so the transfer goes on while it drains.
#[test]
fn answers_to_a_flood_are_bounded_and_do_not_starve_connections() {
    let mut net = Net::new(13, TransportConfig::default());
    let (conn, server) = connected(&mut net);
    probe(&mut net, conn, server);
    let before = net.b.stats();
    let flood = braid_proto::MAX_STATELESS_QUEUED as u64 + 2_000;
    for i in 0..flood {
        let header = Header {
            ty: PacketType::Initial,
            dst_cid: 0,
            src_cid: i + 1,
            cookie: Bytes::new(),
            noise: Bytes::new(),
            server_key: Bytes::new(),
            path_id: 0,
            pn: 0,
            timestamp_us: 1,
            echo_timestamp_us: 0,
        };
        let mut d = Vec::new();
        wire::encode_header(&mut d, &header);
        wire::encode_frame(&mut d, &Frame::Ping);
        d.resize(1200, 0);
        let from: SocketAddr = format!("203.0.113.{}:{}", 1 + i % 200, 1024 + i % 50_000).parse().unwrap();
        net.b.handle_datagram(net.now, from, Bytes::from(d));
    }
    let s = net.b.stats();
    assert_eq!(s.retries_sent - before.retries_sent, braid_proto::MAX_STATELESS_QUEUED as u64, "{s:?}");
    assert_eq!(s.stateless_dropped - before.stateless_dropped, 2_000, "{s:?}");
    // The server has data for the client: it leaves within two
    // transmissions, not after a thousand RETRYs.
    net.b.send_message(server, message(7, 100)).unwrap();
    let mut buf = Vec::new();
    let firsts: Vec<SocketAddr> = (0..2).filter_map(|_| net.b.poll_transmit(net.now, 1, &mut buf).map(|t| t.destination)).collect();
    assert!(firsts.contains(&addr(A)), "{firsts:?}");
    // With the queue still full, a transfer completes.
    let msgs: Vec<Bytes> = (0..20).map(|i| message(i, 4000)).collect();
    same(&deliver(&mut net, conn, server, &msgs), &msgs);
}

#[test]
fn a_client_that_moves_is_followed_once_its_new_address_answers() {
    let mut net = Net::new(11, TransportConfig::default());
    let (conn, server) = connected(&mut net);
    let msgs: Vec<Bytes> = (0..60).map(|i| message(i, 20_000)).collect();
    let moved = addr("10.0.0.9:4444");
    let mut sent = 0;
    let mut got = Vec::new();
    let done = net.run_until(Duration::from_secs(60), |net| {
        while sent < msgs.len() && net.a.send_message(conn, msgs[sent].clone()).is_ok() {
            sent += 1;
        }
        while let Ok(Some(m)) = net.b.recv_message(server) {
            got.push(m);
        }
        if got.len() == 20 && net.a_addr != moved {
            net.a_addr = moved; // a NAT rebinding: the client's packets now come from here
        }
        got.len() == msgs.len()
    });
    assert!(done, "{} of {} messages", got.len(), msgs.len());
    same(&got, &msgs);
    assert_eq!(net.b.remote_address(server), Some(moved));
}

#[test]
fn a_raced_copy_from_elsewhere_gets_only_a_small_challenge_and_moves_nothing() {
    let mut net = Net::new(12, TransportConfig::default());
    let (conn, server) = connected(&mut net);
    let msgs: Vec<Bytes> = (0..40).map(|i| message(i, 10_000)).collect();
    let attacker = addr("203.0.113.7:7777");
    let mut sent = 0;
    let mut got = Vec::new();
    let mut raced = 0;
    let mut raced_bytes = 0;
    let done = net.run_until(Duration::from_secs(60), |net| {
        while sent < msgs.len() && net.a.send_message(conn, msgs[sent].clone()).is_ok() {
            sent += 1;
        }
        while let Ok(Some(m)) = net.b.recv_message(server) {
            got.push(m);
        }
        // An on-path attacker copies the newest packet still in flight to
        // the server and delivers the copy first, from its own address.
        if raced < 5 && got.len() > 5 * raced {
            let newest = net.in_flight.values().filter(|(to_b, _, _)| *to_b).last().map(|(_, _, d)| d.clone());
            if let Some(copy) = newest {
                raced_bytes = raced_bytes.max(copy.len());
                net.b.handle_datagram(net.now, attacker, copy);
                raced += 1;
            }
        }
        got.len() == msgs.len()
    });
    assert!(done, "{} of {} messages", got.len(), msgs.len());
    same(&got, &msgs);
    assert!(raced > 0);
    assert_eq!(net.b.remote_address(server), Some(addr(A)), "the path stayed");
    let to_attacker: Vec<&Bytes> = net.misdirected.iter().filter(|(to, _)| *to == attacker).map(|(_, d)| d).collect();
    assert!(!to_attacker.is_empty(), "the new address was challenged");
    // Anti-amplification: each challenge is smaller than what came from there.
    assert!(to_attacker.iter().all(|d| d.len() <= raced_bytes), "{:?} vs {raced_bytes}", to_attacker.iter().map(|d| d.len()).collect::<Vec<_>>());
    assert!(to_attacker.len() <= 4 * raced, "challenges are bounded");
}
