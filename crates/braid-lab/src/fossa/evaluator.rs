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
    /// Evaluations that failed (each scored 0 on every objective).
    pub failed: u64,
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
        let mut lab_study = Study::from_values(&name, template.clone(), &values, 1, self.study.config.seed)?;
        lab_study.description = format!("Fossa {} batch {} of {}", self.label, self.batch - 1, self.study.name);
        let decls = template.params();
        let mut plan: Vec<PlannedExperiment> = Vec::new();
        let mut ids = Vec::with_capacity(pairs.len());
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
            let x = experiment(&lab_study, params, 0);
            ids.push(x.id.clone());
            if !plan.iter().any(|p| p.id == x.id) {
                plan.push(x);
            }
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
        for id in &ids {
            match self.store.experiment(id)? {
                Some(row) if row.status == ExperimentStatus::Ok => out.push(Some(row.scalars)),
                Some(row) => {
                    first_error.get_or_insert_with(|| format!("experiment {id}: {}", row.error.unwrap_or_else(|| format!("{:?}", row.status))));
                    out.push(None)
                }
                None => {
                    first_error.get_or_insert_with(|| format!("experiment {id} was not stored"));
                    out.push(None)
                }
            }
        }
        let failed = out.iter().filter(|o| o.is_none()).count();
        self.studies.push(name.clone());
        self.evaluations += out.len() as u64;
        self.failed += failed as u64;
        (self.on_batch)(&BatchDone { study: name, evaluations: out.len(), failed });
        if failed == out.len() {
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
                    match_counts: (0..j.rules.len()).map(|i| s.get(&format!("rule_applied.{i}")).copied().unwrap_or(0.0) as u64).collect(),
                    observed: Vec::new(),
                },
            })
            .collect())
    }
}
