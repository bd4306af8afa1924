//! Property tests: for random link specs and seeds, the simulator's
//! bookkeeping adds up and runs are reproducible.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use braid_core::Instant;
use braid_link::LinkSpec;
use braid_sim::nodes::{BasicNode, EchoNode, PingNode};
use braid_sim::{NodeId, Simulator};
use proptest::prelude::*;

fn link_spec() -> impl Strategy<Value = String> {
    (
        0u32..100,
        0u32..10,
        prop::option::of(1u32..200),
        0u32..30,
        0u32..10,
        0u32..10,
        prop::option::of(1u32..50),
    )
        .prop_map(|(rtt, jitter, rate, loss, reorder, dup, queue)| {
            let mut s =
                format!("rtt={rtt}ms,jitter={jitter}ms,loss={loss}%,reorder={reorder}%,dup={dup}%");
            if let Some(rate) = rate {
                s += &format!(",rate={rate}mbit");
                if let Some(q) = queue {
                    s += &format!(",queue={q}p");
                }
            }
            s
        })
}

fn run(spec: &LinkSpec, seed: u64, interval_us: u64) -> (u64, Simulator<BasicNode>, NodeId) {
    let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let mut sim = Simulator::new(seed);
    let p = PingNode::new(
        SocketAddr::new(a, 1),
        SocketAddr::new(b, 2),
        300,
        Duration::from_micros(interval_us),
        1200,
    );
    let pinger = sim.add_node([a], BasicNode::Ping(p)).unwrap();
    sim.add_node([b], BasicNode::Echo(EchoNode::default()))
        .unwrap();
    sim.add_path(a, b, spec).unwrap();
    sim.run_until(Instant::ZERO + Duration::from_secs(10));
    (sim.trace_hash(), sim, pinger)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn counters_add_up_and_runs_repeat(text in link_spec(), seed in any::<u64>(), interval_us in 10u64..5_000) {
        let spec: LinkSpec = text.parse().unwrap();
        let (hash, sim, pinger) = run(&spec, seed, interval_us);
        let BasicNode::Ping(p) = sim.node(pinger) else { unreachable!() };
        let links: Vec<_> = sim.links().map(|(_, _, s)| *s).collect();
        let (fwd, back) = (links[0], links[1]);
        prop_assert_eq!(fwd.offered, p.sent());
        prop_assert_eq!(p.sent(), 300);
        prop_assert_eq!(back.offered, fwd.delivered + fwd.duplicated);
        prop_assert_eq!(p.rtts().len() as u64 + p.duplicates(), back.delivered + back.duplicated);
        prop_assert_eq!(p.malformed(), 0);
        for s in [fwd, back] {
            prop_assert_eq!(s.offered, s.delivered + s.dropped());
        }
        let min_rtt = spec.rtt();
        if spec.params(braid_link::Direction::AToB).jitter.is_zero() {
            prop_assert!(p.rtts().iter().all(|r| *r >= min_rtt));
        }
        let (again, _, _) = run(&spec, seed, interval_us);
        prop_assert_eq!(hash, again);
    }
}
