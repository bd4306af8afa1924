//! Cookie replies and mac2 under load (WireGuard §5.4.4, §5.4.7): a node
//! under load answers an initiation without a valid mac2 with a cookie
//! reply alone (no Diffie-Hellman, no state), the real initiator retries
//! with mac2 and completes; cookies are bound to the source address and
//! expire; tampered replies are dropped; a flood of valid-mac1 initiations
//! from spoofed addresses costs at most the handshake budget; and a source
//! that does receive at its address, holds a cookie and floods initiations
//! with a valid mac2 gets at most its per-source burst and rate.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use braid_core::{Instant, Rng, RngCore, SeedableRng};
use braid_exon::secure::{mac1_for, COOKIE_REPLY_LEN, INIT_LEN, MAC_LEN, T_COOKIE, T_INIT, T_RESP};
use braid_exon::{
    AcceptAnyKey, Event, ExonNode, Identity, NodeConfig, NodeId, PublicKey, Security,
    SecurityStats, SessionConfig,
};
use bytes::Bytes;
use proptest::prelude::*;
use support::pair::{addr, drain, Pair};
use support::identity;

fn with_rate(rate: u32) -> NodeConfig {
    NodeConfig {
        session: SessionConfig {
            handshake_rate: rate,
            ..SessionConfig::default()
        },
        ..NodeConfig::default()
    }
}

fn received(n: &mut ExonNode) -> usize {
    let mut k = 0;
    while let Some(e) = n.poll_event() {
        k += usize::from(matches!(e, Event::Received { .. }));
    }
    k
}

fn sec(n: &ExonNode) -> SecurityStats {
    n.stats().security
}

fn pair(a_cfg: NodeConfig, b_cfg: NodeConfig) -> Pair {
    Pair::new(a_cfg, b_cfg, Instant::from_nanos(1_000_000))
}

/// What these tests do with a pair beyond a round.
trait PairExt {
    fn deliver_one(&mut self) -> (Vec<Bytes>, Vec<Bytes>);
}

impl PairExt for Pair {
    /// `a` sends one message and rounds run until b has it; every datagram
    /// is returned in order, each way.
    fn deliver_one(&mut self) -> (Vec<Bytes>, Vec<Bytes>) {
        self.a
            .send(self.now, self.b_id, Bytes::from_static(b"hello"))
            .unwrap();
        let (mut ab, mut ba) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            let (x, y) = self.round();
            ab.extend(x);
            ba.extend(y);
            if received(&mut self.b) == 1 {
                return (ab, ba);
            }
        }
        panic!("not delivered: {:?} / {:?}", sec(&self.a), sec(&self.b));
    }
}

/// A valid initiation to the node with `to`'s key from a throwaway
/// identity, mac2 zero.
fn initiation_to(to: &Identity, seed: u8) -> Bytes {
    initiation_from(to, seed, [seed; 32])
}

/// ... from the identity of `id`, with the node seeded by `node_seed`.
fn initiation_from(to: &Identity, id: u8, node_seed: [u8; 32]) -> Bytes {
    let mut m = ExonNode::new(
        NodeConfig::default(),
        Security::authenticated(Identity::from_seed(&[id; 32]), Arc::new(AcceptAnyKey)),
        node_seed,
        0,
    );
    let peer = m.add_peer(&to.public_key(), addr("10.0.0.2:1"));
    m.send(Instant::ZERO, peer, Bytes::from_static(b"x"))
        .unwrap();
    drain(&mut m, Instant::ZERO)
        .into_iter()
        .map(|(_, d)| d)
        .find(|d| d[0] == T_INIT)
        .unwrap()
}

#[test]
fn under_load_an_initiation_without_mac2_gets_only_a_cookie_reply() {
    let kb = identity(2);
    let mut b = ExonNode::new(
        with_rate(0),
        Security::authenticated(kb.clone(), Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    let init = initiation_to(&kb, 7);
    let from = addr("192.0.2.7:7");
    let before = sec(&b);
    b.handle_datagram(Instant::ZERO, from, init);
    let out = drain(&mut b, Instant::ZERO);
    let s = sec(&b);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, from);
    assert_eq!(out[0].1[0], T_COOKIE);
    assert_eq!(out[0].1.len(), COOKIE_REPLY_LEN);
    assert!(out[0].1.len() < INIT_LEN, "no amplification");
    assert_eq!(s.cookies_sent, before.cookies_sent + 1);
    // No Diffie-Hellman, no state.
    assert_eq!(
        (s.responses, s.handshakes, s.peers, s.sessions),
        (0, 0, 0, 0)
    );
    assert_eq!(b.peer_count(), 0);
}

#[test]
fn not_under_load_no_cookie_is_asked() {
    let mut p = pair(NodeConfig::default(), NodeConfig::default());
    let (ab, ba) = p.deliver_one();
    assert!(ab.iter().chain(&ba).all(|d| d[0] != T_COOKIE));
    assert_eq!(ab.iter().filter(|d| d[0] == T_INIT).count(), 1);
    assert_eq!((sec(&p.b).cookies_sent, sec(&p.a).cookies_received), (0, 0));
}

#[test]
fn the_real_initiator_completes_after_the_cookie_round_trip() {
    let mut p = pair(NodeConfig::default(), with_rate(0));
    let (ab, ba) = p.deliver_one();
    let inits: Vec<&Bytes> = ab.iter().filter(|d| d[0] == T_INIT).collect();
    assert_eq!(inits.len(), 2, "the first, then the retry with mac2");
    let zero = [0u8; MAC_LEN];
    assert_eq!(&inits[0][INIT_LEN - MAC_LEN..], &zero);
    assert_ne!(&inits[1][INIT_LEN - MAC_LEN..], &zero);
    assert_eq!(
        inits[0][..INIT_LEN - MAC_LEN],
        inits[1][..INIT_LEN - MAC_LEN],
        "the same Noise message"
    );
    assert_eq!(ba[0][0], T_COOKIE);
    assert_eq!(ba[1][0], T_RESP);
    assert_eq!(sec(&p.b).cookies_sent, 1);
    assert_eq!(sec(&p.a).cookies_received, 1);
    assert_eq!(sec(&p.b).responses, 1);
    // The retry within the cookie's life carries mac2 too: a retransmitted
    // initiation (answer lost) is answered from the cache, no new cookie.
    p.b.handle_datagram(p.now, p.sa, inits[1].clone());
    let again = drain(&mut p.b, p.now);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1[0], T_RESP);
    assert_eq!(sec(&p.b).responses, 1);
    assert_eq!(sec(&p.b).cookies_sent, 1);
}

#[test]
fn responses_carry_mac2_when_the_initiator_is_under_load_too() {
    let mut p = pair(with_rate(0), with_rate(0));
    let (ab, ba) = p.deliver_one();
    // a: init, init+mac2, cookie for the response; b: cookie, response,
    // response+mac2.
    assert!(ab.iter().any(|d| d[0] == T_COOKIE));
    let resps: Vec<&Bytes> = ba.iter().filter(|d| d[0] == T_RESP).collect();
    assert_eq!(resps.len(), 2);
    assert_eq!(
        resps[0][..resps[0].len() - MAC_LEN],
        resps[1][..resps[1].len() - MAC_LEN]
    );
    assert_ne!(resps[1][resps[1].len() - MAC_LEN..], [0u8; MAC_LEN]);
    assert_eq!((sec(&p.a).cookies_sent, sec(&p.a).cookies_received), (1, 1));
    assert_eq!((sec(&p.b).cookies_sent, sec(&p.b).cookies_received), (1, 1));
    assert_eq!(sec(&p.b).responses, 1, "one Diffie-Hellman answer");
}

/// The initiation with mac2 that `a` sent after its cookie reply.
fn initiation_with_mac2(p: &mut Pair) -> Bytes {
    let (ab, _) = p.deliver_one();
    ab.into_iter()
        .filter(|d| d[0] == T_INIT)
        .nth(1)
        .expect("a retry with mac2")
}

#[test]
fn a_cookie_for_one_address_does_not_pass_from_another() {
    let mut p = pair(NodeConfig::default(), with_rate(0));
    let init = initiation_with_mac2(&mut p);
    let before = sec(&p.b);
    let elsewhere = addr("10.0.0.1:2");
    p.b.handle_datagram(p.now, elsewhere, init.clone());
    let out = drain(&mut p.b, p.now);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0, out[0].1[0]), (elsewhere, T_COOKIE));
    assert_eq!(sec(&p.b).cookies_sent, before.cookies_sent + 1);
    // From its own address it passes (answered from the cache).
    p.b.handle_datagram(p.now, p.sa, init);
    assert_eq!(drain(&mut p.b, p.now)[0].1[0], T_RESP);
}

#[test]
fn an_expired_cookie_is_refused_and_the_initiator_stops_using_it() {
    let mut p = pair(NodeConfig::default(), with_rate(0));
    let init = initiation_with_mac2(&mut p);
    // Past the secret's 2 minutes: the mac2 no longer passes.
    let later = p.now + Duration::from_secs(121);
    let before = sec(&p.b);
    p.b.handle_datagram(later, p.sa, init);
    let out = drain(&mut p.b, later);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[0], T_COOKIE);
    assert_eq!(sec(&p.b).cookies_sent, before.cookies_sent + 1);
    assert_eq!(sec(&p.b).responses, before.responses);
    // The initiator's next handshake (a re-key, well past the cookie's
    // life) starts without mac2, and completes after a new round trip.
    p.now = later + Duration::from_secs(60);
    p.a.handle_timeout(p.now);
    p.b.handle_timeout(p.now);
    let (ab, _) = p.deliver_one();
    let inits: Vec<&Bytes> = ab.iter().filter(|d| d[0] == T_INIT).collect();
    assert_eq!(inits.len(), 2, "{:?}", sec(&p.a));
    assert_eq!(inits[0][INIT_LEN - MAC_LEN..], [0u8; MAC_LEN]);
    // (b may have started a handshake of its own meanwhile, and asked
    // for a cookie on a's response to it.)
    assert!(sec(&p.a).cookies_received >= 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any bit flipped in the authenticated part of a cookie reply (nonce,
    /// encrypted cookie, tag): dropped, counted in `auth_failed`, no cookie
    /// kept and nothing resent; the intact reply then works.
    #[test]
    fn a_tampered_cookie_reply_is_dropped_and_counted(at in 5usize..COOKIE_REPLY_LEN, bit in 0u8..8) {
        let mut p = pair(NodeConfig::default(), with_rate(0));
        p.a.send(p.now, p.b_id, Bytes::from_static(b"x")).unwrap();
        for (_, d) in drain(&mut p.a, p.now) {
            p.b.handle_datagram(p.now, p.sa, d);
        }
        let reply = drain(&mut p.b, p.now).into_iter().find(|(_, d)| d[0] == T_COOKIE).unwrap().1;
        let mut bad = reply.to_vec();
        bad[at] ^= 1 << bit;
        let before = sec(&p.a);
        p.a.handle_datagram(p.now, p.sb, Bytes::from(bad));
        prop_assert_eq!(sec(&p.a).auth_failed, before.auth_failed + 1);
        prop_assert_eq!(sec(&p.a).cookies_received, 0);
        prop_assert!(drain(&mut p.a, p.now).is_empty());
        p.a.handle_datagram(p.now, p.sb, reply);
        prop_assert_eq!(sec(&p.a).cookies_received, 1);
        prop_assert_eq!(drain(&mut p.a, p.now).len(), 1);
    }
}

#[test]
fn a_cookie_reply_for_no_handshake_or_of_the_wrong_length_changes_nothing() {
    let mut p = pair(NodeConfig::default(), with_rate(0));
    let mut stray = vec![0u8; COOKIE_REPLY_LEN];
    stray[0] = T_COOKIE;
    let before = sec(&p.a);
    p.a.handle_datagram(p.now, p.sb, Bytes::from(stray.clone()));
    assert_eq!(sec(&p.a).unauthenticated, before.unauthenticated + 1);
    stray.pop();
    p.a.handle_datagram(p.now, p.sb, Bytes::from(stray));
    assert_eq!(sec(&p.a).auth_failed, before.auth_failed + 1);
    assert!(drain(&mut p.a, p.now).is_empty());
    assert_eq!(sec(&p.a).cookies_received, 0);
}

/// 100,000 initiations with a valid mac1 (anyone knows b's key) and a
/// garbled Noise message, from distinct spoofed addresses, over 10 s
/// (10,000 a second, above the default budget of 2,000), while a real peer
/// starts a handshake in the middle. The real handshake completes; b's
/// Diffie-Hellmans stay within the budget (2,000 at once plus 2,000 a
/// second); its per-peer state and queue stay bounded.
#[test]
fn a_flood_of_valid_mac1_initiations_costs_at_most_the_budget() {
    let mut p = pair(NodeConfig::default(), NodeConfig::default());
    let kb = identity(2);
    let template = initiation_to(&kb, 9);
    let mut rng = Rng::seed_from_u64(3);
    let start = p.now;
    let (mut state_max, mut queue_max) = (0, 0);
    let mut sent = 0u64;
    for step in 0..10_000u32 {
        for k in 0..10u32 {
            let mut d = template.to_vec();
            // A fresh random ephemeral key: the Noise message fails only
            // after the Diffie-Hellman.
            rng.fill_bytes(&mut d[5..37]);
            let body = INIT_LEN - 2 * MAC_LEN;
            let mac = mac1_for(&kb.public_key(), &d[..body]);
            d[body..body + MAC_LEN].copy_from_slice(&mac);
            let i = step * 10 + k;
            let from =
                SocketAddr::from(([198, 18 + (i >> 16) as u8, (i >> 8) as u8, i as u8], 4000));
            p.b.handle_datagram(p.now, from, Bytes::from(d));
            sent += 1;
        }
        if step == 5_000 {
            p.a.send(p.now, p.b_id, Bytes::from_static(b"through the flood"))
                .unwrap();
        }
        // b's answers to spoofed addresses go nowhere; a's are exchanged.
        queue_max = queue_max.max(p.b.session_state_bytes());
        p.round();
        state_max = state_max.max(p.b.session_state_bytes());
    }
    for _ in 0..100 {
        p.round();
    }
    assert_eq!(sent, 100_000);
    assert_eq!(received(&mut p.b), 1, "the real handshake completed");
    let s = sec(&p.b);
    let seconds = p.now.saturating_duration_since(start).as_secs() + 1;
    let budget = SessionConfig::default().handshake_rate as u64;
    // Every flood packet did a Diffie-Hellman (and failed) or got a cookie
    // (as did the real initiator, at most once).
    let dh = s.auth_failed + s.responses + s.refused;
    let a_cookies = sec(&p.a).cookies_received;
    assert_eq!(a_cookies, 1, "the real initiator went through a cookie");
    assert_eq!(
        s.auth_failed + s.cookies_sent - a_cookies + s.queue_dropped,
        sent,
        "{s:?}"
    );
    assert!(
        dh <= budget * (1 + seconds),
        "{dh} Diffie-Hellmans in {seconds} s: {s:?}"
    );
    assert!(s.cookies_sent >= sent - budget * (1 + seconds), "{s:?}");
    assert_eq!(s.peers, 1);
    assert!(s.sessions <= 4);
    assert!(
        state_max <= 8 << 10 && queue_max <= 8 << 10,
        "{state_max} {queue_max}"
    );
    eprintln!(
        "flood: {sent} initiations in {seconds} s, {dh} Diffie-Hellmans, {} cookies, b state ≤ {state_max} B, a cookies {}",
        s.cookies_sent,
        sec(&p.a).cookies_received
    );
}

/// `a` and `b` trusting any key (so that other initiators are answered
/// too), `b` configured with `b_cfg`.
fn open_pair(b_cfg: NodeConfig) -> Pair {
    let (ka, kb) = (identity(1), identity(2));
    let mut a = ExonNode::new(
        NodeConfig::default(),
        Security::authenticated(ka.clone(), Arc::new(AcceptAnyKey)),
        [1; 32],
        0,
    );
    let b = ExonNode::new(b_cfg, Security::authenticated(kb.clone(), Arc::new(AcceptAnyKey)), [2; 32], 0);
    let sb = addr("10.0.0.2:1");
    let b_id = a.add_peer(&kb.public_key(), sb);
    Pair {
        a,
        b,
        sa: addr("10.0.0.1:1"),
        sb,
        a_id: NodeId::of(&ka.public_key()),
        b_id,
        now: Instant::from_nanos(1_000_000),
    }
}

/// `n` distinct valid initiations to `to` (throwaway identities, fresh
/// ephemeral keys), mac2 zero: each one b answers costs its
/// Diffie-Hellmans.
fn distinct_initiations(to: &Identity, n: u32) -> Vec<Bytes> {
    (0..n)
        .map(|i| {
            let mut seed = [0x5e; 32];
            seed[..4].copy_from_slice(&i.to_be_bytes());
            initiation_from(to, (i % 50) as u8 + 100, seed)
        })
        .collect()
}

/// The cookie in `reply`, a cookie reply from the node with `receiver`'s
/// key to a packet whose mac1 was `answered_mac1`: what the node sends,
/// read as its sender reads it (WireGuard §5.4.7; the labels are the
/// protocol's, written out here as any implementation would).
fn cookie_in(reply: &[u8], receiver: &PublicKey, answered_mac1: &[u8]) -> [u8; 16] {
    use chacha20poly1305::aead::AeadInPlace;
    use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305, XNonce};
    assert_eq!((reply[0], reply.len()), (T_COOKIE, COOKIE_REPLY_LEN));
    let key = blake3::derive_key("braid-exon v1 cookie", &receiver.to_bytes());
    let mut cookie: [u8; 16] = reply[29..45].try_into().unwrap();
    XChaCha20Poly1305::new((&key).into())
        .decrypt_in_place_detached(
            XNonce::from_slice(&reply[5..29]),
            answered_mac1,
            &mut cookie,
            Tag::from_slice(&reply[45..]),
        )
        .expect("the reply opens");
    cookie
}

/// `init` with its mac2 under `cookie`.
fn stamped(init: &[u8], cookie: &[u8; 16]) -> Bytes {
    let n = init.len();
    let key = blake3::derive_key("braid-exon v1 mac2", cookie);
    let mut d = init.to_vec();
    let mac = blake3::keyed_hash(&key, &d[..n - MAC_LEN]);
    d[n - MAC_LEN..].copy_from_slice(&mac.as_bytes()[..MAC_LEN]);
    Bytes::from(d)
}

/// b is under load (a zero handshake budget: every initiation needs a
/// mac2). A host at 192.0.2.66 really receives there: it asks for a
/// cookie on two ports, then for 1.5 s sends 1,000 distinct initiations a
/// second, each with a valid mac2 (every one would be answered with a
/// Diffie-Hellman without the per-source limit). It gets at most the
/// burst (5) plus 20 a second (one IPv4 source, whatever the port); the
/// rest are dropped and counted, with no answer. Meanwhile a, at another
/// address, completes its handshake (through its own cookie round trip)
/// and delivers a message.
#[test]
fn a_proved_source_under_load_gets_at_most_its_burst_and_rate() {
    let mut p = open_pair(with_rate(0));
    let kb = identity(2);
    let cfg = SessionConfig::default();
    let (burst, rate) = (u64::from(cfg.per_source_burst), u64::from(cfg.per_source_rate));
    let inits = distinct_initiations(&kb, 1_502);
    let ports = [addr("192.0.2.66:5000"), addr("192.0.2.66:5001")];
    let mac1_of = |d: &Bytes| d[INIT_LEN - 2 * MAC_LEN..INIT_LEN - MAC_LEN].to_vec();
    let cookies: Vec<[u8; 16]> = ports
        .iter()
        .zip(&inits)
        .map(|(&from, first)| {
            p.b.handle_datagram(p.now, from, first.clone());
            let out = drain(&mut p.b, p.now);
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].0, from);
            cookie_in(&out[0].1, &kb.public_key(), &mac1_of(first))
        })
        .collect();
    assert_eq!(sec(&p.b).diffie_hellmans, 0, "a cookie costs none");
    let start = p.now;
    let mut sent = 0u64;
    let mut delivered_at = None;
    for (step, init) in inits[2..].iter().enumerate() {
        let k = step % 2;
        // One initiation per millisecond (a round), the ports taking
        // turns: 1,000 a second from the address.
        p.b.handle_datagram(p.now, ports[k], stamped(init, &cookies[k]));
        sent += 1;
        if step == 700 {
            p.a.send(p.now, p.b_id, Bytes::from_static(b"through the flood")).unwrap();
        }
        p.round();
        if delivered_at.is_none() && received(&mut p.b) == 1 {
            delivered_at = Some(step);
        }
    }
    let secs = p.now.saturating_duration_since(start).as_secs_f64();
    assert!(delivered_at.is_some(), "a's message went through during the flood: {:?}", sec(&p.b));
    let s = sec(&p.b);
    // a's handshake: one Diffie-Hellman, one response.
    let flood_dh = s.diffie_hellmans - 1;
    let bound = burst + (rate as f64 * secs) as u64;
    assert!(flood_dh <= bound, "{flood_dh} Diffie-Hellmans in {secs} s > {bound}: {s:?}");
    // Not stingy either: the rate is what it says.
    assert!(flood_dh + 2 >= bound, "{flood_dh} < {bound}");
    assert_eq!(s.responses, flood_dh + 1, "every one answered (any key is accepted)");
    assert_eq!(s.rate_limited, sent - flood_dh, "{s:?}");
    assert_eq!(sec(&p.a).cookies_received, 1, "a went through its own cookie");
    eprintln!(
        "proved flood: {sent} initiations with mac2 in {secs:.3} s, {flood_dh} Diffie-Hellmans, {} rate-limited",
        s.rate_limited
    );
}

/// Not under load (the default budget of 2,000 a second), the per-source
/// limit does nothing: 200 initiations at one instant from one address,
/// far beyond its burst, are all answered, without cookies.
#[test]
fn not_under_load_the_per_source_limit_does_nothing() {
    let kb = identity(2);
    let mut b = ExonNode::new(
        NodeConfig::default(),
        Security::authenticated(kb.clone(), Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    let from = addr("192.0.2.66:5000");
    let now = Instant::from_nanos(1_000_000);
    for init in distinct_initiations(&kb, 200) {
        b.handle_datagram(now, from, init);
    }
    let s = sec(&b);
    assert_eq!((s.diffie_hellmans, s.responses), (200, 200), "{s:?}");
    assert_eq!((s.rate_limited, s.cookies_sent), (0, 0), "{s:?}");
    assert_eq!(drain(&mut b, now).iter().filter(|(_, d)| d[0] == T_RESP).count(), 200);
}

/// Nothing drained: the queue of cookie replies stops at `max_queued`,
/// the rest are dropped and counted; nothing is kept per source.
#[test]
fn an_undrained_flood_queues_at_most_max_queued_replies() {
    let kb = identity(2);
    let cfg = with_rate(0);
    let max_queued = cfg.session.max_queued;
    let mut b = ExonNode::new(
        cfg,
        Security::authenticated(kb.clone(), Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    let init = initiation_to(&kb, 7);
    for i in 0..5_000u32 {
        let from = SocketAddr::from(([198, 18, (i >> 8) as u8, i as u8], 1));
        b.handle_datagram(Instant::ZERO, from, init.clone());
    }
    let s = sec(&b);
    assert_eq!(s.cookies_sent as usize, max_queued);
    assert_eq!(s.queue_dropped as usize, 5_000 - max_queued);
    assert_eq!((s.peers, s.sessions, s.responses), (0, 0, 0));
    assert!(b.session_state_bytes() <= max_queued * (COOKIE_REPLY_LEN + 64));
    assert_eq!(drain(&mut b, Instant::ZERO).len(), max_queued);
}

/// What one answered initiation costs the responder (the work the budget
/// limits): `cargo test --release -p braid-exon --test cookie -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn measure_responder_cost() {
    let kb = identity(2);
    let cfg = NodeConfig {
        session: SessionConfig {
            handshake_rate: u32::MAX,
            max_queued: 1 << 20,
            ..SessionConfig::default()
        },
        ..NodeConfig::default()
    };
    let mut b = ExonNode::new(
        cfg,
        Security::authenticated(kb.clone(), Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    // Distinct Noise messages (no answer from the cache), from 200 peers.
    let inits: Vec<Bytes> = (0..2_000u32)
        .map(|i| {
            let mut seed = [0x77; 32];
            seed[..4].copy_from_slice(&i.to_be_bytes());
            initiation_from(&kb, (i % 200) as u8 + 3, seed)
        })
        .collect();
    let t = std::time::Instant::now();
    for (i, d) in inits.iter().enumerate() {
        b.handle_datagram(
            Instant::ZERO,
            SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 1)),
            d.clone(),
        );
    }
    let per = t.elapsed() / inits.len() as u32;
    eprintln!(
        "responder: {per:?} per initiation, {} answered",
        sec(&b).responses
    );
    let init = initiation_to(&kb, 7);
    let mut b = ExonNode::new(
        with_rate(0),
        Security::authenticated(kb, Arc::new(AcceptAnyKey)),
        [2; 32],
        0,
    );
    let t = std::time::Instant::now();
    for i in 0..20_000u32 {
        b.handle_datagram(
            Instant::ZERO,
            SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 1)),
            init.clone(),
        );
        if i % 512 == 0 {
            drain(&mut b, Instant::ZERO);
        }
    }
    eprintln!("cookie reply: {:?} per initiation", t.elapsed() / 20_000);
}
