//! Executors: run one experiment, in process or in a worker process, and
//! turn what happened into an [`Outcome`] (status, exit code, error, the
//! tail of stderr, and the records it made).
//!
//! In process, the template runs on the calling thread (a thread of the
//! runner's [pool](super::pool), which also watches its deadline) and
//! records into memory: its records go straight into the outcome, with no
//! file written and parsed back, and its work directory is made only if
//! it asks for one ([`Context::work_dir`]). A command template's program
//! still appends to `records.jsonl` in that directory, and the template
//! hands those records to the recorder once the program ended. A worker
//! process writes `records.jsonl` too (a process of its own can only
//! report through a file), and the runner parses it with
//! [`parse_records`] when the worker exits. Either way an experiment
//! counts as done only once its outcome is in the store: records in
//! memory lost to a crash of the runner are made again by resuming.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::logs::{tail_of_file, RECORDS_FILE, SPEC_FILE, STDERR_FILE, STDOUT_FILE};
use super::provenance::unix_now;
use super::store_api::ExperimentStatus;
use super::worker::{WorkerSpec, EXIT_TIMED_OUT, WORKER_ERROR_PREFIX};
use super::{Isolation, IN_PROCESS_GRACE, KILL_GRACE};
use crate::plan::PlannedExperiment;
use crate::record::{parse_records, Record, Recorder, RECORDS_ENV};
use crate::template::{fresh_dir, Context, Template, TemplateError};

/// One experiment to execute.
pub(crate) struct Job {
    pub experiment: PlannedExperiment,
    pub template: Arc<dyn Template>,
    pub work_dir: PathBuf,
    pub isolation: Isolation,
}

impl Job {
    /// When a supervisor gives up on the experiment if it has not
    /// returned, for one that began at `began`: in process, its deadline
    /// plus [`IN_PROCESS_GRACE`] (a thread cannot be killed); never for a
    /// worker, whose executor ends the process at the deadline itself.
    pub fn give_up_at(&self, began: Instant) -> Option<Instant> {
        match self.isolation {
            Isolation::InProcess => Some(began + self.experiment.timeout + IN_PROCESS_GRACE),
            Isolation::Worker { .. } => None,
        }
    }
}

/// What became of it.
pub(crate) struct Outcome {
    pub status: ExperimentStatus,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub stderr_tail: String,
    pub records: Vec<Record>,
    /// Unix seconds.
    pub started: f64,
    pub ended: f64,
    /// When it began (the runner's overhead is counted from here).
    pub began: Instant,
    /// Time spent in the template (or the worker process): the rest of the
    /// time the runner spent on the experiment is its overhead.
    pub busy: Duration,
    /// Whether its work directory exists (to be removed once stored).
    pub work_dir_made: bool,
}

impl Outcome {
    /// An experiment that never ran: `error` says why.
    pub fn not_started(error: String) -> Outcome {
        let now = unix_now();
        Outcome {
            status: ExperimentStatus::Failed,
            exit_code: None,
            error: Some(error),
            stderr_tail: String::new(),
            records: Vec::new(),
            started: now,
            ended: now,
            began: Instant::now(),
            busy: Duration::ZERO,
            work_dir_made: false,
        }
    }

    /// An in-process experiment still running [`IN_PROCESS_GRACE`] after
    /// its deadline: the runner stops waiting for it. Its records are in
    /// the recorder of the thread it still holds, so none are kept; the
    /// tail of a stderr log in its work directory is.
    pub fn abandoned(started: f64, began: Instant, timeout: Duration, work_dir: &Path) -> Outcome {
        Outcome {
            status: ExperimentStatus::TimedOut,
            exit_code: None,
            error: Some(format!(
                "still running {IN_PROCESS_GRACE:?} after its deadline ({timeout:?}); left running in the \
                 background (an in-process template must return by ctx.deadline)"
            )),
            stderr_tail: tail_of_file(&work_dir.join(STDERR_FILE)),
            records: Vec::new(),
            started,
            ended: unix_now(),
            began,
            busy: began.elapsed(),
            work_dir_made: work_dir.exists(),
        }
    }
}

/// How an executor ended.
struct Exit {
    status: ExperimentStatus,
    exit_code: Option<i32>,
    error: Option<String>,
}

impl Exit {
    fn ok(exit_code: Option<i32>) -> Exit {
        Exit { status: ExperimentStatus::Ok, exit_code, error: None }
    }
    fn failed(exit_code: Option<i32>, error: String) -> Exit {
        Exit { status: ExperimentStatus::Failed, exit_code, error: Some(error) }
    }
    fn timed_out(exit_code: Option<i32>, error: String) -> Exit {
        Exit { status: ExperimentStatus::TimedOut, exit_code, error: Some(error) }
    }
}

/// Run `job` on this thread to its end and collect its outcome. In
/// process nothing here stops a template that ignores its deadline: the
/// caller watches [`Job::give_up_at`] (the pool does, and so does
/// [`execute_alone`]).
pub(crate) fn execute(job: &Job) -> Outcome {
    match &job.isolation {
        Isolation::InProcess => in_process(job),
        Isolation::Worker { program, args } => in_worker(job, program, args),
    }
}

/// [`execute`] on a thread of its own, waiting for it until
/// [`Job::give_up_at`]: one experiment without a pool (`braid lab rerun`).
pub(crate) fn execute_alone(job: Job) -> Outcome {
    let started = unix_now();
    let began = Instant::now();
    let Some(give_up_at) = job.give_up_at(began) else {
        return execute(&job);
    };
    let (timeout, work_dir) = (job.experiment.timeout, job.work_dir.clone());
    let (tx, rx) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new().name(thread_name(&job.experiment.id)).spawn(move || {
        let _ = tx.send(execute(&job));
    });
    if let Err(e) = spawned {
        return Outcome::not_started(format!("cannot start a thread for it: {e}"));
    }
    match rx.recv_timeout(give_up_at.saturating_duration_since(Instant::now())) {
        Ok(outcome) => outcome,
        Err(RecvTimeoutError::Disconnected) => Outcome::not_started("its thread ended without a result".into()),
        Err(RecvTimeoutError::Timeout) => Outcome::abandoned(started, began, timeout, &work_dir),
    }
}

/// Run the template right here, recording into memory, with its work
/// directory made on demand.
fn in_process(job: &Job) -> Outcome {
    let experiment = &job.experiment;
    let started = unix_now();
    let began = Instant::now();
    let deadline = began + experiment.timeout;
    let mut recorder = Recorder::in_memory();
    let (result, work_dir_made) = {
        let mut ctx =
            Context::new(&experiment.params, experiment.seed, deadline, &mut recorder, &job.work_dir, &experiment.id)
                .with_work_dir_on_demand();
        let result = panic::catch_unwind(AssertUnwindSafe(|| job.template.run(&mut ctx)));
        (result, ctx.work_dir_made())
    };
    let returned = Instant::now();
    let exit = in_process_exit(result, returned > deadline, experiment.timeout);
    Outcome {
        status: exit.status,
        exit_code: exit.exit_code,
        error: exit.error,
        // A template that runs programs may send their stderr to the log
        // in its work directory: its tail is kept the same way.
        stderr_tail: if work_dir_made { tail_of_file(&job.work_dir.join(STDERR_FILE)) } else { String::new() },
        records: recorder.take(),
        started,
        ended: unix_now(),
        began,
        busy: returned - began,
        work_dir_made,
    }
}

/// The exit of an in-process template from what `run` returned and
/// whether it returned `late` (after its deadline).
fn in_process_exit(result: std::thread::Result<Result<(), TemplateError>>, late: bool, timeout: Duration) -> Exit {
    match result {
        Ok(Ok(())) if late => Exit::timed_out(None, format!("returned after its deadline ({timeout:?})")),
        Ok(Ok(())) => Exit::ok(None),
        // Late or not, a template that gave up at its deadline says where
        // it was in its own words.
        Ok(Err(e @ TemplateError::Timeout(_))) => Exit::timed_out(None, e.to_string()),
        Ok(Err(e)) if late => Exit::timed_out(None, e.to_string()),
        Ok(Err(e)) => Exit::failed(None, e.to_string()),
        Err(payload) if late => {
            Exit::timed_out(None, format!("panicked after its deadline ({timeout:?}): {}", panic_message(&*payload)))
        }
        Err(payload) => Exit::failed(None, format!("panicked: {}", panic_message(&*payload))),
    }
}

/// Run `template` with a file recorder appending to `records.jsonl` in
/// `work_dir` (which exists), in a context that `stop` ends early: what a
/// worker process does.
pub(crate) fn run_template(
    template: &dyn Template,
    experiment: &PlannedExperiment,
    work_dir: &Path,
    deadline: Instant,
    stop: crate::runner::Interrupt,
) -> Result<(), TemplateError> {
    let path = work_dir.join(RECORDS_FILE);
    let mut recorder =
        Recorder::create(&path).map_err(|e| TemplateError::io(format!("creating {}", path.display()), e))?;
    let result = {
        let mut ctx = Context::new(&experiment.params, experiment.seed, deadline, &mut recorder, work_dir, &experiment.id)
            .with_stop(stop);
        template.run(&mut ctx)
    };
    let flushed = recorder.flush().map_err(|e| TemplateError::io(format!("writing {}", path.display()), e));
    result.and(flushed)
}

/// A panic's message (`panic!` payloads are `&str` or `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

pub(crate) fn thread_name(id: &str) -> String {
    format!("lab-{}", id.chars().take(12).collect::<String>())
}

/// Run the job in a worker process (see [`run_worker`]) in a fresh work
/// directory, and read back the records file it wrote.
fn in_worker(job: &Job, program: &Path, args: &[String]) -> Outcome {
    let started = unix_now();
    let began = Instant::now();
    let (mut exit, work_dir_made) = match fresh_dir(&job.work_dir) {
        Err(e) => (Exit::failed(None, format!("work directory {}: {e}", job.work_dir.display())), false),
        Ok(()) => {
            let deadline_unix = started + job.experiment.timeout.as_secs_f64();
            (run_worker(job, program, args, began + job.experiment.timeout, deadline_unix), true)
        }
    };
    let busy = began.elapsed();
    let records = match std::fs::read_to_string(job.work_dir.join(RECORDS_FILE)) {
        Ok(text) => parse_records(&text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            if matches!(exit.status, ExperimentStatus::Ok) {
                exit = Exit::failed(exit.exit_code, format!("reading its records: {e}"));
            }
            Vec::new()
        }
    };
    Outcome {
        status: exit.status,
        exit_code: exit.exit_code,
        error: exit.error,
        stderr_tail: tail_of_file(&job.work_dir.join(STDERR_FILE)),
        records,
        started,
        ended: unix_now(),
        began,
        busy,
        work_dir_made,
    }
}

/// Run the experiment in `program args... SPEC`, in a process group of its
/// own, and end the whole group at the deadline.
fn run_worker(job: &Job, program: &Path, args: &[String], deadline: Instant, deadline_unix: f64) -> Exit {
    let records = job.work_dir.join(RECORDS_FILE);
    let spec = WorkerSpec {
        experiment: job.experiment.clone(),
        template: job.template.name().to_string(),
        work_dir: job.work_dir.clone(),
        deadline_unix,
    };
    let spec_path = job.work_dir.join(SPEC_FILE);
    let written =
        serde_json::to_vec_pretty(&spec).map_err(io::Error::other).and_then(|bytes| std::fs::write(&spec_path, bytes));
    if let Err(e) = written {
        return Exit::failed(None, format!("writing the worker spec {}: {e}", spec_path.display()));
    }
    let child = spawn_worker(program, args, &spec_path, &job.work_dir, &records);
    let child = match child {
        Ok(c) => c,
        Err(e) => return Exit::failed(None, format!("cannot start worker {}: {e}", program.display())),
    };
    let mut child = child;
    let pgid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::sync_channel(1);
    // A thread waits for the exit, so the deadline is a plain receive
    // timeout: no polling, and the exit is seen the moment it happens. It
    // does not reap the worker: while the zombie exists its pid, and so the
    // group id, cannot be reused, so signals to the group reach no stranger.
    let waiter =
        std::thread::Builder::new().name(format!("{}-wait", thread_name(&job.experiment.id))).spawn(move || {
            wait_exited_unreaped(pgid);
            let _ = tx.send(());
        });
    if let Err(e) = waiter {
        kill_group(pgid, libc::SIGKILL);
        let _ = child.wait();
        return Exit::failed(None, format!("cannot start a thread to wait for the worker: {e}"));
    }
    let timed_out = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => false,
        Err(RecvTimeoutError::Timeout) => {
            kill_group(pgid, libc::SIGTERM);
            if rx.recv_timeout(KILL_GRACE).is_err() {
                kill_group(pgid, libc::SIGKILL);
                // SIGKILL cannot be ignored; bounded anyway, in case the
                // process is stuck in the kernel.
                let _ = rx.recv_timeout(Duration::from_secs(10));
            }
            true
        }
    };
    // The worker is gone (or must go): whatever it left running in its
    // group is no part of any experiment any more.
    kill_group(pgid, libc::SIGKILL);
    let status = child.wait();
    if timed_out {
        // Emulator testbeds the killed worker owned cannot tear themselves
        // down.
        reclaim_testbeds();
        let code = status.ok().and_then(|s| s.code());
        let tail = tail_of_file(&job.work_dir.join(STDERR_FILE));
        let said = worker_error(&tail).map(|e| format!(" (it last said: {e})")).unwrap_or_default();
        return Exit::timed_out(code, format!("killed at its deadline ({:?}){said}", job.experiment.timeout));
    }
    match status {
        Err(e) => Exit::failed(None, format!("waiting for the worker: {e}")),
        Ok(status) => worker_exit(status, &job.work_dir),
    }
}

/// Block until `pid` has exited, leaving it unreaped (for `Child::wait`).
fn wait_exited_unreaped(pid: libc::pid_t) {
    loop {
        // SAFETY: waitid writes only the siginfo_t passed, which lives on
        // this stack frame; WNOWAIT leaves the child to be reaped later.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Status, exit code and error from how the worker exited.
fn worker_exit(status: ExitStatus, work_dir: &Path) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    if status.success() {
        return Exit::ok(Some(0));
    }
    let tail = tail_of_file(&work_dir.join(STDERR_FILE));
    let code = status.code();
    let why = match (code, status.signal()) {
        (Some(c), _) => format!("worker exited with status {c}"),
        (None, Some(sig)) => {
            // It died without tearing down what it built.
            reclaim_testbeds();
            format!("worker killed by signal {sig}")
        }
        (None, None) => format!("worker ended: {status}"),
    };
    let error = match (worker_error(&tail), tail.lines().rev().find(|l| !l.trim().is_empty())) {
        (Some(said), _) => said.to_string(),
        (None, Some(last)) => format!("{why}: {}", last.trim()),
        (None, None) => why,
    };
    if code == Some(EXIT_TIMED_OUT) {
        Exit::timed_out(code, error)
    } else {
        Exit::failed(code, error)
    }
}

/// The error [`run_spec`](super::worker::run_spec) reported, if it did.
fn worker_error(stderr_tail: &str) -> Option<&str> {
    stderr_tail.lines().rev().find_map(|l| l.strip_prefix(WORKER_ERROR_PREFIX))
}

fn spawn_worker(
    program: &Path,
    args: &[String],
    spec: &Path,
    work_dir: &Path,
    records: &Path,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let stdout = std::fs::File::create(work_dir.join(STDOUT_FILE))?;
    let stderr = std::fs::File::create(work_dir.join(STDERR_FILE))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg(spec)
        .current_dir(work_dir)
        .env(RECORDS_ENV, records)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let runner = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls (prctl,
    // getppid) and no allocation.
    unsafe {
        cmd.pre_exec(move || {
            // If the runner dies (kill -9), so does the worker, instead of
            // running on unsupervised beside the next runner's attempt.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != runner {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Signal every process of group `pgid` (gone already: nothing to do).
fn kill_group(pgid: libc::pid_t, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: killpg has no memory effects; a group that no longer
        // exists gives ESRCH, which is fine.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Tear down emulator testbeds whose owner died (a killed worker cannot
/// tear down its own).
pub(crate) fn reclaim_testbeds() {
    let reclaimed = braid_emu::state::reclaim_dead();
    if !reclaimed.is_empty() {
        tracing::info!(testbeds = ?reclaimed, "reclaimed emulator testbeds of killed experiments");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_found() {
        let p = panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(panic_message(&*p), "boom 7");
        let p = panic::catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(panic_message(&*p), "static");
        let p = panic::catch_unwind(|| std::panic::panic_any(3u8)).unwrap_err();
        assert!(panic_message(&*p).contains("without a message"));
    }

    #[test]
    fn in_process_results_map_to_statuses() {
        let t = Duration::from_secs(1);
        let exit = |r: std::thread::Result<Result<(), TemplateError>>, late| {
            let e = in_process_exit(r, late, t);
            (e.status, e.error.unwrap_or_default())
        };
        assert_eq!(exit(Ok(Ok(())), false), (ExperimentStatus::Ok, String::new()));
        let (s, e) = exit(Ok(Ok(())), true);
        assert_eq!(s, ExperimentStatus::TimedOut);
        assert!(e.contains("returned after its deadline"), "{e}");
        let (s, e) = exit(Ok(Err(TemplateError::Timeout("waiting".into()))), false);
        assert_eq!((s, e.as_str()), (ExperimentStatus::TimedOut, "deadline passed: waiting"));
        let (s, e) = exit(Ok(Err(TemplateError::Failed("broke".into()))), false);
        assert_eq!((s, e.as_str()), (ExperimentStatus::Failed, "broke"));
        let (s, e) = exit(Ok(Err(TemplateError::Failed("broke".into()))), true);
        assert_eq!((s, e.as_str()), (ExperimentStatus::TimedOut, "broke"));
        let payload = panic::catch_unwind(|| panic!("boom")).unwrap_err();
        assert_eq!(exit(Err(payload), false), (ExperimentStatus::Failed, "panicked: boom".to_string()));
        let payload = panic::catch_unwind(|| panic!("boom")).unwrap_err();
        let (s, e) = exit(Err(payload), true);
        assert_eq!(s, ExperimentStatus::TimedOut);
        assert!(e.contains("boom"), "{e}");
    }

    #[test]
    fn the_worker_error_line_is_preferred() {
        let tail = format!("noise\n{WORKER_ERROR_PREFIX}invalid parameters: x < 0\nmore noise");
        assert_eq!(worker_error(&tail), Some("invalid parameters: x < 0"));
        assert_eq!(worker_error("plain\nlines"), None);
    }

    #[test]
    fn stale_work_dirs_are_emptied() {
        let dir = std::env::temp_dir().join(format!("braid-lab-prep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(RECORDS_FILE), "{\"metric\":\"old\",\"value\":1}\n").unwrap();
        fresh_dir(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
