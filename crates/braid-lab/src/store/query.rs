//! Scalars by metric with their experiment's parameters, filtered and
//! grouped in SQL. The analyses (`show`, `best`, `pareto`, figures) answer
//! the same query from a study loaded once
//! ([`StudyFrame::table`](super::StudyFrame::table), checked against this
//! one by `tests::frame_matches_sql`); this is the store's query for a
//! caller with one question.
//!
//! Filtering runs in SQL (a `params` primary-key probe per filter and
//! experiment); so do the joins that fetch each ok experiment's group-by
//! values and its scalars.
//! The group key is assembled in Rust from interned values, which is
//! cheaper than one `params` join per group-by key per scalar row.

use std::collections::{HashMap, HashSet};

use rusqlite::types::Value as SqlValue;
use serde::Serialize;

use super::{Store, StoreError};

/// The text given to a group-by key an experiment has no value for (a
/// parameter added to the template after it ran).
pub const UNSET: &str = "(unset)";

/// Which scalars to fetch, and how to group them. Only experiments stored
/// as ok take part.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScalarQuery {
    /// The study.
    pub study_id: i64,
    /// `(key, canonical text)`: an experiment must match every one.
    pub filters: Vec<(String, String)>,
    /// Parameters whose values form the group key (none: one group).
    pub group_by: Vec<String>,
    /// The metrics to fetch.
    pub metrics: Vec<String>,
}

/// One scalar value, with the group of its experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScalarPoint {
    /// Index into [`ScalarTable::groups`].
    pub group: u32,
    /// Index into [`ScalarTable::metrics`].
    pub metric: u32,
    /// The experiment's row key (stable within one database).
    pub experiment: i64,
    /// The value.
    pub value: f64,
}

/// The answer to a [`ScalarQuery`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScalarTable {
    /// The group-by keys, as asked.
    pub group_by: Vec<String>,
    /// Each group's values, in `group_by` order; groups sorted by value
    /// (numerically where every value of a key is a number).
    pub groups: Vec<Vec<String>>,
    /// The metrics, as asked.
    pub metrics: Vec<String>,
    /// Every value, in no particular order.
    pub points: Vec<ScalarPoint>,
    /// Ok experiments that matched the filters (with or without scalars).
    pub experiments: u64,
}

/// Interned values of one group-by key.
#[derive(Default)]
struct KeyValues {
    ids: HashMap<String, u32>,
    values: Vec<(String, Option<f64>)>,
}

impl KeyValues {
    /// The id of `text`; a copy is made only the first time it is seen
    /// (a key takes a handful of values over tens of thousands of rows).
    fn intern(&mut self, text: &str, num: Option<f64>) -> u32 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.values.len() as u32;
        self.ids.insert(text.to_string(), id);
        self.values.push((text.to_string(), num));
        id
    }

    /// The rank of each value id in display order.
    fn ranks(&self) -> Vec<u32> {
        display_ranks(&self.values)
    }
}

impl Store {
    /// Fetch the scalars a query asks for, grouped.
    pub fn scalars(&self, q: &ScalarQuery) -> Result<ScalarTable, StoreError> {
        // ?1 is the study; the filters' (key, value) pairs follow.
        let mut binds: Vec<SqlValue> = vec![SqlValue::Integer(q.study_id)];
        let mut filter_sql = String::new();
        for (key, value) in &q.filters {
            let k = binds.len() + 1;
            filter_sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM params f WHERE f.experiment = e.pk AND f.key = ?{k} AND f.text_value = ?{})",
                k + 1
            ));
            binds.push(SqlValue::Text(key.clone()));
            binds.push(SqlValue::Text(value.clone()));
        }
        // Every query walks the study's ok experiments (experiments_by_study)
        // and probes the child tables by primary key.
        let base_join = "FROM experiments e";
        let where_ = format!("e.study_id = ?1 AND e.status = 'ok'{filter_sql}");
        let base = format!("{base_join} WHERE {where_}");

        // The matching experiments and their group-by values.
        let mut key_values: Vec<KeyValues> = q.group_by.iter().map(|_| KeyValues::default()).collect();
        let mut exp_key: HashMap<i64, Vec<u32>> = HashMap::new();
        let unset = u32::MAX;
        {
            let mut st = self.conn.prepare(&format!("SELECT e.pk {base}")).map_err(|e| self.err(e))?;
            let rows = st
                .query_map(rusqlite::params_from_iter(binds.iter()), |r| r.get::<_, i64>(0))
                .map_err(|e| self.err(e))?;
            for pk in rows {
                exp_key.insert(pk.map_err(|e| self.err(e))?, vec![unset; q.group_by.len()]);
            }
        }
        if !q.group_by.is_empty() {
            let key_index: HashMap<&str, usize> = q.group_by.iter().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
            let mut kb = binds.clone();
            let mut in_list = Vec::new();
            for k in &q.group_by {
                kb.push(SqlValue::Text(k.clone()));
                in_list.push(format!("?{}", kb.len()));
            }
            let sql = format!(
                "SELECT p.experiment, p.key, p.text_value, p.num_value {base_join} JOIN params p ON p.experiment = e.pk
                 WHERE {where_} AND p.key IN ({})",
                in_list.join(", ")
            );
            let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
            let mut rows = st.query(rusqlite::params_from_iter(kb.iter())).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let pk: i64 = r.get(0).map_err(|e| self.err(e))?;
                let key = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let text = r.get_ref(2).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let num: Option<f64> = r.get(3).map_err(|e| self.err(e))?;
                if let (Some(&i), Some(slots)) = (key_index.get(key), exp_key.get_mut(&pk)) {
                    slots[i] = key_values[i].intern(text, num);
                }
            }
        }
        for (i, kv) in key_values.iter_mut().enumerate() {
            if exp_key.values().any(|slots| slots[i] == unset) {
                let id = kv.intern(UNSET, None);
                for slots in exp_key.values_mut() {
                    if slots[i] == unset {
                        slots[i] = id;
                    }
                }
            }
        }

        // Groups in display order.
        let ranks: Vec<Vec<u32>> = key_values.iter().map(KeyValues::ranks).collect();
        let mut distinct: Vec<&Vec<u32>> = exp_key.values().collect::<HashSet<_>>().into_iter().collect();
        distinct.sort_by_cached_key(|slots| {
            slots.iter().enumerate().map(|(i, &v)| ranks[i][v as usize]).collect::<Vec<_>>()
        });
        let group_of: HashMap<&Vec<u32>, u32> =
            distinct.iter().enumerate().map(|(g, slots)| (*slots, g as u32)).collect();
        let groups: Vec<Vec<String>> = distinct
            .iter()
            .map(|slots| slots.iter().enumerate().map(|(i, &v)| key_values[i].values[v as usize].0.clone()).collect())
            .collect();
        let exp_group: HashMap<i64, u32> =
            exp_key.iter().map(|(pk, slots)| (*pk, group_of.get(slots).copied().unwrap_or(0))).collect();

        // The scalars.
        let mut points = Vec::new();
        if !q.metrics.is_empty() && !exp_group.is_empty() {
            let mut mb = binds.clone();
            let mut in_list = Vec::new();
            for m in &q.metrics {
                mb.push(SqlValue::Text(m.clone()));
                in_list.push(format!("?{}", mb.len()));
            }
            let metric_index: HashMap<&str, u32> =
                q.metrics.iter().enumerate().map(|(i, m)| (m.as_str(), i as u32)).collect();
            let sql = format!(
                "SELECT s.experiment, s.metric, s.value {base_join} JOIN scalars s ON s.experiment = e.pk
                 WHERE {where_} AND s.metric IN ({})",
                in_list.join(", ")
            );
            let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
            let mut rows = st.query(rusqlite::params_from_iter(mb.iter())).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let pk: i64 = r.get(0).map_err(|e| self.err(e))?;
                let metric = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let value: f64 = r.get(2).map_err(|e| self.err(e))?;
                if let (Some(&group), Some(&metric)) = (exp_group.get(&pk), metric_index.get(metric)) {
                    points.push(ScalarPoint { group, metric, experiment: pk, value });
                }
            }
        }
        Ok(ScalarTable {
            group_by: q.group_by.clone(),
            groups,
            metrics: q.metrics.clone(),
            points,
            experiments: exp_key.len() as u64,
        })
    }
}

/// The rank of each value (by index) in display order: by number when
/// every value has one (ties by text), else by text. Shared by the SQL
/// path and the in-memory frame so both group in the same order.
pub(crate) fn display_ranks<T: AsRef<str>>(values: &[(T, Option<f64>)]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..values.len() as u32).collect();
    let numeric = values.iter().all(|(_, n)| n.is_some());
    order.sort_by(|&a, &b| {
        let (ta, na) = &values[a as usize];
        let (tb, nb) = &values[b as usize];
        if numeric {
            na.unwrap_or(0.0).total_cmp(&nb.unwrap_or(0.0)).then_with(|| ta.as_ref().cmp(tb.as_ref()))
        } else {
            ta.as_ref().cmp(tb.as_ref())
        }
    });
    let mut rank = vec![0; order.len()];
    for (r, &id) in order.iter().enumerate() {
        rank[id as usize] = r as u32;
    }
    rank
}
