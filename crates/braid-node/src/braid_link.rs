//! Braid's reliable transport: one frame per Braid message.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::channel::{braid_varint_len, ClosedSignal, Link};
use crate::node::Core;
use crate::wire::Encoded;
use crate::{Header, Transport};

pub(crate) struct BraidLink {
    conn: braid_net::Connection,
}

impl Link for BraidLink {
    async fn send(&mut self, frame: &Encoded) -> Result<(), String> {
        self.conn.send_message(frame.frame()).await.map_err(|e| e.to_string())
    }
    fn acked(&self) -> Option<u64> {
        Some(self.conn.stats().stream_bytes_acked)
    }
    fn ack_probe(&self) -> Option<crate::channel::AckProbe> {
        let conn = self.conn.clone();
        Some(Box::new(move || Some(conn.stats().stream_bytes_acked)))
    }
    fn cost(&self, len: usize) -> u64 {
        // Braid's stream offsets count each message's varint length
        // prefix too.
        braid_varint_len(len) + len as u64
    }
    async fn close(self) -> bool {
        self.conn.close().await.is_ok()
    }
}

/// Open a Braid connection to `addr`, with `transport` instead of the
/// endpoint's configuration if given. Whatever the peer sends on it is
/// delivered like on an accepted connection; its end is the channel's
/// closed signal.
pub(crate) async fn connect<H: Header>(
    core: Arc<Core<H>>,
    endpoint: braid_net::Endpoint,
    addr: SocketAddr,
    transport: Option<braid_net::TransportConfig>,
) -> Result<(BraidLink, ClosedSignal), String> {
    let conn = match transport {
        Some(t) => endpoint.connect_with(addr, t).await,
        None => endpoint.connect(addr).await,
    }
    .map_err(|e| e.to_string())?;
    let reader = conn.clone();
    tokio::spawn(serve(core, reader));
    let watcher = conn.clone();
    let closed: ClosedSignal = Box::pin(async move { watcher.closed().await.to_string() });
    Ok((BraidLink { conn }, closed))
}

/// Accept connections until the node shuts down.
pub(crate) async fn accept_loop<H: Header>(core: Arc<Core<H>>, endpoint: braid_net::Endpoint) {
    let mut shutdown = core.shutdown.clone();
    loop {
        tokio::select! {
            c = endpoint.accept() => match c {
                Some(conn) => {
                    tracing::trace!(peer = %conn.remote_addr(), "braid connection accepted");
                    tokio::spawn(serve(core.clone(), conn));
                }
                None => return,
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

async fn serve<H: Header>(core: Arc<Core<H>>, conn: braid_net::Connection) {
    let mut shutdown = core.shutdown.clone();
    loop {
        tokio::select! {
            m = conn.recv_message() => match m {
                Ok(frame) => {
                    core.counters.braid.on_received(frame.len());
                    if core.receive_frame(frame, Transport::Braid).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}
