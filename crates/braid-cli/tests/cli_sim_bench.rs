//! `braid sim transfer --json` and `braid bench stream --json` report every
//! documented key. No performance threshold is asserted here: ratios are
//! measured by the benchmark, not by tests.

mod cli_support;

use std::time::Duration;

use cli_support::{last_json, run};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn sim_transfer_json_has_all_keys() {
    let out = run(&["sim", "transfer", "--link", "rtt=20ms,rate=50mbit", "--bytes", "2MB", "--seed", "3", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    for key in ["ok", "bytes", "virtual_secs", "goodput_mbps", "link_mbps", "efficiency", "retransmits", "jain", "trace_hash"] {
        assert!(j.get(key).is_some(), "missing `{key}` in {j}");
    }
    assert_eq!(j["ok"], true);
    assert!(j["goodput_mbps"].as_f64().unwrap() > 0.0);
    // Same seed, same run.
    let again = last_json(&run(&["sim", "transfer", "--link", "rtt=20ms,rate=50mbit", "--bytes", "2MB", "--seed", "3", "--json"], LIMIT));
    assert_eq!(j["trace_hash"], again["trace_hash"]);
}

#[test]
fn sim_transfer_prints_a_table_by_default() {
    let out = run(&["sim", "transfer", "--link", "rtt=10ms,rate=20mbit", "--bytes", "500kB"], LIMIT);
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.contains("goodput_mbps"), "{}", out.stdout);
}

fn positive(j: &serde_json::Value, key: &str) {
    let v = j.get(key).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("missing `{key}` in {j}"));
    assert!(v > 0.0 && v.is_finite(), "`{key}` = {v} in {j}");
}

#[test]
fn bench_stream_json_has_all_keys() {
    let out = run(&["bench", "stream", "--bytes", "4MiB", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    for key in ["braid_gbps", "tcp_gbps", "quinn_gbps", "braid_over_quinn", "braid_over_tcp"] {
        positive(&j, key);
    }
}

#[test]
fn bench_message_rate_json_has_all_keys() {
    let out = run(&["bench", "stream", "--messages", "2000", "--size", "1024", "--repeat", "2", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    for key in ["braid_msgs_per_s", "quinn_msgs_per_s", "tcp_msgs_per_s", "braid_over_quinn"] {
        positive(&j, key);
    }
    assert_eq!(j["repeat"], 2);
}
