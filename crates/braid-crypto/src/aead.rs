//! One direction's AEAD traffic key: the key and IV HKDF-Expand derives
//! from a traffic secret, and sealing and opening in place.
//!
//! The construction is QUIC's (RFC 9001 §5.1, §5.3): the AEAD key and a
//! 12-byte IV are expanded from the secret with the protocol's labels; the
//! nonce of a packet is the IV XOR a 12-byte *packet nonce* the protocol
//! builds from what makes the packet unique under this key (braid: path ID
//! ‖ packet number, QUIC multipath's §2.4; Exon: a counter, WireGuard's
//! §5.4.6). The IV never leaves this struct, so every protocol gets the
//! XOR right by construction. The associated data is whatever the protocol
//! authenticates without encrypting (its header).
//!
//! The sealing itself is ring's or aws-lc's, whichever is faster on this
//! CPU ([`Backend`]); both give the same bytes.

use crate::backend::Backend;
use crate::hkdf::expand_array;
use crate::{CipherSuite, SECRET_LEN};

/// Bytes an AEAD tag adds to a packet (all three suites).
pub const TAG_LEN: usize = 16;
/// Bytes of a nonce and of the IV (RFC 5116's recommended 12, all suites).
pub const NONCE_LEN: usize = ring::aead::NONCE_LEN;

/// The HKDF labels a protocol derives its AEAD key and IV with. Part of
/// the protocol's wire format: other labels, other bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLabels {
    /// The label of the AEAD key.
    pub key: &'static [u8],
    /// The label of the IV.
    pub iv: &'static [u8],
}

/// One direction's AEAD key and IV.
pub struct TrafficKey {
    suite: CipherSuite,
    key: Key,
    iv: [u8; NONCE_LEN],
}

/// The key in the backend's own type.
enum Key {
    Ring(ring::aead::LessSafeKey),
    AwsLc(aws_lc_rs::aead::LessSafeKey),
}

impl std::fmt::Debug for TrafficKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match self.key {
            Key::Ring(_) => Backend::Ring,
            Key::AwsLc(_) => Backend::AwsLc,
        };
        f.debug_struct("TrafficKey")
            .field("suite", &self.suite)
            .field("backend", &backend.name())
            .finish_non_exhaustive()
    }
}

impl TrafficKey {
    /// The key of `suite` derived from `secret` with `labels`, on the
    /// faster backend of this CPU.
    pub fn new(suite: CipherSuite, secret: &[u8; SECRET_LEN], labels: &KeyLabels) -> TrafficKey {
        TrafficKey::with_backend(Backend::for_this_cpu(), suite, secret, labels)
    }

    /// The same key on a given backend (the bytes it seals do not depend
    /// on it).
    pub fn with_backend(backend: Backend, suite: CipherSuite, secret: &[u8; SECRET_LEN], labels: &KeyLabels) -> TrafficKey {
        // 32 bytes expanded, the algorithm's length used: the same bytes as
        // expanding to that length (see `expand_array`).
        let mut key_bytes: [u8; SECRET_LEN] = expand_array(secret, labels.key);
        let iv = expand_array(secret, labels.iv);
        let len = suite.key_len();
        // Cannot fail: every suite's key is at most 32 bytes and gets its length.
        let key = match backend {
            Backend::Ring => Key::Ring(ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(suite.aead(), &key_bytes[..len])
                    .unwrap_or_else(|_| unreachable!("key length matches the algorithm")),
            )),
            Backend::AwsLc => Key::AwsLc(aws_lc_rs::aead::LessSafeKey::new(
                aws_lc_rs::aead::UnboundKey::new(suite.aws_lc_aead(), &key_bytes[..len])
                    .unwrap_or_else(|_| unreachable!("key length matches the algorithm")),
            )),
        };
        key_bytes.fill(0);
        TrafficKey { suite, key, iv }
    }

    /// IV XOR the packet nonce (RFC 9001 §5.3).
    fn nonce(&self, packet_nonce: [u8; NONCE_LEN]) -> [u8; NONCE_LEN] {
        let mut n = self.iv;
        for (b, x) in n.iter_mut().zip(packet_nonce) {
            *b ^= x;
        }
        n
    }

    /// Seals `buf` in place and returns the tag to append. `packet_nonce`
    /// must never repeat under this key: that is the protocol's job (its
    /// packet numbers or counters only grow).
    pub fn seal_in_place_separate_tag(&self, packet_nonce: [u8; NONCE_LEN], aad: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = self.nonce(packet_nonce);
        let mut out = [0u8; TAG_LEN];
        // Sealing fails only for payloads beyond ~64 GiB, which no datagram
        // is; the zero tag then would fail to open, never pass.
        match &self.key {
            Key::Ring(key) => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(nonce);
                if let Ok(tag) = key.seal_in_place_separate_tag(nonce, ring::aead::Aad::from(aad), buf) {
                    out.copy_from_slice(tag.as_ref());
                }
            }
            Key::AwsLc(key) => {
                let nonce = aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce);
                if let Ok(tag) = key.seal_in_place_separate_tag(nonce, aws_lc_rs::aead::Aad::from(aad), buf) {
                    out.copy_from_slice(tag.as_ref());
                }
            }
        }
        out
    }

    /// Opens `ciphertext_and_tag` in place: the plaintext length (the
    /// plaintext is its first bytes), or `None` if the tag does not verify
    /// (then the buffer's contents are unspecified and nothing else changed).
    pub fn open_in_place(&self, packet_nonce: [u8; NONCE_LEN], aad: &[u8], ciphertext_and_tag: &mut [u8]) -> Option<usize> {
        let nonce = self.nonce(packet_nonce);
        match &self.key {
            Key::Ring(key) => key
                .open_in_place(ring::aead::Nonce::assume_unique_for_key(nonce), ring::aead::Aad::from(aad), ciphertext_and_tag)
                .ok()
                .map(|plain| plain.len()),
            Key::AwsLc(key) => key
                .open_in_place(
                    aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
                    aws_lc_rs::aead::Aad::from(aad),
                    ciphertext_and_tag,
                )
                .ok()
                .map(|plain| plain.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABELS: KeyLabels = KeyLabels { key: b"test key", iv: b"test iv" };

    fn nonce(x: u8) -> [u8; NONCE_LEN] {
        let mut n = [0; NONCE_LEN];
        n[NONCE_LEN - 1] = x;
        n
    }

    #[test]
    fn round_trip_and_any_change_fails() {
        for (suite, backend) in CipherSuite::preferred().into_iter().flat_map(|s| Backend::all().map(|b| (s, b))) {
            let key = TrafficKey::with_backend(backend, suite, &[7; 32], &LABELS);
            let mut buf = b"some frames".to_vec();
            let tag = key.seal_in_place_separate_tag(nonce(1), b"hdr", &mut buf);
            assert_ne!(&buf[..], b"some frames");
            buf.extend_from_slice(&tag);
            let mut ok = buf.clone();
            assert_eq!(key.open_in_place(nonce(1), b"hdr", &mut ok), Some(11));
            assert_eq!(&ok[..11], b"some frames");
            assert_eq!(key.open_in_place(nonce(2), b"hdr", &mut buf.clone()), None, "other nonce");
            assert_eq!(key.open_in_place(nonce(1), b"hdx", &mut buf.clone()), None, "other aad");
            for i in 0..buf.len() {
                let mut bad = buf.clone();
                bad[i] ^= 1;
                assert_eq!(key.open_in_place(nonce(1), b"hdr", &mut bad), None, "{suite:?} bit flip at {i}");
            }
            let other = TrafficKey::new(suite, &[8; 32], &LABELS);
            assert_eq!(other.open_in_place(nonce(1), b"hdr", &mut buf.clone()), None, "other secret");
            let relabelled = TrafficKey::new(suite, &[7; 32], &KeyLabels { key: b"test kez", iv: b"test iv" });
            assert_eq!(relabelled.open_in_place(nonce(1), b"hdr", &mut buf.clone()), None, "other label");
            // Too short to hold a tag: refused, no panic.
            assert_eq!(key.open_in_place(nonce(1), b"hdr", &mut [0u8; 5]), None);
        }
    }

    proptest::proptest! {
        /// The backends are interchangeable: the same key, nonce, header
        /// and plaintext seal to the same bytes on both, and each opens
        /// what the other sealed.
        #[test]
        fn both_backends_seal_the_same_bytes(
            secret in proptest::array::uniform32(proptest::prelude::any::<u8>()),
            packet_nonce in proptest::array::uniform12(proptest::prelude::any::<u8>()),
            aad in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            plain in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000),
            suite_index in 0usize..3,
        ) {
            let suite = CipherSuite::preferred()[suite_index];
            let ring = TrafficKey::with_backend(Backend::Ring, suite, &secret, &LABELS);
            let aws = TrafficKey::with_backend(Backend::AwsLc, suite, &secret, &LABELS);
            let mut a = plain.clone();
            let tag_a = ring.seal_in_place_separate_tag(packet_nonce, &aad, &mut a);
            let mut b = plain.clone();
            let tag_b = aws.seal_in_place_separate_tag(packet_nonce, &aad, &mut b);
            proptest::prop_assert_eq!(&a, &b);
            proptest::prop_assert_eq!(tag_a, tag_b);
            a.extend_from_slice(&tag_a);
            let mut opened = a.clone();
            proptest::prop_assert_eq!(aws.open_in_place(packet_nonce, &aad, &mut opened), Some(plain.len()));
            proptest::prop_assert_eq!(&opened[..plain.len()], &plain[..]);
            proptest::prop_assert_eq!(ring.open_in_place(packet_nonce, &aad, &mut a), Some(plain.len()));
        }
    }

    /// The nonce is the IV XOR the packet nonce: a packet nonce that differs
    /// in any one byte gives another nonce (none of its bytes is ignored).
    #[test]
    fn every_byte_of_the_packet_nonce_counts() {
        let key = TrafficKey::new(CipherSuite::ChaCha20Poly1305, &[3; 32], &LABELS);
        let mut sealed = b"x".to_vec();
        let tag = key.seal_in_place_separate_tag([0; NONCE_LEN], b"", &mut sealed);
        sealed.extend_from_slice(&tag);
        for i in 0..NONCE_LEN {
            let mut n = [0; NONCE_LEN];
            n[i] = 0x80;
            assert_eq!(key.open_in_place(n, b"", &mut sealed.clone()), None, "byte {i}");
        }
        assert_eq!(key.open_in_place([0; NONCE_LEN], b"", &mut sealed), Some(1));
    }
}
