//! A node's secret identity: an Ed25519 signing key (RFC 8032) and the X25519
//! static key derived from it for Noise (libsodium's
//! `crypto_sign_ed25519_sk_to_curve25519`: the first half of SHA-512 of the
//! seed, clamped per RFC 7748 §5).
//!
//! One key pair serves signing (TLS 1.3 certificates, signed tokens) and
//! Diffie-Hellman (Noise), so a node has a single identity that `known_hosts`
//! pins. Using one key for both is analysed in "On using the same key pair for
//! Ed25519 and an X25519 based KEM" (Thormarker, 2021): safe as long as the
//! two uses hash differently, which Noise and Ed25519 do.

use std::fmt;

use ed25519_dalek::{Signer as _, SigningKey};
use zeroize::Zeroizing;

use crate::error::IdentityError;
use crate::key::{
    NodeId, PublicKey, Signature, SignatureError, X25519Public, X25519Secret, KEY_LEN,
};

/// DER head of a PKCS#8 v1 `OneAsymmetricKey` holding an Ed25519 seed
/// (RFC 8410 §7): version 0, algorithm 1.3.101.112, OCTET STRING of the
/// 32-byte OCTET STRING seed.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// A node's key pair. The secret is wiped from memory when dropped and never
/// printed by `Debug`.
#[derive(Clone)]
pub struct Identity {
    signing: SigningKey,
}

impl Identity {
    /// A new identity from the caller's cryptographically secure RNG (the
    /// simulator passes a seeded one so runs repeat).
    pub fn generate<R: rand_core::CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut seed = Zeroizing::new([0u8; KEY_LEN]);
        rng.fill_bytes(seed.as_mut());
        Self::from_seed(&seed)
    }

    /// A new identity from the operating system's randomness: the one to use
    /// for real nodes.
    pub fn generate_os() -> Result<Self, IdentityError> {
        let mut seed = Zeroizing::new([0u8; KEY_LEN]);
        getrandom::fill(seed.as_mut()).map_err(|e| IdentityError::Randomness {
            reason: e.to_string(),
        })?;
        Ok(Self::from_seed(&seed))
    }

    /// The identity whose RFC 8032 private key (32-byte seed) is `seed`.
    pub fn from_seed(seed: &[u8; KEY_LEN]) -> Self {
        Self {
            signing: SigningKey::from_bytes(seed),
        }
    }

    /// The 32-byte seed: secret. Only the key file and the PKCS#8 export
    /// need it.
    pub(crate) fn seed(&self) -> Zeroizing<[u8; KEY_LEN]> {
        Zeroizing::new(self.signing.to_bytes())
    }

    /// The public key peers know this node by.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::from_verifying(&self.signing.verifying_key())
    }

    /// This node's Exon node ID (derived from the public key).
    pub fn node_id(&self) -> NodeId {
        self.public_key().node_id()
    }

    /// The X25519 secret for Noise, as libsodium's
    /// `crypto_sign_ed25519_sk_to_curve25519` computes it (clamped).
    pub fn x25519_secret(&self) -> X25519Secret {
        let mut scalar = Zeroizing::new(self.signing.to_scalar_bytes());
        clamp(&mut scalar);
        X25519Secret(scalar)
    }

    /// The X25519 public key for Noise: equal to
    /// `self.public_key().to_x25519()` and to `self.x25519_secret().public_key()`.
    pub fn x25519_public(&self) -> X25519Public {
        self.public_key().to_x25519()
    }

    /// Signs `message` (pure Ed25519, RFC 8032 §5.1.6; deterministic).
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature::from_bytes(self.signing.sign(message).to_bytes())
    }

    /// Verifies a signature by this identity's own public key.
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), SignatureError> {
        self.public_key().verify(message, signature)
    }

    /// The secret key as PKCS#8 v1 DER (RFC 8410 §7), the form TLS libraries
    /// (rustls, rcgen) load an Ed25519 key from. Secret: wiped when dropped.
    pub fn to_pkcs8_der(&self) -> Zeroizing<Vec<u8>> {
        let mut der = Zeroizing::new(Vec::with_capacity(PKCS8_PREFIX.len() + KEY_LEN));
        der.extend_from_slice(&PKCS8_PREFIX);
        der.extend_from_slice(self.seed().as_ref());
        der
    }
}

/// RFC 7748 §5 clamping, as libsodium applies it to the converted scalar.
fn clamp(scalar: &mut [u8; KEY_LEN]) {
    scalar[0] &= 248;
    scalar[31] &= 127;
    scalar[31] |= 64;
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({}, secret redacted)", self.public_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A byte-pattern source standing in for a seeded CSPRNG in tests.
    struct Counter(u8);

    impl rand_core::TryRng for Counter {
        type Error = Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Infallible> {
            let mut b = [0; 4];
            self.try_fill_bytes(&mut b)?;
            Ok(u32::from_le_bytes(b))
        }
        fn try_next_u64(&mut self) -> Result<u64, Infallible> {
            let mut b = [0; 8];
            self.try_fill_bytes(&mut b)?;
            Ok(u64::from_le_bytes(b))
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
            for byte in dst {
                self.0 = self.0.wrapping_add(1);
                *byte = self.0;
            }
            Ok(())
        }
    }
    impl rand_core::TryCryptoRng for Counter {}

    #[test]
    fn generate_takes_the_seed_from_the_callers_rng() {
        let from_rng = Identity::generate(&mut Counter(0));
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8 + 1);
        assert_eq!(
            from_rng.public_key(),
            Identity::from_seed(&seed).public_key()
        );
        assert_ne!(
            Identity::generate(&mut Counter(7)).public_key(),
            from_rng.public_key()
        );
    }

    #[test]
    fn os_keys_differ() {
        let a = Identity::generate_os().unwrap();
        let b = Identity::generate_os().unwrap();
        assert_ne!(a.public_key(), b.public_key());
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let id = Identity::from_seed(&[0xab; 32]);
        let shown = format!("{id:?} {:?}", id.x25519_secret());
        assert!(shown.contains("redacted"));
        assert!(!shown.to_lowercase().contains("abab"));
        assert!(shown.contains(&id.public_key().to_string()));
    }
}
