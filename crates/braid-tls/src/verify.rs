//! Judging a TLS peer by its Ed25519 raw public key (RFC 7250) and the
//! known hosts, in place of CA chains and host names.
//!
//! rustls asks a verifier two questions in turn, on both sides (RFC 8446
//! §4.4.2–4.4.3): is the presented "certificate" acceptable, and does the
//! CertificateVerify signature over the transcript verify with it. Our
//! answers: the certificate must be exactly one Ed25519 SubjectPublicKeyInfo
//! (a parse, no trust decision yet); the signature must be Ed25519 and
//! verify under that key (rustls's `verify_tls13_signature_with_raw_key`, ring
//! algorithms); and only then is the key put to the [`TrustStore`] — so the
//! store (which records keys under TOFU) is asked only about keys the peer has
//! proved it holds, as its contract requires, and before either side keeps
//! anything for the connection.
//!
//! One verifier is built per connection because the decision depends on the
//! peer's address, which rustls does not pass in; it also keeps the outcome,
//! so the caller learns which key was accepted or why it was refused (rustls
//! itself reports only an alert code).

use std::sync::{Arc, Mutex};

use braid_identity::{Peer, PublicKey, TrustError, TrustStore};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, PeerIncompatible, SignatureScheme};

use crate::rpk::{peer_key, ED25519_ONLY};

/// What the verifier decided about the peer's key.
#[derive(Debug, Default)]
pub(crate) enum Outcome {
    /// No key has been judged yet (the handshake failed before, or the peer
    /// sent none).
    #[default]
    Pending,
    /// The key proved and trusted.
    Accepted(PublicKey),
    /// The key proved but refused by the trust store.
    Refused {
        /// The key.
        key: PublicKey,
        /// The store's reason (boxed: the enum stays small while pending).
        reason: Box<TrustError>,
    },
}

/// Verifies one peer's raw public key and authorizes it for that peer.
#[derive(Debug)]
pub(crate) struct PeerKeyVerifier {
    peer: Peer,
    trust: Arc<TrustStore>,
    /// Our own key, when peers holding it are trusted without the store.
    own: Option<PublicKey>,
    outcome: Mutex<Outcome>,
}

impl PeerKeyVerifier {
    pub(crate) fn new(peer: Peer, trust: Arc<TrustStore>, own: Option<PublicKey>) -> Self {
        Self { peer, trust, own, outcome: Mutex::new(Outcome::Pending) }
    }

    /// Takes the decision (leaving `Pending`).
    pub(crate) fn take_outcome(&self) -> Outcome {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outcome> {
        // The outcome is written whole under the lock; a poisoned lock still holds a valid value.
        self.outcome.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The "certificate" step: exactly one entry, an Ed25519 SPKI.
    fn check_presented(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> Result<(), Error> {
        if !intermediates.is_empty() {
            // A raw public key has no chain; more entries means the peer is not speaking RFC 7250.
            return Err(Error::InvalidCertificate(CertificateError::BadEncoding));
        }
        peer_key(end_entity.as_ref()).map(|_| ()).map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))
    }

    /// The signature step, then the trust decision.
    fn check_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, Error> {
        if dss.scheme != SignatureScheme::ED25519 {
            return Err(Error::PeerIncompatible(PeerIncompatible::NoSignatureSchemesInCommon));
        }
        let spki = SubjectPublicKeyInfoDer::from(cert.as_ref());
        let valid = rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, &ED25519_ONLY)?;
        let key = peer_key(cert.as_ref()).map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self.own == Some(key) {
            *self.lock() = Outcome::Accepted(key);
            return Ok(valid);
        }
        match self.trust.authorize(&self.peer, &key) {
            Ok(_) => {
                *self.lock() = Outcome::Accepted(key);
                Ok(valid)
            }
            Err(reason) => {
                *self.lock() = Outcome::Refused { key, reason: Box::new(reason) };
                // Sent to the peer as `access_denied` (RFC 8446 §6.2): it learns nothing more.
                Err(Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
            }
        }
    }
}

/// TLS 1.2 is never negotiated (the configs offer TLS 1.3 only); refuse if asked.
fn no_tls12() -> Result<HandshakeSignatureValid, Error> {
    Err(Error::PeerIncompatible(PeerIncompatible::Tls12NotOffered))
}

impl ServerCertVerifier for PeerKeyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.check_presented(end_entity, intermediates).map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, Error> {
        no_tls12()
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, Error> {
        self.check_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        ED25519_ONLY.supported_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

impl ClientCertVerifier for PeerKeyVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No authorities: the client presents its one key.
        &[]
    }

    fn verify_client_cert(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>], _now: UnixTime) -> Result<ClientCertVerified, Error> {
        self.check_presented(end_entity, intermediates).map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, Error> {
        no_tls12()
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, Error> {
        self.check_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        ED25519_ONLY.supported_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}
