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
//!
//! The cipher suites (and their codes in the handshake payload, the same as
//! braid-proto's), HKDF-Expand and the AEAD with its IV XOR nonce are
//! `braid_crypto`'s; this module owns Exon's labels, its counter nonce and
//! the replay window.

use braid_crypto::{KeyLabels, TrafficKey, NONCE_LEN, SECRET_LEN};

/// The AEADs an Exon session can use: braid-crypto's suites. The fastest
/// on this CPU is [`Cipher::fastest`].
pub use braid_crypto::CipherSuite as Cipher;
pub use braid_crypto::TAG_LEN;

/// Counters a session's replay window spans (RFC 6479 suggests ≥ 1024 for
/// reordering paths; 2048 lets a window of tens of thousands of datagrams
/// per second reorder by a few milliseconds).
pub const REPLAY_WINDOW: u64 = 2048;
/// The labels of a transport key and IV (a change is a wire change).
const LABELS: KeyLabels = KeyLabels { key: b"braid-exon/1 key", iv: b"braid-exon/1 iv" };

/// One direction's key and IV.
#[derive(Debug)]
pub(crate) struct TransportKey(TrafficKey);

impl TransportKey {
    /// The key derived from a traffic secret.
    pub(crate) fn new(cipher: Cipher, secret: &[u8; SECRET_LEN]) -> TransportKey {
        TransportKey(TrafficKey::new(cipher, secret, &LABELS))
    }

    /// The counter, big-endian, in the last 8 bytes; the IV is XORed with it.
    fn packet_nonce(counter: u64) -> [u8; NONCE_LEN] {
        let mut n = [0u8; NONCE_LEN];
        n[NONCE_LEN - 8..].copy_from_slice(&counter.to_be_bytes());
        n
    }

    /// Seals `payload` in place and returns the tag to append.
    pub(crate) fn seal(&self, counter: u64, header: &[u8], payload: &mut [u8]) -> [u8; TAG_LEN] {
        self.0.seal_in_place_separate_tag(Self::packet_nonce(counter), header, payload)
    }

    /// Opens `ciphertext_and_tag` in place: the plaintext length, or `None`
    /// if the tag does not verify.
    pub(crate) fn open(
        &self,
        counter: u64,
        header: &[u8],
        ciphertext_and_tag: &mut [u8],
    ) -> Option<usize> {
        self.0.open_in_place(Self::packet_nonce(counter), header, ciphertext_and_tag)
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
