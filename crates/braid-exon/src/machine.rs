//! Algorithm 1 of the Exon paper (Kassam, Almeida, Shoker, §III-C) as a
//! sans-IO state machine over frames, with the paper's future work and the
//! fixes listed in the crate documentation.
//!
//! The machine knows nothing of datagrams, timers or congestion: frames
//! come in ([`Machine::handle_frame`]), frames go out (control frames from
//! [`Machine::poll_control`], token fragments from
//! [`Machine::next_fragment`] when the transmitter has room), and timers
//! are the transmitter's business: it calls the pieces of the algorithm's
//! `periodically` block ([`Machine::retransmit_all`],
//! [`Machine::request_slots`], [`Machine::keepalive`]) when they are due.
//! The model checker drives the very same machine with a network that
//! loses, duplicates and reorders frames.
//!
//! Comments `(l. N)` refer to the line numbers of Algorithm 1.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use braid_core::Instant;
use bytes::Bytes;

use crate::clock::Clock;
use crate::journal::Record;
use crate::wire::{self, Frame, CLOCK_MAX, MAX_LIST, MAX_MESSAGE, MAX_RANGES};
use crate::{MessageId, NodeId};

mod durable;
mod slot_map;
mod slot_set;
use durable::Journal;
use slot_map::SlotMap;
use slot_set::SlotSet;
pub use durable::{DurablePartial, DurableReceiver, DurableSender, DurableState, RestoreError};

/// Limits and sizes of a [`Machine`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MachineConfig {
    /// Initial and smallest window `N` (envelopes kept in reserve, l. 17).
    pub min_window: u64,
    /// Largest window `N`; also the most slots a receiver grants one sender.
    pub max_window: u64,
    /// Message bytes per TOKEN fragment.
    pub max_fragment: usize,
    /// Most messages queued or unacknowledged per peer before
    /// [`SendError::WindowFull`].
    pub max_outstanding: usize,
    /// Most message bytes queued or unacknowledged per peer.
    pub max_outstanding_bytes: u64,
    /// Most receiver records kept; beyond it, unpinned ones are evicted.
    pub max_receivers: usize,
    /// Most bytes of receiver state reserved for all senders together:
    /// [`RECORD_BYTES`] per receiver record plus [`SLOT_BYTES`] per live or
    /// pinned slot. A slot request beyond it is granted what fits, or
    /// deferred (counted in [`MachineStats::deferred`]; its sender asks
    /// again, its messages wait queued: nothing is dropped).
    pub max_reserved_bytes: u64,
    /// Most bytes held in partly received fragmented messages.
    pub max_reassembly_bytes: u64,
    /// Clock reservation block.
    pub clock_block: u64,
    /// Keep the sender and receiver records durable through the
    /// [`journal`](crate::journal): every accepted message is then
    /// delivered exactly once across crashes of either node, and nothing
    /// leaves before the journal position it depends on is persisted.
    /// Off, only the clock is durable and a crash leaves the messages it
    /// held in doubt.
    pub journal: bool,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            min_window: 16,
            max_window: 16_384,
            max_fragment: 1_300,
            max_outstanding: 65_536,
            max_outstanding_bytes: 64 << 20,
            max_receivers: 65_536,
            max_reserved_bytes: 64 << 20,
            max_reassembly_bytes: 256 << 20,
            clock_block: 1 << 20,
            journal: false,
        }
    }
}

/// Bytes of reservation a receiver record counts for (its map entry, the
/// empty sets and counters: an upper estimate), see
/// [`MachineConfig::max_reserved_bytes`].
pub const RECORD_BYTES: u64 = 256;
/// Bytes of reservation a live or pinned slot counts for: an upper bound.
/// Slots are kept as runs (16 bytes each, in a deque whose capacity stays
/// within four times its length), and a set scattered by tokens consumed
/// out of order has at most one run per slot: at most 64 bytes a slot.
/// The usual contiguous runs cost a few bytes per thousand slots, so the
/// budget [`MachineConfig::max_reserved_bytes`] is met with room to spare;
/// the default (64 MiB) still grants a million slots, sixteen senders at
/// the largest window.
pub const SLOT_BYTES: u64 = 64;

/// Why [`Machine::send`] refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The message is larger than Exon carries.
    #[error("message of {0} bytes exceeds the 16 MiB limit")]
    TooLarge(usize),
    /// Too many messages to this peer are queued or unacknowledged: wait
    /// for [`Event::Delivered`] notifications and retry.
    #[error("outstanding window to node {0} is full")]
    WindowFull(NodeId),
    /// A node cannot send to itself.
    #[error("node {0} cannot send to itself")]
    SelfSend(NodeId),
    /// The node has no address for this peer ([`ExonNode`](crate::ExonNode)
    /// only): call `add_peer` first.
    #[error("no address known for node {0}")]
    UnknownPeer(NodeId),
    /// The 62-bit clock is exhausted (after 4.6·10^18 identifiers).
    #[error("node clock exhausted")]
    ClockExhausted,
}

/// What the application learns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Event {
    /// A message from `from`, delivered exactly once.
    Received {
        /// Its sender.
        from: NodeId,
        /// The whole message.
        data: Bytes,
    },
    /// The message was delivered at its destination (its token was
    /// acknowledged).
    Delivered {
        /// Its destination.
        to: NodeId,
        /// What [`Machine::send`] returned.
        id: MessageId,
    },
    /// The destination restarted while the message was unacknowledged: it
    /// was delivered at most once, perhaps never, and that cannot be known.
    InDoubt {
        /// Its destination.
        to: NodeId,
        /// What [`Machine::send`] returned.
        id: MessageId,
    },
}

/// What the transmitter learns about fragments it handed out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feedback {
    /// `fragments` fragments of transmission `tx` (from
    /// [`Machine::next_fragment`]) reached the peer: the tokens of one
    /// datagram are acknowledged together, and a run of them makes one
    /// report.
    Acked {
        /// The peer.
        peer: NodeId,
        /// The transmission.
        tx: u64,
        /// How many of its fragments.
        fragments: u32,
    },
    /// Transmission `tx` no longer matters (its token was NACKed or is in
    /// doubt); it may or may not have arrived.
    Forgotten {
        /// The peer.
        peer: NodeId,
        /// The transmission.
        tx: u64,
    },
    /// A REQSLOTS sent at `sent_at` and never repeated was answered: an RTT
    /// sample.
    SlotsAnswered {
        /// The peer.
        peer: NodeId,
        /// When the request left.
        sent_at: Instant,
    },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MachineStats {
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Tokens that arrived for an already consumed slot (acknowledged, not
    /// delivered: the at-most-once check at work).
    pub duplicate_tokens: u64,
    /// NACKs sent (tokens of a forgotten incarnation).
    pub nacks_sent: u64,
    /// STALE answers sent (tokens from before a restart).
    pub stale_sent: u64,
    /// Messages queued again after a NACK.
    pub resent_after_nack: u64,
    /// Receiver records evicted to respect `max_receivers`.
    pub evicted: u64,
    /// REQSLOTS refused because every receiver record was pinned.
    pub refused: u64,
    /// Slot requests cut short or deferred because the reservation budget
    /// ([`MachineConfig::max_reserved_bytes`]) was spent.
    pub deferred: u64,
    /// Frames naming an incarnation this node never created.
    pub bogus: u64,
    /// Fragments dropped for lack of reassembly memory.
    pub reassembly_dropped: u64,
}

/// A message waiting for an envelope (`S.msg`, l. 7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Queued {
    id: MessageId,
    data: Bytes,
}

/// Transmission state of one fragment of a token (16 bytes: the token
/// map holds one per small message, and its size is what inserting and
/// settling tokens cost in cache misses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Frag {
    /// To be sent; again if `sent` (handed out before, or restored from
    /// the journal, when it may have been).
    Pending { sent: bool },
    /// Handed to the transmitter as `tx`.
    InFlight { tx: u64, retransmitted: bool },
    /// The receiver holds it (FRAGACK) or it was lost after being held.
    Held,
}

/// The fragments of one token. Almost every message fits one datagram,
/// so one fragment is kept inline: a token costs no allocation beyond its
/// map entry on the hot path of small messages. Longer messages keep
/// theirs behind a thin pointer, which keeps this 16 bytes (in the spare
/// values of [`Frag`]'s tag).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Frags {
    One(Frag),
    Many(Box<ManyFrags>),
}

/// The fragments of a message longer than one datagram.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ManyFrags(Box<[Frag]>);

impl Frags {
    /// `n` fragments, all [`Frag::Pending`], `sent` before or not.
    fn pending(n: usize, sent: bool) -> Frags {
        if n <= 1 {
            Frags::One(Frag::Pending { sent })
        } else {
            Frags::Many(Box::new(ManyFrags(
                vec![Frag::Pending { sent }; n].into_boxed_slice(),
            )))
        }
    }

    /// Was any fragment ever handed out (for Karn's rule on re-sends)?
    fn sent_any(&self) -> bool {
        self.iter().any(|f| *f != Frag::Pending { sent: false })
    }
}

impl std::ops::Deref for Frags {
    type Target = [Frag];
    fn deref(&self) -> &[Frag] {
        match self {
            Frags::One(f) => std::slice::from_ref(f),
            Frags::Many(v) => &v.0,
        }
    }
}

impl std::ops::DerefMut for Frags {
    fn deref_mut(&mut self) -> &mut [Frag] {
        match self {
            Frags::One(f) => std::slice::from_mut(f),
            Frags::Many(v) => &mut v.0,
        }
    }
}

/// A token: message plus the identity `(s, rck)` of the slot it consumes
/// (Definition 3). Unlike l. 90, a token keeps the incarnation it was
/// created in: re-tagging it with a newer `rck` could match a slot the
/// receiver created again after forgetting the old incarnation and deliver
/// the message twice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Token {
    rck: u64,
    id: MessageId,
    data: Bytes,
    frags: Frags,
    /// Journal position its `Tokenize` record needs to be durable at
    /// before any fragment leaves.
    seq: u64,
}

/// Sender-side half-connection record `S` (l. 4-10).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SendRec {
    /// `sck` (l. 5).
    sck: u64,
    /// `rck` (l. 6): incarnation of the receiver's record, once known.
    rck: Option<u64>,
    /// `msg` (l. 7).
    msg: VecDeque<Queued>,
    /// `env` (l. 8): always contiguous, so a range; `env_rck` is the
    /// incarnation its slots live in.
    env: Range<u64>,
    env_rck: u64,
    /// `tok` (l. 9), by slot: made in ascending order.
    tok: SlotMap<Token>,
    /// Fragments to send, `(s, fragment)`; stale entries skipped.
    ready: VecDeque<(u64, u32)>,
    /// Window `N` for this peer (l. 17), set from the measured BDP.
    window: u64,
    /// Outstanding REQSLOTS `(s, n, sent_at, repeated)`.
    request: Option<(u64, u64, Instant, bool)>,
    /// Bytes of queued and unacknowledged messages.
    bytes: u64,
    last_activity: Instant,
}

impl SendRec {
    fn new(sck: u64, window: u64, now: Instant) -> Self {
        SendRec {
            sck,
            rck: None,
            msg: VecDeque::new(),
            env: sck..sck,
            env_rck: 0,
            tok: SlotMap::default(),
            ready: VecDeque::new(),
            window,
            request: None,
            bytes: 0,
            last_activity: now,
        }
    }

    /// Garbage-collection frontier `l` (l. 40-42): no token or envelope
    /// below it. Tokens of a dead incarnation still count: their fate is
    /// not settled.
    fn frontier(&self) -> u64 {
        // Tokens are made from the lowest envelopes, so every token lies
        // below every envelope, and an empty `env` starts at `sck`.
        self.tok
            .first()
            .map_or(self.env.start, |(s, _)| s.min(self.env.start))
    }

    fn env_len(&self) -> u64 {
        self.env.end - self.env.start
    }

    /// The journal record describing this header.
    fn header(&self, peer: NodeId) -> Record {
        Record::Sender {
            peer,
            sck: self.sck,
            rck: self.rck,
            env_start: self.env.start,
            env_end: self.env.end,
            env_rck: self.env_rck,
        }
    }
}

/// A partly received fragmented message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Partial {
    data: Vec<u8>,
    /// Disjoint, sorted byte ranges held.
    have: Vec<(u64, u64)>,
}

impl Partial {
    fn insert(&mut self, offset: u64, bytes: &[u8]) {
        let (a, b) = (offset, offset + bytes.len() as u64);
        self.data[a as usize..b as usize].copy_from_slice(bytes);
        let mut merged = Vec::with_capacity(self.have.len() + 1);
        let (mut lo, mut hi) = (a, b);
        for &(x, y) in &self.have {
            if y < lo || x > hi {
                merged.push((x, y));
            } else {
                lo = lo.min(x);
                hi = hi.max(y);
            }
        }
        merged.push((lo, hi));
        merged.sort_unstable();
        self.have = merged;
    }

    fn complete(&self) -> bool {
        self.have.len() == 1 && self.have[0] == (0, self.data.len() as u64)
    }
}

/// Receiver-side half-connection record `R` (l. 11-15).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RecvRec {
    /// `sck` (l. 12): one past the highest slot created.
    sck: u64,
    /// `rck` (l. 13): this incarnation.
    rck: u64,
    /// `slt` (l. 14): unconsumed slots.
    slt: SlotSet,
    /// Consumed slots at or above `frontier`: the sender may still hold
    /// their tokens (its ACK may be lost), so the record is *pinned* and
    /// may not be forgotten until the frontier passes them.
    consumed: SlotSet,
    /// Highest garbage-collection frontier `l` received.
    frontier: u64,
    /// Reassembly of fragmented tokens, by slot.
    partial: BTreeMap<u64, Partial>,
    last_activity: Instant,
}

impl RecvRec {
    fn pinned(&self) -> bool {
        !self.consumed.is_empty()
    }
    fn partial_bytes(&self) -> u64 {
        self.partial.values().map(|p| p.data.len() as u64).sum()
    }

    /// l. 53: forgets every slot, consumed slot and partial message below
    /// the new frontier `l`; returns the reassembly bytes freed.
    fn raise_frontier(&mut self, l: u64) -> u64 {
        self.frontier = l;
        self.slt.remove_below(l);
        self.consumed.remove_below(l);
        let kept = self.partial.split_off(&l);
        let freed = self.partial.values().map(|p| p.data.len() as u64).sum();
        self.partial = kept;
        freed
    }
}

/// The Exon protocol state of one node: the clock `ck` and the maps `S`
/// and `R` (l. 18-21), plus queues of frames to send.
///
/// ```
/// use braid_exon::{Machine, MachineConfig, NodeId, Event};
/// use braid_core::Instant;
/// use bytes::Bytes;
///
/// let now = Instant::ZERO;
/// let (a_id, b_id) = (NodeId(1), NodeId(2));
/// let mut a = Machine::new(a_id, MachineConfig::default(), 0);
/// let mut b = Machine::new(b_id, MachineConfig::default(), 0);
/// let id = a.send(now, b_id, Bytes::from_static(b"hello")).unwrap();
/// // Shuttle frames (a perfect network) until nothing moves.
/// for _ in 0..10 {
///     for (m, peer) in [(&mut a, b_id), (&mut b, a_id)] {
///         if let Some(limit) = m.clock_request() { m.clock_persisted(limit); }
///     }
///     while let Some(f) = a.poll_control(b_id) { b.handle_frame(now, a_id, f); }
///     while let Some(f) = a.next_fragment(b_id, now, 0) { b.handle_frame(now, a_id, f); }
///     while let Some(f) = b.poll_control(a_id) { a.handle_frame(now, b_id, f); }
/// }
/// assert_eq!(b.poll_event(), Some(Event::Received { from: a_id, data: Bytes::from_static(b"hello") }));
/// assert_eq!(a.poll_event(), Some(Event::Delivered { to: b_id, id }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Machine {
    id: NodeId,
    cfg: MachineConfig,
    clock: Clock,
    /// `S_i` (l. 20).
    senders: BTreeMap<NodeId, SendRec>,
    /// `R_i` (l. 21).
    receivers: BTreeMap<NodeId, RecvRec>,
    /// Control frames ready to leave, per peer, each with the journal
    /// position that must be durable first.
    outbox: BTreeMap<NodeId, VecDeque<(u64, Frame)>>,
    /// Frames revealing clock values not yet durable: `(peer, frame, bound)`.
    blocked: VecDeque<(NodeId, Frame, u64)>,
    /// Events for the application, each with the journal position that
    /// must be durable first.
    events: VecDeque<(u64, Event)>,
    feedback: VecDeque<Feedback>,
    next_message: u64,
    reassembly_bytes: u64,
    /// Live and pinned slots of all receiver records.
    reserved_slots: u64,
    journal: Journal,
    stats: Counters,
}

/// Counters are observations, not protocol state: two machines that differ
/// only in them behave identically (and the model checker must see them as
/// one state, or every duplicate delivery would make a new one).
#[derive(Debug, Clone, Default)]
struct Counters(MachineStats);

impl PartialEq for Counters {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Counters {}
impl std::hash::Hash for Counters {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}
impl std::ops::Deref for Counters {
    type Target = MachineStats;
    fn deref(&self) -> &MachineStats {
        &self.0
    }
}
impl std::ops::DerefMut for Counters {
    fn deref_mut(&mut self) -> &mut MachineStats {
        &mut self.0
    }
}

/// Live and pinned slots of a receiver record.
fn slot_count(c: &RecvRec) -> u64 {
    c.slt.len() + c.consumed.len()
}

/// Byte range of fragment `i` of a `total`-byte message cut every
/// `frag_len` bytes.
fn fragment_bounds(i: u32, frag_len: usize, total: usize) -> (usize, usize) {
    let start = (i as usize).saturating_mul(frag_len).min(total);
    (start, start.saturating_add(frag_len).min(total))
}

/// A TOKEN fragment taken for transmission: token `(s, r)`, bytes `range`
/// of its message.
struct Fragment<'a> {
    s: u64,
    r: u64,
    message: &'a Bytes,
    range: Range<usize>,
}

/// The frames that list slots of one incarnation (l. 81 and the answers
/// for forgotten incarnations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotList {
    Ack,
    Nack,
    Stale,
}

impl SlotList {
    fn frame(self, r: u64, slots: Vec<u64>) -> Frame {
        match self {
            SlotList::Ack => Frame::Ack { r, slots },
            SlotList::Nack => Frame::Nack { r, slots },
            SlotList::Stale => Frame::Stale { r, slots },
        }
    }

    /// The incarnation and slots of `f`, if it is a list of this kind.
    fn of(self, f: &mut Frame) -> Option<(u64, &mut Vec<u64>)> {
        match (self, f) {
            (SlotList::Ack, Frame::Ack { r, slots })
            | (SlotList::Nack, Frame::Nack { r, slots })
            | (SlotList::Stale, Frame::Stale { r, slots }) => Some((*r, slots)),
            _ => None,
        }
    }
}

/// `EOsend` l. 23-25: the send record of `peer`, created at the node
/// clock (its header journaled) if there is none. A free function, so the
/// caller can keep the record while it uses the machine's other fields.
fn send_record<'a>(
    senders: &'a mut BTreeMap<NodeId, SendRec>,
    journal: &mut Journal,
    clock: &Clock,
    cfg: &MachineConfig,
    now: Instant,
    peer: NodeId,
) -> &'a mut SendRec {
    let fresh = !senders.contains_key(&peer);
    let c = senders
        .entry(peer)
        .or_insert_with(|| SendRec::new(clock.ck, cfg.min_window, now));
    if fresh {
        journal.log(|| c.header(peer));
    }
    c
}

/// Puts message `m` in the lowest envelope of `c` (l. 29-32): a token
/// whose fragments (of `frag` bytes) then wait for the transmitter (l. 33).
/// The caller checked that `c` has an envelope.
fn tokenize(c: &mut SendRec, journal: &mut Journal, peer: NodeId, frag: usize, m: Queued) {
    let e = c.env.start;
    c.env.start += 1;
    journal.log(|| Record::Tokenize { peer, s: e });
    let n = m.data.len().div_ceil(frag).max(1);
    let frags = Frags::pending(n, false);
    for i in 0..n {
        c.ready.push_back((e, i as u32));
    }
    c.tok.insert(
        e,
        Token {
            rck: c.env_rck,
            id: m.id,
            data: m.data,
            frags,
            seq: journal.seq,
        },
    );
}

/// Removes token `s` of incarnation `r` from `c`, reporting its
/// transmissions to the transmitter.
fn settle_token(
    c: &mut SendRec,
    feedback: &mut VecDeque<Feedback>,
    peer: NodeId,
    s: u64,
    r: u64,
    acked: bool,
) -> Option<Token> {
    let t = c.tok.remove_if(s, |t| t.rck == r)?;
    c.bytes -= t.data.len() as u64;
    for f in t.frags.iter() {
        if let Frag::InFlight { tx, .. } = f {
            if acked {
                push_acked(feedback, peer, *tx);
            } else {
                feedback.push_back(Feedback::Forgotten { peer, tx: *tx });
            }
        }
    }
    Some(t)
}

/// Reports a fragment of transmission `tx` to `peer` acknowledged: counted
/// in the report just before it when that names the same transmission
/// (one per datagram of small messages rather than one per message).
fn push_acked(feedback: &mut VecDeque<Feedback>, peer: NodeId, tx: u64) {
    if let Some(Feedback::Acked {
        peer: p,
        tx: t,
        fragments,
    }) = feedback.back_mut()
    {
        if *p == peer && *t == tx && *fragments < u32::MAX {
            *fragments += 1;
            return;
        }
    }
    feedback.push_back(Feedback::Acked {
        peer,
        tx,
        fragments: 1,
    });
}

impl Machine {
    /// Bytes of receiver state reserved now (see
    /// [`MachineConfig::max_reserved_bytes`]): never above that budget
    /// but for records restored from a journal.
    pub fn reserved_bytes(&self) -> u64 {
        self.receivers.len() as u64 * RECORD_BYTES + self.reserved_slots * SLOT_BYTES
    }

    /// A node `id` starting from the durable clock value `persisted_clock`
    /// (0 for a new node; after a crash, what its
    /// [`ClockStore`](crate::clock::ClockStore) holds).
    pub fn new(id: NodeId, cfg: MachineConfig, persisted_clock: u64) -> Machine {
        let clock = Clock::boot(persisted_clock, cfg.clock_block);
        let cfg_journal = cfg.journal;
        Machine {
            id,
            cfg,
            clock,
            senders: BTreeMap::new(),
            receivers: BTreeMap::new(),
            outbox: BTreeMap::new(),
            blocked: VecDeque::new(),
            events: VecDeque::new(),
            feedback: VecDeque::new(),
            next_message: 0,
            reassembly_bytes: 0,
            reserved_slots: 0,
            journal: Journal {
                on: cfg_journal,
                covers_history: cfg_journal && persisted_clock == 0,
                ..Journal::default()
            },
            stats: Counters::default(),
        }
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The configuration.
    pub fn config(&self) -> &MachineConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &MachineStats {
        &self.stats.0
    }

    /// The node clock `ck`.
    pub fn clock(&self) -> u64 {
        self.clock.ck
    }

    /// The durable clock limit this machine knows of.
    pub fn persisted_clock(&self) -> u64 {
        self.clock.persisted
    }

    /// Number of sender and receiver records: `(|S|, |R|)`. Both are 0
    /// once all conversations have ended: only the clock remains.
    pub fn records(&self) -> (usize, usize) {
        (self.senders.len(), self.receivers.len())
    }

    /// Messages queued or unacknowledged to `peer`.
    pub fn outstanding(&self, peer: NodeId) -> usize {
        self.senders
            .get(&peer)
            .map_or(0, |c| c.msg.len() + c.tok.len())
    }

    /// True when nothing is left to do: no records, nothing to send, no
    /// event or feedback pending.
    pub fn is_idle(&self) -> bool {
        self.senders.is_empty()
            && self.receivers.is_empty()
            && self.outbox.values().all(VecDeque::is_empty)
            && self.blocked.is_empty()
            && self.journal.pending.is_empty()
    }

    // ----- the durable clock ------------------------------------------------

    /// A clock limit to make durable, if one is wanted: store it, then call
    /// [`clock_persisted`](Self::clock_persisted).
    pub fn clock_request(&self) -> Option<u64> {
        (self.clock.wanted > self.clock.persisted).then_some(self.clock.wanted)
    }

    /// The clock is durably at least `limit`: frames waiting for it leave.
    pub fn clock_persisted(&mut self, limit: u64) {
        if limit <= self.clock.persisted {
            return;
        }
        self.clock.persisted = limit;
        let mut still = VecDeque::new();
        while let Some((peer, frame, bound)) = self.blocked.pop_front() {
            if self.clock.covers(bound) {
                self.push_out(peer, frame);
            } else {
                still.push_back((peer, frame, bound));
            }
        }
        self.blocked = still;
        self.clock.want(self.clock.ck);
    }

    /// Queue a frame that reveals clock values below `bound`: it leaves
    /// only once the clock is durably there.
    fn emit_gated(&mut self, peer: NodeId, frame: Frame, bound: u64) {
        self.clock.want(bound);
        if self.clock.covers(bound) && self.blocked.iter().all(|(p, _, _)| *p != peer) {
            self.push_out(peer, frame);
        } else {
            self.blocked.push_back((peer, frame, bound));
        }
    }

    /// Queue a control frame, superseding an unsent REQSLOTS and
    /// dropping a duplicate SLOTS (piggybacking happens when the
    /// transmitter packs the queue into datagrams; slot lists, ACK, NACK
    /// and STALE, are coalesced by [`push_slot`](Self::push_slot)).
    fn push_out(&mut self, peer: NodeId, frame: Frame) {
        // Whatever the frame says may depend on every change journaled so
        // far: it leaves once they are durable.
        let gate = self.journal.seq;
        let q = self.outbox.entry(peer).or_default();
        match &frame {
            Frame::ReqSlots { .. } => {
                q.retain(|(_, f)| !matches!(f, Frame::ReqSlots { .. }));
            }
            Frame::Slots { .. } => {
                if q.iter().any(|(_, f)| *f == frame) {
                    return;
                }
            }
            // Built by `push_slot`, which coalesces them.
            Frame::Ack { .. } | Frame::Nack { .. } | Frame::Stale { .. } => {}
            Frame::FragAck { s, r, .. } => {
                q.retain(
                    |(_, f)| !matches!(f, Frame::FragAck { s: s2, r: r2, .. } if s2 == s && r2 == r),
                );
            }
            Frame::Token { .. } => {}
        }
        q.push_back((gate, frame));
    }

    /// Queue slot `s` of incarnation `r` for a `kind` list to `peer`: added
    /// to such a list queued recently when it can be (ascending, within
    /// [`MAX_LIST`]), so that one frame acknowledges many tokens and a
    /// small message costs no frame, and no allocation, of its own.
    fn push_slot(&mut self, peer: NodeId, kind: SlotList, r: u64, s: u64) {
        // Like any frame, it leaves once what it reports is durable.
        let gate = self.journal.seq;
        let q = self.outbox.entry(peer).or_default();
        for (at, f) in q.iter_mut().rev().take(4) {
            let Some((r2, l)) = kind.of(f) else {
                continue;
            };
            if r2 != r {
                continue;
            }
            if (l.len() as u64) < MAX_LIST && l.last().is_some_and(|&x| x < s) {
                l.push(s);
                *at = gate;
                return;
            }
            if l.contains(&s) {
                return;
            }
        }
        let mut slots = Vec::with_capacity(16);
        slots.push(s);
        q.push_back((gate, kind.frame(r, slots)));
    }

    // ----- application side -------------------------------------------------

    /// `EOsend(j, m)` (l. 22-35): queue `data` for `peer`; it is delivered
    /// there exactly once, and [`Event::Delivered`] with the returned id
    /// follows.
    pub fn send(
        &mut self,
        now: Instant,
        peer: NodeId,
        data: Bytes,
    ) -> Result<MessageId, SendError> {
        self.check_send(peer, data.len())?;
        if let Some(c) = self.senders.get(&peer) {
            if c.msg.len() + c.tok.len() >= self.cfg.max_outstanding
                || c.bytes + data.len() as u64 > self.cfg.max_outstanding_bytes
            {
                return Err(SendError::WindowFull(peer));
            }
        }
        let id = MessageId(self.next_message);
        self.next_message += 1;
        let c = send_record(&mut self.senders, &mut self.journal, &self.clock, &self.cfg, now, peer);
        self.journal.log(|| Record::Enqueue {
            peer,
            id,
            data: data.clone(),
        });
        c.bytes += data.len() as u64;
        c.last_activity = now;
        c.msg.push_back(Queued { id, data });
        // l. 28-33 (an envelope is at hand) or l. 35 (queue it).
        self.assign(peer);
        // l. 30-31 with low/high watermarks instead of "|env| = N - 1".
        self.maybe_request(now, peer);
        Ok(id)
    }

    /// `EOsend` (l. 22-35) for a run of messages to one peer, in order:
    /// what [`send`](Self::send) does for each, with the record looked up
    /// once, each message paired with an envelope as it comes when one is
    /// at hand (l. 28-33), and slots requested once for the whole run
    /// (l. 30-31): the per-message cost of small messages.
    ///
    /// Messages are taken from `msgs` while the outstanding window has
    /// room; the first that does not fit stays in `msgs` (no
    /// [`SendError::WindowFull`]: send the rest after
    /// [`Event::Delivered`] notifications). The identifiers of the
    /// messages taken are appended to `ids`; returns their bytes. An error
    /// ([`SendError::TooLarge`], [`SendError::SelfSend`],
    /// [`SendError::ClockExhausted`]) leaves the message that caused it,
    /// and those after it, in `msgs`; those before it were sent.
    pub fn send_batch(
        &mut self,
        now: Instant,
        peer: NodeId,
        msgs: &mut std::vec::IntoIter<Bytes>,
        ids: &mut Vec<MessageId>,
    ) -> Result<u64, SendError> {
        let Some(first) = msgs.as_slice().first() else {
            return Ok(0);
        };
        // The checks `send` makes before it creates a record.
        self.check_send(peer, first.len())?;
        let frag = self.cfg.max_fragment.max(1);
        let (max_msgs, max_bytes) = (self.cfg.max_outstanding, self.cfg.max_outstanding_bytes);
        let c = send_record(&mut self.senders, &mut self.journal, &self.clock, &self.cfg, now, peer);
        let mut bytes = 0;
        let result = loop {
            let Some(m) = msgs.as_slice().first() else {
                break Ok(bytes);
            };
            let len = m.len() as u64;
            if len > MAX_MESSAGE {
                break Err(SendError::TooLarge(m.len()));
            }
            if c.msg.len() + c.tok.len() >= max_msgs || c.bytes + len > max_bytes {
                break Ok(bytes); // the window is full: the rest waits
            }
            let Some(data) = msgs.next() else {
                break Ok(bytes);
            };
            let id = MessageId(self.next_message);
            self.next_message += 1;
            self.journal.log(|| Record::Enqueue {
                peer,
                id,
                data: data.clone(),
            });
            c.bytes += len;
            bytes += len;
            ids.push(id);
            let m = Queued { id, data };
            // l. 28-33 (an envelope is at hand: nothing queued waits for
            // one, or it would have taken it) or l. 35 (queue it).
            if c.msg.is_empty() && !c.env.is_empty() {
                tokenize(c, &mut self.journal, peer, frag, m);
            } else {
                c.msg.push_back(m);
            }
        };
        if bytes > 0 {
            c.last_activity = now;
        }
        // l. 30-31 with low/high watermarks, once for the run.
        self.maybe_request(now, peer);
        result
    }

    /// The checks of `EOsend` before a message to `peer` is taken: its
    /// size, the destination, and a clock with room left for its slots.
    fn check_send(&self, peer: NodeId, len: usize) -> Result<(), SendError> {
        if len as u64 > MAX_MESSAGE {
            return Err(SendError::TooLarge(len));
        }
        if peer == self.id {
            return Err(SendError::SelfSend(peer));
        }
        if self.clock.ck >= CLOCK_MAX - (1 << 32) {
            return Err(SendError::ClockExhausted);
        }
        Ok(())
    }

    /// Would [`send`](Self::send) find room for a `len`-byte message to
    /// `peer` in its outstanding window now? A driver holding messages
    /// asks first rather than hand one over only to get
    /// [`SendError::WindowFull`] (and its bytes back by cloning).
    pub fn has_room(&self, peer: NodeId, len: usize) -> bool {
        self.senders.get(&peer).is_none_or(|c| {
            c.msg.len() + c.tok.len() < self.cfg.max_outstanding
                && c.bytes + len as u64 <= self.cfg.max_outstanding_bytes
        })
    }

    /// Sets the window `N` for `peer` (clamped to the configured range),
    /// typically from the measured bandwidth-delay product.
    pub fn set_window(&mut self, peer: NodeId, n: u64) {
        let n = n.clamp(self.cfg.min_window, self.cfg.max_window);
        if let Some(c) = self.senders.get_mut(&peer) {
            c.window = n;
        }
    }

    /// The next event for the application.
    ///
    /// With the journal on, events wait until what they report is durable,
    /// and taking a [`Event::Received`] is itself journaled: hand the
    /// message to the application only once
    /// [`journal_seq`](Self::journal_seq), read right after this call, is
    /// persisted, so a restart never hands it out again.
    pub fn poll_event(&mut self) -> Option<Event> {
        let &(gate, _) = self.events.front()?;
        if gate > self.journal.durable {
            return None;
        }
        let (_, ev) = self.events.pop_front()?;
        if matches!(ev, Event::Received { .. }) {
            self.journal.log(|| Record::Taken);
        }
        Some(ev)
    }

    /// Moves every event ready for the application to `out`, in order
    /// (as [`poll_event`](Self::poll_event) does one at a time; the same
    /// rule applies: hand the messages out once
    /// [`journal_seq`](Self::journal_seq), read right after this call, is
    /// persisted). Returns how many.
    pub fn drain_events(&mut self, out: &mut Vec<Event>) -> usize {
        let durable = self.journal.durable;
        // Events leave in order: up to the first whose journal position
        // is not durable yet.
        let ready = self
            .events
            .iter()
            .take_while(|&&(gate, _)| gate <= durable)
            .count();
        out.reserve(ready);
        for (_, ev) in self.events.drain(..ready) {
            if matches!(ev, Event::Received { .. }) {
                self.journal.log(|| Record::Taken);
            }
            out.push(ev);
        }
        ready
    }

    /// The next piece of feedback for the transmitter.
    pub fn poll_feedback(&mut self) -> Option<Feedback> {
        self.feedback.pop_front()
    }

    /// Pairs queued messages with envelopes into tokens (l. 29-32 and
    /// l. 69-72); the fragments then wait for the transmitter (l. 33, 73).
    fn assign(&mut self, peer: NodeId) {
        let frag = self.cfg.max_fragment.max(1);
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        while !c.env.is_empty() {
            let Some(m) = c.msg.pop_front() else { break };
            tokenize(c, &mut self.journal, peer, frag, m);
        }
    }

    /// Requests slots when the envelopes in reserve fall to the low
    /// watermark `N/2` (instead of after every send, l. 30), asking for
    /// enough to reach the high watermark `N` (l. 38).
    fn maybe_request(&mut self, now: Instant, peer: NodeId) {
        let Some(c) = self.senders.get(&peer) else {
            return;
        };
        let have = c.env_len();
        let queued = c.msg.len() as u64;
        if have > c.window / 2 + queued {
            return;
        }
        let n = (c.window + queued).saturating_sub(have);
        if n == 0 {
            return;
        }
        // One request at a time per clock value; re-ask early only if the
        // need has doubled (the timer re-sends it otherwise, l. 91).
        if let Some((s, m, _, _)) = c.request {
            if s == c.sck && n < 2 * m {
                return;
            }
        }
        self.send_request(now, peer, n);
    }

    /// `requestSlots` (l. 36-47), as run by the periodic timer (l. 91):
    /// repeats an unanswered request, and closes an idle half-connection
    /// whose reserve is full (l. 44-47).
    pub fn request_slots(&mut self, now: Instant, peer: NodeId) {
        let Some(c) = self.senders.get(&peer) else {
            return;
        };
        let n = (c.window + c.msg.len() as u64).saturating_sub(c.env_len()); // l. 38
        if n > 0 {
            self.send_request(now, peer, n); // l. 43
        } else if c.tok.is_empty() && c.msg.is_empty() {
            self.close(peer); // l. 44-47
        }
    }

    /// Ends an idle sender half-connection (no queued message, no token):
    /// l. 45-47, triggered by an idle timeout instead of a full reserve.
    /// Returns whether it was closed.
    pub fn close_if_idle(&mut self, peer: NodeId) -> bool {
        match self.senders.get(&peer) {
            Some(c) if c.tok.is_empty() && c.msg.is_empty() => {
                self.close(peer);
                true
            }
            _ => false,
        }
    }

    /// Is the sender record for `peer` idle (closable) and since when?
    pub fn sender_idle_since(&self, peer: NodeId) -> Option<Instant> {
        self.senders
            .get(&peer)
            .filter(|c| c.tok.is_empty() && c.msg.is_empty())
            .map(|c| c.last_activity)
    }

    fn close(&mut self, peer: NodeId) {
        let Some(c) = self.senders.remove(&peer) else {
            return;
        };
        self.journal.log(|| Record::SenderClose { peer });
        // l. 45: tells the receiver it may forget every slot below sck.
        self.emit_gated(
            peer,
            Frame::ReqSlots {
                s: c.sck,
                n: 0,
                l: c.sck,
            },
            c.sck,
        );
        // l. 46: later records to anyone start above every envelope of this
        // one.
        self.clock.ck = self.clock.ck.max(c.sck);
    }

    fn send_request(&mut self, now: Instant, peer: NodeId, n: u64) {
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        let n = n.min(self.cfg.max_window);
        let l = c.frontier(); // l. 40-42
        let s = c.sck;
        let repeated = c.request.is_some_and(|(s2, _, _, _)| s2 == s);
        c.request = Some((s, n, now, repeated));
        // Envelope ids s..s+n are derived from our clock: it must be past
        // them (durably, before the frame leaves) so that a restarted node
        // never asks for the same range again.
        self.clock.ck = self.clock.ck.max(s + n);
        self.emit_gated(peer, Frame::ReqSlots { s, n, l }, s + n); // l. 43
    }

    // ----- timers (the `periodically` block, l. 87-93) ------------------------

    /// l. 88-90: every fragment handed out and not acknowledged is to be
    /// sent again.
    pub fn retransmit_all(&mut self, peer: NodeId) {
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        for (s, t) in c.tok.iter_mut() {
            for (i, f) in t.frags.iter_mut().enumerate() {
                if let Frag::InFlight { .. } = f {
                    *f = Frag::Pending { sent: true };
                    c.ready.push_back((s, i as u32));
                }
            }
        }
    }

    /// l. 92-93: the receiver's keep-alive, `SLOTS(sck, rck, 0)`. It lets a
    /// sender that forgot its record tell us to forget ours.
    pub fn keepalive(&mut self, peer: NodeId) {
        if let Some(c) = self.receivers.get(&peer) {
            let (s, r) = (c.sck, c.rck);
            self.emit_gated(peer, Frame::Slots { s, r, n: 0 }, r + 1);
        }
    }

    /// Peers with a sender record.
    pub fn sender_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.senders.keys().copied()
    }

    /// Does `peer` have a receiver record?
    pub fn has_receiver(&self, peer: NodeId) -> bool {
        self.receivers.contains_key(&peer)
    }

    /// Peers with a receiver record.
    pub fn receiver_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.receivers.keys().copied()
    }

    /// Does `peer` have a sender record with unacknowledged tokens or an
    /// unanswered request (so a retransmission timer should run)?
    pub fn sender_busy(&self, peer: NodeId) -> bool {
        self.senders
            .get(&peer)
            .is_some_and(|c| !c.tok.is_empty() || c.request.is_some() || !c.msg.is_empty())
    }

    /// Forgets receiver records idle since before `cutoff` that are not
    /// pinned: their senders can only lose a retransmission (they get a
    /// NACK and send again). Returns how many were forgotten.
    pub fn forget_idle_receivers(&mut self, cutoff: Instant) -> usize {
        let victims: Vec<NodeId> = self
            .receivers
            .iter()
            .filter(|(_, c)| !c.pinned() && c.last_activity < cutoff)
            .map(|(p, _)| *p)
            .collect();
        for p in &victims {
            self.drop_receiver(*p);
        }
        victims.len()
    }

    fn drop_receiver(&mut self, peer: NodeId) {
        if let Some(c) = self.receivers.remove(&peer) {
            self.reserved_slots -= slot_count(&c);
            self.reassembly_bytes -= c.partial_bytes();
            self.journal.log(|| Record::ReceiverDrop { peer });
        }
    }

    // ----- frames out -------------------------------------------------------

    /// The next control frame for `peer` (REQSLOTS, SLOTS, ACK, NACK,
    /// STALE, FRAGACK).
    pub fn poll_control(&mut self, peer: NodeId) -> Option<Frame> {
        let q = self.outbox.get_mut(&peer)?;
        if q.front()
            .is_some_and(|&(gate, _)| gate > self.journal.durable)
        {
            return None; // waits for the journal
        }
        let f = q.pop_front().map(|(_, f)| f);
        if q.is_empty() {
            self.outbox.remove(&peer);
        }
        f
    }

    /// Puts back a frame from [`poll_control`](Self::poll_control) that did
    /// not fit in the datagram.
    pub fn unpoll_control(&mut self, peer: NodeId, frame: Frame) {
        // It was let out, so what it depends on is durable.
        self.outbox.entry(peer).or_default().push_front((0, frame));
    }

    /// Are control frames waiting for `peer` (perhaps for the journal)?
    pub fn has_control(&self, peer: NodeId) -> bool {
        self.outbox.get(&peer).is_some_and(|q| !q.is_empty())
    }

    /// Peers with control frames waiting.
    pub fn control_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.outbox.keys().copied()
    }

    /// Is a token fragment waiting to be sent to `peer`?
    pub fn has_fragment(&mut self, peer: NodeId) -> bool {
        let Some(c) = self.senders.get_mut(&peer) else {
            return false;
        };
        while let Some(&(s, i)) = c.ready.front() {
            let t = c.tok.get(s);
            if matches!(t.and_then(|t| t.frags.get(i as usize)), Some(Frag::Pending { .. })) {
                // A token leaves only once the envelope it went into is
                // durable (tokens behind it are younger: they wait too).
                return t.is_some_and(|t| t.seq <= self.journal.durable);
            }
            c.ready.pop_front();
        }
        false
    }

    /// Encoded size of the TOKEN frame [`next_fragment`](Self::next_fragment)
    /// would return.
    pub fn peek_fragment_len(&mut self, peer: NodeId) -> Option<usize> {
        if !self.has_fragment(peer) {
            return None;
        }
        let frag_len = self.cfg.max_fragment.max(1);
        let c = self.senders.get(&peer)?;
        let &(s, i) = c.ready.front()?;
        let t = c.tok.get(s)?;
        let (start, end) = fragment_bounds(i, frag_len, t.data.len());
        Some(wire::token_len(
            s,
            t.rck,
            t.data.len() as u64,
            start as u64,
            end - start,
        ))
    }

    /// Peers with token fragments possibly waiting.
    pub fn fragment_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.senders
            .iter()
            .filter(|(_, c)| !c.ready.is_empty())
            .map(|(p, _)| *p)
    }

    /// The next TOKEN fragment for `peer` (l. 33, 73, 90), recorded as
    /// transmission `tx` sent at `now`.
    pub fn next_fragment(&mut self, peer: NodeId, now: Instant, tx: u64) -> Option<Frame> {
        self.take_fragment(peer, now, tx, |_| true).map(|(f, _)| f)
    }

    /// The next TOKEN fragment for `peer`, as
    /// [`next_fragment`](Self::next_fragment), if `admit` accepts its
    /// encoded length (room in the datagram, the window, the pacer); with
    /// whether it is its token's first transmission (usable for an RTT
    /// sample under Karn's rule). One look-up of the token where peeking,
    /// taking and asking separately take three: this runs once per small
    /// message.
    pub fn take_fragment(
        &mut self,
        peer: NodeId,
        now: Instant,
        tx: u64,
        admit: impl FnOnce(usize) -> bool,
    ) -> Option<(Frame, bool)> {
        self.take_fragment_with(peer, now, tx, admit, |f| Frame::Token {
            s: f.s,
            r: f.r,
            len: f.message.len() as u64,
            offset: f.range.start as u64,
            data: f.message.slice(f.range),
        })
    }

    /// As [`take_fragment`](Self::take_fragment), but the TOKEN frame is
    /// encoded straight into `out` ([`wire::encode_token`]) and
    /// `(s, offset, first transmission)` returned: no frame is built, so
    /// the message's bytes are copied once and never shared (sharing a
    /// `Bytes` made from a `Vec` allocates).
    pub fn take_fragment_into(
        &mut self,
        peer: NodeId,
        now: Instant,
        tx: u64,
        admit: impl FnOnce(usize) -> bool,
        out: &mut Vec<u8>,
    ) -> Option<(u64, u64, bool)> {
        self.take_fragment_with(peer, now, tx, admit, |f| {
            let offset = f.range.start as u64;
            let len = f.message.len() as u64;
            wire::encode_token(out, f.s, f.r, len, offset, &f.message[f.range]);
            (f.s, offset)
        })
        .map(|((s, offset), first)| (s, offset, first))
    }

    /// Takes the next pending fragment for `peer` if `admit` accepts its
    /// encoded length, records it as transmission `tx` sent at `now` (l. 33,
    /// 73, 90), and hands it to `emit`.
    fn take_fragment_with<R>(
        &mut self,
        peer: NodeId,
        now: Instant,
        tx: u64,
        admit: impl FnOnce(usize) -> bool,
        emit: impl FnOnce(Fragment<'_>) -> R,
    ) -> Option<(R, bool)> {
        let frag_len = self.cfg.max_fragment.max(1);
        let durable = self.journal.durable;
        let c = self.senders.get_mut(&peer)?;
        loop {
            let &(s, i) = c.ready.front()?;
            let Some(t) = c
                .tok
                .get_mut(s)
                .filter(|t| matches!(t.frags.get(i as usize), Some(Frag::Pending { .. })))
            else {
                c.ready.pop_front(); // settled or sent since it was queued
                continue;
            };
            // A token leaves only once the envelope it went into is
            // durable (tokens behind it are younger: they wait too).
            if t.seq > durable {
                return None;
            }
            let (start, end) = fragment_bounds(i, frag_len, t.data.len());
            let len = wire::token_len(s, t.rck, t.data.len() as u64, start as u64, end - start);
            if !admit(len) {
                return None;
            }
            c.ready.pop_front();
            let first = !t.frags.sent_any();
            t.frags[i as usize] = Frag::InFlight {
                tx,
                retransmitted: !first,
            };
            c.last_activity = now;
            let out = emit(Fragment {
                s,
                r: t.rck,
                message: &t.data,
                range: start..end,
            });
            return Some((out, first));
        }
    }

    /// The transmitter declared transmission `tx` of fragment `offset` of
    /// token `s` to `peer` lost: send it again. Returns whether it was
    /// still in flight as `tx` (and so is queued again).
    pub fn fragment_lost(&mut self, peer: NodeId, s: u64, offset: u64, tx: u64) -> bool {
        let frag_len = self.cfg.max_fragment.max(1) as u64;
        let Some(c) = self.senders.get_mut(&peer) else {
            return false;
        };
        let Some(t) = c.tok.get_mut(s) else {
            return false;
        };
        let i = (offset / frag_len) as usize;
        if let Some(f @ Frag::InFlight { .. }) = t.frags.get_mut(i) {
            if matches!(f, Frag::InFlight { tx: t2, .. } if *t2 == tx) {
                *f = Frag::Pending { sent: true };
                c.ready.push_back((s, i as u32));
                return true;
            }
        }
        false
    }

    /// Was transmission `tx` a first transmission (usable for an RTT
    /// sample under Karn's rule)? Only meaningful before its feedback.
    pub fn first_transmission(&self, peer: NodeId, s: u64, offset: u64, tx: u64) -> bool {
        let frag_len = self.cfg.max_fragment.max(1) as u64;
        self.senders
            .get(&peer)
            .and_then(|c| c.tok.get(s))
            .and_then(|t| t.frags.get((offset / frag_len) as usize))
            .is_some_and(
                |f| matches!(f, Frag::InFlight { tx: t2, retransmitted: false } if *t2 == tx),
            )
    }

    // ----- frames in --------------------------------------------------------

    /// A frame from `peer` arrived.
    pub fn handle_frame(&mut self, now: Instant, peer: NodeId, frame: Frame) {
        if peer == self.id {
            self.stats.bogus += 1;
            return;
        }
        match frame {
            Frame::ReqSlots { s, n, l } => self.on_reqslots(now, peer, s, n, l),
            Frame::Slots { s, r, n } => self.on_slots(now, peer, s, r, n),
            Frame::Token {
                s,
                r,
                len,
                offset,
                data,
            } => self.on_token(now, peer, s, r, len, offset, data),
            Frame::Ack { r, slots } => self.on_acks(now, peer, r, &slots),
            Frame::Nack { r, slots } => {
                for s in slots {
                    self.on_nack(now, peer, s, r);
                }
            }
            Frame::Stale { r, slots } => {
                for s in slots {
                    self.on_stale(now, peer, s, r);
                }
            }
            Frame::FragAck { s, r, ranges } => self.on_fragack(now, peer, s, r, &ranges),
        }
    }

    /// l. 48-60.
    fn on_reqslots(&mut self, now: Instant, peer: NodeId, s: u64, n: u64, l: u64) {
        let fresh = !self.receivers.contains_key(&peer);
        if fresh {
            // A close (n = 0) for a record we do not have: l. 49-51 would
            // create one only for l. 59-60 to remove it at once. Skipping
            // that saves a clock value per duplicate.
            if n == 0 {
                return;
            }
            if self.receivers.len() >= self.cfg.max_receivers && !self.evict_one() {
                self.stats.refused += 1;
                return;
            }
            // A record and at least one slot must fit the budget.
            if self.reserved_bytes() + RECORD_BYTES + SLOT_BYTES > self.cfg.max_reserved_bytes {
                self.stats.deferred += 1;
                return;
            }
            // l. 49-51: a new incarnation, named by the node clock.
            let rck = self.clock.ck;
            self.clock.ck += 1;
            self.receivers.insert(
                peer,
                RecvRec {
                    sck: s,
                    rck,
                    slt: SlotSet::default(),
                    consumed: SlotSet::default(),
                    frontier: l,
                    partial: BTreeMap::new(),
                    last_activity: now,
                },
            );
        }
        // Live plus pinned slots per sender: an honest sender holds at most
        // N envelopes and N tokens; pinned slots wait for its next frontier.
        let cap = 4 * self.cfg.max_window;
        let budget = self
            .cfg
            .max_reserved_bytes
            .saturating_sub(self.reserved_bytes())
            / SLOT_BYTES;
        let Some(c) = self.receivers.get_mut(&peer) else {
            return;
        };
        let before = slot_count(c);
        c.last_activity = now;
        // l. 53: forget slots below the frontier. The highest frontier seen
        // is used: the sender's frontier only grows, so an old duplicate
        // can only carry a lower one.
        let raised = l > c.frontier;
        if raised {
            self.reassembly_bytes -= c.raise_frontier(l);
        }
        let mut created = 0..0;
        let mut reply = None;
        if n > 0 {
            // l. 54-57, creating only slots at or above s (see the crate
            // docs): slots below s were never asked for in this
            // incarnation. At most `cap` slots per sender, live or pinned.
            let n = n.min(self.cfg.max_window);
            let from = c.sck.max(s);
            let room = cap.saturating_sub(slot_count(c));
            // Slots freed by the frontier just raised count again.
            let budget = budget + before.saturating_sub(slot_count(c));
            let cut = room > budget;
            let room = room.min(budget);
            let end = if s + n > from {
                (s + n).min(from + room)
            } else {
                s + n
            };
            if cut && end < s + n {
                self.stats.deferred += 1;
            }
            c.slt.insert_range(from..end);
            created = from..end.max(from);
            c.sck = c.sck.max(end);
            let granted = end.saturating_sub(s);
            if granted > 0 {
                reply = Some((
                    Frame::Slots {
                        s,
                        r: c.rck,
                        n: granted,
                    },
                    c.rck + 1,
                )); // l. 58
            }
        }
        // l. 59-60, but only when no consumed slot is at or above the
        // frontier: the sender may still hold that token, and answering its
        // retransmission needs this record (otherwise it would be NACKed
        // and sent again: a duplicate).
        let remove = c.slt.is_empty() && !c.pinned();
        self.reserved_slots = self.reserved_slots - before + slot_count(c);
        if fresh || raised || !created.is_empty() {
            self.journal.log(|| Record::Receiver {
                peer,
                sck: c.sck,
                rck: c.rck,
                frontier: c.frontier,
            });
            if !created.is_empty() {
                self.journal.log(|| Record::Slots {
                    peer,
                    from: created.start,
                    end: created.end,
                });
            }
        }
        if let Some((f, bound)) = reply {
            self.emit_gated(peer, f, bound);
        }
        if remove {
            self.drop_receiver(peer);
        }
    }

    /// Evicts the least recently active unpinned receiver record. Its
    /// sender holds no token whose slot was consumed at or above the
    /// frontier, so every token it holds for that incarnation is
    /// unconsumed and will be NACKed and sent again: eviction costs a
    /// retransmission, never a duplicate.
    fn evict_one(&mut self) -> bool {
        let victim = self
            .receivers
            .iter()
            .filter(|(_, c)| !c.pinned())
            .min_by_key(|(p, c)| (c.last_activity, **p))
            .map(|(p, _)| *p);
        match victim {
            Some(p) => {
                self.drop_receiver(p);
                self.stats.evicted += 1;
                true
            }
            None => false,
        }
    }

    /// l. 61-74.
    fn on_slots(&mut self, now: Instant, peer: NodeId, s: u64, r: u64, n: u64) {
        let Some(c) = self.senders.get_mut(&peer) else {
            // l. 62-63: no record, so no token or envelope: tell the
            // receiver to forget everything. Reply with a clock at least its
            // sck (adopting it): l. 63's `ck` alone may lie below slots the
            // receiver created for a larger request we never saw answered,
            // and those would then never be collected.
            if s > self.clock.ck.saturating_add(1 << 40) {
                self.stats.bogus += 1; // an absurd jump: not from an honest peer
                return;
            }
            let c = self.clock.ck.max(s);
            self.clock.ck = c;
            self.emit_gated(peer, Frame::ReqSlots { s: c, n: 0, l: c }, c);
            return;
        };
        if s != c.sck {
            return; // l. 64: an old answer
        }
        if n == 0 {
            // Keep-alive from the receiver: nudge our request (l. 74).
            if c.request.is_some() || !c.msg.is_empty() {
                self.request_slots(now, peer);
            }
            return;
        }
        if let Some((s2, _, sent_at, repeated)) = c.request.take() {
            if s2 == s && !repeated {
                self.feedback
                    .push_back(Feedback::SlotsAnswered { peer, sent_at });
            }
        }
        if c.rck != Some(r) {
            // A new incarnation: envelopes of the old one are options on
            // slots that no longer exist (l. 66 would re-tag them).
            c.env = s..s;
            c.rck = Some(r); // l. 66
            c.env_rck = r;
        }
        c.env.end = s + n; // l. 67
        c.sck = s + n; // l. 68
        c.last_activity = now;
        self.journal.log(|| c.header(peer));
        self.assign(peer); // l. 69-73
        self.maybe_request(now, peer); // l. 74
    }

    /// l. 75-81, with fragment reassembly and answers for tokens of
    /// incarnations that no longer exist.
    #[allow(clippy::too_many_arguments)]
    fn on_token(
        &mut self,
        now: Instant,
        peer: NodeId,
        s: u64,
        r: u64,
        len: u64,
        offset: u64,
        data: Bytes,
    ) {
        let Some(c) = self.receivers.get_mut(&peer).filter(|c| c.rck == r) else {
            // No record, or one of another incarnation (l. 76 fails). The
            // paper stays silent; we tell the sender what became of slot s.
            // With a journal that covers every life of this node, a record
            // of a previous life is gone only because it was durably
            // forgotten while unpinned: a NACK, as within one life.
            if r < self.clock.boot && !self.journal.covers_history {
                // From a previous life of this node: unknowable.
                self.stats.stale_sent += 1;
                self.push_slot(peer, SlotList::Stale, r, s);
            } else if r >= self.clock.ck {
                self.stats.bogus += 1; // never created
            } else {
                // Created in this life and forgotten while unpinned: slot s
                // was never consumed and never will be (rck is unique).
                self.stats.nacks_sent += 1;
                self.push_slot(peer, SlotList::Nack, r, s);
            }
            return;
        };
        c.last_activity = now;
        if !c.slt.contains(s) {
            // l. 78 fails: consumed already (or below the frontier): only
            // acknowledge (l. 81).
            self.stats.duplicate_tokens += 1;
            self.push_slot(peer, SlotList::Ack, r, s);
            return;
        }
        let whole = if offset == 0 && data.len() as u64 == len {
            self.journal.log(|| Record::Consume {
                peer,
                s,
                data: data.clone(),
            });
            Some(data)
        } else {
            match c.partial.get_mut(&s) {
                Some(p) if p.data.len() as u64 == len => {
                    p.insert(offset, &data);
                    self.journal.log(|| Record::Fragment {
                        peer,
                        s,
                        len,
                        offset,
                        data,
                    });
                }
                Some(_) => {
                    self.stats.bogus += 1; // length changed: not an honest sender
                    return;
                }
                None => {
                    if self.reassembly_bytes + len > self.cfg.max_reassembly_bytes {
                        // No memory: drop; the sender retransmits later.
                        self.stats.reassembly_dropped += 1;
                        return;
                    }
                    self.reassembly_bytes += len;
                    let mut p = Partial {
                        data: vec![0; len as usize],
                        have: Vec::new(),
                    };
                    p.insert(offset, &data);
                    c.partial.insert(s, p);
                    self.journal.log(|| Record::Fragment {
                        peer,
                        s,
                        len,
                        offset,
                        data,
                    });
                }
            }
            let p = &c.partial[&s];
            if p.complete() {
                let p = c.partial.remove(&s).map(|p| p.data).unwrap_or_default();
                self.reassembly_bytes -= len;
                self.journal.log(|| Record::ConsumeFragments { peer, s });
                Some(Bytes::from(p))
            } else {
                // Report the range holding the fragment just received and
                // those before it: the sender knows of older ones already.
                let at = p.have.iter().position(|&(_, b)| b > offset).unwrap_or(0);
                let from = (at + 1).saturating_sub(MAX_RANGES as usize);
                let ranges: Vec<(u64, u64)> = p.have[from..=at.min(p.have.len() - 1)].to_vec();
                self.push_out(peer, Frame::FragAck { s, r, ranges });
                return;
            }
        };
        let Some(data) = whole else { return };
        let c = self.receivers.get_mut(&peer).expect("record checked above");
        // l. 79-80: consume the slot and deliver, in one step.
        let before = slot_count(c);
        c.slt.remove(s);
        if s >= c.frontier {
            c.consumed.insert(s);
        }
        self.reserved_slots = self.reserved_slots - before + slot_count(c);
        self.stats.delivered += 1;
        self.events
            .push_back((self.journal.seq, Event::Received { from: peer, data }));
        self.push_slot(peer, SlotList::Ack, r, s); // l. 81
    }

    /// Removes token `s` of incarnation `r`, reporting its transmissions.
    fn take_token(&mut self, peer: NodeId, s: u64, r: u64, acked: bool) -> Option<Token> {
        let c = self.senders.get_mut(&peer)?;
        settle_token(c, &mut self.feedback, peer, s, r, acked)
    }

    /// l. 82-86, for each slot an ACK lists (the record looked up once).
    fn on_acks(&mut self, now: Instant, peer: NodeId, r: u64, slots: &[u64]) {
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        for &s in slots {
            if let Some(t) = settle_token(c, &mut self.feedback, peer, s, r, true) {
                c.last_activity = now;
                self.journal.log(|| Record::Settle { peer, s });
                self.events
                    .push_back((self.journal.seq, Event::Delivered { to: peer, id: t.id }));
            }
        }
    }

    /// The receiver forgot incarnation `r` while slot `s` was unconsumed:
    /// the message goes back to the queue for a fresh envelope.
    fn on_nack(&mut self, now: Instant, peer: NodeId, s: u64, r: u64) {
        let Some(t) = self.take_token(peer, s, r, false) else {
            return;
        };
        self.stats.resent_after_nack += 1;
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        self.journal.log(|| Record::Requeue { peer, s });
        c.bytes += t.data.len() as u64;
        c.msg.push_front(Queued {
            id: t.id,
            data: t.data,
        });
        if c.env_rck == r && !c.env.is_empty() {
            let start = c.env.end;
            c.env = start..start; // envelopes of the dead incarnation
            self.journal.log(|| c.header(peer));
        }
        self.assign(peer);
        self.maybe_request(now, peer);
    }

    /// The receiver restarted since it created incarnation `r`: the token's
    /// fate is unknowable. Tokens of `r` never transmitted cannot have been
    /// consumed: they go back to the queue like NACKed ones.
    fn on_stale(&mut self, now: Instant, peer: NodeId, s: u64, r: u64) {
        let Some(t) = self.take_token(peer, s, r, false) else {
            return;
        };
        self.journal.log(|| Record::Settle { peer, s });
        self.events
            .push_back((self.journal.seq, Event::InDoubt { to: peer, id: t.id }));
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        if c.env_rck == r && !c.env.is_empty() {
            let start = c.env.end;
            c.env = start..start;
            self.journal.log(|| c.header(peer));
        }
        let unsent: Vec<u64> = c
            .tok
            .iter()
            .filter(|(_, t)| t.rck == r && !t.frags.sent_any())
            .map(|(s, _)| s)
            .collect();
        for s in unsent.into_iter().rev() {
            if let Some(t) = c.tok.remove(s) {
                self.journal.log(|| Record::Requeue { peer, s });
                self.stats.resent_after_nack += 1;
                c.msg.push_front(Queued {
                    id: t.id,
                    data: t.data,
                });
            }
        }
        self.assign(peer);
        self.maybe_request(now, peer);
    }

    fn on_fragack(&mut self, now: Instant, peer: NodeId, s: u64, r: u64, ranges: &[(u64, u64)]) {
        let frag_len = self.cfg.max_fragment.max(1) as u64;
        let Some(c) = self.senders.get_mut(&peer) else {
            return;
        };
        let Some(t) = c.tok.get_mut(s).filter(|t| t.rck == r) else {
            return;
        };
        c.last_activity = now;
        let total = t.data.len() as u64;
        for (i, f) in t.frags.iter_mut().enumerate() {
            let a = i as u64 * frag_len;
            let b = (a + frag_len).min(total);
            if ranges.iter().any(|&(x, y)| x <= a && b <= y) {
                if let Frag::InFlight { tx, .. } = *f {
                    push_acked(&mut self.feedback, peer, tx);
                }
                *f = Frag::Held;
            }
        }
    }
}

#[cfg(test)]
mod size_tests {
    /// The token map holds an entry per message in flight and is written
    /// and read once per small message: its entries' size is what that
    /// costs in cache misses (issue 23). Growing them should be a
    /// decision, not an accident.
    #[test]
    fn token_entries_stay_small() {
        assert_eq!(std::mem::size_of::<super::Frags>(), 16);
        assert!(std::mem::size_of::<(u64, Option<super::Token>)>() <= 80);
    }
}
