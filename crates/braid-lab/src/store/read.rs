//! The read API that analysis and the web UI share: studies with their
//! counts, a study's experiments, parameter values, metric and series
//! names, one experiment's series. (Scalars by metric, grouped by
//! parameters: [`ScalarQuery`](super::ScalarQuery).)

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rusqlite::{OptionalExtension, Row};

use super::model::{
    sort_values, ExperimentRow, ExperimentStatus, LogRow, ParamValueCount, ParamValues, StatusCounts, StudyInfo,
};
use super::{bits_u64, Store, StoreError};
use crate::param::{ParamDecl, Params};

const EXPERIMENT_COLUMNS: &str = "e.pk, e.id, e.study_id, s.name, e.template, e.template_version, e.params_json,
    e.repetition, e.seed, e.timeout_s, e.exclusive, e.expected_s, e.status, e.exit_code, e.error, e.stderr_tail,
    e.started, e.ended, e.host, e.braid_version, e.git_commit";

/// An experiment row as read, before its JSON and status are checked.
struct RawExperiment {
    pk: i64,
    row: ExperimentRow,
    params_json: String,
    status: String,
}

fn raw_experiment(r: &Row<'_>) -> rusqlite::Result<RawExperiment> {
    Ok(RawExperiment {
        pk: r.get(0)?,
        params_json: r.get(6)?,
        status: r.get(12)?,
        row: ExperimentRow {
            id: r.get(1)?,
            study_id: r.get(2)?,
            study: r.get(3)?,
            template: r.get(4)?,
            template_version: r.get(5)?,
            params: Params::default(),
            repetition: r.get(7)?,
            seed: bits_u64(r.get(8)?),
            timeout_s: r.get(9)?,
            exclusive: r.get(10)?,
            expected_s: r.get(11)?,
            status: ExperimentStatus::Failed,
            exit_code: r.get(13)?,
            error: r.get(14)?,
            stderr_tail: r.get(15)?,
            started: r.get(16)?,
            ended: r.get(17)?,
            host: r.get(18)?,
            braid_version: r.get(19)?,
            git_commit: r.get(20)?,
            scalars: BTreeMap::new(),
            warnings: Vec::new(),
        },
    })
}

impl Store {
    /// The id of the study called `name`.
    pub fn study_id(&self, name: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .prepare_cached("SELECT id FROM studies WHERE name = ?1")
            .and_then(|mut st| st.query_row([name], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }

    /// Every stored experiment of a study and its status: what resume
    /// skips.
    pub fn stored_experiments(&self, study_id: i64) -> Result<HashMap<String, ExperimentStatus>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT id, status FROM experiments WHERE study_id = ?1")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([study_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out = HashMap::new();
        for row in rows {
            let (id, status) = row.map_err(|e| self.err(e))?;
            out.insert(id.clone(), self.status(&id, &status)?);
        }
        Ok(out)
    }

    /// One stored experiment, with its scalars and warnings: for
    /// `braid lab rerun` and drill-down.
    pub fn experiment(&self, id: &str) -> Result<Option<ExperimentRow>, StoreError> {
        let sql = format!(
            "SELECT {EXPERIMENT_COLUMNS} FROM experiments e JOIN studies s ON s.id = e.study_id WHERE e.id = ?1"
        );
        let raw = self
            .conn
            .prepare_cached(&sql)
            .and_then(|mut st| st.query_row([id], raw_experiment).optional())
            .map_err(|e| self.err(e))?;
        self.whole(raw)
    }

    /// [`experiment`](Self::experiment) by row key (a page of the
    /// experiment table).
    pub(super) fn experiment_by_pk(&self, pk: i64) -> Result<Option<ExperimentRow>, StoreError> {
        let sql = format!(
            "SELECT {EXPERIMENT_COLUMNS} FROM experiments e JOIN studies s ON s.id = e.study_id WHERE e.pk = ?1"
        );
        let raw = self
            .conn
            .prepare_cached(&sql)
            .and_then(|mut st| st.query_row([pk], raw_experiment).optional())
            .map_err(|e| self.err(e))?;
        self.whole(raw)
    }

    /// An experiment row with its scalars and warnings.
    fn whole(&self, raw: Option<RawExperiment>) -> Result<Option<ExperimentRow>, StoreError> {
        let Some(raw) = raw else { return Ok(None) };
        let pk = raw.pk;
        let mut row = self.finish_row(raw)?;
        row.scalars = self
            .collect_by_experiment("SELECT experiment, metric, value FROM scalars WHERE experiment = ?1", pk, |r| {
                Ok((r.get::<_, String>(1)?, r.get::<_, f64>(2)?))
            })?
            .into_iter()
            .collect();
        row.warnings = self.collect_by_experiment(
            "SELECT experiment, message FROM warnings WHERE experiment = ?1 ORDER BY seq",
            pk,
            |r| r.get::<_, String>(1),
        )?;
        Ok(Some(row))
    }

    /// Every stored study with its counts by status, by name.
    pub fn studies(&self) -> Result<Vec<StudyInfo>, StoreError> {
        self.study_infos(None)
    }

    /// The study called `name`, with its counts.
    pub fn study(&self, name: &str) -> Result<Option<StudyInfo>, StoreError> {
        Ok(self.study_infos(Some(name))?.into_iter().next())
    }

    fn study_infos(&self, only: Option<&str>) -> Result<Vec<StudyInfo>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id, name, file_path, file_text, template, template_version, params_json, planned, created, updated
                 FROM studies WHERE ?1 IS NULL OR name = ?1 ORDER BY name",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([only], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, u32>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, f64>(8)?,
                    r.get::<_, f64>(9)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, name, file_path, file_text, template, template_version, params_json, planned, created, updated) =
                row.map_err(|e| self.err(e))?;
            let params: Vec<ParamDecl> = serde_json::from_str(&params_json)
                .map_err(|e| self.bad_data(format!("parameters of study {name}"), e))?;
            out.push(StudyInfo {
                id,
                name,
                file_path,
                file_text,
                template,
                template_version,
                params,
                planned: u64::try_from(planned).unwrap_or(0),
                created,
                updated,
                counts: self.counts(id)?,
            });
        }
        Ok(out)
    }

    /// A study's stored experiments by status.
    pub fn counts(&self, study_id: i64) -> Result<StatusCounts, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT status, count(*) FROM experiments WHERE study_id = ?1 GROUP BY status")
            .map_err(|e| self.err(e))?;
        let rows =
            st.query_map([study_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(|e| self.err(e))?;
        let mut counts = StatusCounts::default();
        for row in rows {
            let (status, n) = row.map_err(|e| self.err(e))?;
            counts.add(self.status(&format!("status count of study {study_id}"), &status)?, n as u64);
        }
        Ok(counts)
    }

    /// A study's experiments (every status) with their parameters, scalars
    /// and warnings, in the order they were stored.
    pub fn experiments(&self, study_id: i64) -> Result<Vec<ExperimentRow>, StoreError> {
        let sql = format!(
            "SELECT {EXPERIMENT_COLUMNS} FROM experiments e JOIN studies s ON s.id = e.study_id
             WHERE e.study_id = ?1 ORDER BY e.pk"
        );
        let mut st = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let raws = st.query_map([study_id], raw_experiment).map_err(|e| self.err(e))?;
        let mut rows = Vec::new();
        let mut at: HashMap<i64, usize> = HashMap::new();
        for raw in raws {
            let raw = raw.map_err(|e| self.err(e))?;
            at.insert(raw.pk, rows.len());
            rows.push(self.finish_row(raw)?);
        }
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.experiment, s.metric, s.value FROM experiments e JOIN scalars s ON s.experiment = e.pk
                 WHERE e.study_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let scalars = st
            .query_map([study_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, f64>(2)?)))
            .map_err(|e| self.err(e))?;
        for s in scalars {
            let (pk, metric, value) = s.map_err(|e| self.err(e))?;
            if let Some(&i) = at.get(&pk) {
                rows[i].scalars.insert(metric, value);
            }
        }
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT w.experiment, w.message FROM experiments e JOIN warnings w ON w.experiment = e.pk
                 WHERE e.study_id = ?1 ORDER BY w.experiment, w.seq",
            )
            .map_err(|e| self.err(e))?;
        let warnings =
            st.query_map([study_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).map_err(|e| self.err(e))?;
        for w in warnings {
            let (pk, message) = w.map_err(|e| self.err(e))?;
            if let Some(&i) = at.get(&pk) {
                rows[i].warnings.push(message);
            }
        }
        Ok(rows)
    }

    /// The values each parameter takes across a study's stored experiments
    /// (every status), by parameter name.
    ///
    /// Counted in Rust over one walk of the study's `params` rows: SQL's
    /// `GROUP BY key, text_value` sorted them in a temporary B-tree first,
    /// eight times the walk's cost (0.2 s of a 30,720-experiment study, and
    /// every analysis view and the study page ask).
    pub fn param_values(&self, study_id: i64) -> Result<Vec<ParamValues>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT p.key, p.text_value, p.num_value FROM experiments e
                 JOIN params p ON p.experiment = e.pk WHERE e.study_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = st.query([study_id]).map_err(|e| self.err(e))?;
        // Per key (few): where each text is in its values.
        let mut keys: Vec<(ParamValues, HashMap<String, usize>)> = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let key = r.get_ref(0).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
            let text = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
            let num: Option<f64> = r.get(2).map_err(|e| self.err(e))?;
            let k = match keys.iter().position(|(p, _)| p.key == key) {
                Some(k) => k,
                None => {
                    keys.push((ParamValues { key: key.to_string(), values: Vec::new() }, HashMap::new()));
                    keys.len() - 1
                }
            };
            let (values, at) = &mut keys[k];
            match at.get(text) {
                Some(&i) => {
                    let v = &mut values.values[i];
                    v.experiments += 1;
                    // SQL's max(): NULLs ignored.
                    v.num = match (v.num, num) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => {
                    at.insert(text.to_string(), values.values.len());
                    values.values.push(ParamValueCount { text: text.to_string(), num, experiments: 1 });
                }
            }
        }
        let mut out: Vec<ParamValues> = keys.into_iter().map(|(p, _)| p).collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        for p in &mut out {
            sort_values(&mut p.values);
        }
        Ok(out)
    }

    /// The metrics a study's experiments reported, by name.
    ///
    /// Deduplicated in Rust over one walk of the study's `scalars` rows
    /// (SQL's `DISTINCT` sorted them in a temporary B-tree first: twice the
    /// walk's cost).
    pub fn metric_names(&self, study_id: i64) -> Result<Vec<String>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.metric FROM experiments e JOIN scalars s ON s.experiment = e.pk WHERE e.study_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = st.query([study_id]).map_err(|e| self.err(e))?;
        let mut names: BTreeSet<String> = BTreeSet::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let name = r.get_ref(0).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
            if !names.contains(name) {
                names.insert(name.to_string());
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Did any experiment of the study report `metric`? (One indexed probe
    /// per experiment until the first hit, instead of listing every name.)
    pub fn has_metric(&self, study_id: i64, metric: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM experiments e JOIN scalars s ON s.experiment = e.pk AND s.metric = ?2
                                WHERE e.study_id = ?1)",
            )
            .and_then(|mut st| st.query_row(rusqlite::params![study_id, metric], |r| r.get(0)))
            .map_err(|e| self.err(e))
    }

    /// The names of one experiment's series.
    pub fn series_names(&self, experiment_id: &str) -> Result<Vec<String>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT s.name FROM experiments e JOIN series s ON s.experiment = e.pk WHERE e.id = ?1 ORDER BY s.name",
            )
            .map_err(|e| self.err(e))?;
        let rows = st.query_map([experiment_id], |r| r.get::<_, String>(0)).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// One series of one experiment as `(t, value)` points, by time (ties
    /// in the order reported).
    pub fn series(&self, experiment_id: &str, name: &str) -> Result<Vec<(f64, f64)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.t, s.value FROM experiments e JOIN series s ON s.experiment = e.pk
                 WHERE e.id = ?1 AND s.name = ?2 ORDER BY s.t, s.seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = st.query_map([experiment_id, name], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// One experiment's artifacts (`name`, JSON document), in the order
    /// reported.
    pub fn artifacts(&self, experiment_id: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT a.name, a.json FROM experiments e JOIN artifacts a ON a.experiment = e.pk
                 WHERE e.id = ?1 ORDER BY a.seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([experiment_id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (name, text) = row.map_err(|e| self.err(e))?;
            let json = serde_json::from_str(&text)
                .map_err(|e| self.bad_data(format!("artifact {name} of experiment {experiment_id}"), e))?;
            out.push((name, json));
        }
        Ok(out)
    }

    /// The last artifact called `name` of one experiment.
    pub fn artifact(&self, experiment_id: &str, name: &str) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self.artifacts(experiment_id)?.into_iter().rev().find(|(n, _)| n == name).map(|(_, j)| j))
    }

    /// The last `limit` log lines (of one study, or all), oldest first.
    pub fn logs(&self, study_id: Option<i64>, limit: u32) -> Result<Vec<LogRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT study_id, experiment, time, level, message FROM
                   (SELECT * FROM logs WHERE ?1 IS NULL OR study_id = ?1 ORDER BY id DESC LIMIT ?2)
                 ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(rusqlite::params![study_id, limit], |r| {
                Ok(LogRow {
                    study_id: r.get(0)?,
                    experiment: r.get(1)?,
                    time: r.get(2)?,
                    level: r.get(3)?,
                    message: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The study file text an experiment ran under.
    pub fn study_file_of(&self, experiment_id: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT f.file_text FROM experiments e JOIN study_files f ON f.id = e.study_file WHERE e.id = ?1",
            )
            .and_then(|mut st| st.query_row([experiment_id], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }

    fn finish_row(&self, raw: RawExperiment) -> Result<ExperimentRow, StoreError> {
        let mut row = raw.row;
        row.params = serde_json::from_str(&raw.params_json)
            .map_err(|e| self.bad_data(format!("parameters of experiment {}", row.id), e))?;
        row.status = self.status(&row.id, &raw.status)?;
        Ok(row)
    }

    fn status(&self, what: &str, text: &str) -> Result<ExperimentStatus, StoreError> {
        ExperimentStatus::parse(text)
            .ok_or_else(|| self.bad_data(format!("status of {what}"), format!("`{text}` is not ok, failed or timeout")))
    }

    fn collect_by_experiment<T>(
        &self,
        sql: &str,
        pk: i64,
        f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = st.query_map([pk], f).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}
