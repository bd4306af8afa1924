//! Acceptance (issue 22): 24 real Braid nodes on loopback addresses
//! 127.0.0.10–33, placed as a random geometric graph, run the Gabriel and
//! the kTC rule; the links the nodes hold afterwards (sessions both ends
//! hold open, read from each node, not from the engine) are the checker's
//! topology, and the channels of removed links are closed. Nodes run
//! authenticated (TLS on TCP, Noise on Braid) with pinned in-memory keys.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use braid_node::NodeConfig;
use braid_overlay::{overlay_schema, pinned_group, MembershipConfig, OverlayConfig, OverlayNode};
use braid_tarl::algorithms::shipped;
use braid_tarl::sim::random_geometric;
use braid_tarl::{checkers, compile, Budget, Engine, EngineConfig, NodeId};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const N: usize = 24;
const RADIUS: f64 = 0.35;

fn engine(rule: &str) -> Engine {
    let s = shipped(rule).expect("shipped rule");
    let r = compile(rule, s.source, &overlay_schema(false)).expect("compiles");
    Engine::new(overlay_schema(false), vec![r], EngineConfig { k: s.k, budget: Budget::default() }).expect("engine")
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + i as u8))
}

async fn start(pos: &[(f64, f64)], rule: &str) -> Vec<OverlayNode> {
    start_with(pos, || engine(rule)).await
}

async fn start_with(pos: &[(f64, f64)], engine: impl Fn() -> Engine) -> Vec<OverlayNode> {
    let keys = pinned_group(pos.len()).expect("keys");
    let mut nodes: Vec<OverlayNode> = Vec::new();
    for (i, auth) in keys.into_iter().enumerate() {
        let mut m = MembershipConfig::new(NodeId(i as u64), pos[i], RADIUS);
        m.heartbeat = Duration::from_millis(200);
        m.seed_every = 5;
        if let Some(seed) = nodes.first() {
            m.seeds = vec![seed.addr()];
        }
        let node = NodeConfig { security: auth, connect_timeout: Duration::from_secs(3), ..NodeConfig::default() };
        let n = OverlayNode::start(SocketAddr::new(ip(i), 0), OverlayConfig::new(m, node), engine())
            .await
            .expect("member starts");
        nodes.push(n);
    }
    nodes
}

/// Links both ends hold open, as `a < b`; `None` if some end disagrees.
fn held(nodes: &[OverlayNode]) -> Option<BTreeSet<(u32, u32)>> {
    let snaps: Vec<_> = nodes.iter().map(|n| n.snapshot()).collect();
    let mut s = BTreeSet::new();
    for (i, sn) in snaps.iter().enumerate() {
        if sn.links.len() != sn.open_links.len() {
            return None; // a session still opening
        }
        for p in &sn.open_links {
            let j = p.0 as usize;
            if !snaps.get(j)?.open_links.contains(&NodeId(i as u64)) {
                return None;
            }
            s.insert((i.min(j) as u32, i.max(j) as u32));
        }
    }
    Some(s)
}

async fn converges(rule: &str, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (pos, edges) = random_geometric(N, RADIUS, &mut rng);
    let phys: BTreeSet<(u32, u32)> = edges.into_iter().collect();
    let want = match rule {
        "gabriel" => checkers::gabriel(&pos, &phys),
        _ => checkers::ktc(&pos, &phys, 1.5),
    };
    assert!(want.len() < phys.len(), "the rule must remove some links for the test to mean anything");
    let nodes = start(&pos, rule).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut stable = 0;
    let mut last = None;
    while stable < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{rule}: no convergence in 60 s; held {last:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = held(&nodes);
        stable = if last.as_ref() == Some(&want) { stable + 1 } else { 0 };
    }
    let start_wait = tokio::time::Instant::now();
    eprintln!("{rule}: converged after {:?} (seed {seed}, {} of {} links kept)", start_wait.duration_since(deadline - Duration::from_secs(60)), want.len(), phys.len());
    // Every member's candidates are its unit-disk neighbours.
    for (i, n) in nodes.iter().enumerate() {
        let s = n.snapshot();
        let cand: BTreeSet<u32> = s.candidates.iter().map(|c| c.0 as u32).collect();
        let want_c: BTreeSet<u32> = phys
            .iter()
            .filter_map(|&(a, b)| (a as usize == i).then_some(b).or(((b as usize) == i).then_some(a)))
            .collect();
        assert_eq!(cand, want_c, "{rule}: n{i}'s candidates");
        assert!(s.engine.failures.is_empty() && s.engine.cutoffs == 0, "{rule}: n{i}: {:?}", s.engine);
        assert_eq!(s.membership.dropped, 0, "{rule}: n{i} dropped messages");
        // Delays are measured: a round trip to every candidate, on loopback well under a second.
        assert_eq!(s.rtts.len(), s.candidates.len(), "{rule}: n{i} lacks RTTs: {:?}", s.rtts);
        assert!(s.rtts.iter().all(|(_, r)| *r < Duration::from_secs(1)), "{rule}: n{i}: {:?}", s.rtts);
    }
    // The removed links' channels are closed by the driver (a channel
    // that only answered a forgotten member idles out in 2 s): a member other
    // than the seed (which answers everyone's rendezvous) then holds one
    // membership channel per candidate, one link channel per link and at
    // most one to the seed; before the rules ran it held a link channel
    // per candidate.
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(start_wait.elapsed())).await;
    let removed: usize = phys.len() - want.len();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let s = n.snapshot();
        let bound = s.candidates.len() + s.open_links.len() + 1;
        let open = n.node().open_channels();
        assert!(open <= bound, "{rule}: n{i} holds {open} channels, at most {bound} expected");
    }
    // Keepalives run every 250 ms on a link, so its channel never idles:
    // each removed link was closed on request by at least one end.
    let closed: u64 = nodes.iter().map(|n| n.node().stats().channels_closed).sum();
    assert!(closed as usize >= removed, "{rule}: {closed} channels closed for {removed} removed links");
    assert_eq!(held(&nodes), Some(want.clone()), "{rule}: links changed after convergence");
    // Close concurrently: each close waits for its channels to flush.
    let closing: Vec<_> = nodes.into_iter().map(|n| tokio::spawn(n.close())).collect();
    for c in closing {
        c.await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gabriel_on_24_real_nodes() {
    converges("gabriel", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ktc_on_24_real_nodes() {
    converges("ktc", 5).await;
}

/// A rule whose matching exceeds the evaluation budget is cut off at every
/// member and reported (counted, and the rule and budget named); its actions
/// never run, so the links the Gabriel checker would drop stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_over_its_budget_is_cut_off_and_reported() {
    // An obtuse triangle: n2 lies inside the circle on n0-n1, so Gabriel would drop n0-n1.
    let pos = [(0.3, 0.5), (0.6, 0.5), (0.45, 0.52)];
    let all: BTreeSet<(u32, u32)> = [(0, 1), (0, 2), (1, 2)].into();
    let phys: BTreeSet<(u32, u32)> = all.clone();
    assert_eq!(checkers::gabriel(&pos, &phys).len(), 2, "the rule would remove a link");
    // One search step: matching `self <- e0 -> v` tries two candidates.
    let tiny = || {
        let s = shipped("gabriel").expect("shipped rule");
        let r = compile("gabriel", s.source, &overlay_schema(false)).expect("compiles");
        let budget = Budget { max_steps: 1, max_matches: 1_000 };
        Engine::new(overlay_schema(false), vec![r], EngineConfig { k: 1, budget }).expect("engine")
    };
    let nodes = start_with(&pos, tiny).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let snaps: Vec<_> = nodes.iter().map(|n| n.snapshot()).collect();
        let reported = snaps.iter().all(|s| {
            s.engine.cutoffs >= 2
                && s.engine.last_cutoff.as_deref().is_some_and(|c| c.starts_with("gabriel: cut off after") && c.contains("budget"))
        });
        if reported && held(&nodes).as_ref() == Some(&all) {
            for s in &snaps {
                assert!(s.engine.failures.is_empty() && s.engine.changes == 0, "{:?}", s.engine);
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no cut-off reported at every member in 30 s: {:?}, held {:?}",
            snaps.iter().map(|s| &s.engine).collect::<Vec<_>>(),
            held(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let closing: Vec<_> = nodes.into_iter().map(|n| tokio::spawn(n.close())).collect();
    for c in closing {
        c.await.expect("close");
    }
}

#[tokio::test]
async fn bad_configurations_are_refused_by_name() {
    let at = SocketAddr::new(ip(0), 0);
    // Insecure on purpose: every case is refused before a node binds, so no
    // key is ever used (and none is created under $BRAID_HOME).
    let node = || NodeConfig { security: braid_node::NodeAuth::insecure(), ..NodeConfig::default() };
    let m = MembershipConfig::new(NodeId(0), (0.5, 0.5), 0.3);
    let bad_radius = MembershipConfig { radius: -1.0, ..m.clone() };
    let e = OverlayNode::start(at, OverlayConfig::new(bad_radius, node()), engine("gabriel")).await.err().expect("refused");
    assert!(e.to_string().contains("`radius`"), "{e}");
    // Rules checked against the simulator's schema (no `delay`) are not the overlay's.
    let s = shipped("gabriel").unwrap();
    let sim_engine = Engine::new((s.schema)(), vec![s.compile().unwrap()], EngineConfig { k: 1, budget: Budget::default() }).unwrap();
    let e = OverlayNode::start(at, OverlayConfig::new(m.clone(), node()), sim_engine).await.err().expect("refused");
    assert!(matches!(e, braid_overlay::OverlayError::Schema), "{e}");
    let mut c = OverlayConfig::new(m, node());
    c.link_transport = braid_node::Transport::Exon;
    let e = OverlayNode::start(at, c, engine("gabriel")).await.err().expect("refused");
    assert!(e.to_string().contains("link_transport"), "{e}");
}
