//! Errors of identity key files and of finding braid's configuration folder.
//! Each names the file (and line) and what was expected there, so a user can
//! fix the file; none ever quotes a secret.

use std::io;
use std::path::PathBuf;

/// Why an identity could not be created, loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The operating system gave no randomness for a new key.
    #[error("no randomness from the operating system for a new key: {reason}")]
    Randomness {
        /// The system's message.
        reason: String,
    },
    /// There is no identity file at the path.
    #[error("no identity file at {path}: create one with `braid keygen`")]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// A key file exists and overwriting it was not asked for.
    #[error("identity file {path} already exists: not overwritten (use --force to replace it; the old key is then lost)")]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// The key file can be read or written by group or others.
    #[error("identity file {path} has permissions {mode:04o}: it must not be accessible by group or others (like ssh, the key is refused); run `chmod 600 {path}`", path = path.display())]
    TooOpen {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path is a directory or some other non-regular file.
    #[error("identity file {path} is not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A line of the key file is not what the format says.
    #[error("identity file {path}:{line}: expected {expected}", path = path.display())]
    Format {
        /// The key file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What the format wants on that line.
        expected: String,
    },
    /// The public key line does not belong to the secret key line.
    #[error("identity file {path}:3: the public key does not match the secret key on line 2 (the file was edited or damaged)", path = path.display())]
    KeyMismatch {
        /// The key file.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error("{action} {path}: {source}", path = path.display())]
    Io {
        /// What was being done, e.g. "reading identity file".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// None of the variables that locate braid's folder is set.
    #[error("cannot locate braid's configuration folder: set BRAID_HOME (or XDG_CONFIG_HOME or HOME), or pass the file path explicitly")]
    NoHome,
}

impl IdentityError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
