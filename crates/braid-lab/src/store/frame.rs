//! A study in memory for analysis: every experiment's status, parameter
//! values and scalars, read in two walks (the study's `params` rows, its
//! `scalars` rows) inside one read transaction.
//!
//! Why: an analysis page asks several questions of one study (the values
//! each parameter takes, the metric names, a summary per group, the best
//! configuration per environment, a Pareto front, a figure). Asked of SQL,
//! each one walked the same rows again (the parameter values alone took
//! 70 ms of a 30,720-experiment study, and every view loaded them); a
//! frame walks them once, and each question is then an in-memory pass
//! over interned values ([`StudyFrame::table`] answers a [`ScalarQuery`]
//! with the very same [`ScalarTable`], `tests::frame_matches_sql`).
//!
//! Memory: a `u32` per experiment and parameter, 16 bytes per scalar (a
//! 30,720 × 10 study: about 5 MB).

use std::collections::HashMap;

use super::model::{sort_values, ExperimentStatus, ParamValueCount, ParamValues};
use super::query::{ScalarPoint, ScalarTable, UNSET};
use super::{bits_u64, Store, StoreError};

/// No value: the experiment lacks the parameter.
const NONE: u32 = u32::MAX;

/// One stored value of a parameter.
#[derive(Debug, Clone)]
struct FrameValue {
    text: String,
    /// Its number where it has one. Text and number derive from one value
    /// at ingest, so every row with this text has this number (the
    /// maximum is kept, as SQL's `max()` would, NULLs ignored).
    num: Option<f64>,
    /// Experiments (every status) with this value.
    experiments: u64,
}

/// One parameter key: its values and each experiment's value id.
#[derive(Debug, Clone)]
struct FrameKey {
    name: String,
    values: Vec<FrameValue>,
    /// Per experiment (frame order): an index into `values`, or [`NONE`].
    of: Vec<u32>,
}

/// A study's experiments, parameters and scalars in memory.
#[derive(Debug, Clone)]
pub struct StudyFrame {
    study_id: i64,
    /// Experiments by row key, ascending (the order they were stored).
    pks: Vec<i64>,
    status: Vec<ExperimentStatus>,
    /// Keys by name.
    keys: Vec<FrameKey>,
    /// Metric names, sorted: a metric's id is its index.
    metrics: Vec<String>,
    /// Per experiment, its scalars `(metric id, value)` by metric name.
    scalars: Vec<Vec<(u32, f64)>>,
}

/// Where rows of a walk belong: a row key's experiment index. Rows come
/// grouped by experiment, so the last one answers most lookups.
struct PkIndex<'a> {
    at: HashMap<i64, u32>,
    last: Option<(i64, u32)>,
    pks: &'a [i64],
}

impl<'a> PkIndex<'a> {
    fn new(pks: &'a [i64]) -> PkIndex<'a> {
        PkIndex { at: pks.iter().enumerate().map(|(i, &pk)| (pk, i as u32)).collect(), last: None, pks }
    }

    fn get(&mut self, pk: i64) -> Option<usize> {
        if let Some((p, i)) = self.last {
            if p == pk {
                return Some(i as usize);
            }
            // The walk's next experiment is usually the next row key.
            let next = i as usize + 1;
            if self.pks.get(next) == Some(&pk) {
                self.last = Some((pk, next as u32));
                return Some(next);
            }
        }
        let i = *self.at.get(&pk)?;
        self.last = Some((pk, i));
        Some(i as usize)
    }
}

impl Store {
    /// Run `f` inside one read transaction (a consistent snapshot while the
    /// runner writes), unless one is open already.
    pub fn snapshot<T, E: From<StoreError>>(&self, f: impl FnOnce(&Store) -> Result<T, E>) -> Result<T, E> {
        if !self.conn.is_autocommit() {
            return f(self);
        }
        self.conn.execute_batch("BEGIN").map_err(|e| self.err(e))?;
        let out = f(self);
        // A read transaction has nothing to keep: end it either way.
        let end = self.conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let out = out?;
        end.map_err(|e| self.err(e))?;
        Ok(out)
    }

    /// Load a study's experiments (every status), parameter values and
    /// scalars: one walk of each table, in one snapshot.
    pub fn frame(&self, study_id: i64) -> Result<StudyFrame, StoreError> {
        self.snapshot(|s| s.frame_walks(study_id))
    }

    /// Every experiment of a study (every status): row key, id,
    /// repetition and seed, in the order stored (as [`StudyFrame`] lists
    /// them).
    pub fn experiment_keys(&self, study_id: i64) -> Result<Vec<ExperimentKey>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT pk, id, repetition, seed FROM experiments WHERE study_id = ?1 ORDER BY pk")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([study_id], |r| {
                Ok(ExperimentKey { pk: r.get(0)?, id: r.get(1)?, repetition: r.get(2)?, seed: bits_u64(r.get(3)?) })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn frame_walks(&self, study_id: i64) -> Result<StudyFrame, StoreError> {
        // The experiments (the index holds status and row key).
        let mut exps: Vec<(i64, ExperimentStatus)> = Vec::new();
        {
            let mut st = self
                .conn
                .prepare_cached("SELECT pk, status FROM experiments WHERE study_id = ?1")
                .map_err(|e| self.err(e))?;
            let mut rows = st.query([study_id]).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let pk: i64 = r.get(0).map_err(|e| self.err(e))?;
                let text = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let status = ExperimentStatus::parse(text).ok_or_else(|| {
                    self.bad_data(format!("status of experiment row {pk}"), format!("`{text}` is not ok, failed or timeout"))
                })?;
                exps.push((pk, status));
            }
        }
        exps.sort_unstable_by_key(|(pk, _)| *pk);
        let pks: Vec<i64> = exps.iter().map(|(pk, _)| *pk).collect();
        let status: Vec<ExperimentStatus> = exps.into_iter().map(|(_, s)| s).collect();
        let n = pks.len();
        let mut index = PkIndex::new(&pks);

        // Parameters: values interned per key.
        let mut keys: Vec<FrameKey> = Vec::new();
        let mut value_ids: Vec<HashMap<String, u32>> = Vec::new();
        {
            let mut st = self
                .conn
                .prepare_cached(
                    "SELECT p.experiment, p.key, p.text_value, p.num_value FROM experiments e
                     JOIN params p ON p.experiment = e.pk WHERE e.study_id = ?1",
                )
                .map_err(|e| self.err(e))?;
            let mut rows = st.query([study_id]).map_err(|e| self.err(e))?;
            let mut last_key = 0usize;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let pk: i64 = r.get(0).map_err(|e| self.err(e))?;
                let key = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let text = r.get_ref(2).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let num: Option<f64> = r.get(3).map_err(|e| self.err(e))?;
                let Some(exp) = index.get(pk) else { continue };
                // Keys come in the same order for every experiment: try
                // the one after the last first.
                let k = match [last_key + 1, 0].into_iter().find(|&k| keys.get(k).is_some_and(|fk| fk.name == key)) {
                    Some(k) => k,
                    None => match keys.iter().position(|fk| fk.name == key) {
                        Some(k) => k,
                        None => {
                            keys.push(FrameKey { name: key.to_string(), values: Vec::new(), of: vec![NONE; n] });
                            value_ids.push(HashMap::new());
                            keys.len() - 1
                        }
                    },
                };
                last_key = k;
                let fk = &mut keys[k];
                let id = match value_ids[k].get(text) {
                    Some(&id) => {
                        let v = &mut fk.values[id as usize];
                        v.experiments += 1;
                        v.num = match (v.num, num) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                        id
                    }
                    None => {
                        let id = fk.values.len() as u32;
                        value_ids[k].insert(text.to_string(), id);
                        fk.values.push(FrameValue { text: text.to_string(), num, experiments: 1 });
                        id
                    }
                };
                fk.of[exp] = id;
            }
        }
        keys.sort_by(|a, b| a.name.cmp(&b.name));

        // Scalars: metric names interned as met, renumbered by name after.
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: HashMap<String, u32> = HashMap::new();
        let mut scalars: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
        {
            let mut st = self
                .conn
                .prepare_cached(
                    "SELECT s.experiment, s.metric, s.value FROM experiments e
                     JOIN scalars s ON s.experiment = e.pk WHERE e.study_id = ?1",
                )
                .map_err(|e| self.err(e))?;
            let mut rows = st.query([study_id]).map_err(|e| self.err(e))?;
            let mut last: u32 = 0;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let pk: i64 = r.get(0).map_err(|e| self.err(e))?;
                let metric = r.get_ref(1).map_err(|e| self.err(e))?.as_str().map_err(|e| self.err(e.into()))?;
                let value: f64 = r.get(2).map_err(|e| self.err(e))?;
                let Some(exp) = index.get(pk) else { continue };
                // Experiments mostly report the same metrics in the same
                // (name) order: try the one after the last first.
                let id = match [last + 1, 0].into_iter().find(|&m| names.get(m as usize).is_some_and(|s| s == metric)) {
                    Some(m) => m,
                    None => match name_ids.get(metric) {
                        Some(&m) => m,
                        None => {
                            let m = names.len() as u32;
                            name_ids.insert(metric.to_string(), m);
                            names.push(metric.to_string());
                            m
                        }
                    },
                };
                last = id;
                scalars[exp].push((id, value));
            }
        }
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_by(|&a, &b| names[a as usize].cmp(&names[b as usize]));
        let mut rank = vec![0u32; names.len()];
        for (r, &id) in order.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        for list in &mut scalars {
            for (m, _) in list.iter_mut() {
                *m = rank[*m as usize];
            }
            // Rows of one experiment come by metric name (the primary
            // key); sort anyway, in case a plan reads them otherwise.
            if list.windows(2).any(|w| w[0].0 > w[1].0) {
                list.sort_by_key(|(m, _)| *m);
            }
        }
        let metrics: Vec<String> = order.iter().map(|&id| names[id as usize].clone()).collect();
        Ok(StudyFrame { study_id, pks, status, keys, metrics, scalars })
    }
}

/// A group-by key's values among the experiments a query matched, and
/// their display ranks.
struct SeenKey<'a> {
    key: Option<&'a FrameKey>,
    /// The value id unset experiments take: that of a stored text equal to
    /// [`UNSET`] (the SQL path interns both under that text), else [`NONE`].
    unset_as: u32,
    /// Frame value id to local id (the last slot: [`NONE`]).
    local: Vec<u32>,
    texts: Vec<(&'a str, Option<f64>)>,
}

impl<'a> SeenKey<'a> {
    fn new(key: Option<&'a FrameKey>) -> SeenKey<'a> {
        let values = key.map_or(0, |k| k.values.len());
        let unset_as =
            key.and_then(|k| k.values.iter().position(|v| v.text == UNSET)).map_or(NONE, |id| id as u32);
        SeenKey { key, unset_as, local: vec![NONE; values + 1], texts: Vec::new() }
    }

    /// The local id of experiment `i`'s value.
    fn intern(&mut self, i: usize) -> u32 {
        let id = match self.key.map(|k| k.of[i]) {
            Some(NONE) | None => self.unset_as,
            Some(id) => id,
        };
        let slot = if id == NONE { self.local.len() - 1 } else { id as usize };
        if self.local[slot] == NONE {
            self.local[slot] = self.texts.len() as u32;
            self.texts.push(match self.key.and_then(|k| k.values.get(id as usize)) {
                Some(v) => (v.text.as_str(), v.num),
                None => (UNSET, None),
            });
        }
        self.local[slot]
    }

    /// Rank of each local id: by number when every value seen has one,
    /// else by text (as [`ScalarTable::groups`] promises).
    fn ranks(&self) -> Vec<u32> {
        super::query::display_ranks(&self.texts)
    }
}

impl StudyFrame {
    /// The study.
    pub fn study_id(&self) -> i64 {
        self.study_id
    }

    /// Stored experiments (every status).
    pub fn len(&self) -> usize {
        self.pks.len()
    }

    /// No experiment stored.
    pub fn is_empty(&self) -> bool {
        self.pks.is_empty()
    }

    /// What [`Store::param_values`] answers: the values each parameter
    /// takes across the study's experiments (every status), by name.
    pub fn param_values(&self) -> Vec<ParamValues> {
        self.keys
            .iter()
            .map(|k| {
                let mut values: Vec<ParamValueCount> = k
                    .values
                    .iter()
                    .map(|v| ParamValueCount { text: v.text.clone(), num: v.num, experiments: v.experiments })
                    .collect();
                sort_values(&mut values);
                ParamValues { key: k.name.clone(), values }
            })
            .collect()
    }

    /// What [`Store::metric_names`] answers: the metrics the study's
    /// experiments reported, by name.
    pub fn metric_names(&self) -> &[String] {
        &self.metrics
    }

    /// Did any experiment report `metric`?
    pub fn has_metric(&self, metric: &str) -> bool {
        self.metrics.binary_search_by(|m| m.as_str().cmp(metric)).is_ok()
    }

    fn key(&self, name: &str) -> Option<&FrameKey> {
        self.keys.binary_search_by(|k| k.name.as_str().cmp(name)).ok().map(|i| &self.keys[i])
    }

    /// Each experiment in the order stored: its row key, status, the
    /// canonical text of its value of each of `keys` (none where it lacks
    /// the key), and its scalars.
    /// What [`export`](crate::analysis::export) writes.
    pub fn rows<'a>(&'a self, keys: &'a [String]) -> impl Iterator<Item = FrameRow<'a>> + 'a {
        let cols: Vec<Option<&FrameKey>> = keys.iter().map(|k| self.key(k)).collect();
        (0..self.pks.len()).map(move |i| FrameRow {
            pk: self.pks[i],
            status: self.status[i],
            params: cols
                .iter()
                .map(|c| c.and_then(|k| k.values.get(k.of[i] as usize)).map(|v| v.text.as_str()))
                .collect(),
            scalars: &self.scalars[i],
        })
    }

    /// The answer [`Store::scalars`] gives to a query with these filters,
    /// group-by keys and metrics, from memory: the ok experiments that
    /// match every `(key, canonical text)` filter, grouped by their values
    /// of `group_by` (groups in value order), with their scalars of
    /// `metrics` (points in the order stored, then by metric name).
    pub fn table(&self, filters: &[(String, String)], group_by: &[String], metrics: &[String]) -> ScalarTable {
        // Filters as (key, value id); one no experiment has matches none.
        let mut checks: Vec<(&FrameKey, u32)> = Vec::new();
        let mut impossible = false;
        for (key, text) in filters {
            match self.key(key).and_then(|k| k.values.iter().position(|v| v.text == *text).map(|id| (k, id as u32))) {
                Some(c) => checks.push(c),
                None => impossible = true,
            }
        }
        let matching: Vec<usize> = if impossible {
            Vec::new()
        } else {
            (0..self.pks.len())
                .filter(|&i| self.status[i] == ExperimentStatus::Ok && checks.iter().all(|(k, id)| k.of[i] == *id))
                .collect()
        };

        // Each matching experiment's value of each group-by key, interned
        // among the values seen, then ranked.
        let width = group_by.len();
        let mut seen: Vec<SeenKey<'_>> = group_by.iter().map(|k| SeenKey::new(self.key(k))).collect();
        let mut ranked: Vec<u32> = Vec::with_capacity(matching.len() * width);
        for &i in &matching {
            ranked.extend(seen.iter_mut().map(|s| s.intern(i)));
        }
        let ranks: Vec<Vec<u32>> = seen.iter().map(SeenKey::ranks).collect();
        for row in ranked.chunks_mut(width.max(1)) {
            for (j, local) in row.iter_mut().enumerate().take(width) {
                *local = ranks[j][*local as usize];
            }
        }
        let tuple = |m: usize| &ranked[m * width..(m + 1) * width];

        // Groups: the distinct rank tuples, in order.
        let mut by_tuple: Vec<usize> = (0..matching.len()).collect();
        by_tuple.sort_by(|&a, &b| tuple(a).cmp(tuple(b)));
        let mut group_of = vec![0u32; matching.len()];
        let mut groups: Vec<Vec<String>> = Vec::new();
        let mut last: Option<usize> = None;
        for &m in &by_tuple {
            if last.is_none_or(|l| tuple(l) != tuple(m)) {
                let texts = (0..width)
                    .map(|j| {
                        let local = ranks[j].iter().position(|&r| r == tuple(m)[j]).unwrap_or(0);
                        seen[j].texts[local].0.to_string()
                    })
                    .collect();
                groups.push(texts);
                last = Some(m);
            }
            group_of[m] = (groups.len() - 1) as u32;
        }

        // The scalars asked for; a metric named twice takes its last
        // position (as the SQL path's lookup does).
        let mut want: Vec<Option<u32>> = vec![None; self.metrics.len()];
        for (q, name) in metrics.iter().enumerate() {
            if let Ok(m) = self.metrics.binary_search(name) {
                want[m] = Some(q as u32);
            }
        }
        let mut points = Vec::new();
        for (m, &i) in matching.iter().enumerate() {
            for &(metric, value) in &self.scalars[i] {
                if let Some(q) = want[metric as usize] {
                    points.push(ScalarPoint { group: group_of[m], metric: q, experiment: self.pks[i], value });
                }
            }
        }
        ScalarTable {
            group_by: group_by.to_vec(),
            groups,
            metrics: metrics.to_vec(),
            points,
            experiments: matching.len() as u64,
        }
    }
}

/// One experiment of [`StudyFrame::rows`].
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRow<'a> {
    /// Its row key.
    pub pk: i64,
    /// Its status.
    pub status: ExperimentStatus,
    /// Its value of each key asked for (canonical text).
    pub params: Vec<Option<&'a str>>,
    /// Its scalars `(metric, value)` by name; a metric is an index into
    /// [`StudyFrame::metric_names`].
    pub scalars: &'a [(u32, f64)],
}

/// An experiment's identity, for export.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentKey {
    /// Its row key.
    pub pk: i64,
    /// Its content-derived id.
    pub id: String,
    /// Its repetition.
    pub repetition: u32,
    /// Its seed.
    pub seed: u64,
}
