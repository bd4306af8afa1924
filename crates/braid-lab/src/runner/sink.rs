//! Where the runner stores finished experiments: the [`ResultSink`] trait
//! (the store implements it; these three calls are all the runner needs of
//! it) and [`MemorySink`], a sink in memory for tests and dry runs.

use std::collections::HashMap;

use super::store_api::{ExperimentStatus, FinishedExperiment};

/// What the runner needs of the store.
pub trait ResultSink {
    /// The sink's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Every experiment stored for `study_id`, by id, with its status.
    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, Self::Error>;

    /// Store one finished experiment. Must refuse an id already stored for
    /// the study ("never stored twice").
    fn insert_experiment(&mut self, study_id: i64, experiment: &FinishedExperiment) -> Result<(), Self::Error>;

    /// Delete the study's failed and timed-out experiments (before they
    /// are run again); returns how many.
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, Self::Error>;
}

impl ResultSink for crate::store::Store {
    type Error = crate::store::StoreError;

    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, Self::Error> {
        crate::store::Store::stored_experiments(self, study_id)
    }

    fn insert_experiment(&mut self, study_id: i64, experiment: &FinishedExperiment) -> Result<(), Self::Error> {
        crate::store::Store::insert_experiment(self, study_id, experiment)
    }

    fn delete_failed(&mut self, study_id: i64) -> Result<u64, Self::Error> {
        crate::store::Store::delete_failed(self, study_id)
    }
}

/// Finished experiments kept in memory, in the order they were stored.
#[derive(Debug, Default)]
pub struct MemorySink {
    stored: Vec<(i64, FinishedExperiment)>,
}

/// [`MemorySink`] refused an insert.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("experiment {id} is already stored for study {study_id}")]
pub struct MemorySinkError {
    /// The study.
    pub study_id: i64,
    /// The experiment.
    pub id: String,
}

impl MemorySink {
    /// The experiments stored for `study_id`, in the order they were stored.
    pub fn experiments(&self, study_id: i64) -> impl Iterator<Item = &FinishedExperiment> {
        self.stored.iter().filter(move |(s, _)| *s == study_id).map(|(_, e)| e)
    }

    /// The stored experiment `id` of `study_id`.
    pub fn get(&self, study_id: i64, id: &str) -> Option<&FinishedExperiment> {
        self.experiments(study_id).find(|e| e.planned.id == id)
    }
}

impl ResultSink for MemorySink {
    type Error = MemorySinkError;

    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, MemorySinkError> {
        Ok(self.experiments(study_id).map(|e| (e.planned.id.clone(), e.status)).collect())
    }

    fn insert_experiment(&mut self, study_id: i64, experiment: &FinishedExperiment) -> Result<(), MemorySinkError> {
        if self.get(study_id, &experiment.planned.id).is_some() {
            return Err(MemorySinkError { study_id, id: experiment.planned.id.clone() });
        }
        self.stored.push((study_id, experiment.clone()));
        Ok(())
    }

    fn delete_failed(&mut self, study_id: i64) -> Result<u64, MemorySinkError> {
        let before = self.stored.len();
        self.stored.retain(|(s, e)| *s != study_id || matches!(e.status, ExperimentStatus::Ok));
        Ok((before - self.stored.len()) as u64)
    }
}
