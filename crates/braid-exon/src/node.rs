//! [`ExonNode`]: the Exon [`Machine`] over datagrams, sans-IO.
//!
//! The machine decides *what* is sent; the node decides *when* and *how*:
//! it packs control frames and token fragments of one peer into datagrams
//! (so REQSLOTS rides on TOKENs and SLOTS on ACKs, and one datagram carries
//! many tokens and acknowledgements: the envelopes of small messages share
//! datagrams up to the datagram size), hands out runs of equal-sized
//! datagrams to one peer for one segmented send
//! ([`ExonNode::poll_transmit_batch`], UDP GSO), counts congestion, RTT
//! samples and losses per datagram, not per message, measures the RTT, runs a congestion
//! controller per peer (BBR-style by default), paces, detects lost
//! fragments (RACK-style time threshold, RFC 8985 §6.2, and an RFC 6298
//! retransmission timeout), sizes the window `N` from the measured
//! bandwidth-delay product, and runs the timers of Algorithm 1's
//! `periodically` block. Peers are node IDs; a peer's address is the one
//! its latest valid datagram came from.
//!
//! With [`Security::Authenticated`] (the norm) every datagram after a
//! peer's handshake is sealed in a session ([`crate::secure`]): frames
//! reach the machine only from a datagram that authenticated, under the
//! node ID its session proved, and nothing leaves for a peer until a
//! session with it exists (its frames wait in the machine meanwhile).
//! [`Security::InsecureNoAuth`] sends the bare wire format instead.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_recovery::{Acked, Bbr, CcAlgorithm, CongestionController, Pacer, RttEstimator};
use bytes::Bytes;

use crate::guard::QueueLossGuard;
use crate::journal::Record;
use crate::machine::{Event, Feedback, Machine, MachineConfig, RestoreError, SendError};
use crate::secure::sessions::{key_request, Handled};
use crate::secure::{
    Cipher, DiscoveryError, PublicKey, Security, SecurityStats, SessionConfig, Sessions,
    DATA_HEADER_LEN, KEYREQ_LEN, SEALED_OVERHEAD, TAG_LEN, T_COOKIE, T_DATA, T_IDREPLY, T_INIT,
    T_KEYREPLY, T_KEYREQ,
};
use crate::wire::{self, Datagram, Frame, HEADER_LEN, TOKEN_OVERHEAD_MAX};
use crate::{MessageId, NodeId};

/// Bytes around the frames of a datagram in either security mode (the
/// sealed form's header and tag; the insecure header is smaller): one
/// fragment size for both, so that they compare fairly.
const DATAGRAM_OVERHEAD: usize = if SEALED_OVERHEAD > HEADER_LEN {
    SEALED_OVERHEAD
} else {
    HEADER_LEN
};

/// Congestion controllers an [`ExonNode`] can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExonCc {
    /// Delivery-rate based ([`Bbr`]): random loss is not congestion.
    #[default]
    Bbr,
    /// A loss-based controller from `braid-proto` (NewReno, CUBIC, ...).
    Loss(CcAlgorithm),
}

impl ExonCc {
    fn build(self, mss: u64, initial_window: u64) -> Box<dyn CongestionController> {
        match self {
            ExonCc::Bbr => Box::new(Bbr::new(mss, initial_window)),
            ExonCc::Loss(a) => a.build(mss, initial_window),
        }
    }
}

impl std::str::FromStr for ExonCc {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("bbr") {
            return Ok(ExonCc::Bbr);
        }
        s.parse::<CcAlgorithm>().map(ExonCc::Loss).map_err(|_| {
            format!("unknown congestion control `{s}`: expected bbr, newreno or cubic")
        })
    }
}

/// Largest datagram an [`ExonNode`] sends, whatever
/// [`NodeConfig::max_datagram_size`] asks for (32 KiB): the congestion
/// controllers count in datagrams, and BBR's send quantum (two datagrams,
/// at most 64 KB: BBR v3 §4.6.3) must hold two of them. Paths with larger
/// MTUs (loopback's is 64 KiB) gain little beyond it: a datagram of 32 KiB
/// already carries hundreds of small messages.
pub const MAX_DATAGRAM_SIZE: usize = 32 * 1024;

/// Configuration of an [`ExonNode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Protocol limits.
    pub machine: MachineConfig,
    /// Largest UDP payload sent (at most [`MAX_DATAGRAM_SIZE`]).
    pub max_datagram_size: usize,
    /// Congestion control.
    pub cc: ExonCc,
    /// With [`ExonCc::Bbr`]: cap the window when loss comes with a standing
    /// queue, so that loss-based flows sharing the bottleneck are not
    /// starved (see [`guard`](crate::guard)); random loss is unaffected.
    pub queue_loss_guard: bool,
    /// Initial congestion window, in datagrams.
    pub initial_window_packets: u64,
    /// RTT assumed before the first sample (RFC 6298 (2.1) uses 1 s; Exon
    /// retransmits cheaply, so a smaller value is safe).
    pub initial_rtt: Duration,
    /// Floor of the retransmission timeout. Exon's RTO is proportional to
    /// the RTT (§V-D of the paper: max(SRTT + 4·RTTVAR, 2·SRTT)), not
    /// RFC 6298's 1 s: retransmitting a token is always safe.
    pub min_rto: Duration,
    /// Ceiling of the backed-off retransmission timeout.
    pub max_rto: Duration,
    /// A sender record with nothing outstanding is closed after this long.
    pub idle_timeout: Duration,
    /// A receiver record idle this long sends a keep-alive (l. 93); the
    /// interval doubles while nothing comes back.
    pub keepalive: Duration,
    /// Unpinned receiver records idle this long are forgotten (costing
    /// their sender a retransmission at most); `None` keeps them.
    pub forget_receivers_after: Option<Duration>,
    /// Sessions, handshakes and discovery (authenticated nodes).
    pub session: SessionConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            machine: MachineConfig::default(),
            max_datagram_size: 1_400,
            cc: ExonCc::default(),
            queue_loss_guard: true,
            initial_window_packets: 32,
            initial_rtt: Duration::from_millis(100),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(2),
            keepalive: Duration::from_secs(1),
            forget_receivers_after: Some(Duration::from_secs(120)),
            session: SessionConfig::default(),
        }
    }
}

impl NodeConfig {
    /// Message bytes that fit one datagram next to the header (and tag)
    /// and a TOKEN frame header.
    pub fn fragment_size(&self) -> usize {
        self.max_datagram_size
            .saturating_sub(DATAGRAM_OVERHEAD + TOKEN_OVERHEAD_MAX)
            .max(1)
    }
}

/// Datagrams to send: `size` bytes of the buffer, to `dst`, cut into
/// datagrams of `segment_size` bytes (the last one may be shorter), i.e.
/// what one segmented send (Linux UDP GSO, `sendmmsg`) carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub dst: SocketAddr,
    /// Bytes written to the buffer.
    pub size: usize,
    /// Length of every datagram but the last; `size` when there is one.
    pub segment_size: usize,
    /// Datagrams in the buffer.
    pub datagrams: usize,
}

impl Transmit {
    /// The datagrams, as slices of the buffer the transmit was written to.
    pub fn segments<'a>(&self, buf: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        buf[..self.size.min(buf.len())].chunks(self.segment_size.max(1))
    }
}

/// Counters of an [`ExonNode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Datagrams handed out by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Bytes in them.
    pub bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Datagrams dropped because they did not decode.
    pub malformed: u64,
    /// Datagrams for another node ID.
    pub misdirected: u64,
    /// Token fragments sent.
    pub fragments_sent: u64,
    /// Token fragments declared lost and queued again.
    pub fragments_lost: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Times a peer's address changed.
    pub address_changes: u64,
    /// The session layer's counters (all zero when insecure).
    pub security: SecurityStats,
}

/// One datagram of token fragments in flight: the unit of congestion
/// control, RTT sampling and loss detection. A datagram arrives whole or
/// not at all, so the first acknowledgement of any of its fragments
/// credits it to the congestion controller (`credited`): accounting per
/// datagram rather than per fragment keeps the cost of a small message to
/// its share of one entry. The entry itself stays until every fragment is
/// settled (`open` reaches 0): an acknowledgement list can be split over
/// datagrams, or a fragment dropped by the receiver, and a fragment whose
/// acknowledgement never comes must still be declared lost (RACK or the
/// retransmission timeout) and sent again, without a congestion signal
/// for a datagram that arrived.
#[derive(Debug, Clone)]
struct Tx {
    sent_at: Instant,
    /// The datagram's length (control frames included).
    bytes: u64,
    /// Its fragments, `(token, offset)`, to send again if it is lost.
    frags: Vec<(u64, u64)>,
    /// Fragments not yet acknowledged or forgotten.
    open: usize,
    /// The datagram is known to have arrived: out of `bytes_in_flight`,
    /// counted by the congestion controller.
    credited: bool,
    /// Every fragment in it was a first transmission (Karn's rule).
    first: bool,
    app_limited: bool,
}

/// What the node keeps per peer.
#[derive(Debug)]
struct Path {
    addr: Option<SocketAddr>,
    /// RFC 6298 estimates; the RTO is at least two SRTTs (RFC 8985 §7.2's
    /// probe timeout): RACK recovers ordinary losses, this timer is the
    /// backstop, and firing it spuriously resends the whole flight.
    rtt: RttEstimator,
    cc: Box<dyn CongestionController>,
    /// Window cap on loss with a standing queue (BBR only).
    guard: Option<QueueLossGuard>,
    /// Transmissions by number, i.e. in send order.
    in_flight: BTreeMap<u64, Tx>,
    bytes_in_flight: u64,
    /// Send time of the latest-sent datagram acknowledged (RACK).
    rack_sent: Option<Instant>,
    /// Token bucket at the controller's pacing rate, ten datagrams deep.
    pacer: Pacer,
    /// Earliest time the pacer lets the next fragment go.
    pace_at: Option<Instant>,
    /// Periodic timer for REQSLOTS retransmission (l. 91).
    request_at: Option<Instant>,
    /// Receiver keep-alive (l. 93) and its backoff.
    keepalive_at: Option<Instant>,
    keepalive_backoff: u32,
    /// EWMA of message sizes sent, for N.
    avg_message: f64,
}

/// An Exon node: the [`Machine`] plus transmission, over datagrams.
///
/// ```
/// use braid_exon::{AcceptAnyKey, Event, ExonNode, Identity, NodeConfig, Security};
/// use braid_core::Instant;
/// use bytes::Bytes;
/// use std::sync::Arc;
///
/// let (a_addr, b_addr) = ("10.0.0.1:7".parse().unwrap(), "10.0.0.2:7".parse().unwrap());
/// let (ka, kb) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
/// let b_key = kb.public_key();
/// // Each life of a node gets fresh randomness (here fixed for the example).
/// let mut a = ExonNode::new(NodeConfig::default(), Security::authenticated(ka, Arc::new(AcceptAnyKey)), [3; 32], 0);
/// let mut b = ExonNode::new(NodeConfig::default(), Security::authenticated(kb, Arc::new(AcceptAnyKey)), [4; 32], 0);
/// let b_id = a.add_peer(&b_key, b_addr);
/// let now = Instant::ZERO;
/// let id = a.send(now, b_id, Bytes::from_static(b"exactly once")).unwrap();
/// let mut buf = Vec::new();
/// for _ in 0..6 {
///     for n in [&mut a, &mut b] {
///         if let Some(limit) = n.clock_request() { n.clock_persisted(limit); } // fsync here
///     }
///     while let Some(t) = a.poll_transmit(now, &mut buf) {
///         b.handle_datagram(now, a_addr, Bytes::copy_from_slice(&buf[..t.size]));
///     }
///     while let Some(t) = b.poll_transmit(now, &mut buf) {
///         a.handle_datagram(now, b_addr, Bytes::copy_from_slice(&buf[..t.size]));
///     }
/// }
/// assert_eq!(b.poll_event(), Some(Event::Received { from: a.id(), data: Bytes::from_static(b"exactly once") }));
/// assert_eq!(a.poll_event(), Some(Event::Delivered { to: b_id, id }));
/// ```
#[derive(Debug)]
pub struct ExonNode {
    cfg: NodeConfig,
    machine: Machine,
    paths: HashMap<NodeId, Path>,
    /// Round-robin order of peers for transmission.
    order: Vec<NodeId>,
    next_peer: usize,
    next_tx: u64,
    forget_at: Option<Instant>,
    stats: NodeStats,
    /// Frames of the datagram being handled (kept for its allocation).
    frames: Vec<Frame>,
    /// The session layer; `None`: insecure, no authentication.
    secure: Option<Sessions>,
    /// Insecure mode's discovery: addresses asked (tries, next retry),
    /// results, and replies to send.
    plain_discovering: HashMap<SocketAddr, (u32, Instant)>,
    plain_discovered: VecDeque<(SocketAddr, Result<NodeId, DiscoveryError>)>,
    plain_out: VecDeque<(SocketAddr, Vec<u8>)>,
}

impl ExonNode {
    /// A node with `security`, whose durable clock holds `persisted_clock`
    /// (0 when new). `seed` feeds the session layer's randomness (ephemeral
    /// keys, session indices): it must never repeat across nodes or lives
    /// of a node (take it from the OS CSPRNG; simulations pass a seeded
    /// value per life).
    pub fn new(
        mut cfg: NodeConfig,
        security: Security,
        seed: [u8; 32],
        persisted_clock: u64,
    ) -> ExonNode {
        cfg.max_datagram_size = cfg.max_datagram_size.min(MAX_DATAGRAM_SIZE);
        cfg.machine.max_fragment = cfg.fragment_size();
        let id = security.node_id();
        let machine = Machine::new(id, cfg.machine.clone(), persisted_clock);
        let secure = match security {
            Security::Authenticated { identity, endorsement, verifier } => {
                Some(Sessions::new(identity, endorsement, verifier, cfg.session.clone(), seed))
            }
            Security::InsecureNoAuth { .. } => None,
        };
        ExonNode {
            cfg,
            machine,
            paths: HashMap::new(),
            order: Vec::new(),
            next_peer: 0,
            next_tx: 0,
            forget_at: None,
            stats: NodeStats::default(),
            frames: Vec::new(),
            secure,
            plain_discovering: HashMap::new(),
            plain_discovered: VecDeque::new(),
            plain_out: VecDeque::new(),
        }
    }

    /// A node restarted after a crash, from its durable clock and the
    /// records its [`JournalStore`](crate::journal::JournalStore) holds
    /// (`cfg.machine.journal` should be on, as in its previous life), with
    /// the same identity and a fresh `seed`. Call
    /// [`add_peer`](Self::add_peer) for the peers it sends to; peers that
    /// send to it are learnt from their handshakes.
    pub fn restore(
        mut cfg: NodeConfig,
        security: Security,
        seed: [u8; 32],
        persisted_clock: u64,
        records: impl IntoIterator<Item = Record>,
        now: Instant,
    ) -> Result<ExonNode, RestoreError> {
        cfg.max_datagram_size = cfg.max_datagram_size.min(MAX_DATAGRAM_SIZE);
        cfg.machine.max_fragment = cfg.fragment_size();
        let id = security.node_id();
        let machine = Machine::restore(id, cfg.machine.clone(), persisted_clock, records, now)?;
        let mut node = ExonNode::new(cfg, security, seed, persisted_clock);
        node.machine = machine;
        let senders: Vec<NodeId> = node.machine.sender_peers().collect();
        let receivers: Vec<NodeId> = node.machine.receiver_peers().collect();
        for peer in senders {
            node.arm_request_timer(now, peer);
        }
        let keepalive = node.cfg.keepalive;
        for peer in receivers {
            node.path(peer).keepalive_at = Some(now + keepalive);
        }
        Ok(node)
    }

    /// True when datagrams are sealed in authenticated sessions.
    pub fn is_authenticated(&self) -> bool {
        self.secure.is_some()
    }

    /// This node's static public key (authenticated nodes).
    pub fn public_key(&self) -> Option<PublicKey> {
        self.secure.as_ref().map(Sessions::public_key)
    }

    /// The key `peer` proved (authenticated nodes).
    pub fn peer_key(&self, peer: NodeId) -> Option<PublicKey> {
        self.secure.as_ref().and_then(|s| s.peer_key(peer))
    }

    /// Uses `cipher` in the handshakes this node starts (the default is
    /// the faster on this CPU).
    pub fn set_cipher(&mut self, cipher: Cipher) {
        if let Some(s) = self.secure.as_mut() {
            s.set_cipher(cipher);
        }
    }

    /// Bytes the session layer holds for peers (an upper estimate: sessions,
    /// peers, handshakes in progress, queued handshake packets).
    pub fn session_state_bytes(&self) -> usize {
        self.secure.as_ref().map_or(0, Sessions::state_bytes)
    }

    /// Peers with transmission state (paths).
    pub fn peer_count(&self) -> usize {
        self.paths.len()
    }

    /// This node's ID.
    pub fn id(&self) -> NodeId {
        self.machine.id()
    }

    /// The protocol state machine (read-only).
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Counters.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    fn path(&mut self, peer: NodeId) -> &mut Path {
        let cfg = &self.cfg;
        let order = &mut self.order;
        self.paths.entry(peer).or_insert_with(|| {
            order.push(peer);
            let mss = cfg.max_datagram_size as u64;
            Path {
                addr: None,
                rtt: RttEstimator::new(cfg.initial_rtt, cfg.min_rto, cfg.max_rto)
                    .with_srtt_floor(2),
                cc: cfg.cc.build(mss, cfg.initial_window_packets * mss),
                guard: (cfg.queue_loss_guard && cfg.cc == ExonCc::Bbr)
                    .then(|| QueueLossGuard::new(mss)),
                in_flight: BTreeMap::new(),
                bytes_in_flight: 0,
                rack_sent: None,
                pacer: Pacer::with_tokens(10 * mss, cfg.initial_window_packets * mss),
                pace_at: None,
                request_at: None,
                keepalive_at: None,
                keepalive_backoff: 0,
                avg_message: cfg.fragment_size() as f64,
            }
        })
    }

    /// Tells the node that the node with static key `key` is at `addr`
    /// (until an authenticated datagram from it says otherwise), and
    /// returns its ID. The key is the application's to trust (known hosts);
    /// the handshake proves the peer holds it. An insecure node names the
    /// peer by the same derived ID.
    pub fn add_peer(&mut self, key: &PublicKey, addr: SocketAddr) -> NodeId {
        let peer = NodeId::of(key);
        if let Some(s) = self.secure.as_mut() {
            // The time only starts the peer's silence clock.
            s.add_peer(Instant::ZERO, key, addr);
        }
        self.path(peer).addr = Some(addr);
        peer
    }

    /// INSECURE: tells an insecure node that node `id` is at `addr`.
    /// Refused (false) by an authenticated node, whose peers' IDs come
    /// only from their keys.
    pub fn add_insecure_peer(&mut self, id: NodeId, addr: SocketAddr) -> bool {
        if self.secure.is_some() {
            return false;
        }
        self.path(id).addr = Some(addr);
        true
    }

    /// Asks the node at `addr` who it is: an authenticated node learns its
    /// key (judged by the verifier, proved by the handshake that follows),
    /// an insecure one its ID. The answer comes from
    /// [`poll_discovered`](Self::poll_discovered); the peer is then added.
    pub fn discover(&mut self, now: Instant, addr: SocketAddr) {
        match self.secure.as_mut() {
            Some(s) => s.discover(now, addr, &mut self.stats.security),
            None => {
                let retry = now + self.cfg.session.handshake_timeout;
                self.plain_discovering.insert(addr, (1, retry));
                self.plain_out.push_back((addr, key_request()));
            }
        }
    }

    /// The outcome of a [`discover`](Self::discover).
    pub fn poll_discovered(&mut self) -> Option<(SocketAddr, Result<NodeId, DiscoveryError>)> {
        let r = match self.secure.as_mut() {
            Some(s) => s.poll_discovered(),
            None => self.plain_discovered.pop_front(),
        };
        if let Some((addr, Ok(peer))) = &r {
            self.path(*peer).addr = Some(*addr);
        }
        r
    }

    /// The address `peer` is reached at.
    pub fn peer_addr(&self, peer: NodeId) -> Option<SocketAddr> {
        self.paths.get(&peer).and_then(|p| p.addr)
    }

    /// Smoothed RTT to `peer`, once measured.
    pub fn rtt(&self, peer: NodeId) -> Option<Duration> {
        self.paths
            .get(&peer)
            .filter(|p| p.rtt.has_sample())
            .map(|p| p.rtt.smoothed())
    }

    /// Sends `data` to `peer` exactly once. Fails with
    /// [`SendError::WindowFull`] when too much is outstanding (wait for
    /// [`Event::Delivered`]).
    pub fn send(
        &mut self,
        now: Instant,
        peer: NodeId,
        data: Bytes,
    ) -> Result<MessageId, SendError> {
        // One look-up per message: this is the hot path of small messages.
        let Some(p) = self.paths.get_mut(&peer).filter(|p| p.addr.is_some()) else {
            return Err(SendError::UnknownPeer(peer));
        };
        let len = data.len() as f64;
        let id = self.machine.send(now, peer, data)?;
        p.avg_message = 0.9 * p.avg_message + 0.1 * len.max(64.0);
        // A queued message makes the sender busy: its request timer runs
        // (what `arm_request_timer` decides).
        if p.request_at.is_none() {
            p.request_at = Some(now + p.rtt.rto());
        }
        Ok(id)
    }

    /// Sends messages from `msgs` to `peer` exactly once, in order, while
    /// its outstanding window has room (see [`Machine::send_batch`]: the
    /// first message that does not fit stays in `msgs`); the identifiers
    /// of those taken are appended to `ids`. The batched
    /// [`send`](Self::send): the peer's path and records are looked up
    /// once per call, not once per message.
    pub fn send_batch(
        &mut self,
        now: Instant,
        peer: NodeId,
        msgs: &mut std::vec::IntoIter<Bytes>,
        ids: &mut Vec<MessageId>,
    ) -> Result<(), SendError> {
        if msgs.as_slice().is_empty() {
            return Ok(());
        }
        let Some(p) = self.paths.get_mut(&peer).filter(|p| p.addr.is_some()) else {
            return Err(SendError::UnknownPeer(peer));
        };
        let before = ids.len();
        let result = self.machine.send_batch(now, peer, msgs, ids);
        let k = ids.len() - before;
        if k == 0 {
            return result.map(|_| ());
        }
        if let Ok(bytes) = result {
            // `send`'s average, for `k` messages of the run's mean size:
            // what came before weighs what it would after `k` sends.
            let mean = (bytes as f64 / k as f64).max(64.0);
            let keep = 0.9f64.powi(i32::try_from(k).unwrap_or(i32::MAX));
            p.avg_message = keep * p.avg_message + (1.0 - keep) * mean;
        }
        // Queued messages make the sender busy: its request timer runs.
        if p.request_at.is_none() {
            p.request_at = Some(now + p.rtt.rto());
        }
        result.map(|_| ())
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.machine.poll_event()
    }

    /// A clock limit to make durable (then call
    /// [`clock_persisted`](Self::clock_persisted)).
    pub fn clock_request(&self) -> Option<u64> {
        self.machine.clock_request()
    }

    /// The clock is durably at `limit`.
    pub fn clock_persisted(&mut self, limit: u64) {
        self.machine.clock_persisted(limit);
    }

    /// Journal records to store durably, and the position they reach (see
    /// [`Machine::take_journal`]); `None` when nothing changed.
    pub fn take_journal(&mut self, out: &mut Vec<Record>) -> Option<u64> {
        self.machine.take_journal(out)
    }

    /// The journal is durable up to `seq`.
    pub fn journal_persisted(&mut self, seq: u64) {
        self.machine.journal_persisted(seq);
    }

    /// The journal position of the latest change (read it right after
    /// [`poll_event`](Self::poll_event) returns a message: hand the message
    /// out once this position is durable).
    pub fn journal_seq(&self) -> u64 {
        self.machine.journal_seq()
    }

    /// Records rebuilding the current state, to replace the journal (see
    /// [`Machine::checkpoint`]).
    pub fn checkpoint(&self) -> Option<Vec<Record>> {
        self.machine.checkpoint()
    }

    /// A datagram arrived from `src`.
    ///
    /// Authenticated nodes act only on datagrams that open in a session
    /// (and on handshake and discovery packets, which the session layer
    /// checks itself); everything else is counted and dropped, having
    /// changed nothing.
    pub fn handle_datagram(&mut self, now: Instant, src: SocketAddr, payload: Bytes) {
        self.stats.datagrams_received += 1;
        let Some(&kind) = payload.first() else {
            self.stats.malformed += 1;
            return;
        };
        if self.secure.is_some() {
            self.handle_sealed(now, src, kind, payload);
            if let Some(s) = self.secure.as_ref() {
                self.stats.security = s.stats(self.stats.security);
            }
            return;
        }
        match kind {
            wire::MAGIC => self.handle_plain(now, src, payload),
            T_KEYREQ if payload.len() == KEYREQ_LEN => {
                let mut reply = Vec::with_capacity(9);
                reply.push(T_IDREPLY);
                reply.extend_from_slice(&self.id().0.to_be_bytes());
                if self.plain_out.len() < self.cfg.session.max_queued {
                    self.plain_out.push_back((src, reply));
                } else {
                    self.stats.security.queue_dropped += 1;
                }
            }
            T_IDREPLY if payload.len() == 9 => {
                if self.plain_discovering.remove(&src).is_some() {
                    let mut id = [0u8; 8];
                    id.copy_from_slice(&payload[1..]);
                    let peer = NodeId(u64::from_be_bytes(id));
                    self.plain_discovered.push_back((src, Ok(peer)));
                }
            }
            T_KEYREPLY => {
                if self.plain_discovering.remove(&src).is_some() {
                    self.plain_discovered
                        .push_back((src, Err(DiscoveryError::ModeMismatch(src))));
                }
            }
            _ => self.stats.malformed += 1,
        }
    }

    /// An insecure datagram: node IDs in its header.
    fn handle_plain(&mut self, now: Instant, src: SocketAddr, payload: Bytes) {
        // The whole datagram decodes before any frame is acted on: a
        // malformed batch is dropped whole. The frame list is reused.
        let mut frames = std::mem::take(&mut self.frames);
        let (src_id, dst_id) = match Datagram::decode_into(payload, &mut frames) {
            Ok(ids) => ids,
            Err(_) => {
                self.stats.malformed += 1;
                self.frames = frames;
                return;
            }
        };
        if dst_id != self.id() || src_id == self.id() {
            self.stats.misdirected += 1;
            frames.clear();
            self.frames = frames;
            return;
        }
        self.deliver_frames(now, src, src_id, frames);
    }

    /// A datagram to an authenticated node.
    fn handle_sealed(&mut self, now: Instant, src: SocketAddr, kind: u8, payload: Bytes) {
        let Some(sessions) = self.secure.as_mut() else {
            return;
        };
        match kind {
            T_DATA => {
                // Opened in place: a copy only if the buffer is shared.
                let mut buf: Vec<u8> = payload.into();
                let Some(opened) = sessions.open(now, src, &mut buf, &mut self.stats.security)
                else {
                    return;
                };
                let plain = Bytes::from(buf).slice(opened.frames);
                let mut frames = std::mem::take(&mut self.frames);
                if wire::decode_frames(plain, &mut frames).is_err() {
                    // Authenticated but malformed: a bug of the peer's,
                    // dropped whole.
                    self.stats.malformed += 1;
                    self.frames = frames;
                    return;
                }
                self.deliver_frames(now, src, opened.peer, frames);
            }
            T_INIT..=T_COOKIE => {
                if let Handled::Peer { peer, addr } =
                    sessions.handle(now, src, &payload, &mut self.stats.security)
                {
                    self.note_address(peer, addr);
                }
            }
            _ => self.stats.security.unauthenticated += 1,
        }
    }

    /// The peer's address, as its latest authenticated datagram says
    /// (roaming).
    fn note_address(&mut self, peer: NodeId, addr: SocketAddr) {
        let p = self.path(peer);
        let moved = p.addr.is_some_and(|a| a != addr);
        p.addr = Some(addr);
        p.keepalive_backoff = 0;
        if moved {
            self.stats.address_changes += 1;
        }
    }

    /// Hands the frames of a datagram from `peer` (proved, or claimed in
    /// insecure mode) to the machine.
    fn deliver_frames(
        &mut self,
        now: Instant,
        src: SocketAddr,
        peer: NodeId,
        mut frames: Vec<Frame>,
    ) {
        self.note_address(peer, src);
        for f in frames.drain(..) {
            self.machine.handle_frame(now, peer, f);
        }
        self.frames = frames;
        // Activity postpones the receiver's keep-alive (l. 93).
        let has_receiver = self.machine.has_receiver(peer);
        let keepalive = self.cfg.keepalive;
        if let Some(p) = self.paths.get_mut(&peer) {
            p.keepalive_at = has_receiver.then_some(now + keepalive);
        }
        self.process_feedback(now);
        self.detect_losses(now, peer);
        self.update_window(peer);
        self.arm_request_timer(now, peer);
    }

    /// Applies the machine's feedback to the paths. A datagram carries
    /// many tokens and one ACK frame settles many of them, so feedback
    /// comes in runs naming the same transmission: each run is applied
    /// with one look-up of its path and datagram, not one per message.
    fn process_feedback(&mut self, now: Instant) {
        let mut touched: Vec<NodeId> = Vec::new();
        // A run of `Acked` for one transmission: (peer, tx, fragments).
        let mut run: Option<(NodeId, u64, usize)> = None;
        while let Some(fb) = self.machine.poll_feedback() {
            if let Feedback::Acked { peer, tx, fragments } = fb {
                let fragments = fragments as usize;
                match &mut run {
                    Some((p, t, k)) if *p == peer && *t == tx => *k += fragments,
                    _ => {
                        if let Some((p, t, k)) = run.take() {
                            self.on_acked(now, p, t, k, &mut touched);
                        }
                        run = Some((peer, tx, fragments));
                    }
                }
                continue;
            }
            // Keep the order: the run before this feedback is applied first.
            if let Some((p, t, k)) = run.take() {
                self.on_acked(now, p, t, k, &mut touched);
            }
            match fb {
                Feedback::Acked { .. } => {}
                Feedback::Forgotten { peer, tx } => {
                    let Some(p) = self.paths.get_mut(&peer) else {
                        continue;
                    };
                    let Some(t) = p.in_flight.get_mut(&tx) else {
                        continue;
                    };
                    // NACKed or in doubt: it arrived, but gives no sample.
                    t.open = t.open.saturating_sub(1);
                    if !t.credited {
                        t.credited = true;
                        p.bytes_in_flight -= t.bytes;
                    }
                    if t.open == 0 {
                        p.in_flight.remove(&tx);
                    }
                }
                Feedback::SlotsAnswered { peer, sent_at } => {
                    if let Some(p) = self.paths.get_mut(&peer) {
                        p.rtt.update(now - sent_at);
                    }
                }
            }
        }
        if let Some((p, t, k)) = run.take() {
            self.on_acked(now, p, t, k, &mut touched);
        }
        for peer in touched {
            if let Some(p) = self.paths.get_mut(&peer) {
                p.cc.on_ack_end(now, p.bytes_in_flight);
            }
        }
    }

    /// `fragments` fragments of transmission `tx` to `peer` were
    /// acknowledged: the datagram arrived. The first acknowledgement of a
    /// datagram credits it to the congestion controller (and gives an RTT
    /// sample); the entry goes once none of its fragments is open.
    fn on_acked(
        &mut self,
        now: Instant,
        peer: NodeId,
        tx: u64,
        fragments: usize,
        touched: &mut Vec<NodeId>,
    ) {
        let Some(p) = self.paths.get_mut(&peer) else {
            return;
        };
        let Some(t) = p.in_flight.get_mut(&tx) else {
            return;
        };
        t.open = t.open.saturating_sub(fragments);
        let credit = !t.credited;
        t.credited = true;
        let (sent_at, bytes, first, app_limited) = (t.sent_at, t.bytes, t.first, t.app_limited);
        if t.open == 0 {
            p.in_flight.remove(&tx);
        }
        if !credit {
            return; // the datagram was counted at its first fragment
        }
        p.bytes_in_flight -= bytes;
        if first {
            // Karn: only first transmissions give samples.
            p.rtt.update(now - sent_at);
            if let Some(g) = p.guard.as_mut() {
                g.on_rtt(now, now - sent_at);
            }
        }
        if let Some(g) = p.guard.as_mut() {
            g.on_ack(now, sent_at, p.cc.window());
        }
        p.rtt.reset_backoff();
        p.rack_sent = Some(p.rack_sent.map_or(sent_at, |r| r.max(sent_at)));
        let acked = Acked {
            sent_time: sent_at,
            bytes,
            app_limited,
            rtt: p.rtt.estimate(),
            one_way_delay_us: None,
        };
        p.cc.on_ack(now, &acked);
        if !touched.contains(&peer) {
            touched.push(peer);
        }
    }

    /// RACK (RFC 8985 §6.2): a datagram sent a reordering window before
    /// one already acknowledged is lost.
    fn detect_losses(&mut self, now: Instant, peer: NodeId) {
        let Some(p) = self.paths.get_mut(&peer) else {
            return;
        };
        let Some(rack) = p.rack_sent else { return };
        let reo = (p.rtt.min() / 4).max(Duration::from_millis(1));
        let mut lost = Vec::new();
        for (&tx, t) in &p.in_flight {
            if t.sent_at + reo <= rack {
                lost.push(tx);
            } else {
                break; // later ones were sent later still
            }
        }
        self.declare_lost(now, peer, &lost);
    }

    fn declare_lost(&mut self, now: Instant, peer: NodeId, txs: &[u64]) {
        if txs.is_empty() {
            return;
        }
        let Some(p) = self.paths.get_mut(&peer) else {
            return;
        };
        let mut lost_bytes = 0;
        let mut newest = Instant::ZERO;
        for tx in txs {
            if let Some(t) = p.in_flight.remove(tx) {
                // A credited datagram arrived: only its unacknowledged
                // fragments go again, and congestion is not signalled.
                if !t.credited {
                    p.bytes_in_flight -= t.bytes;
                    lost_bytes += t.bytes;
                    newest = newest.max(t.sent_at);
                }
                for &(s, offset) in &t.frags {
                    if self.machine.fragment_lost(peer, s, offset, *tx) {
                        self.stats.fragments_lost += 1;
                    }
                }
            }
        }
        if lost_bytes > 0 {
            p.cc.on_congestion_event(now, newest, lost_bytes, false);
            if let Some(g) = p.guard.as_mut() {
                g.on_loss(lost_bytes, newest);
            }
        }
    }

    /// N from the measured bandwidth-delay product: enough envelopes for
    /// what the congestion window lets through in a round trip, in
    /// messages of the average size, twice over so that the low watermark
    /// (N/2) still covers one round trip of requests.
    fn update_window(&mut self, peer: NodeId) {
        let Some(p) = self.paths.get(&peer) else {
            return;
        };
        let per_message = p.avg_message.min(self.cfg.fragment_size() as f64).max(64.0);
        let n = (2.0 * p.cc.window() as f64 / per_message).ceil() as u64;
        self.machine.set_window(peer, n);
    }

    fn arm_request_timer(&mut self, now: Instant, peer: NodeId) {
        let busy = self.machine.sender_busy(peer);
        let p = self.path(peer);
        if busy {
            if p.request_at.is_none() {
                p.request_at = Some(now + p.rtt.rto());
            }
        } else {
            p.request_at = None;
        }
    }

    /// The next datagram to send, written to `buf`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.poll_transmit_batch(now, buf, 1)
    }

    /// Up to `max_datagrams` datagrams to one peer, written back to back
    /// to `buf` for one segmented send (see [`Transmit`]); peers take
    /// turns from one call to the next.
    ///
    /// Every datagram but the last is exactly as long as the first: a
    /// segmented send cuts the buffer at fixed offsets. So the first one is
    /// filled up to `max_datagram_size`, the following ones up to the
    /// first one's length, and the batch ends with the first that comes
    /// out shorter. A stream of equal messages gives equal datagrams, so
    /// a batch of them is as long as the window and the pacer allow.
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_datagrams: usize,
    ) -> Option<Transmit> {
        buf.clear();
        // Handshake and discovery packets first: they open the way.
        if let Some(t) = self.poll_handshake(buf) {
            return Some(t);
        }
        let n = self.order.len();
        for k in 0..n {
            let i = (self.next_peer + k) % n;
            let peer = self.order[i];
            let Some(dst) = self.paths.get(&peer).and_then(|p| p.addr) else {
                continue;
            };
            if self.secure.is_some() && !self.session_ready(now, peer) {
                continue;
            }
            let Some(first) = self.build(now, peer, buf, self.cfg.max_datagram_size) else {
                continue;
            };
            let mut datagrams = 1;
            while datagrams < max_datagrams {
                match self.build(now, peer, buf, first) {
                    Some(len) => {
                        datagrams += 1;
                        if len < first {
                            break;
                        }
                    }
                    None => break,
                }
            }
            self.next_peer = (i + 1) % n;
            if let Some(s) = self.secure.as_ref() {
                // A handshake started for a re-key queued its initiation.
                self.stats.security = s.stats(self.stats.security);
            }
            self.stats.datagrams_sent += datagrams as u64;
            self.stats.bytes_sent += buf.len() as u64;
            return Some(Transmit {
                dst,
                size: buf.len(),
                segment_size: first,
                datagrams,
            });
        }
        // A handshake started above for a peer without a session.
        self.poll_handshake(buf)
    }

    /// The next handshake or discovery packet, alone in `buf`.
    fn poll_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (dst, packet) = match self.secure.as_mut() {
            Some(s) => s.poll_out(),
            None => self.plain_out.pop_front(),
        }?;
        buf.extend_from_slice(&packet);
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += packet.len() as u64;
        Some(Transmit {
            dst,
            size: packet.len(),
            segment_size: packet.len(),
            datagrams: 1,
        })
    }

    /// Moves the events ready for the application to `out` (see
    /// [`poll_event`](Self::poll_event)), returning how many: the messages
    /// of a whole batch of datagrams at once.
    pub fn poll_events(&mut self, out: &mut Vec<Event>) -> usize {
        self.machine.drain_events(out)
    }

    /// Has `peer` a session to seal with? Without one, and with something
    /// to send, a handshake is started (its initiation goes out with the
    /// next poll); the frames wait in the machine meanwhile.
    fn session_ready(&mut self, now: Instant, peer: NodeId) -> bool {
        let wants = self.machine.has_control(peer) || self.machine.has_fragment(peer);
        let Some(s) = self.secure.as_mut() else {
            return true;
        };
        if !wants {
            return false;
        }
        s.ready(now, peer, &mut self.stats.security)
    }

    /// Would [`send`](Self::send) find room for a `len`-byte message to
    /// `peer` now (see [`Machine::has_room`])?
    pub fn has_room(&self, peer: NodeId, len: usize) -> bool {
        self.machine.has_room(peer, len)
    }

    /// Appends one datagram of at most `limit` bytes for `peer` to `buf`
    /// and returns its length; `None` (and `buf` as it was) when there is
    /// nothing to send.
    fn build(
        &mut self,
        now: Instant,
        peer: NodeId,
        buf: &mut Vec<u8>,
        limit: usize,
    ) -> Option<usize> {
        let start = buf.len();
        let sealed = self.secure.is_some();
        // Frames end where the tag (if any) still fits the limit.
        let limit = if sealed {
            limit.saturating_sub(TAG_LEN)
        } else {
            limit
        };
        let max = start + limit;
        if sealed {
            buf.resize(start + DATA_HEADER_LEN, 0); // written by the seal
        } else {
            wire::encode_header(buf, self.id(), peer);
        }
        // Control frames first: they are small and unblock the peer.
        while let Some(f) = self.machine.poll_control(peer) {
            if buf.len() + f.encoded_len() > max {
                self.machine.unpoll_control(peer, f);
                break;
            }
            f.encode(buf);
        }
        // Then token fragments while the window, the pacer and the datagram
        // allow; the datagram is one transmission `tx`. The path is looked
        // up once, and its window and pacing rate read once: nothing in
        // the loop changes them.
        let Some(p) = self.paths.get_mut(&peer) else {
            return self.finish_build(peer, buf, start);
        };
        let window = match &p.guard {
            Some(g) => g.limit(p.cc.window()),
            None => p.cc.window(),
        };
        let rate = p.cc.pacing_rate(p.rtt.smoothed());
        // The pacer is asked once for the largest datagram: if that may
        // leave, every fragment may (nothing in the loop spends its tokens),
        // and the loop asks nothing per fragment.
        let paced = p.pacer.delay(now, rate, limit as u64).is_none();
        let tx = self.next_tx;
        let mut frags: Vec<(u64, u64)> = Vec::new();
        let mut first = true;
        loop {
            let used = buf.len() - start;
            let admit = |len: usize| {
                if used + len > limit {
                    return false;
                }
                // What the datagram weighs with this fragment in it.
                let bytes = (used + len) as u64;
                if p.bytes_in_flight + bytes > window {
                    p.pace_at = None; // an acknowledgement, not a timer, opens the window
                    return false;
                }
                p.pace_at = if paced {
                    None
                } else {
                    p.pacer.delay(now, rate, bytes)
                };
                p.pace_at.is_none()
            };
            let Some((s, offset, first_tx)) =
                self.machine.take_fragment_into(peer, now, tx, admit, buf)
            else {
                break;
            };
            frags.push((s, offset));
            first &= first_tx;
            self.stats.fragments_sent += 1;
        }
        if !frags.is_empty() {
            self.next_tx += 1;
            let bytes = (buf.len() - start) as u64;
            let app_limited = !self.machine.has_fragment(peer);
            p.pacer.on_sent(bytes);
            p.bytes_in_flight += bytes;
            p.in_flight.insert(
                tx,
                Tx {
                    sent_at: now,
                    bytes,
                    open: frags.len(),
                    frags,
                    credited: false,
                    first,
                    app_limited,
                },
            );
            p.cc.on_sent(now, bytes, p.bytes_in_flight);
            if let Some(g) = p.guard.as_mut() {
                g.on_sent(p.bytes_in_flight);
            }
        }
        self.finish_build(peer, buf, start)
    }

    /// The length of the datagram appended at `start` (sealed, for an
    /// authenticated node), or `None` (and the header taken back) when it
    /// holds no frame.
    fn finish_build(&mut self, peer: NodeId, buf: &mut Vec<u8>, start: usize) -> Option<usize> {
        let header = if self.secure.is_some() {
            DATA_HEADER_LEN
        } else {
            HEADER_LEN
        };
        if buf.len() == start + header {
            buf.truncate(start);
            return None;
        }
        if let Some(s) = self.secure.as_mut() {
            if !s.seal(peer, buf, start) {
                // Cannot happen after `session_ready`; nothing leaves
                // unsealed if it does (the fragments count as lost).
                buf.truncate(start);
                return None;
            }
        }
        Some(buf.len() - start)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let cfg = &self.cfg;
        let mut next: Option<Instant> = self.forget_at;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for (peer, p) in &self.paths {
            if let Some((_, t)) = p.in_flight.first_key_value() {
                consider(Some(t.sent_at + p.rtt.rto()));
            }
            if self.machine_has_fragment_cached(*peer) {
                consider(p.pace_at);
            }
            consider(p.request_at);
            consider(p.keepalive_at);
            consider(
                self.machine
                    .sender_idle_since(*peer)
                    .map(|t| t + cfg.idle_timeout),
            );
        }
        match self.secure.as_ref() {
            Some(s) => consider(s.poll_timeout()),
            None => consider(self.plain_discovering.values().map(|(_, t)| *t).min()),
        }
        next
    }

    fn machine_has_fragment_cached(&self, peer: NodeId) -> bool {
        self.machine.fragment_peers().any(|p| p == peer)
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let cfg = self.cfg.clone();
        match self.secure.as_mut() {
            Some(s) => {
                s.handle_timeout(now, &mut self.stats.security);
                self.stats.security = s.stats(self.stats.security);
            }
            None => self.plain_discovery_timeout(now),
        }
        let peers: Vec<NodeId> = self.order.clone();
        for p in self.paths.values_mut() {
            if p.pace_at.is_some_and(|t| t <= now) {
                p.pace_at = None; // the transmitter is polled next
            }
        }
        for peer in peers {
            // Datagrams that arrived but still have fragments awaiting an
            // acknowledgement a timeout later: those fragments go again.
            // No congestion signal: the datagram was counted as arrived.
            let Some(p) = self.paths.get(&peer) else {
                continue;
            };
            let rto = p.rtt.rto();
            let remnants: Vec<u64> = p
                .in_flight
                .iter()
                .take_while(|(_, t)| t.credited && t.sent_at + rto <= now)
                .map(|(&tx, _)| tx)
                .collect();
            self.declare_lost(now, peer, &remnants);
            // Retransmission timeout (RFC 6298 §5.4-5.6): everything in
            // flight to the peer is presumed lost.
            let (expired, oldest): (Vec<u64>, Option<Instant>) = match self.paths.get(&peer) {
                Some(p) => match p.in_flight.first_key_value() {
                    Some((_, t)) if t.sent_at + p.rtt.rto() <= now => {
                        (p.in_flight.keys().copied().collect(), Some(t.sent_at))
                    }
                    _ => (Vec::new(), None),
                },
                None => continue,
            };
            if !expired.is_empty() {
                self.nudge_session(now, peer, oldest);
                self.stats.rtos += 1;
                self.declare_lost(now, peer, &expired);
                if let Some(p) = self.paths.get_mut(&peer) {
                    p.cc.on_retransmission_timeout(now);
                    p.rtt.back_off();
                }
            }
            // l. 91: repeat an unanswered REQSLOTS.
            let p = self.paths.get_mut(&peer).expect("peer listed");
            if p.request_at.is_some_and(|t| t <= now) {
                p.request_at = None;
                self.nudge_session(now, peer, None);
                let p = self.paths.get_mut(&peer).expect("peer listed");
                if expired.is_empty() {
                    p.rtt.back_off();
                }
                self.machine.request_slots(now, peer);
                self.arm_request_timer(now, peer);
            }
            // Idle sender record: close it (l. 45-47).
            if self
                .machine
                .sender_idle_since(peer)
                .is_some_and(|t| t + cfg.idle_timeout <= now)
            {
                self.machine.close_if_idle(peer);
            }
            // l. 93: receiver keep-alive, backed off while unanswered.
            let has_receiver = self.machine.has_receiver(peer);
            let p = self.paths.get_mut(&peer).expect("peer listed");
            if !has_receiver {
                p.keepalive_at = None;
            } else {
                match p.keepalive_at {
                    None => p.keepalive_at = Some(now + cfg.keepalive),
                    Some(t) if t <= now => {
                        self.nudge_session(now, peer, None);
                        self.machine.keepalive(peer);
                        let p = self.paths.get_mut(&peer).expect("peer listed");
                        p.keepalive_backoff = (p.keepalive_backoff + 1).min(6);
                        p.keepalive_at = Some(now + cfg.keepalive * (1 << p.keepalive_backoff));
                    }
                    Some(_) => {}
                }
            }
        }
        if let Some(after) = cfg.forget_receivers_after {
            if self.forget_at.is_none_or(|t| t <= now) {
                self.machine.forget_idle_receivers(now - after);
                self.forget_at = Some(now + after / 4);
            }
        }
        self.drop_unused_paths();
    }

    /// A retransmission timer for `peer` fired: the session layer checks
    /// whether the peer has gone silent (and may have lost its sessions).
    /// `unanswered` is when the oldest datagram the timer gave up on was
    /// sent, for a retransmission timeout.
    fn nudge_session(&mut self, now: Instant, peer: NodeId, unanswered: Option<Instant>) {
        if let Some(s) = self.secure.as_mut() {
            s.nudge(now, peer, unanswered, &mut self.stats.security);
        }
    }

    /// Retries or gives up insecure discoveries.
    fn plain_discovery_timeout(&mut self, now: Instant) {
        let base = self.cfg.session.handshake_timeout;
        let tries = self.cfg.session.discovery_tries;
        let mut failed = Vec::new();
        for (&addr, (n, at)) in self.plain_discovering.iter_mut() {
            if *at <= now {
                if *n >= tries {
                    failed.push(addr);
                } else {
                    *n += 1;
                    *at = now + base * (1u32 << (*n).min(6));
                    self.plain_out.push_back((addr, key_request()));
                }
            }
        }
        for addr in failed {
            self.plain_discovering.remove(&addr);
            self.plain_discovered
                .push_back((addr, Err(DiscoveryError::Timeout(addr))));
        }
    }

    /// Arms timers after a call that changed the machine; the driver calls
    /// it implicitly through `handle_timeout`, tests through this.
    fn drop_unused_paths(&mut self) {
        // Paths of peers with no record and nothing in flight hold only an
        // address and estimates: keep a bounded number.
        let limit = self.cfg.machine.max_receivers.saturating_mul(2).max(1024);
        if self.paths.len() <= limit {
            return;
        }
        let (senders, receivers): (Vec<NodeId>, Vec<NodeId>) = (
            self.machine.sender_peers().collect(),
            self.machine.receiver_peers().collect(),
        );
        let machine = &self.machine;
        self.paths.retain(|peer, p| {
            senders.contains(peer)
                || receivers.contains(peer)
                || !p.in_flight.is_empty()
                || machine.control_peers().any(|c| c == *peer)
        });
        let paths = &self.paths;
        self.order.retain(|p| paths.contains_key(p));
        self.next_peer = 0;
    }
}
