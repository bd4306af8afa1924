//! `braid lab pareto`: the configurations no other configuration beats on
//! every objective at once.
//!
//! A point is a configuration (a combination of the varying
//! configuration-role parameters) with the mean of each objective metric
//! over its ok experiments. Two modes:
//!
//! - over all experiments (default): a configuration's mean pools every
//!   experiment it ran in, across all environments, each experiment
//!   weighing the same (with a full grid, that is the mean of its
//!   per-environment means); one front;
//! - per environment: one front per combination of the varying
//!   environment-role parameters, each from that environment's experiments.
//!
//! `a` dominates `b` when `a` is at least as good on every objective and
//! strictly better on one. The front is every point no other point
//! dominates; each other point names a front member that dominates it.
//! A configuration that lacks a mean for some objective cannot be placed
//! and is listed as incomplete.

use serde::{Deserialize, Serialize};

use super::common::{label, AnalysisError, Goal, StudyView};
use super::table::{format_number, Table};
use crate::param::Role;
use crate::store::Store;

/// A metric and its direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objective {
    /// The metric.
    pub metric: String,
    /// Larger or smaller is better.
    pub goal: Goal,
}

/// What to compute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParetoQuery {
    /// The study's name.
    pub study: String,
    /// Two or more objectives.
    pub objectives: Vec<Objective>,
    /// One front per environment instead of one over all experiments.
    pub per_environment: bool,
    /// `KEY=VALUE` filters; an experiment must match all.
    pub filters: Vec<String>,
}

/// One configuration's means.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoPoint {
    /// The configuration's values, in [`ParetoReport::configuration_keys`] order.
    pub configuration: Vec<String>,
    /// Mean of each objective, in objective order.
    pub means: Vec<f64>,
    /// Experiments behind each mean.
    pub n: Vec<u64>,
    /// A front member that dominates it (none for a front member).
    pub dominated_by: Option<Vec<String>>,
}

/// The front of one environment (or of all experiments).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoFront {
    /// The environment's values, in [`ParetoReport::environment_keys`]
    /// order (empty over all experiments).
    pub environment: Vec<String>,
    /// Non-dominated configurations, best first on the first objective.
    pub front: Vec<ParetoPoint>,
    /// The others, best first on the first objective.
    pub dominated: Vec<ParetoPoint>,
    /// Configurations without a mean for some objective: not placed.
    pub incomplete: Vec<Vec<String>>,
}

/// The answer to a [`ParetoQuery`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoReport {
    /// The study.
    pub study: String,
    /// The objectives.
    pub objectives: Vec<Objective>,
    /// The filters, canonicalized.
    pub filters: Vec<(String, String)>,
    /// Whether fronts are per environment.
    pub per_environment: bool,
    /// Environment parameters the fronts are split by (empty over all).
    pub environment_keys: Vec<String>,
    /// Configuration parameters that vary.
    pub configuration_keys: Vec<String>,
    /// One front per environment, or one.
    pub fronts: Vec<ParetoFront>,
}

/// Does `a` dominate `b`: at least as good on every objective, strictly
/// better on one?
///
/// ```
/// use braid_lab::analysis::{dominates, Goal};
/// let goals = [Goal::Minimize, Goal::Maximize];
/// assert!(dominates(&[1.0, 5.0], &[2.0, 5.0], &goals));
/// assert!(!dominates(&[1.0, 4.0], &[2.0, 5.0], &goals));
/// assert!(!dominates(&[1.0, 5.0], &[1.0, 5.0], &goals));
/// ```
pub fn dominates(a: &[f64], b: &[f64], goals: &[Goal]) -> bool {
    let mut strictly = false;
    for ((x, y), g) in a.iter().zip(b).zip(goals) {
        if g.better(*y, *x) {
            return false;
        }
        strictly |= g.better(*x, *y);
    }
    strictly
}

/// For each point, `None` if it is on the front, else `Some(i)`: a front
/// member `i` that dominates it.
///
/// Points are visited best-first in lexicographic order of the oriented
/// objectives; a dominator always comes before what it dominates, so each
/// point is compared with the front found so far only (O(n · front)).
pub fn pareto_front(points: &[Vec<f64>], goals: &[Goal]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| {
        for (g, (x, y)) in goals.iter().zip(points[a].iter().zip(&points[b])) {
            let c = g.oriented(*y).total_cmp(&g.oriented(*x));
            if c.is_ne() {
                return c;
            }
        }
        a.cmp(&b)
    });
    let mut front: Vec<usize> = Vec::new();
    let mut out = vec![None; points.len()];
    for i in order {
        match front.iter().find(|&&f| dominates(&points[f], &points[i], goals)) {
            Some(&f) => out[i] = Some(f),
            None => front.push(i),
        }
    }
    out
}

/// The Pareto front(s) of a study.
pub fn pareto(store: &Store, q: &ParetoQuery) -> Result<ParetoReport, AnalysisError> {
    if q.objectives.len() < 2 {
        return Err(AnalysisError::TooFewObjectives(q.objectives.len()));
    }
    pareto_in(&StudyView::load(store, &q.study)?, q)
}

/// [`pareto`] of a study already loaded (`q.study` is not consulted).
pub(crate) fn pareto_in(view: &StudyView, q: &ParetoQuery) -> Result<ParetoReport, AnalysisError> {
    if q.objectives.len() < 2 {
        return Err(AnalysisError::TooFewObjectives(q.objectives.len()));
    }
    let filters = view.filters(&q.filters)?;
    let asked: Vec<String> = q.objectives.iter().map(|o| o.metric.clone()).collect();
    let metrics = view.metrics(&asked)?;
    let goals: Vec<Goal> = q.objectives.iter().map(|o| o.goal).collect();
    let unfiltered = |k: &String| !filters.iter().any(|(f, _)| f == k);
    let environment_keys: Vec<String> = if q.per_environment {
        view.varying(Some(Role::Environment)).into_iter().filter(unfiltered).collect()
    } else {
        Vec::new()
    };
    let configuration_keys: Vec<String> =
        view.varying(Some(Role::Configuration)).into_iter().filter(unfiltered).collect();
    let mut group_by = environment_keys.clone();
    group_by.extend(configuration_keys.iter().cloned());
    // The same metric may be asked twice (with both goals): fetch it once.
    let mut unique: Vec<String> = Vec::new();
    let mut objective_metric: Vec<usize> = Vec::new();
    for metric in metrics {
        match unique.iter().position(|u| *u == metric) {
            Some(i) => objective_metric.push(i),
            None => {
                objective_metric.push(unique.len());
                unique.push(metric);
            }
        }
    }
    let table = view.scalars(&filters, &group_by, &unique);

    // Sum and count per (group, metric).
    let u = unique.len();
    let mut sums = vec![(0.0f64, 0u64); table.groups.len() * u];
    for p in &table.points {
        let cell = &mut sums[p.group as usize * u + p.metric as usize];
        cell.0 += p.value;
        cell.1 += 1;
    }

    let env_len = environment_keys.len();
    let mut fronts: Vec<ParetoFront> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (g, values) in table.groups.iter().enumerate() {
        let env = &values[..env_len];
        match fronts.last() {
            Some(f) if f.environment.as_slice() == env => {}
            _ => {
                fronts.push(ParetoFront {
                    environment: env.to_vec(),
                    front: vec![],
                    dominated: vec![],
                    incomplete: vec![],
                });
                members.push(Vec::new());
            }
        }
        if let Some(last) = members.last_mut() {
            last.push(g);
        }
    }
    for (front, groups) in fronts.iter_mut().zip(members) {
        let mut points: Vec<ParetoPoint> = Vec::new();
        for g in groups {
            let cells: Vec<(f64, u64)> = objective_metric.iter().map(|&i| sums[g * u + i]).collect();
            let configuration = table.groups[g][env_len..].to_vec();
            if cells.iter().any(|c| c.1 == 0) {
                front.incomplete.push(configuration);
                continue;
            }
            points.push(ParetoPoint {
                configuration,
                means: cells.iter().map(|c| c.0 / c.1 as f64).collect(),
                n: cells.iter().map(|c| c.1).collect(),
                dominated_by: None,
            });
        }
        let means: Vec<Vec<f64>> = points.iter().map(|p| p.means.clone()).collect();
        let verdict = pareto_front(&means, &goals);
        let labels: Vec<Vec<String>> = points.iter().map(|p| p.configuration.clone()).collect();
        for (mut p, v) in points.into_iter().zip(verdict) {
            match v {
                None => front.front.push(p),
                Some(f) => {
                    p.dominated_by = Some(labels[f].clone());
                    front.dominated.push(p);
                }
            }
        }
        let first_goal = goals[0];
        let by_first = |a: &ParetoPoint, b: &ParetoPoint| {
            first_goal.oriented(b.means[0]).total_cmp(&first_goal.oriented(a.means[0]))
        };
        front.front.sort_by(by_first);
        front.dominated.sort_by(by_first);
    }
    Ok(ParetoReport {
        study: view.info.name.clone(),
        objectives: q.objectives.clone(),
        filters,
        per_environment: q.per_environment,
        environment_keys,
        configuration_keys,
        fronts,
    })
}

impl ParetoReport {
    /// One line per placed configuration, front members first in each
    /// environment.
    pub fn table(&self) -> Table {
        let mut cols = Vec::new();
        if self.per_environment {
            cols.push("environment".to_string());
        }
        cols.push("configuration".into());
        cols.extend(self.objectives.iter().map(|o| format!("{} ({})", o.metric, o.goal)));
        cols.extend(["n".to_string(), "front".into(), "dominated by".into()]);
        let mut t = Table::new(cols);
        for f in &self.fronts {
            for p in f.front.iter().chain(&f.dominated) {
                let mut row = Vec::new();
                if self.per_environment {
                    row.push(label(&self.environment_keys, &f.environment));
                }
                row.push(label(&self.configuration_keys, &p.configuration));
                row.extend(p.means.iter().map(|v| format_number(*v)));
                row.push(p.n.iter().min().copied().unwrap_or(0).to_string());
                row.push(if p.dominated_by.is_none() { "yes".into() } else { "no".into() });
                row.push(p.dominated_by.as_ref().map(|d| label(&self.configuration_keys, d)).unwrap_or_default());
                t.push(row);
            }
        }
        t
    }
}
