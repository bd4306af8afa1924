//! Result bundles: what a Slurm array task leaves in the shared directory
//! for each experiment it ran, and what the runner ingests into the store.
//!
//! One JSON file per experiment, `bundles/<id>.json`: its status, exit
//! code, error, the tail of its stderr, start and end times, the host and
//! the code it ran with, the Slurm task, and its records (scalars, series
//! points, warnings, artifacts). A bundle is written to a temporary name
//! in the same directory and renamed into place, so the runner sees a
//! bundle whole or not at all, also on a shared filesystem where rename
//! within a directory is atomic (NFS, Lustre, BeeGFS).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::PlannedExperiment;
use crate::record::Record;
use crate::store::{ExperimentStatus, FinishedExperiment};

/// The bundle format this code writes and reads.
pub const BUNDLE_FORMAT: u32 = 1;

/// Bundle files end with this.
pub const BUNDLE_SUFFIX: &str = ".json";

/// One experiment's results, as a task wrote them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultBundle {
    /// [`BUNDLE_FORMAT`].
    pub format: u32,
    /// The experiment's id.
    pub experiment: String,
    /// How it ended.
    pub status: ExperimentStatus,
    /// The worker's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// What went wrong, for a failed or timed-out experiment.
    pub error: Option<String>,
    /// The end of its stderr.
    pub stderr_tail: String,
    /// Start, Unix seconds (the node's clock).
    pub started: f64,
    /// End, Unix seconds (the node's clock).
    pub ended: f64,
    /// The node it ran on.
    pub host: String,
    /// The Braid version of the worker.
    pub braid_version: String,
    /// The git commit the worker was built at.
    pub git_commit: String,
    /// The Slurm task that ran it (`JOBID_TASK`), if known.
    pub slurm_task: Option<String>,
    /// Its records.
    pub records: Vec<Record>,
}

/// A bundle that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The file cannot be read.
    #[error("reading result bundle {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a result bundle.
    #[error("result bundle {} is not valid (line {line}, column {column}): {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// Written by another version of the bundle format.
    #[error("result bundle {} has format {found}, this runner reads format {BUNDLE_FORMAT}: run the same braid version on the nodes and the runner", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Its format.
        found: u32,
    },
    /// The file is named for one experiment but holds another.
    #[error("result bundle {} holds experiment {found}, not the one its name says", path.display())]
    WrongExperiment {
        /// The file.
        path: PathBuf,
        /// The experiment it holds.
        found: String,
    },
    /// Writing failed.
    #[error("writing result bundle {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The bundle file of experiment `id` in `dir`.
pub fn bundle_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}{BUNDLE_SUFFIX}"))
}

/// The experiment id a bundle file name stands for (`None` for anything
/// else in the directory, such as a temporary file being written).
pub fn bundle_id(file_name: &str) -> Option<&str> {
    let id = file_name.strip_suffix(BUNDLE_SUFFIX)?;
    (!id.is_empty() && !id.starts_with('.') && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .then_some(id)
}

impl ResultBundle {
    /// Parse a bundle from its text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ResultBundle, BundleError> {
        // The format first, so a future format's other changes give the
        // clear error instead of a parse error about some field.
        #[derive(Deserialize)]
        struct Head {
            format: u32,
        }
        let parse_error = |e: serde_json::Error| BundleError::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        };
        let head: Head = serde_json::from_str(text).map_err(parse_error)?;
        if head.format != BUNDLE_FORMAT {
            return Err(BundleError::Format { path: path.to_path_buf(), found: head.format });
        }
        serde_json::from_str(text).map_err(parse_error)
    }

    /// Read the bundle of experiment `id` at `path`, checking it holds
    /// that experiment.
    pub fn read(path: &Path, id: &str) -> Result<ResultBundle, BundleError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| BundleError::Read { path: path.to_path_buf(), source })?;
        let bundle = ResultBundle::parse(&text, path)?;
        if bundle.experiment != id {
            return Err(BundleError::WrongExperiment { path: path.to_path_buf(), found: bundle.experiment });
        }
        Ok(bundle)
    }

    /// Write it into `dir` as `<id>.json`, atomically: a temporary file in
    /// `dir`, flushed to disk, then renamed into place.
    pub fn write_atomic(&self, dir: &Path) -> Result<PathBuf, BundleError> {
        let path = bundle_path(dir, &self.experiment);
        let tmp = dir.join(format!(".{}.{}.tmp", self.experiment, std::process::id()));
        let write_error = |source| BundleError::Write { path: path.clone(), source };
        let bytes = serde_json::to_vec(self).map_err(|e| write_error(std::io::Error::other(e)))?;
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            // On disk before it has its name: a node that crashes right
            // after the rename leaves a whole bundle, not an empty one.
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(write_error(e));
        }
        Ok(path)
    }

    /// What the store takes, for the experiment as planned.
    pub fn into_finished(self, planned: PlannedExperiment) -> FinishedExperiment {
        FinishedExperiment {
            planned,
            status: self.status,
            exit_code: self.exit_code,
            error: self.error,
            stderr_tail: self.stderr_tail,
            started: self.started,
            ended: self.ended,
            host: self.host,
            braid_version: self.braid_version,
            git_commit: self.git_commit,
            records: self.records,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(id: &str, records: Vec<Record>) -> ResultBundle {
        ResultBundle {
            format: BUNDLE_FORMAT,
            experiment: id.into(),
            status: ExperimentStatus::Ok,
            exit_code: Some(0),
            error: None,
            stderr_tail: "last line".into(),
            started: 1_790_000_000.25,
            ended: 1_790_000_001.5,
            host: "node-7".into(),
            braid_version: "0.1.0".into(),
            git_commit: "abcdef012345".into(),
            slurm_task: Some("41_3".into()),
            records,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-lab-bundle-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_written_bundle_reads_back_and_leaves_no_temporary() {
        let dir = temp_dir("roundtrip");
        let b = sample(
            "00ff00ff00ff00ff",
            vec![
                Record::Metric { name: "goodput_mbps".into(), value: 0.1 + 0.2 },
                Record::Series { name: "cwnd".into(), t: 0.5, value: 14600.0 },
                Record::Warn { warn: "w".into() },
            ],
        );
        let path = b.write_atomic(&dir).unwrap();
        assert_eq!(path, bundle_path(&dir, "00ff00ff00ff00ff"));
        assert_eq!(ResultBundle::read(&path, "00ff00ff00ff00ff").unwrap(), b);
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, ["00ff00ff00ff00ff.json"]);
        assert!(matches!(ResultBundle::read(&path, "other"), Err(BundleError::WrongExperiment { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_real_bundle_parses() {
        // As a task writes it (one line, fields in declaration order).
        let text = r#"{"format":1,"experiment":"9f86d081884c7d65","status":"failed","exit_code":1,"error":"worker exited with status 1: boom","stderr_tail":"boom","started":1795000000.5,"ended":1795000002.0,"host":"vm","braid_version":"0.1.0","git_commit":"unknown","slurm_task":"12_0","records":[{"metric":"x","value":2.5},{"series":"s","t":0.0,"value":1.0}]}"#;
        let b = ResultBundle::parse(text, Path::new("b.json")).unwrap();
        assert_eq!(b.status, ExperimentStatus::Failed);
        assert_eq!(b.exit_code, Some(1));
        assert_eq!(b.slurm_task.as_deref(), Some("12_0"));
        assert_eq!(b.records.len(), 2);
    }

    #[test]
    fn bad_bundles_say_what_is_wrong() {
        let p = Path::new("bundles/x.json");
        let e = ResultBundle::parse("{\"format\":1,\"experiment\":", p).unwrap_err();
        assert!(matches!(e, BundleError::Parse { line: 1, .. }), "{e}");
        assert!(e.to_string().contains("bundles/x.json"), "{e}");
        let e = ResultBundle::parse("{\"format\":2,\"anything\":true}", p).unwrap_err();
        assert!(matches!(e, BundleError::Format { found: 2, .. }), "{e}");
        let e = ResultBundle::parse("{\"format\":1,\"experiment\":\"x\"}", p).unwrap_err();
        assert!(e.to_string().contains("missing field"), "{e}");
    }

    #[test]
    fn only_bundle_names_are_bundles() {
        assert_eq!(bundle_id("00ff00ff00ff00ff.json"), Some("00ff00ff00ff00ff"));
        assert_eq!(bundle_id(".00ff.123.tmp"), None);
        assert_eq!(bundle_id(".json"), None);
        assert_eq!(bundle_id("a b.json"), None);
        assert_eq!(bundle_id("notes.txt"), None);
    }

    proptest! {
        #[test]
        fn metrics_survive_the_round_trip(values in proptest::collection::vec(-1e300f64..1e300, 0..20), id in "[0-9a-f]{16}") {
            let records = values.iter().enumerate().map(|(i, &v)| Record::Metric { name: format!("m{i}"), value: v }).collect();
            let b = sample(&id, records);
            let text = serde_json::to_string(&b).unwrap();
            prop_assert_eq!(ResultBundle::parse(&text, Path::new("p")).unwrap(), b);
        }
    }
}
