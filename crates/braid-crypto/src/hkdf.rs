//! HKDF-Expand (RFC 5869 §2.3, SHA-256) of a traffic secret with a label:
//! how both protocols derive keys, IVs and next secrets from the secrets
//! the Noise handshake splits (RFC 9001 §5.1 does the same with TLS's
//! secrets; here the label is the whole info string, without TLS's
//! `HkdfLabel` structure).

use ring::hkdf;

use crate::SECRET_LEN;

/// Most bytes one expansion may produce (RFC 5869: 255 × HashLen).
pub const MAX_OUTPUT: usize = 255 * 32;

/// Why an expansion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HKDF-Expand output of {0} bytes exceeds {MAX_OUTPUT}")]
pub struct OutputTooLong(pub usize);

/// HKDF output length as `ring` wants it.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand(`secret`, `label`) into `out`, with `secret` used as the
/// pseudorandom key (it is already one: a Noise split output or an earlier
/// expansion).
pub fn expand(secret: &[u8; SECRET_LEN], label: &[u8], out: &mut [u8]) -> Result<(), OutputTooLong> {
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, secret);
    let info = [label];
    // ring refuses exactly the lengths beyond 255 × 32 bytes.
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| OutputTooLong(out.len()))
}

/// [`expand`] into an `N`-byte array, `N` checked at compile time. HKDF's
/// output is T(1) ‖ T(2) ‖ … cut to length (§2.3), so a shorter key is the
/// prefix of this array: callers needing 16 bytes of a 32-byte expansion
/// take `[..16]` and get exactly HKDF-Expand(secret, label, 16).
pub fn expand_array<const N: usize>(secret: &[u8; SECRET_LEN], label: &[u8]) -> [u8; N] {
    const { assert!(N <= MAX_OUTPUT, "HKDF-Expand output too long") };
    let mut out = [0u8; N];
    // Cannot fail: N is within the bound (checked above at compile time).
    let _ = expand(secret, label, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869 has no vector whose PRK is the input, so: the first
    /// output block is HMAC-SHA256(secret, label ‖ 0x01) (§2.3), checked
    /// with ring's HMAC; a longer output starts with the shorter one.
    #[test]
    fn expand_is_rfc5869_with_the_secret_as_prk() {
        let secret = [0x0b; 32];
        let mut out = [0u8; 32];
        expand(&secret, b"label", &mut out).unwrap();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
        let t1 = ring::hmac::sign(&key, b"label\x01");
        assert_eq!(&out[..], t1.as_ref());
        let mut longer = [0u8; 44];
        expand(&secret, b"label", &mut longer).unwrap();
        assert_eq!(&longer[..32], &out[..]);
        let mut other = [0u8; 32];
        expand(&secret, b"labem", &mut other).unwrap();
        assert_ne!(other, out);
        let short: [u8; 16] = expand_array(&secret, b"label");
        let mut sixteen = [0u8; 16];
        expand(&secret, b"label", &mut sixteen).unwrap();
        assert_eq!(short, sixteen);
        assert_eq!(&short[..], &out[..16]);
    }

    #[test]
    fn too_long_an_output_is_an_error() {
        let mut out = vec![0u8; MAX_OUTPUT + 1];
        assert_eq!(expand(&[1; 32], b"x", &mut out), Err(OutputTooLong(MAX_OUTPUT + 1)));
        let mut out = vec![0u8; MAX_OUTPUT];
        assert!(expand(&[1; 32], b"x", &mut out).is_ok());
    }
}
