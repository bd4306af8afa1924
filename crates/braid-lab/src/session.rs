//! The lab's verbs over a database: run a study (plan it, register it,
//! run what is missing, store what finishes) and rerun one stored
//! experiment. The CLI's `braid lab run` and `braid lab rerun` are these
//! functions plus printing; the web UI will call the same.
//!
//! ```
//! use braid_lab::runner::RunOptions;
//! use braid_lab::session::run_study;
//! use braid_lab::store::Store;
//! use braid_lab::study::Study;
//! use braid_lab::param::Value;
//! # let Some(template) = braid_lab::template::find_builtin("sim-transfer") else { return };
//! let study = Study::from_values("doc", template, &[("bytes", vec![Value::Size(50_000), Value::Size(100_000)])], 1, 1).unwrap();
//! let mut store = Store::open_in_memory().unwrap();
//! let root = std::env::temp_dir().join(format!("session-doc-{}", std::process::id()));
//! let mut options = RunOptions::new(&root);
//! options.show_progress = false;
//! let first = run_study(&study, &mut store, &options).unwrap();
//! assert_eq!(first.summary.ok, 2);
//! // Running it again finds both stored: nothing runs twice.
//! let again = run_study(&study, &mut store, &options).unwrap();
//! assert_eq!(again.summary.ran, 0);
//! # let _ = std::fs::remove_dir_all(&root);
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::plan::Plan;
use crate::record::Record;
use crate::runner::{self, RunOptions, RunSummary};
use crate::store::{Store, StoreError, StudyRecord};
use crate::study::{Study, StudyError};
use crate::template::Template;

/// Why a lab verb could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The study file is invalid.
    #[error(transparent)]
    Study(#[from] StudyError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The runner could not go on.
    #[error(transparent)]
    Run(#[from] runner::RunError),
    /// The rerun failed.
    #[error(transparent)]
    Rerun(#[from] runner::RerunError),
    /// No experiment has this id.
    #[error("no experiment with id {0} in the database (ids are listed by `braid lab export`)")]
    UnknownExperiment(String),
    /// The experiment's template cannot be found any more.
    #[error("experiment {id}: template `{template}` is not known to this build{hint}")]
    UnknownTemplate {
        /// The experiment.
        id: String,
        /// Its template.
        template: String,
        /// Where to look.
        hint: String,
    },
}

/// What `braid lab run` reports.
#[derive(Debug, Clone, Serialize)]
pub struct StudyRun {
    /// The study's name.
    pub study: String,
    /// The template.
    pub template: String,
    /// What the runner did (`planned` counts the plan's experiments).
    #[serde(flatten)]
    pub summary: RunSummary,
}

/// Register `study` in `store` (its file verbatim, its parameters, the
/// planned count), then run the experiments not stored yet.
pub fn run_study(study: &Study, store: &mut Store, options: &RunOptions) -> Result<StudyRun, SessionError> {
    let plan = Plan::new(study);
    let record = StudyRecord {
        name: study.name.clone(),
        file_path: study.path.as_ref().map(|p| p.display().to_string()),
        file_text: study.text.clone(),
        template: study.template.name().to_string(),
        template_version: study.template.version(),
        params: study.params.iter().map(|p| p.decl.clone()).collect(),
        planned: plan.count() as u64,
    };
    let study_id = store.upsert_study(&record)?;
    let template = study.template.clone();
    let lookup = move |name: &str| (name == template.name()).then(|| template.clone());
    let summary = runner::run(study_id, &plan.experiments, &lookup, store, options)?;
    Ok(StudyRun { study: study.name.clone(), template: study.template.name().to_string(), summary })
}

/// What `braid lab rerun` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Rerun {
    /// The experiment.
    pub experiment: String,
    /// Its template.
    pub template: String,
    /// The records of the new run.
    pub records: Vec<Record>,
    /// The metrics whose value differs from the stored run:
    /// `(metric, stored, now)`; empty when the rerun reproduced it.
    pub differences: Vec<(String, Option<f64>, Option<f64>)>,
    /// Metrics compared.
    pub compared: usize,
}

impl Rerun {
    /// Every metric came out as stored.
    pub fn reproduced(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Run the stored experiment `id` again (same template, parameters and
/// seed) without storing it, and compare its metrics with the stored ones.
/// Command templates are found again through the study file stored with
/// the experiment (relative paths from where that file was).
pub fn rerun_experiment(store: &Store, id: &str, options: &RunOptions) -> Result<Rerun, SessionError> {
    let row = store.experiment(id)?.ok_or_else(|| SessionError::UnknownExperiment(id.to_string()))?;
    let planned = row.planned();
    let template = template_of(store, id, &planned.template)?;
    let records = runner::rerun(&planned, template, options)?;
    let stored = store.scalars_of(id)?;
    let now: Vec<(String, f64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Metric { name, value } => Some((name.clone(), *value)),
            _ => None,
        })
        .collect();
    let mut names: Vec<&String> = stored.iter().map(|(n, _)| n).chain(now.iter().map(|(n, _)| n)).collect();
    names.sort();
    names.dedup();
    let last = |list: &[(String, f64)], name: &str| list.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v);
    let differences = names
        .iter()
        .filter_map(|n| {
            let (a, b) = (last(&stored, n), last(&now, n));
            let same = match (a, b) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                _ => false,
            };
            (!same).then(|| (n.to_string(), a, b))
        })
        .collect();
    Ok(Rerun { experiment: id.to_string(), template: planned.template, records, differences, compared: names.len() })
}

fn template_of(store: &Store, id: &str, name: &str) -> Result<Arc<dyn Template>, SessionError> {
    if let Some(t) = crate::template::find_builtin(name) {
        return Ok(t);
    }
    let unknown = |hint: String| SessionError::UnknownTemplate { id: id.into(), template: name.into(), hint };
    let Some(text) = store.study_file_of(id)? else {
        return Err(unknown(String::new()));
    };
    let path = store.study_path_of(id)?.map(PathBuf::from).unwrap_or_else(|| PathBuf::from("study.toml"));
    let study = Study::parse(&text, &path, &crate::template::builtins())
        .map_err(|e| unknown(format!(" (its study file no longer loads: {e})")))?;
    if study.template.name() == name {
        Ok(study.template)
    } else {
        Err(unknown(format!(" (its study file now names `{}`)", study.template.name())))
    }
}

/// The database `braid lab` uses unless told otherwise: `$BRAID_LAB_DB`,
/// else `lab.db` in the current directory.
pub fn default_db() -> PathBuf {
    std::env::var_os("BRAID_LAB_DB").map(PathBuf::from).unwrap_or_else(|| Path::new("lab.db").to_path_buf())
}
