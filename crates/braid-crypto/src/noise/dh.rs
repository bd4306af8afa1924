//! X25519 (RFC 7748) for snow: the arithmetic of snow's default
//! (curve25519-dalek's Montgomery ladder, so every handshake's bytes are
//! the same) without its two needless costs per handshake and side (found
//! profiling `braid bench handshake`): snow derives the static public key
//! again from the private key, though the identity's X25519 form is known
//! ([`StaticPair`]); and its build of curve25519-dalek has no precomputed
//! tables, so each derivation (the ephemeral key's too) was a variable-base
//! multiplication of the base point. Here the ephemeral key is a fixed-base
//! multiplication with the tables. Measured in braid-proto: both keys of
//! one side in about 30 µs instead of 96 µs, of about 700 µs for the whole
//! handshake (both sides), most of which are IK's eight X25519 operations.

use braid_identity::{Identity, X25519Public, X25519Secret, KEY_LEN};
use curve25519_dalek::MontgomeryPoint;
use zeroize::Zeroizing;

/// The identity's X25519 key pair, the public half precomputed.
#[derive(Clone)]
pub(crate) struct StaticPair {
    pub(crate) secret: X25519Secret,
    pub(crate) public: X25519Public,
}

impl StaticPair {
    pub(crate) fn of(identity: &Identity) -> StaticPair {
        StaticPair { secret: identity.x25519_secret(), public: identity.x25519_public() }
    }
}

/// snow's `Dh` for Curve25519, knowing the identity's static pair.
pub(crate) struct Dh25519 {
    private: Zeroizing<[u8; KEY_LEN]>,
    public: [u8; KEY_LEN],
    known: Option<StaticPair>,
}

impl Dh25519 {
    pub(crate) fn new(known: Option<StaticPair>) -> Dh25519 {
        Dh25519 { private: Zeroizing::new([0; KEY_LEN]), public: [0; KEY_LEN], known }
    }
}

impl snow::types::Dh for Dh25519 {
    fn name(&self) -> &'static str {
        "25519"
    }
    fn pub_len(&self) -> usize {
        KEY_LEN
    }
    fn priv_len(&self) -> usize {
        KEY_LEN
    }
    fn set(&mut self, private: &[u8]) {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        let n = private.len().min(KEY_LEN);
        bytes[..n].copy_from_slice(&private[..n]);
        *self.private = *bytes;
        // A plain comparison: both are our own key, nothing a peer sent.
        let known = self.known.as_ref().filter(|k| k.secret.as_bytes() == &*bytes);
        self.public = match known {
            Some(k) => *k.public.as_bytes(),
            None => MontgomeryPoint::mul_base_clamped(*bytes).to_bytes(),
        };
    }
    fn generate(&mut self, rng: &mut dyn snow::types::Random) -> Result<(), snow::Error> {
        rng.try_fill_bytes(&mut self.private[..])?;
        self.public = MontgomeryPoint::mul_base_clamped(*self.private).to_bytes();
        Ok(())
    }
    fn pubkey(&self) -> &[u8] {
        &self.public
    }
    fn privkey(&self) -> &[u8] {
        &self.private[..]
    }
    fn dh(&self, public: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let point: [u8; KEY_LEN] = public.get(..KEY_LEN).and_then(|p| p.try_into().ok()).ok_or(snow::Error::Dh)?;
        let shared = Zeroizing::new(MontgomeryPoint(point).mul_clamped(*self.private).to_bytes());
        out.get_mut(..KEY_LEN).ok_or(snow::Error::Dh)?.copy_from_slice(&shared[..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noise::resolver::SeededRandom;
    use braid_core::{Rng, SeedableRng};
    use snow::params::DHChoice;
    use snow::resolvers::{CryptoResolver, DefaultResolver};
    use snow::types::Dh;

    /// The faster X25519 is the same function: keys, shared secrets and so
    /// the handshake's bytes equal snow's default resolver's.
    #[test]
    fn x25519_matches_snows_default() {
        let id = Identity::from_seed(&[7; 32]);
        let mut ours = Dh25519::new(Some(StaticPair::of(&id)));
        let mut theirs = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        // The static key: taken from the identity, equal to the derived one.
        ours.set(id.x25519_secret().as_bytes());
        theirs.set(id.x25519_secret().as_bytes());
        assert_eq!(ours.pubkey(), theirs.pubkey());
        // Another key (not the identity's): derived.
        ours.set(&[9; 32]);
        theirs.set(&[9; 32]);
        assert_eq!(ours.pubkey(), theirs.pubkey());
        // Ephemeral keys from the same randomness.
        let mut a = SeededRandom(Rng::from_seed([3; 32]));
        let mut b = SeededRandom(Rng::from_seed([3; 32]));
        ours.generate(&mut a).unwrap();
        theirs.generate(&mut b).unwrap();
        assert_eq!((ours.pubkey(), ours.privkey()), (theirs.pubkey(), theirs.privkey()));
        let peer = Identity::from_seed(&[8; 32]).x25519_public();
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        ours.dh(peer.as_bytes(), &mut x).unwrap();
        theirs.dh(peer.as_bytes(), &mut y).unwrap();
        assert_eq!(x, y);
        assert!(ours.dh(&[1; 31], &mut x).is_err(), "a short key is an error, not a panic");
        assert!(ours.dh(peer.as_bytes(), &mut [0u8; 31]).is_err(), "a short output is an error, not a panic");
    }
}
