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
//! Cipher: AES-128-GCM where the CPU has AES instructions (QUIC's and TLS
//! 1.3's default suite; 10 AES rounds to AES-256's 14, the same GHASH, and
//! the same 2^23-packet limit per key, RFC 9001 §6.6), then AES-256-GCM;
//! ChaCha20-Poly1305 first where AES is not accelerated. All through
//! `ring`, whose implementations use the hardware.

use ring::aead::{self, quic, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

/// Bytes an AEAD tag adds to a packet.
pub const TAG_LEN: usize = 16;
/// Bytes of ciphertext sampled for header protection.
pub(crate) const SAMPLE_LEN: usize = 16;
/// The key-phase bit in a sealed packet's type byte.
pub(crate) const KEY_PHASE_BIT: u8 = 0x40;
const SECRET_LEN: usize = 32;
const IV_LEN: usize = aead::NONCE_LEN;

/// The packet ciphers Braid speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// AES-128-GCM: fastest with AES instructions (x86-64 AES-NI, ARMv8 AES).
    Aes128Gcm,
    /// AES-256-GCM: a 256-bit key, at about 1.3 times AES-128's cost per byte.
    Aes256Gcm,
    /// ChaCha20-Poly1305: fastest without them.
    ChaCha20Poly1305,
}

impl CipherSuite {
    /// Every suite, the ones this CPU runs faster first.
    pub fn preferred() -> [CipherSuite; 3] {
        if aes_is_accelerated() {
            [CipherSuite::Aes128Gcm, CipherSuite::Aes256Gcm, CipherSuite::ChaCha20Poly1305]
        } else {
            [CipherSuite::ChaCha20Poly1305, CipherSuite::Aes128Gcm, CipherSuite::Aes256Gcm]
        }
    }

    /// The suite's code in the handshake payload.
    pub(crate) fn code(self) -> u8 {
        match self {
            CipherSuite::Aes256Gcm => 1,
            CipherSuite::ChaCha20Poly1305 => 2,
            CipherSuite::Aes128Gcm => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(CipherSuite::Aes256Gcm),
            2 => Some(CipherSuite::ChaCha20Poly1305),
            3 => Some(CipherSuite::Aes128Gcm),
            _ => None,
        }
    }

    /// The name used in statistics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128Gcm => "aes-128-gcm",
            CipherSuite::Aes256Gcm => "aes-256-gcm",
            CipherSuite::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    fn aead(self) -> &'static aead::Algorithm {
        match self {
            CipherSuite::Aes128Gcm => &aead::AES_128_GCM,
            CipherSuite::Aes256Gcm => &aead::AES_256_GCM,
            CipherSuite::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }

    fn header_protection(self) -> &'static quic::Algorithm {
        match self {
            CipherSuite::Aes128Gcm => &quic::AES_128,
            CipherSuite::Aes256Gcm => &quic::AES_256,
            CipherSuite::ChaCha20Poly1305 => &quic::CHACHA20,
        }
    }

    /// Packets one key may seal before it must be updated: RFC 9001 §6.6's
    /// confidentiality limit for AES-GCM (2^23 full-size packets), with
    /// margin; ChaCha20-Poly1305 has no practical one, so the same bound
    /// keeps one rule for both.
    pub(crate) fn packets_per_key(self) -> u64 {
        1 << 22
    }
}

fn aes_is_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// HKDF output length as `ring` wants it.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand(secret, label) into `out` (RFC 5869 §2.3; the label is the
/// whole info string).
fn expand(secret: &[u8; SECRET_LEN], label: &[u8], out: &mut [u8]) {
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, secret);
    let info = [label];
    // Cannot fail: the lengths used here are far below 255 × 32 bytes.
    if let Ok(okm) = prk.expand(&info, Len(out.len())) {
        let _ = okm.fill(out);
    }
}

/// One direction's packet key and IV at one key phase.
pub(crate) struct PacketKey {
    suite: CipherSuite,
    secret: [u8; SECRET_LEN],
    key: LessSafeKey,
    iv: [u8; IV_LEN],
}

impl PacketKey {
    pub(crate) fn new(suite: CipherSuite, secret: [u8; SECRET_LEN]) -> Self {
        let mut key_bytes = [0u8; SECRET_LEN];
        expand(&secret, b"braid/3 key", &mut key_bytes[..suite.aead().key_len()]);
        let mut iv = [0u8; IV_LEN];
        expand(&secret, b"braid/3 iv", &mut iv);
        // Cannot fail: the key has the algorithm's length.
        let unbound = UnboundKey::new(suite.aead(), &key_bytes[..suite.aead().key_len()])
            .unwrap_or_else(|_| unreachable!("key length matches the algorithm"));
        key_bytes.fill(0);
        PacketKey { suite, secret, key: LessSafeKey::new(unbound), iv }
    }

    /// The key of the next key phase (RFC 9001 §6.1).
    pub(crate) fn next(&self) -> PacketKey {
        let mut secret = [0u8; SECRET_LEN];
        expand(&self.secret, b"braid/3 ku", &mut secret);
        PacketKey::new(self.suite, secret)
    }

    fn nonce(&self, path_id: u32, pn: u64) -> Nonce {
        let mut n = self.iv;
        for (b, x) in n[..4].iter_mut().zip(path_id.to_be_bytes()) {
            *b ^= x;
        }
        for (b, x) in n[4..].iter_mut().zip(pn.to_be_bytes()) {
            *b ^= x;
        }
        Nonce::assume_unique_for_key(n)
    }

    /// Seals `payload` in place and returns the tag to append.
    pub(crate) fn seal(&self, path_id: u32, pn: u64, header: &[u8], payload: &mut [u8]) -> [u8; TAG_LEN] {
        let mut out = [0u8; TAG_LEN];
        // Sealing fails only for payloads beyond ~64 GiB.
        if let Ok(tag) = self.key.seal_in_place_separate_tag(self.nonce(path_id, pn), Aad::from(header), payload) {
            out.copy_from_slice(tag.as_ref());
        }
        out
    }

    /// Opens `ciphertext_and_tag` in place; the plaintext length, or `None`
    /// if the tag does not verify.
    pub(crate) fn open(&self, path_id: u32, pn: u64, header: &[u8], ciphertext_and_tag: &mut [u8]) -> Option<usize> {
        self.key
            .open_in_place(self.nonce(path_id, pn), Aad::from(header), ciphertext_and_tag)
            .ok()
            .map(|plain| plain.len())
    }
}

impl Drop for PacketKey {
    fn drop(&mut self) {
        self.secret.fill(0);
    }
}

/// One direction's header-protection key (fixed across key updates).
pub(crate) struct HeaderKey(quic::HeaderProtectionKey);

impl HeaderKey {
    pub(crate) fn new(suite: CipherSuite, secret: &[u8; SECRET_LEN]) -> Self {
        let alg = suite.header_protection();
        let mut bytes = [0u8; SECRET_LEN];
        expand(secret, b"braid/3 hp", &mut bytes[..alg.key_len()]);
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
