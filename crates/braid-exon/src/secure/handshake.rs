//! The Noise IK handshake (Noise Protocol Framework rev. 34, §7.5) that
//! opens an Exon session, WireGuard-style (Donenfeld, *WireGuard*, §5.4.2-3):
//!
//! ```text
//! initiator (knows the responder's key)              responder
//! INIT  sender_index, IK msg 1 (-> e, es, s, ss),    ──▶  msg 1 checked, then the
//!       payload: version, cipher, Ed25519 key,             endorsement's signature, then
//!       endorsement field; mac1, mac2                      the judged key (verifier),
//!                                                          before any state is kept
//!                                                    ◀──  RESP  sender_index, receiver_index,
//!                                                          IK msg 2 (<- e, ee, se), mac1, mac2
//! ```
//!
//! Under load the responder first answers an initiation without a valid
//! mac2 with a cookie reply only, and the initiator sends it again with
//! mac2 ([`super::cookie`], WireGuard §5.4.7); the Noise messages are the
//! same.
//!
//! The static keys Noise uses are the X25519 forms of the peers' Ed25519
//! identities; the responder checks that the Ed25519 key in the payload maps
//! to the static key the handshake proved, and the node ID is derived from
//! that Ed25519 key: a node cannot claim an ID whose key it does not hold.
//! The payload's endorsement field ([`super::endorse`]) says which node key
//! vouches for the initiator's key; the verifier judges that one.
//! The responder answers message 1 at once (IK needs no state between the
//! messages), so a half-open handshake costs it nothing.
//!
//! After message 2 both sides take Noise's `Split()` (§5.2) as the two
//! directions' traffic secrets ([`super::keys`]). Ephemeral keys come from
//! the randomness the node was given (seeded per node life), never a
//! thread RNG, so simulations stay deterministic.
//!
//! The handshake state machine (snow, X25519 with the identity's known
//! public key and precomputed base-point tables, the split) is
//! `braid_crypto::noise`, shared with braid-proto; this module owns Exon's
//! part: the prologue, the payloads and their version, the exact message
//! lengths and the endorsement.

use braid_crypto::noise::{IkParams, Initiator, NoiseError, Responder};
use braid_identity::{Identity, PublicKey, KEY_LEN};

use super::endorse::{self, Endorsement, EndorsementError, ENDORSEMENT_FIELD_LEN};
use super::keys::Cipher;

/// Bound to every handshake, so no other protocol's message is accepted;
/// its version follows the handshake's wire format (3: mac2 and cookie
/// replies).
const PROLOGUE: &[u8] = b"braid-exon/3 IK";
/// Version of the handshake payloads.
const PAYLOAD_VERSION: u8 = 2;
/// Initiator payload: version, cipher, Ed25519 key, endorsement field.
const INIT_PAYLOAD_LEN: usize = 2 + KEY_LEN + ENDORSEMENT_FIELD_LEN;
/// Noise message 1: e (32) ‖ encrypted s (32 + 16) ‖ encrypted payload.
pub(crate) const MSG1_LEN: usize = 32 + 48 + INIT_PAYLOAD_LEN + 16;
/// Noise message 2: e (32) ‖ encrypted payload (version, cipher).
pub(crate) const MSG2_LEN: usize = 32 + 2 + 16;
/// Message 1 is the longer of the two.
const PARAMS: IkParams<'static> = IkParams { prologue: PROLOGUE, max_message_len: MSG1_LEN };

/// Why a handshake message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The Noise message failed (authentication, a key that is not the
    /// proved one, a payload too long): see [`NoiseError`].
    #[error(transparent)]
    Noise(#[from] NoiseError),
    /// The payload inside a valid message is malformed.
    #[error("malformed handshake payload: {0}")]
    Payload(&'static str),
    /// The endorsement sent does not vouch for the key proved.
    #[error("the peer's endorsement: {0}")]
    Endorsement(#[from] EndorsementError),
}

/// The traffic secrets a completed handshake yields, and the cipher.
pub(crate) struct Secrets {
    pub cipher: Cipher,
    pub send: [u8; 32],
    pub recv: [u8; 32],
}

/// The initiator's half-done handshake: message 1 written, message 2
/// awaited.
pub(crate) struct Initiation {
    initiator: Initiator,
    /// Message 1, resent as is until answered (the responder recognises a
    /// repeat by its ephemeral key and answers it the same way).
    pub message: Vec<u8>,
    cipher: Cipher,
}

impl std::fmt::Debug for Initiation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initiation").finish_non_exhaustive()
    }
}

impl Initiation {
    /// Message 1 to `responder`.
    pub(crate) fn start(
        identity: &Identity,
        endorsement: Option<&Endorsement>,
        responder: &PublicKey,
        cipher: Cipher,
        seed: [u8; 32],
    ) -> Result<Initiation, HandshakeError> {
        let mut payload = [0u8; INIT_PAYLOAD_LEN];
        payload[0] = PAYLOAD_VERSION;
        payload[1] = cipher.code();
        payload[2..2 + KEY_LEN].copy_from_slice(&identity.public_key().to_bytes());
        payload[2 + KEY_LEN..].copy_from_slice(&endorse::write_field(endorsement));
        let (initiator, message) = Initiator::start(identity, responder, &PARAMS, &payload, seed)?;
        Ok(Initiation {
            initiator,
            message,
            cipher,
        })
    }

    /// Reads message 2: the traffic secrets, or why not. A message that
    /// fails leaves the state as it was; the session layer nevertheless
    /// drops the initiation after a failure and starts a fresh one at its
    /// next retry.
    pub(crate) fn finish(&mut self, message: &[u8]) -> Result<Secrets, HandshakeError> {
        if message.len() != MSG2_LEN {
            return Err(NoiseError::Authentication.into());
        }
        let (payload, traffic) = self.initiator.finish(message)?;
        if payload.len() != 2 || payload[0] != PAYLOAD_VERSION {
            return Err(HandshakeError::Payload("version"));
        }
        if Cipher::from_code(payload[1]) != Some(self.cipher) {
            return Err(HandshakeError::Payload("cipher"));
        }
        Ok(Secrets {
            cipher: self.cipher,
            send: traffic.send,
            recv: traffic.recv,
        })
    }
}

/// What the responder learned from message 1 and answers with.
pub(crate) struct Response {
    /// The initiator's identity, proved by the handshake.
    pub initiator: PublicKey,
    /// Message 2.
    pub message: Vec<u8>,
    pub secrets: Secrets,
}

/// Responder: reads message 1 and writes message 2 in one step.
/// `authorize` judges the initiator's proved key and its checked
/// endorsement before anything is kept; its refusal comes back as
/// `Ok(Err(_))`.
pub(crate) fn respond<E>(
    identity: &Identity,
    message: &[u8],
    seed: [u8; 32],
    authorize: impl FnOnce(&PublicKey, Option<&Endorsement>) -> Result<(), E>,
) -> Result<Result<Response, E>, HandshakeError> {
    if message.len() != MSG1_LEN {
        return Err(NoiseError::Authentication.into());
    }
    let responder = Responder::read(identity, &PARAMS, message, seed)?;
    let payload = responder.payload();
    if payload.len() != INIT_PAYLOAD_LEN || payload[0] != PAYLOAD_VERSION {
        return Err(HandshakeError::Payload("version or length"));
    }
    // Any cipher both speak: every node speaks both, so the initiator's.
    let cipher = Cipher::from_code(payload[1]).ok_or(HandshakeError::Payload("cipher"))?;
    let mut key = [0u8; KEY_LEN];
    key.copy_from_slice(&payload[2..2 + KEY_LEN]);
    let initiator =
        PublicKey::from_bytes(&key).map_err(|_| HandshakeError::Payload("initiator key"))?;
    let proved = responder.prove(&initiator)?;
    let endorsement = endorse::read_field(&proved.payload()[2 + KEY_LEN..], &initiator)?;
    if let Err(refusal) = authorize(&initiator, endorsement.as_ref()) {
        return Ok(Err(refusal));
    }
    let (out, traffic) = proved.respond(&[PAYLOAD_VERSION, cipher.code()])?;
    Ok(Ok(Response {
        initiator,
        message: out,
        secrets: Secrets {
            cipher,
            send: traffic.send,
            recv: traffic.recv,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(seed: u8) -> Identity {
        Identity::from_seed(&[seed; 32])
    }

    #[test]
    fn both_sides_derive_mirrored_secrets_and_learn_the_initiator() {
        let (i, r) = (identity(1), identity(2));
        let mut hs = Initiation::start(&i, None, &r.public_key(), Cipher::Aes256Gcm, [1; 32]).unwrap();
        assert_eq!(hs.message.len(), MSG1_LEN);
        let resp = respond(&r, &hs.message, [2; 32], |_, _| Ok::<(), ()>(()))
            .unwrap()
            .unwrap();
        assert_eq!(resp.message.len(), MSG2_LEN);
        assert_eq!(resp.initiator, i.public_key());
        let s = hs.finish(&resp.message).unwrap();
        assert_eq!(s.send, resp.secrets.recv);
        assert_eq!(s.recv, resp.secrets.send);
        assert_ne!(s.send, s.recv);
    }

    #[test]
    fn any_altered_byte_or_wrong_responder_fails_and_refusal_comes_first() {
        let (i, r, other) = (identity(1), identity(2), identity(3));
        let hs = Initiation::start(&i, None, &r.public_key(), Cipher::Aes256Gcm, [1; 32]).unwrap();
        assert!(respond(&other, &hs.message, [2; 32], |_, _| Ok::<(), ()>(())).is_err());
        for k in 0..hs.message.len() {
            let mut bad = hs.message.clone();
            bad[k] ^= 0x01;
            assert!(
                respond(&r, &bad, [2; 32], |_, _| Ok::<(), ()>(())).is_err(),
                "byte {k}"
            );
        }
        let refused = respond(&r, &hs.message, [2; 32], |k, _| {
            assert_eq!(*k, i.public_key());
            Err("no")
        })
        .unwrap();
        assert!(matches!(refused, Err("no")));
    }

    #[test]
    fn the_responder_learns_the_endorsing_key_and_refuses_a_forged_endorsement() {
        let (i, r, node) = (identity(1), identity(2), identity(4));
        let good = Endorsement::sign(&node, &i.public_key());
        let hs = Initiation::start(&i, Some(&good), &r.public_key(), Cipher::Aes256Gcm, [1; 32]).unwrap();
        let mut judged = None;
        respond(&r, &hs.message, [2; 32], |k, e| {
            assert_eq!(*k, i.public_key());
            judged = e.cloned();
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(judged, Some(good));
        // An endorsement of another key, carried by a valid handshake.
        let forged = Endorsement::sign(&node, &identity(5).public_key());
        let hs = Initiation::start(&i, Some(&forged), &r.public_key(), Cipher::Aes256Gcm, [1; 32]).unwrap();
        let result = respond(&r, &hs.message, [2; 32], |_, _| -> Result<(), ()> { panic!("judged a forged endorsement") });
        assert!(matches!(result, Err(HandshakeError::Endorsement(EndorsementError::Signature))));
    }
}
