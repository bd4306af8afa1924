//! `braid lab status`: studies and their progress.

use serde::Serialize;

use super::common::{list, AnalysisError};
use super::table::Table;
use crate::store::Store;

/// One study's progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusRow {
    /// The study.
    pub study: String,
    /// Its template.
    pub template: String,
    /// Experiments the study plans.
    pub planned: u64,
    /// Stored as ok.
    pub ok: u64,
    /// Stored as failed.
    pub failed: u64,
    /// Stored as timed out.
    pub timed_out: u64,
    /// Planned but not stored: what `braid lab run` would run.
    pub missing: u64,
    /// Last registered, unix seconds.
    pub updated: f64,
}

/// Every study's progress (or one's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// One row per study, by name.
    pub studies: Vec<StatusRow>,
}

/// The progress of every study, or of the one called `study`.
pub fn status(store: &Store, study: Option<&str>) -> Result<StatusReport, AnalysisError> {
    let all = store.studies()?;
    if let Some(name) = study {
        if !all.iter().any(|s| s.name == name) {
            let known: Vec<String> = all.into_iter().map(|s| s.name).collect();
            return Err(AnalysisError::UnknownStudy { name: name.into(), known: list(&known) });
        }
    }
    let studies = all
        .into_iter()
        .filter(|s| study.is_none_or(|name| s.name == name))
        .map(|s| StatusRow {
            missing: s.planned.saturating_sub(s.counts.stored()),
            study: s.name,
            template: s.template,
            planned: s.planned,
            ok: s.counts.ok,
            failed: s.counts.failed,
            timed_out: s.counts.timed_out,
            updated: s.updated,
        })
        .collect();
    Ok(StatusReport { studies })
}

impl StatusReport {
    /// One line per study.
    pub fn table(&self) -> Table {
        let mut t = Table::new(["study", "template", "planned", "ok", "failed", "timeout", "missing", "done"]);
        for s in &self.studies {
            let done = if s.planned == 0 { 100.0 } else { 100.0 * (s.planned - s.missing) as f64 / s.planned as f64 };
            t.push(vec![
                s.study.clone(),
                s.template.clone(),
                s.planned.to_string(),
                s.ok.to_string(),
                s.failed.to_string(),
                s.timed_out.to_string(),
                s.missing.to_string(),
                format!("{done:.0}%"),
            ]);
        }
        t
    }
}
