//! `braid lab show`: the distribution of each metric per group.
//!
//! Filters and grouping run over the study loaded once
//! ([`StudyFrame`](crate::store::StudyFrame)); sorting each group's values and the
//! statistics ([`summarize`]) run here.

use serde::{Deserialize, Serialize};

use super::common::{AnalysisError, StudyView};
use super::stats::{summarize, Summary};
use super::table::{format_number, format_opt, Table};
use crate::store::Store;

/// What to show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShowQuery {
    /// The study's name.
    pub study: String,
    /// `KEY=VALUE` filters; an experiment must match all.
    pub filters: Vec<String>,
    /// Parameters to group by. `None`: every parameter that takes more than
    /// one value in the study and is not filtered, so `show` alone is
    /// useful. `Some(vec![])`: one group.
    pub group_by: Option<Vec<String>>,
    /// Metrics to show; empty: every metric the study reported.
    pub metrics: Vec<String>,
}

/// One group's distribution of one metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShowRow {
    /// The group's values, in [`ShowReport::group_by`] order.
    pub group: Vec<String>,
    /// The metric.
    pub metric: String,
    /// Its statistics over the group's ok experiments.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The answer to a [`ShowQuery`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShowReport {
    /// The study.
    pub study: String,
    /// The filters, canonicalized (`key`, `value`).
    pub filters: Vec<(String, String)>,
    /// The keys the rows are grouped by.
    pub group_by: Vec<String>,
    /// The metrics shown.
    pub metrics: Vec<String>,
    /// Ok experiments that matched the filters.
    pub experiments: u64,
    /// By metric, then group (in value order); a group without values of a
    /// metric has no row for it.
    pub rows: Vec<ShowRow>,
}

/// Summarize a study's metrics per group.
pub fn show(store: &Store, q: &ShowQuery) -> Result<ShowReport, AnalysisError> {
    show_in(&StudyView::load(store, &q.study)?, q)
}

/// [`show`] of a study already loaded (`q.study` is not consulted).
pub(crate) fn show_in(view: &StudyView, q: &ShowQuery) -> Result<ShowReport, AnalysisError> {
    let filters = view.filters(&q.filters)?;
    let group_by = match &q.group_by {
        Some(keys) => {
            view.check_keys("group-by", keys)?;
            keys.clone()
        }
        None => view.varying(None).into_iter().filter(|k| !filters.iter().any(|(f, _)| f == k)).collect(),
    };
    let metrics = view.metrics(&q.metrics)?;
    let table = view.scalars(&filters, &group_by, &metrics);

    // Bucket values by (metric, group).
    let groups = table.groups.len();
    let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); metrics.len() * groups];
    for p in &table.points {
        buckets[p.metric as usize * groups + p.group as usize].push(p.value);
    }
    let mut rows = Vec::new();
    for (i, values) in buckets.iter_mut().enumerate() {
        let (m, g) = (i / groups.max(1), i % groups.max(1));
        if let Some(summary) = summarize(values) {
            rows.push(ShowRow { group: table.groups[g].clone(), metric: metrics[m].clone(), summary });
        }
    }
    Ok(ShowReport { study: view.info.name.clone(), filters, group_by, metrics, experiments: table.experiments, rows })
}

impl ShowReport {
    /// One line per group and metric.
    pub fn table(&self) -> Table {
        let mut cols = self.group_by.clone();
        cols.extend(["metric", "n", "mean", "median", "p5", "p95", "sd", "ci95_low", "ci95_high"].map(String::from));
        let mut t = Table::new(cols);
        for r in &self.rows {
            let s = &r.summary;
            let mut row = r.group.clone();
            row.extend([
                r.metric.clone(),
                s.n.to_string(),
                format_number(s.mean),
                format_number(s.median),
                format_number(s.p5),
                format_number(s.p95),
                format_opt(s.sd),
                format_opt(s.ci95.map(|c| c.0)),
                format_opt(s.ci95.map(|c| c.1)),
            ]);
            t.push(row);
        }
        t
    }
}
