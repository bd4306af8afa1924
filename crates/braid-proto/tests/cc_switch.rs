//! Switching a live connection's congestion controller
//! ([`Endpoint::set_congestion_control`]) mid-transfer, for every ordered
//! pair of controllers, over the in-memory network of `support` (10 ms
//! one way, 1% random loss, so the window is the limit), in virtual time.
//!
//! The connection-level half of the property; the bottleneck half (no
//! burst, throughput back within a few round trips) is braid-recovery's
//! `tests/switch.rs`. Here: the new controller starts from the old one's
//! window, what is in flight stays within it, the transfer completes in
//! order, and the path's RTT estimate is not reset by the switch.

mod support;

use std::time::Duration;

use braid_proto::{CcAlgorithm, SendError, TransportConfig};
use support::*;

/// Sends `n` messages of `len` bytes from A to B, switching A's controller
/// to `to` after `switch_after` messages were read; returns the messages
/// read, the window before and after the switch, the bytes in flight at it,
/// and the smoothed RTT before and after.
struct Switched {
    got: usize,
    in_order: bool,
    window: (u64, u64),
    in_flight: u64,
    srtt: (Duration, Duration),
    name: &'static str,
}

fn run(from: CcAlgorithm, to: CcAlgorithm, seed: u64) -> Switched {
    let transport = TransportConfig { congestion_control: from, ..TransportConfig::default() };
    let mut net = Net::insecure(seed, transport);
    net.loss = 0.01;
    let (n, len, switch_after) = (1_500usize, 1_000usize, 500usize);
    let conn = net.a.connect(net.now, B.parse().unwrap()).unwrap();
    let mut next = 0;
    let mut got = Vec::new();
    let mut server = None;
    let mut out = Switched { got: 0, in_order: true, window: (0, 0), in_flight: 0, srtt: Default::default(), name: "" };
    let mut switched = false;
    net.run_until(Duration::from_secs(120), |net| {
        while next < n {
            match net.a.send_message(conn, message(next, len)) {
                Ok(()) => next += 1,
                Err(SendError::Blocked(_)) => break,
                Err(e) => panic!("send failed: {e}"),
            }
        }
        server = server.or(net.accepted());
        if let Some(h) = server {
            while let Ok(Some(m)) = net.b.recv_message(h) {
                got.push(m);
            }
        }
        if !switched && got.len() >= switch_after {
            switched = true;
            let before = net.a.paths(conn)[0].clone();
            out.window.0 = net.a.congestion_controller(conn).unwrap().window();
            out.srtt.0 = before.smoothed_rtt;
            out.in_flight = before.bytes_in_flight;
            net.a.set_congestion_control(net.now, conn, to).unwrap();
            let cc = net.a.congestion_controller(conn).unwrap();
            out.window.1 = cc.window();
            out.name = cc.name();
            out.srtt.1 = net.a.paths(conn)[0].smoothed_rtt;
        }
        got.len() == n
    });
    out.got = got.len();
    out.in_order = got.iter().enumerate().all(|(i, m)| *m == message(i, len));
    out
}

#[test]
fn every_pair_switches_mid_transfer_and_completes() {
    let mut failures = Vec::new();
    for (i, from) in CcAlgorithm::ALL.into_iter().enumerate() {
        for (j, to) in CcAlgorithm::ALL.into_iter().enumerate() {
            let r = run(from, to, 40 + (i * 8 + j) as u64);
            let tag = format!("{from} -> {to}");
            if r.got != 1_500 || !r.in_order {
                failures.push(format!("{tag}: {} of 1500 messages, in order: {}", r.got, r.in_order));
            }
            if r.name != to.as_str() {
                failures.push(format!("{tag}: runs {}", r.name));
            }
            // Continuity: the old window, raised at most to the new
            // controller's floor (two or four datagrams).
            if r.window.1 < r.window.0 || r.window.1 > r.window.0.max(4 * 1_500) {
                failures.push(format!("{tag}: window {} -> {}", r.window.0, r.window.1));
            }
            if r.in_flight > r.window.1 {
                failures.push(format!("{tag}: {} in flight over the new window {}", r.in_flight, r.window.1));
            }
            if r.srtt.0 != r.srtt.1 || r.srtt.0.is_zero() {
                failures.push(format!("{tag}: smoothed RTT {:?} -> {:?}", r.srtt.0, r.srtt.1));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_unknown_connection_is_an_error() {
    let mut net = Net::insecure(1, TransportConfig::default());
    let conn = net.a.connect(net.now, B.parse().unwrap()).unwrap();
    let unknown = braid_proto::ConnectionHandle(conn.0.wrapping_add(1_000));
    assert!(net.a.set_congestion_control(net.now, unknown, CcAlgorithm::Bbr).is_err());
    net.a.set_congestion_control(net.now, conn, CcAlgorithm::Bbr).unwrap();
    assert_eq!(net.a.congestion_controller(conn).unwrap().name(), "bbr");
}
