//! The Noise IK handshake (Noise Protocol Framework rev. 34, §7.5) both
//! protocols open sessions with, over `snow`:
//!
//! ```text
//! initiator (knows the responder's key)          responder
//! message 1: -> e, es, s, ss   + payload  ──▶   Responder::read, then the
//!                                               protocol parses the payload,
//!                                               Responder::prove (the Ed25519
//!                                               key it names is the static key
//!                                               proved), the protocol judges it
//!                                   ◀──  message 2: <- e, ee, se + payload
//! Initiator::finish                             (ProvedResponder::respond)
//! ```
//!
//! The static keys are the X25519 forms of the peers' Ed25519 identities
//! (`braid_identity`); the prologue binds the handshake to what the
//! protocol chooses (its name and version, connection IDs, a cookie). The
//! responder answers message 1 at once (IK needs no state between the
//! messages), so a half-open handshake costs it nothing, and it keeps
//! nothing before the protocol accepted the initiator's key: the type
//! states make that order the only one that compiles ([`Responder`] has
//! no `respond`, only [`ProvedResponder`] has).
//!
//! After message 2 both sides take `Split()` (§5.2) as the two directions'
//! traffic secrets, oriented for the caller ([`TrafficSecrets`]).
//! Ephemeral keys come from the seed the caller passes in, never a thread
//! RNG.

mod dh;
mod resolver;

use braid_identity::{Identity, PublicKey, X25519Public, KEY_LEN};
use zeroize::Zeroize;

use crate::SECRET_LEN;
use dh::StaticPair;
pub use resolver::PATTERN;

/// What a protocol fixes for its handshakes.
#[derive(Debug, Clone, Copy)]
pub struct IkParams<'a> {
    /// Bound to the handshake: both sides must use the same bytes, or
    /// message 1 fails to authenticate.
    pub prologue: &'a [u8],
    /// The longest handshake message the protocol sends or reads (its wire
    /// format's bound); a payload that does not fit is an error.
    pub max_message_len: usize,
}

/// Why a handshake message was not written or not accepted. Protocols map
/// these into their own error enums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoiseError {
    /// Decryption or a Diffie-Hellman step failed: not from the peer we
    /// expected, altered on the way, under another prologue, or not a
    /// handshake message at all.
    #[error("handshake message failed authentication")]
    Authentication,
    /// The Ed25519 key the peer named does not belong to the static key
    /// the handshake proved.
    #[error("the peer's Ed25519 key does not match its Noise static key")]
    KeyMismatch,
    /// Our own message could not be written: the payload does not fit the
    /// protocol's largest message.
    #[error("the handshake payload does not fit the largest message")]
    Write,
}

/// The two traffic secrets of `Split()`, oriented for the side that holds
/// them; zeroized when dropped.
pub struct TrafficSecrets {
    /// The secret of what this side sends.
    pub send: [u8; SECRET_LEN],
    /// The secret of what this side receives.
    pub recv: [u8; SECRET_LEN],
}

impl Drop for TrafficSecrets {
    fn drop(&mut self) {
        self.send.zeroize();
        self.recv.zeroize();
    }
}

impl std::fmt::Debug for TrafficSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrafficSecrets(..)")
    }
}

/// A handshake's state built with the identity's static key, the seed's
/// ephemeral randomness and the prologue.
fn state(
    identity: &Identity,
    remote: Option<X25519Public>,
    prologue: &[u8],
    seed: [u8; 32],
) -> Result<snow::HandshakeState, NoiseError> {
    let known = StaticPair::of(identity);
    let secret = known.secret.clone();
    let builder = resolver::builder(seed, known);
    // Cannot fail with keys of the right length, which these are; a
    // failure would mean no message can be written.
    let built = builder.local_private_key(secret.as_bytes()).and_then(|b| b.prologue(prologue));
    let built = match remote {
        Some(remote) => built.and_then(|b| b.remote_public_key(remote.as_bytes())).and_then(|b| b.build_initiator()),
        None => built.and_then(|b| b.build_responder()),
    };
    built.map_err(|_| NoiseError::Write)
}

/// The initiator's half-done handshake: message 1 written, message 2
/// awaited.
pub struct Initiator {
    state: snow::HandshakeState,
    max_message_len: usize,
}

impl std::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initiator").finish_non_exhaustive()
    }
}

impl Initiator {
    /// Message 1 to `responder`, carrying `payload` (encrypted, and
    /// authenticated as the initiator's once message 2 arrives): the state
    /// and the message, which the caller sends (and resends as is).
    pub fn start(
        identity: &Identity,
        responder: &PublicKey,
        params: &IkParams<'_>,
        payload: &[u8],
        seed: [u8; 32],
    ) -> Result<(Initiator, Vec<u8>), NoiseError> {
        let mut state = state(identity, Some(responder.to_x25519()), params.prologue, seed)?;
        let mut message = vec![0u8; params.max_message_len];
        let len = state.write_message(payload, &mut message).map_err(|_| NoiseError::Write)?;
        message.truncate(len);
        Ok((Initiator { state, max_message_len: params.max_message_len }, message))
    }

    /// Reads message 2: the responder's payload and the traffic secrets.
    /// A message that fails leaves the state as it was (snow restores its
    /// symmetric state), so a forged message 2 does not spoil the real one;
    /// after success the handshake is over and further messages fail.
    pub fn finish(&mut self, message: &[u8]) -> Result<(Vec<u8>, TrafficSecrets), NoiseError> {
        if message.len() > self.max_message_len {
            return Err(NoiseError::Authentication);
        }
        let mut payload = vec![0u8; self.max_message_len];
        let len = self.state.read_message(message, &mut payload).map_err(|_| NoiseError::Authentication)?;
        payload.truncate(len);
        let (i2r, r2i) = self.state.dangerously_get_raw_split();
        Ok((payload, TrafficSecrets { send: i2r, recv: r2i }))
    }
}

/// The responder after message 1 authenticated: its payload, and the
/// initiator's static key proved but not yet matched to the identity the
/// payload names.
pub struct Responder {
    state: snow::HandshakeState,
    payload: Vec<u8>,
    max_message_len: usize,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder").finish_non_exhaustive()
    }
}

impl Responder {
    /// Reads message 1 addressed to `identity`.
    pub fn read(identity: &Identity, params: &IkParams<'_>, message: &[u8], seed: [u8; 32]) -> Result<Responder, NoiseError> {
        if message.len() > params.max_message_len {
            return Err(NoiseError::Authentication);
        }
        let mut state = state(identity, None, params.prologue, seed)?;
        let mut payload = vec![0u8; params.max_message_len];
        let len = state.read_message(message, &mut payload).map_err(|_| NoiseError::Authentication)?;
        payload.truncate(len);
        Ok(Responder { state, payload, max_message_len: params.max_message_len })
    }

    /// The initiator's payload (decrypted and authenticated).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Checks that `claimed` (the Ed25519 key the payload names) maps to
    /// the static key the handshake proved: the initiator holds its key.
    pub fn prove(self, claimed: &PublicKey) -> Result<ProvedResponder, NoiseError> {
        let proved: [u8; KEY_LEN] = self
            .state
            .get_remote_static()
            .and_then(|s| s.try_into().ok())
            .ok_or(NoiseError::Authentication)?;
        if !claimed.matches_x25519(&X25519Public(proved)) {
            return Err(NoiseError::KeyMismatch);
        }
        Ok(ProvedResponder { inner: self, initiator: *claimed })
    }
}

/// The responder once the initiator's identity is proved: the protocol
/// judges it, then answers.
pub struct ProvedResponder {
    inner: Responder,
    initiator: PublicKey,
}

impl std::fmt::Debug for ProvedResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvedResponder").field("initiator", &self.initiator).finish_non_exhaustive()
    }
}

impl ProvedResponder {
    /// The initiator's proved identity.
    pub fn initiator(&self) -> &PublicKey {
        &self.initiator
    }

    /// The initiator's payload.
    pub fn payload(&self) -> &[u8] {
        &self.inner.payload
    }

    /// Message 2 carrying `payload`, and the traffic secrets.
    pub fn respond(self, payload: &[u8]) -> Result<(Vec<u8>, TrafficSecrets), NoiseError> {
        let mut state = self.inner.state;
        let mut message = vec![0u8; self.inner.max_message_len];
        let len = state.write_message(payload, &mut message).map_err(|_| NoiseError::Write)?;
        message.truncate(len);
        let (i2r, r2i) = state.dangerously_get_raw_split();
        Ok((message, TrafficSecrets { send: r2i, recv: i2r }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: IkParams<'static> = IkParams { prologue: b"test IK", max_message_len: 256 };

    fn identity(seed: u8) -> Identity {
        Identity::from_seed(&[seed; 32])
    }

    /// The initiator's side: message 2's payload and its secrets.
    type InitiatorSide = (Vec<u8>, TrafficSecrets);
    /// The responder's side: message 1's payload, the proved key, its secrets.
    type ResponderSide = (Vec<u8>, PublicKey, TrafficSecrets);

    /// A whole handshake: what each side learned.
    fn handshake(
        initiator: &Identity,
        addressed_to: &PublicKey,
        responder: &Identity,
    ) -> Result<(InitiatorSide, ResponderSide), NoiseError> {
        let payload = initiator.public_key().to_bytes();
        let (mut i, msg1) = Initiator::start(initiator, addressed_to, &PARAMS, &payload, [1; 32])?;
        let r = Responder::read(responder, &PARAMS, &msg1, [2; 32])?;
        let claimed = PublicKey::from_bytes(r.payload().try_into().unwrap()).unwrap();
        let r = r.prove(&claimed)?;
        let (seen_payload, key) = (r.payload().to_vec(), *r.initiator());
        let (msg2, r_secrets) = r.respond(b"answer")?;
        let i_side = i.finish(&msg2)?;
        Ok((i_side, (seen_payload, key, r_secrets)))
    }

    #[test]
    fn both_sides_derive_mirrored_secrets_and_carry_payloads() {
        let (a, b) = (identity(1), identity(2));
        let ((answer, i), (payload, key, r)) = handshake(&a, &b.public_key(), &b).unwrap();
        assert_eq!(i.send, r.recv);
        assert_eq!(i.recv, r.send);
        assert_ne!(i.send, i.recv);
        assert_eq!(answer, b"answer");
        assert_eq!(payload, a.public_key().to_bytes());
        assert_eq!(key, a.public_key());
    }

    #[test]
    fn the_same_seeds_give_the_same_bytes() {
        let (a, b) = (identity(1), identity(2));
        let run = |seed| Initiator::start(&a, &b.public_key(), &PARAMS, b"p", seed).unwrap().1;
        assert_eq!(run([1; 32]), run([1; 32]));
        assert_ne!(run([1; 32]), run([3; 32]));
    }

    #[test]
    fn an_initiator_addressing_another_key_fails() {
        let (a, b, other) = (identity(1), identity(2), identity(3));
        assert_eq!(handshake(&a, &other.public_key(), &b).err(), Some(NoiseError::Authentication));
    }

    #[test]
    fn a_changed_prologue_or_any_altered_byte_fails() {
        let (a, b) = (identity(1), identity(2));
        let (_, msg1) = Initiator::start(&a, &b.public_key(), &PARAMS, b"payload", [1; 32]).unwrap();
        let other = IkParams { prologue: b"test IJ", ..PARAMS };
        assert_eq!(Responder::read(&b, &other, &msg1, [2; 32]).err(), Some(NoiseError::Authentication));
        for i in 0..msg1.len() {
            let mut bad = msg1.clone();
            bad[i] ^= 0x10;
            assert!(Responder::read(&b, &PARAMS, &bad, [2; 32]).is_err(), "byte {i}");
        }
        assert!(Responder::read(&b, &PARAMS, &msg1[..msg1.len() - 1], [2; 32]).is_err(), "truncated");
        assert!(Responder::read(&b, &PARAMS, &[], [2; 32]).is_err(), "empty");
    }

    #[test]
    fn an_altered_message_2_fails_without_spoiling_the_real_one() {
        let (a, b) = (identity(1), identity(2));
        let (mut i, msg1) = Initiator::start(&a, &b.public_key(), &PARAMS, b"p", [1; 32]).unwrap();
        let r = Responder::read(&b, &PARAMS, &msg1, [2; 32]).unwrap().prove(&a.public_key()).unwrap();
        let (mut msg2, _) = r.respond(b"answer").unwrap();
        let last = msg2.len() - 1;
        msg2[last] ^= 1;
        assert_eq!(i.finish(&msg2).err(), Some(NoiseError::Authentication));
        assert_eq!(i.finish(&msg2[..last]).err(), Some(NoiseError::Authentication), "truncated");
        msg2[last] ^= 1;
        let (payload, _) = i.finish(&msg2).expect("the real message 2 after a forged one");
        assert_eq!(payload, b"answer");
        assert!(i.finish(&msg2).is_err(), "the handshake is over");
    }

    #[test]
    fn a_claimed_key_that_is_not_the_proved_one_is_refused() {
        let (a, b) = (identity(1), identity(2));
        let (_, msg1) = Initiator::start(&a, &b.public_key(), &PARAMS, b"p", [1; 32]).unwrap();
        let r = Responder::read(&b, &PARAMS, &msg1, [2; 32]).unwrap();
        assert_eq!(r.prove(&identity(5).public_key()).err(), Some(NoiseError::KeyMismatch));
    }

    #[test]
    fn a_payload_too_long_for_the_message_is_an_error() {
        let (a, b) = (identity(1), identity(2));
        // Message 1 is e (32) ‖ s (32 + 16) ‖ payload + 16.
        let small = IkParams { max_message_len: 96 + 10, ..PARAMS };
        assert!(Initiator::start(&a, &b.public_key(), &small, &[0; 10], [1; 32]).is_ok());
        assert_eq!(Initiator::start(&a, &b.public_key(), &small, &[0; 11], [1; 32]).err(), Some(NoiseError::Write));
        // A message longer than the bound is not read.
        let (_, msg1) = Initiator::start(&a, &b.public_key(), &PARAMS, &[0; 11], [1; 32]).unwrap();
        assert!(Responder::read(&b, &small, &msg1, [2; 32]).is_err());
    }
}
