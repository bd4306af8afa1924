//! The worker side of [`Isolation::Worker`](super::Isolation::Worker): a
//! child process that runs one experiment from a spec file.
//!
//! The runner writes a [`WorkerSpec`] (JSON) into the experiment's work
//! directory and starts `program args... SPEC_PATH` in a process group of
//! its own, with stdout and stderr going to files in the work directory.
//! The program (the CLI's hidden `braid lab worker SPEC`) calls
//! [`run_spec`] and exits with what it returns:
//!
//! ```no_run
//! let spec = std::env::args_os().nth(1).expect("usage: worker SPEC");
//! let code = braid_lab::runner::worker::run_spec(std::path::Path::new(&spec), &braid_lab::template::find_builtin);
//! std::process::exit(code);
//! ```
//!
//! Exit codes: [`EXIT_OK`], [`EXIT_FAILED`] (the template failed),
//! [`EXIT_BAD_SPEC`] (unreadable spec, unknown template, version
//! mismatch), [`EXIT_TIMED_OUT`] (the template gave up at its deadline),
//! [`EXIT_PANICKED`], [`EXIT_INTERRUPTED`] (asked to stop). The error goes
//! to stderr as the last line, prefixed with [`WORKER_ERROR_PREFIX`]; the
//! runner stores it as the experiment's error.
//!
//! Stopping (issue 21): an interrupted run SIGTERMs its workers and
//! SIGKILLs them [`KILL_GRACE`](super::KILL_GRACE) later. A killed worker
//! cannot tear down its emulator testbed, so the CLI's worker command
//! turns SIGTERM into a request of the [`Interrupt`] it passes to
//! [`run_spec_with`] (this library installs no signal handlers). The
//! template sees the request through its context
//! ([`Context::check_deadline`](crate::template::Context::check_deadline)
//! fails with `Interrupted`) and unwinds through its own teardown; one
//! that does not return within [`STOP_GRACE`] is left behind: the worker
//! reclaims the testbeds this process owns itself
//! ([`braid_emu::state::reclaim`]) and exits.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::execute::{panic_message, run_template};
use super::interrupt::Interrupt;
use super::provenance::unix_now;
use crate::plan::PlannedExperiment;
use crate::template::{Template, TemplateError};

/// The experiment ran and its records are written.
pub const EXIT_OK: i32 = 0;
/// The template returned an error.
pub const EXIT_FAILED: i32 = 1;
/// The spec could not be read, or names a template this worker does not
/// have (or has in another version).
pub const EXIT_BAD_SPEC: i32 = 2;
/// The template panicked.
pub const EXIT_PANICKED: i32 = 101;
/// The template stopped at its deadline (the runner stores it as timed
/// out). The same code as `timeout(1)`.
pub const EXIT_TIMED_OUT: i32 = 124;
/// The worker was asked to stop (SIGTERM from an interrupted run) and
/// stopped: 128 + SIGTERM, the shell's code for a process ended by it.
pub const EXIT_INTERRUPTED: i32 = 128 + 15;

/// How long, after a stop request, the worker waits for the template to
/// return before it tears down the testbeds itself: inside the runner's
/// 2 s [`KILL_GRACE`](super::KILL_GRACE), with room for the teardown.
pub const STOP_GRACE: Duration = Duration::from_millis(1500);

/// How often the worker looks whether it was asked to stop.
const STOP_POLL: Duration = Duration::from_millis(20);

/// The worker's error line on stderr starts with this.
pub const WORKER_ERROR_PREFIX: &str = "braid lab worker: ";

/// What a worker is told to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// The experiment, as planned.
    pub experiment: PlannedExperiment,
    /// The template's name (resolved by the worker).
    pub template: String,
    /// The experiment's work directory (exists; the worker's cwd). Records
    /// go to `records.jsonl` in it, the file `BRAID_LAB_RECORDS` names.
    pub work_dir: PathBuf,
    /// The deadline, in Unix seconds (the runner kills the worker soon
    /// after it).
    pub deadline_unix: f64,
}

/// Why a worker could not run its experiment.
#[derive(Debug, thiserror::Error)]
enum WorkerError {
    #[error("reading spec {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("spec {} is not a worker spec (line {line}, column {column}): {message}", path.display())]
    Parse { path: PathBuf, line: usize, column: usize, message: String },
    #[error("no template named `{0}` in this worker")]
    UnknownTemplate(String),
    #[error("template `{name}` is version {have} here but the experiment was planned with version {planned}: rebuild or re-plan")]
    Version { name: String, have: u32, planned: u32 },
}

/// Load the spec at `spec_path`, resolve its template with `resolve` (the
/// CLI passes [`find_builtin`](crate::template::find_builtin)), run it
/// with a recorder appending to `records.jsonl` in the spec's work
/// directory, and return the
/// process exit code. Errors go to stderr, never a panic. Nothing can
/// stop it early: see [`run_spec_with`].
pub fn run_spec(spec_path: &Path, resolve: &dyn Fn(&str) -> Option<Arc<dyn Template>>) -> i32 {
    run_spec_with(spec_path, resolve, &Interrupt::new())
}

/// [`run_spec`] that a request of `stop` ends early (the CLI requests it
/// on SIGTERM): the template is asked to stop through its context and
/// gets [`STOP_GRACE`] to return; then the testbeds this process owns are
/// torn down and [`EXIT_INTERRUPTED`] returned. The template runs on a
/// thread of its own, which is left running if it does not return: the
/// caller exits the process with the code.
pub fn run_spec_with(
    spec_path: &Path,
    resolve: &dyn Fn(&str) -> Option<Arc<dyn Template>>,
    stop: &Interrupt,
) -> i32 {
    let (spec, template) = match load(spec_path, resolve) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("{WORKER_ERROR_PREFIX}{e}");
            return EXIT_BAD_SPEC;
        }
    };
    let left = (spec.deadline_unix - unix_now()).max(0.0);
    let deadline = Instant::now() + Duration::try_from_secs_f64(left).unwrap_or(Duration::ZERO);
    let (done, result) = std::sync::mpsc::channel();
    let thread_stop = stop.clone();
    let spawned = std::thread::Builder::new().name("lab-worker".into()).spawn(move || {
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            run_template(&*template, &spec.experiment, &spec.work_dir, deadline, thread_stop)
        }));
        let _ = done.send(result);
    });
    if let Err(e) = spawned {
        eprintln!("{WORKER_ERROR_PREFIX}starting the experiment's thread: {e}");
        return EXIT_FAILED;
    }
    loop {
        match result.recv_timeout(STOP_POLL) {
            Ok(outcome) => return exit_code(outcome, stop.is_requested()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                eprintln!("{WORKER_ERROR_PREFIX}the experiment's thread ended without a result");
                return EXIT_PANICKED;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stop.is_requested() => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    match result.recv_timeout(STOP_GRACE) {
        Ok(outcome) => exit_code(outcome, true),
        Err(_) => {
            let reclaimed = reclaim_own_testbeds();
            eprintln!(
                "{WORKER_ERROR_PREFIX}interrupted: the template did not stop within {STOP_GRACE:?}; \
                 tore down {reclaimed} emulator testbed(s) it left"
            );
            EXIT_INTERRUPTED
        }
    }
}

/// The exit code for what the template's thread returned; `stopped`:
/// whether a stop was requested before it returned (its error, whatever
/// it is, is then the stop's doing).
fn exit_code(outcome: std::thread::Result<Result<(), TemplateError>>, stopped: bool) -> i32 {
    match outcome {
        Ok(Ok(())) => EXIT_OK,
        Ok(Err(e)) => {
            eprintln!("{WORKER_ERROR_PREFIX}{e}");
            match e {
                TemplateError::Interrupted(_) => EXIT_INTERRUPTED,
                _ if stopped => EXIT_INTERRUPTED,
                TemplateError::Timeout(_) => EXIT_TIMED_OUT,
                _ => EXIT_FAILED,
            }
        }
        Err(payload) => {
            eprintln!("{WORKER_ERROR_PREFIX}panicked: {}", panic_message(&*payload));
            EXIT_PANICKED
        }
    }
}

/// Tear down the emulator testbeds this process owns (their state files
/// name its pid): what a template that did not return left. Returns how
/// many were torn down.
fn reclaim_own_testbeds() -> usize {
    let Ok(dir) = std::fs::read_dir(braid_emu::state::STATE_DIR) else { return 0 };
    let own = std::process::id();
    let mut reclaimed = 0;
    for entry in dir.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(name) = file.strip_suffix(".json").filter(|n| !n.starts_with('.')) else { continue };
        if braid_emu::state::read(name).is_some_and(|state| state.pid == own) {
            match braid_emu::state::reclaim(name) {
                Ok(()) => reclaimed += 1,
                Err(e) => eprintln!("{WORKER_ERROR_PREFIX}tearing down testbed {name}: {e}"),
            }
        }
    }
    reclaimed
}

fn load(
    spec_path: &Path,
    resolve: &dyn Fn(&str) -> Option<Arc<dyn Template>>,
) -> Result<(WorkerSpec, Arc<dyn Template>), WorkerError> {
    let text = std::fs::read_to_string(spec_path)
        .map_err(|source| WorkerError::Read { path: spec_path.to_path_buf(), source })?;
    let spec: WorkerSpec = serde_json::from_str(&text).map_err(|e| WorkerError::Parse {
        path: spec_path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let template = resolve(&spec.template).ok_or_else(|| WorkerError::UnknownTemplate(spec.template.clone()))?;
    if template.version() != spec.experiment.template_version {
        return Err(WorkerError::Version {
            name: spec.template.clone(),
            have: template.version(),
            planned: spec.experiment.template_version,
        });
    }
    Ok((spec, template))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::{ParamDecl, Params};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Waits for a minute: polling `check_deadline` and marking its
    /// teardown when it unwinds (`polite`), or ignoring the stop.
    struct Wait {
        polite: bool,
        tore_down: Arc<AtomicBool>,
    }

    impl Template for Wait {
        fn name(&self) -> &str {
            "wait"
        }
        fn description(&self) -> &str {
            "waits"
        }
        fn params(&self) -> Vec<ParamDecl> {
            Vec::new()
        }
        fn run(&self, ctx: &mut crate::template::Context<'_>) -> Result<(), TemplateError> {
            let began = Instant::now();
            let result = loop {
                if began.elapsed() > Duration::from_secs(60) {
                    break Ok(());
                }
                if self.polite {
                    if let Err(e) = ctx.check_deadline("waiting") {
                        break Err(e);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            self.tore_down.store(true, Ordering::SeqCst);
            result
        }
    }

    fn write_spec(test: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("braid-lab-worker-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = WorkerSpec {
            experiment: PlannedExperiment {
                id: "0123456789abcdef".into(),
                template: "wait".into(),
                template_version: 1,
                params: Params::default(),
                repetition: 0,
                seed: 1,
                timeout: Duration::from_secs(120),
                exclusive: false,
                expected: Duration::from_secs(1),
            },
            template: "wait".into(),
            work_dir: dir.clone(),
            deadline_unix: unix_now() + 120.0,
        };
        let path = dir.join("spec.json");
        std::fs::write(&path, serde_json::to_string(&spec).unwrap()).unwrap();
        (dir, path)
    }

    /// Runs the spec, requests a stop `after`, and returns the exit code
    /// and how long after the request it came.
    fn stopped_after(test: &str, polite: bool, tore_down: &Arc<AtomicBool>, after: Duration) -> (i32, Duration) {
        let (dir, spec) = write_spec(test);
        let template: Arc<dyn Template> = Arc::new(Wait { polite, tore_down: tore_down.clone() });
        let stop = Interrupt::new();
        let requester = stop.clone();
        let requested = Arc::new(std::sync::Mutex::new(None));
        let at = requested.clone();
        let signaller = std::thread::spawn(move || {
            std::thread::sleep(after);
            *at.lock().unwrap() = Some(Instant::now());
            requester.request();
        });
        let code = run_spec_with(&spec, &|name| (name == "wait").then(|| template.clone()), &stop);
        let ended = Instant::now();
        signaller.join().unwrap();
        let requested = requested.lock().unwrap().expect("the stop was requested before the worker returned");
        let _ = std::fs::remove_dir_all(&dir);
        (code, ended.duration_since(requested))
    }

    #[test]
    fn a_stop_request_unwinds_a_polling_template_and_exits_interrupted() {
        let tore_down = Arc::new(AtomicBool::new(false));
        let (code, took) = stopped_after("polite", true, &tore_down, Duration::from_millis(100));
        assert_eq!(code, EXIT_INTERRUPTED);
        assert!(tore_down.load(Ordering::SeqCst), "the template did not unwind through its teardown");
        assert!(took < STOP_GRACE, "stopping took {took:?}");
    }

    #[test]
    fn a_template_that_ignores_the_stop_is_left_after_the_grace() {
        let tore_down = Arc::new(AtomicBool::new(false));
        let (code, took) = stopped_after("stubborn", false, &tore_down, Duration::from_millis(100));
        assert_eq!(code, EXIT_INTERRUPTED);
        assert!(!tore_down.load(Ordering::SeqCst), "it ignores the stop");
        assert!(took >= STOP_GRACE && took < crate::runner::KILL_GRACE, "stopping took {took:?}");
    }

    #[test]
    fn without_a_stop_a_template_error_keeps_its_exit_code() {
        let failed = || Ok(Err(TemplateError::Failed("x".into())));
        assert_eq!(exit_code(failed(), false), EXIT_FAILED);
        assert_eq!(exit_code(failed(), true), EXIT_INTERRUPTED);
        assert_eq!(exit_code(Ok(Err(TemplateError::Timeout("x".into()))), false), EXIT_TIMED_OUT);
        assert_eq!(exit_code(Ok(Err(TemplateError::Interrupted("x".into()))), false), EXIT_INTERRUPTED);
        assert_eq!(exit_code(Ok(Ok(())), true), EXIT_OK);
    }
}
