//! `braid bench data` end to end over the emulator, short: every variant
//! delivers every byte, the JSON has its keys, the control ping-pong got
//! answers. No timing thresholds (those are in the benchmark's closing
//! note, not in CI). Needs root; see emu_support.

mod emu_support;

use std::process::Command;
use std::time::Duration;

use emu_support::*;

#[test]
fn short_run_delivers_everything_and_reports_every_key() {
    if !ready(&["sysctl"]) {
        return;
    }
    let _serial = serial();
    let mut c = Command::new(env!("CARGO_BIN_EXE_braid"));
    c.args(["bench", "data", "--bytes", "20MiB", "--rtts", "0,20", "--control-secs", "2", "--json"]);
    let out = run_limited(c, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "braid bench data failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {text}"));
    assert_eq!(v["bytes"], 20 << 20);
    assert_eq!(v["complete"], true);
    let goodput = v["goodput"].as_array().expect("goodput array");
    assert_eq!(goodput.len(), 2);
    for (g, rtt) in goodput.iter().zip([0, 20]) {
        assert_eq!(g["rtt_ms"], rtt);
        for via in ["tcp", "braid", "data"] {
            assert_eq!(g[format!("{via}_bytes_received")], 20 << 20, "{via} at {rtt} ms: {g}");
            assert_eq!(g[format!("{via}_complete")], true, "{g}");
            assert!(g[format!("{via}_mbps")].as_f64().is_some_and(|x| x > 0.0), "{g}");
        }
        assert!(g["data_over_best"].as_f64().is_some_and(|x| x > 0.0), "{g}");
        let (t, b) = (g["data_tcp_messages"].as_u64().unwrap(), g["data_braid_messages"].as_u64().unwrap());
        assert_eq!(t + b, g["data_messages_received"].as_u64().unwrap(), "every DATA message went over TCP or Braid: {g}");
        assert!(g["data_ratio"].as_f64().is_some_and(|r| (-1.0..=1.0).contains(&r)), "{g}");
    }
    let control = v["control"].as_array().expect("control array");
    assert_eq!(control.len(), 8, "4 data variants at 2 RTTs");
    for c in control {
        assert_eq!(c["control"], "tcp");
        assert!(["none", "tcp", "braid", "data"].contains(&c["data"].as_str().unwrap()), "{c}");
        assert!(c["pings"].as_u64().unwrap() > 0, "no ping answered: {c}");
        let (p50, p99) = (c["p50_ms"].as_f64().unwrap(), c["p99_ms"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{c}");
        if c["data"] != "none" {
            assert!(c["bulk_mbps"].as_f64().unwrap() > 0.0, "bulk data flowed during the pings: {c}");
        }
    }
    let p50s = v["control_p50"].as_array().expect("control_p50 array");
    assert_eq!(p50s.len(), 2);
    for p in p50s {
        let floor = p["floor_p50_ms"].as_f64().expect("floor_p50_ms");
        let none = control.iter().find(|c| c["rtt_ms"] == p["rtt_ms"] && c["data"] == "none").unwrap();
        assert_eq!(floor, none["p50_ms"].as_f64().unwrap(), "{p}");
        for key in ["tcp_added_p50_ms", "braid_added_p50_ms", "control_added_p50_ms"] {
            assert!(p[key].is_f64(), "{key}: {p}");
        }
        // DATA's added p50 is its p50 minus the floor.
        let data = control.iter().find(|c| c["rtt_ms"] == p["rtt_ms"] && c["data"] == "data").unwrap();
        let added = p["control_added_p50_ms"].as_f64().unwrap();
        assert!((added - (data["p50_ms"].as_f64().unwrap() - floor)).abs() < 1e-9, "{p}");
        assert!(p["control_added_ratio"].is_f64() || p["control_added_ratio"].is_null(), "{p}");
        assert!(p.get("data_p50_over_tcp_p50").is_some(), "{p}");
    }
}
