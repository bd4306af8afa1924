//! `braid lab best`: for each environment, the configuration with the best
//! mean, the runner-up, the margin, and whether it is significant.
//!
//! An *environment* is a combination of the values of the study's
//! environment-role parameters, a *configuration* one of its
//! configuration-role parameters; only parameters that take more than one
//! value form the labels (a constant one splits nothing). The values of a
//! (environment, configuration) cell are its ok experiments: the
//! repetitions. The margin is the best mean minus the runner-up's, made
//! positive (relative: over the runner-up's magnitude). Significance is
//! Welch's t-test of the two cells' values, two-sided, `p < 0.05`; with
//! fewer than two values in either cell there is no test.

use serde::{Deserialize, Serialize};

use super::common::{label, AnalysisError, Goal, StudyView};
use super::stats::{mean, variance, welch_t_test, Welch};
use super::table::{format_number, format_opt, Table};
use crate::param::Role;
use crate::store::Store;

/// The significance level.
pub const ALPHA: f64 = 0.05;

/// What to rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestQuery {
    /// The study's name.
    pub study: String,
    /// The metric to rank configurations by.
    pub metric: String,
    /// Larger or smaller is better.
    pub goal: Goal,
    /// `KEY=VALUE` filters; an experiment must match all.
    pub filters: Vec<String>,
}

/// One configuration's values in one environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigStats {
    /// The configuration's values, in [`BestReport::configuration_keys`] order.
    pub configuration: Vec<String>,
    /// Repetitions (ok experiments with the metric).
    pub n: u64,
    /// Mean over them.
    pub mean: f64,
    /// Sample standard deviation; none for `n = 1`.
    pub sd: Option<f64>,
}

/// The best configuration of one environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestRow {
    /// The environment's values, in [`BestReport::environment_keys`] order.
    pub environment: Vec<String>,
    /// Configurations compared in it.
    pub configurations: u64,
    /// The best.
    pub best: ConfigStats,
    /// The second best, if there are two.
    pub runner_up: Option<ConfigStats>,
    /// How much better the best mean is (always ≥ 0).
    pub margin: Option<f64>,
    /// `margin / |runner-up mean|`; none when that mean is 0.
    pub relative_margin: Option<f64>,
    /// Welch's t-test of best against runner-up.
    pub test: Option<Welch>,
    /// `p < 0.05`; none without a test.
    pub significant: Option<bool>,
}

/// The answer to a [`BestQuery`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestReport {
    /// The study.
    pub study: String,
    /// The metric.
    pub metric: String,
    /// Its goal.
    pub goal: Goal,
    /// The filters, canonicalized.
    pub filters: Vec<(String, String)>,
    /// Environment parameters that vary.
    pub environment_keys: Vec<String>,
    /// Configuration parameters that vary.
    pub configuration_keys: Vec<String>,
    /// One row per environment, in value order.
    pub rows: Vec<BestRow>,
}

/// The best configuration per environment.
pub fn best(store: &Store, q: &BestQuery) -> Result<BestReport, AnalysisError> {
    best_in(&StudyView::load(store, &q.study)?, q)
}

/// [`best`] of a study already loaded (`q.study` is not consulted).
pub(crate) fn best_in(view: &StudyView, q: &BestQuery) -> Result<BestReport, AnalysisError> {
    let filters = view.filters(&q.filters)?;
    let metrics = view.metrics(std::slice::from_ref(&q.metric))?;
    let unfiltered = |k: &String| !filters.iter().any(|(f, _)| f == k);
    let environment_keys: Vec<String> = view.varying(Some(Role::Environment)).into_iter().filter(unfiltered).collect();
    let configuration_keys: Vec<String> =
        view.varying(Some(Role::Configuration)).into_iter().filter(unfiltered).collect();
    let mut group_by = environment_keys.clone();
    group_by.extend(configuration_keys.iter().cloned());
    let table = view.scalars(&filters, &group_by, &metrics);

    let mut cells: Vec<Vec<f64>> = vec![Vec::new(); table.groups.len()];
    for p in &table.points {
        cells[p.group as usize].push(p.value);
    }
    // Groups come sorted by their values, environment keys first, so each
    // environment's configurations are consecutive.
    let env_len = environment_keys.len();
    let mut environments: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    for (g, values) in table.groups.iter().enumerate() {
        let env = &values[..env_len];
        match environments.last_mut() {
            Some((last, members)) if last.as_slice() == env => members.push(g),
            _ => environments.push((env.to_vec(), vec![g])),
        }
    }

    let mut rows = Vec::new();
    for (environment, members) in environments {
        let mut ranked: Vec<(usize, ConfigStats)> = members
            .iter()
            .filter_map(|&g| {
                let values = &cells[g];
                let m = mean(values)?;
                Some((
                    g,
                    ConfigStats {
                        configuration: table.groups[g][env_len..].to_vec(),
                        n: values.len() as u64,
                        mean: m,
                        sd: variance(values).map(f64::sqrt),
                    },
                ))
            })
            .collect();
        if ranked.is_empty() {
            continue;
        }
        // Best first; ties keep value order (the group index).
        ranked.sort_by(|(ga, a), (gb, b)| {
            q.goal.oriented(b.mean).total_cmp(&q.goal.oriented(a.mean)).then_with(|| ga.cmp(gb))
        });
        let configurations = ranked.len() as u64;
        let mut it = ranked.into_iter();
        let Some((best_g, best)) = it.next() else { continue };
        let runner = it.next();
        let (margin, relative_margin, test) = match &runner {
            Some((runner_g, r)) => {
                let margin = (best.mean - r.mean).abs();
                let relative = (r.mean != 0.0).then(|| margin / r.mean.abs());
                (Some(margin), relative, welch_t_test(&cells[best_g], &cells[*runner_g]))
            }
            None => (None, None, None),
        };
        rows.push(BestRow {
            environment,
            configurations,
            best,
            runner_up: runner.map(|(_, r)| r),
            margin,
            relative_margin,
            significant: test.map(|t| t.p < ALPHA),
            test,
        });
    }
    Ok(BestReport {
        study: view.info.name.clone(),
        metric: q.metric.clone(),
        goal: q.goal,
        filters,
        environment_keys,
        configuration_keys,
        rows,
    })
}

impl BestReport {
    /// One line per environment.
    pub fn table(&self) -> Table {
        let mut cols = vec!["environment".to_string(), "best".into(), "mean".into(), "n".into()];
        cols.extend(["runner-up", "mean", "n", "margin", "margin%", "p", "significant"].map(String::from));
        let mut t = Table::new(cols);
        for r in &self.rows {
            let runner = r.runner_up.as_ref();
            t.push(vec![
                label(&self.environment_keys, &r.environment),
                label(&self.configuration_keys, &r.best.configuration),
                format_number(r.best.mean),
                r.best.n.to_string(),
                runner.map(|c| label(&self.configuration_keys, &c.configuration)).unwrap_or_else(|| "-".into()),
                format_opt(runner.map(|c| c.mean)),
                runner.map(|c| c.n.to_string()).unwrap_or_else(|| "-".into()),
                format_opt(r.margin),
                format_opt(r.relative_margin.map(|m| 100.0 * m)),
                format_opt(r.test.map(|w| w.p)),
                match r.significant {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "n<2".into(),
                },
            ]);
        }
        t
    }
}
