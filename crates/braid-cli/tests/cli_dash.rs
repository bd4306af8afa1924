//! `braid dash`: content (6 s, 2 s segments) + serve (TCP and Braid) + play over both on
//! loopback, every metric recorded and the trace consistent; bad input fails with a clear error.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn braid(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_braid")).args(args).output().expect("run braid")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Stops the server child even when an assertion fails.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn check_play(json: &serde_json::Value, transport: &str) {
    assert_eq!(json["transport"], transport);
    let summary = &json["summary"];
    for key in ["stall_count", "stall_total_s", "startup_s", "mean_kbps", "switches", "switch_magnitude_kbps", "qoe_hossfeld", "qoe_linear"] {
        assert!(summary[key].is_number(), "{key} in {summary}");
    }
    let trace = &json["trace"];
    assert_eq!(trace["ended"], true, "{trace}");
    let startup = trace["startup_s"].as_f64().unwrap();
    let played: f64 = trace["played"].as_array().unwrap().iter().map(|p| p["duration_s"].as_f64().unwrap()).sum();
    let stalled: f64 = trace["stalls"].as_array().unwrap().iter().map(|s| s["duration_s"].as_f64().unwrap()).sum();
    assert!((played - 6.0).abs() < 1e-6, "played {played}");
    let wall = json["wall_s"].as_f64().unwrap();
    assert!((startup + played + stalled - wall).abs() < 1e-3, "{startup} + {played} + {stalled} != {wall}");
    assert_eq!(json["segments"].as_array().unwrap().len(), 3);
    assert_eq!(json["ladder_kbps"].as_array().unwrap().len(), 9);
}

#[test]
fn content_serve_and_play_over_tcp_and_braid() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = braid(&["dash", "content", "--out", cache.to_str().unwrap(), "--segment", "2", "--duration", "6", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = made["dir"].as_str().unwrap().to_string();
    assert!(made["manifest"].as_str().unwrap().ends_with("manifest.mpd"));

    let log = dir.path().join("requests.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["dash", "serve", "--root", &root, "--listen", "127.0.0.1:0", "--braid", "127.0.0.1:0", "--insecure-no-auth"])
        .args(["--log", log.to_str().unwrap(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let _server = Server(child);
    let addrs: serde_json::Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    let (tcp, udp) = (addrs["tcp"].as_str().unwrap(), addrs["braid"].as_str().unwrap());

    let url = format!("http://{tcp}/manifest.mpd");
    let out = braid(&["dash", "play", &url, "--abr", "bola", "--buffer", "4s", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    check_play(&serde_json::from_slice(&out.stdout).unwrap(), "tcp");

    let url = format!("http://{udp}/manifest.mpd");
    let out = braid(&["dash", "play", &url, "--transport", "braid", "--insecure-no-auth", "--abr", "mpc", "--duration", "60s", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let played: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    check_play(&played, "braid");
    assert_eq!(played["paths"].as_array().unwrap().len(), 1);

    // Text output names the metrics.
    let out = braid(&["dash", "play", &format!("http://{tcp}/manifest.mpd"), "--abr", "throughput"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("MOS (Hossfeld)"), "{}", text(&out.stdout));

    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(lines.lines().any(|l| l.contains("\"/manifest.mpd\"") && l.contains("\"status\":200")), "{lines}");

    // A missing manifest: exit 1 and the status named.
    let out = braid(&["dash", "play", &format!("http://{tcp}/nope.mpd"), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
}

#[test]
fn bad_flags_name_the_allowed_form() {
    let out = braid(&["dash", "play", "http://127.0.0.1:9/m.mpd", "--abr", "pensieve"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("throughput, bola or mpc"), "{}", text(&out.stderr));
    let out = braid(&["dash", "play", "https://x/m.mpd"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("expected http://"), "{}", text(&out.stderr));
    let out = braid(&["dash", "serve", "--root", "/nonexistent-braid-dash"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--listen"), "{}", text(&out.stderr));
}
