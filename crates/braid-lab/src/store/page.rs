//! One page of a study's experiment table (the web UI's study page and
//! `/api/studies/{id}/experiments`), filtered, sorted and cut in SQL.
//!
//! Loading every experiment with its parameters and scalars to show 50 of
//! them cost about 0.4 s per request on a 30,720-experiment study (issue
//! 19's performance goal is 1 s for the whole page): here the filters are
//! `params` primary-key probes, the sort key is one `params` or `scalars`
//! primary-key probe per experiment, and only the page's rows are read
//! whole.

use rusqlite::types::Value as SqlValue;

use super::model::{ExperimentRow, ExperimentStatus};
use super::{Store, StoreError};

/// What the table can be sorted by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExperimentSort {
    /// The experiment's id.
    Id,
    /// Its status (as text: failed, ok, timeout).
    Status,
    /// Its repetition.
    Repetition,
    /// A parameter: numbers numerically, other values by their text.
    Param(String),
    /// A metric.
    Metric(String),
}

/// Which experiments of a study, in which order, which slice.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentPageQuery {
    /// Only this status.
    pub status: Option<ExperimentStatus>,
    /// `(key, canonical text)`: an experiment must have every one.
    pub filters: Vec<(String, String)>,
    /// The order (none: as stored). Experiments without the sort key's
    /// parameter or metric come last either way; ties keep stored order.
    pub sort: Option<ExperimentSort>,
    /// Descending.
    pub desc: bool,
    /// Matching experiments to skip.
    pub offset: u64,
    /// The most rows to return.
    pub limit: u64,
}

/// A page of experiments.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentPage {
    /// Experiments matching the status and filters.
    pub total: u64,
    /// The page's experiments, with scalars and warnings.
    pub rows: Vec<ExperimentRow>,
}

/// SQLite counts rows in i64.
fn sql_count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// The experiments of study `study_id` that `q` selects: how many
    /// match, and the slice `q.offset .. q.offset + q.limit` in `q`'s order.
    pub fn experiment_page(&self, study_id: i64, q: &ExperimentPageQuery) -> Result<ExperimentPage, StoreError> {
        let mut binds: Vec<SqlValue> = vec![SqlValue::Integer(study_id)];
        let mut where_ = String::from("e.study_id = ?1");
        if let Some(s) = q.status {
            binds.push(SqlValue::Text(s.as_str().into()));
            where_.push_str(&format!(" AND e.status = ?{}", binds.len()));
        }
        for (key, value) in &q.filters {
            binds.push(SqlValue::Text(key.clone()));
            binds.push(SqlValue::Text(value.clone()));
            let k = binds.len() - 1;
            where_.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM params f WHERE f.experiment = e.pk AND f.key = ?{k} AND f.text_value = ?{})",
                k + 1
            ));
        }
        let total: i64 = self
            .conn
            .prepare(&format!("SELECT count(*) FROM experiments e WHERE {where_}"))
            .and_then(|mut st| st.query_row(rusqlite::params_from_iter(binds.iter()), |r| r.get(0)))
            .map_err(|e| self.err(e))?;

        let dir = if q.desc { "DESC" } else { "ASC" };
        let (join, order) = match &q.sort {
            None => (String::new(), String::new()),
            Some(ExperimentSort::Id) => (String::new(), format!("e.id {dir}, ")),
            Some(ExperimentSort::Status) => (String::new(), format!("e.status {dir}, ")),
            Some(ExperimentSort::Repetition) => (String::new(), format!("e.repetition {dir}, ")),
            Some(ExperimentSort::Param(key)) => {
                binds.push(SqlValue::Text(key.clone()));
                (
                    format!(" LEFT JOIN params p ON p.experiment = e.pk AND p.key = ?{}", binds.len()),
                    // Missing last; numbers (as `Value::as_f64`) before
                    // and apart from texts, numerically.
                    format!("p.experiment IS NULL, p.num_value IS NULL, p.num_value {dir}, p.text_value {dir}, "),
                )
            }
            Some(ExperimentSort::Metric(metric)) => {
                binds.push(SqlValue::Text(metric.clone()));
                (
                    format!(" LEFT JOIN scalars s ON s.experiment = e.pk AND s.metric = ?{}", binds.len()),
                    format!("s.value IS NULL, s.value {dir}, "),
                )
            }
        };
        binds.push(SqlValue::Integer(sql_count(q.limit)));
        binds.push(SqlValue::Integer(sql_count(q.offset)));
        let sql = format!(
            "SELECT e.pk FROM experiments e{join} WHERE {where_} ORDER BY {order}e.pk LIMIT ?{} OFFSET ?{}",
            binds.len() - 1,
            binds.len()
        );
        let pks: Vec<i64> = {
            let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
            let rows =
                st.query_map(rusqlite::params_from_iter(binds.iter()), |r| r.get(0)).map_err(|e| self.err(e))?;
            rows.collect::<Result<_, _>>().map_err(|e| self.err(e))?
        };
        let mut rows = Vec::with_capacity(pks.len());
        for pk in pks {
            if let Some(row) = self.experiment_by_pk(pk)? {
                rows.push(row);
            }
        }
        Ok(ExperimentPage { total: u64::try_from(total).unwrap_or(0), rows })
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::time::Duration;

    use super::*;
    use crate::param::{Params, Value};
    use crate::plan::PlannedExperiment;
    use crate::record::Record;
    use crate::store::{FinishedExperiment, StudyRecord};

    /// 24 experiments: sizes and schedulers vary, every fifth lacks `loss`
    /// (a parameter added later), every seventh failed (no metrics), and
    /// `fct_s` ties across repetitions.
    fn store() -> (Store, i64) {
        let mut store = Store::open_in_memory().unwrap();
        let id = store
            .upsert_study(&StudyRecord {
                name: "t".into(),
                file_path: None,
                file_text: String::new(),
                template: "sim-transfer".into(),
                template_version: 1,
                params: vec![],
                planned: 24,
            })
            .unwrap();
        let batch: Vec<FinishedExperiment> = (0..24u64)
            .map(|i| {
                let mut params = Params::default();
                params.insert("scheduler", Value::Enum(["minrtt", "redundant", "blest"][(i % 3) as usize].into()));
                params.insert("bytes", Value::Size([16_384, 1 << 20, 4096, 65_536][(i / 3 % 4) as usize]));
                if i % 5 != 0 {
                    params.insert("loss", Value::Float([0.1, 0.02][(i % 2) as usize]));
                }
                let status = if i % 7 == 3 { ExperimentStatus::Failed } else { ExperimentStatus::Ok };
                let records = if status == ExperimentStatus::Ok {
                    vec![Record::Metric { name: "fct_s".into(), value: (i / 2) as f64 }]
                } else {
                    vec![]
                };
                FinishedExperiment {
                    planned: PlannedExperiment {
                        id: format!("{:016x}", braid_core::splitmix64(i)),
                        template: "sim-transfer".into(),
                        template_version: 1,
                        params,
                        repetition: (i % 4) as u32,
                        seed: i,
                        timeout: Duration::from_secs(1),
                        exclusive: false,
                        expected: Duration::from_secs(1),
                    },
                    status,
                    exit_code: Some(0),
                    error: None,
                    stderr_tail: String::new(),
                    started: 0.0,
                    ended: 1.0,
                    host: "h".into(),
                    braid_version: "0".into(),
                    git_commit: "0".into(),
                    records,
                }
            })
            .collect();
        store.insert_experiments(id, &batch).unwrap();
        (store, id)
    }

    /// The order the table had when it sorted every row in memory: a
    /// stable sort, numbers numerically, missing values last.
    fn reference(rows: &[ExperimentRow], q: &ExperimentPageQuery) -> Vec<String> {
        let mut m: Vec<&ExperimentRow> = rows
            .iter()
            .filter(|r| q.status.is_none_or(|s| r.status == s))
            .filter(|r| q.filters.iter().all(|(k, v)| r.params.0.get(k).is_some_and(|x| x.to_text() == *v)))
            .collect();
        let dir = |o: Ordering| if q.desc { o.reverse() } else { o };
        let missing_last = |a: Option<Ordering>, has_a: bool, has_b: bool| match (has_a, has_b) {
            (true, true) => a.unwrap_or(Ordering::Equal),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => Ordering::Equal,
        };
        if let Some(sort) = &q.sort {
            m.sort_by(|a, b| match sort {
                ExperimentSort::Id => dir(a.id.cmp(&b.id)),
                ExperimentSort::Status => dir(a.status.as_str().cmp(b.status.as_str())),
                ExperimentSort::Repetition => dir(a.repetition.cmp(&b.repetition)),
                ExperimentSort::Param(k) => {
                    let (x, y) = (a.params.0.get(k), b.params.0.get(k));
                    let o = x.zip(y).map(|(x, y)| match (x.as_f64(), y.as_f64()) {
                        (Some(p), Some(q)) => dir(p.total_cmp(&q)),
                        _ => dir(x.to_text().cmp(&y.to_text())),
                    });
                    missing_last(o, x.is_some(), y.is_some())
                }
                ExperimentSort::Metric(n) => {
                    let (x, y) = (a.scalars.get(n), b.scalars.get(n));
                    missing_last(x.zip(y).map(|(x, y)| dir(x.total_cmp(y))), x.is_some(), y.is_some())
                }
            });
        }
        m.into_iter().map(|r| r.id.clone()).collect()
    }

    #[test]
    fn pages_in_sql_match_the_in_memory_order() {
        let (store, id) = store();
        let all = store.experiments(id).unwrap();
        let sorts = [
            None,
            Some(ExperimentSort::Id),
            Some(ExperimentSort::Status),
            Some(ExperimentSort::Repetition),
            Some(ExperimentSort::Param("bytes".into())),
            Some(ExperimentSort::Param("scheduler".into())),
            Some(ExperimentSort::Param("loss".into())),
            Some(ExperimentSort::Metric("fct_s".into())),
            Some(ExperimentSort::Metric("absent".into())),
        ];
        let selections = [
            (None, vec![]),
            (Some(ExperimentStatus::Ok), vec![]),
            (None, vec![("scheduler".to_string(), "redundant".to_string())]),
            (Some(ExperimentStatus::Failed), vec![("bytes".to_string(), "1MiB".to_string())]),
        ];
        for sort in &sorts {
            for desc in [false, true] {
                for (status, filters) in &selections {
                    let mut q = ExperimentPageQuery {
                        status: *status,
                        filters: filters.clone(),
                        sort: sort.clone(),
                        desc,
                        offset: 0,
                        limit: 1000,
                    };
                    let want = reference(&all, &q);
                    let whole = store.experiment_page(id, &q).unwrap();
                    assert_eq!(whole.total as usize, want.len(), "{q:?}");
                    let got: Vec<String> = whole.rows.iter().map(|r| r.id.clone()).collect();
                    assert_eq!(got, want, "{q:?}");
                    // Pages of 5 cut the same order, each at most 5 rows.
                    let mut paged = Vec::new();
                    q.limit = 5;
                    for page in 0..=want.len() / 5 {
                        q.offset = page as u64 * 5;
                        let p = store.experiment_page(id, &q).unwrap();
                        assert!(p.rows.len() <= 5);
                        assert_eq!(p.total as usize, want.len());
                        paged.extend(p.rows.into_iter().map(|r| r.id));
                    }
                    assert_eq!(paged, want, "{q:?}");
                }
            }
        }
        // Rows come whole: scalars and parameters as `experiment` reads them.
        let q = ExperimentPageQuery { status: None, filters: vec![], sort: None, desc: false, offset: 2, limit: 1 };
        let row = store.experiment_page(id, &q).unwrap().rows.remove(0);
        assert_eq!(Some(row.clone()), store.experiment(&all[2].id).unwrap());
    }
}
