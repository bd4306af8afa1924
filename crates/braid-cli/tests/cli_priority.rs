//! Priorities from the CLI: `braid send --priority / --priority-schedule`
//! on loopback, `braid sim priority --scenario`, and their error messages.

mod cli_support;

use std::time::Duration;

use cli_support::*;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn send_with_a_priority_schedule_arrives_intact() {
    let dir = TempDir::new("prio");
    let mut server = Server::start(&["--out", dir.0.to_str().unwrap(), "--count", "2"]);
    let sched = run(
        &["send", "--to", &server.addr, "--bytes", "20MB", "--priority-schedule", "0@0s,2@50ms", "--json"],
        LIMIT,
    );
    assert!(sched.success(), "{sched:?}");
    assert_eq!(last_json(&sched)["ok"], true);
    let fixed = run(&["send", "--to", &server.addr, "--bytes", "5MB", "--priority", "0", "--json"], LIMIT);
    assert!(fixed.success(), "{fixed:?}");
    for _ in 0..2 {
        assert_eq!(server.next_json(LIMIT)["ok"], true);
    }
    assert_eq!(server.wait_exit(LIMIT), Some(0));
}

#[test]
fn bad_priorities_name_the_allowed_form() {
    let neg = run(&["send", "--to", "127.0.0.1:9", "--bytes", "1", "--priority=-1"], LIMIT);
    assert_eq!(neg.code, Some(2));
    assert!(neg.stderr.contains("expected a number from 0"), "{}", neg.stderr);
    let order = run(&["send", "--to", "127.0.0.1:9", "--bytes", "1", "--priority-schedule", "1@5s,0@1s"], LIMIT);
    assert_eq!(order.code, Some(2));
    assert!(order.stderr.contains("times must increase"), "{}", order.stderr);
    let both = run(
        &["send", "--to", "127.0.0.1:9", "--bytes", "1", "--priority", "1", "--priority-schedule", "0@0s"],
        LIMIT,
    );
    assert_eq!(both.code, Some(2));
}

#[test]
fn sim_priority_reports_phases_as_json() {
    let out = run(&["sim", "priority", "--scenario", "switch", "--scale", "0.1", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let reports = last_json(&out);
    let r = &reports[0];
    assert_eq!(r["scenario"], "switch");
    let phases = r["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    for p in phases {
        for key in ["jain", "queuing_delay_p50_ms", "queuing_delay_p99_ms", "loss", "flows"] {
            assert!(p.get(key).is_some(), "phase lacks {key}: {p}");
        }
    }
    let unknown = run(&["sim", "priority", "--scenario", "nope"], LIMIT);
    assert_eq!(unknown.code, Some(1));
    assert!(unknown.stderr.contains("expected one of polite, latecomer, multcp, switch, five, versus, pair"), "{}", unknown.stderr);
}

/// `--grid` end to end on one small point: one JSON row per check with the
/// documented keys, and the exit status says whether every check passed.
#[test]
fn sim_priority_grid_prints_rows_and_its_status_follows_them() {
    let flags = [
        "sim", "priority", "--grid", "--rtt", "20ms", "--rate", "5mbit", "--queue", "1bdp", "--aqm", "droptail",
        "--tcp", "newreno", "--p", "2", "--epochs", "1", "--max-phase", "20", "--json",
    ];
    let out = run(&flags, LIMIT);
    let rows = last_json(&out);
    let rows = rows.as_array().expect("an array of rows");
    let checks: Vec<&str> = rows.iter().map(|r| r["check"].as_str().unwrap()).collect();
    assert_eq!(checks, ["multcp_2.steady.multcp_over_tcp", "multcp_pair_2.steady.jain"], "{out:?}");
    for r in rows {
        for key in ["rtt", "rate", "queue", "aqm", "tcp", "p", "scenario", "check", "value", "want", "pass", "epochs", "capped"] {
            assert!(r.get(key).is_some(), "row lacks `{key}`: {r}");
        }
        assert_eq!((r["rtt"].as_str(), r["rate"].as_str(), r["queue"].as_str()), (Some("20ms"), Some("5mbit"), Some("1bdp")));
        assert_eq!(r["p"], 2.0);
    }
    let all_pass = rows.iter().all(|r| r["pass"] == true);
    assert_eq!(out.code, Some(if all_pass { 0 } else { 3 }), "{out:?}");
    let both = run(&["sim", "priority", "--grid", "--scenario", "polite"], LIMIT);
    assert_eq!(both.code, Some(2), "{both:?}");
}

#[test]
fn sim_latecomer_runs_both_decreases_and_takes_controller_parameters() {
    let out = run(&["sim", "priority", "--scenario", "latecomer", "--scale", "0.1", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let reports = last_json(&out);
    let names: Vec<&str> = reports.as_array().unwrap().iter().map(|r| r["scenario"].as_str().unwrap()).collect();
    assert_eq!(names, ["latecomer", "latecomer_additive"]);
    // The table ends with the acceptance checks.
    let table = run(&["sim", "priority", "--scenario", "switch", "--scale", "0.05", "--param", "target_ms=60"], LIMIT);
    assert!(table.success(), "{table:?}");
    assert!(table.stdout.contains("acceptance (issue 5)") && table.stdout.contains("switch.max_stall_rtts"), "{}", table.stdout);
    let bad = run(&["sim", "priority", "--scenario", "switch", "--param", "delay_beta"], LIMIT);
    assert_eq!(bad.code, Some(2));
    assert!(bad.stderr.contains("expected NAME=VALUE"), "{}", bad.stderr);
    let rejected = run(&["sim", "priority", "--scenario", "switch", "--scale", "0.05", "--param", "delay_beta=2"], LIMIT);
    assert_eq!(rejected.code, Some(1));
    assert!(rejected.stderr.contains("delay_beta"), "{}", rejected.stderr);
}
