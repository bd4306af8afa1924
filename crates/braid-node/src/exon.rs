//! Exon (seed 003): exactly-once, unordered messages without
//! connections, one frame per Exon message, through `braid-exon-net`'s
//! [`ExonSocket`] at the node's base port + 2.
//!
//! Exon names peers by [`NodeId`], the node by addresses. With
//! authentication on (the default), a node's Exon ID is derived from its
//! Exon key and cannot be chosen: the first message to an Exon address
//! asks the node there for its key and the node key's endorsement of it
//! ([`ExonSocket::connect`]), the node's trust store judges the endorsing
//! key (known hosts or TOFU, as for TCP and Braid), the handshake proves
//! the Exon key, and the address's ID is cached. The receiver needs no reverse mapping: the sender's
//! address is in the Node header inside the frame, and Exon itself learns
//! the sender's socket address from its authenticated datagrams (for its
//! acknowledgements). See [`security`].
//!
//! Delivery notifications come from Exon's outcomes: `Delivered` when the
//! destination acknowledged the message (it was delivered there exactly
//! once), `Failed(ConnectionLost)` when it is in doubt (the destination
//! restarted before acknowledging: at most once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use braid_exon::{MessageId, NodeId};
use bytes::Bytes;
use braid_exon_net::{ExonSecurity, ExonSocket, Outcome, SocketConfig};

use crate::channel::Outgoing;
use crate::node::Core;
use crate::notify::Notifier;
use crate::stats::bump;
use crate::wire::Encoded;
use crate::{FailReason, Header, SendError, Transport};

/// The largest message Exon carries (its wire limit).
pub(crate) const EXON_MAX_MESSAGE: usize = 16 << 20;

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
    /// The Exon ID found at each address sent to.
    peers: Mutex<HashMap<SocketAddr, NodeId>>,
    slots: Arc<Mutex<HashMap<MessageId, Slot>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Exon security of a node: authenticated and encrypted sessions unless
/// the node runs `InsecureNoAuth` (then the bare protocol, its ID derived
/// from the socket's address at bind, see [`insecure_id`]).
///
/// The sessions use an Exon identity made for this node at bind and
/// endorsed by the node's key ([`ExonSecurity::Endorsed`]): Exon names a
/// node by its session key, and nodes that share a key file (every node of
/// one user on one machine, by default) must not share an Exon ID, or one
/// would take the other's messages for its own and a restart of either
/// would be taken for a restart of both, which breaks exactly-once. Peers
/// judge the endorsing key, against the same known hosts (or TOFU) as the
/// node's TCP and Braid transports: a peer found by discovering its
/// address as a server is judged by that address, one that starts a
/// handshake as an accepted client is.
pub(crate) fn security(keys: Option<&(braid_identity::Identity, Arc<braid_identity::TrustStore>)>) -> ExonSecurity {
    match keys {
        Some((identity, trust)) => ExonSecurity::Endorsed {
            node: identity.clone(),
            verifier: Arc::new(NodeTrust(crate::braid_link::peer_verifier(identity, trust))),
        },
        None => ExonSecurity::InsecureNoAuth { id: NodeId(0) },
    }
}

/// The node's judgement of keys (the one its Braid transport uses) as
/// Exon's verifier.
struct NodeTrust(Arc<dyn braid_proto::PeerVerifier>);

impl braid_exon::PeerVerifier for NodeTrust {
    fn verify(&self, addr: SocketAddr, key: &braid_exon::PublicKey) -> Result<(), String> {
        self.0.verify(addr, key)
    }

    fn verify_initiator(&self, addr: SocketAddr, key: &braid_exon::PublicKey) -> Result<(), String> {
        self.0.verify_client(addr, key)
    }
}

/// The node ID of the insecure Exon socket at `addr`, which both ends
/// compute without exchanging anything (there is no handshake to learn it
/// from): FNV-1a over the IP address's octets (4 or 16) followed by the
/// port, big-endian; 0 is mapped to 1. Anyone can claim it: that is what
/// `--insecure-no-auth` means. Collisions between two addresses a node
/// talks to would merge them into one peer; with 64-bit IDs and a handful
/// of peers the chance is negligible (≈ n²/2⁶⁵).
pub(crate) fn insecure_id(addr: SocketAddr) -> NodeId {
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

impl Exon {
    /// Bind the Exon socket at `addr` (the node's base port + 2).
    pub(crate) async fn bind(addr: SocketAddr, mut config: SocketConfig) -> std::io::Result<Exon> {
        let mut addr = addr;
        if let ExonSecurity::InsecureNoAuth { id } = &mut config.security {
            // The ID is the address's: find the port first when none is given.
            if addr.port() == 0 {
                addr = std::net::UdpSocket::bind(addr)?.local_addr()?;
            }
            *id = insecure_id(addr);
        }
        let socket = ExonSocket::bind(addr, config).await.map_err(|e| match e {
            braid_exon_net::Error::Io(e) => e,
            e => std::io::Error::other(e.to_string()),
        })?;
        Ok(Exon { socket: Arc::new(socket), peers: Mutex::new(HashMap::new()), slots: Arc::new(Mutex::new(HashMap::new())) })
    }

    /// The Exon ID of the node at `to`: cached, or learned from it (its
    /// key, judged by the socket's verifier).
    async fn peer_at(&self, to: SocketAddr) -> Result<NodeId, braid_exon_net::Error> {
        if let Some(id) = lock(&self.peers).get(&to) {
            return Ok(*id);
        }
        let id = if self.socket.public_key().is_some() {
            self.socket.connect(to).await?
        } else {
            let id = insecure_id(to);
            self.socket.add_insecure_peer(id, to)?;
            id
        };
        lock(&self.peers).insert(to, id);
        Ok(id)
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr()
    }

    /// Hand `outs` to Exon for `to` (an Exon socket address) in one
    /// `send_many` (the driver packs them into as few datagrams as fit);
    /// waits while the window to that peer is full. Their sizes were
    /// checked ([`check_size`]).
    pub(crate) async fn send_many<H: Header>(&self, core: &Core<H>, outs: Vec<Outgoing>, to: SocketAddr) -> Result<(), SendError> {
        let fail_all = |outs: Vec<Outgoing>, reason: FailReason| {
            for out in outs {
                bump(&core.counters.messages_failed);
                out.notifier.failed(reason.clone());
            }
        };
        let peer = match self.peer_at(to).await {
            Ok(peer) => peer,
            Err(braid_exon_net::Error::Closed) => return Err(SendError::Closed),
            Err(e) => {
                fail_all(outs, FailReason::Io(format!("Exon peer at {to}: {e}")));
                return Ok(());
            }
        };
        let (frames, notifiers): (Vec<Bytes>, Vec<Notifier>) = outs.into_iter().map(|o| (o.frame.frame(), o.notifier)).unzip();
        let sizes: Vec<usize> = frames.iter().map(Bytes::len).collect();
        let (accepted, error) = match self.socket.send_many(peer, frames).await {
            Ok(ids) => (ids, None),
            Err(braid_exon_net::Error::Closed) => return Err(SendError::Closed),
            Err(braid_exon_net::Error::SendMany { accepted, source }) => (accepted, Some(source.to_string())),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let mut notifiers = notifiers.into_iter();
        for (id, size) in accepted.into_iter().zip(sizes) {
            let Some(mut notifier) = notifiers.next() else { break };
            core.counters.exon.on_sent(size);
            notifier.sent();
            let mut slots = lock(&self.slots);
            match slots.remove(&id) {
                Some(Slot::Early(o)) => resolve(notifier, o, core),
                _ => {
                    slots.insert(id, Slot::Waiting(notifier));
                }
            }
        }
        if let Some(reason) = error {
            for notifier in notifiers {
                bump(&core.counters.messages_failed);
                notifier.failed(FailReason::Io(reason.clone()));
            }
        }
        Ok(())
    }

    /// Close the socket (unacknowledged messages are abandoned: their
    /// notifications report `Failed(NodeClosed)`).
    pub(crate) async fn close(&self) {
        self.socket.close().await;
        lock(&self.slots).clear();
    }
}

/// Refuse a frame above Exon's message limit, before anything is sent.
pub(crate) fn check_size(frame: &Encoded) -> Result<(), SendError> {
    let size = frame.frame_len();
    if size > EXON_MAX_MESSAGE {
        return Err(SendError::TooLarge { transport: Transport::Exon, size, max: EXON_MAX_MESSAGE });
    }
    Ok(())
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
    let (mut batch, mut msgs) = (Vec::new(), Vec::new());
    loop {
        batch.clear();
        tokio::select! {
            n = exon.socket.recv_many(&mut batch) => {
                if n == 0 {
                    return;
                }
                let bytes = batch.iter().map(|(_, f)| f.len()).sum();
                core.counters.exon.on_received_many(batch.len(), bytes);
                if core.receive_frames(batch.drain(..).map(|(_, f)| f), Transport::Exon, &mut msgs).await.is_err() {
                    return;
                }
            }
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
