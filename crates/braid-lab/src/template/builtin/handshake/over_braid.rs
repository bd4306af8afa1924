//! Braid's ends: a server endpoint accepting connections, each served on a
//! task of its own, and one client endpoint opening a connection per round
//! (a program connecting to many peers keeps one endpoint, as with quinn).
//! Encrypted, each end has a fresh identity pinned to the other's (Noise
//! IK, the default of every Braid command); otherwise both run
//! `--insecure-no-auth`.
//!
//! The server's state per connection is visible in its endpoint counters
//! (`connections_open`, closing periods included): after the run they must
//! be back to 0 on both ends.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use braid::{Endpoint, EndpointConfig};
use bytes::Bytes;
use tokio::task::JoinHandle;

use super::peers::{check_answer, check_request, Handlers, Protection, ANSWER, REQUEST};
use crate::template::{ResultExt, TemplateError};

/// Braid's server and client.
pub struct BraidPair {
    server: Endpoint,
    client: Endpoint,
    addr: SocketAddr,
    accept: JoinHandle<()>,
    handlers: Arc<Handlers>,
    encrypted: bool,
    /// The cipher of the first connection (every later one must agree).
    cipher: OnceLock<Option<&'static str>>,
}

impl BraidPair {
    /// Bind both ends on 127.0.0.1 and start accepting.
    pub fn start(cfg: &EndpointConfig, encrypted: bool) -> Result<BraidPair, TemplateError> {
        let mut server_cfg = EndpointConfig { accept_incoming: true, ..cfg.clone() };
        let mut client_cfg = EndpointConfig { accept_incoming: false, ..cfg.clone() };
        if encrypted {
            let (server, client) = braid_net::pinned_pair().context("braid identities")?;
            server_cfg.security = server;
            client_cfg.security = client;
        } else {
            server_cfg.security = braid_net::Security::Insecure;
            client_cfg.security = braid_net::Security::Insecure;
        }
        let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let server = Endpoint::bind_with(local, server_cfg).context("braid server socket")?;
        let client = Endpoint::bind_with(local, client_cfg).context("braid client socket")?;
        let handlers = Arc::new(Handlers::default());
        let accept = tokio::spawn(accept_loop(server.clone(), handlers.clone()));
        let addr = server.local_addr();
        Ok(BraidPair { server, client, addr, accept, handlers, encrypted, cipher: OnceLock::new() })
    }

    /// Connect, send the request, read the answer (the latency), close.
    pub async fn round(&self) -> Result<Duration, TemplateError> {
        let start = Instant::now();
        let conn = self.client.connect(self.addr).await.context("braid connect")?;
        conn.send_message(Bytes::from_static(&[REQUEST])).await.context("braid send")?;
        let answer = conn.recv_message().await.context("braid receive")?;
        let latency = start.elapsed();
        crate::ensure!(answer.len() == 1, "braid: an answer of {} bytes, not 1", answer.len());
        check_answer(answer[0])?;
        let cipher = conn.cipher_suite().map(|c| c.name());
        crate::ensure!(
            cipher.is_some() == self.encrypted,
            "braid: a connection {} encrypted, the endpoints {}",
            if cipher.is_some() { "is" } else { "is not" },
            if self.encrypted { "authenticate" } else { "run --insecure-no-auth" }
        );
        let first = *self.cipher.get_or_init(|| cipher);
        crate::ensure!(first == cipher, "braid: cipher {cipher:?} after {first:?}");
        // Returns once the request is acknowledged (the answer carried
        // that); the closing period runs on in the background.
        conn.close().await.context("braid close")?;
        Ok(latency)
    }

    /// Connections either endpoint still holds, or handlers still running.
    pub fn held(&self) -> Option<String> {
        let (server, client) = (self.server.stats().connections_open, self.client.stats().connections_open);
        let live = self.handlers.live();
        (server + client > 0 || live > 0).then(|| {
            format!("{server} connection(s) on the server endpoint, {client} on the client's, {live} handler(s)")
        })
    }

    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    pub fn protection(&self) -> Protection {
        match self.cipher.get().copied().flatten() {
            Some(c) => Protection {
                cipher: Some(c.to_string()),
                auth: "Noise IK: both ends' static keys (Ed25519 identities, X25519 form), pinned".into(),
            },
            None => Protection { cipher: None, auth: "none (--insecure-no-auth)".into() },
        }
    }

    /// Stop accepting and close both endpoints.
    pub async fn close(self) {
        self.accept.abort();
        self.client.close();
        self.server.close();
        let idle = async {
            self.client.wait_idle().await;
            self.server.wait_idle().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), idle).await;
    }
}

async fn accept_loop(server: Endpoint, handlers: Arc<Handlers>) {
    while let Some(conn) = server.accept().await {
        handlers.spawn(async move {
            let request = conn.recv_message().await.context("braid server receive")?;
            crate::ensure!(request.len() == 1, "braid: a request of {} bytes, not 1", request.len());
            check_request(request[0])?;
            conn.send_message(Bytes::from_static(&[ANSWER])).await.context("braid server send")?;
            // Served: the client closes. Anything more it sent would be a
            // bug of the round.
            match conn.recv_message().await {
                Ok(m) => crate::fail!("braid: {} more bytes after the request", m.len()),
                Err(_) => Ok(()),
            }
        });
    }
}
