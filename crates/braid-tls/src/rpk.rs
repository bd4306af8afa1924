//! A Braid identity as a TLS 1.3 raw public key (RFC 7250): what we present
//! (our Ed25519 key's SubjectPublicKeyInfo with its signing key, RFC 8410) and
//! the one signature algorithm we accept from peers (Ed25519, RFC 8032, as
//! TLS 1.3 uses it in CertificateVerify, RFC 8446 §4.4.3).
//!
//! Why raw public keys rather than a self-signed X.509 certificate: Braid
//! trusts keys, not names or authorities, so a certificate would carry only
//! fields we must ignore (subject, validity dates, issuer signature); with
//! RFC 7250 the peer sends exactly the SPKI that `known_hosts` pins, no X.509
//! parser ever sees a peer's bytes, and no clock or expiry can break a node.
//! rustls 0.23 negotiates raw public keys for both the server and the client
//! certificate (the `server_certificate_type` / `client_certificate_type`
//! extensions), so mutual authentication needs nothing custom on the wire.
//! The cost is interoperability with stacks lacking RFC 7250 (OpenSSL has it
//! since 3.2), which Braid does not need: both ends are Braid.

use std::sync::Arc;

use braid_identity::{Identity, KeyError, PublicKey};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use crate::error::TlsError;

/// Ed25519 and nothing else: the only signature a Braid peer can make, so
/// offering more would only widen what a peer's bytes can reach.
pub(crate) static ED25519_ONLY: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[webpki::ring::ED25519],
    mapping: &[(SignatureScheme::ED25519, &[webpki::ring::ED25519])],
};

/// Our identity as rustls presents it: the raw public key (SPKI DER) as the
/// one-entry "certificate chain", and the Ed25519 signing key (ring).
pub(crate) fn certified_key(identity: &Identity) -> Result<Arc<CertifiedKey>, TlsError> {
    let pkcs8 = identity.to_pkcs8_der();
    // Borrowed, so the only copy of the secret outside ring is the zeroized one.
    let signing = rustls::crypto::ring::sign::any_eddsa_type(&PrivatePkcs8KeyDer::from(&pkcs8[..]))
        .map_err(|e| TlsError::Config { reason: format!("loading the Ed25519 identity key: {e}") })?;
    let spki = CertificateDer::from(identity.public_key().to_spki_der());
    Ok(Arc::new(CertifiedKey::new(vec![spki], signing)))
}

/// The Ed25519 key in a peer's raw public key, or why it is not one.
pub(crate) fn peer_key(spki: &[u8]) -> Result<PublicKey, KeyError> {
    PublicKey::from_spki_der(spki)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_raw_public_key_is_the_identity_spki() {
        let id = Identity::from_seed(&[3; 32]);
        let key = certified_key(&id).unwrap();
        assert_eq!(key.cert.len(), 1);
        assert_eq!(peer_key(key.cert[0].as_ref()).unwrap(), id.public_key());
        assert_eq!(key.key.algorithm(), rustls::SignatureAlgorithm::ED25519);
    }

    #[test]
    fn only_ed25519_is_mapped() {
        assert_eq!(ED25519_ONLY.supported_schemes(), vec![SignatureScheme::ED25519]);
    }

    proptest::proptest! {
        /// Arbitrary bytes as a peer's key: an error or a key, never a panic.
        #[test]
        fn any_bytes_parse_totally(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let _ = peer_key(&bytes);
        }
    }
}
