//! Exon (seed 003): exactly-once, unordered messages without
//! connections, one frame per Exon message, through `braid-exon-net`'s
//! [`ExonSocket`] at the node's base port + 2.
//!
//! Exon names peers by [`NodeId`], the node by addresses. Each node's Exon
//! id is derived from the socket address of its Exon port
//! ([`exon_node_id`]: FNV-1a 64 of the IP's bytes and the port), so a
//! sender computes the destination's id from the destination address
//! alone and tells the socket where that id lives (`add_peer`). The
//! receiver needs no reverse mapping: the sender's address is in the Node
//! header inside the frame, and Exon itself learns the sender's socket
//! address from its datagrams (for its acknowledgements).
//!
//! Delivery notifications come from Exon's outcomes: `Delivered` when the
//! destination acknowledged the message (it was delivered there exactly
//! once), `Failed(ConnectionLost)` when it is in doubt (the destination
//! restarted before acknowledging: at most once).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use braid_exon::{MessageId, NodeId};
use braid_exon_net::{ExonSocket, Outcome, SocketConfig};

use crate::node::Core;
use crate::notify::Notifier;
use crate::stats::bump;
use crate::wire::Encoded;
use crate::{FailReason, Header, SendError, Transport};

/// The largest message Exon carries (its wire limit).
pub(crate) const EXON_MAX_MESSAGE: usize = 16 << 20;

/// The Exon node id of the Exon socket at `addr`: FNV-1a (64 bit) over
/// the IP address's octets (4 or 16) followed by the port, big-endian.
/// Stable across processes and machines, so both ends agree on it without
/// exchanging anything. Id 0 is avoided (mapped to 1).
///
/// Collisions between two addresses a node talks to would make Exon treat
/// them as one peer; with 64-bit ids and a handful of peers per node the
/// chance is negligible (birthday bound ≈ n²/2⁶⁵).
pub(crate) fn exon_node_id(addr: SocketAddr) -> NodeId {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    };
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.octets().into_iter().for_each(&mut eat),
        std::net::IpAddr::V6(ip) => ip.octets().into_iter().for_each(&mut eat),
    }
    addr.port().to_be_bytes().into_iter().for_each(&mut eat);
    NodeId(h.max(1))
}

/// What a message sent over Exon waits for.
enum Slot {
    /// Sent, its outcome not known yet.
    Waiting(Notifier),
    /// The outcome arrived before the sender registered the message.
    Early(Outcome),
}

/// The node's Exon socket and the messages waiting for their outcome.
pub(crate) struct Exon {
    socket: Arc<ExonSocket>,
    peers: Mutex<HashSet<SocketAddr>>,
    slots: Arc<Mutex<HashMap<MessageId, Slot>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Exon {
    /// Bind the Exon socket at `addr` (the node's base port + 2).
    pub(crate) async fn bind(addr: SocketAddr, config: SocketConfig) -> std::io::Result<Exon> {
        // The id depends on the port actually bound: bind a plain socket
        // first when the port is ephemeral, to learn it.
        let addr = if addr.port() == 0 {
            let probe = std::net::UdpSocket::bind(addr)?;
            let a = probe.local_addr()?;
            drop(probe);
            a
        } else {
            addr
        };
        let socket = ExonSocket::bind(addr, exon_node_id(addr), config).await.map_err(|e| match e {
            braid_exon_net::Error::Io(e) => e,
            e => std::io::Error::other(e.to_string()),
        })?;
        Ok(Exon { socket: Arc::new(socket), peers: Mutex::new(HashSet::new()), slots: Arc::new(Mutex::new(HashMap::new())) })
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr()
    }

    /// Hand `frame` to Exon for `to` (an Exon socket address); waits while
    /// the window to that peer is full.
    pub(crate) async fn send<H: Header>(
        &self,
        core: &Core<H>,
        frame: Encoded,
        to: SocketAddr,
        mut notifier: Notifier,
    ) -> Result<(), SendError> {
        let size = frame.frame_len();
        if size > EXON_MAX_MESSAGE {
            return Err(SendError::TooLarge { transport: Transport::Exon, size, max: EXON_MAX_MESSAGE });
        }
        let peer = exon_node_id(to);
        if lock(&self.peers).insert(to) && self.socket.add_peer(peer, to).is_err() {
            return Err(SendError::Closed);
        }
        match self.socket.send(peer, frame.frame()).await {
            Ok(id) => {
                core.counters.exon.on_sent(size);
                notifier.sent();
                let mut slots = lock(&self.slots);
                match slots.remove(&id) {
                    Some(Slot::Early(o)) => resolve(notifier, o, core),
                    _ => {
                        slots.insert(id, Slot::Waiting(notifier));
                    }
                }
                Ok(())
            }
            Err(braid_exon_net::Error::Closed) => Err(SendError::Closed),
            Err(e) => {
                bump(&core.counters.messages_failed);
                notifier.failed(FailReason::Io(e.to_string()));
                Ok(())
            }
        }
    }

    /// Close the socket (unacknowledged messages are abandoned: their
    /// notifications report `Failed(NodeClosed)`).
    pub(crate) async fn close(&self) {
        self.socket.close().await;
        lock(&self.slots).clear();
    }
}

fn resolve<H>(notifier: Notifier, outcome: Outcome, core: &Core<H>) {
    match outcome {
        Outcome::Delivered => notifier.delivered(),
        Outcome::InDoubt => {
            bump(&core.counters.messages_failed);
            notifier.failed(FailReason::ConnectionLost(
                "the Exon peer restarted before acknowledging: delivered at most once".into(),
            ));
        }
    }
}

/// Receive messages until the node shuts down.
pub(crate) async fn recv_loop<H: Header>(core: Arc<Core<H>>, exon: Arc<Exon>) {
    let mut shutdown = core.shutdown.clone();
    loop {
        tokio::select! {
            m = exon.socket.recv() => match m {
                Some((_from, frame)) => {
                    core.counters.exon.on_received(frame.len());
                    if core.receive_frame(frame, Transport::Exon).await.is_err() {
                        return;
                    }
                }
                None => return,
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

/// Turn Exon's outcomes into notifications until the node shuts down.
pub(crate) async fn outcome_loop<H: Header>(core: Arc<Core<H>>, exon: Arc<Exon>) {
    let mut shutdown = core.shutdown.clone();
    loop {
        tokio::select! {
            o = exon.socket.next_outcome() => match o {
                Some((id, outcome)) => {
                    let mut slots = lock(&exon.slots);
                    match slots.remove(&id) {
                        Some(Slot::Waiting(n)) => resolve(n, outcome, &core),
                        // The sender has not registered it yet.
                        _ => {
                            slots.insert(id, Slot::Early(outcome));
                        }
                    }
                }
                None => return,
            },
            _ = crate::node::stopped(&mut shutdown) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_stable_and_distinguish_ports_and_ips() {
        let a: SocketAddr = "192.0.2.1:4002".parse().unwrap();
        assert_eq!(exon_node_id(a), exon_node_id(a));
        assert_ne!(exon_node_id(a), exon_node_id("192.0.2.1:4003".parse().unwrap()));
        assert_ne!(exon_node_id(a), exon_node_id("192.0.2.2:4002".parse().unwrap()));
        assert_ne!(exon_node_id(a), exon_node_id("[::1]:4002".parse().unwrap()));
        // FNV-1a reference value, so the derivation never drifts silently
        // (two nodes built from different versions must agree).
        assert_eq!(exon_node_id("127.0.0.1:1".parse().unwrap()), NodeId(fnv(&[127, 0, 0, 1, 0, 1])));
    }

    fn fnv(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    }
}
