//! The `dash` template end to end (issue 21's CI acceptance): dash.js and
//! Shaka Player in headless Chromium inside the emulator's client
//! namespace, and Braid's own ABR client, each play 20 s of the thesis's
//! content from `braid dash serve` through an emulated link and record
//! every QoE metric; a 10 s link cut shows as a stall of the cut's length;
//! a missing manifest and a 404 segment fail the experiment with the
//! player's message, in bounded time; Braid's client plays over a
//! two-path testbed on a multipath Braid connection, both paths carrying.
//!
//! Needs root (the emulator), `chromium` and `chromedriver`, `ffmpeg`, the
//! vendored players (`npm ci --prefix players`) and the `braid` program
//! built (`cargo build -p braid-cli`; or `BRAID_LAB_BRAID=PATH`); the
//! multipath test needs neither the browser nor the players. Without them
//! the tests fail with a message when `CI=true` and are skipped otherwise.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use braid_lab::oneoff::{run_experiments, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::template::builtin::dash::Dash;
use braid_lab::template::Template;

/// Every `QoeSummary` field, as the template records it.
const QOE: [&str; 8] =
    ["stall_count", "stall_total_s", "startup_s", "mean_kbps", "switches", "switch_magnitude_kbps", "qoe_hossfeld", "qoe_linear"];

/// The emulator tests of this binary run one at a time (they measure).
static SERIAL: Mutex<()> = Mutex::new(());

/// What is missing to run, if anything (the browser and its players only
/// if `browser`).
fn missing(browser: bool) -> Option<String> {
    if browser {
        if let Err(e) = braid_lab::browser::BrowserTools::find() {
            return Some(e.to_string());
        }
        if let Err(e) = braid_lab::template::builtin::dash::serve::players_dir() {
            return Some(e.to_string());
        }
    }
    let on_path = |p: &str| {
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(p).is_file()))
    };
    if !on_path("ffmpeg") {
        return Some("ffmpeg is not installed (Debian: apt-get install -y ffmpeg)".into());
    }
    if let Err(e) = braid::emu::check_capabilities() {
        return Some(format!("the emulator cannot run here (needs root): {e}"));
    }
    if let Err(e) = braid_lab::template::builtin::transfer::tools::braid_program() {
        return Some(format!("{e} (cargo build -p braid-cli)"));
    }
    None
}

/// `None` (skip) when something is missing outside CI; panics in CI.
fn ready(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    ready_for(test, true)
}

/// [`ready`], the browser needed only if `browser`.
fn ready_for(test: &str, browser: bool) -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Some(why) = missing(browser) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: {why}");
        }
        eprintln!("{test}: skipped: {why}");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

fn run(experiments: Vec<Vec<(&str, Value)>>) -> Vec<OneOffResult> {
    let experiments = experiments
        .into_iter()
        .map(|e| e.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        .collect();
    let options = OneOffOptions { seed: 21, timeout: Some(Duration::from_secs(180)) };
    let template: Arc<dyn Template> = Arc::new(Dash);
    run_experiments(template, experiments, &options).expect("the one-off runner starts")
}

fn secs(s: u64) -> Value {
    Value::Duration(Duration::from_secs(s))
}

/// 20 s of the 30 s content with 2 s segments over a 40 ms, 5 Mbit/s link.
fn short(player: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("player", Value::Enum(player.into())),
        ("segment", Value::Int(2)),
        ("content_duration", secs(30)),
        ("duration", secs(20)),
        ("buffer", secs(10)),
        ("link", Value::Link("rtt=40ms".into())),
        ("bandwidth_mean", Value::Float(5.0)),
        ("bandwidth_variance", Value::Float(0.0)),
    ]
}

fn report(r: &OneOffResult) -> String {
    let mut s = format!("{}: ", r.params.str("player").unwrap_or("?"));
    for m in QOE.iter().chain(&["played_s", "requests", "http_errors", "cut_stall_s", "cut_buffer_s", "cut_length_s"]) {
        if let Some(v) = r.metric(m) {
            s.push_str(&format!("{m}={v:.2} "));
        }
    }
    s
}

#[test]
fn browser_players_and_the_braid_client_play_through_the_emulator() {
    let Some(_serial) = ready("dash players") else { return };
    let results = run(vec![short("dashjs"), short("shaka"), short("braid")]);
    for r in &results {
        eprintln!("{}", report(r));
        assert!(r.ok(), "{}: {:?}", r.params.str("player").unwrap_or("?"), r.error);
        for m in QOE {
            assert!(r.metric(m).is_some_and(f64::is_finite), "{m} recorded: {}", report(r));
        }
        let played = r.metric("played_s").unwrap_or(0.0);
        // Braid's client stops after 20 s of wall time, startup included.
        assert!((18.0..=21.0).contains(&played), "20 s played: {}", report(r));
        let kbps = r.metric("mean_kbps").unwrap_or(0.0);
        // The ladder's rungs are 250..10000 kbit/s and the link carries 5
        // Mbit/s: a played bitrate between the lowest rung and the link.
        assert!((250.0..=5000.0).contains(&kbps), "mean bitrate within the link: {}", report(r));
        assert!(!r.series("kbps").is_empty(), "the bitrate series");
        assert_eq!(r.metric("http_errors"), Some(0.0));
        assert!(r.metric("requests").unwrap_or(0.0) >= 10.0, "segments fetched from the server: {}", report(r));
    }
    for r in &results[..2] {
        assert!(r.series("buffer_s").len() >= 20, "the browser's buffer series");
    }
}

#[test]
fn a_ten_second_link_cut_is_a_stall_of_the_cut_s_length() {
    let Some(_serial) = ready("dash link cut") else { return };
    // A small buffer (2 s of 1 s segments) runs dry soon after the cut
    // begins, so the stall covers the cut but for the buffered seconds. A
    // short queue (30 kB, 48 ms at 5 Mbit/s): what the link had queued when
    // the cut began still arrives during it (packets keep their schedule),
    // and a deep queue would feed the player for a second or more.
    let mut e = short("dashjs");
    e.push(("queue", Value::Size(30_000)));
    e.retain(|(k, _)| !matches!(*k, "segment" | "buffer" | "duration"));
    e.extend([
        ("segment", Value::Int(1)),
        ("buffer", secs(2)),
        ("duration", secs(30)),
        ("cut_at", secs(8)),
        ("cut_for", secs(10)),
    ]);
    let results = run(vec![e]);
    let r = &results[0];
    eprintln!("{}", report(r));
    assert!(r.ok(), "{:?}", r.error);
    let cut = r.metric("cut_length_s").expect("the cut happened");
    assert!((cut - 10.0).abs() < 0.5, "the cut lasted {cut} s");
    let stall = r.metric("cut_stall_s").unwrap_or(0.0);
    let buffered = r.metric("cut_buffer_s").unwrap_or(0.0);
    assert!(stall > 0.0, "the cut caused a stall: {}", report(r));
    // A player that fetches nothing during the cut plays what it holds
    // (at most its 2 s buffer target) and then stalls until the first
    // segment after the cut arrives: the stall is the cut less at most the
    // buffer target, plus the refetch, each within 1 s. (The buffer sampled
    // at the cut, every 0.5 s, is too coarse to subtract exactly.)
    let target = 2.0;
    assert!(
        stall >= cut - target - 1.0 && stall <= cut + 1.0,
        "stall {stall:.2} s vs cut {cut:.2} s (buffer target {target} s, {buffered:.2} s sampled at the cut)"
    );
}

#[test]
fn a_missing_manifest_and_a_missing_segment_fail_with_the_player_s_message() {
    let Some(_serial) = ready("dash faults") else { return };
    let mut no_manifest = short("dashjs");
    no_manifest.push(("manifest", Value::String("missing.mpd".into())));
    let mut no_segment = short("shaka");
    no_segment.push(("missing_segment", Value::Int(3)));
    let mut braid_no_manifest = short("braid");
    braid_no_manifest.push(("manifest", Value::String("missing.mpd".into())));
    let started = Instant::now();
    let results = run(vec![no_manifest, no_segment, braid_no_manifest]);
    let errors: Vec<String> = results.iter().map(|r| r.error.clone().unwrap_or_default()).collect();
    eprintln!("{errors:#?}");
    assert!(errors[0].contains("missing.mpd"), "{}", errors[0]);
    assert!(errors[1].contains("404"), "{}", errors[1]);
    assert!(!errors[2].is_empty(), "the braid client fails without a manifest");
    // Each failed within its limits, none ran into the runner's timeout.
    assert!(started.elapsed() < Duration::from_secs(150), "{:?}", started.elapsed());
}

/// A Mahimahi trace of `per_4ms` packets every 4 ms (3 Mbit/s each) for
/// one second, repeating.
fn steady_trace(dir: &std::path::Path, name: &str, per_4ms: u32) -> std::path::PathBuf {
    let mut text = String::new();
    for t in (4..=1000).step_by(4) {
        for _ in 0..per_4ms {
            text.push_str(&format!("{t}\n"));
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a trace");
    path
}

#[test]
fn the_braid_client_plays_over_two_paths_on_a_multipath_connection() {
    let Some(_serial) = ready_for("dash multipath", false) else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Path 1: 3 Mbit/s, 40 ms; path 2: 6 Mbit/s, 60 ms.
    let (t1, t2) = (steady_trace(dir.path(), "p1", 1), steady_trace(dir.path(), "p2", 2));
    let mut e = short("braid");
    e.retain(|(k, _)| !k.starts_with("bandwidth"));
    e.extend([
        ("bandwidth_mean", Value::Float(0.0)),
        ("transport", Value::Enum("multipath".into())),
        ("trace", Value::Trace(t1)),
        ("trace2", Value::Trace(t2)),
        ("link2", Value::Link("rtt=60ms".into())),
    ]);
    let results = run(vec![e]);
    let r = &results[0];
    let paths = ["path1_mean_mbps", "path2_mean_mbps", "path1_bytes", "path2_bytes", "path1_srtt_ms", "path2_srtt_ms"];
    let detail = format!("{} {:?}", report(r), paths.map(|m| r.metric(m)));
    eprintln!("{detail}");
    assert!(r.ok(), "{:?}", r.error);
    for m in QOE {
        assert!(r.metric(m).is_some_and(f64::is_finite), "{m} recorded: {detail}");
    }
    let played = r.metric("played_s").unwrap_or(0.0);
    assert!((18.0..=21.0).contains(&played), "20 s played: {detail}");
    // The two rates as the ranking window saw them; multipath uses both, so
    // it records no single path used.
    assert!((r.metric("path1_mean_mbps").unwrap_or(0.0) - 3.0).abs() < 0.1, "{detail}");
    assert!((r.metric("path2_mean_mbps").unwrap_or(0.0) - 6.0).abs() < 0.1, "{detail}");
    assert_eq!(r.metric("path_used"), None, "{detail}");
    // Both paths carried the video, and the requests went over Braid.
    for m in ["path1_bytes", "path2_bytes"] {
        assert!(r.metric(m).unwrap_or(0.0) > 100_000.0, "{m}: {detail}");
    }
    let kbps = r.metric("mean_kbps").unwrap_or(0.0);
    assert!((250.0..=9000.0).contains(&kbps), "mean bitrate within the two paths: {detail}");
    assert_eq!(r.metric("http_errors"), Some(0.0));
    assert!(r.metric("requests").unwrap_or(0.0) >= 10.0, "segments fetched from the server: {detail}");
}
