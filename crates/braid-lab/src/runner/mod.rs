//! The runner: runs a study's planned experiments and stores what they
//! produce. It is the single writer of the store; executors only produce
//! records and exit states.
//!
//! [`run`] takes the plan (in its order), a way to find each experiment's
//! template, a [`ResultSink`] (the store) and [`RunOptions`]:
//! - it skips what the sink already holds: experiments stored ok, and
//!   failed or timed-out ones unless `retry_failed` (their rows are then
//!   deleted first, so nothing is ever stored twice); running a study again
//!   after any interruption runs only what is missing;
//! - it runs up to `jobs` experiments at once on a pool of `jobs` threads,
//!   in the plan's order; an `exclusive` experiment runs alone (the runner
//!   waits for the running ones, runs it, then goes on);
//! - it stores finished experiments in batches, one
//!   [`ResultSink::insert_experiments`] (one store transaction) each, as
//!   the sink's [`Batching`] asks: the store groups up to 512 experiments
//!   finishing within 5 ms into one commit. An experiment is
//!   done only once stored: a `kill -9` loses the experiments not stored
//!   yet, and resuming runs them again (never storing one twice);
//! - in process, a template records into memory and its records go to
//!   the store as they are; a worker process (and a command template's
//!   program) appends them to a records file the runner reads back;
//! - each experiment has a private work directory `<work_root>/<id>/`,
//!   made fresh when a template asks for it (always for a worker and a
//!   command template: logs, records file), removed off the scheduler's
//!   path once its results are stored (kept when it failed, for its logs,
//!   or with `keep_work_dirs`);
//! - a failed, panicking or timed-out experiment is stored with its status,
//!   exit code, error and the tail of its stderr, and the study goes on;
//! - every stored experiment carries its start and end time, the host, the
//!   Braid version and the git commit the lab was built at;
//! - an [`Interrupt`] in [`RunOptions::interrupt`] stops the run from
//!   outside (the CLI requests it on SIGINT and SIGTERM): the running
//!   experiments are ended with everything they started and are not
//!   stored, and the run returns [`RunError::Interrupted`] (see
//!   [`interrupt`]).
//!
//! Where an experiment runs ([`Isolation`]): in process, or in a worker
//! process (`braid lab worker SPEC`, see [`worker`]) that the runner can
//! kill with everything it started. Only templates the worker can resolve
//! by name (the built-ins) go to a worker; command templates spawn their
//! own program and always run in process.
//!
//! Which machines run them ([`Executor`]): this one (the pool above), or a
//! Slurm cluster ([`slurm`]): chunks of experiments as job arrays, one
//! result bundle per experiment in a shared directory, ingested by the
//! runner, which stays the single writer of the store; resuming adopts
//! the arrays still queued or running.
//!
//! [`rerun`] runs one experiment again, with the same seed and parameters,
//! without storing it (`braid lab rerun ID`).
//!
//! ```
//! use braid_lab::param::{ParamDecl, ParamType, Params, Value};
//! use braid_lab::plan::PlannedExperiment;
//! use braid_lab::runner::{run, MemorySink, RunOptions};
//! use braid_lab::template::{Context, Template, TemplateError};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! struct Square;
//! impl Template for Square {
//!     fn name(&self) -> &str { "square" }
//!     fn description(&self) -> &str { "x squared" }
//!     fn params(&self) -> Vec<ParamDecl> {
//!         vec![ParamDecl::config("x", ParamType::float(), Value::Float(1.0))]
//!     }
//!     fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
//!         let x = ctx.params.float("x")?;
//!         ctx.record("square", x * x);
//!         Ok(())
//!     }
//! }
//!
//! let plan: Vec<PlannedExperiment> = (0..4)
//!     .map(|i| {
//!         let mut params = Params::default();
//!         params.insert("x", Value::Float(i as f64));
//!         PlannedExperiment {
//!             id: format!("{i:016x}"),
//!             template: "square".into(),
//!             template_version: 1,
//!             params,
//!             repetition: 0,
//!             seed: i,
//!             timeout: Duration::from_secs(10),
//!             exclusive: false,
//!             expected: Duration::from_millis(1),
//!         }
//!     })
//!     .collect();
//! let square: Arc<dyn Template> = Arc::new(Square);
//! let templates = move |name: &str| (name == "square").then(|| square.clone());
//! let root = std::env::temp_dir().join(format!("runner-doc-{}", std::process::id()));
//! let mut options = RunOptions::new(&root);
//! options.show_progress = false;
//! let mut sink = MemorySink::default();
//!
//! let summary = run(1, &plan, &templates, &mut sink, &options).unwrap();
//! assert_eq!((summary.ran, summary.ok), (4, 4));
//! // Running again finds everything stored.
//! let again = run(1, &plan, &templates, &mut sink, &options).unwrap();
//! assert_eq!((again.skipped, again.ran), (4, 0));
//! # std::fs::remove_dir_all(&root).unwrap();
//! ```

mod execute;
pub mod interrupt;
mod local;
pub mod logs;
mod orphans;
mod pending;
mod pool;
mod progress;
pub mod provenance;
mod sink;
pub mod slurm;
mod summary;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::plan::PlannedExperiment;
use crate::record::Record;
use crate::template::Template;

pub use self::interrupt::Interrupt;
pub use self::sink::{Batching, MemorySink, MemorySinkError, ResultSink};
use self::store_api::ExperimentStatus;
pub use self::summary::{OverheadStats, RunSummary};

/// The store's types the runner produces. (One place to name them, so the
/// runner's dependency on the store stays this narrow.)
pub(crate) mod store_api {
    pub use crate::store::{ExperimentStatus, FinishedExperiment};
}

/// Finds the template an experiment names (the study resolves it).
pub type TemplateLookup<'a> = dyn Fn(&str) -> Option<Arc<dyn Template>> + 'a;

/// Where experiments run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Isolation {
    /// On a thread of the runner, recording into memory. A panic fails the
    /// experiment with its message. At the deadline (after
    /// [`IN_PROCESS_GRACE`] to let it return) the experiment is stored as
    /// timed out, without records, and the runner moves on with a new
    /// thread, but a thread cannot be killed: an in-process template must
    /// honour `ctx.deadline`, or it keeps running (and holding what it
    /// holds) in the background.
    #[default]
    InProcess,
    /// In a child process: `program args... SPEC_PATH`, in its own process
    /// group, stdout and stderr to files in the work directory. The child
    /// calls [`worker::run_spec`] (the CLI's hidden `braid lab worker SPEC`).
    /// At the deadline the runner sends SIGTERM to the group, SIGKILL after
    /// [`KILL_GRACE`], and reclaims emulator testbeds whose owner died.
    Worker {
        /// The worker program (usually the `braid` binary itself).
        program: PathBuf,
        /// Its arguments before the spec path (`["lab", "worker"]`).
        args: Vec<String>,
    },
}

/// Which executor runs the experiments.
#[derive(Debug, Clone, Default)]
pub enum Executor {
    /// On this machine: a pool of `jobs` threads, each experiment in
    /// process or in a worker process ([`Isolation`]).
    #[default]
    Local,
    /// As Slurm job arrays on a cluster ([`slurm`]); `jobs` and
    /// `isolation` do not apply (each task runs its experiments in worker
    /// processes of its own).
    Slurm(Box<slurm::SlurmOptions>),
}

/// How long a timed-out worker gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long past its deadline an in-process template gets to return before
/// the runner gives up on it. Longer than [`KILL_GRACE`]: a command
/// template ends its own program with SIGTERM, then SIGKILL 2 s later, and
/// should be able to report that itself.
pub const IN_PROCESS_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How to run a study.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Experiments at once (at least 1; default: the number of cores).
    pub jobs: usize,
    /// Run again the experiments stored as failed or timed out.
    pub retry_failed: bool,
    /// Where experiments run.
    pub isolation: Isolation,
    /// Which templates go to the worker under [`Isolation::Worker`]: those
    /// the worker program can resolve by name. Default: the built-ins
    /// (what `braid lab worker` resolves); every other template (command
    /// templates, templates defined by the caller) runs in process.
    pub worker_resolves: fn(&str) -> bool,
    /// Draw a progress bar on stderr (only if stderr is a terminal).
    pub show_progress: bool,
    /// Experiments' work directories go under this directory.
    pub work_root: PathBuf,
    /// Keep the work directories of experiments that succeeded too.
    pub keep_work_dirs: bool,
    /// Where experiments run: this machine (default) or a Slurm cluster.
    pub executor: Executor,
    /// Requested to stop the run ([`interrupt`]): the running experiments
    /// are ended and not stored, and the run returns
    /// [`RunError::Interrupted`] (Slurm: [`slurm::SlurmError::Interrupted`],
    /// the arrays keep running). `None`: nothing can stop it but the end.
    pub interrupt: Option<Interrupt>,
}

impl RunOptions {
    /// Defaults: one job per core, in process, progress shown, work
    /// directories under `work_root` (see [`default_work_root`]).
    pub fn new(work_root: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            jobs: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            retry_failed: false,
            isolation: Isolation::InProcess,
            worker_resolves: is_builtin,
            show_progress: true,
            work_root: work_root.into(),
            keep_work_dirs: false,
            executor: Executor::Local,
            interrupt: None,
        }
    }

    /// Where experiments of `template` run under these options.
    pub(crate) fn isolation_for(&self, template: &str) -> Isolation {
        match &self.isolation {
            Isolation::Worker { .. } if (self.worker_resolves)(template) => self.isolation.clone(),
            _ => Isolation::InProcess,
        }
    }
}

fn is_builtin(name: &str) -> bool {
    crate::template::find_builtin(name).is_some()
}

/// The default work root for a database: `<db>.runs` beside it
/// (`lab.db` → `lab.db.runs/`).
pub fn default_work_root(db: &Path) -> PathBuf {
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "lab".into());
    name.push(".runs");
    db.with_file_name(name)
}

/// Why a run could not go on. (A failing experiment is not an error: it is
/// stored as failed.)
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `jobs` was 0.
    #[error("jobs must be at least 1 (got 0)")]
    NoJobs,
    /// An experiment names a template the lookup does not know.
    #[error("experiment {experiment}: no template named `{template}`")]
    UnknownTemplate {
        /// The experiment's id.
        experiment: String,
        /// The template it names.
        template: String,
    },
    /// The work root cannot be created.
    #[error("work directory root {}: {source}", path.display())]
    WorkRoot {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The sink (the store) failed. Experiments already stored stay stored;
    /// running the study again resumes.
    #[error("store: {doing}: {source}")]
    Sink {
        /// What the runner was doing.
        doing: String,
        /// The sink's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The Slurm executor could not go on (submitting, the shared
    /// directory, `squeue`). Stored experiments stay stored and submitted
    /// arrays keep running: running the study again adopts them.
    #[error("slurm: {0}")]
    Slurm(#[from] slurm::SlurmError),
    /// [`RunOptions::interrupt`] was requested: the experiments that were
    /// running were ended and not stored; those that finished before are.
    /// Running the study again runs what is missing.
    #[error("interrupted: stopped {stopped} running experiments (not stored), {stored} stored; run again to resume")]
    Interrupted {
        /// Experiments that were running and were ended.
        stopped: usize,
        /// Experiments this run stored (ok, failed or timed out).
        stored: usize,
    },
}

impl RunError {
    /// Whether the run stopped because [`RunOptions::interrupt`] was
    /// requested (on either executor).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, RunError::Interrupted { .. } | RunError::Slurm(slurm::SlurmError::Interrupted))
    }
}

/// Run the experiments of `plan` that `sink` does not hold yet for study
/// `study_id`, store them as they finish (in the batches the sink's
/// [`Batching`] asks for), and say what happened. See the [module documentation](self).
pub fn run<S: ResultSink + ?Sized>(
    study_id: i64,
    plan: &[PlannedExperiment],
    templates: &TemplateLookup<'_>,
    sink: &mut S,
    options: &RunOptions,
) -> Result<RunSummary, RunError> {
    match &options.executor {
        Executor::Local => local::run(study_id, plan, templates, sink, options),
        Executor::Slurm(slurm) => slurm::run(study_id, plan, sink, options, slurm),
    }
}

/// Why a [`rerun`] produced no records.
#[derive(Debug, thiserror::Error)]
pub enum RerunError {
    /// The work directory cannot be created.
    #[error("work directory root {}: {source}", path.display())]
    WorkRoot {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The experiment failed or timed out again.
    #[error("experiment {experiment} {}: {error}{}", status_word(status), tail_suffix(stderr_tail))]
    Failed {
        /// The experiment's id.
        experiment: String,
        /// Failed or timed out.
        status: ExperimentStatus,
        /// The worker's exit code, if it exited.
        exit_code: Option<i32>,
        /// What went wrong.
        error: String,
        /// The end of its stderr.
        stderr_tail: String,
        /// Its work directory (kept, with its logs).
        work_dir: PathBuf,
    },
}

fn tail_suffix(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("\nstderr (last lines):\n{tail}")
    }
}

/// `ok`, `failed` or `timed out`.
pub(crate) fn status_word(status: &ExperimentStatus) -> &'static str {
    match status {
        ExperimentStatus::Ok => "ok",
        ExperimentStatus::Failed => "failed",
        ExperimentStatus::TimedOut => "timed out",
    }
}

/// Run one experiment again, with its seed and parameters, the way
/// `options` says (isolation, work root), without storing anything, and
/// return its records: `braid lab rerun ID` compares them with the stored
/// ones. Its work directory is `<work_root>/rerun-<id>-<pid>/` (made when
/// the template asks for it), removed on success unless `keep_work_dirs`.
pub fn rerun(
    experiment: &PlannedExperiment,
    template: Arc<dyn Template>,
    options: &RunOptions,
) -> Result<Vec<Record>, RerunError> {
    std::fs::create_dir_all(&options.work_root)
        .map_err(|source| RerunError::WorkRoot { path: options.work_root.clone(), source })?;
    let work_dir = options.work_root.join(format!("rerun-{}-{}", experiment.id, std::process::id()));
    let job = execute::Job {
        isolation: options.isolation_for(template.name()),
        experiment: experiment.clone(),
        template,
        work_dir: work_dir.clone(),
    };
    let outcome = execute::execute_alone(job);
    match outcome.status {
        ExperimentStatus::Ok => {
            if outcome.work_dir_made && !options.keep_work_dirs {
                let _ = std::fs::remove_dir_all(&work_dir);
            }
            Ok(outcome.records)
        }
        status => Err(RerunError::Failed {
            experiment: experiment.id.clone(),
            status,
            exit_code: outcome.exit_code,
            error: outcome.error.unwrap_or_default(),
            stderr_tail: outcome.stderr_tail,
            work_dir,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_work_root_sits_beside_the_database() {
        assert_eq!(default_work_root(Path::new("/data/lab.db")), PathBuf::from("/data/lab.db.runs"));
        assert_eq!(default_work_root(Path::new("lab.db")), PathBuf::from("lab.db.runs"));
    }

    #[test]
    fn only_resolvable_templates_go_to_the_worker() {
        let mut o = RunOptions::new("/tmp/x");
        o.isolation = Isolation::Worker { program: "/bin/true".into(), args: vec![] };
        o.worker_resolves = |name| name == "sim-transfer";
        assert!(matches!(o.isolation_for("sim-transfer"), Isolation::Worker { .. }));
        assert_eq!(o.isolation_for("my-script"), Isolation::InProcess);
        o.isolation = Isolation::InProcess;
        assert_eq!(o.isolation_for("sim-transfer"), Isolation::InProcess);
    }

    #[test]
    fn default_jobs_is_at_least_one() {
        assert!(RunOptions::new("/tmp/x").jobs >= 1);
    }
}
