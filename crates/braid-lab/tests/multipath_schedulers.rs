//! The scheduler test harness at work: for each scheduler shipped with
//! Braid, a scripted scenario on the simulator whose assertions show the
//! scheduler's intent (thesis chapter 5), by which path carried which
//! packet; plus `PRINT` output (the thesis's packetdrill test, Listing
//! 3.15) and the scheduling triggers (new data, register changes, subflow
//! changes).

use std::sync::Arc;
use std::time::Duration;

use braid_lab::harness::sim_multipath::{run, Scenario, ScenarioReport, Step};
use braid_progmp::{Program, Register};

const FAST: &str = "rtt=20ms,rate=20mbit";
const SLOW: &str = "rtt=60ms,rate=20mbit";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn play(s: &Scenario) -> ScenarioReport {
    let r = run(s).unwrap();
    assert!(r.ok, "{:?}\n{:?}", r.error, r.paths);
    r
}

/// The paths that carried each write, in write order.
fn carriers(r: &ScenarioReport) -> Vec<Vec<usize>> {
    r.writes.iter().map(|w| r.carriers(w.range.start)).collect()
}

/// Stream bytes sent over stream bytes written.
fn redundancy(r: &ScenarioReport) -> f64 {
    let written: u64 = r.writes.iter().map(|w| w.range.end - w.range.start).sum();
    r.bytes_by_path().iter().sum::<u64>() as f64 / written as f64
}

/// As [`redundancy`], not counting the resending of lost packets (by
/// their path, or reinjected from `RQ` on another): the copies the
/// scheduler chose to make.
fn chosen_redundancy(r: &ScenarioReport) -> f64 {
    let written: u64 = r.writes.iter().map(|w| w.range.end - w.range.start).sum();
    (r.bytes_by_path().iter().sum::<u64>() - r.stats.retransmitted_bytes) as f64 / written as f64
}

/// Stream bytes each path carried first (fresh data, not copies).
fn first_bytes(r: &ScenarioReport) -> Vec<u64> {
    let mut by_path = vec![0; r.path_count];
    let mut seen = std::collections::BTreeSet::new();
    for t in &r.transmissions {
        for range in &t.ranges {
            if seen.insert(range.start) {
                by_path[t.path] += range.end - range.start;
            }
        }
    }
    by_path
}

fn custom(source: &str, links: &[&str]) -> Scenario {
    Scenario::with_program(Arc::new(Program::compile(source).unwrap()), links).unwrap()
}

#[test]
fn min_rtt_sends_thin_streams_on_the_fastest_path_and_aggregates_bulk() {
    let mut thin = Scenario::new("min_rtt", &[SLOW, FAST]).unwrap();
    thin.thin_stream(ms(500), ms(100), 10, 1000, 0);
    let r = play(&thin);
    assert!(carriers(&r).iter().all(|c| c == &[1]), "{:?}", carriers(&r));

    let mut bulk = Scenario::new("min_rtt", &[SLOW, FAST]).unwrap();
    bulk.write_at(ms(500), 5 << 20, 0);
    let r = play(&bulk);
    let bytes = r.bytes_by_path();
    let total: u64 = bytes.iter().sum();
    // Once the fast path's window is full, the slow one takes the rest.
    assert!(bytes.iter().all(|&b| b * 4 > total), "{bytes:?}");
    assert!(chosen_redundancy(&r) < 1.02, "{}", chosen_redundancy(&r));
}

#[test]
fn min_rtt_backup_keeps_backups_idle_until_the_only_other_path_fails() {
    // The backup is the faster path: only its backup status keeps it idle.
    let mut s = Scenario::new("min_rtt_backup", &[SLOW, FAST]).unwrap();
    s.paths[1].backup = true;
    s.thin_stream(ms(500), ms(100), 10, 1000, 0);
    s.write_at(ms(1600), 2 << 20, 0);
    let fail = ms(4000);
    s.at(fail, Step::SetLink { path: 0, link: "rtt=60ms,loss=100%".parse().unwrap() });
    s.thin_stream(ms(4100), ms(100), 10, 1000, 0);
    let r = play(&s);
    let first_on_backup = r.transmissions.iter().find(|t| t.path == 1).map(|t| t.at);
    assert!(
        first_on_backup.is_some_and(|t| t > braid_core::Instant::ZERO + fail),
        "the backup carried data at {first_on_backup:?}, before the failure at {fail:?}"
    );
    // Path 0 was given up, and the writes after the failure (some of them
    // first sent on it) arrived over the backup.
    assert_eq!(r.paths.len(), 1);
    assert!(r.paths[0].backup);
    assert!(r.writes[12..].iter().all(|w| r.carriers(w.range.start).contains(&1)));
}

#[test]
fn round_robin_alternates_whatever_the_rtt() {
    for name in ["round_robin", "round_robin_cyclic"] {
        let mut s = Scenario::new(name, &[SLOW, FAST]).unwrap();
        s.thin_stream(ms(500), ms(100), 10, 1000, 0);
        let r = play(&s);
        let expected: Vec<Vec<usize>> = (0..10).map(|i| vec![i % 2]).collect();
        assert_eq!(carriers(&r), expected, "{name}");
    }
    // The cyclic variant keeps its turn in R1: ten packets over two paths
    // leave it pointing at path 0 again (it wraps at the next run).
    let mut s = Scenario::new("round_robin_cyclic", &[SLOW, FAST]).unwrap();
    s.thin_stream(ms(500), ms(100), 10, 1000, 0);
    assert_eq!(play(&s).registers[0] % 2, 0);
}

#[test]
fn redundant_sends_every_packet_on_every_available_path() {
    let mut s = Scenario::new("redundant", &[SLOW, FAST, "rtt=100ms,rate=20mbit"]).unwrap();
    s.thin_stream(ms(500), ms(100), 10, 3000, 0);
    let r = play(&s);
    for w in &r.writes {
        for seq in (w.range.start..w.range.end).step_by(500) {
            assert_eq!(r.carriers(seq), [0, 1, 2], "byte {seq}");
        }
        // The fast path's copy arrives first: 10 ms one way, and a second
        // packet right behind.
        assert!(w.delivered.unwrap() - w.at <= ms(15), "{:?}", w.delivered.unwrap() - w.at);
    }
}

#[test]
fn opportunistic_redundancy_is_full_for_thin_streams_and_yields_to_fresh_data() {
    let mut thin = Scenario::new("opportunistic_redundant", &[SLOW, FAST]).unwrap();
    thin.thin_stream(ms(500), ms(100), 10, 1000, 0);
    let r = play(&thin);
    assert!(carriers(&r).iter().all(|c| c == &[0, 1]), "{:?}", carriers(&r));
    assert!((1.99..2.01).contains(&redundancy(&r)), "{}", redundancy(&r));

    let mut bulk = Scenario::new("opportunistic_redundant", &[SLOW, FAST]).unwrap();
    bulk.write_at(ms(500), 4 << 20, 0);
    let r = play(&bulk);
    // A packet goes only where there is room when it is first scheduled:
    // with full windows, most packets travel once.
    assert!(chosen_redundancy(&r) < 1.5, "{}", chosen_redundancy(&r));
}

#[test]
fn redundant_if_q_empty_duplicates_only_once_the_queue_drained() {
    let mut thin = Scenario::new("redundant_if_q_empty", &[SLOW, FAST]).unwrap();
    thin.thin_stream(ms(500), ms(100), 10, 1000, 0);
    let r = play(&thin);
    for (i, w) in r.writes.iter().enumerate() {
        // On the fastest path, and, the queue being empty, also on the other.
        assert_eq!(r.carriers(w.range.start), [0, 1], "write {i}");
    }
    let mut bulk = Scenario::new("redundant_if_q_empty", &[SLOW, FAST]).unwrap();
    bulk.write_at(ms(500), 4 << 20, 0);
    let r = play(&bulk);
    // While the queue holds data, fresh packets win.
    assert!(chosen_redundancy(&r) < 1.1, "{}", chosen_redundancy(&r));

}

#[test]
fn active_probing_keeps_an_idle_path_fresh_with_spaced_probes() {
    let script = |name| {
        let mut s = Scenario::new(name, &[FAST, SLOW]).unwrap();
        s.thin_stream(ms(500), ms(50), 60, 500, 0);
        play(&s)
    };
    let r = script("active_probing");
    let probes: Vec<_> = r.transmissions.iter().filter(|t| t.path == 1).collect();
    // Every write went on the fast path; some also on the slow one, as
    // probes at most every 5 RTTs of the slow path (300 ms).
    assert!(r.writes.iter().all(|w| r.carriers(w.range.start).contains(&0)));
    assert!((5..=12).contains(&probes.len()), "{} probes", probes.len());
    for pair in probes.windows(2) {
        assert!(pair[1].at - pair[0].at >= ms(300), "{:?} then {:?}", pair[0].at, pair[1].at);
    }
    // Minimum RTT alone leaves the slow path idle: its RTT estimate ages.
    assert_eq!(script("min_rtt").packets_by_path()[1], 0);
}

#[test]
fn selective_compensation_resends_slow_path_packets_on_the_fast_path_at_the_end_of_a_flow() {
    let flow = |signal: bool| {
        let mut s = Scenario::new("selective_compensation", &["rtt=20ms,rate=10mbit", "rtt=200ms,rate=10mbit"]).unwrap();
        s.write_at(ms(500), 600_000, 0);
        if signal {
            s.at(ms(500), Step::SetRegister { register: Register::R1, value: 1 });
        }
        play(&s)
    };
    let (with, without) = (flow(true), flow(false));
    let compensated = |r: &ScenarioReport| {
        let w = &r.writes[0];
        (w.range.start..w.range.end)
            .step_by(1000)
            .filter(|&seq| r.first_carrier(seq) == Some(1) && r.carriers(seq) == [0, 1])
            .count()
    };
    assert!(compensated(&with) > 0, "no slow-path packet was compensated");
    assert_eq!(compensated(&without), 0);
    let fct = |r: &ScenarioReport| r.writes[0].delivered.unwrap() - r.writes[0].at;
    assert!(fct(&with) < fct(&without), "{:?} vs {:?}", fct(&with), fct(&without));
}

#[test]
fn rtt_preference_aware_uses_a_backup_only_while_no_preferred_path_is_acceptable() {
    let backup_bytes = |name, r1: i64, r2: i64| {
        let mut s = Scenario::new(name, &["rtt=80ms,rate=20mbit", FAST]).unwrap();
        s.paths[1].backup = true;
        s.at(ms(0), Step::SetRegister { register: Register::R1, value: r1 });
        s.at(ms(0), Step::SetRegister { register: Register::R2, value: r2 });
        s.thin_stream(ms(500), ms(100), 10, 1000, 0);
        play(&s).bytes_by_path()[1]
    };
    // The preferred path's 80 ms is not acceptable under 50 ms: the
    // faster backup is used. Under 100 ms it is: the backup stays idle.
    assert!(backup_bytes("rtt_preference_aware", 50, 0) > 0);
    assert_eq!(backup_bytes("rtt_preference_aware", 100, 0), 0);
    assert_eq!(backup_bytes("rtt_preference_aware", 0, 0), 0);
    // Advanced: the backup only if it is acceptable (under R1) while the
    // preferred one is not (over R2).
    assert!(backup_bytes("rtt_preference_aware_advanced", 50, 60) > 0);
    assert_eq!(backup_bytes("rtt_preference_aware_advanced", 50, 100), 0);
    assert_eq!(backup_bytes("rtt_preference_aware_advanced", 10, 60), 0);
}

#[test]
fn tap_tops_up_a_slow_preferred_path_with_the_backup_only_toward_the_target() {
    let run_tap = |target_kbps: i64| {
        let mut s = Scenario::new("tap", &["rtt=40ms,rate=2mbit", "rtt=20ms,rate=20mbit"]).unwrap();
        s.paths[1].backup = true;
        s.at(ms(0), Step::SetRegister { register: Register::R1, value: target_kbps });
        s.write_at(ms(500), 1 << 20, 0);
        play(&s)
    };
    let (none, some) = (run_tap(0), run_tap(1000));
    // (The backup may carry reinjections of packets the preferred path
    // lost: the preamble reinjects on any available path.)
    assert_eq!(first_bytes(&none)[1], 0, "no target: the backup carries no fresh data");
    assert!(first_bytes(&some)[1] > 0, "a target above the preferred path's capacity uses the backup");
    let fct = |r: &ScenarioReport| r.writes[0].delivered.unwrap() - r.writes[0].at;
    assert!(fct(&some) < fct(&none), "{:?} vs {:?}", fct(&some), fct(&none));
}

#[test]
fn one_way_delay_beats_min_rtt_on_asymmetric_paths() {
    // Path 0 has the lower RTT (40 ms against 45 ms), but path 1 the lower
    // delay from client to server (10 ms against 30 ms): thesis Fig. 5.20.
    let paths = ["a2b:delay=30ms,b2a:delay=10ms,rate=20mbit", "a2b:delay=10ms,b2a:delay=35ms,rate=20mbit"];
    let script = |name| {
        let mut s = Scenario::new(name, &paths).unwrap();
        s.thin_stream(ms(500), ms(100), 10, 1000, 0);
        play(&s)
    };
    let owd = script("one_way_delay");
    assert!(carriers(&owd).iter().all(|c| c == &[1]), "{:?}", carriers(&owd));
    let latency = |r: &ScenarioReport| r.writes.iter().map(|w| w.delivered.unwrap() - w.at).max().unwrap();
    assert!(latency(&owd) <= ms(12), "{:?}", latency(&owd));
    let min_rtt = script("min_rtt");
    assert!(carriers(&min_rtt).iter().all(|c| c == &[0]));
    assert!(latency(&min_rtt) >= ms(30), "{:?}", latency(&min_rtt));
}

#[test]
fn http2_aware_follows_each_writes_tag() {
    // A slow preferred path and a fast backup.
    let mut s = Scenario::new("http2_aware", &["rtt=100ms,rate=20mbit", FAST]).unwrap();
    s.paths[1].backup = true;
    for (i, tag) in [2, 1, 0, 2, 1, 0].into_iter().enumerate() {
        s.write_at(ms(500 + 200 * i as u64), 1000, tag);
    }
    let r = play(&s);
    // 2: preferred (non-backup) paths only; 1: lowest RTT; 0: avoid paths
    // slower than 1.5 times the best (the 100 ms one).
    assert_eq!(carriers(&r), [vec![0], vec![1], vec![1], vec![0], vec![1], vec![1]]);
    assert!(r.writes.iter().zip([2, 1, 0, 2, 1, 0]).all(|(w, t)| w.user == t));
}

#[test]
fn print_shows_two_packets_in_q_for_a_2000_byte_write() {
    // Thesis Listing 3.15, the packetdrill test: a 2000-byte write makes
    // two packets, and the scheduler prints the queue size.
    let mut s = custom(
        "SCHEDULER two_in_q;
         PRINT(\"Q.COUNT %u\", Q.COUNT);
         IF (Q.COUNT > 1) { SUBFLOWS.GET(0).PUSH(Q.POP()); SUBFLOWS.GET(0).PUSH(Q.POP()); }",
        &[FAST, SLOW],
    );
    s.write_at(ms(500), 2000, 0);
    let r = play(&s);
    assert!(r.print_lines().any(|l| l == "Q.COUNT 2"), "{:?}", r.prints);
    assert!(r.print_lines().all(|l| l == "Q.COUNT 0" || l == "Q.COUNT 2"));
    assert_eq!(r.packets_by_path(), [2, 0]);
}

#[test]
fn register_changes_and_new_paths_trigger_the_scheduler() {
    // Nothing goes until R1 is set: the write waits, then leaves at once.
    let mut gate = custom("IF (R1 == 1) { SUBFLOWS.MIN(s => s.RTT).PUSH(Q.POP()); }", &[FAST]);
    gate.write_at(ms(500), 1000, 0);
    gate.at(ms(2000), Step::SetRegister { register: Register::R1, value: 1 });
    let r = play(&gate);
    assert_eq!(r.transmissions[0].at, braid_core::Instant::ZERO + ms(2000));
    assert_eq!(r.registers[0], 1);

    // Only path 1 may carry data, and it opens at 1 s: its validation is
    // the trigger that sends the write queued since 0.5 s.
    let mut s = custom("SUBFLOWS.FILTER(s => s.ID == 1).MIN(s => s.RTT).PUSH(Q.POP());", &[FAST, FAST]);
    s.paths[1].open_at_start = false;
    s.write_at(ms(500), 1000, 0);
    s.at(ms(1000), Step::AddPath { path: 1 });
    let r = play(&s);
    assert_eq!(r.packets_by_path(), [0, 1]);
    let first = r.transmissions[0].at - braid_core::Instant::ZERO;
    assert!(first > ms(1000) && first <= ms(1025), "{first:?}");
}

#[test]
fn scenarios_are_deterministic() {
    let mut s = Scenario::new("round_robin", &["rtt=20ms,rate=5mbit,loss=2%", SLOW]).unwrap();
    s.write_at(ms(100), 500_000, 0);
    s.thin_stream(ms(300), ms(40), 20, 700, 3);
    let (a, b) = (play(&s), play(&s));
    assert_eq!(a.transmissions, b.transmissions);
    assert_eq!(a.writes, b.writes);
    s.seed = 2;
    assert_ne!(play(&s).transmissions, a.transmissions);
}

#[test]
fn invalid_scenarios_name_the_field() {
    assert!(Scenario::new("nope", &[FAST]).unwrap_err().to_string().contains("nope"));
    assert!(Scenario::new("min_rtt", &["rtt=fast"]).unwrap_err().to_string().contains("path 0"));
    let mut s = Scenario::new("min_rtt", &[FAST]).unwrap();
    s.at(ms(1), Step::RemovePath { path: 3 });
    assert!(run(&s).unwrap_err().to_string().contains("`steps`"));
}
