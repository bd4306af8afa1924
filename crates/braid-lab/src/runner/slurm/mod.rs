//! The Slurm executor: a study's experiments run as Slurm job arrays on a
//! cluster, and the runner, still the single writer of the store, ingests
//! what they leave in a shared directory (seed 001 ch. 4: MACI ran its
//! studies on many workers; here the workers are whatever the cluster's
//! scheduler gives).
//!
//! The flow ([`run`](drive::run), reached through
//! [`runner::run`](crate::runner::run) with
//! [`Executor::Slurm`](crate::runner::Executor::Slurm)):
//! 1. what the store lacks is split into [chunks](chunk) of consecutive
//!    experiments (about 30 s of expected work each, or `--chunk N`);
//! 2. the chunks are written to the shared directory ([`layout`]) and
//!    submitted as arrays with `sbatch --array` ([`submit`]); each task
//!    runs `braid lab worker --slurm-task`, which runs its chunk's
//!    experiments one after another and writes one [result bundle](bundle)
//!    per experiment, atomically ([`task`]);
//! 3. the runner ingests bundles as they appear, many per store
//!    transaction, and follows the tasks with `squeue` and
//!    `scontrol show job` ([`queue`]); the experiments of a task that left
//!    the queue without leaving their bundles are stored as failed, with
//!    the task's end state and the tail of its log; `retry_failed`
//!    submits them again;
//! 4. killing the runner leaves the arrays running: the next run ingests
//!    the bundles on disk, adopts the tasks still queued or running (the
//!    journal `jobs.jsonl` names them) and submits only what is neither.
//!
//! Cluster settings come from the study file's `[slurm]` table
//! ([`StudySlurm`]) and the command line ([`SlurmOptions`]).

pub mod bundle;
pub mod chunk;
mod drive;
pub mod layout;
pub mod queue;
pub mod submit;
pub mod task;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use self::bundle::{BundleError, ResultBundle};
pub use self::chunk::ChunkSize;
pub(crate) use self::drive::run;
pub use self::queue::{QueueError, TaskId};
pub use self::submit::SubmitError;

/// How to run a study on Slurm.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// The shared directory (the same path on every node); the study's
    /// files go under `<shared_dir>/study-<id>/`.
    pub shared_dir: PathBuf,
    /// What each array task runs (program and arguments): the `braid`
    /// binary on the nodes, `["/path/braid", "lab", "worker", "--slurm-task"]`.
    pub task_command: Vec<String>,
    /// `--partition`.
    pub partition: Option<String>,
    /// `--constraint`: the node features the experiments need (a node
    /// with root and TUN for emulator templates).
    pub constraint: Option<String>,
    /// At most this many tasks of each array at once (`--array=...%N`).
    pub max_jobs: Option<usize>,
    /// Experiments per task.
    pub chunk: ChunkSize,
    /// More `sbatch` arguments (`--account=...`, `--qos=...`).
    pub sbatch_args: Vec<String>,
    /// How often to look for new bundles.
    pub poll_interval: Duration,
    /// How often to ask `squeue` about the tasks.
    pub queue_interval: Duration,
    /// How long a task must have left the queue before its experiments
    /// without bundles are stored as failed: bundles written just before
    /// it ended may take a moment to show on a shared filesystem (NFS
    /// caches directory entries for seconds).
    pub lost_grace: Duration,
    /// Set to stop the runner: it stores what it has ingested and returns
    /// [`SlurmError::Interrupted`], leaving the arrays running (the next
    /// run adopts them), as a killed runner does. A requested
    /// [`RunOptions::interrupt`](crate::runner::RunOptions::interrupt) does
    /// the same.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl SlurmOptions {
    /// Defaults: chunks from expected durations, no partition, constraint
    /// or throttle, bundles looked for every 0.5 s, `squeue` every 2 s,
    /// 10 s of grace for a task that left the queue.
    pub fn new(shared_dir: impl Into<PathBuf>, task_command: Vec<String>) -> SlurmOptions {
        SlurmOptions {
            shared_dir: shared_dir.into(),
            task_command,
            partition: None,
            constraint: None,
            max_jobs: None,
            chunk: ChunkSize::Auto,
            sbatch_args: Vec::new(),
            poll_interval: Duration::from_millis(500),
            queue_interval: Duration::from_secs(2),
            lost_grace: Duration::from_secs(10),
            cancel: None,
        }
    }

    /// Take the study file's settings where these options have none (the
    /// command line wins).
    pub fn apply_study(&mut self, study: &StudySlurm) {
        if self.partition.is_none() {
            self.partition.clone_from(&study.partition);
        }
        if self.constraint.is_none() {
            self.constraint.clone_from(&study.constraint);
        }
        if let (ChunkSize::Auto, Some(c)) = (self.chunk, study.chunk) {
            self.chunk = c;
        }
    }
}

/// The default shared directory for a database: `<db>.slurm/` beside it.
pub fn default_shared_dir(db: &Path) -> PathBuf {
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "lab".into());
    name.push(".slurm");
    db.with_file_name(name)
}

/// Why the Slurm executor stopped. (An experiment that failed on a node is
/// not an error: it is stored as failed.)
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The shared directory cannot be made or read.
    #[error("shared directory {}: {source}", path.display())]
    SharedDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A template the nodes' worker cannot resolve by name.
    #[error("experiment {experiment}: template `{template}` cannot run on Slurm: a task resolves templates by name, and only the built-ins can be (run it with --executor local)")]
    NotResolvable {
        /// The experiment.
        experiment: String,
        /// The template.
        template: String,
    },
    /// No task command.
    #[error("no task command: set the program each array task runs (the braid binary on the nodes)")]
    NoTaskCommand,
    /// `squeue` failed when the runner started.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A submission failed.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The journal cannot be read or written.
    #[error("job journal {}: {source}", path.display())]
    Journal {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// [`SlurmOptions::cancel`] was set.
    #[error("interrupted: the submitted arrays keep running; run the study again to adopt them")]
    Interrupted,
}

/// The `[slurm]` table of a study file.
///
/// ```toml
/// [slurm]
/// constraint = "emu"      # node features the experiments need (sbatch --constraint)
/// partition = "batch"     # sbatch --partition (the command line's --partition wins)
/// chunk = "auto"          # experiments per task: "auto" or a number
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StudySlurm {
    /// `constraint`.
    pub constraint: Option<String>,
    /// `partition`.
    pub partition: Option<String>,
    /// `chunk`.
    pub chunk: Option<ChunkSize>,
}

/// The keys of a study's `[slurm]` table.
pub const STUDY_SLURM_KEYS: &[&str] = &["constraint", "partition", "chunk"];

/// A `[slurm]` table that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}: [slurm] {key}: expected {allowed}, got {got}")]
pub struct StudySlurmError {
    /// The study file.
    pub file: String,
    /// The key.
    pub key: String,
    /// The allowed form.
    pub allowed: String,
    /// What the file has.
    pub got: String,
}

impl StudySlurm {
    /// Read the `[slurm]` table of the study file `text` (from `file`);
    /// none gives the defaults. The rest of the file is the study's
    /// ([`Study::parse`](crate::study::Study::parse) checks it).
    pub fn parse(text: &str, file: &Path) -> Result<StudySlurm, StudySlurmError> {
        let error = |key: &str, allowed: &str, got: String| StudySlurmError {
            file: file.display().to_string(),
            key: key.to_string(),
            allowed: allowed.to_string(),
            got,
        };
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| error("", "a TOML file", e.to_string()))?;
        let Some(table) = doc.get("slurm") else { return Ok(StudySlurm::default()) };
        let table = table.as_table().ok_or_else(|| error("", "a table ([slurm])", table.type_str().into()))?;
        let mut out = StudySlurm::default();
        for (key, value) in table {
            let text = |allowed: &str| -> Result<String, StudySlurmError> {
                match value.as_str() {
                    Some(s) if !s.trim().is_empty() && !s.contains(char::is_whitespace) => Ok(s.to_string()),
                    _ => Err(error(key, allowed, value.to_string())),
                }
            };
            match key.as_str() {
                "constraint" => {
                    out.constraint = Some(text("a Slurm feature expression such as \"emu\" or \"emu&big\"")?)
                }
                "partition" => out.partition = Some(text("a partition name such as \"batch\"")?),
                "chunk" => {
                    let allowed = "\"auto\" or a number of experiments per task (at least 1)";
                    let chunk = match value {
                        toml::Value::Integer(n) if *n >= 1 => ChunkSize::Fixed(*n as usize),
                        toml::Value::String(s) if s == "auto" => ChunkSize::Auto,
                        other => return Err(error(key, allowed, other.to_string())),
                    };
                    out.chunk = Some(chunk);
                }
                other => {
                    return Err(error(
                        other,
                        &format!("one of the keys {}", STUDY_SLURM_KEYS.join(", ")),
                        format!("`{other}`"),
                    ))
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slurm_table_is_read_and_checked() {
        let f = Path::new("s.toml");
        assert_eq!(StudySlurm::parse("template = \"x\"\n", f).unwrap(), StudySlurm::default());
        let s =
            StudySlurm::parse("template = \"x\"\n[slurm]\nconstraint = \"emu\"\npartition = \"batch\"\nchunk = 8\n", f)
                .unwrap();
        assert_eq!(s.constraint.as_deref(), Some("emu"));
        assert_eq!(s.partition.as_deref(), Some("batch"));
        assert_eq!(s.chunk, Some(ChunkSize::Fixed(8)));
        assert_eq!(StudySlurm::parse("[slurm]\nchunk = \"auto\"\n", f).unwrap().chunk, Some(ChunkSize::Auto));
        let e = StudySlurm::parse("[slurm]\nchunk = 0\n", f).unwrap_err();
        assert_eq!(e.key, "chunk");
        assert!(e.to_string().starts_with("s.toml: [slurm] chunk: expected \"auto\" or a number"), "{e}");
        let e = StudySlurm::parse("[slurm]\nnodes = 3\n", f).unwrap_err();
        assert!(e.to_string().contains("one of the keys constraint, partition, chunk"), "{e}");
        let e = StudySlurm::parse("[slurm]\nconstraint = 5\n", f).unwrap_err();
        assert!(e.to_string().contains("feature expression"), "{e}");
    }

    #[test]
    fn the_command_line_wins_over_the_study() {
        let study = StudySlurm {
            constraint: Some("emu".into()),
            partition: Some("batch".into()),
            chunk: Some(ChunkSize::Fixed(3)),
        };
        let mut o = SlurmOptions::new("/s", vec!["braid".into()]);
        o.partition = Some("debug".into());
        o.apply_study(&study);
        assert_eq!(o.partition.as_deref(), Some("debug"));
        assert_eq!(o.constraint.as_deref(), Some("emu"));
        assert_eq!(o.chunk, ChunkSize::Fixed(3));
        assert_eq!(default_shared_dir(Path::new("/d/lab.db")), PathBuf::from("/d/lab.db.slurm"));
    }
}
