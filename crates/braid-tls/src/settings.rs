//! A node's TLS 1.3 settings and the two handshakes: [`TlsSettings::connect`]
//! (client) and [`TlsSettings::accept`] (server), both mutually
//! authenticated with Ed25519 raw public keys and the node's trust store.
//!
//! Each handshake gets its own rustls configuration, because the verifier
//! must know the peer's address to ask the known hosts about it. Session
//! resumption and 0-RTT are off: a resumed session would skip the key check,
//! so a peer removed from known hosts (or a stolen ticket replayed from
//! another address) could still get in; every connection proves its key and
//! is authorized afresh. The cost is one full handshake (an X25519 exchange
//! and two Ed25519 signatures each way) per connection.
//!
//! Confirmation byte: in TLS 1.3 the client finishes its side of the
//! handshake before the server has judged the client's key (RFC 8446 §2:
//! client authentication comes in the client's last flight), so a client
//! could send data, see the kernel acknowledge it, and only then learn the
//! server refused it. Braid closes that gap: once the server has accepted
//! the client's key it sends one application-data byte, [`ACCEPTED`], and
//! `connect` returns only after reading it. So `connect` returning `Ok`
//! means both sides accepted each other, and a refusal is an error of
//! `connect` ([`TlsError::RefusedByPeer`]), at the cost of half a round trip
//! before the client's first byte.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use braid_identity::{Identity, Peer, PublicKey, TrustPolicy, TrustStore};
use rustls::client::{AlwaysResolvesClientRawPublicKeys, Resumption};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::server::{AlwaysResolvesServerRawPublicKeys, NoServerSessionStorage};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{client, server};

use crate::error::{unknown_peer, TlsError};
use crate::rpk::certified_key;
use crate::verify::{Outcome, PeerKeyVerifier};

/// The byte a server sends once it has accepted the client's key (see the
/// module's "Confirmation byte").
pub const ACCEPTED: u8 = 0x42;

/// ring's TLS provider with AES-128-GCM preferred to AES-256-GCM (rustls lists AES-256 first):
/// the choice of QUIC's default configuration and of Braid's own packet protection, 128-bit
/// security, and 10 AES rounds instead of 14 on every byte a transfer moves (this machine:
/// 4.9 against 4.3 GB/s per core, `openssl speed -evp`; a few percent of a file transfer's CPU,
/// whose receiver also hashes and writes every byte). ChaCha20-Poly1305 keeps its place.
fn provider() -> CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    let rank = |s: &rustls::SupportedCipherSuite| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        _ => 2,
    };
    // A stable sort: everything else keeps rustls's order.
    provider.cipher_suites.sort_by_key(rank);
    provider
}

/// A node's identity and trust store, ready to run TLS 1.3 handshakes.
///
/// Cheap to clone (shared parts are behind `Arc`); one value serves all of
/// a node's connections, client and server side.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    public_key: PublicKey,
    certified: Arc<CertifiedKey>,
    trust: Arc<TrustStore>,
    provider: Arc<CryptoProvider>,
    handshake_timeout: Duration,
    trust_own_key: bool,
}

impl TlsSettings {
    /// How long a handshake may take before it is abandoned, unless set with
    /// [`Self::with_handshake_timeout`]: long enough for a lossy wide-area
    /// path (several RTOs of a few hundred ms), short enough that a silent
    /// peer does not hold an accept slot for minutes.
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

    /// Settings presenting `identity` and judging peers with `trust`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
    /// use braid_tls::TlsSettings;
    ///
    /// let id = Identity::from_seed(&[1; 32]);
    /// let trust = Arc::new(TrustStore::new(TrustPolicy::KnownHosts, KnownHosts::new()));
    /// let tls = TlsSettings::new(&id, trust)?;
    /// assert_eq!(tls.public_key(), id.public_key());
    /// # Ok::<(), braid_tls::TlsError>(())
    /// ```
    pub fn new(identity: &Identity, trust: Arc<TrustStore>) -> Result<Self, TlsError> {
        Ok(Self {
            public_key: identity.public_key(),
            certified: certified_key(identity)?,
            trust,
            provider: Arc::new(provider()),
            handshake_timeout: Self::DEFAULT_HANDSHAKE_TIMEOUT,
            trust_own_key: false,
        })
    }

    /// Settings from an identity file (created with mode 0600 if missing) and
    /// a known-hosts file (missing: empty), as a node loads them.
    pub fn load(identity: &Path, known_hosts: &Path, policy: TrustPolicy) -> Result<Self, TlsError> {
        let id = Identity::load_or_create(identity)
            .map_err(|e| TlsError::Load { reason: format!("identity {}: {e}", identity.display()) })?;
        let trust = TrustStore::open(policy, known_hosts).map_err(|e| TlsError::Load { reason: e.to_string() })?;
        Self::new(&id, Arc::new(trust))
    }

    /// [`Self::load`] with the default files under `$BRAID_HOME` (see
    /// `braid_identity::braid_home`).
    pub fn load_default(policy: TrustPolicy) -> Result<Self, TlsError> {
        let home = |r: Result<std::path::PathBuf, braid_identity::IdentityError>| {
            r.map_err(|e| TlsError::Load { reason: e.to_string() })
        };
        let identity = home(braid_identity::default_identity_path())?;
        let known_hosts = home(braid_identity::default_known_hosts_path())?;
        Self::load(&identity, &known_hosts, policy)
    }

    /// Sets the handshake timeout (zero is raised to 1 ms so a handshake can
    /// still be attempted).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Also accepts, without asking the trust store, a peer that proves it
    /// holds our own key: another process of the same identity (nodes that
    /// share one key file, as two nodes of one program do). Anyone who can
    /// prove that key has our secret and could impersonate us anyway, so
    /// this admits no one new. Off unless set.
    pub fn trusting_own_key(mut self) -> Self {
        self.trust_own_key = true;
        self
    }

    /// Our public key (what peers must have in their known hosts).
    pub fn public_key(&self) -> PublicKey {
        self.public_key
    }

    /// The trust store peers are judged by.
    pub fn trust(&self) -> &Arc<TrustStore> {
        &self.trust
    }

    /// The handshake timeout.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// Runs the client handshake over `io` (a connected stream) with the peer
    /// at `remote`; returns the encrypted stream and the server's proven,
    /// trusted key, once the server has confirmed it accepted ours.
    pub async fn connect<IO>(&self, io: IO, remote: SocketAddr) -> Result<(client::TlsStream<IO>, PublicKey), TlsError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        self.connect_peer(io, Peer::addr(remote)).await
    }

    /// [`Self::connect`] for a peer known by name (and address): known-hosts
    /// lines for either match, and TOFU records the name.
    pub async fn connect_peer<IO>(&self, io: IO, peer: Peer) -> Result<(client::TlsStream<IO>, PublicKey), TlsError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let verifier = Arc::new(PeerKeyVerifier::new(peer.clone(), self.trust.clone(), self.own()));
        let mut config = ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config_error)?
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_client_cert_resolver(Arc::new(AlwaysResolvesClientRawPublicKeys::new(self.certified.clone())));
        config.resumption = Resumption::disabled();
        config.enable_early_data = false;
        // Not sent (an IP address is never put in SNI) and not checked: the key is the identity.
        let name = ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into());
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let handshake = async move {
            let mut stream = connector.connect(name, io).await?;
            let mut confirmation = [0u8; 1];
            stream.read_exact(&mut confirmation).await?;
            if confirmation[0] != ACCEPTED {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the server's first byte is {:#04x}, not Braid's confirmation {ACCEPTED:#04x}", confirmation[0]),
                ));
            }
            Ok(stream)
        };
        let result = tokio::time::timeout(self.handshake_timeout, handshake).await;
        finish(result, &verifier, peer, self.handshake_timeout)
    }

    /// Runs the server handshake on an accepted TCP connection; returns the
    /// encrypted stream and the client's proven, trusted key. A client that
    /// presents no key is refused (`certificate_required`).
    pub async fn accept(&self, tcp: TcpStream) -> Result<(server::TlsStream<TcpStream>, PublicKey), TlsError> {
        let remote = tcp.peer_addr().map_err(|source| TlsError::Io { peer: unknown_peer(None), source })?;
        self.accept_from(tcp, remote).await
    }

    /// [`Self::accept`] over any stream, for a client at `remote`.
    pub async fn accept_from<IO>(&self, io: IO, remote: SocketAddr) -> Result<(server::TlsStream<IO>, PublicKey), TlsError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let peer = Peer::accepted(remote);
        let verifier = Arc::new(PeerKeyVerifier::new(peer.clone(), self.trust.clone(), self.own()));
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config_error)?
            .with_client_cert_verifier(verifier.clone())
            .with_cert_resolver(Arc::new(AlwaysResolvesServerRawPublicKeys::new(self.certified.clone())));
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        config.max_early_data_size = 0;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let handshake = async move {
            let mut stream = acceptor.accept(io).await?;
            stream.write_all(&[ACCEPTED]).await?;
            stream.flush().await?;
            Ok(stream)
        };
        let result = tokio::time::timeout(self.handshake_timeout, handshake).await;
        finish(result, &verifier, peer, self.handshake_timeout)
    }
}

impl TlsSettings {
    fn own(&self) -> Option<PublicKey> {
        self.trust_own_key.then_some(self.public_key)
    }
}

fn config_error(e: rustls::Error) -> TlsError {
    TlsError::Config { reason: e.to_string() }
}

/// The handshake's result in our terms: the stream and the accepted key, or
/// the refusal the verifier recorded, or what rustls or the socket reported.
fn finish<S>(
    result: Result<std::io::Result<S>, tokio::time::error::Elapsed>,
    verifier: &PeerKeyVerifier,
    peer: Peer,
    timeout: Duration,
) -> Result<(S, PublicKey), TlsError> {
    let outcome = verifier.take_outcome();
    let stream = match result {
        Err(_) => return Err(TlsError::Timeout { peer, after: timeout }),
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return Err(match outcome {
                Outcome::Refused { key, reason } => TlsError::Untrusted { peer, key, reason },
                _ => from_io(e, peer),
            })
        }
    };
    match outcome {
        Outcome::Accepted(key) => Ok((stream, key)),
        Outcome::Refused { key, reason } => Err(TlsError::Untrusted { peer, key, reason }),
        // rustls verifies the peer's key in every TLS 1.3 handshake our configs allow (no
        // resumption, client auth mandatory); reaching here would mean it did not.
        Outcome::Pending => Err(TlsError::Handshake { peer, reason: "the peer's key was never verified".into() }),
    }
}

/// An I/O error from tokio-rustls: a rustls error inside (alert received,
/// protocol failure) or a plain socket error.
fn from_io(e: std::io::Error, peer: Peer) -> TlsError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(alert)) => TlsError::RefusedByPeer { peer, alert: alert_name(*alert) },
        Some(other) => TlsError::Handshake { peer, reason: other.to_string() },
        None if e.kind() == std::io::ErrorKind::InvalidData => TlsError::Handshake { peer, reason: e.to_string() },
        None => TlsError::Io { peer, source: e },
    }
}

/// An alert as RFC 8446 §6 names it (`access_denied`), from rustls's
/// `AccessDenied`.
fn alert_name(alert: rustls::AlertDescription) -> String {
    let camel = format!("{alert:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_names_follow_the_rfc() {
        assert_eq!(alert_name(rustls::AlertDescription::AccessDenied), "access_denied");
        assert_eq!(alert_name(rustls::AlertDescription::CertificateRequired), "certificate_required");
    }
}
