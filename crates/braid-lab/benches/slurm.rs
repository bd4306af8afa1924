//! The Slurm executor's costs (issue 19's performance goals).
//!
//! 1. Ingest of 10,000 result bundles (goal: ≤ 10 s): bundles of ten
//!    scalars each are written into a study's shared directory as array
//!    tasks would, then `runner::run` with the Slurm executor stores them
//!    all in a WAL database on disk (reading, parsing, group-committed
//!    inserts, removing the bundles). No Slurm is needed: every result is
//!    on disk already, so nothing is submitted.
//! 2. Overhead per experiment against the local executor (goal: ≤ 1.5×):
//!    200 experiments of one second each, with one job per core locally
//!    and, on a single-node Slurm cluster with as many CPUs, chunked
//!    automatically (about 30 s per task). Runs only where the cluster can
//!    be started (root, slurm-wlm and munge installed); the array tasks
//!    run this bench binary (it acts as the task when `BRAID_LAB_CHUNKS`
//!    is set).
//!
//! `cargo bench -p braid-lab --bench slurm` (add `-- --ingest-only` to
//! skip the four-minute overhead run).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Value};
use braid_lab::plan::{Plan, PlannedExperiment};
use braid_lab::record::Record;
use braid_lab::runner::slurm::bundle::{ResultBundle, BUNDLE_FORMAT};
use braid_lab::runner::slurm::layout::{Layout, CHUNKS_ENV};
use braid_lab::runner::slurm::{task, ChunkSize, SlurmOptions};
use braid_lab::runner::{run, Executor, Isolation, MemorySink, RunOptions};
use braid_lab::store::{ExperimentStatus, Store, StudyRecord};
use braid_lab::study::Study;
use braid_lab::template::{Context, Template, TemplateError};

#[path = "../tests/slurm/cluster.rs"]
#[allow(dead_code)]
mod cluster;

/// Sleeps `ms` milliseconds: an experiment that takes its time without
/// using the CPU.
struct Nap;

impl Template for Nap {
    fn name(&self) -> &str {
        "nap"
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![ParamDecl::config("ms", ParamType::int(), Value::Int(1000))]
    }
    fn expected_duration(&self, params: &braid_lab::param::Params) -> Duration {
        Duration::from_millis(params.int("ms").unwrap_or(1000).max(0) as u64)
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let ms = ctx.params.int("ms")?.max(0) as u64;
        std::thread::sleep(Duration::from_millis(ms));
        ctx.record("napped_ms", ms as f64);
        Ok(())
    }
}

fn resolve(name: &str) -> Option<Arc<dyn Template>> {
    (name == "nap").then(|| Arc::new(Nap) as Arc<dyn Template>)
}

fn plan(name: &str, n: usize, ms: i64) -> Vec<PlannedExperiment> {
    // Distinct experiments: one repetition each of n repetitions' seeds.
    let study = Study::from_values(name, Arc::new(Nap), &[("ms", vec![Value::Int(ms)])], n as u32, 1).unwrap();
    Plan::new(&study).experiments
}

/// Seconds until the store holds every experiment (watched from a second,
/// read-only connection), and until `run` returned (also every bundle
/// removed).
fn ingest(dir: &Path) -> (f64, f64) {
    const N: usize = 10_000;
    let experiments = plan("ingest", N, 1000);
    let mut store = Store::open(&dir.join("ingest.db")).unwrap();
    let study = store
        .upsert_study(&StudyRecord {
            name: "ingest".into(),
            file_path: None,
            file_text: "# bench\n".into(),
            template: "nap".into(),
            template_version: 1,
            params: Nap.params(),
            planned: N as u64,
        })
        .unwrap();
    let layout = Layout::new(&dir.join("shared"), study);
    layout.create().unwrap();
    for (i, e) in experiments.iter().enumerate() {
        let records = (0..10).map(|k| Record::Metric { name: format!("m{k}"), value: (i * k) as f64 * 0.5 }).collect();
        ResultBundle {
            format: BUNDLE_FORMAT,
            experiment: e.id.clone(),
            status: ExperimentStatus::Ok,
            exit_code: Some(0),
            error: None,
            stderr_tail: String::new(),
            started: 1.79e9,
            ended: 1.79e9 + 1.0,
            host: "node".into(),
            braid_version: "0".into(),
            git_commit: "unknown".into(),
            slurm_task: Some(format!("1_{}", i / 30)),
            records,
        }
        .write_atomic(&layout.bundles())
        .unwrap();
    }
    let mut options = RunOptions::new(dir.join("work"));
    options.show_progress = false;
    options.worker_resolves = |n| n == "nap";
    options.executor = Executor::Slurm(Box::new(SlurmOptions::new(dir.join("shared"), vec!["true".into()])));
    let db = dir.join("ingest.db");
    let began = Instant::now();
    let runner = std::thread::spawn(move || {
        let s = run(study, &experiments, &|n: &str| resolve(n), &mut store, &options).unwrap();
        (s, began.elapsed().as_secs_f64())
    });
    let watcher = Store::open_read_only(&db).unwrap();
    let stored = loop {
        if watcher.counts(study).unwrap().stored() >= N as u64 {
            break began.elapsed().as_secs_f64();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (s, returned) = runner.join().unwrap();
    assert_eq!(s.ok, N);
    (stored, returned)
}

fn overhead(dir: &Path) -> Option<(f64, f64, usize)> {
    if let Some(why) = cluster::unavailable() {
        println!("overhead: skipped ({why})");
        return None;
    }
    const N: usize = 200;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let experiments = plan("overhead", N, 1000);
    let mut local = RunOptions::new(dir.join("local"));
    local.show_progress = false;
    local.jobs = cores;
    let began = Instant::now();
    let s = run(1, &experiments, &|n: &str| resolve(n), &mut MemorySink::default(), &local).unwrap();
    let local_s = began.elapsed().as_secs_f64();
    assert_eq!(s.ok, N);

    let _cluster = cluster::start_cluster(&dir.join("cluster"));
    let exe = std::env::current_exe().unwrap().display().to_string();
    let mut slurm = SlurmOptions::new(dir.join("shared"), vec![exe]);
    slurm.chunk = ChunkSize::Auto;
    let mut remote = RunOptions::new(dir.join("remote"));
    remote.show_progress = false;
    remote.worker_resolves = |n| n == "nap";
    remote.executor = Executor::Slurm(Box::new(slurm));
    let began = Instant::now();
    let s = run(1, &experiments, &|n: &str| resolve(n), &mut MemorySink::default(), &remote).unwrap();
    let slurm_s = began.elapsed().as_secs_f64();
    assert_eq!(s.ok, N);
    Some((local_s, slurm_s, cores))
}

fn main() {
    // An array task of the overhead run.
    if std::env::var_os(CHUNKS_ENV).is_some() {
        let chunk = task::chunk_from_env().expect("a chunk from the environment");
        std::process::exit(task::run_task(&chunk, &resolve, &Isolation::InProcess));
    }
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --benches` runs bench binaries with --bench absent: do nothing then.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ingest_s, cleaned_s) = ingest(dir.path());
    println!("{:<44} {:>10} {:>10} {:>8}", "measure", "value", "goal", "ratio");
    println!(
        "{:<44} {:>9.2}s {:>9}s {:>8.2}",
        "ingest 10,000 bundles (10 scalars each)",
        ingest_s,
        10,
        ingest_s / 10.0
    );
    println!("{:<44} {:>9.2}s {:>10} {:>8}", "  ... and every bundle file removed", cleaned_s, "", "");
    if args.iter().any(|a| a == "--ingest-only") {
        return;
    }
    if let Some((local_s, slurm_s, cores)) = overhead(dir.path()) {
        let ratio = slurm_s / local_s;
        println!("{:<44} {:>9.1}s {:>10} {:>8}", format!("200 x 1 s, local executor, {cores} jobs"), local_s, "", "");
        println!(
            "{:<44} {:>9.1}s {:>10} {:>8.2}",
            format!("200 x 1 s, slurm (auto chunks), {cores} CPUs"),
            slurm_s,
            "1.5x",
            ratio
        );
        println!(
            "{{\"ingest_10000_s\":{ingest_s:.3},\"local_s\":{local_s:.2},\"slurm_s\":{slurm_s:.2},\"slurm_over_local\":{ratio:.3},\"ingest_and_cleanup_s\":{cleaned_s:.3}}}"
        );
    }
}
