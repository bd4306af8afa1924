//! The lab side of Fossa's learner: a [`braid_rules::learn::Evaluator`]
//! that runs each batch of evaluations (one generation, or one round of
//! one when hopeless rule sets are aborted) as ONE lab study of the `adapt`
//! template: the batch's rule sets are the study's configurations, its
//! environments the link specs, so every evaluation is stored in the
//! SQLite database like any study's experiment, and the web UI and
//! `braid lab analyze` show them (seed 001 §6.4: "every generation's
//! evaluations are a lab study").
//!
//! Only the pairs the learner asked for run (not the Cartesian product of
//! the batch's rule sets and environments); an experiment already stored
//! as ok (a resumed campaign) is read back instead of run again.
//!
//! Repetitions. One run of a rule set in an environment is noisy (the
//! seeded loss pattern, thread and emulator scheduling on a shared
//! machine; see the `adapt` template). With `[experiment] repetitions = N`
//! an evaluation is N runs, lab repetitions 0..N with their own seeds,
//! each stored as its own experiment (the lab keeps the raw data and its
//! confidence intervals); the learner sees their mean per objective, whose
//! standard error is the runs' spread over √N. Held-out environments,
//! where the reports rank rule sets, may run more
//! (`held_out_repetitions`): the learner's training evaluations are many
//! and each counts for little, the held-out ones are few and decide.

use std::collections::BTreeMap;
use std::sync::Arc;

use braid_rules::learn::{EnvResult, Evaluator, EvaluatorError, Job};

use super::study::LearnStudy;
use crate::param::{Params, Value};
use crate::plan::{experiment, PlannedExperiment};
use crate::runner::{self, RunOptions};
use crate::store::{ExperimentStatus, Store, StudyRecord};
use crate::study::Study;
use crate::template::builtin::adapt::Adapt;
use crate::template::Template;

/// A finished batch, for progress displays.
#[derive(Debug, Clone)]
pub struct BatchDone {
    /// The lab study the batch was stored as.
    pub study: String,
    /// Evaluations in the batch.
    pub evaluations: usize,
    /// Of those, how many failed (scored as the utility's lower bound).
    pub failed: usize,
}

/// Runs the learner's jobs as lab studies in `store`.
pub struct LabEvaluator<'a> {
    store: &'a mut Store,
    options: RunOptions,
    study: &'a LearnStudy,
    label: String,
    batch: u32,
    on_batch: &'a mut dyn FnMut(&BatchDone),
    /// Names of the lab studies this evaluator stored, in order.
    pub studies: Vec<String>,
    /// Evaluations run or read back.
    pub evaluations: u64,
    /// Evaluations with a failed run (each failed run scored 0 on every
    /// objective).
    pub failed: u64,
}

/// The mean of the repetitions' metrics: every metric any ok run recorded,
/// averaged over all `runs` (a failed run counts 0, the utility's lower
/// bound: a rule set that sometimes breaks the system pays for it).
/// `None` when every run failed.
pub fn mean_of_runs(runs: &[Option<BTreeMap<String, f64>>]) -> Option<BTreeMap<String, f64>> {
    if runs.iter().all(Option::is_none) {
        return None;
    }
    let mut sum: BTreeMap<String, f64> = BTreeMap::new();
    for r in runs.iter().flatten() {
        for (k, v) in r {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    let n = runs.len() as f64;
    Some(sum.into_iter().map(|(k, v)| (k, v / n)).collect())
}

impl<'a> LabEvaluator<'a> {
    /// An evaluator whose batches are stored as studies named
    /// `<study name>.<label>.b<NNN>`.
    pub fn new(
        store: &'a mut Store,
        options: RunOptions,
        study: &'a LearnStudy,
        label: &str,
        on_batch: &'a mut dyn FnMut(&BatchDone),
    ) -> LabEvaluator<'a> {
        LabEvaluator { store, options, study, label: label.to_string(), batch: 0, on_batch, studies: Vec::new(), evaluations: 0, failed: 0 }
    }

    fn run_batch(&mut self, pairs: &[(String, usize)]) -> Result<Vec<Option<BTreeMap<String, f64>>>, EvaluatorError> {
        let name = format!("{}.{}.b{:03}", self.study.name, self.label, self.batch);
        self.batch += 1;
        let mut rule_texts: Vec<String> = Vec::new();
        let mut links: Vec<String> = Vec::new();
        for (r, e) in pairs {
            if !rule_texts.contains(r) {
                rule_texts.push(r.clone());
            }
            let link = self.study.environment(*e).ok_or_else(|| format!("environment {e} is not in the study"))?.to_string();
            if !links.contains(&link) {
                links.push(link);
            }
        }
        let template: Arc<dyn Template> = Arc::new(Adapt);
        let mut values: Vec<(&str, Vec<Value>)> = self.study.experiment.iter().map(|(k, v)| (k.as_str(), vec![v.clone()])).collect();
        values.push(("rules", rule_texts.iter().map(|t| Value::String(t.clone())).collect()));
        values.push(("link", links.iter().map(|l| Value::Link(l.clone())).collect()));
        let most = pairs.iter().map(|(_, e)| self.study.repetitions_in(*e)).max().unwrap_or(1).max(1);
        let mut lab_study = Study::from_values(&name, template.clone(), &values, most, self.study.config.seed)?;
        lab_study.description = format!("Fossa {} batch {} of {}", self.label, self.batch - 1, self.study.name);
        let decls = template.params();
        let mut plan: Vec<PlannedExperiment> = Vec::new();
        let mut ids: Vec<Vec<String>> = Vec::with_capacity(pairs.len());
        for (r, e) in pairs {
            let mut params = Params::default();
            for d in &decls {
                params.insert(&d.name, d.default.clone());
            }
            for (k, v) in &self.study.experiment {
                params.insert(k, v.clone());
            }
            params.insert("rules", Value::String(r.clone()));
            params.insert("link", Value::Link(self.study.environment(*e).unwrap_or_default().to_string()));
            let reps = self.study.repetitions_in(*e).max(1);
            let mut rep_ids = Vec::with_capacity(reps as usize);
            for rep in 0..reps {
                let x = experiment(&lab_study, params.clone(), rep);
                rep_ids.push(x.id.clone());
                if !plan.iter().any(|p| p.id == x.id) {
                    plan.push(x);
                }
            }
            ids.push(rep_ids);
        }
        let record = StudyRecord {
            name: name.clone(),
            file_path: None,
            file_text: lab_study.text.clone(),
            template: template.name().to_string(),
            template_version: template.version(),
            params: lab_study.params.iter().map(|p| p.decl.clone()).collect(),
            planned: plan.len() as u64,
        };
        let study_id = self.store.upsert_study(&record)?;
        let lookup = move |n: &str| (n == template.name()).then(|| template.clone());
        runner::run(study_id, &plan, &lookup, &mut *self.store, &self.options)?;
        let mut out = Vec::with_capacity(ids.len());
        let mut first_error = None;
        let mut failed = 0;
        for rep_ids in &ids {
            let mut runs = Vec::with_capacity(rep_ids.len());
            for id in rep_ids {
                match self.store.experiment(id)? {
                    Some(row) if row.status == ExperimentStatus::Ok => runs.push(Some(row.scalars)),
                    Some(row) => {
                        first_error.get_or_insert_with(|| format!("experiment {id}: {}", row.error.unwrap_or_else(|| format!("{:?}", row.status))));
                        runs.push(None)
                    }
                    None => {
                        first_error.get_or_insert_with(|| format!("experiment {id} was not stored"));
                        runs.push(None)
                    }
                }
            }
            if runs.iter().any(Option::is_none) {
                failed += 1;
            }
            out.push(mean_of_runs(&runs));
        }
        self.studies.push(name.clone());
        self.evaluations += out.len() as u64;
        self.failed += failed as u64;
        (self.on_batch)(&BatchDone { study: name, evaluations: out.len(), failed });
        if out.iter().all(Option::is_none) {
            // Nothing ran: the machine cannot run the template (no root),
            // or every rule set breaks it. Learning on zeros is useless.
            return Err(format!("every evaluation of the batch failed; the first: {}", first_error.unwrap_or_default()).into());
        }
        Ok(out)
    }
}

impl Evaluator for LabEvaluator<'_> {
    fn evaluate(&mut self, jobs: &[Job<'_>]) -> Result<Vec<EnvResult>, EvaluatorError> {
        let pairs: Vec<(String, usize)> = jobs.iter().map(|j| (j.rules.to_string(), j.environment)).collect();
        let objectives = self.study.config.objectives;
        let rows = self.run_batch(&pairs)?;
        Ok(jobs
            .iter()
            .zip(rows)
            .map(|(j, row)| match row {
                // A failed run scores the utility's lower bound: a rule set
                // that breaks the system is the worst there is.
                None => EnvResult { objectives: vec![0.0; objectives], match_counts: Vec::new(), observed: Vec::new() },
                Some(s) => EnvResult {
                    objectives: (0..objectives).map(|k| s.get(&format!("objective.{k}")).copied().unwrap_or(0.0)).collect(),
                    // The mean over the repetitions, rounded up: a rule that
                    // applied in any run matched.
                    match_counts: (0..j.rules.len()).map(|i| s.get(&format!("rule_applied.{i}")).copied().unwrap_or(0.0).ceil() as u64).collect(),
                    observed: Vec::new(),
                },
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pairs: &[(&str, f64)]) -> Option<BTreeMap<String, f64>> {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    #[test]
    fn repetitions_average_and_a_failed_run_counts_zero() {
        let m = mean_of_runs(&[run(&[("objective.0", 0.6), ("rule_applied.0", 1.0)]), run(&[("objective.0", 0.8)])]).unwrap();
        assert!((m["objective.0"] - 0.7).abs() < 1e-12);
        assert!((m["rule_applied.0"] - 0.5).abs() < 1e-12);
        let m = mean_of_runs(&[run(&[("objective.0", 0.9)]), None, run(&[("objective.0", 0.9)])]).unwrap();
        assert!((m["objective.0"] - 0.6).abs() < 1e-12, "the failed run scores 0");
        assert_eq!(mean_of_runs(&[None, None]), None);
        assert_eq!(mean_of_runs(&[run(&[("utility", 0.25)])]).unwrap()["utility"], 0.25, "one run is itself");
    }
}
