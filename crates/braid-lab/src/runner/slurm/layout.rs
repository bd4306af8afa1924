//! The shared directory of one study: what the runner writes for the
//! array tasks and what they write back. Every node must see it at the
//! same path (a shared filesystem).
//!
//! ```text
//! <shared>/study-<id>/
//!   jobs.jsonl                     one line per submitted array: its job id and size
//!   submissions/<n>/task.sh        the batch script of array n
//!   submissions/<n>/chunk-<i>.json what task i of array n runs (a ChunkFile)
//!   bundles/<experiment>.json      result bundles, until the runner stores them
//!   work/<experiment>/             each experiment's work directory (logs, records)
//!   logs/task-<job>_<task>.log     each task's own stdout and stderr
//! ```
//!
//! The journal (`jobs.jsonl`) is what lets a restarted runner adopt the
//! arrays still queued or running instead of submitting their experiments
//! again: each line is appended (and synced) right after `sbatch` answered.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::PlannedExperiment;

/// The environment variable that tells an array task its submission
/// directory (the batch script sets it).
pub const CHUNKS_ENV: &str = "BRAID_LAB_CHUNKS";

/// The paths of one study's shared directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `<shared>/study-<id>`.
    pub root: PathBuf,
}

impl Layout {
    /// The layout of study `study_id` under `shared`.
    pub fn new(shared: &Path, study_id: i64) -> Layout {
        Layout { root: shared.join(format!("study-{study_id}")) }
    }
    /// The submission journal.
    pub fn journal(&self) -> PathBuf {
        self.root.join("jobs.jsonl")
    }
    /// Where tasks put result bundles.
    pub fn bundles(&self) -> PathBuf {
        self.root.join("bundles")
    }
    /// Experiments' work directories go here.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }
    /// Tasks' own logs.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// The directory of submission `n`.
    pub fn submission(&self, n: u32) -> PathBuf {
        self.root.join("submissions").join(n.to_string())
    }
    /// The log of task `task`.
    pub fn task_log(&self, task: super::queue::TaskId) -> PathBuf {
        self.logs().join(format!("task-{}_{}.log", task.job, task.task))
    }

    /// Make the directories the runner and the tasks write into.
    pub fn create(&self) -> std::io::Result<()> {
        for dir in [self.bundles(), self.work(), self.logs(), self.root.join("submissions")] {
            std::fs::create_dir_all(dir)?;
        }
        Ok(())
    }
}

/// The chunk file of task `index` in a submission directory.
pub fn chunk_path(submission: &Path, index: u32) -> PathBuf {
    submission.join(format!("chunk-{index}.json"))
}

/// What one array task runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkFile {
    /// Its experiments, run one after another in this order.
    pub experiments: Vec<PlannedExperiment>,
    /// Where to write their result bundles.
    pub bundle_dir: PathBuf,
    /// Where their work directories go (`<work_root>/<id>/`).
    pub work_root: PathBuf,
}

/// One submitted array, as journalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// Its number (its directory under `submissions/`).
    pub number: u32,
    /// Slurm's job id of the array.
    pub job: u64,
    /// How many tasks (chunk files `0..tasks`).
    pub tasks: u32,
}

/// Every submission in the journal at `path` (none if it does not exist).
/// A torn last line (the runner killed while appending) is skipped: its
/// array's experiments are then submitted again, and whichever bundle
/// comes first is stored.
pub fn read_journal(path: &Path) -> std::io::Result<Vec<Submission>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// Append `submission` to the journal at `path`, synced to disk.
pub fn append_journal(path: &Path, submission: &Submission) -> std::io::Result<()> {
    let mut line = serde_json::to_string(submission).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(line.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_survives_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("braid-lab-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.jsonl");
        assert_eq!(read_journal(&path).unwrap(), []);
        let a = Submission { number: 0, job: 41, tasks: 7 };
        let b = Submission { number: 1, job: 48, tasks: 1 };
        append_journal(&path, &a).unwrap();
        append_journal(&path, &b).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"number\":2,\"jo").unwrap();
        assert_eq!(read_journal(&path).unwrap(), [a, b]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_follow_the_layout() {
        let l = Layout::new(Path::new("/shared/lab"), 3);
        assert_eq!(l.bundles(), Path::new("/shared/lab/study-3/bundles"));
        assert_eq!(chunk_path(&l.submission(2), 5), Path::new("/shared/lab/study-3/submissions/2/chunk-5.json"));
        let t = super::super::queue::TaskId { job: 9, task: 1 };
        assert_eq!(l.task_log(t), Path::new("/shared/lab/study-3/logs/task-9_1.log"));
    }
}
