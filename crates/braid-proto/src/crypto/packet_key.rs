//! Packet protection keys: the AEAD that seals a packet's payload, the
//! nonce built from its path and packet number, header protection for the
//! packet number and key phase, and key update.
//!
//! The construction is QUIC's (RFC 9001 §5), with QUIC multipath's nonce
//! (draft-ietf-quic-multipath §2.4):
//! - each direction has a 32-byte *traffic secret* (from the Noise
//!   handshake's split, see [`super::noise`]); HKDF-Expand (RFC 5869, SHA-256)
//!   derives from it the AEAD key (`"braid/3 key"`), a 12-byte IV
//!   (`"braid/3 iv"`) and the header-protection key (`"braid/3 hp"`);
//! - the nonce is the IV XOR (path ID as 4 bytes ‖ packet number as 8
//!   bytes), big-endian: unique per key because packet numbers never repeat
//!   within a path's number space and paths have distinct IDs;
//! - the associated data is the whole header, so nothing in it can be
//!   changed without the tag failing;
//! - header protection (RFC 9001 §5.4) masks the 4-byte packet number and
//!   the key-phase bit with a mask computed from a 16-byte sample of the
//!   ciphertext, which starts right after the packet number (the tag alone
//!   is 16 bytes, so every sealed packet has a sample);
//! - key update (RFC 9001 §6) derives the next secret with
//!   `"braid/3 ku"`; the header-protection key stays.
//!
//! The suites (and their codes in the handshake payload), HKDF-Expand and
//! the AEAD with its IV XOR nonce are `braid_crypto`'s, shared with Exon;
//! this module owns Braid's labels, its nonce (path ID ‖ packet number),
//! header protection and key update.

use braid_crypto::hkdf::expand_array;
use braid_crypto::{KeyLabels, TrafficKey, NONCE_LEN, SECRET_LEN};
use ring::aead::quic;

pub use braid_crypto::{CipherSuite, TAG_LEN};

/// Bytes of ciphertext sampled for header protection.
pub(crate) const SAMPLE_LEN: usize = 16;
/// The key-phase bit in a sealed packet's type byte.
pub(crate) const KEY_PHASE_BIT: u8 = 0x40;
/// The labels of a packet key and IV (a change is a wire change).
const LABELS: KeyLabels = KeyLabels { key: b"braid/3 key", iv: b"braid/3 iv" };
/// The label of the next key phase's secret.
const KEY_UPDATE_LABEL: &[u8] = b"braid/3 ku";
/// The label of the header-protection key.
const HEADER_LABEL: &[u8] = b"braid/3 hp";

/// One direction's packet key and IV at one key phase.
pub(crate) struct PacketKey {
    suite: CipherSuite,
    /// Kept for the next key phase's secret.
    secret: [u8; SECRET_LEN],
    key: TrafficKey,
}

impl PacketKey {
    pub(crate) fn new(suite: CipherSuite, secret: [u8; SECRET_LEN]) -> Self {
        PacketKey { suite, key: TrafficKey::new(suite, &secret, &LABELS), secret }
    }

    /// The key of the next key phase (RFC 9001 §6.1).
    pub(crate) fn next(&self) -> PacketKey {
        PacketKey::new(self.suite, expand_array(&self.secret, KEY_UPDATE_LABEL))
    }

    /// Path ID (4 bytes) ‖ packet number (8 bytes), big-endian: the IV is
    /// XORed with it (QUIC multipath's nonce, draft-ietf-quic-multipath §2.4).
    fn packet_nonce(path_id: u32, pn: u64) -> [u8; NONCE_LEN] {
        let mut n = [0u8; NONCE_LEN];
        n[..4].copy_from_slice(&path_id.to_be_bytes());
        n[4..].copy_from_slice(&pn.to_be_bytes());
        n
    }

    /// Seals `payload` in place and returns the tag to append.
    pub(crate) fn seal(&self, path_id: u32, pn: u64, header: &[u8], payload: &mut [u8]) -> [u8; TAG_LEN] {
        self.key.seal_in_place_separate_tag(Self::packet_nonce(path_id, pn), header, payload)
    }

    /// Opens `ciphertext_and_tag` in place; the plaintext length, or `None`
    /// if the tag does not verify.
    pub(crate) fn open(&self, path_id: u32, pn: u64, header: &[u8], ciphertext_and_tag: &mut [u8]) -> Option<usize> {
        self.key.open_in_place(Self::packet_nonce(path_id, pn), header, ciphertext_and_tag)
    }
}

impl Drop for PacketKey {
    fn drop(&mut self) {
        self.secret.fill(0);
    }
}

/// The header-protection algorithm of a suite (RFC 9001 §5.4.3, §5.4.4).
fn header_protection(suite: CipherSuite) -> &'static quic::Algorithm {
    match suite {
        CipherSuite::Aes128Gcm => &quic::AES_128,
        CipherSuite::Aes256Gcm => &quic::AES_256,
        CipherSuite::ChaCha20Poly1305 => &quic::CHACHA20,
    }
}

/// One direction's header-protection key (fixed across key updates).
pub(crate) struct HeaderKey(quic::HeaderProtectionKey);

impl HeaderKey {
    pub(crate) fn new(suite: CipherSuite, secret: &[u8; SECRET_LEN]) -> Self {
        let alg = header_protection(suite);
        // 32 bytes expanded, the algorithm's length used: the same bytes as
        // expanding to that length (HKDF output is a prefix).
        let mut bytes: [u8; SECRET_LEN] = expand_array(secret, HEADER_LABEL);
        let key = quic::HeaderProtectionKey::new(alg, &bytes[..alg.key_len()])
            .unwrap_or_else(|_| unreachable!("key length matches the algorithm"));
        bytes.fill(0);
        HeaderKey(key)
    }

    /// The 5-byte mask for a sample; `None` if the sample is short.
    pub(crate) fn mask(&self, sample: &[u8]) -> Option<[u8; 5]> {
        self.0.new_mask(sample.get(..SAMPLE_LEN)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sealing_round_trips_and_any_change_fails() {
        for suite in CipherSuite::preferred() {
            let key = PacketKey::new(suite, [7; 32]);
            let header = b"header bytes";
            let mut payload = b"some frames".to_vec();
            let tag = key.seal(3, 99, header, &mut payload);
            assert_ne!(&payload[..], b"some frames");
            let mut sealed = payload.clone();
            sealed.extend_from_slice(&tag);
            let mut ok = sealed.clone();
            assert_eq!(key.open(3, 99, header, &mut ok), Some(11));
            assert_eq!(&ok[..11], b"some frames");
            // Another path, packet number, header or a flipped bit: refused.
            assert_eq!(key.open(4, 99, header, &mut sealed.clone()), None);
            assert_eq!(key.open(3, 98, header, &mut sealed.clone()), None);
            assert_eq!(key.open(3, 99, b"header bytez", &mut sealed.clone()), None);
            for i in 0..sealed.len() {
                let mut bad = sealed.clone();
                bad[i] ^= 1;
                assert_eq!(key.open(3, 99, header, &mut bad), None, "bit flip at {i}");
            }
            // The next key phase's key does not open the current one's.
            assert_eq!(key.next().open(3, 99, header, &mut sealed.clone()), None);
        }
    }

    /// Test vectors: fixed secrets seal fixed bytes. A change here is a wire
    /// change (bump the version). The expected bytes were checked against an
    /// independent implementation (Python's `cryptography`: `HKDFExpand`
    /// with SHA-256, `AESGCM`, `ChaCha20Poly1305`, and AES-ECB of the sample
    /// for the mask).
    #[test]
    fn test_vectors() {
        let secret = core::array::from_fn(|i| i as u8);
        let expect = [
            (CipherSuite::Aes128Gcm, "d74fecca404c7026b730e3c670bf5d5a27e8c0fbbc", "f60d6e2841"),
            (CipherSuite::Aes256Gcm, "d1a71fa687d3817e7043ce0016e44ca4ecf5fee92e", "55511d0491"),
            (CipherSuite::ChaCha20Poly1305, "144334a8246d560ac2e3d24fe339b3fb21dcd29f4c", "31f834b3f5"),
        ];
        for (suite, sealed_hex, mask_hex) in expect {
            let key = PacketKey::new(suite, secret);
            let mut payload = b"braid".to_vec();
            let tag = key.seal(1, 0x0102_0304, b"hdr", &mut payload);
            payload.extend_from_slice(&tag);
            assert_eq!(hex(&payload), sealed_hex, "{suite:?} sealed");
            let hp = HeaderKey::new(suite, &secret);
            assert_eq!(hex(&hp.mask(&[0x55; 16]).unwrap()), mask_hex, "{suite:?} mask");
            let next = key.next();
            let mut payload = b"braid".to_vec();
            let tag = next.seal(1, 0x0102_0304, b"hdr", &mut payload);
            payload.extend_from_slice(&tag);
            assert_ne!(hex(&payload), sealed_hex);
        }
    }
}
