//! Which library's AEAD code seals and opens packets on this CPU.
//!
//! AES-GCM and ChaCha20-Poly1305 are deterministic: every correct
//! implementation turns the same key, nonce, associated data and plaintext
//! into the same bytes, so the choice changes speed only, never the wire
//! (the test vectors and a property test check both backends byte for
//! byte). Two are linked:
//! - [`Backend::Ring`]: ring's AES-GCM is the fastest there is on CPUs
//!   whose vector AES (VAES) is at most 256 bits wide (AVX2): 1,420-byte
//!   seals measured 543 ns against aws-lc's 970 on an AMD EPYC (Zen 3);
//! - [`Backend::AwsLc`]: aws-lc (the library rustls and quinn use by
//!   default) also has an AES-GCM over 512-bit registers (AVX-512 with
//!   VAES and VPCLMULQDQ): on an Intel Xeon that has them, 156 ns against
//!   ring's 202 for 1,420 bytes, 19.1 GB/s against 12.0 for 65,000.
//!
//! So the model is the vector width the CPU offers: AVX-512 with VAES and
//! VPCLMULQDQ selects aws-lc, anything else ring. Detected once per process
//! from the CPU's feature flags (no timing, nothing random).

use std::sync::OnceLock;

/// An AEAD implementation; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// ring (AES-GCM up to 256-bit VAES, ChaCha20-Poly1305).
    Ring,
    /// aws-lc through aws-lc-rs (adds 512-bit VAES AES-GCM).
    AwsLc,
}

impl Backend {
    /// The faster backend on this CPU.
    pub fn for_this_cpu() -> Backend {
        static CHOSEN: OnceLock<Backend> = OnceLock::new();
        *CHOSEN.get_or_init(|| if has_512_bit_vector_aes() { Backend::AwsLc } else { Backend::Ring })
    }

    /// Both backends, for tests that compare them.
    pub fn all() -> [Backend; 2] {
        [Backend::Ring, Backend::AwsLc]
    }

    /// Its name in diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ring => "ring",
            Backend::AwsLc => "aws-lc",
        }
    }
}

/// AVX-512 (foundation, byte/word and vector-length extensions) with
/// 512-bit AES and carry-less multiplication: what aws-lc's
/// `aes_gcm_encrypt_avx512` needs.
fn has_512_bit_vector_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
