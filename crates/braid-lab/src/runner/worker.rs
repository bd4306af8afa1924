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
//! [`EXIT_PANICKED`]. The error goes to stderr as the last line, prefixed
//! with [`WORKER_ERROR_PREFIX`]; the runner stores it as the experiment's
//! error.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::execute::{panic_message, run_template};
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
/// process exit code. Errors go to stderr, never a panic.
pub fn run_spec(spec_path: &Path, resolve: &dyn Fn(&str) -> Option<Arc<dyn Template>>) -> i32 {
    let (spec, template) = match load(spec_path, resolve) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("{WORKER_ERROR_PREFIX}{e}");
            return EXIT_BAD_SPEC;
        }
    };
    let left = (spec.deadline_unix - unix_now()).max(0.0);
    let deadline = Instant::now() + Duration::try_from_secs_f64(left).unwrap_or(Duration::ZERO);
    let result =
        panic::catch_unwind(AssertUnwindSafe(|| run_template(&*template, &spec.experiment, &spec.work_dir, deadline)));
    match result {
        Ok(Ok(())) => EXIT_OK,
        Ok(Err(e)) => {
            eprintln!("{WORKER_ERROR_PREFIX}{e}");
            if matches!(e, TemplateError::Timeout(_)) {
                EXIT_TIMED_OUT
            } else {
                EXIT_FAILED
            }
        }
        Err(payload) => {
            eprintln!("{WORKER_ERROR_PREFIX}panicked: {}", panic_message(&*payload));
            EXIT_PANICKED
        }
    }
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
