//! `braid bench exon` end to end over the emulator: short one-way and RPC
//! runs at 5% loss finish, Exon loses and duplicates nothing (checked end
//! to end by message identifiers), and the JSON has the contract's keys.
//! No timing thresholds here: the performance goals are measured by the
//! benchmark itself. Needs root (see emu_support); bounded in time.

mod cli_support;
mod emu_support;

use std::time::Duration;

use cli_support::run;
use emu_support::*;

fn bench(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["bench", "exon", "--json"];
    all.extend(args);
    let out = run(&all, Duration::from_secs(60));
    assert!(out.success(), "braid {all:?} failed ({:?}):\n{}\n{}", out.code, out.stdout, out.stderr);
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout))
}

fn check_common(v: &serde_json::Value, rate_key: &str) {
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["duplicated"], 0, "{v}");
    assert_eq!(v["exon"]["lost"], 0, "{v}");
    assert_eq!(v["exon"]["duplicated"], 0, "{v}");
    assert_eq!(v["exon"]["corrupt"], 0, "{v}");
    assert_eq!(v["exon"]["drained"], true, "{v}");
    assert!(v["ratio"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    for peer in ["exon", "tcp"] {
        let rate = v[peer][rate_key].as_f64().unwrap_or_else(|| panic!("no {peer}.{rate_key}: {v}"));
        assert!(rate > 0.0, "{peer} delivered nothing: {v}");
        assert!(v[peer]["delivered"].as_u64().is_some_and(|d| d > 0), "{v}");
    }
}

#[test]
fn oneway_at_five_percent_loss_exactly_once() {
    let _g = serial();
    if !ready(&[]) {
        return;
    }
    let v = bench(&["--pattern", "oneway", "--messages", "2000", "--timeout", "3", "--link", "rtt=10ms,rate=100mbit,loss=5%"]);
    check_common(&v, "msgs_per_s");
    assert_eq!(v["pattern"], "oneway");
    // Every one of the 2000 was accepted (Exon needs far less than 3 s).
    assert_eq!(v["exon"]["accepted"], 2000, "{v}");
    assert_eq!(v["exon"]["delivered"], 2000, "{v}");
}

#[test]
fn rpc_with_actors_exactly_once() {
    let _g = serial();
    if !ready(&[]) {
        return;
    }
    let v = bench(&["--pattern", "rpc", "--actors", "8", "--messages", "400", "--timeout", "3", "--link", "rtt=10ms,rate=100mbit,loss=5%"]);
    check_common(&v, "requests_per_s");
    assert_eq!(v["pattern"], "rpc");
    assert_eq!(v["actors"], 8);
    for peer in ["exon", "tcp"] {
        let (p50, p99) = (v[peer]["p50_ms"].as_f64(), v[peer]["p99_ms"].as_f64());
        assert!(p50.is_some() && p99.is_some() && p50 <= p99, "{peer} latency: {v}");
        // At least one round trip of the emulated link.
        assert!(p50.unwrap() >= 9.0, "{peer} p50 below the RTT: {v}");
    }
}
