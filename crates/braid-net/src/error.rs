//! The driver's error types.

use std::io;
use std::net::{IpAddr, SocketAddr};

use braid_proto::{CcError, CloseReason, ConfigError, ConnectError, PathError};

/// Creating an endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// [`crate::Endpoint::bind`] was called outside a tokio runtime.
    #[error("Endpoint::bind must be called from within a tokio runtime")]
    NoRuntime,
    /// The UDP socket could not be created or configured.
    #[error("cannot create a UDP socket for {addr}: {source}")]
    Socket {
        /// The address asked for.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// The UDP socket could not be bound.
    #[error("cannot bind UDP socket to {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// The endpoint's transport configuration is invalid.
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
}

/// An operation on a connection (or on the endpoint, for `connect`) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The connection is closed; the reason says who closed it and why
    /// (`HandshakeTimeout` when nobody answered a `connect`).
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    /// The message exceeds the connection's `max_message_size`.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Size of the refused message.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// `connect` was refused locally before anything was sent (endpoint
    /// full, invalid transport configuration).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The endpoint was closed, or its driver stopped.
    #[error("endpoint closed")]
    EndpointClosed,
    /// The endpoint's socket failed; its driver stopped.
    #[error("endpoint socket failed: {0}")]
    Io(#[from] io::Error),
    /// A congestion-control parameter could not be set.
    #[error(transparent)]
    Congestion(#[from] CcError),
    /// A multipath request was refused (unknown path, last path, too many
    /// paths, not the connecting side, ...).
    #[error(transparent)]
    Path(#[from] PathError),
    /// A path's local address cannot be used by this endpoint's socket: it
    /// is bound to another address (bind to a wildcard such as
    /// `0.0.0.0:0` to send from several local addresses), or of the other
    /// address family.
    #[error("local address {local} is not usable by a socket bound to {bound}: bind the endpoint to a wildcard address (e.g. 0.0.0.0:0 or [::]:0) of the same family for multipath")]
    LocalAddress {
        /// The local address asked for.
        local: IpAddr,
        /// The address the endpoint's socket is bound to.
        bound: SocketAddr,
    },
    /// `connect_multipath` was given no path.
    #[error("connect_multipath needs at least one (local, remote) address pair")]
    NoPaths,
}

impl ConnectionError {
    /// True when the connection ended because a timer expired (handshake or
    /// idle timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            ConnectionError::Closed(CloseReason::HandshakeTimeout | CloseReason::IdleTimeout)
        )
    }
}

/// How the driver ended, kept so every later call can report it.
#[derive(Debug, Clone)]
pub(crate) enum DriverExit {
    /// Closed on request, or every handle was dropped.
    Closed,
    /// The socket failed.
    Failed(io::ErrorKind, String),
}

impl DriverExit {
    pub(crate) fn to_error(&self) -> ConnectionError {
        match self {
            DriverExit::Closed => ConnectionError::EndpointClosed,
            DriverExit::Failed(kind, msg) => ConnectionError::Io(io::Error::new(*kind, msg.clone())),
        }
    }
}
