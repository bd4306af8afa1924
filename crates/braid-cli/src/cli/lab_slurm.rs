//! `braid lab run --executor slurm` and `braid lab worker --slurm-task`:
//! the flags of the Slurm executor, turned into
//! [`braid_lab::runner::slurm::SlurmOptions`].

use std::path::{Path, PathBuf};

use anyhow::Context;
use braid_lab::runner::slurm::{self, ChunkSize, SlurmOptions, StudySlurm};
use braid_lab::runner::{Executor, Isolation, RunOptions};
use braid_lab::study::Study;
use clap::{Args, ValueEnum};

/// Where `braid lab run` runs experiments.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum ExecutorKind {
    /// On this machine.
    #[default]
    Local,
    /// As Slurm job arrays (sbatch), results through a shared directory.
    Slurm,
}

/// The Slurm flags of `braid lab run`.
#[derive(Debug, Args)]
pub struct SlurmArgs {
    /// local (this machine) or slurm (job arrays on a Slurm cluster).
    #[arg(long, value_enum, default_value = "local")]
    executor: ExecutorKind,
    /// Slurm partition (default: the study's [slurm] partition, else the cluster's default).
    #[arg(long, value_name = "P")]
    partition: Option<String>,
    /// At most N tasks of each array at once (sbatch --array=...%N).
    #[arg(long, value_name = "N")]
    max_jobs: Option<usize>,
    /// Experiments per array task: auto (about 30 s of work each) or a number.
    #[arg(long, value_name = "N|auto")]
    chunk: Option<String>,
    /// Directory every node sees at the same path (default: <db>.slurm beside the database).
    #[arg(long, value_name = "DIR")]
    shared_dir: Option<PathBuf>,
}

impl SlurmArgs {
    /// Whether any Slurm-only flag was given.
    fn slurm_flags(&self) -> bool {
        self.partition.is_some() || self.max_jobs.is_some() || self.chunk.is_some() || self.shared_dir.is_some()
    }

    /// Set `options.executor` from the flags, the study's `[slurm]` table
    /// and the database's place.
    pub fn apply(&self, study: &Study, db: &Path, options: &mut RunOptions) -> anyhow::Result<()> {
        match self.executor {
            ExecutorKind::Local => {
                anyhow::ensure!(
                    !self.slurm_flags(),
                    "--partition, --max-jobs, --chunk and --shared-dir apply to --executor slurm only"
                );
                Ok(())
            }
            ExecutorKind::Slurm => {
                let file = study.path.clone().unwrap_or_else(|| PathBuf::from("study"));
                let from_study = StudySlurm::parse(&study.text, &file)?;
                let program = std::env::current_exe().context("finding the braid binary for the array tasks")?;
                let command = vec![
                    program.display().to_string(),
                    "lab".to_string(),
                    "worker".to_string(),
                    "--slurm-task".to_string(),
                ];
                let shared = self.shared_dir.clone().unwrap_or_else(|| slurm::default_shared_dir(db));
                let shared = std::path::absolute(&shared).unwrap_or(shared);
                let mut s = SlurmOptions::new(shared, command);
                s.partition.clone_from(&self.partition);
                if let Some(n) = self.max_jobs {
                    anyhow::ensure!(n >= 1, "--max-jobs: expected at least 1, got 0");
                    s.max_jobs = Some(n);
                }
                if let Some(c) = &self.chunk {
                    s.chunk = c.parse::<ChunkSize>().map_err(|e| anyhow::anyhow!("--chunk: {e}"))?;
                }
                s.apply_study(&from_study);
                options.executor = Executor::Slurm(Box::new(s));
                Ok(())
            }
        }
    }
}

/// Check the study's `[slurm]` table (`braid lab plan` validates the whole
/// file, also for a study that runs locally today).
pub fn check_study(study: &Study) -> anyhow::Result<()> {
    let file = study.path.clone().unwrap_or_else(|| PathBuf::from("study"));
    StudySlurm::parse(&study.text, &file)?;
    Ok(())
}

/// `braid lab worker --slurm-task`: run this array task's chunk, each
/// experiment in a worker process of its own, and exit with its code.
pub fn slurm_task() -> anyhow::Result<i32> {
    let chunk = slurm::task::chunk_from_env()?;
    let program = std::env::current_exe().context("finding the braid binary for worker processes")?;
    let isolation = Isolation::Worker { program, args: vec!["lab".into(), "worker".into()] };
    Ok(slurm::task::run_task(&chunk, &braid_lab::template::find_builtin, &isolation))
}
