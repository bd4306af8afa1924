//! Runner overhead per experiment (issue 15's goal: ≤ 20 ms median over a
//! study of 1,000 no-op command experiments).
//!
//! The experiments are a command template running `true`; they go through
//! the whole path: work directory, the experiment's thread, the command
//! template spawning and supervising its program, reading the records
//! file, one store transaction in a WAL database on disk, removing the work
//! directory. "Overhead" is the runner's time per experiment beyond the
//! template's own `run` (which includes starting `true`); "wall" is the
//! run's elapsed time over the number of experiments.
//!
//! A one-shot study of 1,000 prints a table and JSON first (one job, then
//! one per core); criterion then measures the wall time per experiment
//! with one job.
//!
//! `cargo bench -p braid-lab --bench runner`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::runner::{run, RunOptions, RunSummary};
use braid_lab::store::{Store, StudyRecord};
use braid_lab::template::command::CommandTemplate;
use braid_lab::template::Template;
use criterion::Criterion;
use serde::Serialize;

const NOOP: &str = r#"
name = "noop"
command = ["true"]
expected_duration = "1ms"
[params.i]
type = "int"
default = 0
"#;

const STUDY_SIZE: usize = 1000;
const GOAL_MEDIAN_MS: f64 = 20.0;

fn noop_template(dir: &Path) -> Arc<dyn Template> {
    Arc::new(CommandTemplate::parse(NOOP, &dir.join("noop.toml")).expect("the no-op template parses"))
}

/// `n` experiments with ids unique to `batch`.
fn plan(batch: u64, n: usize) -> Vec<PlannedExperiment> {
    (0..n)
        .map(|i| {
            let mut params = Params::default();
            params.insert("i", Value::Int(i as i64));
            PlannedExperiment {
                id: format!("{batch:08x}{i:08x}"),
                template: "noop".into(),
                template_version: 1,
                params,
                repetition: 0,
                seed: i as u64,
                timeout: Duration::from_secs(30),
                exclusive: false,
                expected: Duration::from_millis(1),
            }
        })
        .collect()
}

fn open_study(db: &Path, template: &Arc<dyn Template>, name: &str) -> (Store, i64) {
    let mut store = Store::open(db).expect("the bench database opens");
    let id = store
        .upsert_study(&StudyRecord {
            name: name.into(),
            file_path: None,
            file_text: NOOP.into(),
            template: "noop".into(),
            template_version: 1,
            params: template.params(),
            planned: STUDY_SIZE as u64,
        })
        .expect("the bench study registers");
    (store, id)
}

fn options(dir: &Path, jobs: usize) -> RunOptions {
    let mut o = RunOptions::new(dir.join("runs"));
    o.jobs = jobs;
    o.show_progress = false;
    o
}

#[derive(Serialize)]
struct Row {
    jobs: usize,
    experiments: usize,
    wall_per_experiment_ms: f64,
    overhead_median_ms: f64,
    overhead_p95_ms: f64,
    overhead_max_ms: f64,
    goal_median_ms: f64,
    meets_goal: bool,
}

fn one_shot(dir: &Path, template: &Arc<dyn Template>) {
    let lookup = {
        let t = template.clone();
        move |name: &str| (name == "noop").then(|| t.clone())
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut rows = Vec::new();
    for (batch, jobs) in [(1u64, 1usize), (2, cores)] {
        let (mut store, study) = open_study(&dir.join("one-shot.db"), template, &format!("noop-{jobs}"));
        let experiments = plan(batch, STUDY_SIZE);
        let began = Instant::now();
        let s: RunSummary = run(study, &experiments, &lookup, &mut store, &options(dir, jobs)).expect("the study runs");
        let wall = began.elapsed().as_secs_f64() * 1e3 / STUDY_SIZE as f64;
        assert_eq!(s.ok, STUDY_SIZE, "every no-op experiment succeeds");
        let o = s.overhead.expect("experiments ran");
        rows.push(Row {
            jobs,
            experiments: STUDY_SIZE,
            wall_per_experiment_ms: wall,
            overhead_median_ms: o.median_ms,
            overhead_p95_ms: o.p95_ms,
            overhead_max_ms: o.max_ms,
            goal_median_ms: GOAL_MEDIAN_MS,
            meets_goal: o.median_ms <= GOAL_MEDIAN_MS,
        });
    }
    println!("runner overhead, {STUDY_SIZE} no-op command experiments (store on disk, WAL)");
    println!("{:>5} {:>12} {:>12} {:>12} {:>12} {:>6}", "jobs", "wall/exp ms", "median ms", "p95 ms", "max ms", "goal");
    for r in &rows {
        println!(
            "{:>5} {:>12.3} {:>12.3} {:>12.3} {:>12.3} {:>6}",
            r.jobs,
            r.wall_per_experiment_ms,
            r.overhead_median_ms,
            r.overhead_p95_ms,
            r.overhead_max_ms,
            if r.meets_goal { "met" } else { "MISSED" }
        );
    }
    println!("{}", serde_json::to_string(&rows).unwrap_or_default());
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let template = noop_template(dir.path());
    one_shot(dir.path(), &template);

    let lookup = {
        let t = template.clone();
        move |name: &str| (name == "noop").then(|| t.clone())
    };
    let (mut store, study) = open_study(&dir.path().join("criterion.db"), &template, "noop-criterion");
    let options = options(dir.path(), 1);
    let mut batch = 100u64;
    c.bench_function("runner/noop_command_experiment", |b| {
        b.iter_custom(|iters| {
            batch += 1;
            let experiments = plan(batch, iters as usize);
            let began = Instant::now();
            run(study, &experiments, &lookup, &mut store, &options).expect("the study runs");
            began.elapsed()
        })
    });
}

fn main() {
    let mut c = Criterion::default().configure_from_args().sample_size(20).measurement_time(Duration::from_secs(10));
    bench(&mut c);
    c.final_summary();
}
