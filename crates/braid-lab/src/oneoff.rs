//! Small studies run from code: what `braid bench ...` commands use.
//!
//! A bench command is a small study (errata to issue 15, item 6): a
//! template and a list of experiments (each a few parameter values over the
//! template's defaults), run through the lab, with every experiment's
//! records handed back so the command can print its table and JSON.
//!
//! ```
//! use braid_lab::oneoff::{run_experiments, OneOffOptions};
//! use braid_lab::param::Value;
//! use braid_lab::template::find_builtin;
//! # let Some(template) = find_builtin("sim-transfer") else { return };
//! let runs = run_experiments(
//!     template,
//!     vec![vec![("bytes".to_string(), Value::Size(100_000))]],
//!     &OneOffOptions::default(),
//! )
//! .unwrap();
//! assert!(runs[0].ok());
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::param::{Params, Value};
use crate::plan::{experiment, experiment_id, PlannedExperiment};
use crate::record::Record;
use crate::runner::{self, MemorySink, RunOptions};
use crate::store::ExperimentStatus;
use crate::study::Study;
use crate::template::Template;

/// How to run.
#[derive(Debug, Clone)]
pub struct OneOffOptions {
    /// Seed of the first experiment (the i-th gets `seed + i`).
    pub seed: u64,
    /// Per-experiment timeout (default: 10 × the template's expected
    /// duration, at least 60 s).
    pub timeout: Option<Duration>,
}

impl Default for OneOffOptions {
    fn default() -> Self {
        OneOffOptions { seed: 1, timeout: None }
    }
}

/// One experiment's outcome.
#[derive(Debug, Clone)]
pub struct OneOffResult {
    /// Every parameter's value.
    pub params: Params,
    /// `None` if it succeeded, else why it failed.
    pub error: Option<String>,
    /// What it recorded.
    pub records: Vec<Record>,
}

impl OneOffResult {
    /// It ran to the end.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// The last value recorded for `metric`.
    pub fn metric(&self, metric: &str) -> Option<f64> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Metric { name, value } if name == metric => Some(*value),
            _ => None,
        })
    }

    /// The points of series `series`, in recording order.
    pub fn series(&self, series: &str) -> Vec<(f64, f64)> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Series { name, t, value } if name == series => Some((*t, *value)),
                _ => None,
            })
            .collect()
    }

    /// The artifact named `name`.
    pub fn artifact(&self, name: &str) -> Option<&serde_json::Value> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Artifact { artifact, json } if artifact == name => Some(json),
            _ => None,
        })
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &str> {
        self.records.iter().filter_map(|r| match r {
            Record::Warn { warn } => Some(warn.as_str()),
            _ => None,
        })
    }
}

/// A one-off study that could not start.
#[derive(Debug, thiserror::Error)]
pub enum OneOffError {
    /// A parameter the template does not declare, or a value of the wrong
    /// type.
    #[error("template {template}: {why}")]
    Param {
        /// The template.
        template: String,
        /// What is wrong.
        why: String,
    },
    /// Creating the experiments' work directory failed.
    #[error("work directory: {0}")]
    Io(#[from] std::io::Error),
    /// The runner could not go on.
    #[error("{0}")]
    Run(String),
}

/// Run `experiments` (each: parameter values over the template's
/// defaults) one after the other, through the lab's runner (in process,
/// one at a time, in the given order), and return their outcomes in order.
/// A failing experiment is reported in its result, not as an error: the
/// others still run. The i-th experiment's seed is `options.seed + i`, so
/// a bench's `--seed` means what it meant before the lab.
pub fn run_experiments(
    template: Arc<dyn Template>,
    experiments: Vec<Vec<(String, Value)>>,
    options: &OneOffOptions,
) -> Result<Vec<OneOffResult>, OneOffError> {
    run_experiments_with_progress(template, experiments, options, false)
}

/// [`run_experiments`], with the runner's progress bar on stderr (done,
/// failed, running, ETA) when `show_progress` and stderr is a terminal.
pub fn run_experiments_with_progress(
    template: Arc<dyn Template>,
    experiments: Vec<Vec<(String, Value)>>,
    options: &OneOffOptions,
    show_progress: bool,
) -> Result<Vec<OneOffResult>, OneOffError> {
    let name = format!("bench-{}", template.name());
    let param_error = |why: String| OneOffError::Param { template: template.name().into(), why };
    let study = Study::from_values(&name, template.clone(), &[], 1, 0).map_err(|e| param_error(e.to_string()))?;
    let decls = template.params();
    let mut plan: Vec<PlannedExperiment> = Vec::with_capacity(experiments.len());
    for (i, values) in experiments.into_iter().enumerate() {
        let mut params = Params::default();
        for d in &decls {
            params.insert(&d.name, d.default.clone());
        }
        for (key, value) in values {
            let Some(d) = decls.iter().find(|d| d.name == key) else {
                let known: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
                return Err(param_error(format!("unknown parameter `{key}` (parameters: {})", known.join(", "))));
            };
            // The value must be one the declared type accepts.
            d.ty.parse_text(&value.to_text()).map_err(|why| param_error(format!("parameter `{key}`: {why}")))?;
            params.insert(&key, value);
        }
        // The same parameters again (a bench's rounds) are repetitions.
        let repetition = plan.iter().filter(|p| p.params == params).count() as u32;
        let mut e = experiment(&study, params, repetition);
        e.seed = options.seed.wrapping_add(i as u64);
        e.id = experiment_id(&name, &e.template, e.template_version, &e.params.identity(&decls), repetition, e.seed);
        e.timeout = options.timeout.unwrap_or_else(|| (e.expected * 10).max(Duration::from_secs(60)));
        // One at a time and in order: a bench interleaves its peers.
        e.exclusive = true;
        plan.push(e);
    }
    let work_root = tempdir()?;
    let mut run_options = RunOptions::new(&work_root);
    run_options.jobs = 1;
    run_options.show_progress = show_progress;
    let mut sink = MemorySink::default();
    let lookup = {
        let template = template.clone();
        move |n: &str| (n == template.name()).then(|| template.clone())
    };
    let outcome = runner::run(0, &plan, &lookup, &mut sink, &run_options);
    let _ = std::fs::remove_dir_all(&work_root);
    outcome.map_err(|e| OneOffError::Run(e.to_string()))?;
    Ok(plan
        .into_iter()
        .map(|p| match sink.get(0, &p.id) {
            Some(done) => OneOffResult {
                params: p.params,
                error: match done.status {
                    ExperimentStatus::Ok => None,
                    _ => Some(done.error.clone().unwrap_or_else(|| format!("{:?}", done.status))),
                },
                records: done.records.clone(),
            },
            None => OneOffResult { params: p.params, error: Some("not run".into()), records: Vec::new() },
        })
        .collect())
}

fn tempdir() -> std::io::Result<std::path::PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("braid-oneoff-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
