//! Authenticated encryption and peer identity for the Braid transport.
//!
//! - [`noise`]: the Noise IK handshake inside Braid's Initial / Retry /
//!   Accept exchange, after the stateless cookie;
//! - [`packet_key`]: the AEAD, nonce, header protection and key update of
//!   every packet after the handshake;
//! - [`protection`]: a connection's keys in both directions, sealing and
//!   opening whole packets, and when to update keys.
//!
//! The Noise IK state machine, the cipher suites and the AEAD keys
//! themselves are `braid_crypto`'s (shared with Exon); these modules hold
//! what is Braid's: payloads, prologue, labels, nonces, header protection.
//!
//! What it guarantees (the QUIC / WireGuard model): a packet whose tag does
//! not verify changes no state at all (no ACK, close, flow-control update,
//! path migration or replay-window advance); a peer is only talked to once
//! it has proved it holds its key and the [`PeerVerifier`] accepted that key
//! (known hosts, TOFU); and the server keeps no state before that.
//!
//! The protocol core only *uses* trust decisions; the driver makes them
//! ([`PeerVerifier`], implemented over `braid_identity::TrustStore`), so
//! this crate never touches a file.

pub(crate) mod noise;
pub(crate) mod packet_key;
pub(crate) mod protection;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

pub use braid_identity::{Identity, PublicKey};
pub use braid_crypto::NoiseError;
pub use noise::HandshakeError;
pub use packet_key::{CipherSuite, TAG_LEN};

/// Decides whether a peer that has proved it holds `key` may talk to us.
///
/// Called once per handshake, before the connection keeps any state for
/// the peer. A refusal's text says why (it reaches the application as the
/// close reason on the client side).
pub trait PeerVerifier: Send + Sync + fmt::Debug {
    /// Accept or refuse the peer at `remote` with `key`: a client judging
    /// the server it dialled.
    fn verify(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String>;

    /// Accept or refuse a client that connected from `remote` with `key`: a
    /// server judging a client, whose address (an ephemeral port, perhaps a
    /// NAT's) does not identify it. The default judges it as [`verify`]
    /// does.
    ///
    /// [`verify`]: PeerVerifier::verify
    fn verify_client(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.verify(remote, key)
    }
}

/// Accepts every key: authenticated encryption against passive observers
/// and tampering, but no check of *who* the peer is. For tests and for
/// servers that authorize their clients later, by other means.
#[derive(Debug, Default, Clone, Copy)]
pub struct AcceptAnyKey;

impl PeerVerifier for AcceptAnyKey {
    fn verify(&self, _: SocketAddr, _: &PublicKey) -> Result<(), String> {
        Ok(())
    }
}

/// A node's identity and how it judges its peers.
#[derive(Clone)]
pub struct Credentials {
    /// This node's key pair.
    pub identity: Identity,
    /// The trust decision for peers' keys.
    pub verifier: Arc<dyn PeerVerifier>,
    /// Cipher suites in order of preference (default: the faster on this
    /// CPU first).
    pub suites: Vec<CipherSuite>,
}

impl Credentials {
    /// `identity` with `verifier`, both suites, the faster first.
    pub fn new(identity: Identity, verifier: Arc<dyn PeerVerifier>) -> Self {
        Credentials { identity, verifier, suites: CipherSuite::preferred().to_vec() }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("public_key", &self.identity.public_key())
            .field("verifier", &self.verifier)
            .field("suites", &self.suites)
            .finish()
    }
}

/// Whether an endpoint authenticates and encrypts.
///
/// The protocol core cannot make keys up (it has no randomness of its own
/// and reads no files), so its default is [`Security::Insecure`]; the
/// driver (`braid-net`) and everything above it default to
/// [`Security::Authenticated`] with the node's identity and known hosts.
#[derive(Clone, Debug, Default)]
pub enum Security {
    /// No handshake keys, no encryption, no authentication: the bare
    /// protocol, for benchmarks of it and for simulations that model only
    /// the transport (`--insecure-no-auth`). Both peers must agree.
    #[default]
    Insecure,
    /// Noise IK handshake, every packet sealed.
    Authenticated(Arc<Credentials>),
}

impl Security {
    /// Authenticated with `identity`, judging peers with `verifier`.
    pub fn authenticated(identity: Identity, verifier: Arc<dyn PeerVerifier>) -> Self {
        Security::Authenticated(Arc::new(Credentials::new(identity, verifier)))
    }

    /// True unless insecure.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Security::Authenticated(_))
    }

    pub(crate) fn credentials(&self) -> Option<&Arc<Credentials>> {
        match self {
            Security::Authenticated(c) => Some(c),
            Security::Insecure => None,
        }
    }
}

impl PartialEq for Security {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Security::Insecure, Security::Insecure) => true,
            (Security::Authenticated(a), Security::Authenticated(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}
