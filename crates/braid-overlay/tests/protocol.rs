//! The membership protocol and link sessions without sockets: members
//! exchange their outboxes through an in-memory network with a fixed
//! delay, the TARL engine runs at every member, and the links the members
//! hold at the end are compared with the brute-force checkers.

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_overlay::msg::{Lists, PeerRecord, State};
use braid_overlay::{overlay_schema, Membership, MembershipConfig, OverlayMsg};
use braid_tarl::algorithms::shipped;
use braid_tarl::sim::random_geometric;
use braid_tarl::{checkers, compile, Budget, Change, Engine, EngineConfig, NodeId, TopoId, TopologyProvider};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 10_000 + i as u16 * 10))
}

fn engine(rule: &str) -> Engine {
    let s = shipped(rule).expect("shipped rule");
    let r = compile(rule, s.source, &overlay_schema(false)).expect("compiles against the overlay schema");
    Engine::new(overlay_schema(false), vec![r], EngineConfig { k: s.k, budget: Budget::default() }).expect("engine")
}

/// Members on `pos`, node 0 the seed; returns them after `secs` simulated
/// seconds with `rule` evaluated at every member every 100 ms.
fn run(pos: &[(f64, f64)], radius: f64, rule: &str, secs: u64) -> (Vec<Membership>, Instant) {
    let eng = engine(rule);
    let n = pos.len();
    let mut members: Vec<Membership> = (0..n)
        .map(|i| {
            let mut c = MembershipConfig::new(NodeId(i as u64), pos[i], radius);
            c.seeds = vec![addr(0)];
            c.heartbeat = Duration::from_millis(100);
            c.peer_timeout = Duration::from_secs(1);
            c.link_timeout = Duration::from_millis(800);
            Membership::new(c, addr(i)).expect("config")
        })
        .collect();
    // (deliver at, to, from, msg)
    let mut net: VecDeque<(u64, usize, SocketAddr, OverlayMsg)> = VecDeque::new();
    let step = 10_000_000u64; // 10 ms
    let delay = 3 * step;
    let mut t = 0u64;
    while t < secs * 1_000_000_000 {
        let now = Instant::from_nanos(t);
        while net.front().is_some_and(|m| m.0 <= t) {
            let Some((_, to, from, msg)) = net.pop_front() else { break };
            members[to].handle(now, from, msg);
        }
        for (i, m) in members.iter_mut().enumerate() {
            m.tick(now);
            if t % (10 * step) == (i as u64 % 10) * step {
                let eval = eng.evaluate(&*m, NodeId(i as u64));
                let rep = eng.apply(m, &eval);
                assert!(rep.failed.is_empty(), "refused: {:?}", rep.failed);
            }
            for o in m.drain_outbox() {
                let to = (0..n).find(|&j| addr(j) == o.to).expect("known address");
                net.push_back((t + delay, to, addr(i), o.msg));
            }
        }
        t += step;
    }
    (members, Instant::from_nanos(t))
}

/// Undirected links both ends hold open, as `a < b` pairs; panics on a link only one end holds.
fn held_links(members: &[Membership], now: Instant) -> BTreeSet<(u32, u32)> {
    let mut s = BTreeSet::new();
    for (i, m) in members.iter().enumerate() {
        for p in m.open_links(now) {
            let j = p.0 as usize;
            assert!(
                members[j].open_links(now).contains(&NodeId(i as u64)),
                "link n{i}-n{j} held by one end only"
            );
            s.insert((i.min(j) as u32, i.max(j) as u32));
        }
    }
    s
}

fn graph(n: usize, radius: f64, seed: u64) -> (Vec<(f64, f64)>, BTreeSet<(u32, u32)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (pos, edges) = random_geometric(n, radius, &mut rng);
    (pos, edges.into_iter().collect())
}

#[test]
fn candidates_are_the_unit_disk_graph() {
    let (pos, phys) = graph(20, 0.35, 7);
    let (members, _) = run(&pos, 0.35, "gabriel", 4);
    for (i, m) in members.iter().enumerate() {
        let want: Vec<NodeId> = phys
            .iter()
            .filter_map(|&(a, b)| {
                if a as usize == i {
                    Some(NodeId(u64::from(b)))
                } else if b as usize == i {
                    Some(NodeId(u64::from(a)))
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(m.candidates(), want, "n{i}'s candidates");
        assert_eq!(m.stats().dropped, 0);
    }
}

#[test]
fn gabriel_converges_to_the_checker_on_ten_graphs() {
    for seed in 0..10 {
        let (pos, phys) = graph(20, 0.35, seed);
        let (members, now) = run(&pos, 0.35, "gabriel", 5);
        assert_eq!(held_links(&members, now), checkers::gabriel(&pos, &phys), "seed {seed}");
    }
}

#[test]
fn ktc_converges_to_the_checker_on_ten_graphs() {
    for seed in 0..10 {
        let (pos, phys) = graph(20, 0.35, 100 + seed);
        let (members, now) = run(&pos, 0.35, "ktc", 5);
        assert_eq!(held_links(&members, now), checkers::ktc(&pos, &phys, 1.5), "seed {seed}");
    }
}

#[test]
fn actions_elsewhere_or_on_phys_are_refused() {
    let mut m = Membership::new(MembershipConfig::new(NodeId(1), (0.0, 0.0), 0.5), addr(1)).unwrap();
    assert!(m.apply(NodeId(2), TopoId(1), Change::Add(NodeId(3))).is_err());
    assert!(m.apply(NodeId(1), TopoId(0), Change::Add(NodeId(3))).is_err());
    assert!(m.apply(NodeId(1), TopoId(7), Change::Add(NodeId(3))).is_err());
    assert!(m.apply(NodeId(1), TopoId(1), Change::Add(NodeId(3))).is_err(), "unknown peer");
    assert!(m.apply(NodeId(1), TopoId(1), Change::Add(NodeId(1))).is_err(), "self loop");
    assert_eq!(m.apply(NodeId(1), TopoId(1), Change::Remove(NodeId(3))), Ok(false));
}

#[test]
fn a_removed_link_is_not_reopened_and_silent_peers_expire() {
    let pos = [(0.0, 0.0), (0.1, 0.0)];
    let mk = |i: usize| {
        let mut c = MembershipConfig::new(NodeId(i as u64), pos[i], 0.5);
        c.seeds = vec![addr(0)];
        Membership::new(c, addr(i)).unwrap()
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let ms = |x: u64| Instant::from_nanos(x * 1_000_000);
    let pump = |a: &mut Membership, b: &mut Membership, now: Instant| {
        for _ in 0..4 {
            for o in b.drain_outbox() {
                assert_eq!(o.to, addr(0));
                a.handle(now, addr(1), o.msg);
            }
            for o in a.drain_outbox() {
                assert_eq!(o.to, addr(1));
                b.handle(now, addr(0), o.msg);
            }
        }
    };
    for t in (0..1000).step_by(50) {
        a.tick(ms(t));
        b.tick(ms(t));
        pump(&mut a, &mut b, ms(t));
    }
    assert_eq!(a.open_links(ms(1000)), vec![NodeId(1)]);
    assert_eq!(b.open_links(ms(1000)), vec![NodeId(0)]);
    assert_eq!(a.apply(NodeId(0), TopoId(1), Change::Remove(NodeId(1))), Ok(true));
    for t in (1000..2000).step_by(50) {
        a.tick(ms(t));
        b.tick(ms(t));
        pump(&mut a, &mut b, ms(t));
    }
    assert!(a.links().is_empty() && b.links().is_empty(), "{:?} {:?}", a.links(), b.links());
    assert_eq!(a.candidates(), vec![NodeId(1)], "still a candidate");
    // b falls silent: a forgets it after peer_timeout.
    for t in (2000..6000).step_by(50) {
        a.tick(ms(t));
        a.drain_outbox();
    }
    assert!(a.known().is_empty() && a.candidates().is_empty());
    assert!(a.stats().peers_expired >= 1);
}

fn arb_msg() -> impl Strategy<Value = OverlayMsg> {
    let pos = (-2.0f64..2.0, -2.0f64..2.0);
    let rec = (0u64..40, 0u16..40, pos.clone(), 0u64..10_000).prop_map(|(id, port, pos, age_ms)| PeerRecord {
        id,
        addr: SocketAddr::from(([127, 0, 0, 1], 10_000 + port * 10)),
        pos,
        age_ms,
    });
    let lists = proptest::collection::vec(
        (proptest::collection::vec(0u64..40, 0..8), proptest::collection::vec(0u64..40, 0..8))
            .prop_map(|(out, inn)| Lists { out, inn }),
        0..4,
    );
    prop_oneof![
        (0u64..40, pos.clone(), any::<u64>(), lists, proptest::collection::vec(rec, 0..50)).prop_map(
            |(from, pos, stamp, lists, gossip)| OverlayMsg::State(State {
                from,
                pos,
                stamp,
                echo: None,
                lists,
                delays: vec![(from, stamp % 1000)],
                gossip,
            })
        ),
        (0u64..40, pos, 0u16..3, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(from, pos, topo, sender_out, sender_in, auto)| OverlayMsg::Link { from, pos, topo, sender_out, sender_in, auto }
        ),
        (0u64..40, 0u16..3, any::<bool>()).prop_map(|(from, topo, accepted)| OverlayMsg::LinkAck { from, topo, accepted }),
        (0u64..40, 0u16..3).prop_map(|(from, topo)| OverlayMsg::Unlink { from, topo }),
        (0u64..40, 0u16..3).prop_map(|(from, topo)| OverlayMsg::Keepalive { from, topo }),
    ]
}

proptest! {
    /// Arbitrary messages from arbitrary addresses never panic the member,
    /// never exceed its bounds, and the view it offers stays consistent.
    #[test]
    fn arbitrary_messages_respect_the_bounds(
        msgs in proptest::collection::vec((0u16..40, arb_msg()), 1..200),
    ) {
        let mut c = MembershipConfig::new(NodeId(0), (0.0, 0.0), 1.0);
        c.max_peers = 8;
        c.max_gossip = 4;
        let mut m = Membership::new(c, addr(0)).unwrap();
        for (k, (port, msg)) in msgs.into_iter().enumerate() {
            let now = Instant::from_nanos(k as u64 * 20_000_000);
            m.handle(now, SocketAddr::from(([127, 0, 0, 1], 10_000 + port * 10)), msg);
            m.tick(now);
            prop_assert!(m.known().len() <= 8);
            prop_assert!(m.links().len() <= 8);
            let out = m.drain_outbox();
            for o in &out {
                if let OverlayMsg::State(s) = &o.msg {
                    prop_assert!(s.gossip.len() <= 4);
                }
            }
            for p in m.out_neighbors(TopoId(1), NodeId(0)).unwrap() {
                prop_assert!(m.known().contains(&p), "a link to an unknown peer");
            }
        }
    }
}
