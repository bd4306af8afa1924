//! `braid bench handshake`: a quick run of every peer on loopback reports
//! the JSON keys, each peer made connections (and released them:
//! the run fails otherwise) and states Braid's rate against quinn's and
//! TLS's; a bad flag names the flag.

mod cli_support;

use std::time::Duration;

use cli_support::*;

const LIMIT: Duration = Duration::from_secs(300);

const PEERS: [&str; 5] = ["braid", "braid-insecure", "quinn", "tls", "tcp"];

#[test]
fn a_quick_run_of_every_peer_reports_rates_latencies_and_ratios() {
    let out = run(&["bench", "handshake", "--secs", "0.3", "--concurrency", "2", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    assert_eq!(j["encrypted"], true, "{j}");
    assert_eq!(j["secs"], 0.3, "{j}");
    assert_eq!(j["concurrency"], 2, "{j}");
    let peers = j["peers"].as_array().expect("peers[]");
    assert_eq!(peers.len(), PEERS.len(), "{j}");
    for (p, want) in peers.iter().zip(PEERS) {
        assert_eq!(p["peer"], want, "{j}");
        assert!(p["connections"].as_u64().is_some_and(|n| n > 0), "{p}");
        assert!(p["per_sec"].as_f64().is_some_and(|r| r > 0.0), "{p}");
        let (p50, p99) = (p["p50_us"].as_f64().unwrap(), p["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{p}");
        // Encrypted peers name their cipher; the references run in the clear.
        let plaintext = want == "braid-insecure" || want == "tcp";
        assert_eq!(p["cipher"].is_null(), plaintext, "{p}");
    }
    for key in ["braid_over_quinn", "braid_over_tls"] {
        assert!(j[key].as_f64().is_some_and(|r| r > 0.0), "{key}: {j}");
    }
}

#[test]
fn the_table_states_the_ratio_and_each_peers_authentication() {
    let out = run(&["bench", "handshake", "--secs", "0.2"], LIMIT);
    assert!(out.success(), "{out:?}");
    for want in ["conn/s", "x quinn's connections per second", "braid: Noise IK", "quinn: TLS 1.3", "tls: TLS 1.3"] {
        assert!(out.stdout.contains(want), "{want}:\n{}", out.stdout);
    }
}

#[test]
fn insecure_runs_say_so() {
    let out = run(&["bench", "handshake", "--secs", "0.2", "--insecure-no-auth", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    assert_eq!(j["encrypted"], false, "{j}");
    let peers: Vec<&str> = j["peers"].as_array().unwrap().iter().map(|p| p["peer"].as_str().unwrap()).collect();
    assert_eq!(peers, ["braid-insecure", "quinn", "tls", "tcp"]);
    assert!(j["braid_over_quinn"].as_f64().is_some_and(|r| r > 0.0), "{j}");
}

#[test]
fn bad_flags_name_the_flag() {
    let zero = run(&["bench", "handshake", "--concurrency", "0"], LIMIT);
    assert_eq!(zero.code, Some(2), "{zero:?}");
    assert!(zero.stderr.contains("--concurrency") && zero.stderr.contains("1..=4096"), "{}", zero.stderr);
    let secs = run(&["bench", "handshake", "--secs", "0"], LIMIT);
    assert_eq!(secs.code, Some(2), "{secs:?}");
    assert!(secs.stderr.contains("--secs"), "{}", secs.stderr);
    let tiny = run(&["bench", "handshake", "--secs", "0.001"], LIMIT);
    assert_eq!(tiny.code, Some(1), "{tiny:?}");
    assert!(tiny.stderr.contains("--secs"), "{}", tiny.stderr);
}
