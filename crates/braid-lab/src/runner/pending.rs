//! Which of a plan's experiments a run starts, for both executors: those
//! not stored yet and, with `--retry-failed`, the stored failures; each
//! once (a plan may list an id twice), in the plan's order, so a resumed
//! run picks up where the killed one stopped.

use std::collections::{HashMap, HashSet};

use super::store_api::ExperimentStatus;
use crate::plan::PlannedExperiment;

/// The experiments to run and what the run summary says of the rest.
pub(crate) struct Pending<'a> {
    /// To run, in plan order.
    pub experiments: Vec<&'a PlannedExperiment>,
    /// Distinct experiments in the plan.
    pub planned: usize,
    /// Stored already and not retried.
    pub skipped: usize,
    /// Whether a stored failure is among `experiments` (its old row must be
    /// deleted before the run stores the new one).
    pub retry: bool,
}

/// The plan's experiments against what `stored` holds.
pub(crate) fn pending<'a>(
    plan: &'a [PlannedExperiment],
    stored: &HashMap<String, ExperimentStatus>,
    retry_failed: bool,
) -> Pending<'a> {
    let mut seen = HashSet::new();
    let mut p = Pending { experiments: Vec::new(), planned: 0, skipped: 0, retry: false };
    for e in plan {
        if !seen.insert(e.id.as_str()) {
            continue;
        }
        match stored.get(&e.id) {
            None => p.experiments.push(e),
            Some(ExperimentStatus::Ok) => p.skipped += 1,
            Some(_) if retry_failed => {
                p.retry = true;
                p.experiments.push(e);
            }
            Some(_) => p.skipped += 1,
        }
    }
    p.planned = seen.len();
    p
}
