//! Which byte streams a tree transfer runs over, chosen from the security flags (one function per
//! side), and a connector that counts the bytes handed to the data streams for the progress
//! reports.
//!
//! Model: the errata make TCP transfers encrypted and authenticated like Braid's: TLS 1.3
//! (`braid_tls`), both ends proving their node identity (Ed25519 raw public keys) and judged by
//! the same known hosts and trust policy as Braid connections (`--identity`, `--known-hosts`,
//! `--tofu`). Plain TCP only with `--insecure-no-auth`, on both sides.
//!
//! The sender's connector is `braid_transfer::tls`'s; the receiver's proven key and the negotiated
//! cipher suite it records go into the summary.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use braid_identity::TrustPolicy;
use braid_tls::{TlsError, TlsSettings};
use braid_transfer::congestion::TcpCongestion;
use braid_transfer::tls::{TlsAcceptor, TlsConnector};
use braid_transfer::transport::{
    Acceptor, BoxFuture, ByteStream, Connection, Connector, StreamRole, TcpAcceptor, TcpConnector,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Protection, SecurityArgs};

/// What TLS 1.3 streams are reported as when the suite is not known.
const TLS: &str = "TLS 1.3";

/// The protection of a plain TCP transfer (no TLS).
fn plain(policy: TrustPolicy) -> Protection {
    Protection { encrypted: false, cipher: None, peer_key: None, trust: policy.as_str() }
}

/// This node's TLS settings from the security flags (identity created on first use).
fn tls_settings(security: &SecurityArgs) -> anyhow::Result<TlsSettings> {
    let home = |r: Result<std::path::PathBuf, braid_identity::IdentityError>| {
        r.map_err(|e| anyhow::anyhow!("{e} (see --identity, --known-hosts, or --insecure-no-auth)"))
    };
    let identity = match &security.identity {
        Some(p) => p.clone(),
        None => home(braid_identity::default_identity_path())?,
    };
    let known_hosts = match &security.known_hosts {
        Some(p) => p.clone(),
        None => home(braid_identity::default_known_hosts_path())?,
    };
    TlsSettings::load(&identity, &known_hosts, security.policy())
        .map_err(|e| anyhow::anyhow!("{e} (see --identity, --known-hosts, or --insecure-no-auth)"))
}

/// The sender's streams to `to` as the security flags choose: TLS 1.3 streams and the handle
/// that later tells what protected them, or plain TCP with `--insecure-no-auth`.
pub fn connector(
    security: &SecurityArgs,
    to: SocketAddr,
    congestion: TcpCongestion,
) -> anyhow::Result<(Arc<dyn Connector>, ProtectionHandle)> {
    let policy = security.policy();
    if security.insecure_no_auth {
        return Ok((Arc::new(TcpConnector { addr: to, congestion }), ProtectionHandle::fixed(plain(policy))));
    }
    let handle = ProtectionHandle::learned(Protection {
        encrypted: true,
        cipher: Some(TLS),
        peer_key: None,
        trust: policy.as_str(),
    });
    let mut inner = TlsConnector::new(to, tls_settings(security)?);
    inner.congestion = congestion;
    let connector = ReportingTlsConnector { inner, policy, seen: handle.slot() };
    Ok((Arc::new(connector), handle))
}

/// What protected a sender's streams: known up front, or learned from the first connection.
#[derive(Debug, Clone)]
pub struct ProtectionHandle {
    /// What is reported until the first connection tells more.
    fallback: Protection,
    seen: Arc<Mutex<Option<Protection>>>,
}

impl ProtectionHandle {
    /// Always `protection`.
    pub fn fixed(protection: Protection) -> Self {
        ProtectionHandle { fallback: protection, seen: Arc::default() }
    }

    /// `fallback` until a connector fills [`Self::slot`].
    pub fn learned(fallback: Protection) -> Self {
        ProtectionHandle { fallback, seen: Arc::default() }
    }

    /// Where a connector records the first connection's protection.
    pub fn slot(&self) -> Arc<Mutex<Option<Protection>>> {
        Arc::clone(&self.seen)
    }

    /// The protection as known now.
    pub fn get(&self) -> Protection {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone().unwrap_or_else(|| self.fallback.clone())
    }
}

/// `braid_transfer::tls::TlsConnector`, reporting what the receiver proved into a
/// [`ProtectionHandle`] slot.
struct ReportingTlsConnector {
    inner: TlsConnector,
    policy: TrustPolicy,
    seen: Arc<Mutex<Option<Protection>>>,
}

impl Connector for ReportingTlsConnector {
    fn connect(&self, role: StreamRole) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            let connection = self.inner.connect(role).await?;
            if let Some(proof) = self.inner.proven().get() {
                self.seen.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(|| Protection {
                    encrypted: true,
                    cipher: Some(proof.cipher.unwrap_or(TLS)),
                    peer_key: Some(proof.key.to_string()),
                    trust: self.policy.as_str(),
                });
            }
            Ok(connection)
        })
    }
}

/// The receiver's listener on `addr` as the security flags choose (TLS 1.3, or plain TCP with
/// `--insecure-no-auth`), and what protects its streams. An `io::Error` means `addr` could not
/// be bound (the caller may try another port); other failures (identity, known hosts) are
/// `anyhow` errors inside the `Ok`.
pub async fn acceptor(
    security: &SecurityArgs,
    addr: SocketAddr,
) -> io::Result<anyhow::Result<(Box<dyn Acceptor>, Protection)>> {
    if security.insecure_no_auth {
        let tcp = TcpAcceptor::bind(addr).await?;
        return Ok(Ok((Box::new(tcp), plain(security.policy()))));
    }
    let settings = match tls_settings(security) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let tls = TlsAcceptor::bind(addr, settings).await?;
    // A refused handshake (a stranger, a wrong key) never stops the receiver; say so on stderr.
    tls.set_refusal_hook(Arc::new(|e: &TlsError| tracing::warn!("refused a TLS connection: {e}")));
    // No cipher named: the receiver's streams may also arrive as (Noise-encrypted) Braid
    // connections, and a summary does not say which carried a transfer.
    let protection = Protection { encrypted: true, cipher: None, peer_key: None, trust: security.policy().as_str() };
    Ok(Ok((Box::new(tls), protection)))
}

/// Wraps a connector: bytes written to its data streams are added to a shared counter (payload
/// plus the engine's framing, a few dozen bytes per chunk).
pub struct CountingConnector {
    inner: Arc<dyn Connector>,
    written: Arc<AtomicU64>,
}

impl CountingConnector {
    /// Counts into `written`.
    pub fn new(inner: Arc<dyn Connector>, written: Arc<AtomicU64>) -> Self {
        CountingConnector { inner, written }
    }
}

impl Connector for CountingConnector {
    fn connect(&self, role: StreamRole) -> BoxFuture<'_, io::Result<Connection>> {
        Box::pin(async move {
            let connection = self.inner.connect(role).await?;
            if role == StreamRole::Control {
                return Ok(connection);
            }
            let stream = Counted { inner: connection.stream, written: Arc::clone(&self.written) };
            Ok(Connection { stream: Box::new(stream), ..connection })
        })
    }
}

/// A stream whose writes are counted.
struct Counted {
    inner: Box<dyn ByteStream>,
    written: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &poll {
            self.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn data_streams_are_counted_and_control_is_not() {
        let listener = TcpAcceptor::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let tcp: Arc<dyn Connector> = Arc::new(TcpConnector::new(listener.local_addr().unwrap()));
        let written = Arc::new(AtomicU64::new(0));
        let counting = CountingConnector::new(tcp, Arc::clone(&written));
        let (control, _c) = tokio::join!(counting.connect(StreamRole::Control), listener.accept());
        control.unwrap().stream.write_all(&[0u8; 500]).await.unwrap();
        let (data, server) = tokio::join!(counting.connect(StreamRole::Data), listener.accept());
        let mut data = data.unwrap();
        data.stream.write_all(&[7u8; 70_000]).await.unwrap();
        data.stream.flush().await.unwrap();
        let mut got = vec![0u8; 70_000];
        server.unwrap().stream.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 7));
        assert_eq!(written.load(Ordering::Relaxed), 70_000);
    }

    #[test]
    fn insecure_means_plain_tcp() {
        let insecure: SecurityArgs = crate::cli::parse_flags(&["--insecure-no-auth"]);
        let (_, protection) = connector(&insecure, "127.0.0.1:9".parse().unwrap(), TcpCongestion::default()).unwrap();
        let protection = protection.get();
        assert!(!protection.encrypted);
        assert_eq!(protection.trust, "insecure-no-auth");
    }

    #[tokio::test]
    async fn tls_streams_report_the_receivers_key() {
        let home = tempfile::tempdir().unwrap();
        let file = |n: &str| home.path().join(n).to_str().unwrap().to_string();
        let (server_id, client_id, hosts) = (file("server-id"), file("client-id"), file("hosts"));
        let server: SecurityArgs =
            crate::cli::parse_flags(&["--identity", &server_id, "--known-hosts", &hosts, "--tofu"]);
        let client: SecurityArgs =
            crate::cli::parse_flags(&["--identity", &client_id, "--known-hosts", &hosts, "--tofu"]);
        let (_listener, served) = acceptor(&server, "127.0.0.1:0".parse().unwrap()).await.unwrap().unwrap();
        assert!(served.encrypted);
        let listener = TlsAcceptor::bind("127.0.0.1:0".parse().unwrap(), tls_settings(&server).unwrap()).await.unwrap();
        let to = listener.local_addr().unwrap();
        let (connector, handle) = connector(&client, to, TcpCongestion::default()).unwrap();
        assert!(handle.get().peer_key.is_none());
        let (client_side, server_side) = tokio::join!(connector.connect(StreamRole::Data), listener.accept());
        let (mut c, mut s) = (client_side.unwrap(), server_side.unwrap());
        c.stream.write_all(b"hello").await.unwrap();
        c.stream.flush().await.unwrap();
        let mut got = [0u8; 5];
        s.stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        let p = handle.get();
        let server_key = tls_settings(&server).unwrap().public_key().to_string();
        assert_eq!(p.peer_key.as_deref(), Some(server_key.as_str()));
        assert!(p.cipher.is_some_and(|c| c.starts_with("TLS")), "{p:?}");
        assert_eq!(p.trust, "tofu");
    }
}
