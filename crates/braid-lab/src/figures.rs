//! Figures from the store: the data behind `braid lab plot`, `series` and
//! `pareto --out`, gathered with the analysis queries and drawn by
//! [`crate::plot`]. The CLI and (later) the web UI call these, so both show
//! the same figures.
//!
//! - [`distribution`]: a metric's values per x value and group, as box
//!   plots (MACI's main view) or, for a numeric x, as mean lines with 95%
//!   confidence bands;
//! - [`experiment_series`]: one run over time (every series named `M` or
//!   `M.<part>`, e.g. one per flow);
//! - [`pareto_figure`]: every configuration's means of two metrics with
//!   the front highlighted.

use std::path::Path;

use serde::Serialize;

use crate::analysis::stats::{mean, t_critical_95, variance};
use crate::analysis::{AnalysisError, Goal, ParetoReport};
use crate::plot::{BandGroup, BandPlot, BandPoint, BoxGroup, BoxPlot, Plot, PlotError, SeriesPlot, TimeSeries};
use crate::store::{Store, StoreError};

/// A figure that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// The query behind it failed (unknown study, metric or key).
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Drawing or writing failed.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// The request makes no sense for this data.
    #[error("{0}")]
    Invalid(String),
}

/// How to draw a distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Box plots per x value and group.
    Box,
    /// Mean per x value with a 95% confidence band, one line per group
    /// (x must be numeric).
    Band,
}

/// What a distribution figure should show.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributionQuery {
    /// The study's name.
    pub study: String,
    /// The metric on the y axis.
    pub metric: String,
    /// The parameter on the x axis.
    pub x: String,
    /// Parameters whose values split each x value into groups.
    pub group_by: Vec<String>,
    /// `KEY=VALUE` filters.
    pub filters: Vec<String>,
    /// Box or band.
    pub kind: Kind,
}

/// What was drawn (printed by the CLI, `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureSummary {
    /// The file written.
    pub out: String,
    /// Categories (x values) or series drawn.
    pub x_values: Vec<String>,
    /// Group names (legend entries).
    pub groups: Vec<String>,
    /// Values drawn.
    pub points: u64,
}

/// Box plots (or bands) of `q.metric` per value of `q.x` and group,
/// written to `out` (`.svg` or `.png`).
pub fn distribution(store: &Store, q: &DistributionQuery, out: &Path) -> Result<FigureSummary, FigureError> {
    distribution_in(&crate::analysis::common::StudyView::load(store, &q.study)?, q, out)
}

/// [`distribution`] of a study already loaded (the web UI's analysis page
/// draws it beside other views of the same load).
pub(crate) fn distribution_in(
    study: &crate::analysis::common::StudyView,
    q: &DistributionQuery,
    out: &Path,
) -> Result<FigureSummary, FigureError> {
    let mut keys = vec![q.x.clone()];
    keys.extend(q.group_by.iter().filter(|k| **k != q.x).cloned());
    study.check_keys("x/group-by", &keys)?;
    let filters = study.filters(&q.filters)?;
    let metrics = study.metrics(std::slice::from_ref(&q.metric))?;
    let table = study.scalars(&filters, &keys, &metrics);
    if table.points.is_empty() {
        return Err(FigureError::Invalid(format!(
            "no ok experiment of study {} recorded {} (with these filters)",
            q.study, q.metric
        )));
    }
    // Groups come sorted by value; the x value is the first key.
    let mut categories: Vec<String> = Vec::new();
    let mut legend: Vec<String> = Vec::new();
    let mut cell_of_group = Vec::with_capacity(table.groups.len());
    for g in &table.groups {
        let x = g[0].clone();
        let name = if g.len() > 1 { label_of(&keys[1..], &g[1..]) } else { q.metric.clone() };
        let xi = position_or_push(&mut categories, x);
        let gi = position_or_push(&mut legend, name);
        cell_of_group.push((xi, gi));
    }
    let mut values = vec![vec![Vec::new(); categories.len()]; legend.len()];
    for p in &table.points {
        let (xi, gi) = cell_of_group[p.group as usize];
        values[gi][xi].push(p.value);
    }
    let title = format!("{} by {} ({})", q.metric, q.x, q.study);
    let y_label = q.metric.clone();
    let x_label = q.x.clone();
    match q.kind {
        Kind::Box => {
            let plot = BoxPlot {
                title,
                x_label,
                y_label,
                categories: categories.clone(),
                groups: legend
                    .iter()
                    .zip(values)
                    .map(|(name, per_cat)| BoxGroup { name: name.clone(), values_per_category: per_cat })
                    .collect(),
            };
            plot.write(out)?;
        }
        Kind::Band => {
            let xs: Vec<f64> = categories
                .iter()
                .map(|c| numeric(c).ok_or_else(|| FigureError::Invalid(format!(
                    "--x {}: value `{c}` is not a number; a band plot needs a numeric x (use a box plot)",
                    q.x
                ))))
                .collect::<Result<_, _>>()?;
            let groups = legend
                .iter()
                .zip(values)
                .map(|(name, per_cat)| BandGroup {
                    name: name.clone(),
                    points: per_cat
                        .iter()
                        .zip(&xs)
                        .filter_map(|(v, &x)| band_point(x, v))
                        .collect(),
                })
                .collect();
            BandPlot { title, x_label, y_label, groups }.write(out)?;
        }
    }
    Ok(FigureSummary {
        out: out.display().to_string(),
        x_values: categories,
        groups: legend,
        points: table.points.len() as u64,
    })
}

/// Mean and 95% confidence interval of the mean (Student t); a single
/// value has a zero-width band.
fn band_point(x: f64, values: &[f64]) -> Option<BandPoint> {
    let m = mean(values)?;
    let half = match variance(values) {
        Some(var) if values.len() > 1 => t_critical_95((values.len() - 1) as f64) * (var / values.len() as f64).sqrt(),
        _ => 0.0,
    };
    Some(BandPoint { x, mean: m, lower: m - half, upper: m + half })
}

/// Every series of `experiment` named `metric` or `metric.<part>`, over
/// time, written to `out`.
pub fn experiment_series(store: &Store, experiment: &str, metric: &str, out: &Path) -> Result<FigureSummary, FigureError> {
    let names = store.series_names(experiment)?;
    let prefix = format!("{metric}.");
    let chosen: Vec<&String> = names.iter().filter(|n| *n == metric || n.starts_with(&prefix)).collect();
    if chosen.is_empty() {
        // Let the analysis query say what is missing (unknown experiment or
        // series, with the known names).
        crate::analysis::series(store, experiment, metric)?;
        return Err(FigureError::Invalid(format!("experiment {experiment} has no series {metric}")));
    }
    let mut series = Vec::new();
    let mut points = 0;
    for name in &chosen {
        let p = store.series(experiment, name)?;
        points += p.len() as u64;
        let legend = name.strip_prefix(&prefix).unwrap_or(name).to_string();
        series.push(TimeSeries { name: legend, points: p });
    }
    let plot = SeriesPlot {
        title: format!("{metric} over time (experiment {experiment})"),
        x_label: "time (s)".into(),
        y_label: metric.to_string(),
        series,
    };
    plot.write(out)?;
    Ok(FigureSummary {
        out: out.display().to_string(),
        x_values: Vec::new(),
        groups: chosen.into_iter().cloned().collect(),
        points,
    })
}

/// The first two objectives of a Pareto report as a scatter plot, the
/// front highlighted (one figure over every front of the report: points
/// are labelled with their environment when there are several).
pub fn pareto_figure(report: &ParetoReport, out: &Path) -> Result<FigureSummary, FigureError> {
    use crate::plot::{Direction, Objective as Axis, ParetoPlot, ParetoPoint as Dot};
    if report.objectives.len() < 2 {
        return Err(FigureError::Invalid("a Pareto plot needs two objectives".into()));
    }
    let axis = |i: usize| Axis {
        label: report.objectives[i].metric.clone(),
        better: match report.objectives[i].goal {
            Goal::Maximize => Direction::Max,
            Goal::Minimize => Direction::Min,
        },
    };
    let mut dots = Vec::new();
    for front in &report.fronts {
        let env = if front.environment.is_empty() { String::new() } else { format!(" @ {}", front.environment.join(",")) };
        for (points, on_front) in [(&front.front, true), (&front.dominated, false)] {
            for p in points {
                dots.push(Dot {
                    x: p.means[0],
                    y: p.means[1],
                    on_front,
                    label: format!("{}{env}", p.configuration.join(",")),
                });
            }
        }
    }
    if dots.is_empty() {
        return Err(FigureError::Invalid(format!("study {} has no configuration with both metrics", report.study)));
    }
    let n = dots.len() as u64;
    let plot = ParetoPlot { title: format!("Pareto front ({})", report.study), x: axis(0), y: axis(1), points: dots };
    plot.write(out)?;
    Ok(FigureSummary { out: out.display().to_string(), x_values: Vec::new(), groups: Vec::new(), points: n })
}

fn position_or_push(list: &mut Vec<String>, item: String) -> usize {
    match list.iter().position(|x| *x == item) {
        Some(i) => i,
        None => {
            list.push(item);
            list.len() - 1
        }
    }
}

fn label_of(keys: &[String], values: &[String]) -> String {
    keys.iter().zip(values).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// A canonical value as a number: plain numbers, sizes (bytes), durations
/// (seconds), percentages.
fn numeric(text: &str) -> Option<f64> {
    if let Ok(v) = text.parse::<f64>() {
        return Some(v);
    }
    if let Some(p) = text.strip_suffix('%') {
        return p.parse::<f64>().ok();
    }
    if let Ok(crate::param::Value::Size(b)) = crate::param::ParamType::Size.parse_text(text) {
        return Some(b as f64);
    }
    crate::param::parse_duration(text).map(|d| d.as_secs_f64())
}
