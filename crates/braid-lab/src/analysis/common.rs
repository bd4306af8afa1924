//! What every analysis needs: its errors, the study it reads, checked
//! filters, parameter keys and metrics, and the goal of a metric.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::param::Role;
use crate::store::{ParamValues, ScalarTable, Store, StoreError, StudyFrame, StudyInfo};

/// Why an analysis could not answer.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No study of that name.
    #[error("no study `{name}` in the database; studies: {known}")]
    UnknownStudy {
        /// The name asked for.
        name: String,
        /// The stored studies' names.
        known: String,
    },
    /// A filter not of the form `KEY=VALUE`.
    #[error("filter `{0}`: expected KEY=VALUE, e.g. scheduler=redundant")]
    BadFilter(String),
    /// A parameter the study does not have.
    #[error("{what} `{key}`: no such parameter in study `{study}`; its parameters: {known}")]
    UnknownParam {
        /// `filter` or `group-by`.
        what: &'static str,
        /// The key asked for.
        key: String,
        /// The study.
        study: String,
        /// The study's parameters.
        known: String,
    },
    /// A filter whose value no stored experiment has.
    #[error("filter {key}={value}: no stored experiment has this value; {key} takes {values}")]
    NoMatch {
        /// The parameter.
        key: String,
        /// The value asked for (canonical text).
        value: String,
        /// The values stored.
        values: String,
    },
    /// A metric no experiment of the study reported.
    #[error("metric `{metric}`: not reported by any experiment of study `{study}`; its metrics: {known}")]
    UnknownMetric {
        /// The metric asked for.
        metric: String,
        /// The study.
        study: String,
        /// The metrics stored.
        known: String,
    },
    /// No experiment of that id.
    #[error("no experiment `{0}` in the database")]
    UnknownExperiment(String),
    /// An experiment without that series.
    #[error("experiment {experiment} has no series `{name}`; its series: {known}")]
    UnknownSeries {
        /// The experiment.
        experiment: String,
        /// The series asked for.
        name: String,
        /// Its series.
        known: String,
    },
    /// A Pareto front of fewer than two objectives.
    #[error("a Pareto front needs two or more objectives (--max M / --min M), got {0}")]
    TooFewObjectives(usize),
    /// Writing the export failed.
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
}

/// Whether larger or smaller values of a metric are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Goal {
    /// Larger is better.
    #[serde(rename = "max")]
    Maximize,
    /// Smaller is better.
    #[serde(rename = "min")]
    Minimize,
}

impl Goal {
    /// `max` or `min`.
    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Maximize => "max",
            Goal::Minimize => "min",
        }
    }

    /// Is `a` better than `b`?
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Goal::Maximize => a > b,
            Goal::Minimize => a < b,
        }
    }

    /// `v` oriented so that larger is better.
    pub fn oriented(self, v: f64) -> f64 {
        match self {
            Goal::Maximize => v,
            Goal::Minimize => -v,
        }
    }
}

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Goal {
    type Err = String;

    /// `max`, `maximize`, `min` or `minimize`.
    fn from_str(s: &str) -> Result<Goal, String> {
        match s {
            "max" | "maximize" => Ok(Goal::Maximize),
            "min" | "minimize" => Ok(Goal::Minimize),
            _ => Err(format!("`{s}`: expected max or min")),
        }
    }
}

/// Split `KEY=VALUE`.
///
/// ```
/// use braid_lab::analysis::parse_filter;
/// assert_eq!(parse_filter("loss=1%").unwrap(), ("loss".to_string(), "1%".to_string()));
/// assert!(parse_filter("loss").is_err());
/// ```
pub fn parse_filter(text: &str) -> Result<(String, String), AnalysisError> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(AnalysisError::BadFilter(text.to_string())),
    }
}

/// A study loaded for analysis: its record, the values its parameters
/// take, and its experiments in memory ([`StudyFrame`]): every question an
/// analysis asks of it is answered from this one load (an analysis page
/// asks several).
pub(crate) struct StudyView {
    pub info: StudyInfo,
    pub values: Vec<ParamValues>,
    pub frame: StudyFrame,
}

impl StudyView {
    /// Load the study called `name` in one snapshot; an unknown name lists
    /// the stored ones.
    pub fn load(store: &Store, name: &str) -> Result<StudyView, AnalysisError> {
        store.snapshot(|store| {
            let Some(info) = store.study(name)? else {
                let known: Vec<String> = store.studies()?.into_iter().map(|s| s.name).collect();
                return Err(AnalysisError::UnknownStudy { name: name.into(), known: list(&known) });
            };
            let frame = store.frame(info.id)?;
            Ok(StudyView { info, values: frame.param_values(), frame })
        })
    }

    /// The scalars of `metrics` of the ok experiments matching `filters`,
    /// grouped by `group_by` (what [`Store::scalars`] answers).
    pub fn scalars(&self, filters: &[(String, String)], group_by: &[String], metrics: &[String]) -> ScalarTable {
        self.frame.table(filters, group_by, metrics)
    }

    /// Every parameter key: declared ones in declaration order, then any
    /// stored key the declaration lacks.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.info.params.iter().map(|p| p.name.clone()).collect();
        let declared: BTreeSet<&str> = self.info.params.iter().map(|p| p.name.as_str()).collect();
        keys.extend(self.values.iter().filter(|v| !declared.contains(v.key.as_str())).map(|v| v.key.clone()));
        keys
    }

    /// Keys that take more than one value among the stored experiments, in
    /// [`keys`](Self::keys) order, optionally only of one role.
    pub fn varying(&self, role: Option<Role>) -> Vec<String> {
        self.keys()
            .into_iter()
            .filter(|k| self.values_of(k).is_some_and(|v| v.values.len() > 1))
            .filter(|k| role.is_none() || self.role(k) == role)
            .collect()
    }

    /// The declared role of a key (undeclared: none).
    pub fn role(&self, key: &str) -> Option<Role> {
        self.info.params.iter().find(|p| p.name == key).map(|p| p.role)
    }

    fn values_of(&self, key: &str) -> Option<&ParamValues> {
        self.values.iter().find(|v| v.key == key)
    }

    /// Check that every key is a parameter of the study.
    pub fn check_keys(&self, what: &'static str, keys: &[String]) -> Result<(), AnalysisError> {
        let known = self.keys();
        match keys.iter().find(|k| !known.contains(k)) {
            Some(key) => Err(AnalysisError::UnknownParam {
                what,
                key: key.clone(),
                study: self.info.name.clone(),
                known: list(&known),
            }),
            None => Ok(()),
        }
    }

    /// Parse and check `KEY=VALUE` filters: the key must be a parameter,
    /// the value is canonicalized with the parameter's type (as written when
    /// it does not parse), and some stored experiment must have it.
    pub fn filters(&self, filters: &[String]) -> Result<Vec<(String, String)>, AnalysisError> {
        let mut out = Vec::new();
        for text in filters {
            let (key, raw) = parse_filter(text)?;
            self.check_keys("filter", std::slice::from_ref(&key))?;
            let canonical = match self.info.params.iter().find(|p| p.name == key) {
                Some(decl) => decl.ty.parse_text(&raw).map(|v| v.to_text()).unwrap_or(raw),
                None => raw,
            };
            let stored: Vec<String> =
                self.values_of(&key).map(|v| v.values.iter().map(|c| c.text.clone()).collect()).unwrap_or_default();
            if !stored.contains(&canonical) {
                return Err(AnalysisError::NoMatch { key, value: canonical, values: list(&stored) });
            }
            out.push((key, canonical));
        }
        Ok(out)
    }

    /// Check metrics against those stored; none asked for means all.
    pub fn metrics(&self, asked: &[String]) -> Result<Vec<String>, AnalysisError> {
        if asked.is_empty() {
            return Ok(self.frame.metric_names().to_vec());
        }
        for metric in asked {
            if !self.frame.has_metric(metric) {
                return Err(AnalysisError::UnknownMetric {
                    metric: metric.clone(),
                    study: self.info.name.clone(),
                    known: list(self.frame.metric_names()),
                });
            }
        }
        Ok(asked.to_vec())
    }
}

/// `a, b, c`, or `(none)`.
pub(crate) fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".into()
    } else {
        items.join(", ")
    }
}

/// `key=value key=value`, or `all` for an empty group.
pub(crate) fn label(keys: &[String], values: &[String]) -> String {
    if keys.is_empty() {
        return "all".into();
    }
    keys.iter().zip(values).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}
