//! The emulator's error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong building, driving or tearing down a testbed. Messages
/// say what is missing or which field is wrong, and how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmuError {
    /// Not running as root (network namespaces and TUN devices need it).
    #[error("the emulator needs root (to create network namespaces and TUN devices); run it with sudo or as root")]
    NotRoot,
    /// /dev/net/tun is missing or cannot be opened.
    #[error("cannot use /dev/net/tun ({0}); the kernel needs TUN support (modprobe tun) and the device node must exist")]
    NoTun(#[source] io::Error),
    /// The `ip` command (iproute2) is not installed.
    #[error(
        "the `ip` command (iproute2) was not found on PATH; install it (apt-get install iproute2)"
    )]
    NoIpCommand,
    /// A testbed name that is empty, too long or has other characters than
    /// the allowed ones.
    #[error("invalid testbed name `{0}`: expected 1 to 8 characters among a-z, 0-9 and '-', starting with a letter or digit")]
    InvalidName(String),
    /// A host name that is not allowed.
    #[error("invalid host name `{0}`: expected 1 to 15 characters among a-z, 0-9, '_' and '-'")]
    InvalidHost(String),
    /// A testbed of that name is running.
    #[error("testbed `{name}` is already running (process {pid}); stop it first with `braid emu down --name {name}`")]
    NameInUse {
        /// Its name.
        name: String,
        /// The process that owns it.
        pid: u32,
    },
    /// No running testbed has that name.
    #[error(
        "no testbed named `{0}` is running (start one with `braid emu up --name {0} --link SPEC`)"
    )]
    NotRunning(String),
    /// The topology is inconsistent (unknown host, no path, too many paths…).
    #[error("invalid topology: {0}")]
    Topology(String),
    /// A topology file could not be read or parsed.
    #[error("topology file {path}: {message}")]
    TopologyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column when known.
        message: String,
    },
    /// A path given by id or name does not exist.
    #[error("no path `{0}` in this testbed (paths are named by their id, 0, 1, …, or by their topology name)")]
    NoSuchPath(String),
    /// A host given by name does not exist.
    #[error("no host `{0}` in this testbed")]
    NoSuchHost(String),
    /// A command the emulator runs (`ip …`) failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output (or exit status).
        stderr: String,
    },
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The forwarding thread or process is gone.
    #[error("the testbed's forwarder is not running any more")]
    ForwarderGone,
    /// The control socket answered with an error or nonsense.
    #[error("testbed `{name}`: {message}")]
    Control {
        /// The testbed.
        name: String,
        /// The error.
        message: String,
    },
}

impl EmuError {
    /// An [`EmuError::Io`] saying what was being done.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> EmuError {
        EmuError::Io {
            what: what.into(),
            source,
        }
    }
}
