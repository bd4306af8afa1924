//! The durable node clock.
//!
//! Exon's only permanent state is one integer per node, the clock `ck`
//! (Algorithm 1, line 19). For exactly-once to survive a crash, no
//! identifier derived from the clock may leave the node before the clock
//! is durably past it; otherwise a restarted node could hand out the same
//! incarnation `rck` or envelope range again and a stale token could match
//! a fresh slot.
//!
//! Writing the clock on every increment would cost an fsync per message,
//! so the state machine reserves the clock in blocks: it asks for a limit
//! `L` ([`Machine::clock_request`](crate::Machine::clock_request)), whoever
//! drives it stores `L` through a [`ClockStore`] and reports it back
//! ([`Machine::clock_persisted`](crate::Machine::clock_persisted)). Frames
//! carrying a clock value `≥ L` wait until then. After a crash the node
//! restarts at the stored `L`, above every identifier it ever revealed; at
//! most one block of numbers is skipped.
//!
//! The state machine never touches storage itself: [`FileClockStore`] is
//! the real thing (write, fsync, rename, fsync the directory) and
//! [`MemClockStore`] stands in for it in simulations.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Durable storage for the clock's reservation limit.
pub trait ClockStore {
    /// The limit last persisted; 0 for a node that never ran.
    fn load(&mut self) -> Result<u64, ClockStoreError>;
    /// Stores `limit` durably: when this returns `Ok`, a crash cannot
    /// bring back an older value.
    fn persist(&mut self, limit: u64) -> Result<(), ClockStoreError>;
}

/// The clock could not be loaded or stored.
#[derive(Debug, thiserror::Error)]
pub enum ClockStoreError {
    /// An I/O error on the clock file.
    #[error("clock file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file exists but does not hold a clock.
    #[error("clock file {path} is corrupt: expected one line `exon-clock 1 <decimal u64>`")]
    Corrupt {
        /// The file.
        path: PathBuf,
    },
}

/// A clock kept in memory: survives a simulated crash (the test keeps the
/// store and drops the state machine), not a real one.
///
/// ```
/// use braid_exon::clock::{ClockStore, MemClockStore};
/// let mut store = MemClockStore::default();
/// assert_eq!(store.load().unwrap(), 0);
/// store.persist(4096).unwrap();
/// assert_eq!(store.load().unwrap(), 4096);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemClockStore {
    value: u64,
    writes: u64,
}

impl MemClockStore {
    /// Number of `persist` calls (each would be an fsync).
    pub fn writes(&self) -> u64 {
        self.writes
    }
}

impl ClockStore for MemClockStore {
    fn load(&mut self) -> Result<u64, ClockStoreError> {
        Ok(self.value)
    }
    fn persist(&mut self, limit: u64) -> Result<(), ClockStoreError> {
        self.value = self.value.max(limit);
        self.writes += 1;
        Ok(())
    }
}

/// The clock in a file, replaced atomically: the new value is written to
/// `<path>.tmp`, fsynced, renamed over `<path>`, and the directory fsynced
/// so the rename itself is durable.
#[derive(Debug, Clone)]
pub struct FileClockStore {
    path: PathBuf,
}

const FILE_PREFIX: &str = "exon-clock 1 ";

impl FileClockStore {
    /// A store at `path` (created on the first `persist`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileClockStore { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: io::Error) -> ClockStoreError {
        ClockStoreError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl ClockStore for FileClockStore {
    fn load(&mut self) -> Result<u64, ClockStoreError> {
        match fs::read_to_string(&self.path) {
            Ok(text) => text
                .strip_prefix(FILE_PREFIX)
                .and_then(|rest| rest.trim_end().parse().ok())
                .ok_or_else(|| ClockStoreError::Corrupt {
                    path: self.path.clone(),
                }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(self.io(e)),
        }
    }

    fn persist(&mut self, limit: u64) -> Result<(), ClockStoreError> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = fs::File::create(&tmp).map_err(|e| self.io(e))?;
        writeln!(f, "{FILE_PREFIX}{limit}").map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        drop(f);
        fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // Directory fsync makes the rename durable (POSIX leaves it to the
        // directory entry, not the file).
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(e))
    }
}

/// The in-memory side of the clock, inside the state machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Clock {
    /// `ck`: every identifier this node hands out from now on is `≥ ck`.
    pub(crate) ck: u64,
    /// Durable limit: identifiers `< persisted` may leave the node.
    pub(crate) persisted: u64,
    /// Largest limit asked for so far.
    pub(crate) wanted: u64,
    /// The clock this life started at: incarnations below it belong to a
    /// previous life (used to answer STALE).
    pub(crate) boot: u64,
    /// Reservation block size.
    pub(crate) block: u64,
}

impl Clock {
    pub(crate) fn boot(persisted: u64, block: u64) -> Clock {
        Clock {
            ck: persisted,
            persisted,
            wanted: persisted,
            boot: persisted,
            block: block.max(1),
        }
    }

    /// Makes sure a reservation covering `bound` (exclusive) is asked for,
    /// and one block ahead of `ck` so that steady traffic never waits.
    pub(crate) fn want(&mut self, bound: u64) {
        let ahead = self.ck.saturating_add(self.block / 2);
        if bound > self.wanted || ahead > self.wanted {
            self.wanted = bound
                .max(self.ck)
                .saturating_add(self.block)
                .min(crate::wire::CLOCK_MAX);
        }
    }

    /// May a frame revealing identifiers below `bound` leave now?
    pub(crate) fn covers(&self, bound: u64) -> bool {
        bound <= self.persisted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_store_round_trips_and_rejects_garbage() {
        let dir = std::env::temp_dir().join(format!("exon-clock-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("clock");
        let _ = fs::remove_file(&path);
        let mut store = FileClockStore::new(&path);
        assert_eq!(store.load().unwrap(), 0);
        store.persist(1 << 40).unwrap();
        assert_eq!(FileClockStore::new(&path).load().unwrap(), 1 << 40);
        fs::write(&path, "nonsense").unwrap();
        let err = store.load().unwrap_err().to_string();
        assert!(err.contains("exon-clock 1"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reservations_run_one_block_ahead() {
        let mut c = Clock::boot(100, 64);
        assert!(c.covers(100) && !c.covers(101));
        c.want(101);
        assert_eq!(c.wanted, 101 + 64);
        c.persisted = c.wanted;
        c.ck = 120;
        c.want(121);
        assert_eq!(c.wanted, 165, "still half a block ahead of ck");
        c.ck = 140;
        c.want(141);
        assert_eq!(c.wanted, 141 + 64);
    }
}
