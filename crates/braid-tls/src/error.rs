//! Why a TLS handshake with a peer failed, in terms a user can act on: whom we
//! refused and which key it presented, or what the peer or the network did.

use std::net::SocketAddr;
use std::time::Duration;

use braid_identity::{Peer, PublicKey, TrustError};

/// A TLS connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The peer proved it holds `key` (its handshake signature verified), but
    /// the trust store refused the key for this peer (unknown, changed, or
    /// over the TOFU limit). Nothing was kept for the peer.
    #[error("TLS: peer {peer} presented key {key}, which is not trusted: {reason}")]
    Untrusted {
        /// The peer (its address, and its name if it was dialled by name).
        peer: Peer,
        /// The Ed25519 key it presented and proved.
        key: PublicKey,
        /// The trust store's decision, with the known-hosts line to add
        /// (boxed: it carries two keys and a path, and errors travel by value).
        #[source]
        reason: Box<TrustError>,
    },
    /// The peer aborted the handshake with a TLS alert: usually it does not
    /// trust our key (`access denied`, `bad certificate`), or it requires a
    /// client key we did not present (`certificate required`).
    #[error("TLS: peer {peer} refused the handshake (alert: {alert}); if it should trust us, add our key to its known hosts")]
    RefusedByPeer {
        /// The peer.
        peer: Peer,
        /// The alert it sent.
        alert: String,
    },
    /// The handshake failed for another protocol reason (not TLS 1.3, no
    /// Ed25519 raw public key, bad signature, malformed message).
    #[error("TLS handshake with {peer} failed: {reason}")]
    Handshake {
        /// The peer.
        peer: Peer,
        /// What rustls reported.
        reason: String,
    },
    /// The handshake did not finish in time (a silent or stalled peer).
    #[error("TLS handshake with {peer} timed out after {after:?}")]
    Timeout {
        /// The peer.
        peer: Peer,
        /// The handshake timeout in force.
        after: Duration,
    },
    /// The connection failed underneath TLS.
    #[error("TLS connection with {peer}: {source}")]
    Io {
        /// The peer (`?` when even its address was unavailable).
        peer: Peer,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// Our own identity or settings could not be turned into a TLS
    /// configuration (never expected for a valid [`braid_identity::Identity`]).
    #[error("TLS configuration: {reason}")]
    Config {
        /// What rustls reported.
        reason: String,
    },
    /// The identity or known-hosts file could not be loaded.
    #[error("TLS settings: {reason}")]
    Load {
        /// The file and the failure.
        reason: String,
    },
}

impl TlsError {
    /// The untrusted key, when the failure is our refusal of the peer's key.
    pub fn untrusted_key(&self) -> Option<&PublicKey> {
        match self {
            Self::Untrusted { key, .. } => Some(key),
            _ => None,
        }
    }

    /// This error as an `std::io::Error` (kind `PermissionDenied` for trust
    /// refusals, `TimedOut` for timeouts), keeping the full message and the
    /// error itself as the source: for byte-stream APIs that speak `io`.
    pub fn into_io(self) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match &self {
            Self::Untrusted { .. } | Self::RefusedByPeer { .. } => ErrorKind::PermissionDenied,
            Self::Timeout { .. } => ErrorKind::TimedOut,
            Self::Io { source, .. } => source.kind(),
            Self::Handshake { .. } => ErrorKind::InvalidData,
            Self::Config { .. } | Self::Load { .. } => ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, self)
    }
}

/// Where a refused handshake's address is unknown.
pub(crate) fn unknown_peer(addr: Option<SocketAddr>) -> Peer {
    match addr {
        Some(addr) => Peer::addr(addr),
        // `Peer::name` accepts "unknown"; the fallback keeps the type total.
        None => Peer::name("unknown").unwrap_or_else(|| Peer::addr(SocketAddr::from(([0, 0, 0, 0], 0)))),
    }
}
