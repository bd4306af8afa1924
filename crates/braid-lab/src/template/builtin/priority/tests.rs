use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::harness::priority_sim::{ScenarioReport, DEFAULT_LINK, MULTCP_LINK, SWITCH_LINK};
use crate::oneoff::{run_experiments, OneOffOptions, OneOffResult};
use crate::param::Role;
use crate::record::{Record, Recorder};

fn params(values: &[(&str, Value)]) -> Params {
    let values: Vec<(String, Value)> = values.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
    with_defaults(&values).unwrap()
}

fn scenario(name: &str) -> (&'static str, Value) {
    ("scenario", Value::Enum(name.into()))
}

fn config(values: &[(&str, Value)]) -> Result<ScenarioConfig, TemplateError> {
    scenario_config(&params(values), 7)
}

#[test]
fn declares_typed_parameters_whose_defaults_parse() {
    let decls = Priority.params();
    let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["scenario", "multcp_pair", "n", "decrease", "scale", "duration", "tcp", "ledbat", "params", "bin", "link"]
    );
    let defaults = params(&[]);
    let mut parsed_back = Params::default();
    for d in &decls {
        assert!(crate::param::valid_name(&d.name), "{}", d.name);
        assert!(!d.doc.is_empty(), "{} has no doc", d.name);
        // The stored text of a default parses (rerun, store) ...
        parsed_back.insert(&d.name, d.ty.parse_text(&d.default.to_text()).unwrap());
        let want = if d.name == "link" { Role::Environment } else { Role::Configuration };
        assert_eq!(d.role, want, "{}", d.name);
    }
    // ... to the same experiment (the empty link comes back as `rtt=0ms`,
    // an ideal link, which stands for the scenario's own too).
    for name in SCENARIOS {
        let mut a = defaults.clone();
        let mut b = parsed_back.clone();
        a.insert("scenario", Value::Enum(name.into()));
        b.insert("scenario", Value::Enum(name.into()));
        assert_eq!(scenario_config(&a, 1).unwrap(), scenario_config(&b, 1).unwrap(), "{name}");
    }
    assert_eq!(Priority.requirements(), Requirements { emulator: true, exclusive: true });
    assert_eq!(crate::template::find_builtin("priority").map(|t| t.name().to_string()).as_deref(), Some("priority"));
}

#[test]
fn every_scenario_builds_its_run_on_the_papers_link() {
    for (name, link, flows) in [
        ("polite", DEFAULT_LINK, 2),
        ("latecomer", DEFAULT_LINK, 2),
        ("multcp", MULTCP_LINK, 2),
        ("switch", SWITCH_LINK, 2),
        ("five", DEFAULT_LINK, 5),
    ] {
        let cfg = config(&[scenario(name), ("n", Value::Float(2.0)), ("scale", Value::Float(0.1))]).unwrap();
        assert_eq!(cfg.link.to_string(), link.parse::<braid_link::LinkSpec>().unwrap().to_string(), "{name}");
        assert_eq!(cfg.flows.len(), flows, "{name}");
        assert_eq!(cfg.seed, 7);
        assert_eq!(cfg.duration, Duration::from_secs_f64(paper_duration(name).unwrap().as_secs_f64() * 0.1), "{name}");
    }
    let name = |values: &[(&str, Value)]| config(values).unwrap().name;
    assert_eq!(name(&[scenario("multcp"), ("n", Value::Float(3.0))]), "multcp_3");
    let pair = [scenario("multcp"), ("n", Value::Float(3.0)), ("multcp_pair", Value::Bool(true))];
    assert_eq!(name(&pair), "multcp_pair_3");
    let additive = [scenario("latecomer"), ("decrease", Value::Enum("additive".into()))];
    assert_eq!(name(&additive), "latecomer_additive");
    let opts = priority_sim::ScenarioOptions { tcp: CcAlgorithm::Cubic, seed: 7, ..Default::default() };
    let mut want = priority_sim::latecomer(&opts, true).unwrap();
    want.bin = MIN_BIN.max(want.bin);
    assert_eq!(config(&additive).unwrap(), want, "the simulator's latecomer_additive");
    // Elsewhere `additive` sets RFC 6817's decrease on every Braid flow.
    let five = config(&[scenario("five"), ("decrease", Value::Enum("additive".into()))]).unwrap();
    assert!(five.flows.iter().all(|f| f.params.contains(&("delay_beta".into(), 1.0))));
    // An explicit link wins over the paper's.
    let cfg = config(&[scenario("five"), ("link", Value::Link("rtt=10ms,rate=20mbit".into()))]).unwrap();
    assert_eq!(cfg.link.to_string(), "rtt=10ms,rate=20mbit");
}

#[test]
fn duration_scales_the_paper_timings_and_sets_the_bins() {
    let cfg = config(&[scenario("switch"), ("duration", Value::Duration(Duration::from_secs(12)))]).unwrap();
    assert_eq!(cfg.duration, Duration::from_secs(12));
    // Phases p0 0.5–6 s, p1 6.25–9 s, p2 9.25–12 s; switches at 6 and 9 s.
    assert_eq!(cfg.phases[1].start, Duration::from_millis(6250));
    assert_eq!(cfg.flows[1].schedule, vec![(Duration::from_secs(6), 1.0), (Duration::from_secs(9), 2.0)]);
    assert_eq!(cfg.bin, MIN_BIN, "the simulator's 100 ms bins are raised to 250 ms");
    let paper = config(&[scenario("switch")]).unwrap();
    assert_eq!((paper.duration, paper.bin), (Duration::from_secs(480), Duration::from_secs(1)));
    let binned = config(&[scenario("switch"), ("bin", Value::Duration(Duration::from_millis(500)))]).unwrap();
    assert_eq!(binned.bin, Duration::from_millis(500));
    assert_eq!(Priority.expected_duration(&params(&[scenario("polite")])), Duration::from_secs(125));
}

#[test]
fn controllers_follow_tcp_and_ledbat() {
    let cfg = config(&[scenario("switch"), ("tcp", Value::Enum("newreno".into()))]).unwrap();
    assert_eq!(cfg.flows[0].cc, CcAlgorithm::NewReno);
    assert!(cfg.flows[1].params.contains(&("multcp_base".into(), 0.0)));
    let cfg = config(&[
        scenario("switch"),
        ("ledbat", Value::Enum("ledbat++".into())),
        ("params", Value::String("target_ms=50, delay_beta=1".into())),
    ])
    .unwrap();
    assert_eq!(cfg.flows[0].cc, CcAlgorithm::Cubic);
    let dtl = &cfg.flows[1].params;
    let at = |name: &str| dtl.iter().position(|(n, _)| n == name).unwrap();
    assert!(at("variant") < at("target_ms") && at("target_ms") < at("delay_beta"), "{dtl:?}");
}

#[test]
fn bad_values_name_the_parameter_and_the_allowed_form() {
    let err = |values: &[(&str, Value)]| config(values).unwrap_err().to_string();
    let e = err(&[scenario("switch"), ("params", Value::String("delay_beta".into()))]);
    assert!(e.contains("params") && e.contains("NAME=VALUE"), "{e}");
    let e = err(&[scenario("switch"), ("params", Value::String("delay_beta=2".into()))]);
    assert!(e.contains("delay_beta"), "the controller rejects it: {e}");
    let e = err(&[("scale", Value::Float(0.5)), ("duration", Value::Duration(Duration::from_secs(60)))]);
    assert!(e.contains("not both"), "{e}");
    let e = err(&[("scale", Value::Float(0.0))]);
    assert!(e.contains("(0, 100]"), "{e}");
    let e = err(&[scenario("multcp"), ("n", Value::Float(0.0))]);
    assert!(e.contains("n = 0") && e.contains("(0, 100]"), "{e}");
    assert!(err(&[scenario("nope")]).contains("expected one of polite, latecomer"));
    assert!(with_defaults(&[("rtt".into(), Value::Float(1.0))]).unwrap_err().to_string().contains("`rtt`"));
}

#[test]
fn the_delay_target_follows_ledbat_and_cc_params() {
    let t = |v: &[(&str, Value)]| ledbat_target_ms(&params(v)).unwrap();
    assert_eq!(t(&[]), 100.0);
    assert_eq!(t(&[("ledbat", Value::Enum("ledbat++".into()))]), 60.0);
    assert_eq!(t(&[("params", Value::String("target_ms=80,target_ms=70".into()))]), 70.0);
}

proptest! {
    #[test]
    fn cc_params_round_trip(pairs in proptest::collection::vec(("[a-z_]{1,12}", -1e6f64..1e6), 0..5)) {
        let pairs: Vec<(String, f64)> = pairs;
        prop_assert_eq!(parse_cc_params(&format_cc_params(&pairs)).unwrap(), pairs);
    }

    #[test]
    fn cc_params_never_panic(text in "\\PC{0,40}") {
        let _ = parse_cc_params(&text);
    }
}

/// A real report: a short `switch` run on the simulator.
fn simulated_report() -> ScenarioReport {
    let cfg = config(&[scenario("switch"), ("scale", Value::Float(0.02))]).unwrap();
    priority_sim::run(&cfg).unwrap()
}

#[test]
fn scalars_series_and_artifact_carry_the_report() {
    let r = simulated_report();
    let mut rec = Recorder::in_memory();
    let dir = std::env::temp_dir();
    let p = Params::default();
    {
        let mut ctx = Context::new(&p, 1, Instant::now() + Duration::from_secs(5), &mut rec, &dir, "t");
        record_report(&mut ctx, &r);
    }
    let result = OneOffResult { params: p.clone(), error: None, records: rec.take() };
    // Each scalar is the report's figure, computed independently here.
    let m = |name: &str| result.metric(name).unwrap_or_else(|| panic!("no {name}"));
    for (k, phase) in r.phases.iter().enumerate() {
        for (i, f) in phase.flows.iter().enumerate() {
            assert_eq!(m(&format!("phase{k}.flow{i}.throughput_mbps")), f.mbps);
            assert_eq!(m(&format!("phase{k}.flow{i}.share_of_capacity_ratio")), f.mbps / 5.0);
            assert_eq!(m(&format!("phase{k}.flow{i}.share_of_total_ratio")), f.share_of_total);
        }
        assert_eq!(m(&format!("phase{k}.jain_index")), phase.jain.unwrap());
        assert_eq!(m(&format!("phase{k}.queuing_delay_p99_ms")), phase.queuing_delay_p99_ms.unwrap());
        assert_eq!(m(&format!("phase{k}.loss_ratio")), phase.loss);
    }
    assert_eq!(m("flow1.throughput_mbps"), r.flows[1].mean_mbps);
    assert_eq!(m("switch1.stall_rtts"), r.switches[1].stall_rtts);
    assert_eq!(m("max_stall_rtts"), r.switches[0].stall_rtts.max(r.switches[1].stall_rtts));
    assert_eq!(m("queuing_delay_p50_ms"), r.queuing_delay_p50_ms.unwrap());
    let link = r.forward_link;
    assert_eq!(m("bottleneck_loss_ratio"), link.dropped() as f64 / link.offered as f64);
    // No figure twice, none made up.
    let metrics: Vec<&str> = result
        .records
        .iter()
        .filter_map(|x| match x {
            Record::Metric { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let unique: std::collections::BTreeSet<&str> = metrics.iter().copied().collect();
    assert_eq!(unique.len(), metrics.len());
    assert_eq!(metrics.len(), report_scalars(&r).len());
    // One series point per bin and flow, at the bins' middles.
    for (i, f) in r.flows.iter().enumerate() {
        let s = result.series(&format!("throughput_mbps.flow{i}"));
        assert_eq!(s.len(), f.throughput_mbps.len());
        assert_eq!(s[0], (r.bin_secs / 2.0, f.throughput_mbps[0]));
    }
    assert_eq!(report_of(&result).unwrap(), r, "the artifact is the report");
    assert_eq!(result.warnings().count(), 0);
}

#[test]
fn missing_figures_are_left_out_and_failures_warned() {
    let mut r = simulated_report();
    r.phases[0].jain = None;
    r.phases[0].flows[0].share_of_capacity = None;
    r.queuing_delay_p99_ms = None;
    r.switches.clear();
    r.flows[0].error = Some("connection refused".into());
    let names: Vec<String> = report_scalars(&r).into_iter().map(|(n, _)| n).collect();
    for gone in ["phase0.jain_index", "phase0.flow0.share_of_capacity_ratio", "queuing_delay_p99_ms", "max_stall_rtts"] {
        assert!(!names.iter().any(|n| n == gone), "{gone} recorded");
    }
    assert!(names.iter().any(|n| n == "phase1.jain_index"));
    let mut rec = Recorder::in_memory();
    let dir = std::env::temp_dir();
    let p = Params::default();
    {
        let mut ctx = Context::new(&p, 1, Instant::now() + Duration::from_secs(5), &mut rec, &dir, "t");
        record_report(&mut ctx, &r);
    }
    let result = OneOffResult { params: p, error: None, records: rec.take() };
    let warnings: Vec<&str> = result.warnings().collect();
    assert!(warnings.len() == 1 && warnings[0].contains("tcp") && warnings[0].contains("refused"), "{warnings:?}");
    let empty = OneOffResult { params: Params::default(), error: None, records: Vec::new() };
    assert!(report_of(&empty).unwrap_err().to_string().contains("no `report` artifact"));
}

#[test]
fn a_run_past_the_deadline_fails_before_building_a_testbed() {
    let p = params(&[scenario("switch")]);
    let mut rec = Recorder::in_memory();
    let dir = std::env::temp_dir();
    let mut ctx = Context::new(&p, 1, Instant::now() + Duration::from_secs(60), &mut rec, &dir, "t");
    let e = Priority.run(&mut ctx).unwrap_err();
    assert!(matches!(e, TemplateError::Timeout(_)), "{e}");
}

/// A short `switch` run on the emulator through the one-off runner (root
/// only: skipped elsewhere). Sanity: both flows moved data, the switches
/// happened, the scalars are the artifact's.
#[test]
fn a_short_emulator_run_records_its_report() {
    if braid_emu::check_capabilities().is_err() {
        eprintln!("skipped: the emulator cannot run here");
        return;
    }
    let runs = run_experiments(
        std::sync::Arc::new(Priority),
        vec![vec![
            ("scenario".into(), Value::Enum("switch".into())),
            ("duration".into(), Value::Duration(Duration::from_secs(6))),
        ]],
        &OneOffOptions::default(),
    )
    .unwrap();
    let run = &runs[0];
    assert!(run.ok(), "{:?}", run.error);
    let r = report_of(run).unwrap();
    assert_eq!(r.scenario, "switch");
    assert_eq!(r.switches.len(), 2);
    assert!(r.flows.iter().all(|f| f.error.is_none() && f.bytes > 0), "{r:?}");
    for (name, v) in report_scalars(&r) {
        assert_eq!(run.metric(&name), Some(v), "{name}");
    }
    assert_eq!(run.series("throughput_mbps.flow1").len(), 24, "6 s of 250 ms bins");
}
