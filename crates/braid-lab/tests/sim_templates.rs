//! The simulator templates (`sim-transfer`, `sim-priority`,
//! `sim-multipath`) through the lab's one-off runner: the same experiment
//! twice gives identical records, another seed a different run, the
//! scalars agree with the report artifact, a deadline stops a long run,
//! and the study files in `studies/` are valid for them.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::oneoff::{run_experiments, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::record::Record;
use braid_lab::study::Study;
use braid_lab::template::builtin::priority;
use braid_lab::template::{find_builtin, Template};

fn run(template: &str, values: &[(&str, Value)], seed: u64) -> OneOffResult {
    let t: Arc<dyn Template> = find_builtin(template).unwrap_or_else(|| panic!("no built-in {template}"));
    let values = values.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let mut runs = run_experiments(t, vec![values], &OneOffOptions { seed, timeout: None }).unwrap();
    runs.remove(0)
}

fn transfer(seed: u64) -> OneOffResult {
    run(
        "sim-transfer",
        &[
            ("link", Value::Link("rtt=20ms,rate=20mbit,loss=0.5%".into())),
            ("bytes", Value::Size(400_000)),
            ("flows", Value::Int(2)),
        ],
        seed,
    )
}

fn priority(seed: u64) -> OneOffResult {
    run("sim-priority", &[("scenario", Value::Enum("switch".into())), ("scale", Value::Float(0.05))], seed)
}

fn multipath(seed: u64) -> OneOffResult {
    run(
        "sim-multipath",
        &[
            ("scheduler", Value::Enum("opportunistic_redundant".into())),
            ("flows", Value::Int(30)),
            ("flow_size", Value::Size(20_000)),
        ],
        seed,
    )
}

fn artifact_f64(r: &OneOffResult, pointer: &str) -> f64 {
    let report = r.artifact("report").expect("a report artifact");
    report.pointer(pointer).and_then(serde_json::Value::as_f64).unwrap_or_else(|| panic!("no number at {pointer}"))
}

#[test]
fn the_same_experiment_gives_identical_records_and_another_seed_another_run() {
    type Runner = fn(u64) -> OneOffResult;
    let templates: [(&str, Runner, &str); 3] = [
        ("sim-transfer", transfer, "/trace_hash"),
        ("sim-priority", priority, "/trace_hash"),
        ("sim-multipath", multipath, "/fct_ms"),
    ];
    for (name, runner, distinct) in templates {
        let (a, b) = (runner(3), runner(3));
        assert!(a.ok(), "{name}: {:?}", a.error);
        assert!(a.records.len() > 10, "{name}: {} records", a.records.len());
        assert_eq!(a.records, b.records, "{name}: two runs of one experiment differ");
        let other = runner(4);
        let (x, y) =
            (a.artifact("report").unwrap().pointer(distinct), other.artifact("report").unwrap().pointer(distinct));
        assert!(x.is_some() && x != y, "{name}: seeds 3 and 4 gave the same {distinct}");
    }
}

#[test]
fn sim_transfer_scalars_are_the_reports() {
    let r = transfer(1);
    assert_eq!(r.metric("ok"), Some(1.0));
    for key in ["bytes", "goodput_mbps", "link_mbps", "efficiency", "retransmits", "jain", "virtual_secs"] {
        assert_eq!(r.metric(key), Some(artifact_f64(&r, &format!("/{key}"))), "{key}");
    }
    assert_eq!(r.metric("bytes"), Some(800_000.0));
    // The throughput series covers the run and averages to the goodput.
    let series = r.series("throughput_mbps");
    assert!(!series.is_empty());
    let (t_end, _) = series[series.len() - 1];
    assert!(t_end <= artifact_f64(&r, "/virtual_secs") + 0.2, "series ends at {t_end}");
    let bits: f64 = series.windows(2).map(|w| w[1].1 * (w[1].0 - w[0].0)).sum::<f64>() + series[0].1 * series[0].0;
    let delivered_mbit = 800_000.0 * 8.0 / 1e6;
    assert!(
        bits <= delivered_mbit + 1e-6 && bits > 0.5 * delivered_mbit,
        "{bits} of {delivered_mbit} Mbit in the series"
    );
}

#[test]
fn sim_priority_scalars_are_the_reports() {
    let r = priority(1);
    let report = r.artifact("report").unwrap();
    assert_eq!(report["scenario"], "switch");
    let phases = report["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    // Phases and flows by index, in the scenario's order; the report
    // names them.
    for (k, p) in phases.iter().enumerate() {
        for (i, _) in p["flows"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                r.metric(&format!("throughput_mbps.phase{k}.flow{i}")),
                Some(artifact_f64(&r, &format!("/phases/{k}/flows/{i}/mbps"))),
                "phase {k} flow {i}"
            );
            assert_eq!(
                r.metric(&format!("share_of_capacity_ratio.phase{k}.flow{i}")),
                Some(artifact_f64(&r, &format!("/phases/{k}/flows/{i}/share_of_capacity")))
            );
        }
        assert_eq!(r.metric(&format!("jain_index.phase{k}")), Some(artifact_f64(&r, &format!("/phases/{k}/jain"))));
        assert_eq!(
            r.metric(&format!("queuing_delay_p99_ms.phase{k}")),
            Some(artifact_f64(&r, &format!("/phases/{k}/queuing_delay_p99_ms")))
        );
        assert_eq!(r.metric(&format!("loss_ratio.phase{k}")), Some(artifact_f64(&r, &format!("/phases/{k}/loss"))));
    }
    assert_eq!(report["flows"][1]["label"], "dtl");
    assert_eq!(r.metric("mean_throughput_mbps.flow1"), Some(artifact_f64(&r, "/flows/1/mean_mbps")));
    assert_eq!(r.metric("queuing_delay_p50_ms"), Some(artifact_f64(&r, "/queuing_delay_p50_ms")));
    assert_eq!(r.metric("switch_count"), Some(2.0));
    let worst =
        report["switches"].as_array().unwrap().iter().map(|s| s["stall_rtts"].as_f64().unwrap()).fold(0.0, f64::max);
    assert_eq!(r.metric("max_stall_rtts"), Some(worst));
    // Switch has five criteria; every one is counted once.
    assert_eq!(r.metric("checks_passed").unwrap() + r.metric("checks_failed").unwrap(), 5.0);
    // Series at the middle of each bin.
    let bins = report["flows"][0]["throughput_mbps"].as_array().unwrap();
    let series = r.series("throughput_mbps.flow0");
    assert_eq!(series.len(), bins.len());
    let bin_secs = artifact_f64(&r, "/bin_secs");
    for (k, (t, v)) in series.iter().enumerate() {
        assert_eq!((*t, Some(*v)), ((k as f64 + 0.5) * bin_secs, bins[k].as_f64()), "bin {k}");
    }
    assert_eq!(r.series("queue_drops_packets").len(), bins.len());
}

#[test]
fn both_priority_templates_record_through_one_function() {
    // The simulator's records are exactly what the emulator template's
    // record function makes of the same report: one set of names for
    // `show` and `best` across both.
    let r = priority(2);
    let report = priority::report_of(&r).unwrap();
    let scalars = priority::report_scalars(&report, 100.0);
    let recorded: Vec<(String, f64)> = r
        .records
        .iter()
        .filter_map(|x| match x {
            Record::Metric { name, value } => Some((name.clone(), *value)),
            _ => None,
        })
        .collect();
    assert_eq!(recorded, scalars);
    for (name, points) in priority::report_series(&report) {
        assert_eq!(r.series(&name), points, "{name}");
    }
}

#[test]
fn sim_multipath_scalars_are_the_reports() {
    let r = multipath(1);
    assert_eq!(r.metric("ok"), Some(1.0));
    assert_eq!(r.metric("flows_completed"), Some(30.0));
    for key in
        ["fct_p50_ms", "fct_p90_ms", "fct_p99_ms", "fct_mean_ms", "fct_max_ms", "wire_over_delivered", "goodput_mbps"]
    {
        assert_eq!(r.metric(key), Some(artifact_f64(&r, &format!("/{key}"))), "{key}");
    }
    let fcts: Vec<f64> = r.series("fct_ms").into_iter().map(|(_, v)| v).collect();
    assert_eq!(fcts.len(), 30);
    assert_eq!(serde_json::to_value(&fcts).unwrap(), r.artifact("report").unwrap()["fct_ms"]);
    let mean = fcts.iter().sum::<f64>() / 30.0;
    assert!((r.metric("fct_mean_ms").unwrap() - mean).abs() < 1e-9);
    let mut sorted = fcts.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(r.metric("fct_p50_ms"), Some(sorted[14]), "nearest rank: the 15th of 30");
    assert_eq!(r.metric("fct_max_ms"), Some(sorted[29]));
    // Each flow moved 64 + 20,000 bytes; the wire carried more (headers,
    // acknowledgements, redundant copies).
    assert_eq!(r.metric("delivered_bytes"), Some(30.0 * 20_064.0));
    assert!(r.metric("wire_over_delivered").unwrap() > 1.0);
    // Every completion time is at least one RTT of the faster path.
    assert!(sorted[0] >= 20.0, "{sorted:?}");
}

#[test]
fn a_redundant_scheduler_pays_in_bytes_on_the_wire() {
    let wire = |scheduler: &str| {
        run(
            "sim-multipath",
            &[("scheduler", Value::Enum(scheduler.into())), ("flows", Value::Int(20)), ("loss_pct", Value::Float(0.0))],
            1,
        )
        .metric("wire_over_delivered")
        .unwrap()
    };
    let (single, redundant) = (wire("min_rtt"), wire("redundant"));
    assert!(redundant > 1.8 * single, "redundant {redundant:.2} vs min_rtt {single:.2} wire bytes per delivered byte");
}

#[test]
fn a_deadline_stops_a_long_simulation() {
    let cases: [(&str, Vec<(String, Value)>); 3] = [
        ("sim-transfer", vec![("bytes".into(), Value::Size(20 << 30))]),
        (
            "sim-priority",
            vec![("scenario".into(), Value::Enum("switch".into())), ("rate_mbps".into(), Value::Float(1000.0))],
        ),
        ("sim-multipath", vec![("flows".into(), Value::Int(100_000)), ("flow_size".into(), Value::Size(1 << 20))]),
    ];
    for (name, values) in cases {
        let t = find_builtin(name).unwrap();
        let started = Instant::now();
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_millis(300)) };
        let r = run_experiments(t, vec![values], &options).unwrap().remove(0);
        let took = started.elapsed();
        let error = r.error.unwrap_or_default();
        assert!(error.contains("deadline passed"), "{name}: {error}");
        assert!(took < Duration::from_secs(10), "{name}: returned {took:?} after a 300 ms deadline");
    }
}

#[test]
fn invalid_parameters_fail_the_experiment_with_the_field_named() {
    let r = run("sim-priority", &[("params", Value::String("delay_beta=2".into()))], 1);
    assert!(r.error.as_deref().unwrap_or("").contains("delay_beta"), "{:?}", r.error);
    let r = run("sim-multipath", &[("flow_size", Value::Size(0))], 1);
    assert!(r.error.as_deref().unwrap_or("").contains("flow_size"), "{:?}", r.error);
    let t = find_builtin("sim-transfer").unwrap();
    let e = run_experiments(t, vec![vec![("speed".into(), Value::Int(1))]], &OneOffOptions::default()).unwrap_err();
    assert!(e.to_string().contains("unknown parameter `speed`"), "{e}");
}

#[test]
fn the_simulator_studies_are_valid_and_as_large_as_documented() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../studies");
    for (file, template, count) in [
        ("redundancy.toml", "sim-multipath", 2700),
        ("redundancy-thesis.toml", "sim-multipath", 640),
        ("priority-grid.toml", "sim-priority", 1080),
        ("cc-grid.toml", "sim-priority", 2700),
    ] {
        let path = dir.join(file);
        let study = Study::load_builtin(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(study.template.name(), template, "{file}");
        assert_eq!(study.count(), count, "{file}");
        assert!(!study.exclusive(), "{file}: simulator experiments may share the cores");
    }
}
