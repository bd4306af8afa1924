//! Authenticated Exon against an attacker on the network: forged NACKs,
//! replays, spoofed handshakes and slot requests, flipped bits, plus
//! roaming, re-keying, refusal of unknown keys, discovery and the slot
//! reservation budget.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use braid_core::{Instant, Rng, RngCore, SeedableRng};
use braid_exon::secure::{MAC_LEN, T_DATA, T_INIT};
use braid_exon::wire::{self, Frame};
use braid_exon::{
    AcceptAnyKey, Event, ExonNode, Identity, Machine, MachineConfig, NodeConfig, NodeId, Security,
    SessionConfig,
};
use bytes::Bytes;
use proptest::prelude::*;
use support::pair::{addr, drain, Pair};
use support::{identity, trusting};

const NOW: Instant = Instant::ZERO;

fn pair_with(cfg: NodeConfig) -> Pair {
    Pair::new(cfg.clone(), cfg, NOW)
}

fn pair() -> Pair {
    pair_with(NodeConfig::default())
}

/// What these tests do with a pair beyond a round.
trait PairExt {
    fn flush(&mut self);
    fn settle(&mut self) -> Vec<Bytes>;
}

impl PairExt for Pair {
    /// Rounds until `a` has nothing unacknowledged to `b` (its sender
    /// record may still hold envelopes).
    fn flush(&mut self) {
        for _ in 0..5_000 {
            self.round();
            if !self.a.machine().sender_busy(self.b_id) {
                return;
            }
        }
        panic!("no quiescence: {:?} / {:?}", self.a.stats(), self.b.stats());
    }

    /// Rounds until `a` has nothing outstanding to `b` and has closed its
    /// record; every datagram seen on the wire is returned.
    fn settle(&mut self) -> Vec<Bytes> {
        let mut wire = Vec::new();
        for _ in 0..5_000 {
            let (ab, ba) = self.round();
            wire.extend(ab);
            wire.extend(ba);
            if !self.a.machine().sender_busy(self.b_id) && self.a.machine().is_idle() {
                return wire;
            }
        }
        panic!("no quiescence: {:?} / {:?}", self.a.stats(), self.b.stats());
    }
}

fn received(n: &mut ExonNode) -> Vec<(NodeId, Bytes)> {
    let mut out = Vec::new();
    while let Some(e) = n.poll_event() {
        if let Event::Received { from, data } = e {
            out.push((from, data));
        }
    }
    out
}

fn delivered(n: &mut ExonNode) -> usize {
    let mut k = 0;
    while let Some(e) = n.poll_event() {
        k += usize::from(matches!(e, Event::Delivered { .. }));
    }
    k
}

#[test]
fn messages_flow_sealed_and_no_plaintext_is_on_the_wire() {
    let mut p = pair();
    let secret = b"a known pattern, never in clear text";
    for _ in 0..20 {
        p.a.send(p.now, p.b_id, Bytes::from_static(secret)).unwrap();
    }
    let wire = p.settle();
    let got = received(&mut p.b);
    assert_eq!(got.len(), 20);
    assert!(got
        .iter()
        .all(|(from, d)| *from == p.a_id && &d[..] == secret));
    assert_eq!(delivered(&mut p.a), 20);
    assert!(!wire.is_empty());
    for d in &wire {
        assert!(
            d.windows(12).all(|w| !secret.windows(12).any(|s| s == w)),
            "plaintext on the wire"
        );
        assert!(
            (0xE2..=0xE4).contains(&d[0]),
            "only handshake and sealed datagrams"
        );
    }
    assert_eq!(p.a.stats().security.handshakes, 1);
    assert_eq!(p.b.stats().security.handshakes, 1);
    assert_eq!(p.b.peer_key(p.a_id), Some(identity(1).public_key()));
}

/// The attack of issue 17: after the receiver consumed a token and its ACK
/// was lost, a forged NACK made the sender put the message in a new slot
/// and the receiver delivered it twice. Against the bare protocol it still
/// works (the test can tell); sealed, every forgery is dropped, and the
/// message is delivered exactly once.
#[test]
fn a_forged_nack_does_nothing_and_the_message_arrives_once() {
    // The bare protocol first: the forged NACK is acted upon.
    {
        let (ia, ib) = (NodeId(1), NodeId(2));
        let mut a = ExonNode::new(
            NodeConfig::default(),
            Security::InsecureNoAuth { id: ia },
            [1; 32],
            0,
        );
        let mut b = ExonNode::new(
            NodeConfig::default(),
            Security::InsecureNoAuth { id: ib },
            [2; 32],
            0,
        );
        let (sa, sb) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        a.add_insecure_peer(ib, sb);
        a.send(NOW, ib, Bytes::from_static(b"once")).unwrap();
        let (r, s) = consume_and_lose_ack(&mut a, &mut b, sa, sb);
        let mut forged = Vec::new();
        wire::encode_header(&mut forged, ib, ia);
        Frame::Nack { r, slots: vec![s] }.encode(&mut forged);
        a.handle_datagram(NOW, addr("192.0.2.66:6666"), Bytes::from(forged));
        assert_eq!(
            a.machine().stats().resent_after_nack,
            1,
            "the bare protocol believes it"
        );
    }
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"once"))
        .unwrap();
    // Handshake, slots, the token; b's answer (the ACK) is lost.
    let mut b_index = None;
    for _ in 0..20 {
        let ab = drain(&mut p.a, p.now);
        for (_, d) in &ab {
            p.b.handle_datagram(p.now, p.sa, d.clone());
        }
        let ba = drain(&mut p.b, p.now);
        let consumed = p.b.machine().stats().delivered > 0;
        for (_, d) in &ba {
            if d[0] == T_DATA {
                b_index = Some([d[1], d[2], d[3], d[4]]);
            }
            if !consumed {
                p.a.handle_datagram(p.now, p.sb, d.clone());
            }
        }
        if consumed {
            break;
        }
    }
    assert_eq!(received(&mut p.b).len(), 1);
    let b_index = b_index.expect("b sent sealed datagrams");
    let before = p.a.stats().security;
    let attacker = addr("192.0.2.66:6666");
    let mut rng = Rng::seed_from_u64(7);
    // Every incarnation and slot the token may have.
    for k in 0..64u64 {
        let (r, s) = (k / 16, k % 16);
        // (1) The bare form, claiming to be b.
        let mut forged = Vec::new();
        wire::encode_header(&mut forged, p.b_id, p.a_id);
        Frame::Nack { r, slots: vec![s] }.encode(&mut forged);
        p.a.handle_datagram(p.now, attacker, Bytes::from(forged));
        // (2) A sealed-looking datagram in b's session, with a NACK inside
        // and a tag the attacker cannot compute.
        let mut forged = vec![T_DATA];
        forged.extend_from_slice(&b_index);
        forged.extend_from_slice(&(1_000 + k).to_be_bytes());
        Frame::Nack { r, slots: vec![s] }.encode(&mut forged);
        let mut tag = [0u8; 16];
        rng.fill_bytes(&mut tag);
        forged.extend_from_slice(&tag);
        p.a.handle_datagram(p.now, p.sb, Bytes::from(forged));
    }
    let after = p.a.stats().security;
    assert_eq!(after.auth_failed - before.auth_failed, 64);
    assert_eq!(after.unauthenticated - before.unauthenticated, 64);
    assert_eq!(p.a.machine().stats().resent_after_nack, 0);
    assert_eq!(
        p.a.peer_addr(p.b_id),
        Some(p.sb),
        "no forgery moved the peer"
    );
    p.settle();
    assert!(received(&mut p.b).is_empty(), "delivered exactly once");
    assert_eq!(delivered(&mut p.a), 1);
}

/// Runs `a` → `b` (insecure) until `b` consumed the token, dropping every
/// answer of `b`'s from then on; returns the token's `(rck, slot)`.
fn consume_and_lose_ack(
    a: &mut ExonNode,
    b: &mut ExonNode,
    sa: SocketAddr,
    sb: SocketAddr,
) -> (u64, u64) {
    for _ in 0..20 {
        for (_, d) in drain(a, NOW) {
            if let Ok(dg) = wire::Datagram::decode(d.clone()) {
                for f in &dg.frames {
                    if let Frame::Token { s, r, .. } = f {
                        b.handle_datagram(NOW, sa, d.clone());
                        assert_eq!(b.machine().stats().delivered, 1);
                        return (*r, *s);
                    }
                }
            }
            b.handle_datagram(NOW, sa, d);
        }
        for (_, d) in drain(b, NOW) {
            a.handle_datagram(NOW, sb, d);
        }
    }
    panic!("no token sent");
}

#[test]
fn a_replayed_datagram_is_rejected_and_counted() {
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"warm up"))
        .unwrap();
    p.flush();
    received(&mut p.b);
    p.a.send(p.now, p.b_id, Bytes::from_static(b"only once"))
        .unwrap();
    let ab = drain(&mut p.a, p.now);
    let sealed: Vec<Bytes> = ab
        .iter()
        .map(|(_, d)| d.clone())
        .filter(|d| d[0] == T_DATA)
        .collect();
    assert!(!sealed.is_empty());
    for d in &sealed {
        p.b.handle_datagram(p.now, p.sa, d.clone());
    }
    assert_eq!(received(&mut p.b).len(), 1);
    let before = p.b.stats().security.replayed;
    for d in &sealed {
        p.b.handle_datagram(p.now, p.sa, d.clone());
        p.b.handle_datagram(p.now, addr("192.0.2.1:9"), d.clone());
    }
    assert_eq!(
        p.b.stats().security.replayed - before,
        2 * sealed.len() as u64
    );
    assert!(received(&mut p.b).is_empty());
    assert_eq!(
        p.b.peer_addr(p.a_id),
        Some(p.sa),
        "a replay from elsewhere moves nothing"
    );
}

#[test]
fn a_replayed_initiation_gets_the_same_answer_and_no_new_session() {
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"x")).unwrap();
    let init = drain(&mut p.a, p.now)
        .into_iter()
        .find(|(_, d)| d[0] == T_INIT)
        .expect("an initiation")
        .1;
    p.b.handle_datagram(p.now, p.sa, init.clone());
    let first = drain(&mut p.b, p.now);
    let sessions = p.b.stats().security.sessions;
    p.b.handle_datagram(p.now, addr("192.0.2.1:9"), init);
    let again = drain(&mut p.b, p.now);
    assert_eq!(first.len(), 1);
    assert_eq!(again.len(), 1);
    assert_eq!(first[0].1, again[0].1, "the cached answer");
    assert_eq!(p.b.stats().security.sessions, sessions);
}

/// ≥ 100,000 spoofed packets: the bare form's slot requests under many node
/// IDs (the 24-byte request that reserved hundreds of KiB), sealed-looking
/// datagrams under random and real session indices, initiations with a
/// valid mac1 (the attacker knows b's public key) but no valid Noise
/// message, key requests, and complete handshakes from 500 identities the
/// verifier refuses. b's per-peer state stays under a stated bound and a
/// legitimate exchange completes, exactly once.
#[test]
fn a_flood_of_spoofed_packets_leaves_memory_bounded_and_traffic_flowing() {
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"before"))
        .unwrap();
    p.settle();
    assert_eq!(received(&mut p.b).len(), 1);
    let b_key = identity(2).public_key();
    let mut rng = Rng::seed_from_u64(1);
    let mut spoofed = 0u64;
    let src = |rng: &mut Rng| {
        SocketAddr::from((
            [198, 18, (rng.next_u32() >> 24) as u8, rng.next_u32() as u8],
            rng.next_u32() as u16,
        ))
    };
    // A valid initiation from a refused identity, to learn the layout.
    let mallory = Identity::from_seed(&[66; 32]);
    let mut m = ExonNode::new(
        NodeConfig::default(),
        Security::authenticated(mallory, Arc::new(AcceptAnyKey)),
        [9; 32],
        0,
    );
    let m_peer = m.add_peer(&b_key, p.sb);
    m.send(NOW, m_peer, Bytes::from_static(b"x")).unwrap();
    let template = drain(&mut m, NOW)
        .into_iter()
        .find(|(_, d)| d[0] == T_INIT)
        .unwrap()
        .1;
    let mut b_sessions_max = 0;
    let mut b_state_max = 0;
    let mut b_reserved_max = 0;
    for k in 0..100_000u64 {
        let from = src(&mut rng);
        let packet: Vec<u8> = match k % 5 {
            0 => {
                // The bare slot request, from a random node ID.
                let mut d = Vec::new();
                wire::encode_header(&mut d, NodeId(rng.next_u64()), p.b_id);
                Frame::ReqSlots {
                    s: 0,
                    n: 16_384,
                    l: 0,
                }
                .encode(&mut d);
                d
            }
            1 => {
                let mut d = vec![0u8; 13 + 40 + 16];
                rng.fill_bytes(&mut d);
                d[0] = T_DATA;
                d
            }
            2 => {
                // Valid mac1 over a corrupted Noise message.
                let mut d = template.to_vec();
                let at = 5 + (rng.next_u32() as usize % 100);
                d[at] ^= 1 + (rng.next_u32() as u8 % 255);
                // The packet ends in mac1, then mac2 (zero: no cookie).
                let body = d.len() - 2 * MAC_LEN;
                let mac = blake3::keyed_hash(
                    &blake3::derive_key("braid-exon v1 mac1", &b_key.to_bytes()),
                    &d[..body],
                );
                d[body..body + MAC_LEN].copy_from_slice(&mac.as_bytes()[..MAC_LEN]);
                d
            }
            3 => {
                let mut d = vec![0u8; 64];
                d[0] = 0xE5; // key request
                d
            }
            _ => {
                let mut d = vec![0u8; (rng.next_u32() % 200) as usize + 1];
                rng.fill_bytes(&mut d);
                d
            }
        };
        p.b.handle_datagram(p.now, from, Bytes::from(packet));
        spoofed += 1;
        if k % 1_000 == 0 {
            // b answers (key replies to spoofed addresses): into the void.
            drain(&mut p.b, p.now);
            b_sessions_max = b_sessions_max.max(p.b.stats().security.sessions);
            b_state_max = b_state_max.max(p.b.session_state_bytes());
            b_reserved_max = b_reserved_max.max(p.b.machine().reserved_bytes());
        }
    }
    // Complete, valid handshakes from identities b does not trust.
    for i in 0..500u32 {
        let id = Identity::from_seed(&{
            let mut s = [7u8; 32];
            s[..4].copy_from_slice(&i.to_be_bytes());
            s
        });
        let mut seed = [0x5e; 32];
        seed[..4].copy_from_slice(&i.to_be_bytes());
        let mut m = ExonNode::new(
            NodeConfig::default(),
            Security::authenticated(id, Arc::new(AcceptAnyKey)),
            seed,
            0,
        );
        let peer = m.add_peer(&b_key, p.sb);
        m.send(NOW, peer, Bytes::from_static(b"x")).unwrap();
        // Each from its own address: one address gets only the per-source
        // burst under load (WireGuard's ratelimiter).
        let from = SocketAddr::from(([198, 51, 100 + (i / 250) as u8, (i % 250) as u8 + 1], 1));
        for (_, d) in drain(&mut m, NOW) {
            p.b.handle_datagram(p.now, from, d);
            spoofed += 1;
        }
        // b is under load after the flood: it asks for a cookie first,
        // and these senders are real, so they prove their address.
        for (dst, d) in drain(&mut p.b, p.now) {
            if dst == from {
                m.handle_datagram(NOW, p.sb, d);
            }
        }
        for (_, d) in drain(&mut m, NOW) {
            p.b.handle_datagram(p.now, from, d);
        }
    }
    drain(&mut p.b, p.now);
    let s = p.b.stats();
    assert!(spoofed >= 100_000);
    assert_eq!(s.security.refused, 500, "{s:?}");
    // The valid-mac1 initiations beyond the handshake budget got cookie
    // replies, not Diffie-Hellmans.
    assert!(s.security.cookies_sent >= 10_000, "{s:?}");
    // The stated bound: b holds state for its one real peer only: at most
    // its four sessions and the peer entry (≤ 8 KiB by the estimate), one
    // path, and no receiver record or reserved slot for any spoofer.
    assert!(b_sessions_max <= 4 && s.security.sessions <= 4, "{s:?}");
    assert_eq!(s.security.peers, 1);
    // Beside it, the per-source limiter's entries for the 500 sources
    // that proved their address (≤ 40 bytes each in a table of at most
    // 1,024 slots for 500 keys): bounded by `max_rate_sources` however
    // many come.
    let limiter = 1024 * 40;
    assert!(b_state_max <= 8 << 10, "{b_state_max}");
    assert!(p.b.session_state_bytes() <= (8 << 10) + limiter, "{}", p.b.session_state_bytes());
    assert_eq!(p.b.peer_count(), 1);
    // At most the real peer's receiver record: none for any spoofer.
    let one_peer =
        braid_exon::RECORD_BYTES + 4 * MachineConfig::default().max_window * braid_exon::SLOT_BYTES;
    assert!(b_reserved_max <= one_peer);
    assert!(p.b.machine().records().1 <= 1);
    // The legitimate exchange still completes, exactly once.
    for k in 0..100u8 {
        p.a.send(p.now, p.b_id, Bytes::from(vec![k; 100])).unwrap();
    }
    p.settle();
    let got = received(&mut p.b);
    assert_eq!(got.len(), 100);
    let mut firsts: Vec<u8> = got.iter().map(|(_, d)| d[0]).collect();
    firsts.sort_unstable();
    assert_eq!(firsts, (0..100).collect::<Vec<u8>>());
}

/// With a verifier that accepts any key, spoofers who mint keys get
/// sessions, but never more than `max_peers` peers.
#[test]
fn minted_keys_are_bounded_by_max_peers() {
    let cfg = NodeConfig {
        session: SessionConfig {
            max_peers: 50,
            ..SessionConfig::default()
        },
        ..NodeConfig::default()
    };
    let kb = identity(2);
    let b_key = kb.public_key();
    let mut b = ExonNode::new(
        cfg,
        Security::authenticated(kb, Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    for i in 0..300u32 {
        let mut s = [9u8; 32];
        s[..4].copy_from_slice(&i.to_be_bytes());
        let mut m = ExonNode::new(
            NodeConfig::default(),
            Security::authenticated(Identity::from_seed(&s), Arc::new(AcceptAnyKey)),
            s,
            0,
        );
        let peer = m.add_peer(&b_key, addr("10.0.0.2:1"));
        m.send(NOW, peer, Bytes::from_static(b"x")).unwrap();
        for (_, d) in drain(&mut m, NOW) {
            b.handle_datagram(NOW, addr("10.9.9.9:9"), d);
        }
    }
    let s = b.stats().security;
    assert_eq!(s.peers, 50);
    assert_eq!(s.refused, 250);
    assert!(s.sessions <= 100);
}

#[test]
fn an_unknown_key_is_refused_before_any_state() {
    let mut p = pair();
    let stranger = identity(3);
    let mut c = ExonNode::new(
        NodeConfig::default(),
        Security::authenticated(stranger, Arc::new(AcceptAnyKey)),
        [3; 32],
        0,
    );
    let b_key = identity(2).public_key();
    let peer = c.add_peer(&b_key, p.sb);
    c.send(NOW, peer, Bytes::from_static(b"let me in")).unwrap();
    for _ in 0..3 {
        for (_, d) in drain(&mut c, p.now) {
            p.b.handle_datagram(p.now, addr("10.0.0.3:1"), d);
        }
        assert!(drain(&mut p.b, p.now).is_empty(), "no answer");
        p.now += Duration::from_secs(1);
        c.handle_timeout(p.now);
    }
    let s = p.b.stats().security;
    assert!(s.refused >= 1);
    assert_eq!((s.peers, s.sessions), (0, 0));
    assert_eq!(p.b.peer_count(), 0);
    assert!(received(&mut p.b).is_empty());
}

proptest! {
    /// A sealed datagram of many envelopes with any one bit flipped, or
    /// truncated anywhere: dropped and counted, nothing delivered, never a
    /// panic; the intact datagram still goes through afterwards.
    #[test]
    fn a_flipped_bit_anywhere_is_dropped_and_counted(
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
        truncate in any::<bool>(),
    ) {
        let mut p = pair();
        p.a.send(p.now, p.b_id, Bytes::from_static(b"warm up")).unwrap();
        p.flush();
        received(&mut p.b);
        for k in 0..10u8 {
            p.a.send(p.now, p.b_id, Bytes::from(vec![k; 40])).unwrap();
        }
        let d = drain(&mut p.a, p.now).into_iter().map(|(_, d)| d).find(|d| d[0] == T_DATA).unwrap();
        let mut bad = d.to_vec();
        let i = at.index(bad.len());
        if truncate {
            bad.truncate(i);
        } else {
            bad[i] ^= 1 << bit;
        }
        let before = *p.b.stats();
        p.b.handle_datagram(p.now, p.sa, Bytes::from(bad));
        let after = *p.b.stats();
        let dropped = (after.security.auth_failed - before.security.auth_failed)
            + (after.security.unauthenticated - before.security.unauthenticated)
            + (after.security.replayed - before.security.replayed)
            + (after.malformed - before.malformed);
        prop_assert_eq!(dropped, 1);
        prop_assert!(received(&mut p.b).is_empty());
        p.b.handle_datagram(p.now, p.sa, d);
        prop_assert!(!received(&mut p.b).is_empty());
    }
}

#[test]
fn a_peer_that_moves_is_followed_after_an_authenticated_datagram() {
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"one")).unwrap();
    p.settle();
    assert_eq!(p.b.peer_addr(p.a_id), Some(p.sa));
    p.sa = addr("10.0.7.7:7"); // a's new address
    p.a.send(p.now, p.b_id, Bytes::from_static(b"two")).unwrap();
    p.settle();
    assert_eq!(p.b.peer_addr(p.a_id), Some(p.sa));
    assert_eq!(p.b.stats().address_changes, 1);
    assert_eq!(received(&mut p.b).len(), 2);
}

/// Sessions re-key every 30 ms of a transfer of 3,000 messages over 3 s:
/// no stall, nothing lost or duplicated, old sessions retired.
#[test]
fn sessions_rekey_during_a_long_transfer_without_a_stall() {
    let cfg = NodeConfig {
        session: SessionConfig {
            rekey_after: Duration::from_millis(30),
            reject_after: Duration::from_millis(200),
            ..SessionConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut p = pair_with(cfg);
    let mut got = Vec::new();
    let mut longest_gap = Duration::ZERO;
    let mut last = p.now;
    for k in 0..3_000u32 {
        p.a.send(p.now, p.b_id, Bytes::copy_from_slice(&k.to_be_bytes()))
            .unwrap();
        p.round();
        let batch = received(&mut p.b);
        if !batch.is_empty() {
            longest_gap = longest_gap.max(p.now - last);
            last = p.now;
        }
        got.extend(
            batch
                .into_iter()
                .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap())),
        );
    }
    p.settle();
    got.extend(
        received(&mut p.b)
            .into_iter()
            .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap())),
    );
    got.sort_unstable();
    assert_eq!(got, (0..3_000).collect::<Vec<_>>());
    let hs = p.a.stats().security.handshakes;
    assert!(hs >= 50, "{hs} handshakes");
    assert!(
        longest_gap <= Duration::from_millis(5),
        "stalled for {longest_gap:?}"
    );
    assert!(p.b.stats().security.sessions <= 4);
}

#[test]
fn discovery_learns_the_key_at_an_address_through_the_verifier() {
    let kb = identity(2);
    let b_key = kb.public_key();
    let ka = identity(1);
    let a_key = ka.public_key();
    let (sa, sb) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
    let mut a = ExonNode::new(NodeConfig::default(), trusting(ka, b_key), [1; 32], 0);
    let mut b = ExonNode::new(NodeConfig::default(), trusting(kb, a_key), [2; 32], 0);
    a.discover(NOW, sb);
    for (_, d) in drain(&mut a, NOW) {
        b.handle_datagram(NOW, sa, d);
    }
    for (_, d) in drain(&mut b, NOW) {
        a.handle_datagram(NOW, sb, d);
    }
    let (at, found) = a.poll_discovered().expect("an answer");
    assert_eq!((at, found), (sb, Ok(NodeId::of(&b_key))));
    // A key the verifier refuses is not added.
    let mut c = ExonNode::new(
        NodeConfig::default(),
        trusting(identity(3), identity(9).public_key()),
        [3; 32],
        0,
    );
    c.discover(NOW, sb);
    for (_, d) in drain(&mut c, NOW) {
        b.handle_datagram(NOW, addr("10.0.0.3:1"), d);
    }
    for (_, d) in drain(&mut b, NOW) {
        c.handle_datagram(NOW, sb, d);
    }
    assert!(matches!(c.poll_discovered(), Some((_, Err(_)))));
    // Nobody there: a timeout.
    let mut t = NOW;
    a.discover(t, addr("10.0.0.99:1"));
    let mut outcome = None;
    for _ in 0..1_000 {
        drain(&mut a, t);
        t += Duration::from_millis(100);
        a.handle_timeout(t);
        if let Some(o) = a.poll_discovered() {
            outcome = Some(o);
            break;
        }
    }
    assert!(matches!(outcome, Some((_, Err(_)))));
}

proptest! {
    /// Whatever slot requests arrive from however many senders, the
    /// receiver's reservation never exceeds its budget; requests beyond it
    /// are counted as deferred.
    #[test]
    fn slot_reservations_stay_within_the_budget(
        reqs in proptest::collection::vec((0u64..400, 0u64..5_000, 1u64..20_000), 1..300),
    ) {
        let budget = 64 << 10;
        let cfg = MachineConfig { max_reserved_bytes: budget, ..MachineConfig::default() };
        let mut m = Machine::new(NodeId(0), cfg, 0);
        for (peer, s, n) in reqs {
            m.handle_frame(NOW, NodeId(1 + peer), Frame::ReqSlots { s, n, l: 0 });
            prop_assert!(m.reserved_bytes() <= budget, "{} > {}", m.reserved_bytes(), budget);
        }
    }
}

#[test]
fn an_honest_sender_is_served_once_a_spoofer_budget_frees() {
    // b's budget fits one sender's window; a second sender waits (its
    // request deferred, its messages queued) and is served later.
    let window = 64;
    let mc = MachineConfig {
        max_window: window,
        max_reserved_bytes: braid_exon::RECORD_BYTES + 4 * window * braid_exon::SLOT_BYTES,
        ..MachineConfig::default()
    };
    let mut b = Machine::new(NodeId(2), mc, 0);
    b.clock_persisted(1 << 30);
    b.handle_frame(
        NOW,
        NodeId(7),
        Frame::ReqSlots {
            s: 0,
            n: 4 * window,
            l: 0,
        },
    );
    b.handle_frame(NOW, NodeId(7), Frame::ReqSlots { s: 64, n: 64, l: 0 });
    b.handle_frame(
        NOW,
        NodeId(7),
        Frame::ReqSlots {
            s: 128,
            n: 64,
            l: 0,
        },
    );
    b.handle_frame(
        NOW,
        NodeId(7),
        Frame::ReqSlots {
            s: 192,
            n: 64,
            l: 0,
        },
    );
    let deferred = b.stats().deferred;
    b.handle_frame(NOW, NodeId(1), Frame::ReqSlots { s: 0, n: 8, l: 0 });
    assert_eq!(b.stats().deferred, deferred + 1);
    assert_eq!(b.records().1, 1);
    // The first sender closes (its frontier passes its slots): room again.
    b.handle_frame(
        NOW,
        NodeId(7),
        Frame::ReqSlots {
            s: 256,
            n: 0,
            l: 256,
        },
    );
    b.handle_frame(NOW, NodeId(1), Frame::ReqSlots { s: 0, n: 8, l: 0 });
    assert_eq!(b.records().1, 1);
    assert!(b.reserved_bytes() > 0);
    // A flood of full-window requests from many senders hits the budget.
    for peer in 100..200 {
        b.handle_frame(
            NOW,
            NodeId(peer),
            Frame::ReqSlots {
                s: 0,
                n: 4 * window,
                l: 0,
            },
        );
        assert!(
            b.reserved_bytes() <= braid_exon::RECORD_BYTES + 4 * window * braid_exon::SLOT_BYTES
        );
    }
    assert!(b.stats().deferred >= 90, "{:?}", b.stats());
}

/// The responder follows the initiator's cipher: nodes preferring
/// different ones still talk, both ways.
#[test]
fn the_initiators_cipher_is_used() {
    for cipher in [
        braid_exon::Cipher::ChaCha20Poly1305,
        braid_exon::Cipher::Aes256Gcm,
        braid_exon::Cipher::Aes128Gcm,
    ] {
        let mut p = pair();
        p.a.set_cipher(cipher);
        p.a.send(p.now, p.b_id, Bytes::from_static(b"ping"))
            .unwrap();
        p.settle();
        assert_eq!(received(&mut p.b).len(), 1, "{cipher:?}");
        p.b.add_peer(&identity(1).public_key(), p.sa);
        p.b.send(p.now, p.a_id, Bytes::from_static(b"pong"))
            .unwrap();
        for _ in 0..50 {
            p.round();
        }
        assert_eq!(received(&mut p.a).len(), 1, "{cipher:?}");
    }
}

/// An old initiation replayed from another address once its answer is no
/// longer cached: it verifies (IK has no freshness of its own) but moves
/// nothing, and the real session keeps working.
#[test]
fn an_old_initiation_replayed_from_elsewhere_moves_nothing() {
    let mut p = pair();
    p.a.send(p.now, p.b_id, Bytes::from_static(b"one")).unwrap();
    let (first_ab, _) = p.round();
    let old_init = first_ab
        .into_iter()
        .find(|d| d[0] == T_INIT)
        .expect("an initiation");
    p.flush();
    // a restarts (same identity, fresh randomness): a new handshake.
    let (ka, pb) = (identity(1), identity(2).public_key());
    p.a = ExonNode::new(NodeConfig::default(), trusting(ka, pb), [11; 32], 1 << 30);
    p.a.add_peer(&pb, p.sb);
    p.a.send(p.now, p.b_id, Bytes::from_static(b"two")).unwrap();
    p.flush();
    assert_eq!(received(&mut p.b).len(), 2);
    let elsewhere = addr("192.0.2.9:9");
    p.b.handle_datagram(p.now, elsewhere, old_init);
    assert_eq!(p.b.peer_addr(p.a_id), Some(p.sa));
    let answers = drain(&mut p.b, p.now);
    assert!(
        answers
            .iter()
            .all(|(dst, d)| *dst == elsewhere && d[0] == 0xE3),
        "only the answer, to the replayer"
    );
    p.a.send(p.now, p.b_id, Bytes::from_static(b"three"))
        .unwrap();
    p.flush();
    assert_eq!(received(&mut p.b).len(), 1);
}
