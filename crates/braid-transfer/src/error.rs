//! The engine's error type and the options shared by both ends.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::emulate::{RateError, Throttle};
use crate::manifest::ManifestError;
use crate::plan::PlanError;
use crate::protocol::ProtocolError;
use crate::staging::StagingError;
use crate::tuner::{Concurrency, TunerError};

/// Why a transfer failed. Every variant about a file names its path.
#[derive(Debug, Error)]
pub enum TransferError {
    /// The source could not be walked.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The staging configuration is unusable (e.g. a cap below one chunk).
    #[error(transparent)]
    Staging(#[from] StagingError),
    /// The tuner configuration is unusable.
    #[error(transparent)]
    Tuner(#[from] TunerError),
    /// An emulation or bandwidth rate is unusable.
    #[error(transparent)]
    Rate(#[from] RateError),
    /// An option out of range.
    #[error("option `{field}` = {value}: must be {allowed}")]
    Option {
        /// The option.
        field: &'static str,
        /// Its value.
        value: String,
        /// The allowed form.
        allowed: &'static str,
    },
    /// The manifest or plan is refused (a path with `..`, an absolute path, bad extents).
    #[error("manifest refused: {0}")]
    Plan(#[from] PlanError),
    /// A frame could not be read or written, or the peer broke the protocol.
    #[error("protocol: {0}")]
    Protocol(#[from] ProtocolError),
    /// A stream could not be opened.
    #[error("cannot open a stream: {0}")]
    Connect(io::Error),
    /// The peer went away before the transfer completed.
    #[error("the peer closed the connection before the transfer completed")]
    Disconnected,
    /// The peer reported an error.
    #[error("the peer reported: {0}")]
    Remote(String),
    /// A file operation failed.
    #[error("`{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The destination's file system is full; what was received so far is kept for resume.
    #[error("no space left on the device writing `{path}` (what was received is kept; free space and run again to resume)")]
    NoSpace {
        /// The path being written.
        path: PathBuf,
    },
    /// The destination exists and is not a directory.
    #[error("destination `{path}` is not a directory")]
    DestNotDir {
        /// The path.
        path: PathBuf,
    },
    /// Something that is not a directory is in the way of a directory of the transfer.
    #[error("`{path}` exists and is not a directory, but the transfer has a directory there")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A source file changed (size or mtime) while it was sent; run again to send it anew.
    #[error("source `{path}` changed during the transfer (size or modification time); run again to send it anew")]
    SourceChanged {
        /// The path.
        path: PathBuf,
    },
    /// A file's data on disk did not match its chunk hashes even after re-fetching.
    #[error("`{path}`: written data does not match the sender's hashes")]
    Verify {
        /// The path.
        path: PathBuf,
    },
}

impl TransferError {
    /// An I/O error on `path`, with a full disk made explicit.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        if source.raw_os_error() == Some(libc::ENOSPC) {
            TransferError::NoSpace { path }
        } else {
            TransferError::Io { path, source }
        }
    }
}

/// Emulated storage for benchmarks: each worker limited to `per_worker` bytes/s, all together to
/// `total` (see `emulate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmulatedStorage {
    /// Bytes/s per worker.
    pub per_worker: f64,
    /// Bytes/s over all workers.
    pub total: Option<f64>,
}

impl EmulatedStorage {
    /// The throttle, validated.
    pub fn throttle(&self) -> Result<Throttle, TransferError> {
        Ok(Throttle::new(self.per_worker, self.total)?)
    }
}

/// Progress of a transfer, reported once per probe interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Seconds since the transfer started.
    pub elapsed: f64,
    /// Payload bytes done (sender: sent; receiver: written), this session.
    pub bytes_done: u64,
    /// Payload bytes to move this session (resumed chunks excluded).
    pub bytes_total: u64,
    /// Files finished.
    pub files_done: u64,
    /// Files in the transfer.
    pub files_total: u64,
    /// Worker counts now (the receiver fills only `write`).
    pub concurrency: Concurrency,
}

/// A progress callback; called from the engine's tasks, so it must be cheap.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// One probe interval of the sender, for plots (the paper's Fig. 6–8).
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalSample {
    /// Seconds since the transfer started, at the end of the interval.
    pub elapsed: f64,
    /// Worker counts that ran during the interval.
    pub concurrency: Concurrency,
    /// Read-stage throughput (bytes/s over busy time).
    pub read_bps: f64,
    /// Network-stage throughput (bytes/s over busy time).
    pub network_bps: f64,
    /// Write-stage throughput as the receiver reported it.
    pub write_bps: f64,
    /// Network loss ratio (retransmitted / sent segments).
    pub loss: f64,
    /// The transfer's throughput: payload bytes the receiver wrote between its latest two reports
    /// over the time between them (before its second report, bytes sent during the interval).
    pub goodput_bps: f64,
}

pub(crate) fn check_interval(interval: Duration) -> Result<(), TransferError> {
    if interval < Duration::from_millis(10) {
        return Err(TransferError::Option {
            field: "probe_interval",
            value: format!("{interval:?}"),
            allowed: "at least 10 ms",
        });
    }
    Ok(())
}
