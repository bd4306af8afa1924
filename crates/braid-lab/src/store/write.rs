//! The writer's side: registering studies, storing finished experiments,
//! clearing failures, logging. Only the runner calls these.

use std::collections::HashMap;

use rusqlite::{params, CachedStatement, OptionalExtension, Transaction, TransactionBehavior};

use super::model::{ExperimentStatus, FinishedExperiment, StudyRecord};
use super::{now, u64_bits, Store, StoreError};
use crate::record::Record;

impl Store {
    /// Register a study by name, or update it: file path and text, template,
    /// declared parameters and planned count. Every distinct file text is
    /// kept (`study_files`), and experiments point at the one they ran
    /// under, so updating a study loses nothing. Returns the study's id.
    pub fn upsert_study(&mut self, s: &StudyRecord) -> Result<i64, StoreError> {
        let params_json =
            serde_json::to_string(&s.params).map_err(|e| self.bad_data(format!("params of study {}", s.name), e))?;
        let planned = i64::try_from(s.planned).unwrap_or(i64::MAX);
        let hash = blake3::hash(s.file_text.as_bytes()).to_hex().to_string();
        let t = now();
        let path = self.path.clone();
        let busy = self.busy_timeout;
        let run = |tx: &Transaction<'_>| -> rusqlite::Result<i64> {
            tx.execute(
                "INSERT INTO studies (name, file_path, file_text, template, template_version, params_json, planned, created, updated)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)
                 ON CONFLICT (name) DO UPDATE SET file_path = excluded.file_path, file_text = excluded.file_text,
                     template = excluded.template, template_version = excluded.template_version,
                     params_json = excluded.params_json, planned = excluded.planned, updated = excluded.updated",
                params![s.name, s.file_path, s.file_text, s.template, s.template_version, params_json, planned, t],
            )?;
            let id: i64 = tx.query_row("SELECT id FROM studies WHERE name = ?1", [&s.name], |r| r.get(0))?;
            tx.execute(
                "INSERT INTO study_files (study_id, hash, file_text, first_seen) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (study_id, hash) DO NOTHING",
                params![id, hash, s.file_text, t],
            )?;
            Ok(id)
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| super::error::classify(&path, busy, e))?;
        let id = run(&tx).map_err(|e| super::error::classify(&path, busy, e))?;
        tx.commit().map_err(|e| super::error::classify(&path, busy, e))?;
        Ok(id)
    }

    /// Store a finished experiment in one transaction: its row, parameters,
    /// scalars, series points, warnings and artifacts.
    ///
    /// An id already stored as failed or timed out is replaced (a retry);
    /// one stored as ok is refused with [`StoreError::Duplicate`], one
    /// stored under another study with [`StoreError::IdInOtherStudy`].
    /// A metric reported twice keeps its last value and gains a warning
    /// saying so; a non-finite value becomes a warning (SQLite would store
    /// NaN as NULL).
    pub fn insert_experiment(&mut self, study_id: i64, e: &FinishedExperiment) -> Result<(), StoreError> {
        self.insert_experiments(study_id, std::slice::from_ref(e))
    }

    /// [`insert_experiment`](Self::insert_experiment) for several
    /// experiments in one transaction (all or none are stored): a runner
    /// that finishes many short experiments at once saves a commit each.
    pub fn insert_experiments(&mut self, study_id: i64, batch: &[FinishedExperiment]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let busy = self.busy_timeout;
        let cls = |e| super::error::classify(&path, busy, e);
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(cls)?;
        let study_file: Option<Option<i64>> = tx
            .prepare_cached(
                "SELECT (SELECT max(f.id) FROM study_files f WHERE f.study_id = s.id) FROM studies s WHERE s.id = ?1",
            )
            .and_then(|mut st| st.query_row([study_id], |r| r.get(0)).optional())
            .map_err(cls)?;
        let Some(study_file) = study_file else {
            return Err(StoreError::UnknownStudy(study_id));
        };
        {
            // Looked up once per batch, not once per experiment and table.
            let mut statements = Statements::prepare(&tx).map_err(cls)?;
            let mut scratch = Scratch::default();
            for e in batch {
                insert_one(&tx, &mut statements, &mut scratch, study_id, study_file, e).map_err(|err| match err {
                    InsertError::Sqlite(s) => cls(s),
                    InsertError::Store(s) => s,
                    InsertError::Json(j) => StoreError::BadData {
                        path: path.clone(),
                        what: format!("params of experiment {}", e.planned.id),
                        detail: j.to_string(),
                    },
                })?;
            }
        }
        tx.commit().map_err(cls)?;
        Ok(())
    }

    /// Delete a study's failed and timed-out experiments (with their
    /// records), so the runner runs them again. Returns how many.
    pub fn delete_failed(&mut self, study_id: i64) -> Result<u64, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM experiments WHERE study_id = ?1 AND status IN ('failed', 'timeout')", [study_id])
            .map_err(|e| self.err(e))?;
        Ok(n as u64)
    }

    /// Append a line to the runner's log.
    pub fn log(
        &mut self,
        study_id: Option<i64>,
        experiment: Option<&str>,
        level: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT INTO logs (study_id, experiment, time, level, message) VALUES (?1, ?2, ?3, ?4, ?5)")
            .and_then(|mut st| st.execute(params![study_id, experiment, now(), level, message]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

enum InsertError {
    Sqlite(rusqlite::Error),
    Store(StoreError),
    Json(serde_json::Error),
}

impl From<rusqlite::Error> for InsertError {
    fn from(e: rusqlite::Error) -> Self {
        InsertError::Sqlite(e)
    }
}

const INSERT_EXPERIMENT: &str =
    "INSERT INTO experiments (id, study_id, study_file, template, template_version, params_json, repetition, seed,
         timeout_s, exclusive, expected_s, status, exit_code, error, stderr_tail, started, ended, host,
         braid_version, git_commit)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)
     ON CONFLICT (id) DO NOTHING";

/// The statements storing an experiment, prepared (from the cache) once
/// per batch.
struct Statements<'c> {
    experiment: CachedStatement<'c>,
    params: CachedStatement<'c>,
    scalars: CachedStatement<'c>,
    series: CachedStatement<'c>,
    warnings: CachedStatement<'c>,
}

impl<'c> Statements<'c> {
    fn prepare(tx: &'c Transaction<'_>) -> rusqlite::Result<Statements<'c>> {
        Ok(Statements {
            experiment: tx.prepare_cached(INSERT_EXPERIMENT)?,
            params: tx
                .prepare_cached("INSERT INTO params (experiment, key, text_value, num_value) VALUES (?1, ?2, ?3, ?4)")?,
            scalars: tx.prepare_cached("INSERT INTO scalars (experiment, metric, value) VALUES (?1, ?2, ?3)")?,
            series: tx
                .prepare_cached("INSERT INTO series (experiment, name, seq, t, value) VALUES (?1, ?2, ?3, ?4, ?5)")?,
            warnings: tx.prepare_cached("INSERT INTO warnings (experiment, seq, message) VALUES (?1, ?2, ?3)")?,
        })
    }
}

/// Per-experiment working space, reused across a batch (cleared, its
/// allocations kept).
#[derive(Default)]
struct Scratch<'a> {
    /// The scalars in first-reported order, with their last value.
    scalars: Vec<(&'a str, f64)>,
    /// Where each metric is in `scalars`.
    scalar_at: HashMap<&'a str, usize>,
    /// Metrics reported more than once, and how often.
    repeated: Vec<(&'a str, u32)>,
    /// The next sequence number of each series.
    series_seq: HashMap<&'a str, i64>,
    warnings: Vec<String>,
    artifacts: Vec<(&'a str, &'a serde_json::Value)>,
}

impl Scratch<'_> {
    fn clear(&mut self) {
        self.scalars.clear();
        self.scalar_at.clear();
        self.repeated.clear();
        self.series_seq.clear();
        self.warnings.clear();
        self.artifacts.clear();
    }
}

fn insert_one<'a>(
    tx: &Transaction<'_>,
    st: &mut Statements<'_>,
    scratch: &mut Scratch<'a>,
    study_id: i64,
    study_file: Option<i64>,
    e: &'a FinishedExperiment,
) -> Result<(), InsertError> {
    let p = &e.planned;
    let params_json = serde_json::to_string(&p.params).map_err(InsertError::Json)?;
    // Insert first and look at what is stored only on a conflict: the
    // common case costs one statement, not two.
    let insert = |st: &mut Statements<'_>| -> rusqlite::Result<usize> {
        st.experiment.execute(params![
            p.id,
            study_id,
            study_file,
            p.template,
            p.template_version,
            params_json,
            p.repetition,
            u64_bits(p.seed),
            p.timeout.as_secs_f64(),
            p.exclusive,
            p.expected.as_secs_f64(),
            e.status.as_str(),
            e.exit_code,
            e.error,
            e.stderr_tail,
            e.started,
            e.ended,
            e.host,
            e.braid_version,
            e.git_commit,
        ])
    };
    if insert(st)? == 0 {
        let (pk, stored_study, status, study_name): (i64, i64, String, String) = tx
            .prepare_cached(
                "SELECT e.pk, e.study_id, e.status, s.name FROM experiments e JOIN studies s ON s.id = e.study_id
                 WHERE e.id = ?1",
            )?
            .query_row([&p.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        if stored_study != study_id {
            return Err(InsertError::Store(StoreError::IdInOtherStudy { id: p.id.clone(), other_study: study_name }));
        }
        if ExperimentStatus::parse(&status) == Some(ExperimentStatus::Ok) {
            return Err(InsertError::Store(StoreError::Duplicate(p.id.clone())));
        }
        // A retry of a failure: its rows go (ON DELETE CASCADE), the new
        // ones take their place.
        tx.prepare_cached("DELETE FROM experiments WHERE pk = ?1")?.execute([pk])?;
        insert(st)?;
    }
    let pk = tx.last_insert_rowid();

    for (key, value) in p.params.iter() {
        st.params.execute(params![pk, key, value.to_text(), value.as_f64().filter(|v| v.is_finite())])?;
    }

    // Sort the records out first: the last value of a metric wins, and
    // what cannot be stored becomes a warning.
    scratch.clear();
    for r in &e.records {
        match r {
            Record::Metric { name, value } if value.is_finite() => match scratch.scalar_at.get(name.as_str()) {
                Some(&i) => {
                    scratch.scalars[i].1 = *value;
                    match scratch.repeated.iter_mut().find(|(n, _)| *n == name.as_str()) {
                        Some((_, times)) => *times += 1,
                        None => scratch.repeated.push((name.as_str(), 2)),
                    }
                }
                None => {
                    scratch.scalar_at.insert(name.as_str(), scratch.scalars.len());
                    scratch.scalars.push((name.as_str(), *value));
                }
            },
            Record::Metric { name, value } => scratch.warnings.push(format!("metric {name} is {value}, not stored")),
            Record::Series { name, t, value } if value.is_finite() && t.is_finite() => {
                let seq = scratch.series_seq.entry(name.as_str()).or_insert(0);
                st.series.execute(params![pk, name, *seq, t, value])?;
                *seq += 1;
            }
            Record::Series { name, t, value } => {
                scratch.warnings.push(format!("series {name} at t={t} is {value}, not stored"))
            }
            Record::Warn { warn } => scratch.warnings.push(warn.clone()),
            Record::Artifact { artifact, json } => scratch.artifacts.push((artifact.as_str(), json)),
        }
    }
    scratch.repeated.sort_unstable();
    for &(name, n) in &scratch.repeated {
        scratch.warnings.push(format!("metric {name} was reported {n} times; the last value is stored"));
    }
    for (metric, value) in &scratch.scalars {
        st.scalars.execute(params![pk, metric, value])?;
    }
    for (i, w) in scratch.warnings.iter().enumerate() {
        st.warnings.execute(params![pk, i as i64, w])?;
    }
    if !scratch.artifacts.is_empty() {
        let mut artifacts =
            tx.prepare_cached("INSERT INTO artifacts (experiment, seq, name, json) VALUES (?1, ?2, ?3, ?4)")?;
        for (i, (name, json)) in scratch.artifacts.iter().enumerate() {
            artifacts.execute(params![pk, i as i64, name, json.to_string()])?;
        }
    }
    Ok(())
}
