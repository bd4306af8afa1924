//! The array task's side: run the experiments of one chunk one after
//! another and leave a result bundle for each in the shared directory.
//!
//! The CLI's `braid lab worker --slurm-task` calls [`run_task`] with the
//! chunk file [`chunk_from_env`] names (the batch script exports
//! `BRAID_LAB_CHUNKS`, Slurm sets `SLURM_ARRAY_TASK_ID`). Each experiment
//! runs the way `isolation` says: the CLI passes a worker process per
//! experiment (`braid lab worker SPEC`), so a crash or a timeout costs one
//! experiment, not the chunk, and its stderr tail is its own. An
//! experiment whose bundle exists already (a task run twice) is skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bundle::{bundle_path, ResultBundle, BUNDLE_FORMAT};
use super::layout::{chunk_path, ChunkFile, CHUNKS_ENV};
use crate::runner::execute::{execute_alone, Job, Outcome};
use crate::runner::provenance::{host_name, BRAID_VERSION, GIT_COMMIT};
use crate::runner::Isolation;
use crate::template::Template;

/// Every experiment of the chunk has its bundle.
pub const TASK_OK: i32 = 0;
/// The chunk file could not be found or read.
pub const TASK_BAD_CHUNK: i32 = 2;
/// A bundle could not be written (the experiments without one are lost
/// and the runner marks them failed).
pub const TASK_WRITE_FAILED: i32 = 3;

/// Why a task cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A variable the batch script or Slurm sets is missing or wrong.
    #[error("{name} is {problem}: this command runs as a Slurm array task of `braid lab run --executor slurm`")]
    Env {
        /// The variable.
        name: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The chunk file cannot be read.
    #[error("reading chunk {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The chunk file is not a chunk.
    #[error("chunk {} is not valid: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The chunk file of this task, from `BRAID_LAB_CHUNKS` and
/// `SLURM_ARRAY_TASK_ID`.
pub fn chunk_from_env() -> Result<PathBuf, TaskError> {
    let dir = std::env::var_os(CHUNKS_ENV).ok_or(TaskError::Env { name: CHUNKS_ENV, problem: "not set".into() })?;
    let index = std::env::var("SLURM_ARRAY_TASK_ID")
        .map_err(|_| TaskError::Env { name: "SLURM_ARRAY_TASK_ID", problem: "not set".into() })?;
    let index: u32 = index
        .trim()
        .parse()
        .map_err(|_| TaskError::Env { name: "SLURM_ARRAY_TASK_ID", problem: format!("`{index}`, not a task index") })?;
    Ok(chunk_path(Path::new(&dir), index))
}

/// Read a chunk file.
pub fn read_chunk(path: &Path) -> Result<ChunkFile, TaskError> {
    let text = std::fs::read_to_string(path).map_err(|source| TaskError::Read { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text).map_err(|e| TaskError::Parse { path: path.to_path_buf(), message: e.to_string() })
}

/// The Slurm task this process is (`JOBID_TASK`), if Slurm says.
fn this_task() -> Option<String> {
    let job = std::env::var("SLURM_ARRAY_JOB_ID").ok()?;
    let task = std::env::var("SLURM_ARRAY_TASK_ID").ok()?;
    Some(format!("{job}_{task}"))
}

/// Run every experiment of the chunk at `chunk` that has no bundle yet,
/// resolving templates with `resolve`, each the way `isolation` says, and
/// write its bundle. Returns the process exit code ([`TASK_OK`],
/// [`TASK_BAD_CHUNK`], [`TASK_WRITE_FAILED`]); errors go to stderr (the
/// task's log).
pub fn run_task(chunk: &Path, resolve: &dyn Fn(&str) -> Option<Arc<dyn Template>>, isolation: &Isolation) -> i32 {
    let file = match read_chunk(chunk) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("braid lab worker: {e}");
            return TASK_BAD_CHUNK;
        }
    };
    let host = host_name();
    let slurm_task = this_task();
    let mut code = TASK_OK;
    for experiment in file.experiments {
        if bundle_path(&file.bundle_dir, &experiment.id).exists() {
            continue;
        }
        let id = experiment.id.clone();
        let outcome = match resolve(&experiment.template) {
            None => Outcome::not_started(format!("no template named `{}` on host {host}", experiment.template)),
            Some(t) if t.version() != experiment.template_version => Outcome::not_started(format!(
                "template `{}` is version {} on host {host} but the experiment was planned with version {}: run the same braid on the nodes",
                experiment.template,
                t.version(),
                experiment.template_version
            )),
            Some(template) => execute_alone(Job {
                work_dir: file.work_root.join(&experiment.id),
                isolation: isolation.clone(),
                template,
                experiment,
            }),
        };
        let bundle = ResultBundle {
            format: BUNDLE_FORMAT,
            experiment: id.clone(),
            status: outcome.status,
            exit_code: outcome.exit_code,
            error: outcome.error,
            stderr_tail: outcome.stderr_tail,
            started: outcome.started,
            ended: outcome.ended,
            host: host.clone(),
            braid_version: BRAID_VERSION.to_string(),
            git_commit: GIT_COMMIT.to_string(),
            slurm_task: slurm_task.clone(),
            records: outcome.records,
        };
        if let Err(e) = bundle.write_atomic(&file.bundle_dir) {
            eprintln!("braid lab worker: experiment {id}: {e}");
            code = TASK_WRITE_FAILED;
        }
    }
    code
}
