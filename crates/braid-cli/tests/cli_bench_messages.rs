//! `braid bench messages`: a quick run of every transport on loopback
//! reports the JSON keys with positive rates and ratios and every
//! message checked; bad flags name the flag and the allowed values.

mod cli_support;

use std::time::Duration;

use cli_support::*;

const LIMIT: Duration = Duration::from_secs(300);

const TRANSPORTS: [&str; 7] = ["exon", "braid", "node-tcp", "node-braid", "node-exon", "tcp", "quinn"];

#[test]
fn a_quick_run_of_every_transport_reports_rates_latencies_and_ratios() {
    let out = run(&["bench", "messages", "--secs", "1", "--json"], LIMIT);
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    assert_eq!(j["encrypted"], true);
    assert_eq!(j["checks_ok"], true, "{j}");
    assert!(j["tcp_cc"].as_str().is_some_and(|cc| !cc.is_empty()), "{j}");
    let rate = j["rate"].as_array().expect("rate[]");
    let latency = j["latency"].as_array().expect("latency[]");
    for t in TRANSPORTS {
        for size in [64, 1024] {
            let r = rate.iter().find(|r| r["transport"] == t && r["size"] == size).unwrap_or_else(|| panic!("{t} {size}: {j}"));
            assert!(r["msgs_per_s"].as_f64().unwrap() > 0.0, "{r}");
            for k in [1, 64] {
                let l = latency
                    .iter()
                    .find(|l| l["transport"] == t && l["size"] == size && l["outstanding"] == k)
                    .unwrap_or_else(|| panic!("{t} {size} @{k}: {j}"));
                let (p50, p99) = (l["p50_us"].as_f64().unwrap(), l["p99_us"].as_f64().unwrap());
                assert!(p50 > 0.0 && p50 <= p99, "{l}");
            }
            if t != "tcp" {
                let ratio = j[format!("{t}_over_tcp")][size.to_string()].as_f64();
                assert!(ratio.is_some_and(|r| r > 0.0), "{t}_over_tcp at {size}: {j}");
            }
        }
    }
    assert!(j["braid_over_quinn"]["64"].as_f64().is_some_and(|r| r > 0.0), "{j}");
    assert!(j["node_over_bare"]["node-exon"]["1024"].as_f64().is_some_and(|r| r > 0.0), "{j}");
}

#[test]
fn insecure_runs_say_so() {
    let out = run(
        &["bench", "messages", "--secs", "0.3", "--transport", "braid", "--size", "100", "--outstanding", "4", "--insecure-no-auth", "--json"],
        LIMIT,
    );
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    assert_eq!(j["encrypted"], false);
    assert_eq!(j["rate"].as_array().unwrap().len(), 2, "braid and tcp: {j}");
    assert_eq!(j["latency"][0]["outstanding"], 4);
    assert!(j["braid_over_tcp"]["100"].as_f64().is_some_and(|r| r > 0.0), "{j}");
}

/// `--notify`: the Node runs send a notification per batch and wait for
/// them; each rate entry of a Node transport says how many batches were
/// confirmed (all it sent: the run's checks pass), the others say nothing.
#[test]
fn notify_runs_report_the_batches_confirmed() {
    let out = run(
        &["bench", "messages", "--secs", "0.3", "--transport", "node-braid", "--size", "1KiB", "--outstanding", "4", "--notify", "--json"],
        LIMIT,
    );
    assert!(out.success(), "{out:?}");
    let j = last_json(&out);
    assert_eq!(j["notify"], true);
    assert_eq!(j["checks_ok"], true, "{j}");
    let rate = j["rate"].as_array().unwrap();
    let node = rate.iter().find(|r| r["transport"] == "node-braid").unwrap_or_else(|| panic!("{j}"));
    assert!(node["notified"].as_u64().is_some_and(|n| n > 0), "{j}");
    let tcp = rate.iter().find(|r| r["transport"] == "tcp").unwrap_or_else(|| panic!("{j}"));
    assert!(tcp.get("notified").is_none(), "{j}");
}

#[test]
fn bad_flags_name_the_flag_and_the_allowed_values() {
    let size = run(&["bench", "messages", "--size", "0"], LIMIT);
    assert_eq!(size.code, Some(2), "{size:?}");
    assert!(size.stderr.contains("--size") && size.stderr.contains("8 B to 1 MiB"), "{}", size.stderr);
    let transport = run(&["bench", "messages", "--transport", "tcp,zmq"], LIMIT);
    assert_eq!(transport.code, Some(2), "{transport:?}");
    for want in ["--transport", "zmq", "exon, braid, node, node-tcp"] {
        assert!(transport.stderr.contains(want), "{want}: {}", transport.stderr);
    }
    let outstanding = run(&["bench", "messages", "--outstanding", "0"], LIMIT);
    assert_eq!(outstanding.code, Some(2), "{outstanding:?}");
    assert!(outstanding.stderr.contains("--outstanding"), "{}", outstanding.stderr);
}
