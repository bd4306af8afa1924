//! Plain kernel TCP's ends, the floor every encrypted peer is measured
//! against: a listener whose connections are each served on a task of
//! their own, and a client connecting afresh every round (`TCP_NODELAY` on
//! both, as the Node's TCP transport sets it). The kernel completes the
//! three-way handshake before `accept` returns; the request and answer
//! then prove both ends hold the connection.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::peers::{check_answer, check_request, Handlers, Protection, ANSWER, REQUEST};
use crate::template::{ResultExt, TemplateError};

/// Kernel TCP's server and client.
pub struct TcpPair {
    addr: SocketAddr,
    accept: JoinHandle<()>,
    handlers: Arc<Handlers>,
}

impl TcpPair {
    /// Listen on 127.0.0.1 and start accepting.
    pub async fn start() -> Result<TcpPair, TemplateError> {
        let listener =
            TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).await.context("tcp listen")?;
        let addr = listener.local_addr().context("tcp listen address")?;
        let handlers = Arc::new(Handlers::default());
        let accept = tokio::spawn(accept_loop(listener, handlers.clone()));
        Ok(TcpPair { addr, accept, handlers })
    }

    /// Connect, send the request, read the answer (the latency), close.
    pub async fn round(&self) -> Result<Duration, TemplateError> {
        let start = Instant::now();
        let mut tcp = TcpStream::connect(self.addr).await.context("tcp connect")?;
        tcp.set_nodelay(true).context("tcp: TCP_NODELAY")?;
        tcp.write_all(&[REQUEST]).await.context("tcp send")?;
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).await.context("tcp receive")?;
        let latency = start.elapsed();
        check_answer(answer[0])?;
        tcp.shutdown().await.context("tcp close")?;
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
        Protection { cipher: None, auth: "none".into() }
    }

    /// Stop accepting (the listener closes with the task).
    pub fn close(self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, handlers: Arc<Handlers>) {
    loop {
        let mut tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            // Out of descriptors, or a connection reset before accept:
            // the client's round reports what it saw.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        handlers.spawn(async move {
            tcp.set_nodelay(true).context("tcp server: TCP_NODELAY")?;
            let mut request = [0u8; 1];
            tcp.read_exact(&mut request).await.context("tcp server receive")?;
            check_request(request[0])?;
            tcp.write_all(&[ANSWER]).await.context("tcp server send")?;
            // Served: the client closes.
            let mut rest = [0u8; 1];
            match tcp.read(&mut rest).await.context("tcp server: waiting for the close")? {
                0 => Ok(()),
                _ => crate::fail!("tcp: more bytes after the request"),
            }
        });
    }
}
