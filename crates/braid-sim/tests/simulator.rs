//! Behaviour of the simulator: routing, timing through links, timers,
//! determinism.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use braid_core::Instant;
use braid_link::LinkSpec;
use braid_sim::nodes::{BasicNode, EchoNode, PingNode};
use braid_sim::{Datagram, Node, NodeId, SimError, Simulator};
use bytes::Bytes;

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn sa(s: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(s), port)
}
fn spec(s: &str) -> LinkSpec {
    s.parse().unwrap()
}
fn secs(s: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(s)
}

/// A pinger at A and an echo server at B over `link`.
fn ping_setup(
    link: &str,
    seed: u64,
    count: u64,
    interval: Duration,
) -> (Simulator<BasicNode>, NodeId) {
    let mut sim = Simulator::new(seed);
    let p = PingNode::new(sa(A, 9), sa(B, 7), count, interval, 64);
    let pinger = sim.add_node([ip(A)], BasicNode::Ping(p)).unwrap();
    sim.add_node([ip(B)], BasicNode::Echo(EchoNode::default()))
        .unwrap();
    sim.add_path(ip(A), ip(B), &spec(link)).unwrap();
    (sim, pinger)
}

fn pinger(sim: &Simulator<BasicNode>, id: NodeId) -> &PingNode {
    match sim.node(id) {
        BasicNode::Ping(p) => p,
        BasicNode::Echo(_) => panic!("not a pinger"),
    }
}

#[test]
fn ping_sees_the_configured_rtt_and_jitter() {
    let (mut sim, id) = ping_setup("rtt=40ms,jitter=5ms", 1, 20_000, Duration::from_millis(50));
    sim.run_until(secs(1_100));
    let p = pinger(&sim, id);
    assert_eq!(p.rtts().len(), 20_000);
    let ms: Vec<f64> = p.rtts().iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let sigma = (ms.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (ms.len() - 1) as f64).sqrt();
    assert!((mean - 40.0).abs() < 0.25, "mean {mean}");
    assert!((sigma - 5.0).abs() < 0.2, "σ {sigma}");
}

#[test]
fn loss_and_duplicates_reach_the_nodes() {
    let (mut sim, id) = ping_setup(
        "rtt=10ms,loss=10%,dup=10%",
        2,
        20_000,
        Duration::from_millis(1),
    );
    sim.run_until(secs(30));
    let p = pinger(&sim, id);
    // A probe survives two independent 10% losses.
    let n = p.sent() as f64;
    let lost = p.lost() as f64;
    let want = n * (1.0 - 0.81);
    assert!(
        (lost - want).abs() < 5.0 * (n * 0.19 * 0.81).sqrt(),
        "lost {lost} want {want}"
    );
    let fwd = *sim.link_stats(ip(A), ip(B)).unwrap();
    let back = *sim.link_stats(ip(B), ip(A)).unwrap();
    assert_eq!(fwd.offered, p.sent());
    // Each delivered probe and each duplicate is echoed.
    assert_eq!(back.offered, fwd.delivered + fwd.duplicated);
    assert_eq!(
        p.rtts().len() as u64 + p.duplicates(),
        back.delivered + back.duplicated
    );
    assert_eq!(
        sim.stats().datagrams_delivered,
        fwd.delivered + fwd.duplicated + back.delivered + back.duplicated
    );
    assert!(p.duplicates() > 0);
}

#[test]
fn set_path_changes_later_probes_only() {
    let (mut sim, id) = ping_setup("rtt=100ms", 3, 40, Duration::from_millis(50));
    sim.run_until(Instant::ZERO + Duration::from_millis(1_000));
    sim.set_path(ip(A), ip(B), &spec("rtt=20ms")).unwrap();
    sim.run_until(secs(5));
    let rtts = pinger(&sim, id).rtts();
    assert_eq!(rtts.len(), 40);
    assert_eq!(rtts[0], Duration::from_millis(100));
    assert_eq!(*rtts.last().unwrap(), Duration::from_millis(20));
    assert!(matches!(
        sim.set_path(ip(A), ip("10.0.0.9"), &spec("rtt=1ms")),
        Err(SimError::NoSuchPath(..))
    ));
}

/// Sends `count` datagrams of `size` bytes to `dst` as fast as allowed, and
/// records what it receives.
#[derive(Debug, Default)]
struct Blaster {
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    to_send: u64,
    size: usize,
    received: u64,
    received_bytes: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    timeouts: u64,
    timer: Option<Instant>,
}

impl Node for Blaster {
    fn handle_datagram(
        &mut self,
        now: Instant,
        _src: SocketAddr,
        _dst: SocketAddr,
        payload: Bytes,
    ) {
        self.received += 1;
        self.received_bytes += payload.len() as u64;
        self.first.get_or_insert(now);
        self.last = Some(now);
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        if self.to_send == 0 {
            return None;
        }
        self.to_send -= 1;
        Some(Datagram {
            src: self.src?,
            dst: self.dst?,
            payload: Bytes::from(vec![0u8; self.size]),
        })
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        self.timer
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.timeouts += 1;
        // Re-arm once, 1 s later, then stop.
        self.timer = (self.timeouts < 2).then(|| now + Duration::from_secs(1));
    }
}

fn blaster_pair(link: &str, seed: u64) -> (Simulator<Blaster>, NodeId, NodeId) {
    let mut sim = Simulator::new(seed);
    let tx = Blaster {
        src: Some(sa(A, 1)),
        dst: Some(sa(B, 1)),
        ..Default::default()
    };
    let tx = sim.add_node([ip(A)], tx).unwrap();
    let rx = sim.add_node([ip(B)], Blaster::default()).unwrap();
    sim.add_path(ip(A), ip(B), &spec(link)).unwrap();
    (sim, tx, rx)
}

#[test]
fn links_are_charged_payload_plus_udp_ip_headers() {
    // 1222-byte payloads + 28 = 1250 bytes = 1 ms at 10 Mbit/s.
    let (mut sim, tx, rx) = blaster_pair("delay=5ms,rate=10mbit,queue=10mb", 4);
    let n = 1000;
    let b = sim.node_mut(tx);
    b.to_send = n;
    b.size = 1222;
    sim.run_until(secs(10));
    let r = sim.node(rx);
    assert_eq!(r.received, n);
    assert_eq!(r.first, Some(Instant::ZERO + Duration::from_millis(6)));
    assert_eq!(r.last, Some(Instant::ZERO + Duration::from_millis(1005)));
    assert_eq!(
        sim.link_stats(ip(A), ip(B)).unwrap().bytes_offered,
        1250 * n
    );

    // With the overhead set to zero, the same payloads go faster.
    let (mut sim, tx, rx) = blaster_pair("delay=5ms,rate=10mbit,queue=10mb", 4);
    sim.set_header_overhead(Some(28 + 1222 - 1000));
    let b = sim.node_mut(tx);
    b.to_send = n;
    b.size = 1000;
    sim.run_until(secs(10));
    assert_eq!(
        sim.node(rx).last,
        Some(Instant::ZERO + Duration::from_millis(1005))
    );
}

#[test]
fn ipv6_is_charged_48_bytes() {
    let (a, b) = (ip("fd00::1"), ip("fd00::2"));
    let mut sim = Simulator::new(5);
    let tx = Blaster {
        src: Some(SocketAddr::new(a, 1)),
        dst: Some(SocketAddr::new(b, 1)),
        to_send: 1,
        size: 1202,
        ..Default::default()
    };
    sim.add_node([a], tx).unwrap();
    let rx = sim.add_node([b], Blaster::default()).unwrap();
    sim.add_path(a, b, &spec("rate=10mbit")).unwrap();
    sim.run_until(secs(1));
    // 1202 + 48 = 1250 bytes = 1 ms.
    assert_eq!(
        sim.node(rx).first,
        Some(Instant::ZERO + Duration::from_millis(1))
    );
}

#[test]
fn unrouted_and_unowned_addresses_are_counted() {
    let (mut sim, tx, rx) = blaster_pair("rtt=2ms", 6);
    sim.node_mut(tx).dst = Some(sa("10.0.0.3", 1)); // no path
    sim.node_mut(tx).to_send = 3;
    sim.run_until(secs(1));
    assert_eq!(sim.stats().no_route, 3);
    // A path to an address nobody owns.
    sim.add_path(ip(A), ip("10.0.0.3"), &spec("rtt=2ms"))
        .unwrap();
    sim.node_mut(tx).to_send = 2;
    sim.run_until(secs(2));
    assert_eq!(sim.stats().unreachable, 2);
    assert_eq!(sim.node(rx).received, 0);
    assert_eq!(sim.stats().datagrams_sent, 5);
}

#[test]
fn timers_fire_once_per_deadline_and_stale_ones_are_ignored() {
    let (mut sim, tx, _) = blaster_pair("rtt=2ms", 7);
    sim.node_mut(tx).timer = Some(secs(5));
    sim.run_until(secs(1));
    // Move the deadline earlier: the 5 s event becomes stale.
    sim.node_mut(tx).timer = Some(secs(2));
    sim.run_until(secs(100));
    let b = sim.node(tx);
    assert_eq!(b.timeouts, 2); // at 2 s, then re-armed at 3 s, then stopped
    assert_eq!(sim.stats().timeouts, 2);
    assert_eq!(sim.now(), secs(100));
    assert!(!sim.step(), "nothing left to do");
}

#[test]
fn run_until_condition_stops_at_the_condition_or_deadline() {
    let (mut sim, id) = ping_setup("rtt=10ms", 8, 100, Duration::from_millis(10));
    let done = sim.run_until_condition(secs(60), |s| pinger(s, id).rtts().len() >= 5);
    assert!(done);
    // The fifth reply arrives at 40 ms + 10 ms.
    assert_eq!(sim.now(), Instant::ZERO + Duration::from_millis(50));
    let done = sim.run_until_condition(secs(2), |s| pinger(s, id).rtts().len() >= 1_000);
    assert!(!done);
    assert_eq!(sim.now(), secs(2));
}

#[test]
fn building_errors() {
    let mut sim: Simulator<EchoNode> = Simulator::new(0);
    sim.add_node([ip(A)], EchoNode::default()).unwrap();
    assert_eq!(
        sim.add_node([ip(A)], EchoNode::default()),
        Err(SimError::AddressInUse(ip(A)))
    );
    assert_eq!(
        sim.add_node([ip(B), ip(B)], EchoNode::default()),
        Err(SimError::AddressInUse(ip(B)))
    );
    assert_eq!(
        sim.add_node([], EchoNode::default()),
        Err(SimError::NoAddress)
    );
    assert_eq!(
        sim.add_path(ip(A), ip(A), &spec("")),
        Err(SimError::SelfPath(ip(A)))
    );
    sim.add_path(ip(A), ip(B), &spec("")).unwrap();
    assert_eq!(
        sim.add_path(ip(B), ip(A), &spec("")),
        Err(SimError::PathExists(ip(B), ip(A)))
    );
}

fn lossy_run(seed: u64, link: &str) -> (u64, u64) {
    let (mut sim, id) = ping_setup(link, seed, 2_000, Duration::from_micros(300));
    sim.run_until(secs(5));
    (sim.trace_hash(), pinger(&sim, id).lost())
}

#[test]
fn trace_hash_is_a_function_of_inputs_and_seed() {
    let lossy = "rtt=20ms,jitter=3ms,rate=20mbit,queue=20p,loss=2%,reorder=5%,dup=1%";
    assert_eq!(lossy_run(1, lossy), lossy_run(1, lossy));
    assert_ne!(lossy_run(1, lossy).0, lossy_run(2, lossy).0);
    // A link without randomness behaves the same whatever the seed.
    assert_eq!(
        lossy_run(1, "rtt=20ms,rate=20mbit").0,
        lossy_run(2, "rtt=20ms,rate=20mbit").0
    );
    // Different inputs, different hash.
    assert_ne!(lossy_run(1, "rtt=20ms").0, lossy_run(1, "rtt=21ms").0);
}
