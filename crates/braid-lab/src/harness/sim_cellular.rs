//! Throughput and added delay of one bulk transfer on a variable-rate
//! (cellular) link, in the simulator: issue 25 item 5's measurement.
//!
//! One connection with the chosen controller sends without pause for a
//! fixed span of virtual time over the path (typically a Mahimahi trace as
//! the client → server rate). Beside it, a pinger on the same client host
//! sends small probes through the *same* queue to an echo on the server
//! host, as `ping` beside `iperf` does in the issue's emulator runs. The
//! report gives the bytes delivered (throughput) and the probes' RTTs;
//! *added delay* is a probe's RTT minus the path's base RTT (the link
//! spec's propagation delay both ways), so it is the queuing the transfer
//! caused.
//!
//! ```
//! use braid_lab::harness::sim_cellular::{run, SimCellularConfig};
//! use std::time::Duration;
//! let cfg = SimCellularConfig {
//!     link: "rtt=20ms,rate=20mbit,queue=1bdp".parse().unwrap(),
//!     duration: Duration::from_secs(3),
//!     ..SimCellularConfig::default()
//! };
//! let r = run(&cfg).unwrap();
//! assert!(r.throughput_mbps > 10.0 && r.throughput_mbps < 20.0, "{}", r.throughput_mbps);
//! assert!(r.pings_answered > 0 && r.added_delay_median_ms >= 0.0);
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use braid_core::{splitmix64, Instant};
use super::sim_endpoints::seeded_pair;
use braid_link::{LinkSpec, LinkStats};
use braid_proto::{CcAlgorithm, ConnectError, ConnectionHandle, Endpoint, EndpointConfig, Event, TransportConfig};
use braid_sim::nodes::{EchoNode, PingNode};
use braid_sim::{Datagram, Node, SimError, Simulator};
use bytes::Bytes;

use super::sim_transfer::WallClock;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCellularConfig {
    /// The path; the transfer goes from a to b.
    pub link: LinkSpec,
    /// Congestion controller of the transfer.
    pub cc: CcAlgorithm,
    /// A second bulk transfer from the same host with this controller,
    /// sharing the path from the start (fairness and competition); `None`:
    /// the transfer runs alone.
    pub competitor: Option<CcAlgorithm>,
    /// Virtual time the transfer runs (and the pings with it).
    pub duration: Duration,
    /// Time between two pings.
    pub ping_interval: Duration,
    /// Seed of the simulator, its links and both endpoints.
    pub seed: u64,
    /// Stop once the wall clock passes this (the report covers the
    /// virtual time reached); `None`: no limit.
    pub wall_deadline: Option<std::time::Instant>,
}

impl Default for SimCellularConfig {
    /// `rtt=40ms,rate=20mbit,queue=1mb`, CUBIC, 60 s, a ping every 50 ms,
    /// seed 1.
    fn default() -> Self {
        SimCellularConfig {
            link: "rtt=40ms,rate=20mbit,queue=1mb".parse().expect("the default link spec is valid"),
            cc: CcAlgorithm::default(),
            competitor: None,
            duration: Duration::from_secs(60),
            ping_interval: Duration::from_millis(50),
            seed: 1,
            wall_deadline: None,
        }
    }
}

/// The outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimCellularReport {
    /// Bytes the receiver got over the run.
    pub bytes: u64,
    /// Virtual seconds simulated (the configured duration unless the wall
    /// deadline cut the run short).
    pub virtual_secs: f64,
    /// `bytes` over `virtual_secs`, Mbit/s (all transfers).
    pub throughput_mbps: f64,
    /// Per transfer (the measured one first, then the competitor):
    /// application bytes the receiver acknowledged, over `virtual_secs`,
    /// Mbit/s.
    pub flow_mbps: Vec<f64>,
    /// Jain's fairness index over `flow_mbps` (two transfers only).
    pub jain: Option<f64>,
    /// The path's base RTT (propagation both ways), ms.
    pub base_rtt_ms: f64,
    /// Pings sent and answered.
    pub pings_sent: u64,
    /// Pings answered.
    pub pings_answered: u64,
    /// Median and 95th percentile ping RTT, ms (0 without answers).
    pub ping_rtt_median_ms: f64,
    /// 95th percentile ping RTT, ms.
    pub ping_rtt_p95_ms: f64,
    /// Median ping RTT minus the base RTT, ms (never negative).
    pub added_delay_median_ms: f64,
    /// 95th percentile ping RTT minus the base RTT, ms.
    pub added_delay_p95_ms: f64,
    /// Packets the sender declared lost.
    pub packets_lost: u64,
    /// Congestion events at the sender.
    pub congestion_events: u64,
    /// Retransmission timeouts at the sender.
    pub rto_count: u64,
    /// Sender's minimum RTT, ms.
    pub min_rtt_ms: f64,
    /// The simulator's trace hash, 16 hex digits: equal for equal configs.
    pub trace_hash: String,
    /// Counters of the client → server link (the data and ping direction).
    pub forward_link: LinkStats,
}

/// Progress of a running simulation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Virtual time so far, seconds.
    pub virtual_secs: f64,
    /// Bytes received so far.
    pub bytes_delivered: u64,
}

/// The simulation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimCellularError {
    /// A config field is out of range.
    #[error("invalid sim cellular config `{field}`: expected {expected}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// The allowed form.
        expected: &'static str,
    },
    /// The client could not open a connection.
    #[error("cannot connect: {0}")]
    Connect(#[from] ConnectError),
    /// The simulated network could not be built.
    #[error("cannot build the simulated network: {0}")]
    Network(#[from] SimError),
}

const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// The port pings go to and come from; the transport uses others.
const PING_PORT: u16 = 7;
/// Bytes of a ping (ICMP echo of `ping`'s default 56-byte payload).
const PING_SIZE: usize = 64;
/// Application message size of the bulk sender.
const MESSAGE: usize = 64 << 10;

/// Run the scenario.
pub fn run(cfg: &SimCellularConfig) -> Result<SimCellularReport, SimCellularError> {
    run_with_progress(cfg, |_| {})
}

/// Run the scenario, calling `progress` every 100 ms of virtual time.
pub fn run_with_progress(
    cfg: &SimCellularConfig,
    mut progress: impl FnMut(&Progress),
) -> Result<SimCellularReport, SimCellularError> {
    if cfg.duration.is_zero() {
        return Err(SimCellularError::InvalidConfig { field: "duration", expected: "a positive duration" });
    }
    if cfg.ping_interval.is_zero() {
        return Err(SimCellularError::InvalidConfig { field: "ping_interval", expected: "a positive duration" });
    }
    let client_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let client_addr = SocketAddr::new(client_ip, 40_000);
    let server_addr = SocketAddr::new(server_ip, 4_433);
    let transport = TransportConfig {
        congestion_control: cfg.cc,
        handshake_timeout: cfg.duration,
        idle_timeout: cfg.duration,
        ..TransportConfig::default()
    };
    let client_transport = transport.clone();
    let (server, mut client) = seeded_pair(
        cfg.seed,
        EndpointConfig { accept_incoming: true, transport: transport.clone(), ..EndpointConfig::default() },
        EndpointConfig { accept_incoming: false, transport, ..EndpointConfig::default() },
    );
    let mut conns = vec![client.connect(Instant::ZERO, server_addr)?];
    if let Some(cc) = cfg.competitor {
        let t = TransportConfig { congestion_control: cc, ..client_transport.clone() };
        conns.push(client.connect_with(Instant::ZERO, server_addr, t)?);
    }
    let count = (cfg.duration.as_nanos() / cfg.ping_interval.as_nanos()).max(1) as u64;
    let pinger = PingNode::new(
        SocketAddr::new(client_ip, PING_PORT),
        SocketAddr::new(server_ip, PING_PORT),
        count,
        cfg.ping_interval,
        PING_SIZE,
    );
    let mut client_host = Host::new(client_addr, client, Side::Client { conns, pinger, message: Bytes::from(vec![0u8; MESSAGE]) });
    client_host.fill();
    let server_host = Host::new(server_addr, server, Side::Server { echo: EchoNode::default(), conns: Vec::new() });

    let mut sim = Simulator::new(splitmix64(cfg.seed ^ 0x5151));
    let client_id = sim.add_node([client_ip], client_host)?;
    let server_id = sim.add_node([server_ip], server_host)?;
    sim.add_path(client_ip, server_ip, &cfg.link)?;

    let deadline = Instant::ZERO + cfg.duration;
    let mut wall = WallClock::new(cfg.wall_deadline);
    let mut next_progress = Instant::ZERO + PROGRESS_INTERVAL;
    sim.run_until_condition(deadline, |sim| {
        if wall.passed() {
            return true;
        }
        if sim.now() >= next_progress {
            next_progress = sim.now() + PROGRESS_INTERVAL;
            progress(&Progress {
                virtual_secs: sim.now().since_epoch().as_secs_f64(),
                bytes_delivered: sim.node(server_id).received(),
            });
        }
        false
    });

    let virtual_secs = sim.now().since_epoch().as_secs_f64().min(cfg.duration.as_secs_f64());
    let bytes = sim.node(server_id).received();
    let base_rtt = cfg.link.rtt();
    let client = sim.node(client_id);
    let Side::Client { pinger, conns, .. } = &client.side else {
        unreachable!("the first node is the client");
    };
    let mut rtts: Vec<f64> = pinger.rtts().iter().map(|d| d.as_secs_f64() * 1e3).collect();
    rtts.sort_by(f64::total_cmp);
    let base_ms = base_rtt.as_secs_f64() * 1e3;
    let median = quantile(&rtts, 0.5);
    let p95 = quantile(&rtts, 0.95);
    let stats = client.endpoint.connection_stats(conns[0]);
    let flow_mbps: Vec<f64> = conns
        .iter()
        .map(|&h| {
            let acked = client.endpoint.connection_stats(h).map_or(0, |s| s.stream_bytes_acked);
            if virtual_secs > 0.0 { acked as f64 * 8.0 / virtual_secs / 1e6 } else { 0.0 }
        })
        .collect();
    let jain = (flow_mbps.len() > 1).then(|| {
        let sum: f64 = flow_mbps.iter().sum();
        let squares: f64 = flow_mbps.iter().map(|x| x * x).sum();
        if squares > 0.0 { sum * sum / (flow_mbps.len() as f64 * squares) } else { 1.0 }
    });
    Ok(SimCellularReport {
        bytes,
        virtual_secs,
        throughput_mbps: if virtual_secs > 0.0 { bytes as f64 * 8.0 / virtual_secs / 1e6 } else { 0.0 },
        flow_mbps,
        jain,
        base_rtt_ms: base_ms,
        pings_sent: pinger.sent(),
        pings_answered: rtts.len() as u64,
        ping_rtt_median_ms: median,
        ping_rtt_p95_ms: p95,
        added_delay_median_ms: (median - base_ms).max(0.0),
        added_delay_p95_ms: (p95 - base_ms).max(0.0),
        packets_lost: stats.as_ref().map_or(0, |s| s.packets_lost),
        congestion_events: stats.as_ref().map_or(0, |s| s.congestion_events),
        rto_count: stats.as_ref().map_or(0, |s| s.rto_count),
        min_rtt_ms: stats.as_ref().map_or(0.0, |s| s.min_rtt.as_secs_f64() * 1e3),
        trace_hash: format!("{:016x}", sim.trace_hash()),
        forward_link: sim.link_stats(client_ip, server_ip).cloned().unwrap_or_default(),
    })
}

/// The `q` quantile of sorted values (nearest rank), 0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}


/// What runs on a host beside its endpoint.
enum Side {
    /// The bulk sender and the pinger.
    Client { conns: Vec<ConnectionHandle>, pinger: PingNode, message: Bytes },
    /// The bulk receiver (its accepted connections) and the echo.
    Server { echo: EchoNode, conns: Vec<ConnectionHandle> },
}

/// A simulated host: an endpoint, and a ping or echo node on port 7.
struct Host {
    addr: SocketAddr,
    endpoint: Endpoint,
    side: Side,
    buf: Vec<u8>,
}

impl Host {
    fn new(addr: SocketAddr, endpoint: Endpoint, side: Side) -> Host {
        Host { addr, endpoint, side, buf: Vec::with_capacity(2048) }
    }

    /// Application bytes received in order, all connections: counted by
    /// the stream, not by whole messages, so that a slow link is not
    /// measured in steps of a message.
    fn received(&self) -> u64 {
        match &self.side {
            Side::Server { conns, .. } => conns
                .iter()
                .filter_map(|&h| self.endpoint.connection_stats(h))
                .map(|s| s.stream_bytes_received)
                .sum(),
            Side::Client { .. } => 0,
        }
    }

    /// Queue messages on every transfer until each refuses more.
    fn fill(&mut self) {
        if let Side::Client { conns, message, .. } = &self.side {
            for &h in conns {
                // Blocked: wait for `Writable`; any other error ends the
                // transfer (its bytes so far still count).
                while self.endpoint.send_message(h, message.clone()).is_ok() {}
            }
        }
    }

    /// React to the endpoint's events; returns whether there were any.
    fn drive(&mut self) -> bool {
        let mut any = false;
        while let Some(event) = self.endpoint.poll_event() {
            any = true;
            match event {
                Event::Writable(_) => self.fill(),
                Event::Accepted(h) => {
                    if let Side::Server { conns, .. } = &mut self.side {
                        conns.push(h);
                    }
                }
                // Read (and drop) what arrived, so flow control opens.
                Event::Readable(h) => while let Ok(Some(_)) = self.endpoint.recv_message(h) {},
                _ => {}
            }
        }
        any
    }
}

impl Node for Host {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        if dst.port() == PING_PORT {
            match &mut self.side {
                Side::Client { pinger, .. } => pinger.handle_datagram(now, src, dst, payload),
                Side::Server { echo, .. } => echo.handle_datagram(now, src, dst, payload),
            }
            return;
        }
        self.endpoint.handle_datagram(now, src, payload);
        self.drive();
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        let side = match &mut self.side {
            Side::Client { pinger, .. } => pinger.poll_transmit(now),
            Side::Server { echo, .. } => echo.poll_transmit(now),
        };
        if side.is_some() {
            return side;
        }
        loop {
            if let Some(t) = self.endpoint.poll_transmit(now, 1, &mut self.buf) {
                return Some(Datagram {
                    src: self.addr,
                    dst: t.destination,
                    payload: Bytes::copy_from_slice(&self.buf[..t.size]),
                });
            }
            if !self.drive() {
                return None;
            }
        }
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        let side = match &mut self.side {
            Side::Client { pinger, .. } => pinger.poll_timeout(),
            Side::Server { echo, .. } => echo.poll_timeout(),
        };
        match (side, self.endpoint.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.side {
            Side::Client { pinger, .. } => pinger.handle_timeout(now),
            Side::Server { echo, .. } => echo.handle_timeout(now),
        }
        self.endpoint.handle_timeout(now);
        self.drive();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(link: &str, cc: CcAlgorithm, secs: u64) -> SimCellularConfig {
        SimCellularConfig {
            link: link.parse().unwrap(),
            cc,
            duration: Duration::from_secs(secs),
            ..SimCellularConfig::default()
        }
    }

    #[test]
    fn pings_share_the_transfers_queue() {
        // CUBIC fills a 4-BDP buffer: the pings wait behind it.
        let r = run(&cfg("rtt=20ms,rate=10mbit,queue=4bdp", CcAlgorithm::Cubic, 10)).unwrap();
        assert!(r.throughput_mbps > 8.0, "{r:?}");
        assert!(r.added_delay_median_ms > 20.0, "{r:?}");
        assert!(r.ping_rtt_median_ms > r.base_rtt_ms);
        assert!(r.pings_sent >= 190 && r.pings_answered > 150, "{r:?}");
    }

    #[test]
    fn a_competitor_shares_the_link_and_is_reported() {
        let mut c = cfg("rtt=20ms,rate=10mbit,queue=1bdp", CcAlgorithm::Cubic, 20);
        c.competitor = Some(CcAlgorithm::Cubic);
        let r = run(&c).unwrap();
        assert_eq!(r.flow_mbps.len(), 2);
        let sum: f64 = r.flow_mbps.iter().sum();
        assert!(sum > 8.0 && sum < 10.5, "{r:?}");
        assert!(r.jain.unwrap() > 0.8, "{r:?}");
    }

    #[test]
    fn same_seed_same_run() {
        let c = cfg("rtt=20ms,rate=10mbit,queue=1bdp", CcAlgorithm::Cubic, 2);
        assert_eq!(run(&c).unwrap().trace_hash, run(&c).unwrap().trace_hash);
    }

    #[test]
    fn zero_duration_is_invalid() {
        let mut c = cfg("rtt=20ms", CcAlgorithm::Cubic, 1);
        c.duration = Duration::ZERO;
        let e = run(&c).unwrap_err();
        assert!(e.to_string().contains("duration"), "{e}");
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.95), 4.0);
    }
}
