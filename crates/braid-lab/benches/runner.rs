//! Runner overhead per experiment (issue 15's goal: ≤ 20 ms median over a
//! study of 1,000 no-op command experiments).
//!
//! The experiments are a command template running `true`; they go through
//! the whole path: work directory, the experiment's thread, the command
//! template spawning and supervising its program, reading the records
//! file, the store transaction in a WAL database on disk (shared with what
//! finished at the same time), removing the work directory. "Overhead" is
//! the runner's time per experiment beyond the template's own `run` (which
//! includes starting `true`); "wall" is the run's elapsed time over the
//! number of experiments.
//!
//! A one-shot study of 1,000 prints a table and JSON first (one job, then
//! one per core); criterion then measures the wall time per experiment
//! with one job.
//!
//! Ingest through the runner (issue 15's goal: ≥ 200,000 scalar records/s):
//! a study of 30,720 no-op in-process experiments (the synthetic
//! redundancy study's size) that each record ten scalars. This is the
//! store's ingest as a study sees it: every experiment still gets its work
//! directory, its threads, its records file and its rows, so the rate
//! counts what the runner does around the store too. It runs with one job,
//! one per core and four per core (a batch holds at most `jobs`), three
//! ways: `store` (a WAL database on disk, what finishes together in one
//! transaction), `1 tx` (the same, one transaction per experiment, as
//! before batching) and `memory` (a `MemorySink`: the runner alone, its
//! ceiling).
//!
//! `cargo bench -p braid-lab --bench runner`

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::runner::{run, MemorySink, ResultSink, RunOptions, RunSummary};
use braid_lab::store::{ExperimentStatus, FinishedExperiment, Store, StudyRecord};
use braid_lab::template::command::CommandTemplate;
use braid_lab::template::{Context, Template, TemplateError};
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

/// The ingest study: as many experiments as the synthetic redundancy study
/// (5 × 3 × 8 × 4 × 4 × 16), ten scalars each.
const INGEST_SIZE: usize = 30_720;
const INGEST_METRICS: [&str; 10] = [
    "fct_s",
    "bytes_on_wire",
    "goodput_mbps",
    "retransmits",
    "rtt_p50_ms",
    "rtt_p99_ms",
    "cpu_s",
    "redundancy_ratio",
    "reorder_ms",
    "loss_events",
];
const GOAL_SCALARS_PER_S: f64 = 200_000.0;

/// An in-process template that records ten scalars and does nothing else:
/// all of its time is the runner's and the store's.
struct TenScalars;

impl Template for TenScalars {
    fn name(&self) -> &str {
        "ten-scalars"
    }
    fn description(&self) -> &str {
        "records ten scalars derived from i and the seed"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![ParamDecl::config("i", ParamType::int(), Value::Int(0))]
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let i = ctx.params.int("i")? as f64;
        let seed = (ctx.seed % 1000) as f64;
        for (m, name) in INGEST_METRICS.iter().enumerate() {
            ctx.record(name, i * (m as f64 + 1.0) + seed / 1000.0);
        }
        Ok(())
    }
}

fn noop_template(dir: &Path) -> Arc<dyn Template> {
    Arc::new(CommandTemplate::parse(NOOP, &dir.join("noop.toml")).expect("the no-op template parses"))
}

/// `n` experiments of `template` with ids unique to `batch`.
fn plan(template: &str, batch: u64, n: usize) -> Vec<PlannedExperiment> {
    (0..n)
        .map(|i| {
            let mut params = Params::default();
            params.insert("i", Value::Int(i as i64));
            PlannedExperiment {
                id: format!("{batch:08x}{i:08x}"),
                template: template.into(),
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

fn open_study(db: &Path, template: &Arc<dyn Template>, name: &str, planned: usize) -> (Store, i64) {
    let mut store = Store::open(db).expect("the bench database opens");
    let id = store
        .upsert_study(&StudyRecord {
            name: name.into(),
            file_path: None,
            file_text: format!("# bench study of template {}\n", template.name()),
            template: template.name().into(),
            template_version: template.version(),
            params: template.params(),
            planned: planned as u64,
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
        let (mut store, study) = open_study(&dir.join("one-shot.db"), template, &format!("noop-{jobs}"), STUDY_SIZE);
        let experiments = plan("noop", batch, STUDY_SIZE);
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

#[derive(Serialize)]
struct IngestRow {
    sink: &'static str,
    jobs: usize,
    experiments: usize,
    scalars: usize,
    /// Calls to the sink: experiments per call is the batch size.
    inserts: usize,
    mean_batch: f64,
    elapsed_s: f64,
    scalars_per_s: f64,
    experiments_per_s: f64,
    overhead_median_ms: f64,
    overhead_p95_ms: f64,
    goal_scalars_per_s: f64,
    meets_goal: bool,
}

/// A sink that counts the calls storing experiments and passes them on:
/// batches whole, or (not `batched`) one experiment per call, as the
/// runner stored them before it batched.
struct Counting<S> {
    inner: S,
    batched: bool,
    inserts: usize,
}

impl<S: ResultSink> ResultSink for Counting<S> {
    type Error = S::Error;
    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, S::Error> {
        self.inner.stored_experiments(study_id)
    }
    fn insert_experiment(&mut self, study_id: i64, e: &FinishedExperiment) -> Result<(), S::Error> {
        self.inserts += 1;
        self.inner.insert_experiment(study_id, e)
    }
    fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), S::Error> {
        if !self.batched {
            return batch.iter().try_for_each(|e| self.insert_experiment(study_id, e));
        }
        self.inserts += 1;
        self.inner.insert_experiments(study_id, batch)
    }
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, S::Error> {
        self.inner.delete_failed(study_id)
    }
}

/// One run of the ingest study into `sink`; returns the row and the sink.
fn ingest_once<S: ResultSink>(
    dir: &Path,
    name: &'static str,
    sink: S,
    batched: bool,
    study: i64,
    jobs: usize,
) -> (IngestRow, S) {
    let template: Arc<dyn Template> = Arc::new(TenScalars);
    let lookup = move |n: &str| (n == "ten-scalars").then(|| template.clone());
    let mut sink = Counting { inner: sink, batched, inserts: 0 };
    let experiments = plan("ten-scalars", jobs as u64, INGEST_SIZE);
    let began = Instant::now();
    let s = run(study, &experiments, &lookup, &mut sink, &options(dir, jobs)).expect("the study runs");
    let elapsed = began.elapsed().as_secs_f64();
    assert_eq!(s.ok, INGEST_SIZE, "every experiment succeeds");
    let scalars = INGEST_SIZE * INGEST_METRICS.len();
    let o = s.overhead.expect("experiments ran");
    let row = IngestRow {
        sink: name,
        jobs,
        experiments: INGEST_SIZE,
        scalars,
        inserts: sink.inserts,
        mean_batch: INGEST_SIZE as f64 / sink.inserts.max(1) as f64,
        elapsed_s: elapsed,
        scalars_per_s: scalars as f64 / elapsed,
        experiments_per_s: INGEST_SIZE as f64 / elapsed,
        overhead_median_ms: o.median_ms,
        overhead_p95_ms: o.p95_ms,
        goal_scalars_per_s: GOAL_SCALARS_PER_S,
        meets_goal: scalars as f64 / elapsed >= GOAL_SCALARS_PER_S,
    };
    (row, sink.inner)
}

/// The ingest study through the runner into a fresh database per job
/// count (checking that every scalar landed, once), then into a
/// [`MemorySink`]: the runner's own ceiling, with no store at all.
fn ingest(dir: &Path) {
    let template: Arc<dyn Template> = Arc::new(TenScalars);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut job_counts = vec![1, cores, 4 * cores];
    job_counts.dedup();
    let mut rows = Vec::new();
    for (name, batched) in [("store", true), ("1 tx", false)] {
        for &jobs in &job_counts {
            let db = dir.join(format!("ingest-{jobs}-{batched}.db"));
            let (store, study) = open_study(&db, &template, "ten-scalars", INGEST_SIZE);
            let (row, store) = ingest_once(dir, name, store, batched, study, jobs);
            let back = store.experiments(study).expect("the study reads back");
            assert_eq!(back.len(), INGEST_SIZE, "every experiment is stored once");
            let scalars: usize = back.iter().map(|r| r.scalars.len()).sum();
            assert_eq!(scalars, row.scalars, "every scalar is stored");
            rows.push(row);
        }
    }
    for &jobs in &job_counts {
        let (row, sink) = ingest_once(dir, "memory", MemorySink::default(), true, 1, jobs);
        assert_eq!(sink.experiments(1).count(), INGEST_SIZE);
        rows.push(row);
    }
    println!(
        "ingest through the runner, {INGEST_SIZE} in-process experiments x {} scalars (store: on disk, WAL, \
         what finishes together in one tx; 1 tx: one tx per experiment; memory: MemorySink, the runner alone)",
        INGEST_METRICS.len()
    );
    println!(
        "{:>6} {:>5} {:>8} {:>6} {:>10} {:>12} {:>8} {:>10} {:>10} {:>6}",
        "sink", "jobs", "inserts", "batch", "elapsed s", "scalars/s", "exp/s", "median ms", "p95 ms", "goal"
    );
    for r in &rows {
        println!(
            "{:>6} {:>5} {:>8} {:>6.2} {:>10.2} {:>12.0} {:>8.0} {:>10.3} {:>10.3} {:>6}",
            r.sink,
            r.jobs,
            r.inserts,
            r.mean_batch,
            r.elapsed_s,
            r.scalars_per_s,
            r.experiments_per_s,
            r.overhead_median_ms,
            r.overhead_p95_ms,
            if r.meets_goal { "met" } else { "MISSED" }
        );
    }
    println!("{}", serde_json::to_string(&rows).unwrap_or_default());
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let template = noop_template(dir.path());
    one_shot(dir.path(), &template);
    ingest(dir.path());

    let lookup = {
        let t = template.clone();
        move |name: &str| (name == "noop").then(|| t.clone())
    };
    let (mut store, study) = open_study(&dir.path().join("criterion.db"), &template, "noop-criterion", STUDY_SIZE);
    let options = options(dir.path(), 1);
    let mut batch = 100u64;
    c.bench_function("runner/noop_command_experiment", |b| {
        b.iter_custom(|iters| {
            batch += 1;
            let experiments = plan("noop", batch, iters as usize);
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
