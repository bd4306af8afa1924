//! Study files end to end: parsing and typing every parameter type, every
//! study-file error with its line, product expansion (counts, order, ids,
//! seeds), and a study of a Python command template run through its plan.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Params, Role, Value};
use braid_lab::plan::{Plan, PlannedExperiment};
use braid_lab::record::{Record, Recorder};
use braid_lab::study::{Study, StudyError};
use braid_lab::template::{Context, Requirements, Template, TemplateError};
use proptest::prelude::*;

/// A template with one parameter of every type.
struct Probe;

impl Template for Probe {
    fn name(&self) -> &str {
        "probe-sim"
    }
    fn version(&self) -> u32 {
        3
    }
    fn description(&self) -> &str {
        "every parameter type"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::config(
                "scheduler",
                ParamType::one_of(&["minrtt", "redundant", "roundrobin"]),
                Value::Enum("minrtt".into()),
            ),
            ParamDecl::config("flows", ParamType::int_range(1, 64), Value::Int(1)),
            ParamDecl::config("chunk", ParamType::Size, Value::Size(64 << 10)),
            ParamDecl::config("pacing", ParamType::Bool, Value::Bool(false)),
            ParamDecl::config("label", ParamType::String, Value::String("x".into())),
            ParamDecl::config("warmup", ParamType::Duration, Value::Duration(Duration::from_secs(1))),
            ParamDecl::env("path1", ParamType::Link, Value::Link("rtt=20ms,rate=50mbit".into())),
            ParamDecl::env("loss", ParamType::float_range(0.0, 1.0), Value::Float(0.0)),
            ParamDecl::env("trace", ParamType::Trace, Value::Trace(fixtures().join("traces/steady.trace"))),
        ]
    }
    fn requirements(&self) -> Requirements {
        Requirements { emulator: false, exclusive: true }
    }
    fn expected_duration(&self, params: &Params) -> Duration {
        params.duration("warmup").unwrap_or(Duration::ZERO) + Duration::from_secs(2)
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let flows = ctx.params.float("flows")?;
        ctx.record("flows", flows);
        Ok(())
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/study")
}

fn templates() -> Vec<Arc<dyn Template>> {
    vec![Arc::new(Probe)]
}

/// Parse `text` as if it were `fixtures/NAME.toml`.
fn parse(text: &str) -> Result<Study, StudyError> {
    Study::parse(text, &fixtures().join("inline.toml"), &templates())
}

/// The error for `text`, checked to sit at `line` and to name the file.
fn error_at(text: &str, line: usize) -> StudyError {
    let e = match parse(text) {
        Ok(s) => panic!("{text:?} parsed: {s:?}"),
        Err(e) => e,
    };
    let at = e.location().unwrap_or_else(|| panic!("no location: {e}"));
    assert_eq!(at.line, line, "{text:?}: {e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}:{line}:", fixtures().join("inline.toml").display())), "{msg}");
    e
}

#[test]
fn every_parameter_type_parses_from_toml() {
    let s = parse(
        r#"
template = "probe-sim"
[configuration]
scheduler = ["minrtt", "redundant"]
flows = [1, 4]
chunk = [4096, "64KiB", "1MB"]
pacing = [true, false]
label = "run a"
warmup = ["250ms", 2]
[environment]
path1 = ["rtt=20ms,rate=50mbit", "rtt=40ms,rate=50mbit,loss=2%"]
loss = [0, 0.05]
trace = "traces/steady.trace"
"#,
    )
    .unwrap();
    let values = |name: &str| s.param(name).unwrap().values.clone();
    assert_eq!(values("scheduler"), [Value::Enum("minrtt".into()), Value::Enum("redundant".into())]);
    assert_eq!(values("flows"), [Value::Int(1), Value::Int(4)]);
    assert_eq!(values("chunk"), [Value::Size(4096), Value::Size(65536), Value::Size(1_000_000)]);
    assert_eq!(values("pacing"), [Value::Bool(true), Value::Bool(false)]);
    assert_eq!(values("label"), [Value::String("run a".into())]);
    assert_eq!(
        values("warmup"),
        [Value::Duration(Duration::from_millis(250)), Value::Duration(Duration::from_secs(2))]
    );
    assert_eq!(values("loss"), [Value::Float(0.0), Value::Float(0.05)]);
    assert_eq!(values("trace"), [Value::Trace(fixtures().join("traces/steady.trace"))]);
    let links: Vec<String> = values("path1").iter().map(|v| v.to_text()).collect();
    assert_eq!(links.len(), 2);
    assert!(links[1].contains("loss"), "{links:?}");
    assert_eq!((s.configurations(), s.environments()), (2 * 2 * 3 * 2 * 2, 2 * 2));
    assert_eq!(s.params.iter().map(|p| p.decl.name.as_str()).collect::<Vec<_>>()[..3], ["scheduler", "flows", "chunk"]);
}

#[test]
fn unknown_parameter_lists_the_templates_parameters_of_that_role() {
    let e = error_at("template = \"probe-sim\"\n[configuration]\nflows = 2\nschedular = \"minrtt\"\n", 4);
    match &e {
        StudyError::UnknownParam { key, table, allowed, .. } => {
            assert_eq!((key.as_str(), *table), ("schedular", Role::Configuration));
            assert_eq!(allowed, &["scheduler", "flows", "chunk", "pacing", "label", "warmup"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("its configuration parameters: scheduler, flows"), "{e}");
}

#[test]
fn a_parameter_under_the_wrong_table_is_an_error() {
    let e = error_at("template = \"probe-sim\"\n[environment]\nloss = 0.1\nflows = [1, 2]\n", 4);
    assert!(
        matches!(e, StudyError::WrongTable { table: Role::Environment, belongs: Role::Configuration, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("list it under [configuration]"), "{e}");
    let e = error_at("template = \"probe-sim\"\n[configuration]\npath1 = \"rtt=1ms\"\n", 3);
    assert!(e.to_string().contains("is an environment parameter"), "{e}");
}

#[test]
fn wrong_types_name_the_allowed_form() {
    let cases = [
        ("flows = \"4\"", "a whole number in 1..=64"),
        ("flows = 65", "out of range"),
        ("flows = 1.5", "a whole number"),
        ("scheduler = \"blest\"", "one of minrtt, redundant, roundrobin"),
        ("scheduler = 3", "one of minrtt"),
        ("chunk = \"lots\"", "a size, e.g."),
        ("pacing = \"yes\"", "true or false"),
        ("warmup = \"soon\"", "a duration, e.g. 250ms"),
        ("label = 3", "a string"),
        ("flows = [1, \"two\"]", "a whole number"),
    ];
    for (line, allowed) in cases {
        let text = format!("template = \"probe-sim\"\nseed = 3\n[configuration]\n{line}\n");
        let e = error_at(&text, 4);
        match &e {
            StudyError::BadValue { key, .. } => assert_eq!(Some(key.as_str()), line.split(' ').next()),
            other => panic!("{line}: {other:?}"),
        }
        assert!(e.to_string().contains(allowed), "{line}: {e}");
    }
}

#[test]
fn the_column_of_a_bad_list_item_is_its_own() {
    let e = error_at("template = \"probe-sim\"\n[configuration]\nflows = [1, 2, 99]\n", 3);
    assert_eq!(e.location().unwrap().column, 16);
}

#[test]
fn empty_lists_are_errors() {
    let e = error_at("template = \"probe-sim\"\n[environment]\n\nloss = []\n", 4);
    assert!(matches!(&e, StudyError::EmptyList { key, .. } if key == "loss"), "{e:?}");
    assert!(e.to_string().contains("a number in 0..=1"), "{e}");
}

#[test]
fn bad_link_specs_are_errors() {
    let e = error_at("template = \"probe-sim\"\n[environment]\npath1 = [\"rtt=20ms\",\n  \"rtt=fast\"]\n", 4);
    assert!(matches!(&e, StudyError::BadLink { key, .. } if key == "path1"), "{e:?}");
    assert!(e.to_string().contains("rtt=20ms,rate=100mbit"), "the allowed form: {e}");
}

#[test]
fn missing_trace_files_are_errors() {
    let e = error_at(
        "template = \"probe-sim\"\n[environment]\ntrace = [\"traces/steady.trace\", \"traces/nope.trace\"]\n",
        3,
    );
    match &e {
        StudyError::MissingTrace { path, at, .. } => {
            assert_eq!(path, &fixtures().join("traces/nope.trace"));
            assert_eq!(at.column, 33);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_templates_list_the_built_ins() {
    let e = error_at("\n\ntemplate = \"sim-multipth\"\n", 3);
    match &e {
        StudyError::UnknownTemplate { name, builtins, .. } => {
            assert_eq!(name, "sim-multipth");
            assert_eq!(builtins, &["probe-sim"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("built-in template (probe-sim)"), "{e}");
    let e = error_at("repetitions = 2\n", 1);
    assert!(matches!(e, StudyError::NoTemplate { .. }), "{e:?}");
}

#[test]
fn unknown_top_level_keys_are_errors() {
    let e = error_at("template = \"probe-sim\"\nrepetition = 3\n", 2);
    match &e {
        StudyError::UnknownKey { key, allowed, .. } => {
            assert_eq!(key, "repetition");
            assert!(allowed.iter().any(|k| k == "repetitions"));
        }
        other => panic!("{other:?}"),
    }
    // A table is a key too.
    let e = error_at("template = \"probe-sim\"\n[configuration]\nflows = 1\n[enviroment]\nloss = 0.1\n", 4);
    assert!(matches!(e, StudyError::UnknownKey { .. }), "{e:?}");
}

#[test]
fn zero_repetitions_are_errors() {
    let e = error_at("template = \"probe-sim\"\nseed = 1\nrepetitions = 0\n", 3);
    assert!(matches!(e, StudyError::ZeroRepetitions { .. }), "{e:?}");
    assert!(e.to_string().contains(">= 1"), "{e}");
}

#[test]
fn duplicate_values_are_errors() {
    let e = error_at("template = \"probe-sim\"\n[configuration]\nwarmup = [\"1s\",\n \"250ms\",\n \"1000ms\"]\n", 5);
    match &e {
        StudyError::DuplicateValue { key, value, first_line, .. } => {
            assert_eq!((key.as_str(), value.as_str()), ("warmup", "1s"));
            assert_eq!(*first_line, 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn top_level_fields_are_typed() {
    for (text, line) in [
        ("template = \"probe-sim\"\nseed = -1\n", 2),
        ("template = \"probe-sim\"\nseed = \"one\"\n", 2),
        ("template = \"probe-sim\"\ntimeout = \"forever\"\n", 2),
        ("template = \"probe-sim\"\nexclusive = \"no\"\n", 2),
        ("template = \"probe-sim\"\nname = \"two words\"\n", 2),
        ("template = \"probe-sim\"\nconfiguration = 3\n", 2),
        ("template = 3\n", 1),
    ] {
        let e = error_at(text, line);
        assert!(matches!(e, StudyError::Field(_)), "{text:?}: {e:?}");
        assert!(e.to_string().contains("must be"), "{e}");
    }
}

#[test]
fn the_first_error_in_the_file_is_reported() {
    let e = error_at("template = \"probe-sim\"\n[configuration]\nflows = []\nscheduler = \"nope\"\nbogus = 1\n", 3);
    assert!(matches!(e, StudyError::EmptyList { .. }), "{e:?}");
}

#[test]
fn expansion_order_counts_and_study_settings() {
    let s = parse(
        "name = \"grid\"\ntemplate = \"probe-sim\"\nrepetitions = 3\nseed = 7\n\
         [configuration]\nscheduler = [\"minrtt\", \"redundant\"]\nflows = [1, 2, 4]\n\
         [environment]\nloss = [0, 0.01]\n",
    )
    .unwrap();
    let plan = Plan::new(&s);
    assert_eq!(plan.count(), 2 * 3 * 2 * 3);
    assert_eq!((plan.configurations, plan.environments, plan.repetitions), (6, 2, 3));
    let order: Vec<(f64, String, i64, u32)> = plan
        .experiments
        .iter()
        .map(|e| {
            let p = &e.params;
            (p.float("loss").unwrap(), p.str("scheduler").unwrap().to_string(), p.int("flows").unwrap(), e.repetition)
        })
        .collect();
    assert_eq!(order[0], (0.0, "minrtt".into(), 1, 0));
    assert_eq!(order[1], (0.0, "minrtt".into(), 1, 1));
    assert_eq!(order[3], (0.0, "minrtt".into(), 2, 0));
    assert_eq!(order[9], (0.0, "redundant".into(), 1, 0));
    assert_eq!(order[18], (0.01, "minrtt".into(), 1, 0));
    for e in &plan.experiments {
        assert_eq!((e.template.as_str(), e.template_version), ("probe-sim", 3));
        assert_eq!(e.params.0.len(), 9, "every parameter, defaults included");
        assert!(e.exclusive, "the template's requirement");
        assert_eq!(e.expected, Duration::from_secs(3));
        assert_eq!(e.timeout, Duration::from_secs(30));
    }
    let ids: HashSet<&str> = plan.experiments.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), plan.count());
    assert_eq!(Plan::new(&s), plan, "stable");
    let summary = plan.summary(2);
    assert_eq!(summary.expected_secs, 36.0 * 3.0, "exclusive: one after another");
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["params"].as_array().unwrap().len(), 9);
    assert_eq!(json["params"][1]["count"], 3);
}

#[test]
fn seeds_and_ids_stay_when_the_study_grows() {
    let small =
        "template = \"probe-sim\"\nrepetitions = 2\n[configuration]\nflows = [1, 2]\n[environment]\nloss = [0.1]\n";
    let big = "template = \"probe-sim\"\nrepetitions = 3\n[configuration]\nflows = [1, 8, 2]\n\
               scheduler = [\"minrtt\", \"redundant\"]\n[environment]\nloss = [0.2, 0.1]\n";
    let small = Plan::new(&parse(small).unwrap());
    let big = Plan::new(&parse(big).unwrap());
    let by_id: HashMap<&str, &PlannedExperiment> = big.experiments.iter().map(|e| (e.id.as_str(), e)).collect();
    for e in &small.experiments {
        assert_eq!(by_id.get(e.id.as_str()).copied(), Some(e), "{} changed", e.id);
    }
    // A new base seed changes every experiment.
    let reseeded = Plan::new(&parse("template = \"probe-sim\"\nseed = 1\nrepetitions = 2\n[configuration]\nflows = [1, 2]\n[environment]\nloss = [0.1]\n").unwrap());
    assert!(reseeded.experiments.iter().all(|e| !by_id.contains_key(e.id.as_str())));
}

#[test]
fn an_exclude_drops_its_combinations_and_keeps_the_stored_ids_of_the_rest() {
    let lists = "template = \"probe-sim\"\nrepetitions = 2\n[configuration]\nscheduler = [\"minrtt\", \"redundant\"]\n\
                 warmup = [\"250ms\", \"2s\"]\n[environment]\n\
                 path1 = [\"rtt=20ms,rate=50mbit\", \"rtt=40ms,rate=50mbit,loss=2%\"]\ntrace = \"traces/steady.trace\"\n";
    // Values typed as in the lists: a duration in another spelling, a link
    // spec, a trace path relative to the study file.
    let exclude = "[[exclude]]\nscheduler = \"redundant\"\nwarmup = 2\n\
                   path1 = \"rtt=40ms,rate=50mbit,loss=2%\"\ntrace = [\"traces/steady.trace\"]\n";
    let before = Plan::new(&parse(lists).unwrap());
    let after = Plan::new(&parse(&format!("{lists}{exclude}")).unwrap());
    assert_eq!((before.count(), after.count()), (16, 14));
    let dropped: Vec<&PlannedExperiment> = before.experiments.iter().filter(|e| !after.experiments.contains(e)).collect();
    assert_eq!(dropped.len(), 2, "the two repetitions of one combination");
    for e in &dropped {
        let p = &e.params;
        assert_eq!(p.str("scheduler").unwrap(), "redundant");
        assert_eq!(p.duration("warmup").unwrap(), Duration::from_secs(2));
        assert!(p.get("path1").unwrap().to_text().contains("loss"));
    }
    // Resuming a stored run: every remaining experiment is one stored before.
    let stored: HashSet<&str> = before.experiments.iter().map(|e| e.id.as_str()).collect();
    assert!(after.experiments.iter().all(|e| stored.contains(e.id.as_str())));
    let summary = after.summary(1);
    assert_eq!((summary.excluded, summary.excludes), (2, 1));
    assert!(summary.to_string().contains("14 experiments = 4 configurations x 2 environments x 2 repetitions - 2 excluded by 1 [[exclude]] table\n"), "{summary}");
    // A value the study does not list is refused (a typo would exclude nothing).
    let e = error_at(&format!("{lists}[[exclude]]\nwarmup = \"3s\"\n"), 10);
    assert!(e.to_string().contains("`3s` is not in the study's list of `warmup`; expected one of: 250ms, 2s"), "{e}");
}

#[test]
fn a_python_command_template_runs_through_its_plan() {
    let study = Study::load(&fixtures().join("sweep.toml"), &templates()).unwrap();
    assert_eq!(study.name, "sweep");
    assert_eq!(study.template.name(), "probe");
    assert!(study.text.starts_with("# A study of the probe command template"), "kept verbatim");
    let plan = Plan::new(&study);
    assert_eq!(plan.count(), 3 * 2 * 2);
    let summary = plan.summary(4);
    assert_eq!(summary.expected_secs, 6.0, "12 experiments of 2 s on 4 slots");

    let work_root = std::env::temp_dir().join(format!("braid-lab-study-files-{}", std::process::id()));
    let mut seen_seeds = HashSet::new();
    for e in plan.experiments.iter().take(4) {
        let work = work_root.join(&e.id);
        std::fs::create_dir_all(&work).unwrap();
        let mut rec = Recorder::in_memory();
        {
            let mut ctx = Context::new(&e.params, e.seed, Instant::now() + e.timeout, &mut rec, &work, &e.id);
            study.template.run(&mut ctx).unwrap();
        }
        let records = rec.take();
        assert_eq!(records.len(), 6, "{records:?}");
        assert_eq!(records[0], Record::Metric { name: "seed_mod_1000".into(), value: (e.seed % 1000) as f64 });
        assert_eq!(records[1], Record::Metric { name: "fast".into(), value: 0.0 }, "mode = slow");
        let warn = format!("rate {} link {}", e.params.get("rate").unwrap(), e.params.get("link").unwrap());
        assert_eq!(records[5], Record::Warn { warn });
        seen_seeds.insert(e.seed);
    }
    assert_eq!(seen_seeds.len(), 4);
    let _ = std::fs::remove_dir_all(&work_root);
}

#[test]
fn errors_in_a_template_file_name_that_file() {
    let dir = std::env::temp_dir().join(format!("braid-lab-study-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.toml"), "command = [\"sh\", \"{{rate}}\"]\n").unwrap();
    std::fs::write(dir.join("s.toml"), "seed = 1\ntemplate = \"t.toml\"\n").unwrap();
    let e = Study::load(&dir.join("s.toml"), &templates()).unwrap_err();
    assert_eq!(e.location().map(|l| l.line), Some(2));
    let msg = e.to_string();
    assert!(msg.contains(&format!("{}:1:", dir.join("t.toml").display())), "{msg}");
    assert!(msg.contains("`{{rate}}`"), "{msg}");
    let e = Study::parse("template = \"missing.toml\"\n", &dir.join("s.toml"), &templates()).unwrap_err();
    assert!(e.to_string().contains("cannot read the command template"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_inline_template_is_checked_in_the_study_file() {
    let text =
        "name = \"inline\"\nrepetitions = 2\n[template]\ncommand = [\"/bin/sh\", \"-c\", \"exit 0\", \"{{n}}\"]\n\
                [template.params.n]\ntype = \"int\"\ndefault = 1\n[configuration]\nn = [1, 2, 3]\n";
    let s = parse(text).unwrap();
    assert_eq!(s.template.name(), "inline", "named after the study");
    assert_eq!(s.count(), 6);
    let bad = "name = \"inline\"\n[template]\ncommand = [\"/bin/sh\"]\n[template.params.n]\ntype = \"int\"\ndefault = \"x\"\n";
    let e = parse(bad).unwrap_err();
    assert!(matches!(e, StudyError::Template { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("inline.toml:6:"), "the inline table's own line: {msg}");
}

fn ints(n: usize) -> String {
    let v: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    format!("[{}]", v.join(", "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random list lengths written as a study file: the plan has
    /// product × repetitions experiments with distinct ids.
    #[test]
    fn count_is_product_times_repetitions(
        flows in 1usize..5,
        schedulers in 1usize..4,
        pacing in 1usize..3,
        losses in 1usize..5,
        reps in 1u32..5,
    ) {
        let sched: Vec<String> = ["minrtt", "redundant", "roundrobin"][..schedulers].iter().map(|s| format!("\"{s}\"")).collect();
        let pacing_list = ["true", "false"][..pacing].join(", ");
        let loss: Vec<String> = (0..losses).map(|i| format!("{}", i as f64 / 100.0)).collect();
        let text = format!(
            "template = \"probe-sim\"\nrepetitions = {reps}\n[configuration]\nflows = {}\nscheduler = [{}]\npacing = [{pacing_list}]\n[environment]\nloss = [{}]\n",
            ints(flows), sched.join(", "), loss.join(", ")
        );
        let study = parse(&text).unwrap();
        let plan = Plan::new(&study);
        prop_assert_eq!(plan.count(), flows * schedulers * pacing * losses * reps as usize);
        prop_assert_eq!(plan.count(), study.count());
        let ids: HashSet<&str> = plan.experiments.iter().map(|e| e.id.as_str()).collect();
        prop_assert_eq!(ids.len(), plan.count());
    }
}
