//! What can go wrong with the store, in words a user can act on.
//!
//! SQLite reports a handful of result codes; [`classify`] turns the ones a
//! user can do something about (a file that is not a database, a database
//! another process holds, a full or unreadable disk) into their own
//! variants, each naming the file.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::ErrorCode;

/// An error from the store. Never a panic, never a silent overwrite: every
/// variant names the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file is not an SQLite database, or its pages are damaged.
    #[error("{path}: not a readable SQLite database ({detail}); the file was left untouched")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's words ("file is not a database", "database disk image is malformed").
        detail: String,
    },
    /// An SQLite database, but another program's (it has tables and no lab schema).
    #[error("{path}: an SQLite database, but not a Braid lab database ({detail}); refusing to change it")]
    NotALabDatabase {
        /// The database file.
        path: PathBuf,
        /// What gave it away.
        detail: String,
    },
    /// Another process holds the database (the runner is its one writer).
    #[error(
        "{path}: the database is locked by another process (still busy after {:.1} s); \
         is another `braid lab run` writing to it?",
        waited.as_secs_f64()
    )]
    Locked {
        /// The database file.
        path: PathBuf,
        /// How long the store waited for the lock.
        waited: Duration,
    },
    /// Written by a newer build of the lab: its schema is unknown here.
    #[error(
        "{path}: database schema version {found} is newer than this build supports (version {supported}); \
         use a newer braid"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A read-only open found a database that needs migrating first.
    #[error(
        "{path}: database schema version {found} is older than this build's (version {supported}); \
         open it for writing once (`braid lab run`) to migrate it"
    )]
    OlderSchema {
        /// The database file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// A read-only open of a file that does not exist.
    #[error("{path}: no such database (run a study first: `braid lab run STUDY.toml --db {path}`)")]
    NotFound {
        /// The missing file.
        path: PathBuf,
    },
    /// Reading or writing the file failed (permissions, full disk, I/O error).
    #[error("{path}: {detail}")]
    Io {
        /// The database file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// The experiment is already stored as ok; it is never stored twice.
    #[error("experiment {0} is already stored (status ok); an experiment is never stored twice")]
    Duplicate(String),
    /// The experiment id is stored under another study.
    #[error("experiment {id} is already stored under study `{other_study}`; an experiment is never stored twice")]
    IdInOtherStudy {
        /// The experiment id.
        id: String,
        /// The study it is stored under.
        other_study: String,
    },
    /// No study with this id (a caller's bug: ids come from `upsert_study`).
    #[error("no study with id {0} in the database")]
    UnknownStudy(i64),
    /// A stored value does not parse (a row written by hand or a damaged file).
    #[error("{path}: stored {what} does not parse: {detail}")]
    BadData {
        /// The database file.
        path: PathBuf,
        /// Which value ("params of experiment 1f2e…").
        what: String,
        /// The parser's words.
        detail: String,
    },
    /// Any other SQLite error.
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

/// Turn an SQLite error into the variant a user can act on.
pub(crate) fn classify(path: &std::path::Path, busy_timeout: Duration, e: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    if let rusqlite::Error::SqliteFailure(f, msg) = &e {
        let detail = msg.clone().unwrap_or_else(|| f.to_string());
        match f.code {
            ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => return StoreError::Corrupt { path, detail },
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                return StoreError::Locked { path, waited: busy_timeout }
            }
            ErrorCode::CannotOpen
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::ReadOnly
            | ErrorCode::PermissionDenied
            | ErrorCode::NoLargeFileSupport => return StoreError::Io { path, detail },
            _ => {}
        }
    }
    StoreError::Sqlite { path, source: e }
}
