//! The Slurm executor against a real Slurm (issue 19 §2): this test starts
//! its own single-node cluster (munged, slurmctld, slurmd with a
//! `slurm.conf` in a temporary directory, `SLURM_CONF` pointing at it, its
//! own ports and munge socket), runs studies through `--executor slurm`,
//! and stops every daemon it started, also when an assertion fails (a
//! guard kills them by pid on drop).
//!
//! The array tasks run this test binary itself (`slurm_task_entry`), so
//! they run exactly the code under test, including a test template.
//!
//! Needs root and Debian's `slurm-wlm` and `munge` (scripts/test installs
//! them). Without them: skipped with a message, or failed when `CI=true`.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Value};
use braid_lab::plan::{Plan, PlannedExperiment};
use braid_lab::runner::slurm::layout::{read_journal, Layout, CHUNKS_ENV};
use braid_lab::runner::slurm::{task, ChunkSize, SlurmError, SlurmOptions};
use braid_lab::runner::{run, Executor, Isolation, MemorySink, RunError, RunOptions};
use braid_lab::store::ExperimentStatus;
use braid_lab::study::Study;
use braid_lab::template::{find_builtin, Context, Template, TemplateError};

#[path = "slurm/cluster.rs"]
mod cluster;
use cluster::{start_cluster, unavailable, wait_for};

/// Sleeps `ms` milliseconds (honouring its deadline) and records what it
/// was given: slow enough to cancel a task or interrupt the runner.
struct Nap;

impl Template for Nap {
    fn name(&self) -> &str {
        "nap"
    }
    fn description(&self) -> &str {
        "sleeps, then records its seed"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![ParamDecl::config("ms", ParamType::int(), Value::Int(100))]
    }
    fn expected_duration(&self, params: &braid_lab::param::Params) -> Duration {
        Duration::from_millis(params.int("ms").unwrap_or(100).max(0) as u64)
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let ms = ctx.params.int("ms")?.max(0) as u64;
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            if Instant::now() >= ctx.deadline {
                return Err(TemplateError::Timeout("napping".into()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        ctx.record("napped_ms", ms as f64);
        ctx.record("seed_low", (ctx.seed % 1_000_000) as f64);
        Ok(())
    }
}

fn resolve(name: &str) -> Option<Arc<dyn Template>> {
    if name == "nap" {
        Some(Arc::new(Nap))
    } else {
        find_builtin(name)
    }
}

fn resolvable(name: &str) -> bool {
    resolve(name).is_some()
}

/// What each Slurm array task runs: this binary with this test's name.
/// Outside a task (`BRAID_LAB_CHUNKS` unset) it does nothing.
#[test]
fn slurm_task_entry() {
    if std::env::var_os(CHUNKS_ENV).is_none() {
        return;
    }
    let chunk = task::chunk_from_env().expect("a chunk from the environment");
    std::process::exit(task::run_task(&chunk, &resolve, &Isolation::InProcess));
}

fn local_options(root: &Path) -> RunOptions {
    let mut o = RunOptions::new(root.join("local"));
    o.show_progress = false;
    o.worker_resolves = resolvable;
    o.jobs = 2;
    o
}

fn slurm_options(root: &Path, shared: &str, configure: impl FnOnce(&mut SlurmOptions)) -> RunOptions {
    let mut o = local_options(root);
    let exe = std::env::current_exe().unwrap().display().to_string();
    let command =
        vec![exe, "--exact".into(), "slurm_task_entry".into(), "--nocapture".into(), "--test-threads=1".into()];
    let mut s = SlurmOptions::new(root.join(shared), command);
    s.poll_interval = Duration::from_millis(200);
    s.queue_interval = Duration::from_millis(500);
    s.lost_grace = Duration::from_secs(2);
    configure(&mut s);
    o.executor = Executor::Slurm(Box::new(s));
    o
}

fn nap_plan(name: &str, n: usize, ms: i64) -> Vec<PlannedExperiment> {
    let values: Vec<Value> = (0..n as i64).map(|i| Value::Int(ms + i)).collect();
    let study = Study::from_values(name, Arc::new(Nap), &[("ms", values)], 1, 5).unwrap();
    Plan::new(&study).experiments
}

/// The 20-experiment simulator study: same records through Slurm as
/// through the local executor.
fn records_equal_the_local_executors(root: &Path) {
    let template = find_builtin("sim-transfer").expect("sim-transfer is built in");
    let bytes: Vec<Value> = [50_000u64, 100_000, 150_000, 200_000, 250_000].into_iter().map(Value::Size).collect();
    let links = vec![Value::Link("rtt=20ms,rate=20mbit".into()), Value::Link("rtt=60ms,rate=10mbit,loss=1%".into())];
    let study =
        Study::from_values("slurm-equal", template.clone(), &[("bytes", bytes), ("link", links)], 2, 11).unwrap();
    let plan = Plan::new(&study).experiments;
    assert_eq!(plan.len(), 20);
    let lookup = move |name: &str| (name == template.name()).then(|| template.clone());

    let mut local = MemorySink::default();
    let s = run(1, &plan, &lookup, &mut local, &local_options(root)).unwrap();
    assert_eq!((s.ran, s.ok), (20, 20), "{s:?}");

    let mut remote = MemorySink::default();
    let options = slurm_options(root, "equal", |s| s.chunk = ChunkSize::Fixed(3));
    let s = run(1, &plan, &lookup, &mut remote, &options).unwrap();
    assert_eq!((s.planned, s.ran, s.ok), (20, 20, 20), "{s:?}");
    for e in &plan {
        let a = local.get(1, &e.id).unwrap();
        let b = remote.get(1, &e.id).unwrap();
        assert_eq!(b.status, ExperimentStatus::Ok);
        assert!(!a.records.is_empty());
        assert_eq!(a.records, b.records, "experiment {} differs", e.id);
    }
    let layout = Layout::new(&root.join("equal"), 1);
    let journal = read_journal(&layout.journal()).unwrap();
    assert_eq!(journal.len(), 1, "one array");
    assert_eq!(journal[0].tasks, 7, "20 experiments in chunks of 3");
    assert_eq!(std::fs::read_dir(layout.bundles()).unwrap().count(), 0, "every bundle ingested and removed");

    // Nothing left to do: nothing is submitted.
    let again = run(1, &plan, &lookup, &mut remote, &options).unwrap();
    assert_eq!((again.skipped, again.ran), (20, 0));
    assert_eq!(read_journal(&layout.journal()).unwrap().len(), 1);
}

/// A task cancelled with scancel: its experiment is stored as failed with
/// the reason, and retry_failed runs it again.
fn a_lost_task_fails_its_experiments_and_retry_completes_them(root: &Path) {
    let plan = nap_plan("slurm-lost", 4, 1500);
    let options = slurm_options(root, "lost", |s| {
        s.chunk = ChunkSize::Fixed(1);
        s.max_jobs = Some(1);
    });
    let layout = Layout::new(&root.join("lost"), 2);
    let lookup = |name: &str| resolve(name);
    let runner = {
        let (plan, options) = (plan.clone(), options.clone());
        std::thread::spawn(move || {
            let mut sink = MemorySink::default();
            let s = run(2, &plan, &|n: &str| resolve(n), &mut sink, &options);
            (s, sink)
        })
    };
    wait_for("the array's journal line", Duration::from_secs(30), || {
        read_journal(&layout.journal()).is_ok_and(|j| !j.is_empty())
    });
    let job = read_journal(&layout.journal()).unwrap()[0].job;
    // Task 3 waits behind the throttle: cancel it.
    let status = Command::new("scancel").arg(format!("{job}_3")).status().unwrap();
    assert!(status.success());
    let (summary, mut sink) = runner.join().unwrap();
    let summary = summary.unwrap();
    assert_eq!((summary.ran, summary.ok, summary.failed), (4, 3, 1), "{summary:?}");
    let lost = sink.get(2, &plan[3].id).unwrap();
    assert_eq!(lost.status, ExperimentStatus::Failed);
    let error = lost.error.as_deref().unwrap();
    assert!(error.contains(&format!("Slurm task {job}_3 ended without a result")), "{error}");

    let mut retry = options.clone();
    retry.retry_failed = true;
    let s = run(2, &plan, &lookup, &mut sink, &retry).unwrap();
    assert_eq!((s.retried, s.ran, s.ok, s.skipped), (1, 1, 1, 3), "{s:?}");
    assert!(sink.experiments(2).all(|e| e.status == ExperimentStatus::Ok));
    assert_eq!(read_journal(&layout.journal()).unwrap().len(), 2, "the retry is an array of its own");
}

/// A runner stopped mid-study (as a kill would) and started again adopts
/// the array still running: nothing is submitted twice, nothing stored
/// twice, everything ends up stored.
fn an_interrupted_runner_resumes_by_adopting_its_arrays(root: &Path) {
    let plan = nap_plan("slurm-resume", 6, 700);
    let cancel = Arc::new(AtomicBool::new(false));
    let options = slurm_options(root, "resume", |s| {
        s.chunk = ChunkSize::Fixed(2);
        s.max_jobs = Some(1);
        s.cancel = Some(cancel.clone());
    });
    let layout = Layout::new(&root.join("resume"), 3);
    let runner = {
        let (plan, options) = (plan.clone(), options.clone());
        std::thread::spawn(move || {
            let mut sink = MemorySink::default();
            let s = run(3, &plan, &|n: &str| resolve(n), &mut sink, &options);
            (s, sink)
        })
    };
    // Interrupt once the first task's results are in.
    wait_for("the first results", Duration::from_secs(60), || {
        std::fs::read_dir(layout.bundles()).is_ok_and(|d| d.count() > 0)
    });
    cancel.store(true, Ordering::SeqCst);
    let (first, mut sink) = runner.join().unwrap();
    assert!(matches!(first, Err(RunError::Slurm(SlurmError::Interrupted))), "{first:?}");
    let stored_before = sink.experiments(3).count();
    assert!(stored_before < 6, "interrupted before the end");

    cancel.store(false, Ordering::SeqCst);
    let s = run(3, &plan, &|n: &str| resolve(n), &mut sink, &options).unwrap();
    assert_eq!(s.skipped, stored_before);
    assert_eq!(s.ran + stored_before, 6, "{s:?}");
    assert_eq!(s.ok, s.ran);
    assert_eq!(sink.experiments(3).count(), 6);
    assert_eq!(read_journal(&layout.journal()).unwrap().len(), 1, "adopted, not submitted again");
}

#[test]
fn slurm_executor_end_to_end() {
    if let Some(why) = unavailable() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("the Slurm test cannot run here: {why}");
        }
        eprintln!("skipping the Slurm test: {why}");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let _cluster = start_cluster(&root.path().join("cluster"));
    records_equal_the_local_executors(root.path());
    a_lost_task_fails_its_experiments_and_retry_completes_them(root.path());
    an_interrupted_runner_resumes_by_adopting_its_arrays(root.path());
}
