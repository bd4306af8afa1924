//! Behaviour of the queue disciplines on a link, against what their RFCs
//! and papers promise, driven through `enqueue`/`poll` as the simulator
//! and the emulator drive a link.
//!
//! The load is non-responsive (constant-rate sources), so what is
//! measured is the discipline alone: with a 20% overload of a 10 Mbit/s
//! link and a 1000-packet buffer, drop-tail fills the buffer (1.2 s of
//! queue), while each AQM holds the delay it is built for.

use std::collections::HashMap;
use std::time::Duration;

use braid_core::Instant;
use braid_link::{Direction, DropReason, Link, LinkSpec, LinkStats, Outcome};

/// A constant-rate source: `len`-byte packets of `flow` every `every`,
/// from `start` until before `stop`.
#[derive(Debug, Clone, Copy)]
struct Source {
    flow: u64,
    len: usize,
    every: Duration,
    start: Duration,
    stop: Duration,
}

fn bulk(flow: u64, every_us: u64, secs: u64) -> Source {
    Source {
        flow,
        len: 1500,
        every: Duration::from_micros(every_us),
        start: Duration::ZERO,
        stop: Duration::from_secs(secs),
    }
}

/// What happened to one packet.
#[derive(Debug, Clone, Copy)]
struct Record {
    flow: u64,
    len: usize,
    sent: Instant,
    fate: Result<Instant, DropReason>,
}

/// Run `sources` through a link of `spec` (a→b) and return every packet's
/// record and the link's counters.
fn run(spec: &str, sources: &[Source], seed: u64) -> (Vec<Record>, LinkStats) {
    let mut link = Link::new(
        spec.parse::<LinkSpec>().unwrap().params(Direction::AToB),
        seed,
    );
    let mut arrivals: Vec<(Instant, usize, u64, usize)> = Vec::new();
    for s in sources {
        let mut t = s.start;
        while t < s.stop {
            arrivals.push((Instant::ZERO + t, s.len, s.flow, arrivals.len()));
            t += s.every;
        }
    }
    arrivals.sort();
    let mut records = Vec::with_capacity(arrivals.len());
    let mut by_id = HashMap::new();
    let mut next = arrivals.into_iter().peekable();
    let mut now = Instant::ZERO;
    loop {
        let arrival = next.peek().map(|a| a.0);
        let wake = link.next_event();
        match (arrival, wake) {
            (Some(a), l) if l.is_none_or(|l| a <= l) => {
                let (t, len, flow, _) = next.next().unwrap();
                now = t;
                let fate = link.enqueue(now, len, flow);
                if let Ok(id) = fate {
                    by_id.insert(id, records.len());
                }
                records.push(Record {
                    flow,
                    len,
                    sent: now,
                    fate: fate.map(|_| Instant::MAX),
                });
            }
            (None, None) => break,
            (_, l) => now = now.max(l.unwrap_or(now)),
        }
        while let Some(o) = link.poll(now) {
            let r = &mut records[by_id[&o.id()]];
            r.fate = match o {
                Outcome::Delivered { at, .. } => Ok(at),
                Outcome::Dropped { reason, .. } => Err(reason),
            };
        }
    }
    assert!(
        records.iter().all(|r| r.fate != Ok(Instant::MAX)),
        "undecided packet"
    );
    (records, *link.stats())
}

/// Queueing delay of a delivered packet on a `delay` one-way link at 10
/// Mbit/s: arrival minus send time, propagation and its own transmission.
fn queueing_ms(r: &Record, delay: Duration) -> Option<f64> {
    let at = r.fate.ok()?;
    let tx = Duration::from_nanos(r.len as u64 * 800);
    Some((at - r.sent).saturating_sub(delay + tx).as_secs_f64() * 1e3)
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median queueing delay (ms) of `flow`'s delivered packets sent in
/// [from, to) seconds.
fn median_delay(records: &[Record], flow: u64, from: u64, to: u64) -> f64 {
    let (from, to) = (
        Instant::ZERO + Duration::from_secs(from),
        Instant::ZERO + Duration::from_secs(to),
    );
    median(
        records
            .iter()
            .filter(|r| r.flow == flow && r.sent >= from && r.sent < to)
            .filter_map(|r| queueing_ms(r, Duration::from_millis(10)))
            .collect(),
    )
}

/// Bytes of `flow` delivered among packets sent in [from, to) seconds.
fn delivered_bytes(records: &[Record], flow: u64, from: u64, to: u64) -> u64 {
    let (from, to) = (
        Instant::ZERO + Duration::from_secs(from),
        Instant::ZERO + Duration::from_secs(to),
    );
    records
        .iter()
        .filter(|r| r.flow == flow && r.sent >= from && r.sent < to && r.fate.is_ok())
        .map(|r| r.len as u64)
        .sum()
}

const LINK: &str = "rtt=20ms,rate=10mbit,queue=1000p";
/// 10 Mbit/s for 20 s, in bytes.
const CAPACITY_20S: f64 = 10e6 / 8.0 * 20.0;

#[test]
fn drop_tail_fills_the_buffer_under_overload() {
    let (records, stats) = run(LINK, &[bulk(1, 1000, 30)], 1);
    // 1000 packets of 1.2 ms each.
    let d = median_delay(&records, 1, 10, 30);
    assert!((d - 1200.0).abs() < 5.0, "drop-tail median queueing {d} ms");
    assert_eq!(stats.dropped_aqm, 0);
    println!("drop-tail: median queueing {d:.1} ms");
}

#[test]
fn codel_holds_the_standing_delay_near_target_and_leaves_dropping_state() {
    // 12 Mbit/s for 30 s, then a 1.2 Mbit/s probe from 31 s to 40 s.
    let probe = Source {
        flow: 2,
        len: 1500,
        every: Duration::from_millis(10),
        start: Duration::from_secs(31),
        stop: Duration::from_secs(40),
    };
    let (records, stats) = run(&format!("{LINK},aqm=codel"), &[bulk(1, 1000, 30), probe], 2);
    let d = median_delay(&records, 1, 10, 30);
    let goodput = delivered_bytes(&records, 1, 10, 30) as f64 / CAPACITY_20S;
    println!(
        "codel: median queueing {d:.1} ms, utilisation {goodput:.3}, aqm drops {}",
        stats.dropped_aqm
    );
    // The link stays busy and the queue far below the buffer's 1.2 s. An
    // unresponsive overload is not what CoDel is built for (RFC 8289 §1:
    // it controls the queue through the senders' response to drops):
    // the re-entry rule alternates between a large count (the last cycle's
    // drops) and a small one, so the standing queue swings above target
    // and its median sits near 100 ms, not 5 ms. With responsive senders
    // it holds the target (braid-sim's CUBIC test).
    assert!(d > 5.0 && d < 200.0, "median queueing {d} ms");
    assert!(goodput > 0.97, "utilisation {goodput}");
    // A 20% overload must be shed: about 1/6 of the packets.
    let drop_share = stats.dropped_aqm as f64 / 30_000.0;
    assert!(
        (drop_share - 1.0 / 6.0).abs() < 0.01,
        "dropped {drop_share}"
    );
    assert_eq!(stats.dropped_queue, 0);
    // Once the overload is gone the queue drains and dropping stops: the
    // probe loses nothing and waits for nothing.
    let probe_records: Vec<_> = records.iter().filter(|r| r.flow == 2).collect();
    assert!(probe_records.iter().all(|r| r.fate.is_ok()));
    assert!(median_delay(&records, 2, 31, 40) < 0.01);
}

#[test]
fn pie_raises_its_drop_probability_until_the_delay_is_near_target() {
    let (records, stats) = run(&format!("{LINK},aqm=pie"), &[bulk(1, 1000, 30)], 3);
    let d = median_delay(&records, 1, 10, 30);
    let goodput = delivered_bytes(&records, 1, 10, 30) as f64 / CAPACITY_20S;
    println!(
        "pie: median queueing {d:.1} ms, utilisation {goodput:.3}, aqm drops {}",
        stats.dropped_aqm
    );
    // RFC 8033: the PI controller settles the delay at the 15 ms target.
    assert!((d - 15.0).abs() < 5.0, "median queueing {d} ms");
    assert!(goodput > 0.97, "utilisation {goodput}");
    let drop_share = stats.dropped_aqm as f64 / 30_000.0;
    assert!(
        (drop_share - 1.0 / 6.0).abs() < 0.02,
        "dropped {drop_share}"
    );
    assert_eq!(stats.dropped_queue, 0);
}

#[test]
fn red_keeps_the_average_queue_between_its_thresholds() {
    let (records, stats) = run(&format!("{LINK},aqm=red"), &[bulk(1, 1000, 30)], 4);
    let d = median_delay(&records, 1, 10, 30);
    println!(
        "red: median queueing {d:.1} ms, aqm drops {}",
        stats.dropped_aqm
    );
    // Thresholds at limit/12 and limit/4 packets (83 and 250 packets,
    // 100 and 300 ms of queue); a 1/6 drop rate needs p_b about 1/12
    // (RED's drop rate is about 2·p_b), reached below max_th.
    assert!(d > 100.0 && d < 300.0, "median queueing {d} ms");
    assert_eq!(stats.dropped_queue, 0);
    let drop_share = stats.dropped_aqm as f64 / 30_000.0;
    assert!(
        (drop_share - 1.0 / 6.0).abs() < 0.02,
        "dropped {drop_share}"
    );
}

#[test]
fn fq_codel_spares_a_sparse_flow_beside_a_bulk_one() {
    // A 40 kbit/s sparse flow (100 bytes every 20 ms) beside the overload.
    let sparse = Source {
        flow: 7,
        len: 100,
        every: Duration::from_millis(20),
        start: Duration::from_millis(3),
        stop: Duration::from_secs(30),
    };
    let (records, stats) = run(
        &format!("{LINK},aqm=fq_codel"),
        &[bulk(1, 1000, 30), sparse],
        5,
    );
    let bulk_delay = median_delay(&records, 1, 10, 30);
    let sparse_delays: Vec<f64> = records
        .iter()
        .filter(|r| r.flow == 7)
        .filter_map(|r| queueing_ms(r, Duration::from_millis(10)))
        .collect();
    let worst = sparse_delays.iter().copied().fold(0.0, f64::max);
    println!(
        "fq_codel: bulk median {bulk_delay:.1} ms, sparse worst {worst:.2} ms, aqm drops {}",
        stats.dropped_aqm
    );
    // The sparse flow waits at most for the bulk packet being sent
    // (1.2 ms at 10 Mbit/s), and is never dropped.
    assert_eq!(sparse_delays.len(), 1500);
    assert!(worst <= 1.21, "sparse flow waited {worst} ms");
    // The bulk flow's own queue is held by its CoDel as in the CoDel
    // test: far below the buffer.
    assert!(
        bulk_delay > 5.0 && bulk_delay < 200.0,
        "bulk median {bulk_delay} ms"
    );
}

#[test]
fn fq_codel_shares_the_link_equally_between_two_bulk_flows() {
    // Two flows of 12 Mbit/s each on a 10 Mbit/s link, and an unequal
    // pair (12 and 6 Mbit/s): each gets half the link.
    for (a_every, b_every) in [(1000, 1000), (1000, 2000)] {
        let (records, _) = run(
            &format!("{LINK},aqm=fq_codel"),
            &[bulk(1, a_every, 30), bulk(2, b_every, 30)],
            6,
        );
        let (a, b) = (
            delivered_bytes(&records, 1, 10, 30) as f64,
            delivered_bytes(&records, 2, 10, 30) as f64,
        );
        println!(
            "fq_codel shares: {:.3} {:.3}",
            a / CAPACITY_20S,
            b / CAPACITY_20S
        );
        assert!((a / b - 1.0).abs() < 0.02, "bytes {a} vs {b}");
        assert!((a + b) / CAPACITY_20S > 0.97);
    }
}

#[test]
fn every_discipline_follows_a_rate_trace_and_a_scheduled_change() {
    // A 12 Mbit/s trace (one 1500-byte opportunity per ms), then from
    // 10 s a fixed 12 Mbit/s and a 100 ms RTT, under a 20% overload: the
    // link carries what the trace and then the rate allow, the change
    // takes effect, and each discipline keeps its queue far below the
    // buffer.
    let dir = std::env::temp_dir().join(format!("braid-link-aqm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("12mbit.trace");
    std::fs::write(&file, "1\n2\n3\n4\n").unwrap();
    for aqm in ["codel", "pie", "fq_codel"] {
        let spec = format!(
            "rtt=20ms,queue=1000p,aqm={aqm},trace={f};at=10s:rtt=100ms,queue=1000p,aqm={aqm},rate=12mbit",
            f = file.display()
        );
        // 14.4 Mbit/s offered: overload before and after the change.
        let (records, _) = run(&spec, &[bulk(1, 833, 20)], 7);
        let mbps = |from: u64, to: u64| {
            let (from, to) = (
                Instant::ZERO + Duration::from_secs(from),
                Instant::ZERO + Duration::from_secs(to),
            );
            let bytes: usize = records
                .iter()
                .filter(|r| r.fate.is_ok_and(|at| at >= from && at < to))
                .map(|r| r.len)
                .sum();
            bytes as f64 * 8.0 / (to - from).as_secs_f64() / 1e6
        };
        let (before, after) = (mbps(3, 10), mbps(13, 20));
        let delays: Vec<f64> = records
            .iter()
            .filter(|r| r.sent >= Instant::ZERO + Duration::from_secs(13))
            .filter_map(|r| {
                // 50 ms one way, 1 ms per packet at 12 Mbit/s.
                let at = r.fate.ok()?;
                Some(
                    (at - r.sent)
                        .checked_sub(Duration::from_millis(51))?
                        .as_secs_f64()
                        * 1e3,
                )
            })
            .collect();
        let d = median(delays.clone());
        println!(
            "{aqm} on a trace: {before:.2} then {after:.2} Mbit/s, median queueing after {d:.1} ms"
        );
        assert!(
            (before - 12.0).abs() < 0.4,
            "{aqm}: {before} Mbit/s on the 12 Mbit/s trace"
        );
        assert!(
            (after - 12.0).abs() < 0.3,
            "{aqm}: {after} Mbit/s after the change"
        );
        assert_eq!(
            delays.len(),
            records
                .iter()
                .filter(|r| r.fate.is_ok() && r.sent >= Instant::ZERO + Duration::from_secs(13))
                .count(),
            "{aqm}: a packet came faster than the new delay"
        );
        // Drop-tail would hold 1000 packets, 1 s at 12 Mbit/s.
        assert!(d < 300.0, "{aqm}: median queueing {d} ms");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
