//! `braid bench priority` end to end on the emulator (needs root; see
//! emu_support): a short `switch` run (three phases of a few seconds) whose
//! JSON has the keys, whose plot is an SVG, and in which the Braid
//! flow and the kernel TCP flow both moved data in every phase. Sanity
//! only: the shares are measured in the benchmark, not asserted here.

mod cli_support;
mod emu_support;

use std::time::Duration;

use cli_support::{last_json, run, TempDir};
use emu_support::*;

#[test]
fn short_switch_run_reports_every_phase_and_plots() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    let dir = TempDir::new("bench-prio");
    let plot = dir.0.join("switch.svg");
    // 12 s: phases p0 0.5–6 s, p1 6.25–9 s, p2 9.25–12 s.
    let out = run(
        &["bench", "priority", "--scenario", "switch", "--duration", "12", "--json", "--plot", plot.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(out.success(), "{out:?}");
    let v = last_json(&out);
    assert_eq!(v["scenario"], "switch");
    let r = &v["reports"][0];
    for key in ["scenario", "link", "link_mbps", "flows", "phases", "switches", "queuing_delay_p50_ms", "queuing_delay_p99_ms"] {
        assert!(r.get(key).is_some(), "report lacks `{key}`: {r}");
    }
    let phases = r["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 3, "{r}");
    for p in phases {
        for key in ["name", "jain", "queuing_delay_p50_ms", "queuing_delay_p99_ms", "loss", "bottleneck_loss", "utilization"] {
            assert!(p.get(key).is_some(), "phase lacks `{key}`: {p}");
        }
        // The probe crossed the bottleneck in every phase.
        assert!(p["queuing_delay_p50_ms"].as_f64().is_some(), "no delay samples in {p}");
        for f in p["flows"].as_array().expect("flows") {
            for key in ["label", "priority", "mbps", "share_of_capacity", "share_of_total"] {
                assert!(f.get(key).is_some(), "phase flow lacks `{key}`: {f}");
            }
            assert!(f["mbps"].as_f64().unwrap() > 0.0, "{} moved no data in phase {}: {r}", f["label"], p["name"]);
        }
    }
    assert_eq!(phases[1]["flows"][1]["priority"], 1.0);
    assert_eq!(phases[2]["flows"][1]["priority"], 2.0);
    for f in r["flows"].as_array().unwrap() {
        assert!(f["error"].is_null(), "{f}");
        assert_eq!(f["throughput_mbps"].as_array().unwrap().len(), 48, "one value per 0.25 s bin: {f}");
    }
    // Both switches happened on the live connection and were watched.
    let switches = r["switches"].as_array().unwrap();
    assert_eq!(switches.len(), 2, "{r}");
    assert!(switches.iter().all(|s| s["srtt_ms"].as_f64().unwrap() > 0.0), "{r}");
    // On time (12 s × 240/480 and × 360/480), give or take a scheduling delay.
    for (s, want) in switches.iter().zip([6.0, 9.0]) {
        let at = s["at_secs"].as_f64().unwrap();
        assert!((at - want).abs() < 0.5, "switch at {at} s, scheduled at {want} s: {r}");
    }
    assert!(v["checks"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    let svg = std::fs::read_to_string(&plot).expect("the plot file");
    assert!(svg.starts_with("<svg") && svg.contains("dtl") && svg.contains("tcp") && svg.contains("p=2"), "not the plot: {}", &svg[..svg.len().min(300)]);
}

#[test]
fn bad_options_name_the_allowed_form() {
    // Checked before any testbed is built: no root needed.
    let out = run(&["bench", "priority", "--scenario", "nope"], Duration::from_secs(30));
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("expected polite, latecomer, multcp, switch, five, versus or pair"), "{}", out.stderr);
    let out = run(&["bench", "priority", "--scenario", "five", "--plot", "x.png"], Duration::from_secs(30));
    assert!(out.stderr.contains(".svg"), "{}", out.stderr);
    let out = run(&["bench", "priority", "--scenario", "switch", "--param", "delay_beta=2"], Duration::from_secs(30));
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("delay_beta"), "{}", out.stderr);
}
