//! Helpers of the emulator tests: capability gating (skip locally, fail in
//! CI), one testbed at a time per test binary, ping parsing, statistics.

#![allow(dead_code)] // each test file uses a different subset

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use braid_emu::Testbed;

/// Measurements are timing-sensitive and the machines have 2 cores: one
/// testbed at a time within a test binary (binaries already run one at a
/// time).
static SERIAL: Mutex<()> = Mutex::new(());

/// Take the serial lock (even if a previous test panicked holding it).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn missing(what: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("emulator test cannot run: {what} (CI=true: the test command must provide it)");
    }
    eprintln!("SKIPPED: {what}");
    false
}

/// Whether the emulator can run here, and the `tools` are on PATH. If not:
/// fails under CI=true, else prints why and returns false (skip).
pub fn ready(tools: &[&str]) -> bool {
    if let Err(e) = braid_emu::check_capabilities() {
        return missing(&e.to_string());
    }
    for t in tools {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()));
        if !found {
            return missing(&format!("`{t}` is not installed"));
        }
    }
    true
}

/// A two-host testbed with one path per spec.
pub fn testbed(name: &str, specs: &[&str]) -> Testbed {
    let mut b = Testbed::builder().name(name);
    for s in specs {
        b = b.link(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")));
    }
    b.build().unwrap_or_else(|e| panic!("building testbed {name}: {e}"))
}

/// Run a command to completion, killing it after `limit`.
pub fn run_limited(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            braid_emu::sys::kill(pid, libc::SIGKILL);
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

/// Ping `count` times from `host` to `addr` every `interval_s` seconds;
/// returns the RTTs (ms) of the replies, with the receive time (Unix
/// seconds, from `ping -D`).
pub fn ping(tb: &Testbed, host: &str, addr: &str, count: u32, interval_s: f64) -> Vec<(f64, f64)> {
    let mut c = tb.command(host, "ping").unwrap();
    c.args(["-D", "-n", "-c", &count.to_string(), "-i", &interval_s.to_string(), "-W", "2", addr]);
    let limit = Duration::from_secs_f64(count as f64 * interval_s + 15.0);
    let out = run_limited(c, limit);
    parse_ping(&String::from_utf8_lossy(&out.stdout))
}

/// (receive time, rtt ms) of each reply line of `ping -D`.
pub fn parse_ping(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter_map(|l| {
            let ts = l.strip_prefix('[')?.split(']').next()?.parse::<f64>().ok()?;
            let rtt = l.split("time=").nth(1)?.split_whitespace().next()?.parse::<f64>().ok()?;
            Some((ts, rtt))
        })
        .collect()
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    assert!(n > 0, "no samples");
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub fn std_dev(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

/// Receiver-side throughput (bit/s) of an `iperf3 -J` client run.
pub fn iperf3_bps(json_text: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(json_text).unwrap_or_else(|e| panic!("iperf3 output: {e}\n{json_text}"));
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no end.sum_received.bits_per_second in {json_text}"))
}

/// Run an iperf3 server on `server_host` and a client on `client_host`
/// sending to `addr` for `secs` (first `omit` seconds not counted), both
/// under `wrapper` (e.g. `["mptcpize", "run"]`); returns the client's JSON
/// report.
pub fn iperf3(tb: &Testbed, server_host: &str, client_host: &str, addr: &str, secs: u32, omit: u32, wrapper: &[&str]) -> String {
    let mut argv: Vec<&str> = wrapper.to_vec();
    argv.extend(["iperf3", "-s", "-1", "-B", addr]);
    let mut server = tb
        .command(server_host, argv[0])
        .unwrap()
        .args(&argv[1..])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 server");
    std::thread::sleep(Duration::from_millis(400));
    let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    argv.extend(["iperf3", "-c", addr, "-t", &secs.to_string(), "-O", &omit.to_string(), "-J"].map(String::from));
    let mut c = tb.command(client_host, &argv[0]).unwrap();
    c.args(&argv[1..]);
    let out = run_limited(c, Duration::from_secs(u64::from(secs + omit) + 30));
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        eprintln!("iperf3 {argv:?}: {:.2} Mbit/s", v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6);
    }
    assert!(out.status.success(), "iperf3 client failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}
