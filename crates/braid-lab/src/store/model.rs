//! The values that go into the store and come out of it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::param::{ParamDecl, Params};
use crate::plan::PlannedExperiment;
use crate::record::Record;

/// A study as the runner registers it ([`Store::upsert_study`](super::Store::upsert_study)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyRecord {
    /// The study's name (unique in a database).
    pub name: String,
    /// Where the study file was read from, if it came from a file.
    pub file_path: Option<String>,
    /// The study file, verbatim.
    pub file_text: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// The template's declared parameters (names, types, roles).
    pub params: Vec<ParamDecl>,
    /// How many experiments the study plans.
    pub planned: u64,
}

/// How an experiment ended.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ExperimentStatus {
    /// It ran to the end and reported its records.
    #[serde(rename = "ok")]
    Ok,
    /// It failed (an error, a non-zero exit).
    #[serde(rename = "failed")]
    Failed,
    /// The runner stopped it at its timeout.
    #[serde(rename = "timeout")]
    TimedOut,
}

impl ExperimentStatus {
    /// Every status, in display order.
    pub const ALL: [ExperimentStatus; 3] = [ExperimentStatus::Ok, ExperimentStatus::Failed, ExperimentStatus::TimedOut];

    /// `ok`, `failed` or `timeout`: the stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentStatus::Ok => "ok",
            ExperimentStatus::Failed => "failed",
            ExperimentStatus::TimedOut => "timeout",
        }
    }

    /// The inverse of [`as_str`](Self::as_str).
    ///
    /// ```
    /// use braid_lab::store::ExperimentStatus;
    /// assert_eq!(ExperimentStatus::parse("timeout"), Some(ExperimentStatus::TimedOut));
    /// assert_eq!(ExperimentStatus::parse("done"), None);
    /// ```
    pub fn parse(text: &str) -> Option<ExperimentStatus> {
        ExperimentStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for ExperimentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One experiment the runner finished, with what it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedExperiment {
    /// What was run.
    pub planned: PlannedExperiment,
    /// How it ended.
    pub status: ExperimentStatus,
    /// The process's exit code (command templates), if it exited.
    pub exit_code: Option<i32>,
    /// What went wrong, for a failed or timed-out experiment.
    pub error: Option<String>,
    /// The last lines of its stderr.
    pub stderr_tail: String,
    /// Start, unix seconds.
    pub started: f64,
    /// End, unix seconds.
    pub ended: f64,
    /// The host it ran on.
    pub host: String,
    /// The Braid version it ran at.
    pub braid_version: String,
    /// The git commit it ran at.
    pub git_commit: String,
    /// Its records: scalars, series points, warnings.
    pub records: Vec<Record>,
}

/// How many of a study's experiments are stored, by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    /// Stored as ok.
    pub ok: u64,
    /// Stored as failed.
    pub failed: u64,
    /// Stored as timed out.
    pub timed_out: u64,
}

impl StatusCounts {
    /// Every stored experiment.
    pub fn stored(&self) -> u64 {
        self.ok + self.failed + self.timed_out
    }

    /// Add one experiment of `status`.
    pub fn add(&mut self, status: ExperimentStatus, n: u64) {
        match status {
            ExperimentStatus::Ok => self.ok += n,
            ExperimentStatus::Failed => self.failed += n,
            ExperimentStatus::TimedOut => self.timed_out += n,
        }
    }
}

/// A stored study with its experiment counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyInfo {
    /// The study's id in this database.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Where the study file was read from.
    pub file_path: Option<String>,
    /// The study file as last registered, verbatim.
    pub file_text: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// The template's declared parameters.
    pub params: Vec<ParamDecl>,
    /// How many experiments the study plans.
    pub planned: u64,
    /// First registered, unix seconds.
    pub created: f64,
    /// Last registered, unix seconds.
    pub updated: f64,
    /// Stored experiments by status.
    pub counts: StatusCounts,
}

/// A stored experiment: its plan, how it ended, its scalars and warnings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentRow {
    /// Content-derived id.
    pub id: String,
    /// Its study's id.
    pub study_id: i64,
    /// Its study's name.
    pub study: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// Every parameter's value.
    pub params: Params,
    /// 0-based repetition index.
    pub repetition: u32,
    /// Its seed.
    pub seed: u64,
    /// Its timeout, seconds.
    pub timeout_s: f64,
    /// Whether it ran alone.
    pub exclusive: bool,
    /// Expected duration, seconds.
    pub expected_s: f64,
    /// How it ended.
    pub status: ExperimentStatus,
    /// Exit code, if it exited.
    pub exit_code: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
    /// The tail of its stderr.
    pub stderr_tail: String,
    /// Start, unix seconds.
    pub started: f64,
    /// End, unix seconds.
    pub ended: f64,
    /// Host it ran on.
    pub host: String,
    /// Braid version.
    pub braid_version: String,
    /// Git commit.
    pub git_commit: String,
    /// Its scalar results by metric.
    pub scalars: BTreeMap<String, f64>,
    /// Its warnings, in the order reported.
    pub warnings: Vec<String>,
}

impl ExperimentRow {
    /// The experiment as planned: what `braid lab rerun` runs again.
    pub fn planned(&self) -> PlannedExperiment {
        PlannedExperiment {
            id: self.id.clone(),
            template: self.template.clone(),
            template_version: self.template_version,
            params: self.params.clone(),
            repetition: self.repetition,
            seed: self.seed,
            timeout: secs(self.timeout_s),
            exclusive: self.exclusive,
            expected: secs(self.expected_s),
        }
    }
}

/// Seconds back to a duration; a negative or non-finite stored value is
/// zero rather than a panic.
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

/// One value a parameter takes in a study, and in how many experiments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamValueCount {
    /// Canonical text ([`Value::to_text`](crate::param::Value::to_text)).
    pub text: String,
    /// Its number, where it has one ([`Value::as_f64`](crate::param::Value::as_f64)).
    pub num: Option<f64>,
    /// Stored experiments with this value.
    pub experiments: u64,
}

/// The values a parameter takes across a study's stored experiments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamValues {
    /// The parameter.
    pub key: String,
    /// Its values: by number when every value has one, else by text.
    pub values: Vec<ParamValueCount>,
}

/// A line of the runner's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRow {
    /// The study, if the line is about one.
    pub study_id: Option<i64>,
    /// The experiment id, if the line is about one.
    pub experiment: Option<String>,
    /// Unix seconds.
    pub time: f64,
    /// `info`, `warn`, `error`, ...
    pub level: String,
    /// The message.
    pub message: String,
}

/// Order values by number when all have one, else by text.
pub(crate) fn sort_values(values: &mut [ParamValueCount]) {
    if values.iter().all(|v| v.num.is_some()) {
        values.sort_by(|a, b| a.num.unwrap_or(0.0).total_cmp(&b.num.unwrap_or(0.0)).then_with(|| a.text.cmp(&b.text)));
    } else {
        values.sort_by(|a, b| a.text.cmp(&b.text));
    }
}
