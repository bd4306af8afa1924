//! Where the runner stores finished experiments: the [`ResultSink`] trait
//! (the store implements it; these calls are all the runner needs of it),
//! how a sink wants finished experiments grouped ([`Batching`]), and
//! [`MemorySink`], a sink in memory for tests and dry runs.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

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

    /// Store several finished experiments (distinct ids) together: the
    /// runner passes everything that finished while it was busy, so a sink
    /// with transactions pays one commit for the lot.
    ///
    /// A sink should store all of them or none (the store does: one
    /// transaction). This default stores them one at a time and stops at
    /// the first error, so a prefix may stay stored; resuming is correct
    /// either way, since the runner reruns only what
    /// [`stored_experiments`](Self::stored_experiments) lacks.
    fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), Self::Error> {
        batch.iter().try_for_each(|e| self.insert_experiment(study_id, e))
    }

    /// Delete the study's failed and timed-out experiments (before they
    /// are run again); returns how many.
    fn delete_failed(&mut self, study_id: i64) -> Result<u64, Self::Error>;

    /// How the runner should group finished experiments into
    /// [`insert_experiments`](Self::insert_experiments) calls. The default,
    /// [`Batching::IMMEDIATE`], suits a sink whose calls cost little beyond
    /// their rows.
    fn batching(&self) -> Batching {
        Batching::IMMEDIATE
    }
}

/// How the runner groups finished experiments into one insert: a sink
/// with a fixed cost per call (a transaction's commit) wants many
/// experiments per call, which costs latency (an experiment is done only
/// once stored) and what a crash loses (finished experiments not stored
/// yet run again on resume, never twice).
///
/// The runner keeps at most `jobs + max_experiments` experiments started
/// and not yet stored, and stores a batch as soon as it holds
/// `max_experiments` experiments or `max_records` records, its first
/// experiment has waited `max_wait`, or nothing running could join it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Experiments that may be started while finished ones wait to be
    /// stored (0: a job slot is refilled only once its experiment is
    /// stored, so a batch holds at most `jobs` experiments: those that
    /// finished during the previous insert).
    pub max_experiments: usize,
    /// Records a batch gathers at most before it is stored (bounds memory
    /// and one insert's length).
    pub max_records: usize,
    /// How long a finished experiment may wait for others to join its
    /// batch (zero: never, store what is there).
    pub max_wait: Duration,
}

impl Batching {
    /// Store what finished, at once, with job slots refilled only after
    /// their experiment is stored.
    pub const IMMEDIATE: Batching =
        Batching { max_experiments: 0, max_records: usize::MAX, max_wait: Duration::ZERO };

    /// The store's group commit. The model: one SQLite transaction
    /// (`BEGIN IMMEDIATE` … `COMMIT` in WAL mode) costs about 0.1–0.2 ms
    /// beyond its rows (the WAL frames of every page it dirtied, the
    /// locks), as much as storing three to five experiments of ten scalars
    /// (about 25 µs each), and on a loaded machine more. Bigger batches
    /// spread that fixed cost thinner but add latency, since a finished
    /// experiment waits for its whole batch to be written. The runner
    /// bench on 2 cores shared with other builds (10 scalars per
    /// experiment, scalars/s and median time to stored): 8 per transaction
    /// 180,000/s and 0.2 ms; 64: 270,000–390,000/s, 1.2 ms; 128:
    /// 275,000–400,000/s, 2.3 ms; 512: 340,000–440,000/s, 8–12 ms; 2,048:
    /// no better, 38–46 ms. 512 keeps a margin over the 200,000/s goal on
    /// a busy machine at a latency no experiment lasting more than a few
    /// milliseconds notices, and what a `kill -9` loses is rerun in
    /// milliseconds. Waiting up to 5 ms for a batch to fill costs short
    /// experiments at most that (none when nothing running can join the
    /// batch: the last experiments, an exclusive one); 100,000 records
    /// bound a batch of long series.
    pub const GROUP_COMMIT: Batching =
        Batching { max_experiments: 512, max_records: 100_000, max_wait: Duration::from_millis(5) };
}

impl ResultSink for crate::store::Store {
    type Error = crate::store::StoreError;

    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, Self::Error> {
        crate::store::Store::stored_experiments(self, study_id)
    }

    fn insert_experiment(&mut self, study_id: i64, experiment: &FinishedExperiment) -> Result<(), Self::Error> {
        crate::store::Store::insert_experiment(self, study_id, experiment)
    }

    fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), Self::Error> {
        crate::store::Store::insert_experiments(self, study_id, batch)
    }

    fn delete_failed(&mut self, study_id: i64) -> Result<u64, Self::Error> {
        crate::store::Store::delete_failed(self, study_id)
    }

    fn batching(&self) -> Batching {
        Batching::GROUP_COMMIT
    }
}

/// Finished experiments kept in memory, in the order they were stored.
#[derive(Debug, Default)]
pub struct MemorySink {
    stored: Vec<(i64, FinishedExperiment)>,
    /// The ids in `stored`, by study: refusing a duplicate must not cost a
    /// scan of everything stored (a study has tens of thousands).
    ids: HashMap<i64, HashSet<String>>,
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

    /// Keeping experiments costs nothing per call: no waiting, but the job
    /// slots are refilled while finished experiments wait for the runner
    /// to store them.
    fn batching(&self) -> Batching {
        Batching { max_experiments: 256, max_records: usize::MAX, max_wait: Duration::ZERO }
    }

    fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, MemorySinkError> {
        Ok(self.experiments(study_id).map(|e| (e.planned.id.clone(), e.status)).collect())
    }

    fn insert_experiment(&mut self, study_id: i64, experiment: &FinishedExperiment) -> Result<(), MemorySinkError> {
        self.insert_experiments(study_id, std::slice::from_ref(experiment))
    }

    /// All or none: an id already stored, or twice in `batch`, refuses the
    /// whole batch.
    fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), MemorySinkError> {
        let stored = self.ids.get(&study_id);
        let mut seen = HashSet::with_capacity(batch.len());
        for e in batch {
            let id = e.planned.id.as_str();
            if !seen.insert(id) || stored.is_some_and(|ids| ids.contains(id)) {
                return Err(MemorySinkError { study_id, id: id.to_string() });
            }
        }
        self.ids.entry(study_id).or_default().extend(batch.iter().map(|e| e.planned.id.clone()));
        self.stored.extend(batch.iter().map(|e| (study_id, e.clone())));
        Ok(())
    }

    fn delete_failed(&mut self, study_id: i64) -> Result<u64, MemorySinkError> {
        let before = self.stored.len();
        let ids = self.ids.entry(study_id).or_default();
        self.stored.retain(|(s, e)| {
            let keep = *s != study_id || matches!(e.status, ExperimentStatus::Ok);
            if !keep {
                ids.remove(&e.planned.id);
            }
            keep
        });
        Ok((before - self.stored.len()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;
    use crate::plan::PlannedExperiment;
    use std::time::Duration;

    fn finished(id: &str, status: ExperimentStatus) -> FinishedExperiment {
        FinishedExperiment {
            planned: PlannedExperiment {
                id: id.into(),
                template: "t".into(),
                template_version: 1,
                params: Params::default(),
                repetition: 0,
                seed: 0,
                timeout: Duration::from_secs(1),
                exclusive: false,
                expected: Duration::from_millis(1),
            },
            status,
            exit_code: None,
            error: None,
            stderr_tail: String::new(),
            started: 0.0,
            ended: 0.0,
            host: "h".into(),
            braid_version: "0".into(),
            git_commit: "0".into(),
            records: Vec::new(),
        }
    }

    fn ids(sink: &MemorySink, study: i64) -> Vec<&str> {
        sink.experiments(study).map(|e| e.planned.id.as_str()).collect()
    }

    #[test]
    fn a_batch_is_stored_whole_or_not_at_all() {
        let mut sink = MemorySink::default();
        let ok = ExperimentStatus::Ok;
        sink.insert_experiments(1, &[finished("a", ok), finished("b", ok)]).unwrap();
        // "b" is stored already: "c" is not stored either.
        let err = sink.insert_experiments(1, &[finished("c", ok), finished("b", ok)]).unwrap_err();
        assert_eq!(err, MemorySinkError { study_id: 1, id: "b".into() });
        // Twice in one batch.
        let err = sink.insert_experiments(1, &[finished("d", ok), finished("d", ok)]).unwrap_err();
        assert_eq!(err.id, "d");
        assert_eq!(ids(&sink, 1), ["a", "b"]);
        // Another study is its own; one at a time goes the same way.
        sink.insert_experiments(2, &[finished("a", ok)]).unwrap();
        assert!(sink.insert_experiment(2, &finished("a", ok)).is_err());
        assert_eq!(ids(&sink, 2), ["a"]);
    }

    #[test]
    fn a_deleted_failure_can_be_stored_again() {
        let mut sink = MemorySink::default();
        sink.insert_experiments(1, &[finished("a", ExperimentStatus::Ok), finished("f", ExperimentStatus::Failed)])
            .unwrap();
        sink.insert_experiment(2, &finished("f", ExperimentStatus::TimedOut)).unwrap();
        assert!(sink.insert_experiment(1, &finished("f", ExperimentStatus::Ok)).is_err());
        assert_eq!(sink.delete_failed(1).unwrap(), 1);
        sink.insert_experiment(1, &finished("f", ExperimentStatus::Ok)).unwrap();
        assert!(sink.insert_experiment(1, &finished("a", ExperimentStatus::Ok)).is_err());
        // Study 2's failure is untouched.
        assert!(sink.insert_experiment(2, &finished("f", ExperimentStatus::Ok)).is_err());
        assert_eq!(ids(&sink, 1), ["a", "f"]);
    }
}
