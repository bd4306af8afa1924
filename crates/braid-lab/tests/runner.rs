//! The runner against small templates defined here: parallel slots,
//! exclusive experiments, failures, panics and timeouts stored with their
//! status, resume, retrying failures, worker processes (shell scripts as the
//! worker program) and reruns.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::record::Record;
use braid_lab::runner::worker::{self, WorkerSpec};
use braid_lab::runner::{
    rerun, run, Isolation, MemorySink, RerunError, ResultSink, RunError, RunOptions, IN_PROCESS_GRACE, KILL_GRACE,
};
use braid_lab::store::{ExperimentStatus, FinishedExperiment};
use braid_lab::template::{Context, Template, TemplateError};

/// When each experiment ran (by the value of its `x`).
type Log = Arc<Mutex<Vec<(i64, Instant, Instant)>>>;

/// What a test template does.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// Records `x` and `seed`-derived values, sleeping `ms` first.
    Record { ms: u64 },
    /// Writes to stderr.log in its work dir, then fails.
    Fail,
    /// Panics.
    Panic,
    /// Sleeps 5 s, ignoring its deadline.
    Hang,
    /// Watches its deadline and gives up there.
    Polite,
}

struct Probe {
    name: &'static str,
    behaviour: Behaviour,
    log: Log,
    calls: Arc<AtomicUsize>,
    /// When set, `Fail` succeeds instead (to test retrying).
    healed: Arc<AtomicBool>,
}

impl Probe {
    fn new(name: &'static str, behaviour: Behaviour) -> Probe {
        Probe { name, behaviour, log: Log::default(), calls: Arc::default(), healed: Arc::default() }
    }
}

impl Template for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a runner test template"
    }
    fn params(&self) -> Vec<ParamDecl> {
        vec![ParamDecl::config("x", ParamType::int(), Value::Int(0))]
    }
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let x = ctx.params.int("x")?;
        let start = Instant::now();
        let result = match self.behaviour {
            Behaviour::Record { ms } => {
                std::thread::sleep(Duration::from_millis(ms));
                ctx.record("x", x as f64);
                // Deterministic in the seed: a rerun must give the same.
                ctx.record("seeded", (ctx.seed % 1000) as f64 + 0.5);
                ctx.series("ramp", 0.5, x as f64 * 2.0);
                Ok(())
            }
            Behaviour::Fail if self.healed.load(Ordering::SeqCst) => {
                ctx.record("x", x as f64);
                Ok(())
            }
            Behaviour::Fail => {
                let mut f = std::fs::File::create(ctx.work_dir().join("stderr.log")).unwrap();
                for i in 0..60 {
                    writeln!(f, "diagnostic line {i}").unwrap();
                }
                ctx.record("partial", 1.0);
                Err(TemplateError::Failed(format!("measurement {x} went wrong")))
            }
            Behaviour::Panic => panic!("probe panicked on x={x}"),
            Behaviour::Hang => {
                std::thread::sleep(Duration::from_secs(5));
                Ok(())
            }
            Behaviour::Polite => loop {
                ctx.check_deadline("waiting for a queue that never fills")?;
                std::thread::sleep(Duration::from_millis(5));
            },
        };
        self.log.lock().unwrap().push((x, start, Instant::now()));
        result
    }
}

fn experiment(template: &str, x: i64, exclusive: bool, timeout: Duration) -> PlannedExperiment {
    let mut params = Params::default();
    params.insert("x", Value::Int(x));
    PlannedExperiment {
        id: format!("{template}-{x:04}"),
        template: template.into(),
        template_version: 1,
        params,
        repetition: 0,
        seed: 1000 + x as u64,
        timeout,
        exclusive,
        expected: Duration::from_millis(50),
    }
}

fn lookup(templates: Vec<Arc<dyn Template>>) -> impl Fn(&str) -> Option<Arc<dyn Template>> {
    move |name: &str| templates.iter().find(|t| t.name() == name).cloned()
}

/// A fresh work root for one test.
fn root(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-lab-runner-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn options(root: &Path, jobs: usize) -> RunOptions {
    let mut o = RunOptions::new(root);
    o.jobs = jobs;
    o.show_progress = false;
    o
}

/// The largest number of intervals that overlap at one instant.
fn max_overlap(intervals: &[(i64, Instant, Instant)]) -> usize {
    intervals
        .iter()
        .map(|&(_, s, _)| intervals.iter().filter(|&&(_, s2, e2)| s2 <= s && s < e2).count())
        .max()
        .unwrap_or(0)
}

fn metric(records: &[Record], name: &str) -> Option<f64> {
    records.iter().find_map(|r| match r {
        Record::Metric { name: n, value } if n == name => Some(*value),
        _ => None,
    })
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn parallel_jobs_overlap_and_never_exceed_the_slots() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 300 }));
    let log = probe.log.clone();
    let templates = lookup(vec![probe]);
    let plan: Vec<_> = (0..4).map(|x| experiment("probe", x, false, LONG)).collect();

    let dir = root("parallel4");
    let mut sink = MemorySink::default();
    let began = Instant::now();
    let s = run(1, &plan, &templates, &mut sink, &options(&dir, 4)).unwrap();
    assert_eq!((s.planned, s.ran, s.ok), (4, 4, 4));
    assert_eq!(max_overlap(&log.lock().unwrap()), 4, "four slots, four sleeping experiments");
    assert!(began.elapsed() < Duration::from_millis(1100), "ran one after another: {:?}", began.elapsed());

    log.lock().unwrap().clear();
    let dir2 = root("parallel2");
    let mut sink = MemorySink::default();
    let plan: Vec<_> = (0..6).map(|x| experiment("probe", x, false, LONG)).collect();
    run(1, &plan, &templates, &mut sink, &options(&dir2, 2)).unwrap();
    assert_eq!(max_overlap(&log.lock().unwrap()), 2);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

#[test]
fn exclusive_experiments_run_alone_in_plan_order() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 120 }));
    let log = probe.log.clone();
    let templates = lookup(vec![probe]);
    let mut plan: Vec<_> = (0..3).map(|x| experiment("probe", x, false, LONG)).collect();
    plan.push(experiment("probe", 10, true, LONG));
    plan.extend((20..23).map(|x| experiment("probe", x, false, LONG)));
    plan.push(experiment("probe", 30, true, LONG));

    let dir = root("exclusive");
    let mut sink = MemorySink::default();
    let s = run(1, &plan, &templates, &mut sink, &options(&dir, 3)).unwrap();
    assert_eq!(s.ok, 8);
    let log = log.lock().unwrap();
    for &(x, start, end) in log.iter().filter(|(x, _, _)| *x == 10 || *x == 30) {
        for &(y, s2, e2) in log.iter().filter(|(y, _, _)| *y != x) {
            assert!(e2 <= start || s2 >= end, "exclusive {x} overlaps {y}");
            // Plan order: what comes before it finished before it started.
            if y < x {
                assert!(e2 <= start, "{y} is planned before exclusive {x}");
            } else {
                assert!(s2 >= end, "{y} is planned after exclusive {x}");
            }
        }
    }
    // The shared ones between the exclusive ones still ran together.
    let middle: Vec<_> = log.iter().copied().filter(|(x, _, _)| (20..23).contains(x)).collect();
    assert_eq!(max_overlap(&middle), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failures_panics_and_timeouts_are_stored_and_the_study_goes_on() {
    let templates = lookup(vec![
        Arc::new(Probe::new("ok", Behaviour::Record { ms: 0 })),
        Arc::new(Probe::new("fail", Behaviour::Fail)),
        Arc::new(Probe::new("panic", Behaviour::Panic)),
        Arc::new(Probe::new("hang", Behaviour::Hang)),
        Arc::new(Probe::new("polite", Behaviour::Polite)),
    ]);
    let short = Duration::from_millis(150);
    let plan = vec![
        experiment("fail", 1, false, LONG),
        experiment("panic", 2, false, LONG),
        experiment("hang", 3, false, short),
        experiment("polite", 4, false, short),
        experiment("ok", 5, false, LONG),
    ];
    let dir = root("failures");
    let mut sink = MemorySink::default();
    let s = run(7, &plan, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!((s.ran, s.ok, s.failed, s.timed_out), (5, 1, 2, 2));
    let get = |id: &str| sink.get(7, id).unwrap_or_else(|| panic!("{id} not stored"));

    let fail = get("fail-0001");
    assert_eq!(fail.status, ExperimentStatus::Failed);
    assert_eq!(fail.error.as_deref(), Some("measurement 1 went wrong"));
    assert!(fail.stderr_tail.ends_with("diagnostic line 59"), "{}", fail.stderr_tail);
    assert_eq!(fail.stderr_tail.lines().count(), 40);
    assert_eq!(metric(&fail.records, "partial"), Some(1.0), "records written before the failure are kept");
    assert!(dir.join("fail-0001").join("stderr.log").exists(), "a failure's work dir is kept");

    let panic = get("panic-0002");
    assert_eq!(panic.status, ExperimentStatus::Failed);
    assert_eq!(panic.error.as_deref(), Some("panicked: probe panicked on x=2"));

    let hang = get("hang-0003");
    assert_eq!(hang.status, ExperimentStatus::TimedOut);
    assert!(hang.error.as_deref().unwrap().contains("ctx.deadline"), "{:?}", hang.error);
    let took = hang.ended - hang.started;
    let limit = (short + IN_PROCESS_GRACE).as_secs_f64();
    assert!(took >= limit - 0.01 && took < limit + 1.0, "gave up after {took} s");

    let polite = get("polite-0004");
    assert_eq!(polite.status, ExperimentStatus::TimedOut);
    assert!(polite.error.as_deref().unwrap().contains("a queue that never fills"), "{:?}", polite.error);
    assert!(polite.ended - polite.started < 1.0, "a template that honours its deadline is not waited for");

    let ok = get("ok-0005");
    assert_eq!(ok.status, ExperimentStatus::Ok);
    assert_eq!(ok.error, None);
    assert!(!dir.join("ok-0005").exists(), "a success's work dir is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stored_experiments_carry_provenance_and_records() {
    let templates = lookup(vec![Arc::new(Probe::new("probe", Behaviour::Record { ms: 20 }))]);
    let plan = vec![experiment("probe", 3, false, LONG)];
    let dir = root("provenance");
    let mut sink = MemorySink::default();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    run(1, &plan, &templates, &mut sink, &options(&dir, 1)).unwrap();
    let e = sink.get(1, "probe-0003").unwrap();
    assert_eq!(e.planned, plan[0]);
    assert!(e.started >= before - 0.001 && e.ended >= e.started + 0.019, "{} {}", e.started, e.ended);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(e.host, host.trim());
    assert_eq!(e.braid_version, env!("CARGO_PKG_VERSION"));
    assert!(!e.git_commit.is_empty());
    assert_eq!(
        e.records,
        vec![
            Record::Metric { name: "x".into(), value: 3.0 },
            Record::Metric { name: "seeded".into(), value: 3.5 },
            Record::Series { name: "ramp".into(), t: 0.5, value: 6.0 },
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resume_runs_only_what_is_missing() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }));
    let calls = probe.calls.clone();
    let templates = lookup(vec![probe]);
    let plan: Vec<_> = (0..5).map(|x| experiment("probe", x, false, LONG)).collect();
    let dir = root("resume");
    let mut sink = MemorySink::default();

    // An interrupted study: the first three are stored.
    let first = run(1, &plan[..3], &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!(first.ran, 3);
    let again = run(1, &plan, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!((again.planned, again.skipped, again.ran, again.ok), (5, 3, 2, 2));
    assert_eq!(calls.load(Ordering::SeqCst), 5, "nothing ran twice");
    // The sink refuses duplicates, so five stored means five distinct.
    assert_eq!(sink.experiments(1).count(), 5);
    // A duplicate in the plan runs once.
    let mut doubled = plan.clone();
    doubled.push(experiment("probe", 7, false, LONG));
    doubled.push(experiment("probe", 7, false, LONG));
    let third = run(1, &doubled, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!((third.planned, third.skipped, third.ran), (6, 5, 1));
    // Another study with the same experiments is its own.
    let other = run(2, &plan, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!(other.ran, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn retry_failed_reruns_only_the_failures() {
    let ok = Arc::new(Probe::new("ok", Behaviour::Record { ms: 0 }));
    let flaky = Arc::new(Probe::new("flaky", Behaviour::Fail));
    let (ok_calls, flaky_calls, healed) = (ok.calls.clone(), flaky.calls.clone(), flaky.healed.clone());
    let templates = lookup(vec![ok, flaky]);
    let plan = vec![
        experiment("ok", 1, false, LONG),
        experiment("flaky", 2, false, LONG),
        experiment("ok", 3, false, LONG),
        experiment("flaky", 4, false, LONG),
    ];
    let dir = root("retry");
    let mut sink = MemorySink::default();
    let first = run(1, &plan, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!((first.ok, first.failed), (2, 2));

    // Without retry_failed, failures count as stored.
    let plain = run(1, &plan, &templates, &mut sink, &options(&dir, 2)).unwrap();
    assert_eq!((plain.skipped, plain.ran), (4, 0));

    healed.store(true, Ordering::SeqCst);
    let mut retry = options(&dir, 2);
    retry.retry_failed = true;
    let second = run(1, &plan, &templates, &mut sink, &retry).unwrap();
    assert_eq!((second.skipped, second.ran, second.ok, second.retried), (2, 2, 2, 2));
    assert_eq!(ok_calls.load(Ordering::SeqCst), 2);
    assert_eq!(flaky_calls.load(Ordering::SeqCst), 4);
    let stored = sink.stored_experiments(1).unwrap();
    assert_eq!(stored.len(), 4);
    assert!(stored.values().all(|s| *s == ExperimentStatus::Ok));
    // The retried experiment's stale work dir (from the failure) is gone.
    assert!(!dir.join("flaky-0002").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_an_error_before_anything_runs() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }));
    let calls = probe.calls.clone();
    let templates = lookup(vec![probe]);
    let plan = vec![experiment("probe", 1, false, LONG), experiment("nowhere", 2, false, LONG)];
    let dir = root("badinput");
    let mut sink = MemorySink::default();
    match run(1, &plan, &templates, &mut sink, &options(&dir, 2)) {
        Err(RunError::UnknownTemplate { experiment, template }) => {
            assert_eq!((experiment.as_str(), template.as_str()), ("nowhere-0002", "nowhere"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(run(1, &plan, &templates, &mut sink, &options(&dir, 0)), Err(RunError::NoJobs)));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(sink.experiments(1).count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sink whose inserts fail after `allow` of them.
struct BrokenSink {
    inner: MemorySink,
    allow: usize,
}

impl ResultSink for BrokenSink {
    type Error = std::io::Error;
    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, std::io::Error> {
        Ok(self.inner.stored_experiments(study_id).unwrap())
    }
    fn insert_experiment(&mut self, study_id: i64, e: &FinishedExperiment) -> Result<(), std::io::Error> {
        if self.allow == 0 {
            return Err(std::io::Error::other("disk full"));
        }
        self.allow -= 1;
        self.inner.insert_experiment(study_id, e).map_err(std::io::Error::other)
    }
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, std::io::Error> {
        Ok(self.inner.delete_failed(study_id).unwrap())
    }
}

#[test]
fn a_failing_sink_stops_the_run_with_its_error() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 10 }));
    let calls = probe.calls.clone();
    let templates = lookup(vec![probe]);
    let plan: Vec<_> = (0..20).map(|x| experiment("probe", x, false, LONG)).collect();
    let dir = root("brokensink");
    let mut sink = BrokenSink { inner: MemorySink::default(), allow: 3 };
    let err = run(1, &plan, &templates, &mut sink, &options(&dir, 1)).unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 4, "nothing starts after the store failed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sink that stores each batch whole or not at all (as the store does),
/// remembers the ids of every batch it was given, and takes `slow` over
/// each: what runs meanwhile finishes and queues up, so of two batches in a
/// row (with `jobs` experiments running) one holds two or more. With
/// `fail_shared`, it fails the first batch of more than one experiment.
struct BatchSink {
    inner: MemorySink,
    batches: Vec<Vec<String>>,
    slow: Duration,
    fail_shared: bool,
    failed: Option<usize>,
}

impl BatchSink {
    fn new(slow: Duration, fail_shared: bool) -> BatchSink {
        BatchSink { inner: MemorySink::default(), batches: Vec::new(), slow, fail_shared, failed: None }
    }

    fn stored_ids(&self, study_id: i64) -> Vec<String> {
        self.inner.experiments(study_id).map(|e| e.planned.id.clone()).collect()
    }
}

impl ResultSink for BatchSink {
    type Error = std::io::Error;
    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, std::io::Error> {
        Ok(self.inner.stored_experiments(study_id).unwrap())
    }
    fn insert_experiment(&mut self, study_id: i64, e: &FinishedExperiment) -> Result<(), std::io::Error> {
        self.insert_experiments(study_id, std::slice::from_ref(e))
    }
    fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), std::io::Error> {
        self.batches.push(batch.iter().map(|e| e.planned.id.clone()).collect());
        std::thread::sleep(self.slow);
        if self.fail_shared && self.failed.is_none() && batch.len() > 1 {
            self.failed = Some(self.batches.len() - 1);
            return Err(std::io::Error::other(format!("disk full in batch {}", self.batches.len())));
        }
        self.inner.insert_experiments(study_id, batch).map_err(std::io::Error::other)
    }
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, std::io::Error> {
        Ok(self.inner.delete_failed(study_id).unwrap())
    }
}

#[test]
fn experiments_finishing_together_are_stored_in_one_insert() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }));
    let calls = probe.calls.clone();
    let templates = lookup(vec![probe]);
    let plan: Vec<_> = (0..12).map(|x| experiment("probe", x, false, LONG)).collect();
    let dir = root("batches");
    let slow = Duration::from_millis(150);
    let mut sink = BatchSink::new(slow, false);
    let s = run(1, &plan, &templates, &mut sink, &options(&dir, 4)).unwrap();
    assert_eq!((s.ran, s.ok, s.failed), (12, 12, 0));
    assert_eq!(calls.load(Ordering::SeqCst), 12);

    // What finished during a slow insert went to the sink together.
    let sizes: Vec<usize> = sink.batches.iter().map(Vec::len).collect();
    assert!(sizes.iter().filter(|&&n| n >= 2).count() >= 2, "too few shared batches: {sizes:?}");
    assert!(sizes.len() < 12, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 4), "a batch holds at most `jobs`: {sizes:?}");
    // Every experiment went to the sink in exactly one batch, and is stored.
    let mut given: Vec<String> = sink.batches.concat();
    given.sort();
    let mut expected: Vec<String> = plan.iter().map(|e| e.id.clone()).collect();
    expected.sort();
    assert_eq!(given, expected);
    assert_eq!(sink.inner.experiments(1).count(), 12);
    // Their wait for the slow insert is the runner's overhead.
    let overhead = s.overhead.unwrap();
    assert!(overhead.max_ms >= slow.as_secs_f64() * 1e3 * 0.9, "{overhead:?}");
    assert!(!dir.join("probe-0005").exists(), "stored successes' work dirs are removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sink_failing_on_a_batch_stops_the_run_and_resume_stores_each_experiment_once() {
    let probe = Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }));
    let calls = probe.calls.clone();
    let templates = lookup(vec![probe]);
    let plan: Vec<_> = (0..24).map(|x| experiment("probe", x, false, LONG)).collect();
    let dir = root("batchfail");
    let mut sink = BatchSink::new(Duration::from_millis(100), true);

    let err = run(1, &plan, &templates, &mut sink, &options(&dir, 4)).unwrap_err();
    let failed = sink.failed.expect("a batch of several experiments was given to the sink");
    let lost = sink.batches[failed].clone();
    match &err {
        RunError::Sink { doing, source } => {
            assert_eq!(source.to_string(), format!("disk full in batch {}", failed + 1));
            assert!(doing.contains(&format!("storing {} experiments", lost.len())), "{doing}");
            assert!(doing.contains(&lost[0]) && doing.contains(&lost[lost.len() - 1]), "{doing}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("disk full"), "{err}");
    let stored = sink.stored_ids(1);
    // All or none: nothing of the failed batch is stored; everything else
    // that ran (before the failure, or still running then) is.
    assert!(lost.iter().all(|id| !stored.contains(id)), "{lost:?} / {stored:?}");
    let ran = calls.load(Ordering::SeqCst);
    assert_eq!(ran, stored.len() + lost.len(), "everything that ran was given to the sink once");
    assert!(ran < plan.len(), "nothing starts after the sink failed ({ran} ran)");
    // An in-process template that never asked for a work dir recorded in
    // memory: a lost success leaves nothing behind to mix into its rerun.
    assert!(!dir.join(&lost[0]).exists());

    // Resume with a healthy sink: the lost batch runs again, nothing else.
    sink.fail_shared = false;
    let again = run(1, &plan, &templates, &mut sink, &options(&dir, 4)).unwrap();
    assert_eq!(
        (again.skipped, again.ran, again.ok),
        (stored.len(), plan.len() - stored.len(), plan.len() - stored.len())
    );
    assert_eq!(calls.load(Ordering::SeqCst), plan.len() + lost.len(), "only the lost batch ran twice");
    // The sink refuses a duplicate, and holds each experiment once.
    let mut all = sink.stored_ids(1);
    assert_eq!(all.len(), plan.len());
    all.sort();
    all.dedup();
    assert_eq!(all.len(), plan.len());
    assert!(!dir.join(&lost[0]).exists(), "stored at last, its work dir is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rerun_repeats_an_experiment_without_storing_it() {
    let templates = lookup(vec![
        Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 })),
        Arc::new(Probe::new("fail", Behaviour::Fail)),
    ]);
    let plan = vec![experiment("probe", 9, false, LONG)];
    let dir = root("rerun");
    let mut sink = MemorySink::default();
    run(1, &plan, &templates, &mut sink, &options(&dir, 1)).unwrap();
    let stored = sink.get(1, "probe-0009").unwrap().records.clone();
    let again = rerun(&plan[0], templates("probe").unwrap(), &options(&dir, 1)).unwrap();
    assert_eq!(again, stored);
    assert_eq!(sink.experiments(1).count(), 1);

    match rerun(&experiment("fail", 2, false, LONG), templates("fail").unwrap(), &options(&dir, 1)) {
        Err(RerunError::Failed { status, error, stderr_tail, work_dir, .. }) => {
            assert_eq!(status, ExperimentStatus::Failed);
            assert_eq!(error, "measurement 2 went wrong");
            assert!(stderr_tail.contains("diagnostic line 59"));
            assert!(work_dir.join("stderr.log").exists());
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- worker isolation, with shell scripts as the worker program ----

/// Options that send every template to `sh -c SCRIPT sh SPEC_PATH`.
fn shell_worker(root: &Path, script: &str) -> RunOptions {
    let mut o = options(root, 2);
    o.isolation = Isolation::Worker { program: "/bin/sh".into(), args: vec!["-c".into(), script.into(), "sh".into()] };
    o.worker_resolves = |_| true;
    o
}

fn shell_run(test: &str, script: &str, timeout: Duration) -> (FinishedExperiment, PathBuf) {
    let templates = lookup(vec![Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }))]);
    let plan = vec![experiment("probe", 1, false, timeout)];
    let dir = root(test);
    let mut o = shell_worker(&dir, script);
    o.keep_work_dirs = true;
    let mut sink = MemorySink::default();
    run(1, &plan, &templates, &mut sink, &o).unwrap();
    let e = sink.get(1, "probe-0001").unwrap().clone();
    (e, dir)
}

#[test]
fn a_worker_gets_its_spec_and_reports_through_the_records_file() {
    let script = r#"
        test -f "$1" || exit 9
        [ "$PWD" = "$(dirname "$1")" ] || exit 8
        echo '{"metric":"from_worker","value":42}' >> "$BRAID_LAB_RECORDS"
        echo "to stdout"
    "#;
    let (e, dir) = shell_run("workerspec", script, LONG);
    assert_eq!(e.status, ExperimentStatus::Ok, "{:?} {}", e.error, e.stderr_tail);
    assert_eq!(e.exit_code, Some(0));
    assert_eq!(metric(&e.records, "from_worker"), Some(42.0));
    let work = dir.join("probe-0001");
    let spec: WorkerSpec = serde_json::from_str(&std::fs::read_to_string(work.join("spec.json")).unwrap()).unwrap();
    assert_eq!(spec.experiment, experiment("probe", 1, false, LONG));
    assert_eq!(spec.template, "probe");
    assert_eq!(spec.work_dir, work);
    assert!(spec.deadline_unix > e.started && spec.deadline_unix <= e.started + LONG.as_secs_f64() + 0.001);
    assert_eq!(std::fs::read_to_string(work.join("stdout.log")).unwrap(), "to stdout\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_worker_is_stored_with_its_exit_code_and_stderr_tail() {
    let script = r#"
        i=0
        while [ $i -lt 100 ]; do echo "worker noise $i" >&2; i=$((i+1)); done
        echo '{"metric":"before_failing","value":1}' >> "$BRAID_LAB_RECORDS"
        echo "link setup failed: no such device" >&2
        exit 3
    "#;
    let (e, dir) = shell_run("workerfail", script, LONG);
    assert_eq!(e.status, ExperimentStatus::Failed);
    assert_eq!(e.exit_code, Some(3));
    let error = e.error.unwrap();
    assert!(error.contains("status 3") && error.contains("no such device"), "{error}");
    assert_eq!(e.stderr_tail.lines().count(), 40);
    assert!(e.stderr_tail.starts_with("worker noise 61\n"), "{}", e.stderr_tail);
    assert!(e.stderr_tail.ends_with("link setup failed: no such device"));
    assert_eq!(metric(&e.records, "before_failing"), Some(1.0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn worker_exit_codes_and_signals_map_to_statuses() {
    let (e, dir) = shell_run("worker124", "echo 'braid lab worker: deadline passed: phase 2' >&2; exit 124", LONG);
    assert_eq!(e.status, ExperimentStatus::TimedOut);
    assert_eq!(e.error.as_deref(), Some("deadline passed: phase 2"));
    let _ = std::fs::remove_dir_all(&dir);

    let (e, dir) = shell_run("workersig", "kill -KILL $$", LONG);
    assert_eq!(e.status, ExperimentStatus::Failed);
    assert_eq!(e.exit_code, None);
    assert!(e.error.as_deref().unwrap().contains("signal 9"), "{:?}", e.error);
    let _ = std::fs::remove_dir_all(&dir);

    let mut o = options(&root("workermissing"), 1);
    o.isolation = Isolation::Worker { program: "/nonexistent/braid".into(), args: vec![] };
    o.worker_resolves = |_| true;
    let templates = lookup(vec![Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }))]);
    let mut sink = MemorySink::default();
    run(1, &[experiment("probe", 1, false, LONG)], &templates, &mut sink, &o).unwrap();
    let e = sink.get(1, "probe-0001").unwrap();
    assert_eq!(e.status, ExperimentStatus::Failed);
    assert!(e.error.as_deref().unwrap().contains("cannot start worker /nonexistent/braid"), "{:?}", e.error);
    let _ = std::fs::remove_dir_all(&o.work_root);
}

fn alive(pid: i32) -> bool {
    // A zombie is dead: only its parent (init, here) has yet to reap it.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

fn wait_gone(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_timed_out_worker_and_everything_it_started_are_killed() {
    let script = r#"
        sleep 60 &
        echo $! > child.pid
        echo "waiting for the link" >&2
        wait
    "#;
    let began = Instant::now();
    let (e, dir) = shell_run("workertimeout", script, Duration::from_millis(300));
    assert!(began.elapsed() < Duration::from_millis(300) + KILL_GRACE, "SIGTERM was enough: {:?}", began.elapsed());
    assert_eq!(e.status, ExperimentStatus::TimedOut);
    assert!(e.error.as_deref().unwrap().contains("killed at its deadline"), "{:?}", e.error);
    assert!(e.stderr_tail.contains("waiting for the link"));
    let pid: i32 = std::fs::read_to_string(dir.join("probe-0001").join("child.pid")).unwrap().trim().parse().unwrap();
    assert!(wait_gone(pid), "the worker's child {pid} survived");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_ignoring_sigterm_is_killed_after_the_grace() {
    // `trap '' TERM` is inherited by the sleep too: only SIGKILL ends them.
    let script = r#"
        trap '' TERM
        sleep 60 &
        echo $! > child.pid
        wait
    "#;
    let began = Instant::now();
    let (e, dir) = shell_run("workerstubborn", script, Duration::from_millis(200));
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(200) + KILL_GRACE && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(e.status, ExperimentStatus::TimedOut);
    let pid: i32 = std::fs::read_to_string(dir.join("probe-0001").join("child.pid")).unwrap().trim().parse().unwrap();
    assert!(wait_gone(pid), "the worker's child {pid} survived");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_s_leftover_processes_are_killed_when_it_exits() {
    let (e, dir) = shell_run("workerleftover", "sleep 60 & echo $! > child.pid; exit 0", LONG);
    assert_eq!(e.status, ExperimentStatus::Ok);
    let pid: i32 = std::fs::read_to_string(dir.join("probe-0001").join("child.pid")).unwrap().trim().parse().unwrap();
    assert!(wait_gone(pid), "the worker's leftover {pid} survived");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parallel_workers_overlap() {
    let templates = lookup(vec![Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 }))]);
    let plan: Vec<_> = (0..4).map(|x| experiment("probe", x, false, LONG)).collect();
    let dir = root("workerparallel");
    let mut o = shell_worker(&dir, "sleep 0.4");
    o.jobs = 4;
    let mut sink = MemorySink::default();
    let began = Instant::now();
    let s = run(1, &plan, &templates, &mut sink, &o).unwrap();
    assert_eq!(s.ok, 4);
    assert!(began.elapsed() < Duration::from_millis(1200), "{:?}", began.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the worker side: run_spec ----

fn write_spec(dir: &Path, spec: &WorkerSpec) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("spec.json");
    std::fs::write(&path, serde_json::to_string(spec).unwrap()).unwrap();
    path
}

fn spec_for(dir: &Path, template: &str, timeout_s: f64) -> WorkerSpec {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    WorkerSpec {
        experiment: experiment(template, 5, false, LONG),
        template: template.into(),
        work_dir: dir.to_path_buf(),
        deadline_unix: now + timeout_s,
    }
}

#[test]
fn run_spec_runs_the_template_and_returns_its_exit_code() {
    let resolve = lookup(vec![
        Arc::new(Probe::new("probe", Behaviour::Record { ms: 0 })),
        Arc::new(Probe::new("fail", Behaviour::Fail)),
        Arc::new(Probe::new("panic", Behaviour::Panic)),
        Arc::new(Probe::new("polite", Behaviour::Polite)),
    ]);
    let base = root("runspec");

    let dir = base.join("ok");
    let path = write_spec(&dir, &spec_for(&dir, "probe", 30.0));
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_OK);
    let records = braid_lab::record::parse_records(&std::fs::read_to_string(dir.join("records.jsonl")).unwrap());
    assert_eq!(metric(&records, "x"), Some(5.0));
    assert_eq!(metric(&records, "seeded"), Some(5.5));

    let dir = base.join("fail");
    let path = write_spec(&dir, &spec_for(&dir, "fail", 30.0));
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_FAILED);

    let dir = base.join("panic");
    let path = write_spec(&dir, &spec_for(&dir, "panic", 30.0));
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_PANICKED);

    let dir = base.join("polite");
    let path = write_spec(&dir, &spec_for(&dir, "polite", 0.1));
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_TIMED_OUT);

    let dir = base.join("unknown");
    let path = write_spec(&dir, &spec_for(&dir, "nowhere", 30.0));
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_BAD_SPEC);

    let dir = base.join("version");
    let mut spec = spec_for(&dir, "probe", 30.0);
    spec.experiment.template_version = 2;
    let path = write_spec(&dir, &spec);
    assert_eq!(worker::run_spec(&path, &resolve), worker::EXIT_BAD_SPEC);
    assert!(!dir.join("records.jsonl").exists(), "a version mismatch runs nothing");

    let dir = base.join("garbage");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("spec.json"), "{not json").unwrap();
    assert_eq!(worker::run_spec(&dir.join("spec.json"), &resolve), worker::EXIT_BAD_SPEC);
    assert_eq!(worker::run_spec(&dir.join("missing.json"), &resolve), worker::EXIT_BAD_SPEC);
    let _ = std::fs::remove_dir_all(&base);
}

// ---- the real store and a command template ----

#[test]
fn a_command_study_lands_in_the_store_and_resumes() {
    use braid_lab::store::{Store, StudyRecord};
    use braid_lab::template::command::CommandTemplate;

    let dir = root("storecmd");
    std::fs::create_dir_all(&dir).unwrap();
    let toml = r#"
name = "echo-x"
command = ["sh", "-c", "[ {{x}} -ne 3 ] || { echo 'x must not be 3' >&2; exit 5; }; echo '{\"metric\":\"x\",\"value\":{{x}}}' >> \"$BRAID_LAB_RECORDS\""]
[params.x]
type = "int"
default = 1
"#;
    let template: Arc<dyn Template> = Arc::new(CommandTemplate::parse(toml, &dir.join("echo-x.toml")).unwrap());
    let templates = lookup(vec![template.clone()]);
    let plan: Vec<_> = (1..=4).map(|x| experiment("echo-x", x, false, LONG)).collect();

    let db = dir.join("lab.db");
    let mut store = Store::open(&db).unwrap();
    let study = store
        .upsert_study(&StudyRecord {
            name: "echo".into(),
            file_path: None,
            file_text: toml.into(),
            template: "echo-x".into(),
            template_version: 1,
            params: template.params(),
            planned: plan.len() as u64,
        })
        .unwrap();
    let options = options(&braid_lab::runner::default_work_root(&db), 2);
    let s = run(study, &plan[..2], &templates, &mut store, &options).unwrap();
    assert_eq!((s.ran, s.ok), (2, 2));
    // Resume, through the store, after "an interruption".
    let s = run(study, &plan, &templates, &mut store, &options).unwrap();
    assert_eq!((s.skipped, s.ran, s.ok, s.failed), (2, 2, 1, 1));
    drop(store);

    let store = Store::open(&db).unwrap();
    let rows = store.experiments(study).unwrap();
    assert_eq!(rows.len(), 4);
    for row in &rows {
        let x = row.params.int("x").unwrap();
        if x == 3 {
            assert_eq!(row.status, ExperimentStatus::Failed);
            assert!(row.error.as_deref().unwrap().contains("exited with status 5"), "{:?}", row.error);
            assert!(row.stderr_tail.contains("x must not be 3"), "{}", row.stderr_tail);
        } else {
            assert_eq!(row.status, ExperimentStatus::Ok, "{:?}", row.error);
            assert_eq!(row.scalars.get("x"), Some(&(x as f64)));
        }
        assert_eq!(row.braid_version, env!("CARGO_PKG_VERSION"));
    }
    assert!(db.with_file_name("lab.db.runs").join("echo-x-0003").join("stderr.log").exists());
    assert!(!db.with_file_name("lab.db.runs").join("echo-x-0001").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
