//! A short `braid bench multipath --json` run over the emulator: every
//! variant delivers its bytes and the JSON has the documented keys. No
//! timing thresholds (those belong to the benchmark's closing note).
//! Needs root and the emulator; skipped locally without them, fails under
//! CI=true.

mod cli_support;
mod emu_support;

use std::time::Duration;

use cli_support::{last_json, run};
use emu_support::{ready, serial};

#[test]
fn a_short_bench_run_delivers_every_variant() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    let out = run(
        &[
            "bench",
            "multipath",
            "--path",
            "rate=20mbit,rtt=10ms",
            "--path",
            "rate=20mbit,rtt=20ms",
            "--secs",
            "2",
            "--warmup",
            "1",
            "--flows",
            "20",
            "--gap",
            "0",
            "--schedulers",
            "minrtt,redundant",
            "--json",
        ],
        Duration::from_secs(60),
    );
    assert!(out.success(), "{out:?}");
    let r = last_json(&out);
    for key in ["paths", "scheduler", "goodput", "fct_paths", "fct_bytes", "fct", "braid_over_mptcp", "p90_reduction", "ok"] {
        assert!(r.get(key).is_some(), "no `{key}` in {r}");
    }
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["scheduler"], "min_rtt");
    let goodput = r["goodput"].as_array().unwrap();
    let variants: Vec<&str> = goodput.iter().map(|g| g["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["braid:min_rtt", "mptcp", "tcp"], "{r}");
    for g in goodput {
        assert!(g["bytes_delivered"].as_u64().unwrap() > 0, "{g}");
        assert!(g["mbps"].as_f64().unwrap() > 0.0, "{g}");
        // Headers and acknowledgements: the wire carries more than the data.
        assert!(g["wire_per_delivered"].as_f64().unwrap() > 1.0, "{g}");
    }
    // Both paths carried Braid data.
    let by_path = goodput[0]["stream_bytes_by_path"].as_array().unwrap();
    assert_eq!(by_path.len(), 2);
    assert!(by_path.iter().all(|b| b.as_u64().unwrap() > 0), "{r}");
    let fct = r["fct"].as_array().unwrap();
    assert_eq!(fct.len(), 2);
    assert_eq!(fct[0]["scheduler"], "min_rtt");
    assert_eq!(fct[1]["scheduler"], "redundant");
    for f in fct {
        assert_eq!(f["flows"], 20, "{f}");
        // 20 requests of 64 bytes and 20 responses of 10 KB.
        assert_eq!(f["bytes_delivered"], 20 * (64 + 10_000), "{f}");
        let (p50, p90, p99) = (f["p50_ms"].as_f64().unwrap(), f["p90_ms"].as_f64().unwrap(), f["p99_ms"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{f}");
    }
    // Redundant sends copies: more wire bytes per delivered byte.
    assert!(fct[1]["wire_per_delivered"].as_f64().unwrap() > fct[0]["wire_per_delivered"].as_f64().unwrap(), "{r}");
}
