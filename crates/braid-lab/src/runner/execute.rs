//! Executors: run one experiment, in process or in a worker process, and
//! turn what happened into an [`Outcome`] (status, exit code, error, the
//! tail of stderr, and the records it wrote).
//!
//! Both executors write records to `records.jsonl` in the work directory
//! and both outcomes are read back with [`parse_records`]: one ingest path.

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
use crate::template::{Context, Template, TemplateError};

/// One experiment to execute.
pub(crate) struct Job {
    pub experiment: PlannedExperiment,
    pub template: Arc<dyn Template>,
    pub work_dir: PathBuf,
    pub isolation: Isolation,
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
    /// Time spent in the template (or the worker process): the rest of the
    /// time the runner spent on the experiment is its overhead.
    pub busy: Duration,
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

/// Run `job` to its end (or its deadline) and collect its outcome.
pub(crate) fn execute(job: Job) -> Outcome {
    let started = unix_now();
    let exit = match prepare_work_dir(&job.work_dir) {
        Err(e) => (Exit::failed(None, format!("work directory {}: {e}", job.work_dir.display())), Duration::ZERO),
        Ok(()) => {
            let begun = Instant::now();
            let deadline = begun + job.experiment.timeout;
            let exit = match &job.isolation {
                Isolation::InProcess => in_process(&job, deadline),
                Isolation::Worker { program, args } => {
                    let deadline_unix = started + job.experiment.timeout.as_secs_f64();
                    in_worker(&job, program, args, deadline, deadline_unix)
                }
            };
            (exit, begun.elapsed())
        }
    };
    let (mut exit, busy) = exit;
    let ended = unix_now();
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
    let stderr_tail = tail_of_file(&job.work_dir.join(STDERR_FILE));
    Outcome {
        status: exit.status,
        exit_code: exit.exit_code,
        error: exit.error,
        stderr_tail,
        records,
        started,
        ended,
        busy,
    }
}

/// A fresh, empty work directory: what a killed earlier attempt left there
/// (records, logs) must not mix into this one.
fn prepare_work_dir(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)
}

/// Run the template on a thread of its own, so the runner can give up on
/// it at the deadline.
fn in_process(job: &Job, deadline: Instant) -> Exit {
    let (tx, rx) = mpsc::sync_channel(1);
    let template = job.template.clone();
    let experiment = job.experiment.clone();
    let work_dir = job.work_dir.clone();
    let spawned = std::thread::Builder::new().name(thread_name(&job.experiment.id)).spawn(move || {
        let result =
            panic::catch_unwind(AssertUnwindSafe(|| run_template(&*template, &experiment, &work_dir, deadline)));
        let _ = tx.send(result);
    });
    if let Err(e) = spawned {
        return Exit::failed(None, format!("cannot start a thread for it: {e}"));
    }
    let wait = deadline.saturating_duration_since(Instant::now());
    let result = match rx.recv_timeout(wait) {
        Ok(result) => result,
        Err(RecvTimeoutError::Disconnected) => return Exit::failed(None, "its thread ended without a result".into()),
        Err(RecvTimeoutError::Timeout) => match rx.recv_timeout(IN_PROCESS_GRACE) {
            // It noticed the deadline and returned: its records are flushed
            // and its own words say where it was.
            Ok(Ok(Err(e))) => return Exit::timed_out(None, e.to_string()),
            Ok(_) => {
                return Exit::timed_out(None, format!("returned after its deadline ({:?})", job.experiment.timeout))
            }
            Err(_) => {
                return Exit::timed_out(
                    None,
                    format!(
                        "still running {:?} after its deadline ({:?}); left running in the background \
                         (an in-process template must return by ctx.deadline)",
                        IN_PROCESS_GRACE, job.experiment.timeout
                    ),
                )
            }
        },
    };
    match result {
        Ok(Ok(())) => Exit::ok(None),
        Ok(Err(TemplateError::Timeout(what))) => Exit::timed_out(None, format!("deadline passed: {what}")),
        Ok(Err(e)) => Exit::failed(None, e.to_string()),
        Err(payload) => Exit::failed(None, format!("panicked: {}", panic_message(&*payload))),
    }
}

/// Run `template` with a file recorder in `work_dir`: what the in-process
/// executor and the worker both do.
pub(crate) fn run_template(
    template: &dyn Template,
    experiment: &PlannedExperiment,
    work_dir: &Path,
    deadline: Instant,
) -> Result<(), TemplateError> {
    let path = work_dir.join(RECORDS_FILE);
    let mut recorder =
        Recorder::create(&path).map_err(|e| TemplateError::io(format!("creating {}", path.display()), e))?;
    let result = {
        let mut ctx =
            Context::new(&experiment.params, experiment.seed, deadline, &mut recorder, work_dir, &experiment.id);
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

fn thread_name(id: &str) -> String {
    format!("lab-{}", id.chars().take(12).collect::<String>())
}

/// Run the experiment in `program args... SPEC`, in a process group of its
/// own, and end the whole group at the deadline.
fn in_worker(job: &Job, program: &Path, args: &[String], deadline: Instant, deadline_unix: f64) -> Exit {
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
fn reclaim_testbeds() {
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
        prepare_work_dir(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
