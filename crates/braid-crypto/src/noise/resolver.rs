//! What snow is built with: the pattern, the caller's randomness and the
//! faster X25519 ([`super::dh`]); hashing and the handshake cipher are
//! snow's own (BLAKE2s, ChaChaPoly).

use braid_core::{Rng, RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver, FallbackResolver};

use super::dh::{Dh25519, StaticPair};

/// The protocol name; every peer of both protocols uses it (their
/// prologues keep one protocol's messages out of the other).
pub const PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// Feeds snow the randomness the caller passed in (its ephemeral keys),
/// so the simulator's runs stay deterministic and no thread RNG is used.
pub(crate) struct SeededRandom(pub(crate) Rng);

impl snow::types::Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

struct SeededResolver {
    /// Taken by the one handshake state built with it.
    rng: std::sync::Mutex<Option<Rng>>,
    known: StaticPair,
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn snow::types::Random>> {
        let rng = self.rng.lock().ok()?.take()?;
        Some(Box::new(SeededRandom(rng)))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn snow::types::Dh>> {
        match choice {
            DHChoice::Curve25519 => Some(Box::new(Dh25519::new(Some(self.known.clone())))),
            _ => None,
        }
    }
    fn resolve_hash(&self, _: &HashChoice) -> Option<Box<dyn snow::types::Hash>> {
        None
    }
    fn resolve_cipher(&self, _: &CipherChoice) -> Option<Box<dyn snow::types::Cipher>> {
        None
    }
}

/// A builder for one handshake with ephemeral keys from `seed`, knowing
/// the local static pair `known`.
pub(crate) fn builder<'a>(seed: [u8; 32], known: StaticPair) -> snow::Builder<'a> {
    let params: NoiseParams = PATTERN.parse().unwrap_or_else(|_| unreachable!("the pattern is valid"));
    let seeded = SeededResolver { rng: std::sync::Mutex::new(Some(Rng::from_seed(seed))), known };
    let resolver = FallbackResolver::new(Box::new(seeded), Box::new(DefaultResolver));
    snow::Builder::with_resolver(params, Box::new(resolver))
}
