//! Endorsements: a node's long-term key vouching for the key its Exon
//! sessions use.
//!
//! Exon names a node by its session key (the [`NodeId`](crate::NodeId) is
//! derived from it), and two processes that shared one key would share one
//! ID: each would take the other's messages and restarts for its own, and
//! exactly-once would break. So a process gets an Exon key of its own at
//! every start, while peers are judged (known hosts, TOFU) by the *node's*
//! key, the one in its key file and in their known hosts. The link between
//! the two is a signature: the node key signs the Exon key (as a TLS
//! certificate chain does, one level deep; cf. WireGuard's separation of
//! the static identity from what is configured about a peer).
//!
//! An endorsement is public: it travels in the key reply of discovery (in
//! clear, like the Exon key beside it) and inside the initiator's Noise
//! message 1. It proves nothing about *who sends it*: the handshake proves
//! that the peer holds the Exon key, and the signature proves that the node
//! key vouches for that Exon key; together, that the peer speaks for the
//! node key. A copied endorsement is useless without the Exon secret.
//!
//! Wire form (fixed length [`ENDORSEMENT_FIELD_LEN`], so handshake and key
//! reply lengths do not depend on it): one flag byte (0: none, 1: present),
//! then the node's Ed25519 key (32 bytes) and the Ed25519 signature (64
//! bytes) over [`CONTEXT`] ‖ the Exon key; all zero when absent.

use braid_identity::{Identity, PublicKey, Signature, KEY_LEN, SIGNATURE_LEN};

/// Domain separation: the signature means this and nothing else.
pub const CONTEXT: &[u8] = b"braid-exon endorsement v1\0";

/// Bytes of an endorsement field on the wire (flag, key, signature).
pub const ENDORSEMENT_FIELD_LEN: usize = 1 + KEY_LEN + SIGNATURE_LEN;

/// A node key's signature over an Exon session key.
#[derive(Clone, PartialEq, Eq)]
pub struct Endorsement {
    node_key: PublicKey,
    signature: Signature,
}

/// Why an endorsement field was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EndorsementError {
    /// The flag byte is neither 0 nor 1, or an absent field is not zero.
    #[error("malformed endorsement field")]
    Malformed,
    /// The node key is not a valid Ed25519 point.
    #[error("the endorsing key is not a valid Ed25519 key")]
    NodeKey,
    /// The signature does not verify for this Exon key.
    #[error("the endorsement's signature does not verify for this Exon key")]
    Signature,
}

impl Endorsement {
    /// `node` vouches for `exon_key`.
    ///
    /// ```
    /// use braid_exon::{Endorsement, Identity};
    /// let node = Identity::from_seed(&[1; 32]);
    /// let exon = Identity::from_seed(&[2; 32]);
    /// let e = Endorsement::sign(&node, &exon.public_key());
    /// assert_eq!(e.node_key(), &node.public_key());
    /// assert!(e.check(&exon.public_key()).is_ok());
    /// assert!(e.check(&node.public_key()).is_err());
    /// ```
    pub fn sign(node: &Identity, exon_key: &PublicKey) -> Endorsement {
        Endorsement { node_key: node.public_key(), signature: node.sign(&signed_message(exon_key)) }
    }

    /// The key that vouches (the one peers judge).
    pub fn node_key(&self) -> &PublicKey {
        &self.node_key
    }

    /// Whether this endorsement vouches for `exon_key`.
    pub fn check(&self, exon_key: &PublicKey) -> Result<(), EndorsementError> {
        self.node_key
            .verify(&signed_message(exon_key), &self.signature)
            .map_err(|_| EndorsementError::Signature)
    }
}

impl std::fmt::Debug for Endorsement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endorsement").field("node_key", &self.node_key).finish_non_exhaustive()
    }
}

fn signed_message(exon_key: &PublicKey) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + KEY_LEN);
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(&exon_key.to_bytes());
    m
}

/// Writes the field for `endorsement` (zeros when `None`).
pub(crate) fn write_field(endorsement: Option<&Endorsement>) -> [u8; ENDORSEMENT_FIELD_LEN] {
    let mut field = [0u8; ENDORSEMENT_FIELD_LEN];
    if let Some(e) = endorsement {
        field[0] = 1;
        field[1..1 + KEY_LEN].copy_from_slice(&e.node_key.to_bytes());
        field[1 + KEY_LEN..].copy_from_slice(&e.signature.to_bytes());
    }
    field
}

/// Reads a field and checks it against `exon_key`: `None` when absent.
pub(crate) fn read_field(
    field: &[u8],
    exon_key: &PublicKey,
) -> Result<Option<Endorsement>, EndorsementError> {
    let field: &[u8; ENDORSEMENT_FIELD_LEN] = field.try_into().map_err(|_| EndorsementError::Malformed)?;
    match field[0] {
        0 if field[1..].iter().all(|&b| b == 0) => Ok(None),
        1 => {
            let key: &[u8; KEY_LEN] = field[1..1 + KEY_LEN].try_into().map_err(|_| EndorsementError::Malformed)?;
            let sig: [u8; SIGNATURE_LEN] =
                field[1 + KEY_LEN..].try_into().map_err(|_| EndorsementError::Malformed)?;
            let node_key = PublicKey::from_bytes(key).map_err(|_| EndorsementError::NodeKey)?;
            let e = Endorsement { node_key, signature: Signature::from_bytes(sig) };
            e.check(exon_key)?;
            Ok(Some(e))
        }
        _ => Err(EndorsementError::Malformed),
    }
}

/// The key a [`PeerVerifier`](super::PeerVerifier) judges for a peer that
/// proved `exon_key`: the endorsing node key when there is an endorsement,
/// else the Exon key itself.
pub(crate) fn judged_key(exon_key: &PublicKey, endorsement: Option<&Endorsement>) -> PublicKey {
    endorsement.map_or(*exon_key, |e| e.node_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> (Identity, PublicKey) {
        (Identity::from_seed(&[7; 32]), Identity::from_seed(&[8; 32]).public_key())
    }

    #[test]
    fn a_field_round_trips_and_absence_is_all_zero() {
        let (node, exon) = keys();
        let e = Endorsement::sign(&node, &exon);
        assert_eq!(read_field(&write_field(Some(&e)), &exon), Ok(Some(e.clone())));
        assert_eq!(read_field(&write_field(None), &exon), Ok(None));
        assert_eq!(judged_key(&exon, Some(&e)), node.public_key());
        assert_eq!(judged_key(&exon, None), exon);
    }

    #[test]
    fn an_endorsement_of_another_key_is_refused() {
        let (node, exon) = keys();
        let other = Identity::from_seed(&[9; 32]).public_key();
        let field = write_field(Some(&Endorsement::sign(&node, &other)));
        assert_eq!(read_field(&field, &exon), Err(EndorsementError::Signature));
    }

    proptest! {
        /// Any flipped bit makes the field refused (or, in the flag's
        /// low bit, absent-but-malformed), never accepted as another
        /// endorsement.
        #[test]
        fn a_flipped_bit_is_never_accepted(bit in 0..ENDORSEMENT_FIELD_LEN * 8) {
            let (node, exon) = keys();
            let mut field = write_field(Some(&Endorsement::sign(&node, &exon)));
            field[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(read_field(&field, &exon).is_err());
        }
    }
}
