//! Reads about one experiment by its id: what `braid lab rerun` compares
//! a new run with, and where its study file was.

use rusqlite::OptionalExtension;

use super::{Store, StoreError};

impl Store {
    /// Every scalar experiment `id` recorded, `(metric, value)` by metric
    /// name (empty for an unknown id).
    pub fn scalars_of(&self, id: &str) -> Result<Vec<(String, f64)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.metric, s.value FROM scalars s JOIN experiments e ON e.pk = s.experiment \
                 WHERE e.id = ?1 ORDER BY s.metric",
            )
            .map_err(|e| self.err(e))?;
        let rows =
            st.query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The path the study file of experiment `id` was loaded from, if it
    /// came from a file.
    pub fn study_path_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT s.file_path FROM experiments e JOIN studies s ON s.id = e.study_id WHERE e.id = ?1")
            .and_then(|mut st| st.query_row([id], |r| r.get::<_, Option<String>>(0)).optional())
            .map(Option::flatten)
            .map_err(|e| self.err(e))
    }
}
