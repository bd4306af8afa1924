//! Runner overhead per experiment (issue 15's goal: ≤ 20 ms median over a
//! study of 1,000 no-op command experiments).
//!
//! The experiments are a command template running `true`; they go through
//! the whole path: the runner's thread pool, the work directory, the
//! command template spawning and supervising its program, reading the
//! records file it appends to, the store transaction in a WAL database on
//! disk (shared with what finished within the store's group-commit window),
//! removing the work directory. "Overhead" is
//! the runner's time per experiment beyond the template's own `run` (which
//! includes starting `true`); "wall" is the run's elapsed time over the
//! number of experiments.
//!
//! A one-shot study of 1,000 prints a table and JSON first (one job, then
//! one per core); criterion then measures the wall time per experiment
//! with one job.
//!
//! Ingest through the runner (issue 15's goal: >= 200,000 scalar records/s
//! from a study to the store, end to end): studies of no-op in-process
//! experiments that each record 10 scalars (30,720 experiments: the
//! synthetic redundancy study's size) or 100 (6,144 experiments). All of
//! their time is the runner's and the store's: the pool, the in-memory
//! recorder, the batch, the rows in a WAL database on disk. Rows:
//! - `store`: the store's own batching (group commit, see
//!   `Batching::GROUP_COMMIT`), with one job, one per core (the default)
//!   and four per core;
//! - `imm`: the store with `Batching::IMMEDIATE` (a batch is what finished
//!   during the previous insert, at most `jobs`: the runner's policy
//!   before group commit), one job per core;
//! - `memory`: a `MemorySink`, the runner alone (its ceiling), one job
//!   per core;
//! - `gN/Wms` (10 scalars, one job per core): the store with other group
//!   commits, at most N experiments per transaction and W ms of waiting:
//!   the batch size / latency trade-off behind `Batching::GROUP_COMMIT`.
//!
//! `cargo bench -p braid-lab --bench runner`

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::runner::{run, Batching, MemorySink, ResultSink, RunOptions, RunSummary};
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

/// The ingest studies: (scalars per experiment, experiments). Ten scalars:
/// as many experiments as the synthetic redundancy study (5 × 3 × 8 × 4 ×
/// 4 × 16); a hundred: a fifth of that.
const INGEST_STUDIES: [(usize, usize); 2] = [(10, 30_720), (100, 6_144)];
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

/// Other group commits to compare with the store's own (10 scalars).
const BATCHINGS: [(&str, usize, u64); 4] =
    [("g8/0ms", 8, 0), ("g64/1ms", 64, 1), ("g128/2ms", 128, 2), ("g2048/20ms", 2048, 20)];

/// An in-process template that records `names.len()` scalars and does
/// nothing else: all of its time is the runner's and the store's.
struct Scalars {
    name: String,
    names: Vec<String>,
}

impl Scalars {
    /// The template recording `n` scalars (the first ten named like the
    /// synthetic study's metrics, the rest `extra_K`).
    fn new(n: usize) -> Scalars {
        let names = (0..n)
            .map(|k| INGEST_METRICS.get(k).map(|m| m.to_string()).unwrap_or_else(|| format!("extra_{k}")))
            .collect();
        Scalars { name: format!("scalars-{n}"), names }
    }
}

impl Template for Scalars {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "records scalars derived from i and the seed"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![ParamDecl::config("i", ParamType::int(), Value::Int(0))]
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let i = ctx.params.int("i")? as f64;
        let seed = (ctx.seed % 1000) as f64;
        for (m, name) in self.names.iter().enumerate() {
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
    scalars_per_experiment: usize,
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

/// A sink that counts its insert calls and passes them on, asking the
/// runner for `batching` (the inner sink's own, or another to compare).
struct Counting<S> {
    inner: S,
    batching: Batching,
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
        self.inserts += 1;
        self.inner.insert_experiments(study_id, batch)
    }
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, S::Error> {
        self.inner.delete_failed(study_id)
    }
    fn batching(&self) -> Batching {
        self.batching
    }
}

/// One run of an ingest study (`n` experiments of `template`) into `sink`
/// with `batching`; returns the row and the sink.
#[allow(clippy::too_many_arguments)]
fn ingest_once<S: ResultSink>(
    dir: &Path,
    name: &'static str,
    sink: S,
    batching: Batching,
    template: &Arc<Scalars>,
    n: usize,
    study: i64,
    jobs: usize,
) -> (IngestRow, S) {
    let lookup = {
        let t: Arc<dyn Template> = template.clone();
        move |name: &str| (name == t.name()).then(|| t.clone())
    };
    let mut sink = Counting { inner: sink, batching, inserts: 0 };
    let experiments = plan(template.name(), jobs as u64, n);
    let began = Instant::now();
    let s = run(study, &experiments, &lookup, &mut sink, &options(dir, jobs)).expect("the study runs");
    let elapsed = began.elapsed().as_secs_f64();
    assert_eq!(s.ok, n, "every experiment succeeds");
    let per = template.names.len();
    let scalars = n * per;
    let o = s.overhead.expect("experiments ran");
    let row = IngestRow {
        sink: name,
        jobs,
        scalars_per_experiment: per,
        experiments: n,
        scalars,
        inserts: sink.inserts,
        mean_batch: n as f64 / sink.inserts.max(1) as f64,
        elapsed_s: elapsed,
        scalars_per_s: scalars as f64 / elapsed,
        experiments_per_s: n as f64 / elapsed,
        overhead_median_ms: o.median_ms,
        overhead_p95_ms: o.p95_ms,
        goal_scalars_per_s: GOAL_SCALARS_PER_S,
        meets_goal: scalars as f64 / elapsed >= GOAL_SCALARS_PER_S,
    };
    (row, sink.inner)
}

/// The ingest studies through the runner into a fresh database per row
/// (checking that every scalar landed, once), then into a [`MemorySink`]:
/// the runner's own ceiling, with no store at all.
fn ingest(dir: &Path) {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut store_jobs = vec![1, cores, 4 * cores];
    store_jobs.dedup();
    let mut rows = Vec::new();
    for (per, n) in INGEST_STUDIES {
        let template = Arc::new(Scalars::new(per));
        let dyn_template: Arc<dyn Template> = template.clone();
        let others = BATCHINGS.iter().filter(|_| per == 10).map(|&(name, max_experiments, ms)| {
            let b = Batching { max_experiments, max_wait: Duration::from_millis(ms), ..Batching::GROUP_COMMIT };
            (name, cores, Some(b))
        });
        let runs = store_jobs
            .iter()
            .map(|&j| ("store", j, None))
            .chain([("imm", cores, Some(Batching::IMMEDIATE))])
            .chain(others);
        for (name, jobs, batching) in runs {
            let db = dir.join(format!("ingest-{per}-{}-{jobs}.db", name.replace('/', "-")));
            let (store, study) = open_study(&db, &dyn_template, template.name(), n);
            let batching = batching.unwrap_or_else(|| store.batching());
            let (row, store) = ingest_once(dir, name, store, batching, &template, n, study, jobs);
            let back = store.experiments(study).expect("the study reads back");
            assert_eq!(back.len(), n, "every experiment is stored once");
            let scalars: usize = back.iter().map(|r| r.scalars.len()).sum();
            assert_eq!(scalars, row.scalars, "every scalar is stored");
            rows.push(row);
        }
        let memory = MemorySink::default();
        let batching = memory.batching();
        let (row, sink) = ingest_once(dir, "memory", memory, batching, &template, n, 1, cores);
        assert_eq!(sink.experiments(1).count(), n);
        rows.push(row);
    }
    println!(
        "ingest through the runner: in-process experiments recording 10 or 100 scalars each (store: on disk, WAL, \
         group commit; imm: the store, a batch is what finished during the previous insert; memory: MemorySink, \
         the runner alone)"
    );
    println!(
        "{:>10} {:>5} {:>7} {:>7} {:>8} {:>7} {:>9} {:>10} {:>9} {:>10} {:>9} {:>6}",
        "sink",
        "jobs",
        "sc/exp",
        "exps",
        "inserts",
        "batch",
        "elapsed s",
        "scalars/s",
        "exp/s",
        "median ms",
        "p95 ms",
        "goal"
    );
    for r in &rows {
        println!(
            "{:>10} {:>5} {:>7} {:>7} {:>8} {:>7.1} {:>9.2} {:>10.0} {:>9.0} {:>10.3} {:>9.3} {:>6}",
            r.sink,
            r.jobs,
            r.scalars_per_experiment,
            r.experiments,
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
