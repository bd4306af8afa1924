//! Authenticated, encrypted Exon: per-peer sessions in WireGuard's style
//! (Donenfeld, *WireGuard: Next Generation Kernel Network Tunnel*, NDSS
//! 2017, §5), over the Noise IK handshake ([`handshake`]) and AEAD
//! transport keys ([`keys`]), both built on `braid_crypto` (shared with
//! braid-proto).
//!
//! The model: a node is its static key pair ([`Identity`]); its [`NodeId`]
//! is derived from the public key, so it cannot be chosen and travels in no
//! header. A handshake proves both keys and gives each side a *session*,
//! named at each end by a random 32-bit index the other end puts in every
//! packet it sends: a packet finds its session by that index, never by its
//! source address, so a node keeps its identity when its address changes,
//! and an authenticated packet from a new address moves the peer there
//! (WireGuard's roaming). Every datagram after the handshake is sealed:
//! every envelope, token, acknowledgement, NACK and slot request is
//! authenticated, and a packet that fails changes no state at all (not even
//! the replay window). Replays are rejected by an RFC 6479 window.
//!
//! Memory under spoofing: nothing is kept for a peer before its handshake
//! message verified and the [`PeerVerifier`] accepted its key; the
//! responder answers the first message at once (no half-open state); a
//! cheap keyed-hash check (`mac1`, WireGuard §5.4.4) drops random
//! handshake packets before any Diffie-Hellman; under load, a handshake
//! packet must also prove its sender receives at its source address
//! (`mac2` from a cookie reply, WireGuard §5.4.7, [`cookie`]), so a flood
//! of initiations from spoofed addresses costs no Diffie-Hellman beyond
//! [`SessionConfig::handshake_rate`], and one that did prove it still
//! gets at most [`SessionConfig::per_source_rate`] a second per source
//! address ([`ratelimit`], WireGuard's rate limiter); at most
//! [`SessionConfig::max_peers`] peers are kept, with at most four sessions
//! each (previous, current, two awaiting confirmation).
//!
//! Re-keying: the initiator of a session starts a new handshake after
//! [`SessionConfig::rekey_after`] or [`SessionConfig::rekey_after_packets`];
//! the old session stays valid for receiving until it is
//! [`SessionConfig::reject_after`] old, so packets in flight are not lost.
//! A side whose retransmission timer fires without anything authenticated
//! heard since (see [`SessionConfig::silence`]) starts a new handshake
//! too: that is how a peer that restarted (and lost its sessions) is found
//! again.

pub(crate) mod cookie;
pub mod endorse;
pub mod handshake;
pub mod keys;
pub(crate) mod ratelimit;
pub(crate) mod sessions;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use braid_identity::{Identity, PublicKey, KEY_LEN};
pub use endorse::{Endorsement, EndorsementError, ENDORSEMENT_FIELD_LEN};
pub use braid_crypto::NoiseError;
pub use handshake::HandshakeError;
pub use keys::{Cipher, ReplayWindow, REPLAY_WINDOW, TAG_LEN};
pub(crate) use sessions::Sessions;

use crate::NodeId;

/// First byte of a handshake initiation.
pub const T_INIT: u8 = 0xE2;
/// First byte of a handshake response.
pub const T_RESP: u8 = 0xE3;
/// First byte of a sealed datagram.
pub const T_DATA: u8 = 0xE4;
/// First byte of a key request (who is at this address?).
pub const T_KEYREQ: u8 = 0xE5;
/// First byte of a key reply (the responder's Ed25519 key).
pub const T_KEYREPLY: u8 = 0xE6;
/// First byte of an insecure node's ID reply.
pub const T_IDREPLY: u8 = 0xE7;
/// First byte of a cookie reply (WireGuard §5.4.7): a handshake packet
/// without a valid mac2 reached a node under load.
pub const T_COOKIE: u8 = 0xE8;
/// Header of a sealed datagram: type, receiver index, counter.
pub const DATA_HEADER_LEN: usize = 1 + 4 + 8;
/// Bytes a sealed datagram adds around its frames.
pub const SEALED_OVERHEAD: usize = DATA_HEADER_LEN + TAG_LEN;
/// Bytes of the keyed hash that guards handshake packets.
pub const MAC_LEN: usize = 16;
/// Length of an initiation: type, sender index, Noise message 1, mac1,
/// mac2 (zero without a fresh cookie from the receiver).
pub const INIT_LEN: usize = 1 + 4 + handshake::MSG1_LEN + 2 * MAC_LEN;
/// Length of a response: type, sender and receiver index, message 2, mac1,
/// mac2.
pub const RESP_LEN: usize = 1 + 4 + 4 + handshake::MSG2_LEN + 2 * MAC_LEN;
/// Length of a cookie reply: type, receiver index, 24-byte nonce, the
/// 16-byte cookie encrypted, its 16-byte tag.
pub const COOKIE_REPLY_LEN: usize =
    1 + 4 + cookie::NONCE_LEN + cookie::COOKIE_LEN + cookie::AEAD_TAG_LEN;
/// Length of a key reply: type, the node's Exon key, its endorsement field.
pub const KEYREPLY_LEN: usize = 1 + KEY_LEN + ENDORSEMENT_FIELD_LEN;
/// Length of a key request: padded to the reply's length, so that a
/// spoofed request gets no amplification.
pub const KEYREQ_LEN: usize = KEYREPLY_LEN;

/// Decides whether a peer that proved it holds `key` may talk to this node
/// (known hosts, trust on first use). Called once per handshake, before any
/// state is kept for the peer, and for a key learned by
/// [`ExonNode::discover`](crate::ExonNode::discover) before it is used.
///
/// `key` is the key to judge: the endorsing node key when the peer
/// presented a valid [`Endorsement`] of its Exon key (checked before the
/// verifier is asked), else its Exon key itself.
pub trait PeerVerifier: Send + Sync {
    /// Accept or refuse the peer at `addr` with `key`, learned by
    /// discovering `addr`; a refusal says why.
    fn verify(&self, addr: SocketAddr, key: &PublicKey) -> Result<(), String>;

    /// Accept or refuse a peer that started a handshake from `addr`: its
    /// address is where it happens to be, not who it is (the node judges an
    /// accepted client the same way). By default the same as [`verify`].
    ///
    /// [`verify`]: PeerVerifier::verify
    fn verify_initiator(&self, addr: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self.verify(addr, key)
    }
}

impl<F> PeerVerifier for F
where
    F: Fn(SocketAddr, &PublicKey) -> Result<(), String> + Send + Sync,
{
    fn verify(&self, addr: SocketAddr, key: &PublicKey) -> Result<(), String> {
        self(addr, key)
    }
}

/// Accepts every key: encryption and integrity, and node IDs that cannot
/// be forged, but no check of *who* a peer is. For tests and for nodes that
/// authorize their peers by other means.
#[derive(Debug, Default, Clone, Copy)]
pub struct AcceptAnyKey;

impl PeerVerifier for AcceptAnyKey {
    fn verify(&self, _: SocketAddr, _: &PublicKey) -> Result<(), String> {
        Ok(())
    }
}

/// Whether an [`ExonNode`](crate::ExonNode) authenticates and encrypts.
#[derive(Clone)]
// A configuration value made once per node: the identity inline is simpler
// than a box and costs nothing that matters.
#[allow(clippy::large_enum_variant)]
pub enum Security {
    /// Noise IK sessions; every datagram sealed. The node's ID is its
    /// identity's.
    Authenticated {
        /// This node's key pair.
        identity: Identity,
        /// Another key's signature over `identity`'s public key, shown to
        /// peers so that they judge that key instead ([`endorse`]).
        endorsement: Option<Endorsement>,
        /// The trust decision for peers' keys.
        verifier: Arc<dyn PeerVerifier>,
    },
    /// INSECURE, NO AUTHENTICATION: the bare protocol with plaintext node
    /// IDs that anyone can forge, for benchmarks of the protocol alone
    /// (`--insecure-no-auth`) and tests. Both peers must use it.
    InsecureNoAuth {
        /// The ID this node claims.
        id: NodeId,
    },
}

impl Security {
    /// Authenticated with `identity`, judging peers with `verifier`.
    pub fn authenticated(identity: Identity, verifier: Arc<dyn PeerVerifier>) -> Security {
        Security::Authenticated { identity, endorsement: None, verifier }
    }

    /// Authenticated with a session `identity` of its own that `node`
    /// endorses: peers judge `node`'s key, and the node ID is the session
    /// identity's (so processes sharing `node` keep distinct IDs).
    pub fn endorsed(identity: Identity, node: &Identity, verifier: Arc<dyn PeerVerifier>) -> Security {
        let endorsement = Some(Endorsement::sign(node, &identity.public_key()));
        Security::Authenticated { identity, endorsement, verifier }
    }

    /// True unless insecure.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Security::Authenticated { .. })
    }

    /// The node ID this security gives the node.
    pub fn node_id(&self) -> NodeId {
        match self {
            Security::Authenticated { identity, .. } => NodeId::of(&identity.public_key()),
            Security::InsecureNoAuth { id } => *id,
        }
    }
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Security::Authenticated { identity, endorsement, .. } => f
                .debug_struct("Authenticated")
                .field("public_key", &identity.public_key())
                .field("endorsed_by", &endorsement.as_ref().map(|e| *e.node_key()))
                .finish_non_exhaustive(),
            Security::InsecureNoAuth { id } => {
                f.debug_struct("InsecureNoAuth").field("id", id).finish()
            }
        }
    }
}

/// Limits and timers of the session layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Most peers with sessions kept (each costs a few hundred bytes and at
    /// most four sessions); beyond it new peers are refused, unless a peer
    /// silent for `reject_after` can be forgotten.
    pub max_peers: usize,
    /// The initiator of a session starts a new handshake after this long
    /// (WireGuard's REKEY_AFTER_TIME).
    pub rekey_after: Duration,
    /// ... or after sealing this many datagrams with it.
    pub rekey_after_packets: u64,
    /// A session this old is no longer used at all (REJECT_AFTER_TIME).
    pub reject_after: Duration,
    /// A session that sealed this many datagrams is no longer used to send
    /// (far below the AEADs' limits: RFC 9001 §6.6 allows 2^23 full-size
    /// AES-GCM packets per key with margin).
    pub reject_after_packets: u64,
    /// First retransmission of an unanswered initiation or key request;
    /// doubles each time.
    pub handshake_timeout: Duration,
    /// Most initiations of one handshake before a fresh one is started.
    pub handshake_tries: u32,
    /// Most key requests to an address before discovery fails.
    pub discovery_tries: u32,
    /// Waiting this long for an answer without receiving anything
    /// authenticated starts a new handshake (the peer may have restarted
    /// and lost its sessions); so does a retransmission timeout with
    /// nothing heard since the datagram it gave up on was sent.
    pub silence: Duration,
    /// Most handshake and discovery packets queued for sending; further
    /// answers are dropped (and counted), so a flood cannot grow the queue.
    /// A queue more than half full also puts the node under load (see
    /// `handshake_rate`).
    pub max_queued: usize,
    /// Initiations a second this node does the Diffie-Hellman work for
    /// without asking for proof of the source address (a token bucket that
    /// also allows a burst of this many at once). Beyond it, or while the
    /// handshake queue is more than half full, the node is *under load*:
    /// a handshake packet without a valid mac2 gets only a cookie reply
    /// (WireGuard §5.4.7), which costs no Diffie-Hellman and keeps no
    /// state, and the sender retries with the cookie. The default, 2,000,
    /// is about half a core of responder work (an answered initiation
    /// measured ≈ 240 µs, its four X25519 operations most of it; a cookie
    /// reply ≈ 2 µs: `measure_responder_cost` in tests/cookie.rs), and
    /// still 3.7 times what a full table of `max_peers` peers re-keying
    /// every `rekey_after` needs (546 a second). 0 demands a cookie
    /// always.
    pub handshake_rate: u32,
    /// Initiations a second one source may have answered while the node
    /// is under load, after its burst (WireGuard's rate limiter: 20; see
    /// [`ratelimit`]). Only initiations with a valid mac2 meet it, so only
    /// sources that receive at their address: it keeps a host, or a few
    /// real hosts, from buying unlimited Diffie-Hellmans with a cookie.
    /// A source is an IPv4 address or an IPv6 /64. The model: a legitimate
    /// host starts one handshake per peer every `rekey_after` (120 s) and
    /// retries a few times with backoff, so 20 a second sustains the
    /// re-keys of about 2,400 peers behind one address (a NAT) with room
    /// for retries. Not under load it does nothing. 0 turns it off.
    pub per_source_rate: u32,
    /// Initiations one source may have answered at once under load before
    /// `per_source_rate` applies (WireGuard: 5; at least 1).
    pub per_source_burst: u32,
    /// Most sources the per-source limiter keeps (≈ 38 bytes each with the
    /// map's slack; the default 4,096 takes at most about 270 KB). An entry
    /// idle for `per_source_burst / per_source_rate` (0.25 s) is dropped
    /// when room is needed; while the table is full of fresher ones, a new
    /// source's initiation is dropped (and counted in `rate_limited`): it
    /// takes this many address-proving sources within a quarter second,
    /// and the sender's retry comes later.
    pub max_rate_sources: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_peers: 65_536,
            rekey_after: Duration::from_secs(120),
            rekey_after_packets: 1 << 22,
            reject_after: Duration::from_secs(180),
            reject_after_packets: 1 << 23,
            handshake_timeout: Duration::from_millis(250),
            handshake_tries: 8,
            discovery_tries: 8,
            silence: Duration::from_secs(2),
            max_queued: 1024,
            handshake_rate: 2_000,
            per_source_rate: 20,
            per_source_burst: 5,
            max_rate_sources: 4_096,
        }
    }
}

/// Counters of the session layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecurityStats {
    /// Sealed datagrams whose tag did not verify, handshake packets
    /// whose mac1 or Noise message did not, and cookie replies that did
    /// not open.
    pub auth_failed: u64,
    /// Sealed datagrams that authenticated but replayed a counter.
    pub replayed: u64,
    /// Datagrams for no session, or of the other security mode.
    pub unauthenticated: u64,
    /// Handshakes completed (either role).
    pub handshakes: u64,
    /// Initiations answered.
    pub responses: u64,
    /// Peers refused by the verifier or for want of room.
    pub refused: u64,
    /// Handshake or discovery packets not queued because the queue was full.
    pub queue_dropped: u64,
    /// Sessions currently kept (all peers, all roles).
    pub sessions: u64,
    /// Peers currently kept.
    pub peers: u64,
    /// Cookie replies sent (under load, for handshake packets without a
    /// valid mac2).
    pub cookies_sent: u64,
    /// Cookie replies received that opened.
    pub cookies_received: u64,
    /// Initiations whose Diffie-Hellmans this node did as the responder,
    /// answered or not (the work `handshake_rate` budgets).
    pub diffie_hellmans: u64,
    /// Initiations with a valid mac2 dropped under load by the per-source
    /// limit ([`SessionConfig::per_source_rate`]), or because its table of
    /// sources was full ([`SessionConfig::max_rate_sources`]): no
    /// Diffie-Hellman, no state, no answer.
    pub rate_limited: u64,
}

/// Why discovering the node at an address failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// No reply after every try.
    #[error("no Exon node answered at {0}")]
    Timeout(SocketAddr),
    /// The verifier refused the key the address presented.
    #[error("the key presented by {addr} was refused: {reason}")]
    Refused {
        /// Where.
        addr: SocketAddr,
        /// The verifier's reason.
        reason: String,
    },
    /// The node there runs the other security mode.
    #[error(
        "the Exon node at {0} runs the other security mode (authenticated vs --insecure-no-auth)"
    )]
    ModeMismatch(SocketAddr),
}

/// The keyed hash of handshake packets: BLAKE3 keyed by a key derived from
/// the receiver's public key, so a sender must at least know whom it talks
/// to, and random packets are dropped without a Diffie-Hellman.
pub(crate) fn mac1_key(receiver: &PublicKey) -> [u8; 32] {
    blake3::derive_key("braid-exon v1 mac1", &receiver.to_bytes())
}

pub(crate) fn mac1(key: &[u8; 32], body: &[u8]) -> [u8; MAC_LEN] {
    let h = blake3::keyed_hash(key, body);
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&h.as_bytes()[..MAC_LEN]);
    out
}

/// The mac1 (WireGuard §5.4.4) that the node with `receiver_public`
/// expects on a handshake packet whose bytes before its two macs are
/// `body` (for an initiation: `&packet[..INIT_LEN - 2 * MAC_LEN]`).
///
/// Anyone can compute it: the receiver's key is public (a key request
/// returns it), which is why mac1 only drops random packets cheaply and
/// mac2 ([`T_COOKIE`]) is what defends the Diffie-Hellman under load. It
/// is public for tools that test that defence (a flood of initiations
/// with a valid mac1, as a real attacker would send).
pub fn mac1_for(receiver_public: &PublicKey, body: &[u8]) -> [u8; MAC_LEN] {
    mac1(&mac1_key(receiver_public), body)
}

/// Constant-time comparison of two macs.
pub(crate) fn mac_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
