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

/// MACI's line: the configuration is Braid's controller and its
/// settings; the scenario, the competing TCP, the path and the run's
/// length and binning are the environment.
const CONFIGURATION: [&str; 5] = ["n", "ledbat", "decrease", "params", "encrypted"];

#[test]
fn declares_typed_parameters_whose_defaults_parse() {
    let decls = Priority.params();
    let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "scenario",
            "link",
            "rtt",
            "rate_mbps",
            "queue",
            "queue_bdp",
            "aqm",
            "jitter_packets",
            "epochs",
            "max_phase",
            "scale",
            "duration",
            "bin",
            "tcp",
            "multcp_pair",
            "n",
            "ledbat",
            "decrease",
            "params",
            "encrypted"
        ]
    );
    let defaults = params(&[]);
    let mut parsed_back = Params::default();
    for d in &decls {
        assert!(crate::param::valid_name(&d.name), "{}", d.name);
        assert!(!d.doc.is_empty(), "{} has no doc", d.name);
        // The stored text of a default parses to the same value (rerun, store).
        let back = d.ty.parse_text(&d.default.to_text()).unwrap();
        assert_eq!(back, d.default, "{}", d.name);
        parsed_back.insert(&d.name, back);
        let want = if CONFIGURATION.contains(&d.name.as_str()) { Role::Configuration } else { Role::Environment };
        assert_eq!(d.role, want, "{}", d.name);
    }
    assert_eq!(defaults.get("link").unwrap(), &Value::Link(String::new()), "the scenario's own link");
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
fn an_empty_or_ideal_link_is_the_scenarios_own() {
    let link = |text: &str| link_override(&params(&[("link", Value::Link(text.into()))]));
    assert_eq!(link("").unwrap(), None);
    assert_eq!(link("  ").unwrap(), None);
    // How experiments stored before the empty default wrote it.
    assert_eq!(link("rtt=0ms").unwrap(), None);
    assert_eq!(link("rtt=10ms,rate=20mbit").unwrap().map(|l| l.to_string()).as_deref(), Some("rtt=10ms,rate=20mbit"));
    let e = link("rtt=fast").unwrap_err().to_string();
    assert!(e.contains("link"), "{e}");
    let ideal = config(&[scenario("switch"), ("link", Value::Link("rtt=0ms".into()))]).unwrap();
    assert_eq!(ideal.link.to_string(), SWITCH_LINK.parse::<braid_link::LinkSpec>().unwrap().to_string());
}

#[test]
fn every_scenario_builds_its_run_on_the_papers_link() {
    for (name, link, flows) in [
        ("polite", DEFAULT_LINK, 3),
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
    // The grid's scenarios: versus is polite at n = 0, MulTCP(n) above;
    // pair is two flows at n, 0 included.
    assert_eq!(name(&[scenario("versus"), ("n", Value::Float(0.0))]), "polite");
    assert_eq!(name(&[scenario("versus"), ("n", Value::Float(2.0))]), "multcp_2");
    assert_eq!(name(&[scenario("pair"), ("n", Value::Float(0.0))]), "multcp_pair_0");
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
    // polite's 160 s (with its TCP-alone phase) and the 5 s of setup.
    assert_eq!(Priority.expected_duration(&params(&[scenario("polite")])), Duration::from_secs(165));
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
    assert!(e.contains("`n`") && e.contains("(0, 100]"), "{e}");
    let e = err(&[scenario("versus"), ("epochs", Value::Float(3.0)), ("scale", Value::Float(0.5))]);
    assert!(e.contains("not both"), "{e}");
    assert!(err(&[scenario("nope")]).contains("expected one of polite, latecomer"));
    assert!(with_defaults(&[("rtt_ms".into(), Value::Float(1.0))]).unwrap_err().to_string().contains("`rtt_ms`"));
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

/// Record `r` as a template would, and read the records back.
fn recorded(r: &ScenarioReport, target_ms: f64) -> OneOffResult {
    let mut rec = Recorder::in_memory();
    let dir = std::env::temp_dir();
    let p = Params::default();
    {
        let mut ctx = Context::new(&p, 1, Instant::now() + Duration::from_secs(5), &mut rec, &dir, "t");
        record_report(&mut ctx, r, target_ms);
    }
    OneOffResult { params: p, error: None, records: rec.take() }
}

#[test]
fn scalars_series_and_artifact_carry_the_report() {
    let r = simulated_report();
    let result = recorded(&r, 100.0);
    // Each scalar is the report's figure, computed independently here.
    let m = |name: &str| result.metric(name).unwrap_or_else(|| panic!("no {name}"));
    for (k, phase) in r.phases.iter().enumerate() {
        for (i, f) in phase.flows.iter().enumerate() {
            assert_eq!(m(&format!("throughput_mbps.phase{k}.flow{i}")), f.mbps);
            assert_eq!(m(&format!("share_of_capacity_ratio.phase{k}.flow{i}")), f.mbps / 5.0);
            assert_eq!(m(&format!("share_of_total_ratio.phase{k}.flow{i}")), f.share_of_total);
        }
        let total: f64 = phase.flows.iter().map(|f| f.mbps).sum();
        assert_eq!(m(&format!("utilization_ratio.phase{k}")), total / 5.0);
        assert_eq!(m(&format!("jain_index.phase{k}")), phase.jain.unwrap());
        assert_eq!(m(&format!("queuing_delay_p99_ms.phase{k}")), phase.queuing_delay_p99_ms.unwrap());
        assert_eq!(m(&format!("loss_ratio.phase{k}")), phase.loss);
        assert_eq!(m(&format!("queue_drops_packets.phase{k}")), phase.queue_drops as f64);
    }
    assert_eq!(m("mean_throughput_mbps.flow1"), r.flows[1].mean_mbps);
    assert_eq!(m("delivered_bytes.flow0"), r.flows[0].bytes as f64);
    assert_eq!(m("stall_rtts.switch1"), r.switches[1].stall_rtts);
    assert_eq!(m("switch_at_secs.switch0"), r.switches[0].at_secs);
    assert_eq!(m("switch_count"), 2.0);
    assert_eq!(m("max_stall_rtts"), r.switches[0].stall_rtts.max(r.switches[1].stall_rtts));
    assert_eq!(m("max_stall_ms"), r.switches[0].longest_stall_ms.max(r.switches[1].longest_stall_ms));
    assert_eq!(m("queuing_delay_p50_ms"), r.queuing_delay_p50_ms.unwrap());
    let (sent, lost) = r.flows.iter().fold((0, 0), |(s, l), f| (s + f.packets_sent, l + f.packets_lost));
    assert!(sent > 0);
    assert_eq!(m("loss_ratio"), lost as f64 / sent as f64);
    let link = r.forward_link;
    assert_eq!(m("bottleneck_loss_ratio"), link.dropped() as f64 / link.offered as f64);
    assert_eq!(m("queue_drops_packets"), link.dropped_queue as f64);
    // The checks are the harness's for this one run, with this target.
    let checks = priority_sim::checks(std::slice::from_ref(&r), 100.0);
    assert_eq!(checks.len(), 5, "switch has five criteria");
    let passed = checks.iter().filter(|c| c.pass).count() as f64;
    assert_eq!((m("checks_passed"), m("checks_failed")), (passed, 5.0 - passed));
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
    assert_eq!(metrics.len(), report_scalars(&r, 100.0).len());
    // One series point per bin, at the bins' middles.
    for (i, f) in r.flows.iter().enumerate() {
        let s = result.series(&format!("throughput_mbps.flow{i}"));
        assert_eq!(s.len(), f.throughput_mbps.len());
        assert_eq!(s[0], (r.bin_secs / 2.0, f.throughput_mbps[0]));
        let last = s.len() - 1;
        assert_eq!(s[last], ((last as f64 + 0.5) * r.bin_secs, f.throughput_mbps[last]));
    }
    let drops = result.series("queue_drops_packets");
    assert_eq!(drops.len(), r.queue_drops.len());
    assert_eq!(drops.iter().map(|p| p.1).sum::<f64>(), r.queue_drops.iter().sum::<u64>() as f64);
    assert_eq!(report_of(&result).unwrap(), r, "the artifact is the report");
    assert_eq!(result.warnings().count(), 0);
}

#[test]
fn the_checks_follow_the_delay_target() {
    // polite's two delay criteria are relative to the p = 0 controller's
    // target: a target far above any queue passes them, one far below
    // fails them; its three share criteria do not depend on it.
    let cfg = config(&[scenario("polite"), ("scale", Value::Float(0.05))]).unwrap();
    let r = priority_sim::run(&cfg).unwrap();
    assert!(r.phases.iter().all(|p| p.queuing_delay_p99_ms.is_some_and(|d| d > 0.01)), "{:?}", r.phases);
    let counts = |target: f64| {
        let s = report_scalars(&r, target);
        let get = |n: &str| s.iter().find(|(name, _)| name == n).map(|(_, v)| *v).unwrap();
        (get("checks_passed"), get("checks_failed"))
    };
    let (loose, strict) = (counts(1e9), counts(0.001));
    assert_eq!(loose.0 + loose.1, 5.0);
    assert_eq!(strict.0 + strict.1, 5.0);
    assert_eq!(loose.0 - strict.0, 2.0, "loose {loose:?}, strict {strict:?}");
}

#[test]
fn missing_figures_are_left_out_and_failures_warned() {
    let mut r = simulated_report();
    r.phases[0].jain = None;
    r.phases[0].flows[0].share_of_capacity = None;
    r.queuing_delay_p99_ms = None;
    r.phases[1].flows[1].mbps = f64::NAN;
    r.switches.clear();
    r.flows[0].error = Some("connection refused".into());
    let names: Vec<String> = report_scalars(&r, 100.0).into_iter().map(|(n, _)| n).collect();
    for gone in [
        "jain_index.phase0",
        "share_of_capacity_ratio.phase0.flow0",
        "throughput_mbps.phase1.flow1",
        "queuing_delay_p99_ms",
        "max_stall_rtts",
        "max_stall_ms",
    ] {
        assert!(!names.iter().any(|n| n == gone), "{gone} recorded");
    }
    assert!(names.iter().any(|n| n == "jain_index.phase1"));
    assert!(names.iter().any(|n| n == "switch_count"), "no switches is a count of 0");
    let result = recorded(&r, 100.0);
    assert_eq!(result.metric("switch_count"), Some(0.0));
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
    for (name, v) in report_scalars(&r, 100.0) {
        assert_eq!(run.metric(&name), Some(v), "{name}");
    }
    assert_eq!(run.series("throughput_mbps.flow1").len(), 24, "6 s of 250 ms bins");
}
