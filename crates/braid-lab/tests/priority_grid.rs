//! Issue 25's CI sample of the priority grid: 40 points spread over RTT
//! 10–200 ms × rate 5–100 Mbit/s × buffer 0.25–4 BDP (every one of the 27
//! links at least once), drop-tail (30 points) and each AQM (10), CUBIC and
//! NewReno as the competing TCP (both at every p and under every AQM),
//! p = 0..4; at each point the `versus` scenario (p = 0:
//! polite with its TCP-alone yardstick; p ≥ 1: MulTCP(p) against TCP) and
//! the `pair` scenario (two flows at p), in the simulator, judged by
//! `priority_sim::checks`. Any miss fails the test with a table of the
//! misses.
//!
//! The paths carry the grid's jitter (σ of one bottleneck packet time,
//! `grid::GRID_JITTER_PACKETS`) and no random loss.
//!
//! Phases last 3 congestion epochs of the competing TCP, at least 20 s, at
//! most [`MAX_PHASE`] (the cap keeps the sample within a minute on 2
//! cores; rows whose phase it shortened are marked `*`). Seeds are fixed per
//! point. The AQM points run only once braid-link parses `aqm=`; before
//! that they are skipped with a message.
//!
//! Run: `cargo test --release -p braid-lab --test priority_grid -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::harness::priority_sim::DEFAULT_MAX_PHASE;
use braid_lab::template::builtin::priority::grid::{
    aqm_supported, plan_points, rows, run_plan, GridAxes, GridPoint, GridRow, GRID_AQMS,
};
use braid_lab::template::builtin::sim_priority::SimPriority;
use braid_link::Rate;

/// The longest measured phase of the sample: the grid's default (about
/// 35 s on 2 cores for the drop-tail points, release build).
const MAX_PHASE: Duration = DEFAULT_MAX_PHASE;

const RTTS_MS: [u64; 3] = [10, 50, 200];
const RATES_MBIT: [u64; 3] = [5, 20, 100];
const QUEUES_BDP: [f64; 3] = [0.25, 1.0, 4.0];
const TCPS: [&str; 2] = ["cubic", "newreno"];

/// The sample: point i takes the i-th link of the 27 (RTT fastest, then
/// rate, then buffer; i ≥ 27 wraps), p = i mod 5 and the TCP i mod 2 (so
/// every p meets both TCPs within 10 points), and the points with i mod 8
/// = 3 or 6 (one of each parity, so both TCPs) an AQM: the k-th of them
/// the ((k + k/2) mod 4)-th of codel, pie, red, fq_codel, which gives each
/// AQM both TCPs; the other 30 points drop-tail.
fn sample() -> Vec<GridPoint> {
    (0..40usize)
        .map(|i| {
            let aqm = match i % 8 {
                3 | 6 => {
                    let k = (i / 8) * 2 + usize::from(i % 8 == 6);
                    GRID_AQMS[1 + (k + k / 2) % 4]
                }
                _ => "droptail",
            };
            GridPoint {
                rtt: Duration::from_millis(RTTS_MS[i % 3]),
                rate: Rate::from_mbit(RATES_MBIT[(i / 3) % 3]),
                queue_bdp: QUEUES_BDP[(i / 9) % 3],
                aqm: aqm.to_string(),
                tcp: TCPS[i % 2].to_string(),
                p: (i % 5) as f64,
            }
        })
        .collect()
}

fn render(rows: &[&GridRow]) -> String {
    let mut out = format!(
        "{:<30} {:>8} {:>3} {:<42} {:>8} {:>14} {:>8}\n",
        "rtt/rate/queue/aqm", "tcp", "p", "check", "value", "want", "epochs"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<30} {:>8} {:>3} {:<42} {:>8} {:>14} {:>8}{}\n",
            format!("{}/{}/{}/{}", r.rtt, r.rate, r.queue, r.aqm),
            r.tcp,
            r.p,
            r.check,
            r.value.map_or("-".into(), |v| format!("{v:.3}")),
            r.want,
            r.epochs.map_or("-".into(), |e| format!("{e:.1}{}", if r.capped == Some(true) { "*" } else { "" })),
            r.error.as_ref().map_or(String::new(), |e| format!("  {e}")),
        ));
    }
    out
}

/// The sample covers what the issue asks of it: at least 30 points, every
/// RTT, rate and buffer, both TCPs at p = 0 and at p > 0, every p, and
/// drop-tail and each AQM.
#[test]
fn the_sample_is_spread_over_the_grid() {
    let s = sample();
    assert!(s.len() >= 30);
    let droptail = s.iter().filter(|p| p.aqm == "droptail").count();
    assert!(droptail >= 30, "at least 30 drop-tail points, runnable before aqm= exists: {droptail}");
    for aqm in GRID_AQMS {
        for tcp in TCPS {
            assert!(s.iter().any(|p| p.aqm == aqm && p.tcp == tcp), "no {aqm} point against {tcp}");
        }
    }
    for rtt in RTTS_MS {
        for rate in RATES_MBIT {
            for q in QUEUES_BDP {
                let link = |p: &&GridPoint| {
                    p.rtt == Duration::from_millis(rtt) && p.rate == Rate::from_mbit(rate) && p.queue_bdp == q
                };
                assert!(s.iter().any(|p| link(&p)), "no {rtt} ms / {rate} Mbit/s / {q} BDP point");
            }
        }
    }
    for tcp in TCPS {
        for p in 0..5 {
            assert!(s.iter().any(|x| x.tcp == tcp && x.p == p as f64), "no {tcp} point at p = {p}");
        }
    }
}

#[test]
#[ignore = "issue 25 open: 16 of 112 checks of this sample miss (8 of p = 0 with the default DTL AIMD on shallow buffers and AQMs, 5 of p = N below N at small windows or capped phases, 3 pairs at 0.91-0.95; p = 0 with adaptive = 1: see braid-recovery cc::yielding, Status); run with --include-ignored"]
fn the_grid_sample_meets_the_acceptance_criteria() {
    let mut points = sample();
    if !aqm_supported() {
        let skipped: Vec<String> = points
            .iter()
            .filter(|p| p.aqm != "droptail")
            .map(|p| format!("{:?}/{}/{}bdp/{}", p.rtt, p.rate, p.queue_bdp, p.aqm))
            .collect();
        eprintln!("SKIPPED {} AQM points (braid-link does not parse aqm= yet): {}", skipped.len(), skipped.join(", "));
        points.retain(|p| p.aqm == "droptail");
    }
    let like = GridAxes { epochs: 3.0, max_phase: MAX_PHASE, ..GridAxes::default() };
    let plan = plan_points("ci-priority-grid", Arc::new(SimPriority), &points, &like, &[], 1).unwrap();
    assert_eq!(plan.len(), 2 * points.len());
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let t0 = Instant::now();
    let results = run_plan(Arc::new(SimPriority), plan, jobs, Some(Duration::from_secs(900)), false).unwrap();
    let elapsed = t0.elapsed();
    let rows = rows(&results).unwrap();
    let all: Vec<&GridRow> = rows.iter().collect();
    eprintln!("{} points, {} checks, {:.1} s on {jobs} jobs\n{}", points.len(), rows.len(), elapsed.as_secs_f64(), render(&all));
    let misses: Vec<&GridRow> = rows.iter().filter(|r| !r.pass).collect();
    assert!(
        misses.is_empty(),
        "{} of {} checks missed (* = phase capped below 3 epochs):\n{}",
        misses.len(),
        rows.len(),
        render(&misses)
    );
}

/// Points where no queue shows to the yielding p = 0 controller
/// (`adaptive = 1`) while TCP is there (CoDel, PIE and fq_codel, and a
/// one-BDP drop-tail buffer at 10 ms): without the contention memory
/// (braid-recovery `cc::contention`) competing TCP kept 0.71–0.79 of its
/// alone rate at these points, so every one missed the bar; with it TCP
/// keeps ≥ 0.9 and p = 0 still fills the link alone before and after.
#[test]
fn yielding_p0_keeps_out_of_tcps_way_where_no_queue_shows() {
    let point = |rtt_ms: u64, rate: u64, queue_bdp: f64, aqm: &str, tcp: &str| GridPoint {
        rtt: Duration::from_millis(rtt_ms),
        rate: Rate::from_mbit(rate),
        queue_bdp,
        aqm: aqm.to_string(),
        tcp: tcp.to_string(),
        p: 0.0,
    };
    let points = [
        point(10, 20, 1.0, "fq_codel", "newreno"),
        point(10, 20, 4.0, "codel", "newreno"),
        point(50, 5, 1.0, "pie", "cubic"),
        point(10, 20, 1.0, "droptail", "newreno"),
    ];
    let like = GridAxes { epochs: 3.0, max_phase: MAX_PHASE, ..GridAxes::default() };
    let extra = [("params", braid_lab::param::Value::String("adaptive=1".into()))];
    let plan = plan_points("ci-yielding-p0", Arc::new(SimPriority), &points, &like, &extra, 1).unwrap();
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results = run_plan(Arc::new(SimPriority), plan, jobs, Some(Duration::from_secs(600)), false).unwrap();
    let rows = rows(&results).unwrap();
    let all: Vec<&GridRow> = rows.iter().collect();
    eprintln!("{}", render(&all));
    assert!(rows.iter().any(|r| r.check == "polite.with_tcp.tcp_over_tcp_alone"));
    let misses: Vec<&GridRow> = rows.iter().filter(|r| !r.pass).collect();
    assert!(misses.is_empty(), "{} of {} checks missed:\n{}", misses.len(), rows.len(), render(&misses));
}
