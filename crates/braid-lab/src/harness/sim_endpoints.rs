//! The two endpoints of a simulated run: seeded, so a run repeats exactly, and
//! authenticated and encrypted, as every Braid endpoint is by default (issue 17:
//! the simulator's campaigns run with encryption on, so what they measure is
//! the protocol users run: sealed packets, header protection, the Noise
//! handshake inside Initial/Accept).
//!
//! Each end's identity is derived from the scenario seed and each pins the
//! other's key ([`PinnedKey`]), as two endpoints of one program do; the Noise
//! ephemeral keys come from the endpoints' seeded generators.

use std::sync::Arc;

use braid_core::splitmix64;
use braid_net::{Identity, PinnedKey};
use braid_proto::{Endpoint, EndpointConfig, Security};

/// The server and the client endpoint of a run seeded with `seed`, each with
/// its `config` plus credentials pinning the other end.
pub fn seeded_pair(seed: u64, server: EndpointConfig, client: EndpointConfig) -> (Endpoint, Endpoint) {
    let (server_id, client_id) = (identity(seed ^ 0x5e5e), identity(seed ^ 0xc1c1));
    let (server_key, client_key) = (server_id.public_key(), client_id.public_key());
    let server = EndpointConfig { security: Security::authenticated(server_id, Arc::new(PinnedKey(client_key))), ..server };
    let client = EndpointConfig { security: Security::authenticated(client_id, Arc::new(PinnedKey(server_key))), ..client };
    (Endpoint::new(server, splitmix64(seed ^ 0x5e5e)), Endpoint::new(client, splitmix64(seed ^ 0xc1c1)))
}

/// An Ed25519 identity whose secret is four SplitMix64 outputs of `seed`.
fn identity(seed: u64) -> Identity {
    let mut secret = [0u8; 32];
    let mut state = seed;
    for word in secret.chunks_exact_mut(8) {
        state = splitmix64(state);
        word.copy_from_slice(&state.to_le_bytes());
    }
    Identity::from_seed(&secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_are_authenticated_and_seeds_give_distinct_repeatable_keys() {
        let (server, client) = seeded_pair(7, EndpointConfig::default(), EndpointConfig::default());
        assert!(matches!(server.config().security, Security::Authenticated(_)));
        assert!(matches!(client.config().security, Security::Authenticated(_)));
        assert_eq!(identity(7).public_key(), identity(7).public_key());
        assert_ne!(identity(7).public_key(), identity(8).public_key());
    }
}
