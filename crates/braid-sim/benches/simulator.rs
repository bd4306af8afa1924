//! Simulator speed: a 50 MiB bulk transfer's worth of datagrams (≈36 000
//! data packets of 1452 bytes, each acknowledged) through the simulator,
//! against its peer measured in the same run: the same offers made directly
//! to two bare `Link`s, with no event loop or nodes. The ratio is the cost
//! of the event loop per datagram relative to the link model itself.
//!
//! Run with `cargo bench -p braid-sim --bench simulator`.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant as WallInstant};

use braid_core::Instant;
use braid_link::{Direction, Link, LinkSpec};
use braid_sim::{Datagram, Node, Simulator};
use bytes::Bytes;

const PACKETS: u64 = 36_000;
const SIZE: usize = 1452;
const WINDOW: u64 = 400;
const SPEC: &str = "rtt=50ms,rate=100mbit,queue=1bdp";

/// A sender keeping `WINDOW` packets in flight, or a receiver acking each
/// packet with 40 bytes.
enum Bulk {
    Sender {
        me: SocketAddr,
        peer: SocketAddr,
        sent: u64,
        acked: u64,
        payload: Bytes,
    },
    Receiver {
        acks: Vec<Datagram>,
    },
}

impl Node for Bulk {
    fn handle_datagram(
        &mut self,
        _now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        _payload: Bytes,
    ) {
        match self {
            Bulk::Sender { acked, .. } => *acked += 1,
            Bulk::Receiver { acks } => acks.push(Datagram {
                src: dst,
                dst: src,
                payload: Bytes::from_static(&[0; 40]),
            }),
        }
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        match self {
            Bulk::Sender {
                me,
                peer,
                sent,
                acked,
                payload,
            } => (*sent < PACKETS && *sent - *acked < WINDOW).then(|| {
                *sent += 1;
                Datagram {
                    src: *me,
                    dst: *peer,
                    payload: payload.clone(),
                }
            }),
            Bulk::Receiver { acks } => acks.pop(),
        }
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

fn simulate() -> (Duration, u64) {
    let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let start = WallInstant::now();
    let mut sim = Simulator::new(1);
    let sender = Bulk::Sender {
        me: SocketAddr::new(a, 1),
        peer: SocketAddr::new(b, 1),
        sent: 0,
        acked: 0,
        payload: Bytes::from(vec![7u8; SIZE]),
    };
    let id = sim.add_node([a], sender).unwrap();
    sim.add_node([b], Bulk::Receiver { acks: Vec::new() })
        .unwrap();
    sim.add_path(a, b, &SPEC.parse().unwrap()).unwrap();
    sim.run_until(Instant::ZERO + Duration::from_secs(600));
    let Bulk::Sender { acked, .. } = sim.node(id) else {
        unreachable!()
    };
    assert_eq!(*acked, PACKETS);
    (start.elapsed(), sim.stats().datagrams_sent)
}

/// The peer: the same number of offers to bare links, paced like the
/// simulated sender (one data packet per serialization time).
fn links_only() -> Duration {
    let spec: LinkSpec = SPEC.parse().unwrap();
    let start = WallInstant::now();
    let mut fwd = Link::new(spec.params(Direction::AToB), 1);
    let mut back = Link::new(spec.params(Direction::BToA), 2);
    let gap = Duration::from_nanos(((SIZE + 28) * 8 * 10) as u64);
    let mut now = Instant::ZERO;
    for _ in 0..PACKETS {
        std::hint::black_box(fwd.offer(now, SIZE + 28));
        std::hint::black_box(back.offer(now, 40 + 28));
        now += gap;
    }
    start.elapsed()
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T, time: impl Fn(&T) -> Duration) -> T {
    (0..n).map(|_| f()).min_by_key(|r| time(r)).unwrap()
}

fn main() {
    let (sim_time, datagrams) = best_of(5, simulate, |r| r.0);
    let peer_time = best_of(5, links_only, |d| *d);
    println!(
        "simulator: {datagrams} datagrams in {:.1} ms ({:.2} M datagrams/s)",
        sim_time.as_secs_f64() * 1e3,
        datagrams as f64 / sim_time.as_secs_f64() / 1e6
    );
    println!(
        "links only: {} offers in {:.1} ms",
        2 * PACKETS,
        peer_time.as_secs_f64() * 1e3
    );
    println!(
        "simulator_over_links = {:.2}",
        sim_time.as_secs_f64() / peer_time.as_secs_f64()
    );
}
