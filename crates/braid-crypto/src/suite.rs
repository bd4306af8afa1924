//! The AEADs Braid's protocols speak, and which to prefer on this CPU.
//!
//! AES-128-GCM where the CPU has AES instructions (QUIC's and TLS 1.3's
//! default suite; 10 AES rounds to AES-256's 14, the same GHASH, the same
//! 2^23-packet limit per key, RFC 9001 §6.6), then AES-256-GCM;
//! ChaCha20-Poly1305 first where AES is not accelerated. All through
//! `ring`, whose implementations use the hardware.

use ring::aead;

/// A packet cipher.
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

    /// The fastest suite on this CPU (the first of [`preferred`](Self::preferred)).
    pub fn fastest() -> CipherSuite {
        CipherSuite::preferred()[0]
    }

    /// The suite's code in a handshake payload. Both protocols' payloads
    /// use these codes; a change is a wire change.
    pub fn code(self) -> u8 {
        match self {
            CipherSuite::Aes256Gcm => 1,
            CipherSuite::ChaCha20Poly1305 => 2,
            CipherSuite::Aes128Gcm => 3,
        }
    }

    /// The suite with `code`, or `None` for a code no suite has.
    pub fn from_code(code: u8) -> Option<Self> {
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

    /// Packets one key may seal before it must be updated: RFC 9001 §6.6's
    /// confidentiality limit for AES-GCM (2^23 full-size packets), with
    /// margin; ChaCha20-Poly1305 has no practical one, so the same bound
    /// keeps one rule for all suites.
    pub fn packets_per_key(self) -> u64 {
        1 << 22
    }

    pub(crate) fn aead(self) -> &'static aead::Algorithm {
        match self {
            CipherSuite::Aes128Gcm => &aead::AES_128_GCM,
            CipherSuite::Aes256Gcm => &aead::AES_256_GCM,
            CipherSuite::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }

    /// The same algorithm in aws-lc-rs.
    pub(crate) fn aws_lc_aead(self) -> &'static aws_lc_rs::aead::Algorithm {
        match self {
            CipherSuite::Aes128Gcm => &aws_lc_rs::aead::AES_128_GCM,
            CipherSuite::Aes256Gcm => &aws_lc_rs::aead::AES_256_GCM,
            CipherSuite::ChaCha20Poly1305 => &aws_lc_rs::aead::CHACHA20_POLY1305,
        }
    }

    /// Bytes of the AEAD key.
    pub(crate) fn key_len(self) -> usize {
        self.aead().key_len()
    }
}

/// Whether the CPU has the instructions that make AES-GCM faster than
/// ChaCha20-Poly1305 (AES rounds and carry-less multiplication for GHASH).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are on the wire of both protocols: pinned.
    #[test]
    fn codes_are_pinned_and_round_trip() {
        assert_eq!(CipherSuite::Aes256Gcm.code(), 1);
        assert_eq!(CipherSuite::ChaCha20Poly1305.code(), 2);
        assert_eq!(CipherSuite::Aes128Gcm.code(), 3);
        for suite in CipherSuite::preferred() {
            assert_eq!(CipherSuite::from_code(suite.code()), Some(suite));
        }
        for code in [0, 4, 255] {
            assert_eq!(CipherSuite::from_code(code), None);
        }
    }

    #[test]
    fn preferred_lists_every_suite_once_the_fastest_first() {
        let p = CipherSuite::preferred();
        assert_eq!(p[0], CipherSuite::fastest());
        for suite in [CipherSuite::Aes128Gcm, CipherSuite::Aes256Gcm, CipherSuite::ChaCha20Poly1305] {
            assert_eq!(p.iter().filter(|&&s| s == suite).count(), 1, "{suite:?}");
        }
        let expected_first = if aes_is_accelerated() { CipherSuite::Aes128Gcm } else { CipherSuite::ChaCha20Poly1305 };
        assert_eq!(p[0], expected_first);
    }
}
