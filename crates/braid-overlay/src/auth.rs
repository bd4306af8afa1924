//! Keys for a group of members run by one program (tests, the CLI's local
//! overlays): each member gets a fresh in-memory identity and trusts exactly
//! the others' keys, as `braid_node::NodeAuth::pinned_pair` does for two.

use std::sync::Arc;

use braid_identity::{Identity, KnownHosts, Pattern, TrustPolicy, TrustStore};
use braid_node::NodeAuth;

/// Why keys could not be made.
#[derive(Debug, thiserror::Error)]
#[error("pinned keys: {0}")]
pub struct AuthError(String);

/// `n` identities, each pinned by every other member (known hosts only).
///
/// # Errors
/// The operating system's randomness failed, or a key could not be pinned.
pub fn pinned_group(n: usize) -> Result<Vec<NodeAuth>, AuthError> {
    let ids: Vec<Identity> = (0..n)
        .map(|_| Identity::generate_os().map_err(|e| AuthError(format!("a fresh identity: {e}"))))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(n);
    for (i, me) in ids.iter().enumerate() {
        let mut hosts = KnownHosts::new();
        for (j, other) in ids.iter().enumerate() {
            if i != j {
                hosts
                    .append(Pattern::Any, other.public_key(), &format!("overlay member {j}"))
                    .map_err(|e| AuthError(e.to_string()))?;
            }
        }
        out.push(NodeAuth::Keys {
            identity: me.clone(),
            trust: Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts)),
        });
    }
    Ok(out)
}
