//! The lab's results database: SQLite through rusqlite, in WAL mode, with
//! one writer (the runner) and any number of readers (analysis, the web UI).
//!
//! Tables: `studies` (the study file verbatim, its template and declared
//! parameters, the planned count), `study_files` (every text a study file
//! had), `experiments` (one row per experiment, keyed by its
//! content-derived id, UNIQUE), `params` (one row per experiment and
//! parameter, canonical text and number, so filters and group-by run in
//! SQL), `scalars`, `series`, `warnings`, `artifacts` and `logs`. The schema is
//! versioned ([`schema`]); opening a file migrates it, and a file that is
//! not a database, another program's database, one of a newer schema or one
//! another process holds is refused with a [`StoreError`] that says so,
//! never a panic, never a silent overwrite.
//!
//! Ingest is one transaction per experiment with cached prepared
//! statements and `synchronous=NORMAL` (WAL: a commit is durable against a
//! crash of the process; against power loss, up to the last checkpoint).
//!
//! ```
//! use braid_lab::store::{Store, StudyRecord};
//! let mut store = Store::open_in_memory().unwrap();
//! let id = store.upsert_study(&StudyRecord {
//!     name: "demo".into(), file_path: None, file_text: "template = \"sim-transfer\"\n".into(),
//!     template: "sim-transfer".into(), template_version: 1, params: vec![], planned: 4,
//! }).unwrap();
//! assert_eq!(store.study_id("demo").unwrap(), Some(id));
//! assert!(store.stored_experiments(id).unwrap().is_empty());
//! ```

mod error;
mod frame;
mod lookup;
mod model;
mod page;
mod query;
mod read;
pub mod schema;
mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub use error::StoreError;
pub use frame::{ExperimentKey, FrameRow, StudyFrame};
pub use model::{
    ExperimentRow, ExperimentStatus, FinishedExperiment, LogRow, ParamValueCount, ParamValues, StatusCounts, StudyInfo,
    StudyRecord,
};
pub use page::{ExperimentPage, ExperimentPageQuery, ExperimentSort};
pub use query::{ScalarPoint, ScalarQuery, ScalarTable};

/// How long a statement waits for another process's lock before
/// [`StoreError::Locked`].
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// An open lab database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    busy_timeout: Duration,
}

impl Store {
    /// Open (creating it if missing) and migrate the database at `path`.
    ///
    /// Refused, with the file left as it was: a file that is not an SQLite
    /// database ([`StoreError::Corrupt`]), another program's database
    /// ([`StoreError::NotALabDatabase`]), a newer schema
    /// ([`StoreError::NewerSchema`]), a database another process holds for
    /// longer than the busy timeout ([`StoreError::Locked`]).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with_timeout(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// [`open`](Self::open) with another busy timeout.
    pub fn open_with_timeout(path: &Path, busy_timeout: Duration) -> Result<Store, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| error::classify(path, busy_timeout, e))?;
        let mut store = Store { conn, path: path.to_path_buf(), busy_timeout };
        store.init(false)?;
        Ok(store)
    }

    /// Open an existing database for reading (analysis commands): no
    /// migration, and [`StoreError::NotFound`] if the file is missing.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        if !path.is_file() {
            return Err(StoreError::NotFound { path: path.to_path_buf() });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|e| error::classify(path, DEFAULT_BUSY_TIMEOUT, e))?;
        let mut store = Store { conn, path: path.to_path_buf(), busy_timeout: DEFAULT_BUSY_TIMEOUT };
        store.init(true)?;
        Ok(store)
    }

    /// A fresh database in memory (tests, one-off bench studies).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| error::classify(&path, DEFAULT_BUSY_TIMEOUT, e))?;
        let mut store = Store { conn, path, busy_timeout: DEFAULT_BUSY_TIMEOUT };
        store.init(false)?;
        Ok(store)
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| self.err(e))
    }

    /// Wait up to `timeout` for another process's lock before
    /// [`StoreError::Locked`].
    pub fn set_busy_timeout(&mut self, timeout: Duration) -> Result<(), StoreError> {
        self.conn.busy_timeout(timeout).map_err(|e| self.err(e))?;
        self.busy_timeout = timeout;
        Ok(())
    }

    /// Check the header, then (writer) switch to WAL and migrate.
    fn init(&mut self, read_only: bool) -> Result<(), StoreError> {
        self.conn.busy_timeout(self.busy_timeout).map_err(|e| self.err(e))?;
        // 32 MiB of page cache (SQLite's default is 2 MiB): a big study's
        // id index and the pages analysis walks stay in memory.
        self.conn.pragma_update(None, "cache_size", -32768).map_err(|e| self.err(e))?;
        // The first read: on a file that is not a database it fails here,
        // before any pragma that writes.
        let header = schema::header(&self.conn).map_err(|e| self.err(e))?;
        if let Some(detail) = schema::foreign(&header) {
            return Err(StoreError::NotALabDatabase { path: self.path.clone(), detail });
        }
        if header.version > schema::SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: header.version,
                supported: schema::SCHEMA_VERSION,
            });
        }
        if read_only {
            if header.version == 0 {
                return Err(StoreError::NotALabDatabase {
                    path: self.path.clone(),
                    detail: "no lab schema in it (empty?)".into(),
                });
            }
            if header.version < schema::SCHEMA_VERSION {
                return Err(StoreError::OlderSchema {
                    path: self.path.clone(),
                    found: header.version,
                    supported: schema::SCHEMA_VERSION,
                });
            }
            return Ok(());
        }
        // `journal_mode` answers with the mode it ended in ("memory" for an
        // in-memory database), which is fine either way.
        let _: String =
            self.conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(|e| self.err(e))?;
        self.conn.pragma_update(None, "synchronous", "NORMAL").map_err(|e| self.err(e))?;
        // A checkpoint syncs the disk; every 8192 pages (32 MiB) instead of
        // SQLite's 1000 keeps that off the ingest path, and the WAL file is
        // cut back to 64 MiB after one.
        self.conn.pragma_update(None, "wal_autocheckpoint", 8192).map_err(|e| self.err(e))?;
        self.conn.pragma_update(None, "journal_size_limit", 64 << 20).map_err(|e| self.err(e))?;

        self.conn.pragma_update(None, "foreign_keys", "ON").map_err(|e| self.err(e))?;
        self.conn.set_prepared_statement_cache_capacity(64);
        if header.version < schema::SCHEMA_VERSION {
            schema::migrate(&mut self.conn).map_err(|e| self.err(e))?;
            // Another process may have written a newer schema between the
            // header read and the migration's lock.
            let now = self.schema_version()?;
            if now > schema::SCHEMA_VERSION {
                return Err(StoreError::NewerSchema {
                    path: self.path.clone(),
                    found: now,
                    supported: schema::SCHEMA_VERSION,
                });
            }
        }
        Ok(())
    }

    /// Classify an SQLite error for this database.
    fn err(&self, e: rusqlite::Error) -> StoreError {
        error::classify(&self.path, self.busy_timeout, e)
    }

    /// A [`StoreError::BadData`] for this database.
    fn bad_data(&self, what: String, detail: impl ToString) -> StoreError {
        StoreError::BadData { path: self.path.clone(), what, detail: detail.to_string() }
    }
}

/// Unix seconds now.
fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A `u64` (a seed) as the `i64` with the same bits, the form stored.
fn u64_bits(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

/// The inverse of [`u64_bits`].
fn bits_u64(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

#[cfg(test)]
mod tests;
