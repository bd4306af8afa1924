//! quinn's ends: a server endpoint accepting connections, each served on a
//! task of its own, and one client endpoint opening a connection per round,
//! with Braid's transport settings ([`quic::transport_config`]).
//!
//! Every connection is a full TLS 1.3 handshake, as Braid's and braid-tls's
//! are: the stream template's quinn configuration ([`quic::configs`]) keeps
//! rustls's defaults, under which the server hands out session tickets and
//! the client resumes with them, skipping the certificate and its
//! signature from the second connection on. Here the server sends no
//! tickets and the client keeps no sessions. Everything else is quinn's
//! default: the server certificate is self-signed ECDSA P-256 (rcgen), the
//! client presents none, and the server does not ask for address
//! validation (no Retry; Braid always answers the first Initial with a
//! stateless cookie, one round trip more).
//!
//! The cipher is not observable through quinn's API; it follows from the
//! configuration: both ends use rustls with *ring*'s suites, the server
//! honours the client's order (rustls's default), and the client lists
//! TLS13_AES_256_GCM_SHA384 first.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid::TransportConfig;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::task::JoinHandle;

use super::peers::{check_answer, check_request, Handlers, Protection, ANSWER, REQUEST};
use crate::template::builtin::stream::quic::{self, SERVER_NAME};
use crate::template::{ResultExt, TemplateError};

/// The suite the configuration negotiates (see the module).
const CIPHER: &str = "aes-256-gcm";

/// quinn's server and client.
pub struct QuinnPair {
    server: quinn::Endpoint,
    client: quinn::Endpoint,
    addr: SocketAddr,
    accept: JoinHandle<()>,
    handlers: Arc<Handlers>,
}

/// Server and client configurations for full handshakes only.
fn configs(braid: &TransportConfig) -> Result<(quinn::ServerConfig, quinn::ClientConfig), TemplateError> {
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .context("generating a self-signed certificate")?;
    let cert_der = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let transport = Arc::new(quic::transport_config(braid)?);

    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("quinn server TLS versions")?
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key)
        .context("quinn server certificate")?;
    server_tls.send_tls13_tickets = 0;
    server_tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    let server_crypto = QuicServerConfig::try_from(server_tls).context("quinn server TLS configuration")?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
    server.transport_config(Arc::clone(&transport));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).context("trusting the self-signed certificate")?;
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("quinn client TLS versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.resumption = rustls::client::Resumption::disabled();
    let client_crypto = QuicClientConfig::try_from(client_tls).context("quinn client TLS configuration")?;
    let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
    client.transport_config(transport);
    Ok((server, client))
}

impl QuinnPair {
    /// Bind both ends on 127.0.0.1 and start accepting.
    pub fn start(braid: &TransportConfig) -> Result<QuinnPair, TemplateError> {
        let (server_cfg, client_cfg) = configs(braid)?;
        let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let server = quinn::Endpoint::server(server_cfg, local).context("quinn server socket")?;
        let mut client = quinn::Endpoint::client(local).context("quinn client socket")?;
        client.set_default_client_config(client_cfg);
        let addr = server.local_addr().context("quinn server address")?;
        let handlers = Arc::new(Handlers::default());
        let accept = tokio::spawn(accept_loop(server.clone(), handlers.clone()));
        Ok(QuinnPair { server, client, addr, accept, handlers })
    }

    /// Connect, send the request on a bidirectional stream, read the
    /// answer (the latency), close.
    pub async fn round(&self) -> Result<Duration, TemplateError> {
        let start = Instant::now();
        let conn = self.client.connect(self.addr, SERVER_NAME).context("quinn connect")?.await.context("quinn connect")?;
        let (mut send, mut recv) = conn.open_bi().await.context("quinn open stream")?;
        send.write_all(&[REQUEST]).await.context("quinn send")?;
        let mut answer = [0u8; 1];
        recv.read_exact(&mut answer).await.context("quinn receive")?;
        let latency = start.elapsed();
        check_answer(answer[0])?;
        conn.close(0u32.into(), b"done");
        Ok(latency)
    }

    /// Connections either endpoint still holds, or handlers still running.
    pub fn held(&self) -> Option<String> {
        let (server, client) = (self.server.open_connections(), self.client.open_connections());
        let live = self.handlers.live();
        (server + client > 0 || live > 0).then(|| {
            format!("{server} connection(s) on the server endpoint, {client} on the client's, {live} handler(s)")
        })
    }

    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    pub fn protection(&self) -> Protection {
        Protection {
            cipher: Some(CIPHER.into()),
            auth: "TLS 1.3: the server's self-signed certificate (ECDSA P-256); the client unauthenticated".into(),
        }
    }

    /// Stop accepting and close both endpoints.
    pub async fn close(self) {
        self.accept.abort();
        self.client.close(0u32.into(), b"done");
        self.server.close(0u32.into(), b"done");
        let idle = async {
            self.client.wait_idle().await;
            self.server.wait_idle().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), idle).await;
    }
}

async fn accept_loop(server: quinn::Endpoint, handlers: Arc<Handlers>) {
    while let Some(incoming) = server.accept().await {
        handlers.spawn(async move {
            let conn = incoming.await.context("quinn server handshake")?;
            let (mut send, mut recv) = conn.accept_bi().await.context("quinn accept stream")?;
            let mut request = [0u8; 1];
            recv.read_exact(&mut request).await.context("quinn server receive")?;
            check_request(request[0])?;
            send.write_all(&[ANSWER]).await.context("quinn server send")?;
            let _ = send.finish();
            // Served: the client closes.
            conn.closed().await;
            Ok(())
        });
    }
}
