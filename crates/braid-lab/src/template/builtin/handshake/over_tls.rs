//! braid-tls's ends: the Node's TCP transport without the Node. A kernel
//! TCP listener whose connections each run the server handshake on a task
//! of its own, and a client connecting afresh every round; TLS 1.3 with
//! both ends' Ed25519 identities as raw public keys (RFC 7250), each end a
//! fresh identity trusting exactly the other's key (what `braid-tls` does
//! for every Node connection: no resumption, so every round is a full
//! handshake, plus the server's confirmation byte that tells the client its
//! key was accepted).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
use braid_tls::TlsSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::peers::{check_answer, check_request, Handlers, Protection, ANSWER, REQUEST};
use crate::template::{ResultExt, TemplateError};

/// braid-tls's server and client.
pub struct TlsPair {
    client: TlsSettings,
    addr: SocketAddr,
    accept: JoinHandle<()>,
    handlers: Arc<Handlers>,
    /// The cipher suite of the first connection (every later one must agree).
    cipher: OnceLock<String>,
}

impl TlsPair {
    /// Listen on 127.0.0.1 and start accepting; the client trusts the
    /// server's key at that address, the server the client's from anywhere.
    pub async fn start() -> Result<TlsPair, TemplateError> {
        let server_id = Identity::generate_os().context("tls server identity")?;
        let client_id = Identity::generate_os().context("tls client identity")?;
        let listener =
            TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).await.context("tls listen")?;
        let addr = listener.local_addr().context("tls listen address")?;
        let trust = |line: String, who: &str| -> Result<Arc<TrustStore>, TemplateError> {
            let hosts = KnownHosts::parse(&line, who).context("tls known hosts")?;
            Ok(Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts)))
        };
        let server = TlsSettings::new(&server_id, trust(format!("* {}", client_id.public_key()), "tls server")?)
            .context("tls server settings")?;
        let client = TlsSettings::new(&client_id, trust(format!("{addr} {}", server_id.public_key()), "tls client")?)
            .context("tls client settings")?;
        let handlers = Arc::new(Handlers::default());
        let accept = tokio::spawn(accept_loop(listener, server, handlers.clone()));
        Ok(TlsPair { client, addr, accept, handlers, cipher: OnceLock::new() })
    }

    /// Connect, handshake (until the server's confirmation), send the
    /// request, read the answer (the latency), close (close_notify, FIN).
    pub async fn round(&self) -> Result<Duration, TemplateError> {
        let start = Instant::now();
        let tcp = TcpStream::connect(self.addr).await.context("tls: tcp connect")?;
        tcp.set_nodelay(true).context("tls: TCP_NODELAY")?;
        let (mut tls, _server_key) = self.client.connect(tcp, self.addr).await.context("tls connect")?;
        tls.write_all(&[REQUEST]).await.context("tls send")?;
        tls.flush().await.context("tls send")?;
        let mut answer = [0u8; 1];
        tls.read_exact(&mut answer).await.context("tls receive")?;
        let latency = start.elapsed();
        check_answer(answer[0])?;
        let suite = tls.get_ref().1.negotiated_cipher_suite().context("tls: no cipher suite after the handshake")?;
        let suite = suite_name(suite.suite());
        let first = self.cipher.get_or_init(|| suite.clone());
        crate::ensure!(*first == suite, "tls: cipher {suite} after {first}");
        tls.shutdown().await.context("tls close")?;
        Ok(latency)
    }

    /// Server handlers still running.
    pub fn held(&self) -> Option<String> {
        let live = self.handlers.live();
        (live > 0).then(|| format!("{live} handler(s)"))
    }

    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    pub fn protection(&self) -> Protection {
        Protection {
            cipher: self.cipher.get().cloned(),
            auth: "TLS 1.3: both ends' Ed25519 keys (raw public keys), pinned".into(),
        }
    }

    /// Stop accepting (the listener closes with the task).
    pub fn close(self) {
        self.accept.abort();
    }
}

/// `TLS13_AES_256_GCM_SHA384` as Braid names its suites: `aes-256-gcm`.
fn suite_name(suite: rustls::CipherSuite) -> String {
    match suite {
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => "aes-256-gcm".into(),
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => "aes-128-gcm".into(),
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "chacha20-poly1305".into(),
        other => format!("{other:?}"),
    }
}

async fn accept_loop(listener: TcpListener, settings: TlsSettings, handlers: Arc<Handlers>) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            // Out of descriptors, or a connection reset before accept:
            // the client's round reports what it saw.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let settings = settings.clone();
        handlers.spawn(async move {
            tcp.set_nodelay(true).context("tls server: TCP_NODELAY")?;
            let (mut tls, _client_key) = settings.accept(tcp).await.context("tls server handshake")?;
            let mut request = [0u8; 1];
            tls.read_exact(&mut request).await.context("tls server receive")?;
            check_request(request[0])?;
            tls.write_all(&[ANSWER]).await.context("tls server send")?;
            tls.flush().await.context("tls server send")?;
            // Served: the client closes (close_notify, then FIN).
            let mut rest = [0u8; 1];
            match tls.read(&mut rest).await.context("tls server: waiting for the close")? {
                0 => Ok(()),
                _ => crate::fail!("tls: more bytes after the request"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_named_as_braid_names_its_own() {
        assert_eq!(suite_name(rustls::CipherSuite::TLS13_AES_256_GCM_SHA384), "aes-256-gcm");
        assert_eq!(suite_name(rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256), "chacha20-poly1305");
    }
}
