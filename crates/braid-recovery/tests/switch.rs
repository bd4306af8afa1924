//! Live congestion-controller switch ([`CcAlgorithm::take_over`]) against
//! a simulated bottleneck, in virtual time, for every ordered pair of
//! controllers.
//!
//! The model: one sender paced by its controller (token bucket ten
//! datagrams deep), a bottleneck of `rate` bytes/s behind a drop-tail queue
//! of one bandwidth-delay product, propagation delay `base_rtt`, one
//! acknowledgement per packet, and RACK-style loss detection (RFC 8985
//! §6.2). The sender runs controller A until its flow is established, then
//! hands the connection to controller B, as `Path::set_congestion_control`
//! does in braid-proto: same bytes in flight, same RTT estimates.
//!
//! What a switch must not do (issue 20, errata): burst (B's window starts
//! at A's, so what is in flight fits and nothing more is released at once)
//! or stall (the flow keeps delivering every round trip, and within a few
//! round trips delivers a large share of the bottleneck again).

use std::collections::VecDeque;
use std::time::Duration;

use braid_core::Instant;
use braid_recovery::{Acked, CcAlgorithm, CongestionController, RttEstimate};
use proptest::prelude::*;

const MSS: u64 = 1_200;

struct Link {
    rate: f64,
    base_rtt: Duration,
    queue: u64,
}

#[derive(Debug, Default)]
struct Outcome {
    /// Window of A just before, and of B just after, the switch.
    window_before: u64,
    window_after: u64,
    in_flight_at_switch: u64,
    /// Bytes sent per base RTT, from the start.
    sent_per_rtt: Vec<u64>,
    /// Bytes delivered per base RTT.
    delivered_per_rtt: Vec<u64>,
}

/// Runs A for `switch_at`, then B until `end`.
fn run(a: CcAlgorithm, b: CcAlgorithm, link: &Link, switch_at: Duration, end: Duration) -> Outcome {
    let mut cc: Box<dyn CongestionController> = a.build(MSS, 10 * MSS);
    let mut out = Outcome::default();
    let rtt_slots = (end.as_secs_f64() / link.base_rtt.as_secs_f64()).ceil() as usize + 1;
    out.sent_per_rtt = vec![0; rtt_slots];
    out.delivered_per_rtt = vec![0; rtt_slots];
    let slot = |t: Instant| ((t - Instant::ZERO).as_secs_f64() / link.base_rtt.as_secs_f64()) as usize;
    let serialize = |len: u64| Duration::from_secs_f64(len as f64 / link.rate);
    // In flight, in send order: (sent, ack arrival or None if dropped).
    let mut flight: VecDeque<(Instant, Option<Instant>)> = VecDeque::new();
    let mut flight_bytes = 0u64;
    let mut busy_until = Instant::ZERO;
    let mut credit = 10.0 * MSS as f64;
    let mut credit_at = Instant::ZERO;
    let mut min_rtt: Option<Duration> = None;
    let mut srtt: Option<Duration> = None;
    let mut latest = Duration::ZERO;
    let mut switched = false;
    let step = Duration::from_micros(50);
    let mut now = Instant::ZERO;
    let end = Instant::ZERO + end;
    while now < end {
        if !switched && now >= Instant::ZERO + switch_at {
            switched = true;
            let rtt = srtt.map(|s| RttEstimate { latest, smoothed: s, min: min_rtt.unwrap_or(s) });
            out.window_before = cc.window();
            out.in_flight_at_switch = flight_bytes;
            cc = b.take_over(now, cc.as_ref(), MSS, 10 * MSS, flight_bytes, rtt);
            out.window_after = cc.window();
        }
        // Acknowledgements and losses, in send order.
        let mut acked_any = false;
        let mut lost = 0u64;
        let mut newest_lost = Instant::ZERO;
        let mut newest_acked: Option<Instant> = None;
        // Delivered packets whose ACK has arrived, in order; drops older
        // than a quarter RTT before the newest acknowledged are lost.
        let mut i = 0;
        while i < flight.len() {
            let (sent, arrival) = flight[i];
            match arrival {
                Some(at) if at <= now => {
                    flight.remove(i);
                    flight_bytes -= MSS;
                    out.delivered_per_rtt[slot(now).min(rtt_slots - 1)] += MSS;
                    let rtt = at - sent;
                    latest = rtt;
                    min_rtt = Some(min_rtt.map_or(rtt, |m| m.min(rtt)));
                    srtt = Some(srtt.map_or(rtt, |s| (s * 7 + rtt) / 8));
                    let est = RttEstimate { latest: rtt, smoothed: srtt.unwrap(), min: min_rtt.unwrap() };
                    cc.on_ack(now, &Acked { sent_time: sent, bytes: MSS, app_limited: false, rtt: est, one_way_delay_us: None });
                    acked_any = true;
                    newest_acked = Some(sent);
                }
                Some(_) => break,
                None => i += 1,
            }
        }
        if acked_any {
            cc.on_ack_end(now, flight_bytes);
        }
        if let (Some(newest), Some(m)) = (newest_acked, min_rtt) {
            let reo = (m / 4).max(Duration::from_millis(1));
            let mut j = 0;
            while j < flight.len() {
                let (sent, arrival) = flight[j];
                if sent + reo > newest {
                    break;
                }
                if arrival.is_none() {
                    flight.remove(j);
                    flight_bytes -= MSS;
                    lost += MSS;
                    newest_lost = sent;
                } else {
                    j += 1;
                }
            }
        }
        if lost > 0 {
            cc.on_congestion_event(now, newest_lost, lost, false);
        }
        // Send while window and pacer allow.
        let rate = cc.pacing_rate(srtt.unwrap_or(Duration::from_millis(100)));
        credit = (credit + (now - credit_at).as_secs_f64() * rate).min(10.0 * MSS as f64);
        credit_at = now;
        while flight_bytes + MSS <= cc.window() && credit >= MSS as f64 {
            credit -= MSS as f64;
            flight_bytes += MSS;
            cc.on_sent(now, MSS, flight_bytes);
            out.sent_per_rtt[slot(now).min(rtt_slots - 1)] += MSS;
            let backlog = busy_until.saturating_duration_since(now).as_secs_f64() * link.rate;
            if backlog as u64 + MSS > link.queue {
                flight.push_back((now, None));
                continue;
            }
            busy_until = busy_until.max(now) + serialize(MSS);
            flight.push_back((now, Some(busy_until + link.base_rtt)));
        }
        now += step;
    }
    out
}

fn link() -> Link {
    // 100 Mbit/s, 40 ms, a queue of one BDP (the emulator's default).
    let rate = 12.5e6;
    let base_rtt = Duration::from_millis(40);
    Link { rate, base_rtt, queue: (rate * base_rtt.as_secs_f64()) as u64 }
}

/// Checks one ordered pair; returns a description of the first violation.
fn check_pair(a: CcAlgorithm, b: CcAlgorithm) -> Result<(), String> {
    let link = link();
    let switch_at = Duration::from_secs(3);
    let out = run(a, b, &link, switch_at, Duration::from_secs(5));
    let bdp = link.queue;
    let tag = format!("{a} -> {b}");
    // Continuity: B starts from A's window (raised at most to B's floor).
    if out.window_after != out.window_before.max(4 * MSS) && out.window_after != out.window_before.max(2 * MSS) {
        return Err(format!("{tag}: window {} before, {} after", out.window_before, out.window_after));
    }
    // What is in flight fits the new window: no stall waiting for a window
    // that shrank below the flight, no room to burst either.
    if out.in_flight_at_switch > out.window_after + MSS {
        return Err(format!("{tag}: {} in flight over window {}", out.in_flight_at_switch, out.window_after));
    }
    let s = (switch_at.as_secs_f64() / link.base_rtt.as_secs_f64()) as usize;
    // No burst: the round trip after the switch sends at most what the
    // adopted window plus one pacer burst allow.
    let burst_cap = out.window_after + 10 * MSS;
    for k in s..s + 2 {
        if out.sent_per_rtt[k] > burst_cap.max(out.sent_per_rtt[s - 1] * 2) {
            return Err(format!(
                "{tag}: burst of {} bytes in RTT {k} (window {}, before {})",
                out.sent_per_rtt[k], out.window_after, out.sent_per_rtt[s - 1]
            ));
        }
    }
    // No stall: every round trip after the switch delivers, and from the
    // third on the flow delivers at least half the bottleneck on average
    // (it had the link to itself before and still has).
    for k in s..s + 10 {
        if out.delivered_per_rtt[k] == 0 {
            return Err(format!("{tag}: nothing delivered in RTT {k} after the switch"));
        }
    }
    // LEDBAT++ starts with its initial slowdown (draft-irtf-iccrg-ledbat-
    // plus-plus §4.4: two RTTs at two packets, then slow start at a third
    // of Reno's gain on this path), which a switch to it must keep: the
    // base-delay history is new, and the slowdown is how LEDBAT++ measures
    // the base delay under the queue its predecessor left. Its recovery is
    // judged over that length instead of a few RTTs.
    let within = if b == CcAlgorithm::LedbatPlusPlus { 40 } else { 10 };
    let recovered = (s + 3..s + within)
        .map(|k| out.delivered_per_rtt[k..k + 10].iter().sum::<u64>() / 10)
        .max()
        .unwrap_or(0);
    if (recovered as f64) < 0.5 * bdp as f64 {
        return Err(format!("{tag}: best {recovered} bytes per RTT within {within} RTTs after the switch, BDP {bdp}"));
    }
    Ok(())
}

#[test]
fn every_pair_switches_without_burst_or_stall() {
    let mut failures = Vec::new();
    for a in CcAlgorithm::ALL {
        for b in CcAlgorithm::ALL {
            if let Err(e) = check_pair(a, b) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} of 64 switches failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_switch_in_slow_start_keeps_slow_starting() {
    // Switched after 100 ms, every loss-based successor is still in slow
    // start at the adopted window.
    for a in [CcAlgorithm::NewReno, CcAlgorithm::Cubic, CcAlgorithm::MulTcp] {
        for b in [CcAlgorithm::NewReno, CcAlgorithm::Cubic, CcAlgorithm::MulTcp, CcAlgorithm::Priority] {
            let mut cc = a.build(MSS, 10 * MSS);
            cc.on_sent(Instant::ZERO, MSS, MSS);
            let next = b.take_over(Instant::ZERO, cc.as_ref(), MSS, 10 * MSS, MSS, None);
            assert!(next.in_slow_start(), "{a} -> {b}");
            assert_eq!(next.window(), cc.window());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For any operating point, the successor starts at the predecessor's
    /// window (never below its floor), and a predecessor past slow start
    /// hands over a successor past slow start.
    #[test]
    fn take_over_keeps_the_window(
        a in 0usize..8,
        b in 0usize..8,
        losses in 0u32..4,
        acks in 1u64..400,
        rtt_ms in 1u64..400,
    ) {
        let (a, b) = (CcAlgorithm::ALL[a], CcAlgorithm::ALL[b]);
        let mut cc = a.build(MSS, 10 * MSS);
        let rtt = Duration::from_millis(rtt_ms);
        let est = RttEstimate { latest: rtt, smoothed: rtt, min: rtt };
        let mut t = Instant::ZERO;
        for i in 0..acks {
            cc.on_sent(t, MSS, MSS * 2);
            t += rtt / 4;
            cc.on_ack(t, &Acked { sent_time: t - rtt / 4, bytes: MSS, app_limited: false, rtt: est, one_way_delay_us: None });
            cc.on_ack_end(t, MSS);
            if losses > 0 && i % (acks / u64::from(losses) + 1) == acks / 2 % (acks / u64::from(losses) + 1) {
                cc.on_congestion_event(t, t, MSS, false);
            }
        }
        let next = b.take_over(t, cc.as_ref(), MSS, 10 * MSS, MSS, Some(est));
        prop_assert!(next.window() >= cc.window(), "{a} -> {b}: {} < {}", next.window(), cc.window());
        prop_assert!(next.window() <= cc.window().max(4 * MSS), "{a} -> {b}: {} > {}", next.window(), cc.window());
        if !cc.in_slow_start() {
            prop_assert!(!next.in_slow_start(), "{a} -> {b} restarted slow start");
        }
    }
}
