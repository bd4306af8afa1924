//! Who a node is and whom it trusts, for the endpoints this crate binds:
//! the node's identity file and known hosts turned into the protocol's
//! [`Security`], and the trust decisions the handshake asks for.
//!
//! The protocol core (`braid-proto`) runs the Noise handshake and seals
//! packets but never touches a file; here the decision is made against the
//! known-hosts file ([`TrustVerifier`], which also records keys under
//! trust on first use), or against one pinned key ([`PinnedKey`]: two
//! endpoints of one program, as in `braid demo` and the benchmarks).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use braid_identity::{Identity, IdentityError, KnownHostsError, Peer, PublicKey, TrustPolicy, TrustStore};
use braid_proto::{PeerVerifier, Security};

/// Loading a node's identity or known hosts failed.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// The identity file could not be read or created.
    #[error("identity {path}: {source}")]
    Identity {
        /// The key file.
        path: PathBuf,
        /// What went wrong.
        source: IdentityError,
    },
    /// The known-hosts file could not be read.
    #[error(transparent)]
    KnownHosts(#[from] KnownHostsError),
    /// No home directory for the default files.
    #[error("{0}")]
    Home(IdentityError),
}

/// Judges peers' keys with a [`TrustStore`] (known hosts, TOFU, or none).
#[derive(Debug, Clone)]
pub struct TrustVerifier(pub Arc<TrustStore>);

impl PeerVerifier for TrustVerifier {
    fn verify(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.0.authorize(&Peer::addr(remote), key).map(|_| ()).map_err(|e| e.to_string())
    }

    fn verify_client(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.0.authorize(&Peer::accepted(remote), key).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Accepts exactly one key: for two endpoints that know each other's
/// identity already (one program, or keys exchanged out of band).
#[derive(Debug, Clone, Copy)]
pub struct PinnedKey(pub PublicKey);

impl PeerVerifier for PinnedKey {
    fn verify(&self, _: SocketAddr, key: &PublicKey) -> Result<(), String> {
        if *key == self.0 {
            Ok(())
        } else {
            Err(format!("peer presented key {key}, expected {}", self.0))
        }
    }
}

/// A node's security settings: where its identity and known hosts live,
/// and the trust policy.
#[derive(Debug, Clone, Default)]
pub struct NodeSecurity {
    /// The identity file (default: `$BRAID_HOME/identity`, created on first
    /// use with mode 0600).
    pub identity: Option<PathBuf>,
    /// The known-hosts file (default: `$BRAID_HOME/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// How peers' keys are judged; [`TrustPolicy::InsecureNoAuth`] turns
    /// authentication and encryption off altogether.
    pub policy: TrustPolicy,
}

impl NodeSecurity {
    /// The protocol security these settings give: the identity loaded (or
    /// created) and the known hosts opened, or [`Security::Insecure`].
    pub fn load(&self) -> Result<Security, SecurityError> {
        if !self.policy.authenticates() {
            return Ok(Security::Insecure);
        }
        let identity_path = match &self.identity {
            Some(p) => p.clone(),
            None => braid_identity::default_identity_path().map_err(SecurityError::Home)?,
        };
        let known_hosts = match &self.known_hosts {
            Some(p) => p.clone(),
            None => braid_identity::default_known_hosts_path().map_err(SecurityError::Home)?,
        };
        let identity = load_identity(&identity_path)?;
        let store = TrustStore::open(self.policy, &known_hosts)?;
        Ok(Security::authenticated(identity, Arc::new(TrustVerifier(Arc::new(store)))))
    }
}

fn load_identity(path: &Path) -> Result<Identity, SecurityError> {
    Identity::load_or_create(path).map_err(|source| SecurityError::Identity { path: path.to_path_buf(), source })
}

/// Two fresh identities that trust exactly each other: the security of a
/// client and a server in one program (demos, benchmarks, tests), fully
/// authenticated and encrypted without touching any file.
pub fn pinned_pair() -> Result<(Security, Security), SecurityError> {
    let fresh = || {
        Identity::generate_os().map_err(|source| SecurityError::Identity { path: PathBuf::from("(memory)"), source })
    };
    let (a, b) = (fresh()?, fresh()?);
    let (ka, kb) = (a.public_key(), b.public_key());
    Ok((
        Security::authenticated(a, Arc::new(PinnedKey(kb))),
        Security::authenticated(b, Arc::new(PinnedKey(ka))),
    ))
}
