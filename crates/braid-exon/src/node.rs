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

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_recovery::{Acked, Bbr, CcAlgorithm, CongestionController, Pacer, RttEstimator};
use bytes::Bytes;

use crate::guard::QueueLossGuard;
use crate::journal::Record;
use crate::machine::{Event, Feedback, Machine, MachineConfig, RestoreError, SendError};
use crate::wire::{self, Datagram, Frame, HEADER_LEN, TOKEN_OVERHEAD_MAX};
use crate::{MessageId, NodeId};

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
        }
    }
}

impl NodeConfig {
    /// Message bytes that fit one datagram next to the header and a TOKEN
    /// frame header.
    pub fn fragment_size(&self) -> usize {
        self.max_datagram_size
            .saturating_sub(HEADER_LEN + TOKEN_OVERHEAD_MAX)
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
/// use braid_exon::{ExonNode, NodeConfig, NodeId, Event};
/// use braid_core::Instant;
/// use bytes::Bytes;
///
/// let (a_addr, b_addr) = ("10.0.0.1:7".parse().unwrap(), "10.0.0.2:7".parse().unwrap());
/// let mut a = ExonNode::new(NodeConfig::default(), NodeId(1), 0);
/// let mut b = ExonNode::new(NodeConfig::default(), NodeId(2), 0);
/// a.add_peer(NodeId(2), b_addr);
/// let now = Instant::ZERO;
/// let id = a.send(now, NodeId(2), Bytes::from_static(b"exactly once")).unwrap();
/// let mut buf = Vec::new();
/// for _ in 0..5 {
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
/// assert_eq!(b.poll_event(), Some(Event::Received { from: NodeId(1), data: Bytes::from_static(b"exactly once") }));
/// assert_eq!(a.poll_event(), Some(Event::Delivered { to: NodeId(2), id }));
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
}

impl ExonNode {
    /// A node `id` whose durable clock holds `persisted_clock` (0 when new).
    pub fn new(mut cfg: NodeConfig, id: NodeId, persisted_clock: u64) -> ExonNode {
        cfg.max_datagram_size = cfg.max_datagram_size.min(MAX_DATAGRAM_SIZE);
        cfg.machine.max_fragment = cfg.fragment_size();
        let machine = Machine::new(id, cfg.machine.clone(), persisted_clock);
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
        }
    }

    /// A node restarted after a crash, from its durable clock and the
    /// records its [`JournalStore`](crate::journal::JournalStore) holds
    /// (`cfg.machine.journal` should be on, as in its previous life). Call
    /// [`add_peer`](Self::add_peer) for the peers it sends to; peers that
    /// send to it are learnt from their datagrams.
    pub fn restore(
        mut cfg: NodeConfig,
        id: NodeId,
        persisted_clock: u64,
        records: impl IntoIterator<Item = Record>,
        now: Instant,
    ) -> Result<ExonNode, RestoreError> {
        cfg.max_datagram_size = cfg.max_datagram_size.min(MAX_DATAGRAM_SIZE);
        cfg.machine.max_fragment = cfg.fragment_size();
        let machine = Machine::restore(id, cfg.machine.clone(), persisted_clock, records, now)?;
        let mut node = ExonNode::new(cfg, id, persisted_clock);
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

    /// Tells the node where `peer` is (until a datagram from it says
    /// otherwise).
    pub fn add_peer(&mut self, peer: NodeId, addr: SocketAddr) {
        self.path(peer).addr = Some(addr);
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
    pub fn handle_datagram(&mut self, now: Instant, src: SocketAddr, payload: Bytes) {
        self.stats.datagrams_received += 1;
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
        let peer = src_id;
        let p = self.path(peer);
        let moved = p.addr.is_some_and(|a| a != src);
        p.addr = Some(src);
        p.keepalive_backoff = 0;
        if moved {
            self.stats.address_changes += 1;
        }
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

    fn process_feedback(&mut self, now: Instant) {
        let mut touched: Vec<NodeId> = Vec::new();
        while let Some(fb) = self.machine.poll_feedback() {
            match fb {
                Feedback::Acked { peer, tx } => {
                    let Some(p) = self.paths.get_mut(&peer) else {
                        continue;
                    };
                    let Some(t) = p.in_flight.get_mut(&tx) else {
                        continue;
                    };
                    t.open = t.open.saturating_sub(1);
                    let credit = !t.credited;
                    t.credited = true;
                    let (sent_at, bytes, first, app_limited) =
                        (t.sent_at, t.bytes, t.first, t.app_limited);
                    if t.open == 0 {
                        p.in_flight.remove(&tx);
                    }
                    if !credit {
                        continue; // the datagram was counted at its first fragment
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
        for peer in touched {
            if let Some(p) = self.paths.get_mut(&peer) {
                p.cc.on_ack_end(now, p.bytes_in_flight);
            }
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
        let n = self.order.len();
        for k in 0..n {
            let i = (self.next_peer + k) % n;
            let peer = self.order[i];
            let Some(dst) = self.paths.get(&peer).and_then(|p| p.addr) else {
                continue;
            };
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
            self.stats.datagrams_sent += datagrams as u64;
            self.stats.bytes_sent += buf.len() as u64;
            return Some(Transmit {
                dst,
                size: buf.len(),
                segment_size: first,
                datagrams,
            });
        }
        None
    }

    /// Moves the events ready for the application to `out` (see
    /// [`poll_event`](Self::poll_event)), returning how many: the messages
    /// of a whole batch of datagrams at once.
    pub fn poll_events(&mut self, out: &mut Vec<Event>) -> usize {
        let before = out.len();
        while let Some(ev) = self.machine.poll_event() {
            out.push(ev);
        }
        out.len() - before
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
        let max = start + limit;
        wire::encode_header(buf, self.id(), peer);
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
            return Self::finish_build(buf, start);
        };
        let window = match &p.guard {
            Some(g) => g.limit(p.cc.window()),
            None => p.cc.window(),
        };
        let rate = p.cc.pacing_rate(p.rtt.smoothed());
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
                p.pace_at = p.pacer.delay(now, rate, bytes);
                p.pace_at.is_none()
            };
            let Some((f, first_tx)) = self.machine.take_fragment(peer, now, tx, admit) else {
                break;
            };
            let Frame::Token { s, offset, .. } = &f else {
                break;
            };
            frags.push((*s, *offset));
            first &= first_tx;
            f.encode(buf);
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
        Self::finish_build(buf, start)
    }

    /// The length of the datagram appended at `start`, or `None` (and the
    /// header taken back) when it holds no frame.
    fn finish_build(buf: &mut Vec<u8>, start: usize) -> Option<usize> {
        if buf.len() == start + HEADER_LEN {
            buf.truncate(start);
            return None;
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
        next
    }

    fn machine_has_fragment_cached(&self, peer: NodeId) -> bool {
        self.machine.fragment_peers().any(|p| p == peer)
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let cfg = self.cfg.clone();
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
            let expired: Vec<u64> = match self.paths.get(&peer) {
                Some(p) => match p.in_flight.first_key_value() {
                    Some((_, t)) if t.sent_at + p.rtt.rto() <= now => {
                        p.in_flight.keys().copied().collect()
                    }
                    _ => Vec::new(),
                },
                None => continue,
            };
            if !expired.is_empty() {
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
