use std::sync::Arc;

use super::*;
use crate::oneoff::OneOffOptions;
use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, defaults, run_on_emulator};

#[test]
fn every_default_parses_with_its_type() {
    assert_declarations_valid(&Transfer, &[]);
    Settings::from_params(&defaults(&Transfer)).unwrap();
}

#[test]
fn bad_values_are_refused_naming_the_parameter() {
    assert_each_refused(
        &Transfer,
        [
            ("file_size_min", Value::Size(1 << 30), "file_size_min: must not exceed"),
            ("probe_interval", Value::Duration(Duration::from_millis(1)), "probe_interval: expected 10ms to 60s"),
            ("iperf3_secs", Value::Duration(Duration::ZERO), "iperf3_secs: expected 1s to 120s"),
            ("chunk_size", Value::Size(0), "chunk_size: expected 1 byte to 32MiB"),
            ("tcp_congestion", Value::String("cubic; rm".into()), "tcp_congestion: `cubic; rm` is not an algorithm name"),
        ],
        Settings::from_params,
    );
    let mut p = defaults(&Transfer);
    p.insert("tool", Value::Enum("rsync".into()));
    p.insert("emulate_read", Value::String("10MiB/s".into()));
    let e = Settings::from_params(&p).unwrap_err().to_string();
    assert!(e.contains("emulate_read: only braid emulates storage"), "{e}");
}

#[test]
fn braid_flags_follow_the_parameters() {
    let mut p = defaults(&Transfer);
    p.insert("encrypted", Value::Bool(false));
    p.insert("net", Value::Int(3));
    p.insert("tuner", Value::Enum("falcon".into()));
    p.insert("emulate_write", Value::String("10MiB/s,40MiB/s".into()));
    p.insert("fsync", Value::Bool(false));
    p.insert("staging_memory", Value::Size(64 << 20));
    p.insert("tcp_congestion", Value::String("cubic".into()));
    let s = Settings::from_params(&p).unwrap();
    let o = s.braid_options(Path::new("/nonexistent/braid"), Path::new("/nonexistent")).unwrap();
    let send = o.send.join(" ");
    assert!(send.contains("--tcp-congestion cubic"), "{send}");
    assert!(send.contains("--insecure-no-auth"), "{send}");
    assert!(send.contains("--tuner falcon"), "{send}");
    assert!(send.contains("--net 3") && !send.contains("--read") && !send.contains("--write"), "{send}");
    assert!(send.contains("--staging-memory 67108864"), "{send}");
    let serve = o.serve.join(" ");
    assert!(serve.contains("--emulate-write 10MiB/s,40MiB/s") && serve.contains("--no-fsync"), "{serve}");
    assert!(serve.contains("--insecure-no-auth") && serve.contains("--staging-memory 67108864"), "{serve}");
}

#[test]
fn the_stream_buffer_caps_tcp_or_follows_the_bdp() {
    let mut p = defaults(&Transfer);
    p.insert("link", Value::Link("rtt=100ms,rate=1gbit".into()));
    assert_eq!(Settings::from_params(&p).unwrap().tcp_buffer(), 4 * 12_500_000);
    p.insert("stream_buffer", Value::Size(256 << 10));
    assert_eq!(Settings::from_params(&p).unwrap().tcp_buffer(), 256 << 10);
}

#[test]
fn the_summary_of_one_braid_send_reads_its_threads() {
    let lines = vec![
        "{\"listening\":\"x\"}".to_string(),
        r#"{"ok":true,"threads":[{"t":3.0,"read":1,"net":2,"write":3,"throughput_mbps":10.0,"loss":0.0}],"tcp_congestion":"cubic"}"#.to_string(),
    ];
    let (t, cc) = braid_threads(&lines).unwrap();
    assert_eq!((t[0].read, t[0].net, t[0].write), (1, 2, 3));
    assert_eq!(cc.as_deref(), Some("cubic"));
    assert!(braid_threads(&["no json".to_string()]).is_err());
}

fn small_tree(tool: &str) -> Vec<(String, Value)> {
    vec![
        ("tool".to_string(), Value::Enum(tool.into())),
        ("link".to_string(), Value::Link("rtt=4ms,rate=200mbit".into())),
        ("files".to_string(), Value::Int(300)),
        ("file_size_min".to_string(), Value::Size(1)),
        ("file_size_max".to_string(), Value::Size(64 << 10)),
        ("probe_interval".to_string(), Value::Duration(Duration::from_millis(500))),
        ("transfer_timeout".to_string(), Value::Duration(Duration::from_secs(120))),
    ]
}

/// Over the emulator (root; skipped otherwise): each tool copies a tree
/// of 300 files exactly (the template checks every byte), and is charged
/// CPU and memory.
#[test]
fn every_tool_copies_a_tree_exactly_over_the_emulator() {
    let mut experiments = Vec::new();
    for tool in ["braid", "rsync", "rclone"] {
        if tool != "braid" && tools::require_program(tool, tool).is_err() {
            assert!(std::env::var_os("CI").is_none(), "CI installs {tool} (scripts/test)");
            eprintln!("{tool} is not installed: not compared");
            continue;
        }
        experiments.push(small_tree(tool));
    }
    if tools::braid_program().is_err() {
        eprintln!("skipped: no braid program beside the test (cargo build -p braid-cli)");
        return;
    }
    let Some(runs) = run_on_emulator(Arc::new(Transfer), experiments, &OneOffOptions::default()) else { return };
    for r in runs {
        let tool = r.params.get("tool").map(Value::to_text).unwrap_or_default();
        assert!(r.error.is_none(), "{tool}: {:?}", r.error);
        assert_eq!(r.metric("files"), Some(300.0), "{tool}");
        assert!(r.metric("throughput_mbps").unwrap() > 0.0, "{tool}");
        assert!(r.metric("cpu_seconds_per_gb").unwrap() > 0.0, "{tool}");
        assert!(r.metric("peak_memory_mb").unwrap() > 1.0, "{tool}");
        let report: TransferRun = serde_json::from_value(r.artifact("report").unwrap().clone()).unwrap();
        assert_eq!(report.encrypted, tool != "rsync", "braid runs TLS, rclone SSH");
    }
}

/// Two braid transfers at once over one bottleneck, and the iperf3
/// ceiling after a third.
#[test]
fn concurrent_transfers_share_the_link_and_iperf3_measures_its_ceiling() {
    if tools::braid_program().is_err() || tools::require_program("iperf3", "iperf3").is_err() {
        eprintln!("skipped: needs the braid program and iperf3");
        return;
    }
    let mut two = small_tree("braid");
    two.push(("transfers".to_string(), Value::Int(2)));
    let mut ceiling: Vec<_> = small_tree("braid").into_iter().filter(|(k, _)| !k.starts_with("file")).collect();
    ceiling.push(("compare_iperf3".to_string(), Value::Bool(true)));
    ceiling.push(("files".to_string(), Value::Int(1)));
    ceiling.push(("file_size_min".to_string(), Value::Size(20 << 20)));
    ceiling.push(("file_size_max".to_string(), Value::Size(20 << 20)));
    let Some(runs) = run_on_emulator(Arc::new(Transfer), vec![two, ceiling], &OneOffOptions::default()) else { return };
    assert!(runs[0].error.is_none(), "{:?}", runs[0].error);
    assert_eq!(runs[0].metric("files"), Some(600.0));
    let jain = runs[0].metric("jain").unwrap();
    assert!((0.5..=1.0).contains(&jain), "{jain}");
    assert!(runs[1].error.is_none(), "{:?}", runs[1].error);
    let iperf3 = runs[1].metric("iperf3_mbps").unwrap();
    assert!(iperf3 > 50.0 && iperf3 < 260.0, "a 200 Mbit/s link: {iperf3}");
}
