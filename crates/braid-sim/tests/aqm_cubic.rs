//! One CUBIC flow (braid-proto's controller, the transport's default)
//! through `rtt=40ms,rate=10mbit,queue=4bdp`: drop-tail lets it fill the
//! 4-BDP buffer (up to 160 ms of queue), while CoDel (RFC 8289) keeps the
//! queueing delay near its 5 ms target without costing throughput.
//!
//! Queueing delay is measured per data packet: the sender notes when each
//! datagram left, the receiver when it arrived; the difference minus the
//! 20 ms one-way delay and the packet's own transmission time is the time
//! it spent queued.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use braid_core::Instant;
use braid_link::LinkSpec;
use braid_proto::{CcAlgorithm, Endpoint, EndpointConfig, Event, SendError, TransportConfig};
use braid_sim::{Simulator, IPV4_UDP_OVERHEAD};
use bytes::Bytes;

mod support;
use support::{App, EndpointNode};

/// Send times of datagrams in flight (by payload hash), and the queueing
/// delays and payload bytes seen by the receiver, with arrival times.
#[derive(Default)]
struct Log {
    sent: HashMap<u64, Instant>,
    queueing: Vec<(Instant, Duration)>,
    received: Vec<(Instant, u64)>,
}

fn key(payload: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}

/// The application of either end: the sender keeps its buffer full and
/// notes send times, the receiver notes arrivals.
struct Host {
    /// The sender's connection; `None` on the receiver.
    conn: Option<braid_proto::ConnectionHandle>,
    log: Rc<RefCell<Log>>,
}

/// Bytes of application data per message.
const MESSAGE: usize = 64 << 10;
/// One-way propagation delay and rate of the path.
const DELAY: Duration = Duration::from_millis(20);
const RATE_BPS: f64 = 10e6;

impl App for Host {
    /// React to the endpoint's events; returns whether there were any.
    fn drive(&mut self, endpoint: &mut Endpoint, now: Instant) -> bool {
        let mut any = false;
        while let Some(event) = endpoint.poll_event() {
            any = true;
            match event {
                Event::Writable(h) if Some(h) == self.conn => self.fill(endpoint),
                Event::Readable(h) => {
                    while let Ok(Some(m)) = endpoint.recv_message(h) {
                        self.log.borrow_mut().received.push((now, m.len() as u64));
                    }
                }
                _ => {}
            }
        }
        any
    }

    /// Receiver: the time the datagram spent queued on the link.
    fn on_receive(&mut self, now: Instant, payload: &Bytes) {
        if self.conn.is_none() {
            let mut log = self.log.borrow_mut();
            if let Some(sent) = log.sent.remove(&key(payload)) {
                let tx = Duration::from_secs_f64(
                    (payload.len() + IPV4_UDP_OVERHEAD) as f64 * 8.0 / RATE_BPS,
                );
                let queued = (now - sent).saturating_sub(DELAY + tx);
                log.queueing.push((now, queued));
            }
        }
    }

    /// Sender: when the datagram left.
    fn on_transmit(&mut self, now: Instant, payload: &Bytes) {
        if self.conn.is_some() {
            self.log.borrow_mut().sent.insert(key(payload), now);
        }
    }
}

impl Host {
    /// Keep the send buffer full: a bulk transfer.
    fn fill(&mut self, endpoint: &mut Endpoint) {
        let Some(conn) = self.conn else { return };
        loop {
            match endpoint.send_message(conn, Bytes::from(vec![0x5a; MESSAGE])) {
                Ok(()) => {}
                Err(SendError::Blocked(_)) => return,
                Err(e) => panic!("send failed: {e}"),
            }
        }
    }
}

/// Median queueing delay (ms) and goodput over the link rate, from 10 s to
/// 40 s of a bulk CUBIC transfer over `link`.
fn run(link: &str) -> (f64, f64) {
    let client_addr: SocketAddr = "10.0.0.1:40000".parse().unwrap();
    let server_addr: SocketAddr = "10.0.0.2:4433".parse().unwrap();
    let transport = TransportConfig {
        congestion_control: CcAlgorithm::Cubic,
        idle_timeout: Duration::from_secs(600),
        handshake_timeout: Duration::from_secs(600),
        ..TransportConfig::default()
    };
    let log = Rc::new(RefCell::new(Log::default()));
    let server = Endpoint::new(
        EndpointConfig {
            accept_incoming: true,
            transport: transport.clone(),
            ..EndpointConfig::default()
        },
        11,
    );
    let mut client = Endpoint::new(
        EndpointConfig {
            accept_incoming: false,
            transport,
            ..EndpointConfig::default()
        },
        12,
    );
    let conn = client.connect(Instant::ZERO, server_addr).unwrap();
    let mut sender = EndpointNode::new(client, Host { conn: Some(conn), log: log.clone() }, client_addr);
    sender.app.fill(&mut sender.endpoint);
    let receiver = EndpointNode::new(server, Host { conn: None, log: log.clone() }, server_addr);
    let mut sim = Simulator::new(3);
    sim.add_node([client_addr.ip()], sender).unwrap();
    sim.add_node([server_addr.ip()], receiver).unwrap();
    sim.add_path(
        client_addr.ip(),
        server_addr.ip(),
        &link.parse::<LinkSpec>().unwrap(),
    )
    .unwrap();
    sim.run_until(Instant::ZERO + Duration::from_secs(40));
    let log = log.borrow();
    let from = Instant::ZERO + Duration::from_secs(10);
    let mut q: Vec<f64> = log
        .queueing
        .iter()
        .filter(|(t, _)| *t >= from)
        .map(|(_, d)| d.as_secs_f64() * 1e3)
        .collect();
    q.sort_by(f64::total_cmp);
    let median = q[q.len() / 2];
    let bytes: u64 = log
        .received
        .iter()
        .filter(|(t, _)| *t >= from)
        .map(|(_, b)| b)
        .sum();
    let goodput = bytes as f64 * 8.0 / 30.0 / RATE_BPS;
    (median, goodput)
}

#[test]
fn codel_keeps_cubic_queueing_delay_low_where_drop_tail_lets_it_grow() {
    let (tail_delay, tail_goodput) = run("rtt=40ms,rate=10mbit,queue=4bdp");
    let (codel_delay, codel_goodput) = run("rtt=40ms,rate=10mbit,queue=4bdp,aqm=codel");
    println!(
        "drop-tail: median queueing {tail_delay:.1} ms, goodput {tail_goodput:.3} of the rate"
    );
    println!(
        "codel:     median queueing {codel_delay:.1} ms, goodput {codel_goodput:.3} of the rate"
    );
    assert!(
        tail_delay > 100.0,
        "drop-tail median queueing {tail_delay} ms"
    );
    assert!(codel_delay < 20.0, "codel median queueing {codel_delay} ms");
    assert!(
        codel_goodput >= 0.85,
        "codel goodput {codel_goodput} of the rate"
    );
    assert!(
        tail_goodput >= 0.85,
        "drop-tail goodput {tail_goodput} of the rate"
    );
}
