//! Interrupting a run through `RunOptions::interrupt` (issue 21): the
//! running experiments' processes (command templates' programs, worker
//! processes, and what they started) are ended, SIGTERM first and SIGKILL
//! after the grace or at once when asked twice; the run returns promptly
//! with `RunError::Interrupted`; the experiments that finished before are
//! stored, the stopped ones are not, and running again completes only
//! those.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_lab::param::{Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::runner::interrupt::STOP_WAIT;
use braid_lab::runner::{run, Interrupt, Isolation, MemorySink, RunError, RunOptions, KILL_GRACE};
use braid_lab::store::ExperimentStatus;
use braid_lab::template::command::CommandTemplate;
use braid_lab::template::Template;

const LONG: Duration = Duration::from_secs(60);
/// How long an interrupted run may take at most, with a stubborn program
/// (SIGTERM ignored): the grace, then a little.
const PROMPT: Duration = Duration::from_secs(10);

/// A fresh directory for one test, removed when dropped (also when the
/// test fails).
struct TempRoot(PathBuf);

impl TempRoot {
    fn new(test: &str) -> TempRoot {
        let dir = std::env::temp_dir().join(format!("braid-lab-interrupt-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempRoot(dir)
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        // Whatever a failed test left running is killed first.
        for pid in processes_under(&self.0) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The processes whose `BRAID_LAB_RECORDS` lies under `root` (the run's
/// experiments' processes), as the runner's own orphan scan finds them.
fn processes_under(root: &Path) -> Vec<i32> {
    let prefix = [b"BRAID_LAB_RECORDS=".as_slice(), root.as_os_str().as_bytes()].concat();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|&pid| pid as u32 != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var.starts_with(&prefix)))
        })
        .collect()
}

/// Waits (bounded) until no process of the run is left.
fn assert_none_left(root: &Path) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let left = processes_under(root);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "processes of the interrupted run are still there: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `done`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn experiment(x: i64) -> PlannedExperiment {
    let mut params = Params::default();
    params.insert("x", Value::Int(x));
    PlannedExperiment {
        id: format!("nap-{x}"),
        template: "nap".into(),
        template_version: 1,
        params,
        repetition: 0,
        seed: x as u64,
        timeout: LONG,
        exclusive: false,
        expected: Duration::from_millis(50),
    }
}

/// A command template: experiments with `x >= 2` hang while the file
/// `hold` exists, in a program that starts a child of its own (`x == 2`
/// traps SIGTERM and leaves `got-term` in its work directory, `x == 3`
/// ignores it); the others record `x` at once.
fn nap_template(root: &Path) -> Arc<dyn Template> {
    let hold = root.join("hold");
    let toml = format!(
        r#"
name = "nap"
command = ["sh", "-c", '''
if [ {{{{x}}}} -ge 2 ] && [ -e "{hold}" ]; then
  if [ {{{{x}}}} -eq 2 ]; then trap 'touch got-term; exit 0' TERM; fi
  if [ {{{{x}}}} -eq 3 ]; then trap '' TERM; fi
  sleep 60 &
  echo $! > child.pid
  wait
fi
echo '{{"metric":"x","value":{{{{x}}}}}}' >> "$BRAID_LAB_RECORDS"
''']
[params.x]
type = "int"
default = 0
"#,
        hold = hold.display()
    );
    Arc::new(CommandTemplate::parse(&toml, &root.join("nap.toml")).unwrap())
}

fn options(root: &Path, interrupt: &Interrupt) -> RunOptions {
    let mut o = RunOptions::new(root.join("work"));
    o.jobs = 2;
    o.show_progress = false;
    o.interrupt = Some(interrupt.clone());
    o
}

/// Runs `plan` on a thread; once `ready` holds, requests `interrupt`
/// `requests` times; returns what the run returned, how long it took
/// after the request, and the sink.
fn interrupted_run(
    plan: Vec<PlannedExperiment>,
    template: Arc<dyn Template>,
    options: RunOptions,
    ready: impl Fn() -> bool,
    requests: usize,
) -> (Result<braid_lab::runner::RunSummary, RunError>, Duration, MemorySink) {
    let interrupt = options.interrupt.clone().unwrap();
    let runner = std::thread::spawn(move || {
        let mut sink = MemorySink::default();
        let lookup = move |name: &str| (name == template.name()).then(|| template.clone());
        let result = run(1, &plan, &lookup, &mut sink, &options);
        (result, sink)
    });
    wait_for("the experiments to be running", || ready() || runner.is_finished());
    assert!(!runner.is_finished(), "the run ended before it was interrupted");
    let asked = Instant::now();
    for _ in 0..requests {
        interrupt.request();
    }
    let until = asked + PROMPT + Duration::from_secs(5);
    while !runner.is_finished() {
        assert!(Instant::now() < until, "the interrupted run did not return");
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = asked.elapsed();
    let (result, sink) = runner.join().unwrap();
    (result, took, sink)
}

fn child_started(root: &Path, x: i64) -> bool {
    root.join("work").join(format!("nap-{x}")).join("child.pid").exists()
}

#[test]
fn an_interrupted_command_study_stores_what_finished_and_resumes_the_rest() {
    let root = TempRoot::new("command");
    std::fs::write(root.0.join("hold"), "").unwrap();
    let template = nap_template(&root.0);
    let plan: Vec<_> = (0..6).map(experiment).collect();
    let interrupt = Interrupt::new();
    let o = options(&root.0, &interrupt);
    let ready = || child_started(&root.0, 2) && child_started(&root.0, 3);
    let (result, took, mut sink) = interrupted_run(plan.clone(), template.clone(), o.clone(), ready, 1);

    match result {
        Err(RunError::Interrupted { stopped, stored }) => assert_eq!((stopped, stored), (2, 2)),
        other => panic!("{other:?}"),
    }
    // nap-2 got SIGTERM and could clean up; nap-3 ignores it: only the
    // SIGKILL after the grace ends it, and then its thread returns at once
    // (nothing is left to abandon).
    assert!(root.0.join("work/nap-2/got-term").exists(), "nap-2 never got SIGTERM");
    assert!(took >= KILL_GRACE, "SIGKILL came before the grace was over: {took:?}");
    assert!(took < KILL_GRACE + STOP_WAIT, "took {took:?}");
    assert_none_left(&root.0);
    let mut stored: Vec<_> = sink.experiments(1).map(|e| (e.planned.id.clone(), e.status)).collect();
    stored.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(stored, [("nap-0".to_string(), ExperimentStatus::Ok), ("nap-1".to_string(), ExperimentStatus::Ok)]);

    // Again, not held: only the missing ones run.
    std::fs::remove_file(root.0.join("hold")).unwrap();
    let lookup = move |name: &str| (name == template.name()).then(|| template.clone());
    let s = run(1, &plan, &lookup, &mut sink, &options(&root.0, &Interrupt::new())).unwrap();
    assert_eq!((s.skipped, s.ran, s.ok), (2, 4, 4), "{s:?}");
    assert_eq!(sink.experiments(1).count(), 6);
    assert!(sink.experiments(1).all(|e| e.status == ExperimentStatus::Ok));
}

#[test]
fn a_second_request_kills_at_once() {
    let root = TempRoot::new("urgent");
    std::fs::write(root.0.join("hold"), "").unwrap();
    let template = nap_template(&root.0);
    // Only the stubborn one (SIGTERM ignored) and one held one.
    let plan = vec![experiment(3), experiment(2)];
    let interrupt = Interrupt::new();
    let ready = || child_started(&root.0, 2) && child_started(&root.0, 3);
    let (result, took, sink) = interrupted_run(plan, template, options(&root.0, &interrupt), ready, 2);
    assert!(matches!(result, Err(RunError::Interrupted { stopped: 2, stored: 0 })), "{result:?}");
    assert!(took < KILL_GRACE, "asked twice, it still waited for the grace: {took:?}");
    assert_none_left(&root.0);
    assert_eq!(sink.experiments(1).count(), 0);
}

#[test]
fn an_interrupt_before_the_run_starts_runs_nothing() {
    let root = TempRoot::new("early");
    let template = nap_template(&root.0);
    let interrupt = Interrupt::new();
    interrupt.request();
    let lookup = move |name: &str| (name == template.name()).then(|| template.clone());
    let mut sink = MemorySink::default();
    let result = run(1, &[experiment(0), experiment(1)], &lookup, &mut sink, &options(&root.0, &interrupt));
    assert!(matches!(result, Err(RunError::Interrupted { stopped: 0, stored: 0 })), "{result:?}");
    assert!(result.unwrap_err().is_interrupted());
    assert_eq!(sink.experiments(1).count(), 0);
}

#[test]
fn interrupted_worker_processes_and_their_children_are_ended() {
    let root = TempRoot::new("worker");
    // The worker (a shell script, as in the runner tests) starts a child
    // and waits; SIGTERM to its group ends both.
    let script = r#"
        sleep 60 &
        echo $! > child.pid
        wait
    "#;
    let mut o = options(&root.0, &Interrupt::new());
    o.isolation = Isolation::Worker { program: "/bin/sh".into(), args: vec!["-c".into(), script.into(), "sh".into()] };
    o.worker_resolves = |_| true;
    let template = nap_template(&root.0);
    let ready = || child_started(&root.0, 0) && child_started(&root.0, 1);
    let (result, took, sink) = interrupted_run((0..4).map(experiment).collect(), template, o, ready, 1);
    assert!(matches!(result, Err(RunError::Interrupted { stopped: 2, stored: 0 })), "{result:?}");
    assert!(took < KILL_GRACE, "SIGTERM was enough: {took:?}");
    assert_none_left(&root.0);
    assert_eq!(sink.experiments(1).count(), 0, "stopped experiments are not stored as failed");
}
