//! Transport keys of an Exon session: the AEAD that seals every datagram
//! after the handshake, its nonce, and the replay window.
//!
//! The construction is WireGuard's transport message (Donenfeld, *WireGuard:
//! Next Generation Kernel Network Tunnel*, §5.4.6) with QUIC's key
//! derivation (RFC 9001 §5.1):
//! - each direction has a 32-byte traffic secret from the Noise handshake's
//!   `Split()`; HKDF-Expand (RFC 5869, SHA-256) derives from it the AEAD key
//!   (`"braid-exon/1 key"`) and a 12-byte IV (`"braid-exon/1 iv"`);
//! - the nonce is the IV XOR the 64-bit per-session counter (big-endian, in
//!   the last 8 bytes), and the counter travels in the clear: a counter is
//!   never used twice with one key, because a session's send counter only
//!   grows and a session is never resumed (every session has fresh
//!   handshake keys);
//! - the associated data is the packet header (type, receiver index,
//!   counter), so nothing in it can be changed without the tag failing;
//! - [`ReplayWindow`] is RFC 6479's bitmap window: a counter is accepted once,
//!   and only if within [`REPLAY_WINDOW`] of the highest seen.
//!
//! Cipher: AES-128-GCM where the CPU has AES instructions, else
//! ChaCha20-Poly1305 (through `ring`); the initiator proposes, the
//! responder follows. AES-128 rather than AES-256: it is QUIC's and TLS
//! 1.3's mandatory suite, its 128-bit security is the handshake's too
//! (X25519), and its 10 rounds instead of 14 matter here: on loopback, at
//! a million 1 KiB messages a second, sealing and opening every byte is
//! the largest cost encryption adds (AES-256-GCM stays selectable).

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

/// Bytes an AEAD tag adds to a datagram.
pub const TAG_LEN: usize = 16;
/// Counters a session's replay window spans (RFC 6479 suggests ≥ 1024 for
/// reordering paths; 2048 lets a window of tens of thousands of datagrams
/// per second reorder by a few milliseconds).
pub const REPLAY_WINDOW: u64 = 2048;
const SECRET_LEN: usize = 32;
const IV_LEN: usize = aead::NONCE_LEN;

/// The AEADs an Exon session can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-GCM: fastest with AES instructions.
    Aes128Gcm,
    /// AES-256-GCM.
    Aes256Gcm,
    /// ChaCha20-Poly1305: fastest without them.
    ChaCha20Poly1305,
}

impl Cipher {
    /// The faster of the two on this CPU.
    pub fn preferred() -> Cipher {
        if aes_is_accelerated() {
            Cipher::Aes128Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    /// Its code in the handshake payload.
    pub(crate) fn code(self) -> u8 {
        match self {
            Cipher::Aes256Gcm => 1,
            Cipher::ChaCha20Poly1305 => 2,
            Cipher::Aes128Gcm => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Cipher> {
        match code {
            1 => Some(Cipher::Aes256Gcm),
            2 => Some(Cipher::ChaCha20Poly1305),
            3 => Some(Cipher::Aes128Gcm),
            _ => None,
        }
    }

    /// The name used in statistics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "aes-128-gcm",
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    fn aead(self) -> &'static aead::Algorithm {
        match self {
            Cipher::Aes128Gcm => &aead::AES_128_GCM,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

fn aes_is_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
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

/// HKDF-Expand(secret, label) into `out` (RFC 5869 §2.3).
fn expand(secret: &[u8; SECRET_LEN], label: &[u8], out: &mut [u8]) {
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, secret);
    let info = [label];
    // Cannot fail: the lengths used here are far below 255 × 32 bytes.
    if let Ok(okm) = prk.expand(&info, Len(out.len())) {
        let _ = okm.fill(out);
    }
}

/// One direction's key and IV.
pub(crate) struct TransportKey {
    key: LessSafeKey,
    iv: [u8; IV_LEN],
}

impl std::fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportKey(..)")
    }
}

impl TransportKey {
    /// The key derived from a traffic secret.
    pub(crate) fn new(cipher: Cipher, secret: &[u8; SECRET_LEN]) -> TransportKey {
        let alg = cipher.aead();
        let mut key_bytes = [0u8; SECRET_LEN];
        expand(secret, b"braid-exon/1 key", &mut key_bytes[..alg.key_len()]);
        let mut iv = [0u8; IV_LEN];
        expand(secret, b"braid-exon/1 iv", &mut iv);
        // Cannot fail: the key has the algorithm's length.
        let unbound = UnboundKey::new(alg, &key_bytes[..alg.key_len()])
            .unwrap_or_else(|_| unreachable!("key length matches the algorithm"));
        key_bytes.fill(0);
        TransportKey {
            key: LessSafeKey::new(unbound),
            iv,
        }
    }

    fn nonce(&self, counter: u64) -> Nonce {
        let mut n = self.iv;
        for (b, x) in n[IV_LEN - 8..].iter_mut().zip(counter.to_be_bytes()) {
            *b ^= x;
        }
        Nonce::assume_unique_for_key(n)
    }

    /// Seals `payload` in place and returns the tag to append.
    pub(crate) fn seal(&self, counter: u64, header: &[u8], payload: &mut [u8]) -> [u8; TAG_LEN] {
        let mut out = [0u8; TAG_LEN];
        // Sealing fails only for payloads beyond ~64 GiB.
        if let Ok(tag) =
            self.key
                .seal_in_place_separate_tag(self.nonce(counter), Aad::from(header), payload)
        {
            out.copy_from_slice(tag.as_ref());
        }
        out
    }

    /// Opens `ciphertext_and_tag` in place: the plaintext length, or `None`
    /// if the tag does not verify.
    pub(crate) fn open(
        &self,
        counter: u64,
        header: &[u8],
        ciphertext_and_tag: &mut [u8],
    ) -> Option<usize> {
        self.key
            .open_in_place(self.nonce(counter), Aad::from(header), ciphertext_and_tag)
            .ok()
            .map(|plain| plain.len())
    }
}

/// RFC 6479 anti-replay window: the highest counter accepted and a bitmap
/// of the [`REPLAY_WINDOW`] counters below it. [`check`](Self::check) runs
/// before the (costly) decryption, [`accept`](Self::accept) only after the
/// tag verified, so a forged packet never moves the window.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// One past the highest counter accepted (0: none yet).
    top: u64,
    /// Bit `c % BITS` is set when counter `c` (within the window) was seen.
    bits: [u64; WORDS],
}

/// The bitmap holds one word more than the window, so that sliding it
/// clears whole words (RFC 6479 §2).
const WORDS: usize = (REPLAY_WINDOW / 64) as usize + 1;
const BITS: u64 = (WORDS as u64) * 64;

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            bits: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    /// Would `counter` be accepted (not seen, not too old)?
    pub fn check(&self, counter: u64) -> bool {
        if counter >= self.top {
            return true;
        }
        if self.top - counter > REPLAY_WINDOW {
            return false;
        }
        let bit = counter % BITS;
        self.bits[(bit / 64) as usize] & (1 << (bit % 64)) == 0
    }

    /// Records `counter` (after its packet authenticated); false if it was
    /// a replay after all.
    pub fn accept(&mut self, counter: u64) -> bool {
        if !self.check(counter) {
            return false;
        }
        if counter >= self.top {
            // Clear the words the window slides over.
            let from_word = self.top.div_ceil(64);
            let to_word = counter / 64;
            let clear = (to_word + 1).saturating_sub(from_word).min(WORDS as u64);
            for w in 0..clear {
                let idx = ((from_word + w) % (WORDS as u64)) as usize;
                self.bits[idx] = 0;
            }
            self.top = counter + 1;
        }
        let bit = counter % BITS;
        self.bits[(bit / 64) as usize] |= 1 << (bit % 64);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seal_open_round_trip_and_any_change_fails() {
        for cipher in [
            Cipher::Aes128Gcm,
            Cipher::Aes256Gcm,
            Cipher::ChaCha20Poly1305,
        ] {
            let k = TransportKey::new(cipher, &[7; 32]);
            let mut buf = b"exactly once".to_vec();
            let tag = k.seal(5, b"hdr", &mut buf);
            buf.extend_from_slice(&tag);
            let mut ok = buf.clone();
            assert_eq!(k.open(5, b"hdr", &mut ok), Some(12));
            assert_eq!(&ok[..12], b"exactly once");
            assert_eq!(k.open(6, b"hdr", &mut buf.clone()), None, "other counter");
            assert_eq!(k.open(5, b"hdx", &mut buf.clone()), None, "other header");
            let other = TransportKey::new(cipher, &[8; 32]);
            assert_eq!(other.open(5, b"hdr", &mut buf.clone()), None, "other key");
        }
    }

    /// Test vector: a fixed secret, counter and header seal to fixed bytes.
    /// The expected value was computed independently (Python's
    /// `cryptography`: HKDF-Expand-SHA256 with the labels above, then
    /// ChaCha20-Poly1305 with nonce = IV XOR counter), so it pins the
    /// labels, the nonce layout and the AEAD.
    #[test]
    fn fixed_key_seals_to_fixed_bytes() {
        let k = TransportKey::new(Cipher::ChaCha20Poly1305, &[0x42; 32]);
        let mut buf = b"braid".to_vec();
        let header = [0xE4, 0, 0, 0, 1];
        let tag = k.seal(1, &header, &mut buf);
        buf.extend_from_slice(&tag);
        let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "ca4bbd923239ca65233b7693a464eda78ac1933889");
        assert_eq!(k.open(1, &header, &mut buf), Some(5));
        assert_eq!(&buf[..5], b"braid");
    }

    #[test]
    fn replay_window_accepts_each_counter_once() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(0));
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(w.accept(3));
        assert!(!w.accept(3));
        assert!(w.accept(5000));
        assert!(!w.check(5000 - REPLAY_WINDOW - 1), "too old");
        assert!(w.check(5000 - REPLAY_WINDOW + 1));
        assert!(!w.check(5000));
    }

    proptest! {
        /// Against a set of everything seen: a counter is accepted iff it
        /// was never accepted and is within the window of the highest.
        #[test]
        fn replay_window_matches_a_model(ops in proptest::collection::vec(0u64..6000, 1..400)) {
            let mut w = ReplayWindow::default();
            let mut seen = std::collections::BTreeSet::new();
            let mut top: Option<u64> = None;
            for c in ops {
                let fresh = !seen.contains(&c) && top.is_none_or(|t| c + REPLAY_WINDOW > t);
                prop_assert_eq!(w.accept(c), fresh, "counter {}", c);
                if fresh {
                    seen.insert(c);
                    top = Some(top.map_or(c, |t| t.max(c)));
                }
            }
        }
    }
}
