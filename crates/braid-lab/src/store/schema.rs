//! The database schema and its migrations.
//!
//! The schema version is SQLite's `PRAGMA user_version`; the file is marked
//! as a lab database by `PRAGMA application_id`. [`MIGRATIONS`] is an
//! ordered list: step *i* takes a database from version *i* to *i + 1*.
//! Pending steps run in one `BEGIN IMMEDIATE` transaction together with
//! the version bump, so a crash mid-migration leaves the old version whole.
//! A step, once released, never changes: a new schema is a new step.

use rusqlite::{Connection, TransactionBehavior};

/// `PRAGMA application_id` of a lab database: "BrLb".
pub const APPLICATION_ID: i32 = 0x4272_4c62;

/// The schema steps, oldest first. `MIGRATIONS.len()` is the version this
/// build writes.
pub const MIGRATIONS: &[&str] = &[V1];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Version 1.
///
/// Experiments have an integer key (`pk`) that child tables use, and their
/// content-derived `id`, UNIQUE: "never stored twice" is this constraint.
/// The child tables are `WITHOUT ROWID` and keyed by experiment first, so
/// one experiment's rows sit together (drill-down, deletion on retry) and a
/// table costs one B-tree, not two, at ingest. Seeds are `u64` stored as the
/// `i64` with the same bits.
///
/// Deliberately no secondary index on `params(key, value)` or
/// `scalars(metric)`: every query is per study, and walking a study's
/// experiments (`experiments_by_study`) with a primary-key probe into
/// `params` and a primary-key range into `scalars` answers filters,
/// group-by and "a metric's values" as fast. Such an index would cost a
/// page per parameter or metric in every experiment's commit (a metric's
/// entries sit in its own key range), which measured 3 to 4 times slower
/// ingest.
const V1: &str = r#"
CREATE TABLE studies (
    id               INTEGER PRIMARY KEY,
    name             TEXT NOT NULL UNIQUE,
    file_path        TEXT,
    file_text        TEXT NOT NULL,
    template         TEXT NOT NULL,
    template_version INTEGER NOT NULL,
    params_json      TEXT NOT NULL,
    planned          INTEGER NOT NULL,
    created          REAL NOT NULL,
    updated          REAL NOT NULL
);

-- Every distinct text a study file had: an experiment points at the one it ran under.
CREATE TABLE study_files (
    id         INTEGER PRIMARY KEY,
    study_id   INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    hash       TEXT NOT NULL,
    file_text  TEXT NOT NULL,
    first_seen REAL NOT NULL,
    UNIQUE (study_id, hash)
);

CREATE TABLE experiments (
    pk               INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    study_id         INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
    study_file       INTEGER REFERENCES study_files(id),
    template         TEXT NOT NULL,
    template_version INTEGER NOT NULL,
    params_json      TEXT NOT NULL,
    repetition       INTEGER NOT NULL,
    seed             INTEGER NOT NULL,
    timeout_s        REAL NOT NULL,
    exclusive        INTEGER NOT NULL,
    expected_s       REAL NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    exit_code        INTEGER,
    error            TEXT,
    stderr_tail      TEXT NOT NULL,
    started          REAL NOT NULL,
    ended            REAL NOT NULL,
    host             TEXT NOT NULL,
    braid_version    TEXT NOT NULL,
    git_commit       TEXT NOT NULL
);
CREATE INDEX experiments_by_study ON experiments(study_id, status);

CREATE TABLE params (
    experiment INTEGER NOT NULL REFERENCES experiments(pk) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    text_value TEXT NOT NULL,
    num_value  REAL,
    PRIMARY KEY (experiment, key)
) WITHOUT ROWID;

CREATE TABLE scalars (
    experiment INTEGER NOT NULL REFERENCES experiments(pk) ON DELETE CASCADE,
    metric     TEXT NOT NULL,
    value      REAL NOT NULL,
    PRIMARY KEY (experiment, metric)
) WITHOUT ROWID;

CREATE TABLE series (
    experiment INTEGER NOT NULL REFERENCES experiments(pk) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    t          REAL NOT NULL,
    value      REAL NOT NULL,
    PRIMARY KEY (experiment, name, seq)
) WITHOUT ROWID;

CREATE TABLE warnings (
    experiment INTEGER NOT NULL REFERENCES experiments(pk) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    PRIMARY KEY (experiment, seq)
) WITHOUT ROWID;

-- Structured documents an experiment produced (a bench's full report), as JSON text.
CREATE TABLE artifacts (
    experiment INTEGER NOT NULL REFERENCES experiments(pk) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    name       TEXT NOT NULL,
    json       TEXT NOT NULL,
    PRIMARY KEY (experiment, seq)
) WITHOUT ROWID;

-- The runner's log; `experiment` is the text id (a line may precede the row).
CREATE TABLE logs (
    id         INTEGER PRIMARY KEY,
    study_id   INTEGER REFERENCES studies(id) ON DELETE CASCADE,
    experiment TEXT,
    time       REAL NOT NULL,
    level      TEXT NOT NULL,
    message    TEXT NOT NULL
);
CREATE INDEX logs_by_study ON logs(study_id, time);
"#;

/// What a file's header says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub application_id: i32,
    pub version: i64,
    /// Number of tables, indexes, views and triggers.
    pub objects: i64,
}

/// Read the header. On a file that is not a database this is the first
/// read, and fails with SQLITE_NOTADB before anything is written.
pub(crate) fn header(conn: &Connection) -> rusqlite::Result<Header> {
    let application_id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let objects: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    Ok(Header { application_id, version, objects })
}

/// Is this header another program's database? (Not ours by its id, or
/// without our id yet with tables in it.)
pub(crate) fn foreign(h: &Header) -> Option<String> {
    if h.application_id != 0 && h.application_id != APPLICATION_ID {
        return Some(format!("application_id {:#x}", h.application_id));
    }
    if h.application_id == 0 && h.objects > 0 {
        return Some(format!("{} schema objects and no lab schema version", h.objects));
    }
    None
}

/// Apply the pending migration steps in one transaction. Returns the
/// version before. The header is read again inside the transaction: another
/// process may have migrated the file in the meantime.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<i64> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let from: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let start = usize::try_from(from).unwrap_or(usize::MAX);
    for step in MIGRATIONS.iter().skip(start) {
        tx.execute_batch(step)?;
    }
    if from < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    }
    tx.commit()?;
    Ok(from)
}
