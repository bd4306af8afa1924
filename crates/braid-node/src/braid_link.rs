//! Braid's reliable transport: one frame per Braid message, over
//! connections authenticated and encrypted by Braid's Noise IK handshake
//! (issue 17 item 2) with the node's identity, unless the node runs
//! `InsecureNoAuth` (see [`crate::NodeAuth`] and [`security`]).

use std::net::SocketAddr;
use std::sync::Arc;

use braid_identity::{Identity, Peer, PublicKey, TrustStore};

use crate::channel::{braid_varint_len, ClosedSignal, Link};
use crate::node::Core;
use crate::wire::Encoded;
use crate::{Header, Transport};

pub(crate) struct BraidLink {
    conn: braid_net::Connection,
    /// The actuators know the connection while its channel holds it: a
    /// clone left there would keep the endpoint from going idle when the
    /// node closes (see the `Drop` below).
    actuators: Arc<crate::adapt::Actuators>,
    base: SocketAddr,
}

impl Drop for BraidLink {
    /// The channel is done with the connection, however it ended (closed
    /// gracefully or idle, where the closed signal is never awaited).
    fn drop(&mut self) {
        self.actuators.closed(self.base, &self.conn);
    }
}

impl Link for BraidLink {
    async fn send(&mut self, frame: &Encoded) -> Result<(), String> {
        self.conn.send_message(frame.frame()).await.map_err(|e| e.to_string())
    }
    async fn send_batch(&mut self, frames: &[&Encoded]) -> Result<(), String> {
        // Small frames are copied into the connection's packs anyway: hand
        // them over as slices (no `Bytes` per frame); large ones keep
        // their buffers.
        let sent = if frames.iter().all(|f| f.frame_len() <= braid_net::PACK_MAX_MESSAGE) {
            self.conn.send_copies(frames).await
        } else {
            let messages: Vec<bytes::Bytes> = frames.iter().map(|f| f.frame()).collect();
            self.conn.send_messages(messages).await
        };
        sent.map_err(|e| e.to_string())
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

/// Open a Braid connection to `addr`, the Braid port of the node at
/// `base`, with `transport` instead of the endpoint's configuration if
/// given. Whatever the peer sends on it is delivered like on an accepted
/// connection; its end is the channel's closed signal. The connection
/// gets the destination's adaptation settings (priority, controller,
/// scheduler) and is known to the actuators until it ends, which the rule
/// runtime hears as a `closed` event.
pub(crate) async fn connect<H: Header>(
    core: Arc<Core<H>>,
    endpoint: braid_net::Endpoint,
    base: SocketAddr,
    addr: SocketAddr,
    transport: Option<braid_net::TransportConfig>,
) -> Result<(BraidLink, ClosedSignal), String> {
    let conn = match transport {
        Some(t) => endpoint.connect_with(addr, t).await,
        None => endpoint.connect(addr).await,
    }
    .map_err(|e| e.to_string())?;
    core.actuators.opened(base, &conn);
    let reader = conn.clone();
    tokio::spawn(serve(core.clone(), reader));
    let watcher = conn.clone();
    let actuators = core.actuators.clone();
    let closed: ClosedSignal = Box::pin(async move {
        let reason = watcher.closed().await.to_string();
        core.actuators.closed(base, &watcher);
        core.rule_event(base, crate::rules::NodeEvent::Closed);
        reason
    });
    Ok((BraidLink { conn, actuators, base }, closed))
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

/// Most messages taken from a connection at once.
const RECV_BATCH: usize = 256;

async fn serve<H: Header>(core: Arc<Core<H>>, conn: braid_net::Connection) {
    let mut shutdown = core.shutdown.clone();
    let mut batch = braid_net::RecvBatch::new();
    let mut msgs = Vec::new();
    loop {
        batch.clear();
        tokio::select! {
            m = conn.recv_batch(&mut batch, RECV_BATCH) => match m {
                Ok(n) => {
                    core.counters.braid.on_received_many(n, batch.total_len());
                    let frames = (0..n).filter_map(|i| batch.bytes(i));
                    if core.receive_frames(frames, Transport::Braid, &mut msgs).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

/// Judges Braid peers: the node's own key (another process of the same
/// identity) is accepted, any other key goes to the trust store (known hosts
/// or TOFU), as the TCP side's TLS does.
#[derive(Debug)]
struct OwnKeyOrTrusted {
    own: PublicKey,
    trust: Arc<TrustStore>,
}

impl OwnKeyOrTrusted {
    fn judge(&self, peer: Peer, key: &PublicKey) -> Result<(), String> {
        if *key == self.own {
            return Ok(());
        }
        self.trust.authorize(&peer, key).map(|_| ()).map_err(|e| e.to_string())
    }
}

impl braid_proto::PeerVerifier for OwnKeyOrTrusted {
    fn verify(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.judge(Peer::addr(remote), key)
    }

    fn verify_client(&self, remote: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.judge(Peer::accepted(remote), key)
    }
}

/// The node's judgement of peers' keys for protocols that take a
/// [`braid_proto::PeerVerifier`] (Braid's Noise handshake; Exon's sessions
/// can share it).
pub(crate) fn peer_verifier(identity: &Identity, trust: &Arc<TrustStore>) -> Arc<dyn braid_proto::PeerVerifier> {
    Arc::new(OwnKeyOrTrusted { own: identity.public_key(), trust: trust.clone() })
}

/// The Braid endpoint's security for the node's identity and trust store;
/// insecure when there are none (`InsecureNoAuth`).
pub(crate) fn security(keys: Option<&(Identity, Arc<TrustStore>)>) -> braid_net::Security {
    match keys {
        Some((identity, trust)) => braid_net::Security::authenticated(identity.clone(), peer_verifier(identity, trust)),
        None => braid_net::Security::Insecure,
    }
}
