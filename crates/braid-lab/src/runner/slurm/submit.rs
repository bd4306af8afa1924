//! Submitting chunks as Slurm job arrays: the chunk files, the batch
//! script, the `sbatch` arguments, and reading the job id back.
//!
//! One array per kind of task (shared or exclusive) and at most
//! [`MAX_ARRAY_TASKS`] tasks per array (Slurm's default `MaxArraySize` is
//! 1001, so indices 0–1000). The array's time limit is its longest
//! chunk's. `--max-jobs N` becomes the array throttle `%N`: at most N
//! tasks of each array run at once.

use std::path::{Path, PathBuf};

use super::chunk::{slurm_minutes, Chunk};
use super::layout::{chunk_path, ChunkFile, Layout, CHUNKS_ENV};
use super::SlurmOptions;

/// The most tasks in one array (Slurm's default `MaxArraySize` of 1001
/// allows indices up to 1000).
pub const MAX_ARRAY_TASKS: usize = 1000;

/// Why a submission failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// Writing the chunk files or the script failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// `sbatch` could not be run or refused.
    #[error(transparent)]
    Sbatch(#[from] super::queue::QueueError),
    /// `sbatch` answered something other than a job id.
    #[error("sbatch answered `{0}`, not a job id")]
    NoJobId(String),
}

/// Write the chunk files of one array into `dir` (made fresh).
pub fn write_chunks(dir: &Path, layout: &Layout, chunks: &[Chunk<'_>]) -> Result<(), SubmitError> {
    let write_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SubmitError::Write { path, source }
    };
    if dir.exists() {
        // Left by a runner killed before it journalled this submission.
        std::fs::remove_dir_all(dir).map_err(write_error(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    for (i, chunk) in chunks.iter().enumerate() {
        let file = ChunkFile {
            experiments: chunk.experiments.iter().map(|&e| e.clone()).collect(),
            bundle_dir: layout.bundles(),
            work_root: layout.work(),
        };
        let path = chunk_path(dir, i as u32);
        let bytes = serde_json::to_vec(&file).map_err(|e| write_error(&path)(std::io::Error::other(e)))?;
        std::fs::write(&path, bytes).map_err(write_error(&path))?;
    }
    Ok(())
}

/// Quote `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The batch script: point the task at its submission directory and run
/// the task command.
pub fn batch_script(submission: &Path, command: &[String]) -> String {
    let command: Vec<String> = command.iter().map(|c| shell_quote(c)).collect();
    format!(
        "#!/bin/sh\n# Written by `braid lab run --executor slurm`: task N of this array runs\n\
         # chunk-N.json of the directory below and writes a result bundle per experiment.\n\
         export {CHUNKS_ENV}={}\nexec {}\n",
        shell_quote(&submission.display().to_string()),
        command.join(" ")
    )
}

/// The `sbatch` arguments for an array of `chunks` (all shared or all
/// exclusive), before the script's path.
pub fn sbatch_args(options: &SlurmOptions, layout: &Layout, study_id: i64, chunks: &[Chunk<'_>]) -> Vec<String> {
    let tasks = chunks.len();
    let mut array = format!("0-{}", tasks.saturating_sub(1));
    if let Some(n) = options.max_jobs {
        array.push_str(&format!("%{n}"));
    }
    let limit = chunks.iter().map(Chunk::time_limit).max().unwrap_or_default();
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name=braid-lab-{study_id}"),
        format!("--array={array}"),
        format!("--output={}", layout.logs().join("task-%A_%a.log").display()),
        format!("--time={}", slurm_minutes(limit)),
        "--ntasks=1".to_string(),
        "--cpus-per-task=1".to_string(),
        // The runner resubmits what a lost task did not finish; Slurm
        // requeueing it as well would run it twice.
        "--no-requeue".to_string(),
    ];
    if let Some(p) = &options.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(c) = &options.constraint {
        args.push(format!("--constraint={c}"));
    }
    if chunks.first().is_some_and(|c| c.exclusive) {
        args.push("--exclusive".to_string());
    }
    args.extend(options.sbatch_args.iter().cloned());
    args
}

/// The job id in `sbatch --parsable`'s answer (`123` or `123;cluster`).
pub fn parse_sbatch(out: &str) -> Result<u64, SubmitError> {
    let line = out.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or("");
    line.split(';')
        .next()
        .and_then(|id| id.trim().parse().ok())
        .ok_or_else(|| SubmitError::NoJobId(out.trim().to_string()))
}

/// Write the script of submission `dir` and submit it; returns the job id.
pub fn sbatch(dir: &Path, args: &[String], command: &[String]) -> Result<u64, SubmitError> {
    let script = dir.join("task.sh");
    std::fs::write(&script, batch_script(dir, command))
        .map_err(|source| SubmitError::Write { path: script.clone(), source })?;
    let script_arg = script.display().to_string();
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.push(&script_arg);
    let out = super::queue::slurm_command("sbatch", &all)?;
    parse_sbatch(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;
    use crate::plan::PlannedExperiment;
    use std::time::Duration;

    #[test]
    fn sbatch_answers_parse() {
        assert_eq!(parse_sbatch("2\n").unwrap(), 2);
        assert_eq!(parse_sbatch("4711;braidtest\n").unwrap(), 4711);
        assert!(matches!(parse_sbatch("sbatch: error: Batch job submission failed"), Err(SubmitError::NoJobId(_))));
    }

    #[test]
    fn the_script_quotes_what_it_runs() {
        let s = batch_script(Path::new("/shared/it's/1"), &["/opt/braid".into(), "lab".into(), "worker".into()]);
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("export BRAID_LAB_CHUNKS='/shared/it'\\''s/1'\n"), "{s}");
        assert!(s.ends_with("exec '/opt/braid' 'lab' 'worker'\n"), "{s}");
    }

    #[test]
    fn arguments_carry_the_limits_and_the_constraints() {
        let e = PlannedExperiment {
            id: "a".into(),
            template: "t".into(),
            template_version: 1,
            params: Params::default(),
            repetition: 0,
            seed: 0,
            timeout: Duration::from_secs(600),
            exclusive: true,
            expected: Duration::from_secs(60),
        };
        let chunks = vec![
            Chunk { experiments: vec![&e], exclusive: true },
            Chunk { experiments: vec![&e, &e], exclusive: true },
        ];
        let mut o = SlurmOptions::new("/shared", vec!["braid".into()]);
        o.max_jobs = Some(4);
        o.partition = Some("batch".into());
        o.constraint = Some("emu&root".into());
        let layout = Layout::new(Path::new("/shared"), 7);
        let args = sbatch_args(&o, &layout, 7, &chunks);
        for want in [
            "--array=0-1%4",
            "--job-name=braid-lab-7",
            // 60 s + 2 x (600 s + 5 s) = 1270 s: 22 minutes.
            "--time=22",
            "--partition=batch",
            "--constraint=emu&root",
            "--exclusive",
            "--output=/shared/study-7/logs/task-%A_%a.log",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
        }
    }
}
