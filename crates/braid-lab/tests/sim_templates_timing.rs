//! How long the simulator studies in `studies/` take, measured by running
//! their experiments through the templates directly (no runner, no store):
//! one repetition of every grid point, on two threads (the target machine
//! has two cores), with each experiment's thread CPU time. The totals
//! extrapolate to all repetitions.
//!
//! The budget (issue 15, item 8): the redundancy studies, at least 1,000
//! experiments, finish in at most 10 minutes on 2 cores; so no experiment
//! may take more than about a second of CPU.
//!
//! Timing needs an optimised build:
//!
//! ```text
//! cargo test --release -p braid-lab --test sim_templates_timing -- --ignored --nocapture
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use braid_lab::plan::{Plan, PlannedExperiment};
use braid_lab::record::{Record, Recorder};
use braid_lab::study::Study;
use braid_lab::template::{find_builtin, Context};

/// The target machine's cores.
const CORES: usize = 2;

fn studies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../studies")
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One experiment's cost and outcome.
struct Timed {
    label: String,
    cpu: Duration,
    ok: bool,
    error: Option<String>,
}

fn run_one(e: &PlannedExperiment) -> Timed {
    let template = find_builtin(&e.template).expect("a built-in template");
    let mut recorder = Recorder::in_memory();
    let dir = std::env::temp_dir();
    let before = thread_cpu();
    let outcome = {
        let mut ctx = Context::new(&e.params, e.seed, Instant::now() + e.timeout, &mut recorder, &dir, "timing");
        template.run(&mut ctx)
    };
    let cpu = thread_cpu() - before;
    let records = recorder.take();
    let ok = records.iter().any(|r| matches!(r, Record::Metric { name, value } if name == "ok" && *value == 1.0))
        || !records.iter().any(|r| matches!(r, Record::Metric { name, .. } if name == "ok"));
    let label = e.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    Timed { label, cpu, ok: ok && outcome.is_ok(), error: outcome.err().map(|e| e.to_string()) }
}

/// The timing of one study file.
struct StudyTiming {
    name: String,
    experiments: usize,
    repetitions: u32,
    /// Wall time of one repetition of every point on `CORES` threads.
    wall_one_repetition: Duration,
    cpu: Vec<Duration>,
    slowest: (Duration, String),
    /// Experiments that did not run to their end (a template error).
    errors: usize,
    /// Experiments that ran to their end without every flow completing
    /// (`ok = 0`, a result), and the failed ones.
    not_ok: Vec<String>,
}

impl StudyTiming {
    fn cpu_total(&self) -> Duration {
        self.cpu.iter().sum::<Duration>() * self.repetitions
    }
    fn wall_estimate(&self) -> Duration {
        self.wall_one_repetition * self.repetitions
    }
    fn quantile(&self, q: f64) -> Duration {
        let mut v = self.cpu.clone();
        v.sort();
        v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    }
}

fn time_study(file: &str) -> StudyTiming {
    let path = studies_dir().join(file);
    let study = Study::load_builtin(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plan = Plan::new(&study);
    let points: Vec<&PlannedExperiment> = plan.experiments.iter().filter(|e| e.repetition == 0).collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(points.len()));
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CORES {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(e) = points.get(i) else { break };
                let t = run_one(e);
                results.lock().unwrap().push(t);
            });
        }
    });
    let wall = started.elapsed();
    let results = results.into_inner().unwrap();
    let slowest = results.iter().max_by_key(|t| t.cpu).map(|t| (t.cpu, t.label.clone())).unwrap_or_default();
    StudyTiming {
        name: plan.study.clone(),
        experiments: plan.count(),
        repetitions: plan.repetitions,
        wall_one_repetition: wall,
        cpu: results.iter().map(|t| t.cpu).collect(),
        errors: results.iter().filter(|t| t.error.is_some()).count(),
        slowest,
        not_ok: results
            .iter()
            .filter(|t| !t.ok)
            .map(|t| format!("{}: {}", t.label, t.error.as_deref().unwrap_or("ok = 0")))
            .collect(),
    }
}

fn print(t: &StudyTiming) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{}: {} experiments ({} points x {} repetitions); CPU per experiment: mean {:.1} ms, p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms ({}); \
         CPU total {:.1} s; estimated wall on {CORES} cores {:.1} s (one repetition took {:.1} s)",
        t.name,
        t.experiments,
        t.cpu.len(),
        t.repetitions,
        ms(t.cpu.iter().sum::<Duration>()) / t.cpu.len() as f64,
        ms(t.quantile(0.5)),
        ms(t.quantile(0.95)),
        ms(t.slowest.0),
        t.slowest.1,
        t.cpu_total().as_secs_f64(),
        t.wall_estimate().as_secs_f64(),
        t.wall_one_repetition.as_secs_f64(),
    );
    for n in &t.not_ok {
        println!("  not ok: {n}");
    }
}

/// The redundancy studies together: at least 1,000 experiments, each at
/// most a second of CPU, all in at most 10 minutes on two cores.
#[test]
#[ignore = "a timing measurement: run with --release -- --ignored"]
fn redundancy_studies_fit_ten_minutes_on_two_cores() {
    let timings: Vec<StudyTiming> =
        ["redundancy.toml", "redundancy-thesis.toml"].iter().map(|f| time_study(f)).collect();
    timings.iter().for_each(print);
    let count: usize = timings.iter().map(|t| t.experiments).sum();
    let wall: Duration = timings.iter().map(StudyTiming::wall_estimate).sum();
    let cpu: Duration = timings.iter().map(StudyTiming::cpu_total).sum();
    println!(
        "together: {count} experiments, CPU {:.1} s, estimated wall {:.1} s on {CORES} cores",
        cpu.as_secs_f64(),
        wall.as_secs_f64()
    );
    assert!(timings[0].experiments >= 1000, "redundancy.toml has {} experiments", timings[0].experiments);
    for t in &timings {
        assert!(t.slowest.0 <= Duration::from_secs(1), "{}: {:?} of CPU for {}", t.name, t.slowest.0, t.slowest.1);
        assert!(t.errors == 0, "{}: {} experiments failed", t.name, t.errors);
    }
    // The CPU bound, not the measured wall time, is what the machine
    // guarantees: other processes may share the cores while this runs.
    assert!(cpu / CORES as u32 <= Duration::from_secs(600), "{:.1} s of CPU on {CORES} cores", cpu.as_secs_f64());
}

/// The priority grid: every experiment runs to its end and none takes more
/// than a few seconds.
#[test]
#[ignore = "a timing measurement: run with --release -- --ignored"]
fn priority_grid_timing() {
    let t = time_study("priority-grid.toml");
    print(&t);
    assert!(t.errors == 0, "{} experiments failed", t.errors);
    assert!(t.slowest.0 <= Duration::from_secs(3), "{:?} of CPU for {}", t.slowest.0, t.slowest.1);
}
