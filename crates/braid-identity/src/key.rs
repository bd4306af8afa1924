//! Public halves of an identity: the Ed25519 public key (RFC 8032) with its
//! text form, the node ID and fingerprint derived from it, signatures, and the
//! X25519 (RFC 7748) form of the key used as a Noise static key.
//!
//! The X25519 form follows libsodium's `crypto_sign_ed25519_pk_to_curve25519`:
//! the Edwards point (x, y) maps to the Montgomery u = (1 + y) / (1 − y). That
//! map loses the sign of x, so it is one-way: a handshake that learns a peer's
//! X25519 static key must also receive the Ed25519 key and check it with
//! [`PublicKey::matches_x25519`]; `known_hosts` pins the Ed25519 key.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use zeroize::Zeroizing;

/// Prefix of a public key's text form. The `1` is the format version: it
/// names Ed25519 with base64url, so a later key kind can take `braid2`.
pub const PUBLIC_KEY_PREFIX: &str = "braid1";

/// Length in bytes of an Ed25519 public key, an X25519 key and a secret seed.
pub const KEY_LEN: usize = 32;

/// Length in bytes of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// Characters of base64url without padding that encode [`KEY_LEN`] bytes.
const KEY_B64_LEN: usize = 43;

/// blake3 key-derivation contexts (globally unique, never to change: a node
/// ID or fingerprint printed once must stay the same).
const NODE_ID_CONTEXT: &str = "braid 2026-11 node id from ed25519 public key v1";
const FINGERPRINT_CONTEXT: &str = "braid 2026-11 human fingerprint of ed25519 public key v1";

/// Why a public key (text or bytes) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text does not start with [`PUBLIC_KEY_PREFIX`].
    #[error(
        "public key {found:?}: expected `{PUBLIC_KEY_PREFIX}` followed by {KEY_B64_LEN} base64url characters"
    )]
    MissingPrefix {
        /// The start of the offending text (at most 16 characters).
        found: String,
    },
    /// The part after the prefix is not canonical base64url of 32 bytes.
    #[error(
        "public key {found:?}: after `{PUBLIC_KEY_PREFIX}` expected {KEY_B64_LEN} base64url characters (A-Z a-z 0-9 - _, no padding) encoding 32 bytes"
    )]
    BadEncoding {
        /// The start of the offending text (at most 16 characters).
        found: String,
    },
    /// 32 bytes that are not the encoding of a point on the Ed25519 curve.
    #[error("public key: the 32 bytes are not an Ed25519 curve point")]
    NotOnCurve,
    /// A small-order point: it would let a peer force a known Diffie-Hellman
    /// result, so it is never an identity.
    #[error("public key: a small-order (weak) Ed25519 point is not allowed as an identity")]
    WeakKey,
}

/// Shortens untrusted text for an error message.
pub(crate) fn excerpt(text: &str) -> String {
    text.chars().take(16).collect()
}

/// A node's Ed25519 public key: its identity on the network.
///
/// Only valid keys exist: construction checks the point is on the curve and
/// not of small order. Text form: `braid1` followed by the 32 bytes in
/// base64url without padding (43 characters):
///
/// ```
/// use braid_identity::{Identity, PublicKey};
///
/// let key = Identity::from_seed(&[7; 32]).public_key();
/// assert_eq!(key.to_string(), "braid16kpsY-KcUgq-9VB7Ey7F-ZVHdq6-vnuSQh7qaRRG0iw");
/// assert_eq!("braid16kpsY-KcUgq-9VB7Ey7F-ZVHdq6-vnuSQh7qaRRG0iw".parse::<PublicKey>(), Ok(key));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey {
    /// The Ed25519 encoding, checked to be a valid point of large order.
    ed25519: [u8; KEY_LEN],
    /// Its X25519 form, computed once: handshakes ask for it often, and it
    /// keeps the type small (the decompressed point is 160 bytes).
    x25519: [u8; KEY_LEN],
}

impl PublicKey {
    /// Parses the 32-byte encoding (RFC 8032 §5.1.2).
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> Result<Self, KeyError> {
        let verifying = VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::NotOnCurve)?;
        if verifying.is_weak() {
            return Err(KeyError::WeakKey);
        }
        Ok(Self::from_verifying(&verifying))
    }

    pub(crate) fn from_verifying(verifying: &VerifyingKey) -> Self {
        Self {
            ed25519: verifying.to_bytes(),
            x25519: verifying.to_montgomery().to_bytes(),
        }
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        self.ed25519
    }

    /// The node ID derived from this key (see [`NodeId`]).
    pub fn node_id(&self) -> NodeId {
        let hash = blake3::derive_key(NODE_ID_CONTEXT, &self.ed25519);
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash[..8]);
        NodeId(u64::from_le_bytes(first))
    }

    /// A short digest for people to compare keys by eye or over the phone.
    pub fn fingerprint(&self) -> Fingerprint {
        let hash = blake3::derive_key(FINGERPRINT_CONTEXT, &self.ed25519);
        let mut first = [0u8; Fingerprint::LEN];
        first.copy_from_slice(&hash[..Fingerprint::LEN]);
        Fingerprint(first)
    }

    /// The X25519 public key for Diffie-Hellman (Noise static key), as
    /// libsodium's `crypto_sign_ed25519_pk_to_curve25519` computes it.
    pub fn to_x25519(&self) -> X25519Public {
        X25519Public(self.x25519)
    }

    /// Whether `x25519` is this key's X25519 form: a handshake that
    /// authenticated a peer's X25519 static key checks with this that the
    /// Ed25519 key the peer claims is really its own.
    pub fn matches_x25519(&self, x25519: &X25519Public) -> bool {
        // Both sides are public; no constant-time comparison needed.
        self.to_x25519() == *x25519
    }

    /// Verifies an Ed25519 signature of `message` by this key with the strict
    /// rules of RFC 8032 §5.1.7 (no malleable or small-order components).
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), SignatureError> {
        let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
        // Decompressing again cannot fail (the bytes were checked when the
        // key was made); mapping the error keeps this free of panics.
        VerifyingKey::from_bytes(&self.ed25519)
            .map_err(|_| SignatureError)?
            .verify_strict(message, &sig)
            .map_err(|_| SignatureError)
    }

    /// The DER SubjectPublicKeyInfo of this key (RFC 8410 §4), as TLS raw
    /// public keys (RFC 7250) and certificates carry it.
    pub fn to_spki_der(&self) -> Vec<u8> {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.ed25519);
        der
    }

    /// Parses a DER SubjectPublicKeyInfo holding an Ed25519 key (RFC 8410 §4),
    /// the inverse of [`PublicKey::to_spki_der`].
    pub fn from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        let key = der
            .strip_prefix(&SPKI_PREFIX[..])
            .and_then(|rest| <&[u8; KEY_LEN]>::try_from(rest).ok())
            .ok_or(KeyError::NotOnCurve)?;
        Self::from_bytes(key)
    }
}

/// DER of `SEQUENCE { SEQUENCE { OID 1.3.101.112 }, BIT STRING (32 bytes) }`,
/// the fixed head of an Ed25519 SubjectPublicKeyInfo (RFC 8410 §4).
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PUBLIC_KEY_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(self.ed25519)
        )
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        let body = text
            .strip_prefix(PUBLIC_KEY_PREFIX)
            .ok_or_else(|| KeyError::MissingPrefix {
                found: excerpt(text),
            })?;
        let bad = || KeyError::BadEncoding {
            found: excerpt(text),
        };
        if body.len() != KEY_B64_LEN {
            return Err(bad());
        }
        // The decoder refuses non-zero trailing bits, so each key has exactly
        // one text form and text equality is key equality.
        let mut bytes = [0u8; KEY_LEN];
        let written = URL_SAFE_NO_PAD
            .decode_slice(body, &mut bytes)
            .map_err(|_| bad())?;
        if written != KEY_LEN {
            return Err(bad());
        }
        Self::from_bytes(&bytes)
    }
}

/// A 64-bit node ID for Exon, derived from the node's public key by blake3.
///
/// It is self-certifying: nobody can choose the ID of their node, only the
/// key, and finding a key whose ID equals a given one takes about 2^64 key
/// generations. A receiver that has authenticated a peer's key checks a
/// claimed ID with [`NodeId::is_of`]; the key, not the ID, stays the
/// authority (64 bits index peers, they do not replace authentication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u64);

impl NodeId {
    /// The ID as read from the wire. Whether it belongs to a peer is decided
    /// by [`NodeId::is_of`], never by how it was built.
    pub const fn from_wire(raw: u64) -> Self {
        Self(raw)
    }

    /// The 64-bit value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is the ID derived from `key`.
    pub fn is_of(self, key: &PublicKey) -> bool {
        key.node_id() == self
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// A short digest of a public key for humans (96 bits of blake3), shown as
/// six groups of four hex digits, e.g. `3f2a:91c0:77de:0b11:5a20:c9e4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; Fingerprint::LEN]);

impl Fingerprint {
    /// Length in bytes.
    pub const LEN: usize = 12;

    /// The digest bytes.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            for byte in pair {
                write!(f, "{byte:02x}")?;
            }
        }
        Ok(())
    }
}

/// An Ed25519 signature (RFC 8032 §5.1.6).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature([u8; SIGNATURE_LEN]);

impl Signature {
    /// Wraps the 64 bytes as received; [`PublicKey::verify`] checks them.
    pub const fn from_bytes(bytes: [u8; SIGNATURE_LEN]) -> Self {
        Self(bytes)
    }

    /// The 64 bytes.
    pub const fn to_bytes(&self) -> [u8; SIGNATURE_LEN] {
        self.0
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", URL_SAFE_NO_PAD.encode(self.0))
    }
}

/// A signature did not verify (wrong key, altered message, or a malformed
/// or non-canonical signature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("signature does not verify for this public key and message")]
pub struct SignatureError;

/// An X25519 public key (RFC 7748 u-coordinate, little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct X25519Public(pub [u8; KEY_LEN]);

impl X25519Public {
    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

/// An X25519 secret scalar, clamped as RFC 7748 §5 and libsodium do. Wiped
/// from memory when dropped.
#[derive(Clone)]
pub struct X25519Secret(pub(crate) Zeroizing<[u8; KEY_LEN]>);

impl X25519Secret {
    /// The 32 secret bytes, e.g. for a Noise builder's local private key.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The matching public key: the scalar times the Curve25519 base point.
    pub fn public_key(&self) -> X25519Public {
        X25519Public(curve25519_base(&self.0))
    }
}

impl fmt::Debug for X25519Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("X25519Secret(<redacted>)")
    }
}

/// X25519(k, 9): the public key of a secret scalar.
fn curve25519_base(scalar: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    curve25519_dalek::MontgomeryPoint::mul_base_clamped(*scalar).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;
    use proptest::prelude::*;

    fn hex32(text: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn rfc8032_test_1_public_key_and_signature() {
        let id = Identity::from_seed(&hex32(
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        ));
        assert_eq!(
            id.public_key().to_bytes(),
            hex32("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let sig = id.sign(b"").to_bytes();
        assert_eq!(
            sig[..32],
            hex32("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155")
        );
        assert_eq!(
            sig[32..],
            hex32("5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        );
        assert!(id
            .public_key()
            .verify(b"", &Signature::from_bytes(sig))
            .is_ok());
    }

    /// libsodium's test/default/ed25519_convert vector (also checked against
    /// the system libsodium when this test was written).
    #[test]
    fn libsodium_ed25519_to_curve25519_vector() {
        let id = Identity::from_seed(&hex32(
            "421151a459faeade3d247115f94aedae42318124095afabe4d1451a559faedee",
        ));
        assert_eq!(
            id.x25519_public().0,
            hex32("f1814f0e8ff1043d8a44d25babff3cedcae6c22c3edaa48f857ae70de2baae50")
        );
        assert_eq!(
            *id.x25519_secret().as_bytes(),
            hex32("8052030376d47112be7f73ed7a019293dd12ad910b654455798b4667d73de166")
        );
    }

    /// RFC 8410 §10.1 and §10.3 examples (the same key pair).
    #[test]
    fn rfc8410_spki_and_pkcs8_examples() {
        let seed = hex32("d4ee72dbf913584ad5b6d8f1f769f8ad3afe7c28cbf1d4fbe097a88f44755842");
        let id = Identity::from_seed(&seed);
        let mut pkcs8 = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        pkcs8.extend_from_slice(&seed);
        assert_eq!(*id.to_pkcs8_der(), pkcs8);
        let mut spki = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        spki.extend_from_slice(&hex32(
            "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1",
        ));
        assert_eq!(id.public_key().to_spki_der(), spki);
        assert_eq!(PublicKey::from_spki_der(&spki).unwrap(), id.public_key());
        assert!(PublicKey::from_spki_der(&spki[1..]).is_err());
    }

    #[test]
    fn text_form_is_prefix_and_43_base64url_characters() {
        let key = Identity::from_seed(&[1; 32]).public_key();
        let text = key.to_string();
        assert!(text.starts_with("braid1"));
        assert_eq!(text.len(), 6 + 43);
        assert_eq!(text.parse::<PublicKey>().unwrap(), key);
    }

    #[test]
    fn bad_text_forms_are_named_errors() {
        let good = Identity::from_seed(&[1; 32]).public_key().to_string();
        assert!(matches!(
            "ssh-ed25519 AAAA".parse::<PublicKey>(),
            Err(KeyError::MissingPrefix { .. })
        ));
        assert!(matches!(
            good[..good.len() - 1].parse::<PublicKey>(),
            Err(KeyError::BadEncoding { .. })
        ));
        assert!(matches!(
            format!("{good}A").parse::<PublicKey>(),
            Err(KeyError::BadEncoding { .. })
        ));
        let with_padding = format!("{}=", &good[..good.len() - 1]);
        assert!(matches!(
            with_padding.parse::<PublicKey>(),
            Err(KeyError::BadEncoding { .. })
        ));
        // The last character carries 2 spare bits; setting them must not
        // give a second spelling of the same key.
        let last = good.as_bytes()[good.len() - 1];
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let index = alphabet.iter().position(|&c| c == last).unwrap();
        let odd = alphabet[index | 1] as char;
        if odd != last as char {
            let non_canonical = format!("{}{odd}", &good[..good.len() - 1]);
            assert!(non_canonical.parse::<PublicKey>().is_err());
        }
        let message = "x".parse::<PublicKey>().unwrap_err().to_string();
        assert!(
            message.contains("braid1") && message.contains("base64url"),
            "{message}"
        );
    }

    #[test]
    fn weak_and_off_curve_points_are_refused() {
        let mut identity_point = [0u8; 32];
        identity_point[0] = 1;
        assert_eq!(
            PublicKey::from_bytes(&identity_point),
            Err(KeyError::WeakKey)
        );
        // y = 2 is not the y-coordinate of any Ed25519 point.
        let mut off_curve = [0u8; 32];
        off_curve[0] = 2;
        assert_eq!(PublicKey::from_bytes(&off_curve), Err(KeyError::NotOnCurve));
    }

    #[test]
    fn node_id_and_fingerprint_forms() {
        let a = Identity::from_seed(&[1; 32]).public_key();
        let b = Identity::from_seed(&[2; 32]).public_key();
        assert_ne!(a.node_id(), b.node_id());
        assert!(a.node_id().is_of(&a));
        assert!(!a.node_id().is_of(&b));
        assert_eq!(NodeId::from_wire(a.node_id().get()), a.node_id());
        let fp = a.fingerprint().to_string();
        assert_eq!(fp.len(), 6 * 4 + 5);
        assert!(fp
            .split(':')
            .all(|g| g.len() == 4 && g.chars().all(|c| c.is_ascii_hexdigit())));
        assert_ne!(fp, b.fingerprint().to_string());
        assert_eq!(format!("{}", a.node_id()).len(), 18);
    }

    proptest! {
        #[test]
        fn parsing_arbitrary_text_never_panics(text in "\\PC*") {
            let _ = text.parse::<PublicKey>();
            let _ = format!("braid1{text}").parse::<PublicKey>();
        }

        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::array::uniform32(any::<u8>())) {
            let _ = PublicKey::from_bytes(&bytes);
            let _ = PublicKey::from_spki_der(&bytes);
        }

        #[test]
        fn text_round_trips(seed in proptest::array::uniform32(any::<u8>())) {
            let key = Identity::from_seed(&seed).public_key();
            prop_assert_eq!(key.to_string().parse::<PublicKey>().unwrap(), key);
            prop_assert_eq!(PublicKey::from_spki_der(&key.to_spki_der()).unwrap(), key);
        }

        #[test]
        fn x25519_halves_agree(seed in proptest::array::uniform32(any::<u8>())) {
            let id = Identity::from_seed(&seed);
            prop_assert_eq!(id.x25519_secret().public_key(), id.x25519_public());
            prop_assert!(id.public_key().matches_x25519(&id.x25519_public()));
            let secret = id.x25519_secret();
            let bytes = secret.as_bytes();
            prop_assert_eq!(bytes[0] & 7, 0);
            prop_assert_eq!(bytes[31] & 0xc0, 0x40);
        }

        #[test]
        fn diffie_hellman_of_two_identities_agrees(a in proptest::array::uniform32(any::<u8>()), b in proptest::array::uniform32(any::<u8>())) {
            use curve25519_dalek::MontgomeryPoint;
            let (a, b) = (Identity::from_seed(&a), Identity::from_seed(&b));
            let ab = MontgomeryPoint(b.x25519_public().0).mul_clamped(*a.x25519_secret().as_bytes());
            let ba = MontgomeryPoint(a.x25519_public().0).mul_clamped(*b.x25519_secret().as_bytes());
            prop_assert_eq!(ab, ba);
        }

        #[test]
        fn signatures_verify_and_detect_changes(seed in proptest::array::uniform32(any::<u8>()), msg in proptest::collection::vec(any::<u8>(), 0..64), flip in 0usize..512) {
            let id = Identity::from_seed(&seed);
            let sig = id.sign(&msg);
            prop_assert!(id.verify(&msg, &sig).is_ok());
            let mut bad = sig.to_bytes();
            bad[flip % 64] ^= 1 << (flip / 64);
            prop_assert!(id.verify(&msg, &Signature::from_bytes(bad)).is_err());
            let mut other = msg.clone();
            other.push(0);
            prop_assert!(id.verify(&other, &sig).is_err());
            let stranger = Identity::from_seed(&[seed[0].wrapping_add(1); 32]);
            if stranger.public_key() != id.public_key() {
                prop_assert!(stranger.verify(&msg, &sig).is_err());
            }
        }
    }
}
