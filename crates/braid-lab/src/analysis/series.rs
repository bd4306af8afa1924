//! `braid lab series`: one experiment's series over time (drill-down from
//! a group in `show` to one run).

use serde::Serialize;

use super::common::{list, AnalysisError};
use super::table::{format_number, Table};
use crate::store::Store;

/// One series of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesReport {
    /// The experiment's id.
    pub experiment: String,
    /// The series' name.
    pub metric: String,
    /// `(t, value)` points by time, `t` in seconds since the experiment's
    /// start.
    pub points: Vec<(f64, f64)>,
}

/// The series `metric` of experiment `experiment_id`.
pub fn series(store: &Store, experiment_id: &str, metric: &str) -> Result<SeriesReport, AnalysisError> {
    if store.experiment(experiment_id)?.is_none() {
        return Err(AnalysisError::UnknownExperiment(experiment_id.into()));
    }
    let points = store.series(experiment_id, metric)?;
    if points.is_empty() {
        let known = store.series_names(experiment_id)?;
        return Err(AnalysisError::UnknownSeries {
            experiment: experiment_id.into(),
            name: metric.into(),
            known: list(&known),
        });
    }
    Ok(SeriesReport { experiment: experiment_id.into(), metric: metric.into(), points })
}

impl SeriesReport {
    /// One line per point.
    pub fn table(&self) -> Table {
        let mut t = Table::new(["t".to_string(), self.metric.clone()]);
        for (time, value) in &self.points {
            t.push(vec![format_number(*time), format_number(*value)]);
        }
        t
    }
}
