//! Exon: exactly-once messaging without connections, sans-IO.
//!
//! Owns: Algorithm 1 of *Exon: An Oblivious Exactly-Once Messaging
//! Protocol* (Kassam, Almeida, Shoker) as a state machine ([`Machine`]),
//! its wire format ([`wire`]), the durable node clock ([`clock`]) and the
//! transmitter that runs it over datagrams with RTT measurement,
//! congestion control and timers ([`ExonNode`]).
//!
//! Must not depend on: tokio, sockets, threads, the system clock or a
//! thread RNG (like every protocol crate: datagrams and
//! [`braid_core::Instant`]s go in; datagrams, deadlines and [`Event`]s come
//! out), nor on `braid-net` or the facade. Durable storage is reached only
//! through the [`clock::ClockStore`] trait, called by whoever drives the
//! node, never by the state machine.
//!
//! # The protocol
//!
//! To send to node `j`, node `i` keeps a sender record `S[j]`, `j` a
//! receiver record `R[i]`. `i` asks for slots (REQSLOTS); `j` creates them
//! in an incarnation `rck` named by its clock and answers (SLOTS); `i`
//! turns each slot into an envelope, puts a message in it and sends the
//! token (TOKEN) until it is acknowledged (ACK). `j` delivers a token only
//! by consuming its slot, so at most once; `i` retransmits until
//! acknowledged, so at least once. Records exist only while there is
//! something to say and are then forgotten, leaving one integer per node,
//! the clock. There is no TIME_WAIT: correctness never depends on timing.
//!
//! Beyond the paper (its §V future work): REQSLOTS rides on TOKEN
//! datagrams and SLOTS on ACK datagrams (any frames of a peer are packed
//! into one datagram, many tokens and acknowledgements each); envelopes are
//! requested at a low watermark (N/2) up to a high one (N) instead of after
//! every send; N follows the congestion window, i.e. the measured
//! bandwidth-delay product; messages up to 16 MiB are fragmented, use one
//! slot, and are delivered whole when the last fragment arrives; the
//! retransmission timeout comes from the measured RTT (RFC 6298 formulas);
//! congestion control, the RTT estimator and the pacer are `braid_recovery`'s, BBR-style by
//! default, so random loss is not read as congestion, while loss that
//! comes with a standing queue caps the window ([`guard`]) so loss-based
//! flows sharing a bottleneck keep their share; peers are logical
//! [`NodeId`]s, their address is wherever their last datagram came from.
//!
//! # Authentication
//!
//! The paper assumes honest peers; a network has others. An
//! [`ExonNode`] with [`Security::Authenticated`] runs every datagram
//! through WireGuard-style sessions ([`secure`]): a Noise IK handshake
//! proves both static keys, node IDs are derived from those keys (so
//! cannot be chosen or forged), and every envelope, token,
//! acknowledgement, NACK and slot request after it is sealed (AEAD, a
//! per-session counter as nonce, an RFC 6479 replay window). A datagram
//! that fails authentication changes no state: a forged NACK cannot make a
//! message be sent twice, a forged slot request reserves nothing. The
//! receiver's memory stays bounded whatever spoofers send: nothing per
//! peer before a handshake verifies and the [`PeerVerifier`] accepts the
//! key, at most [`SessionConfig::max_peers`] peers, and slot reservations
//! within [`MachineConfig::max_reserved_bytes`]. The state machine below is
//! unchanged by it: it sees only frames from proved peers.
//! [`Security::InsecureNoAuth`] keeps the bare wire format, for benchmarks
//! of the protocol alone.
//!
//! # Changes to Algorithm 1, and why
//!
//! Checking the algorithm as printed against its own proofs found one way
//! to deliver a message twice and one way never to quiesce; a third change
//! makes forgetting (and so bounded memory) safe. Each is marked in the
//! code; the model checker and the simulation campaign check the result.
//!
//! 1. **A token keeps its incarnation.** l. 90 retransmits every token with
//!    the record's *current* `rck`, which l. 66 overwrites on every SLOTS.
//!    If the receiver forgets its record while a token's ACK is lost, an
//!    old duplicate REQSLOTS can make it create the same slot numbers again
//!    in a new incarnation; once a fresh SLOTS moves the sender to that
//!    incarnation, the old, already delivered token matches a fresh slot
//!    and is delivered again. Tokens (and envelopes) here carry the `rck`
//!    they were created in; envelopes of an older incarnation are dropped.
//! 2. **A receiver record is forgotten only when no consumed slot is at or
//!    above the sender's garbage-collection frontier** ("unpinned"). The
//!    frontier `l` is the lowest token or envelope the sender holds, and
//!    only grows; a consumed slot below it was acknowledged and forgotten
//!    by the sender. So when an unpinned record is gone, every token its
//!    sender still holds for that incarnation is *unconsumed* — and, since
//!    `rck` values are never reused, can never be consumed. This is what
//!    lets the receiver answer a token of a forgotten incarnation with
//!    **NACK** ("send it again in a new slot") instead of l. 76's silence,
//!    and makes eviction safe (below).
//! 3. **Quiescence.** l. 56 creates slots from the record's `sck`, which can
//!    lie above what the sender ever accepted (a larger request answered
//!    after a smaller one); l. 63 answers the receiver's keep-alive with the
//!    sender's own clock, which may lie below those slots, so they, and
//!    the record, would live forever. Here a sender without a record
//!    answers `SLOTS(s, …)` with `REQSLOTS(max(ck, s), 0, max(ck, s))`,
//!    moving its clock up (always safe), and slots are created only from
//!    `max(sck, s)`.
//! 4. Smaller ones: the receiver keeps the highest frontier seen (an old
//!    duplicate carries a lower one); a REQSLOTS with `n = 0` for a record
//!    that does not exist creates none (l. 49-51 would create one for l. 60
//!    to delete, burning a clock value); a sender closes its record after
//!    an idle timeout as well as when its reserve is full (l. 44).
//!
//! # Why exactly-once holds, crashes included
//!
//! A slot is named `(sender, receiver, s, rck)`. The receiver's `rck` comes
//! from its clock and is unique across its lives: the clock is made
//! durable *before* any frame carrying a value derived from it leaves
//! (frames wait in the machine until [`Machine::clock_persisted`]), and a
//! restarted node starts from the durable value, above everything it ever
//! revealed. The same gating covers the sender's envelope numbers: before
//! `REQSLOTS(s, n, l)` leaves, the clock is durably past `s + n`, so a
//! restarted sender never asks for, or holds, a number it used before. With
//! that, the paper's Lemmas 1-4 hold across crashes: each slot is created
//! at most once, each envelope handed out at most once, each message put
//! in at most one live token, and a token is delivered only by consuming
//! its slot. A message is put in a second token only after a NACK, which
//! (fix 2) proves the first can never be delivered. Hence **at most
//! once**, always.
//!
//! **At least once**: a token is retransmitted until one of ACK (consumed),
//! NACK (provably never consumed: sent again) or STALE arrives, and slots
//! are requested until granted (Lemmas 5 and 6).
//!
//! **Crashes.** The paper assumes a crashed node "will eventually recover
//! with the content of the last state prior to the crash" from stable
//! storage. With [`MachineConfig::journal`] on, that is what happens: every
//! change to the sender and receiver records goes to the [`journal`], and
//! nothing derived from a change (a frame, a token, an event, a send's
//! acceptance) leaves before the change is durable; a restarted node
//! replays its journal ([`Machine::restore`]) and is in the state of its
//! last commit, so the lemmas above hold across crashes and **every
//! accepted message is delivered exactly once**, crashes of either node
//! included. The simulation campaign checks exactly this over 500 seeded
//! runs with crashes, and that each restarted node rebuilds precisely the
//! state it had committed.
//!
//! With the journal off, only the clock is durable and a crash loses the
//! volatile records: a message still queued at a sender that crashes is
//! lost with it; a token whose receiver restarted before acknowledging it
//! may or may not have been delivered, and no one can know (the receiver's
//! memory of it is gone). The receiver recognises such tokens (their `rck`
//! is below the clock it booted from and no record of it survives) and
//! answers **STALE**; the sender reports [`Event::InDoubt`]. Then every
//! message is delivered at most once, and every message whose sender and
//! receiver do not crash while it is unacknowledged exactly once; a
//! smaller campaign checks that mode.
//!
//! # Bounded receiver state, and why eviction costs a retransmission
//!
//! A receiver grants one sender at most `4 × max_window` live or pinned
//! slots, holds at most `max_reassembly_bytes` of partial messages (more
//! fragments are dropped and retransmitted), and keeps at most
//! `max_receivers` records. A flood of REQSLOTS from spoofed senders
//! creates records with slots but no consumed slot: unpinned ones. When
//! the table is full, the least recently active *unpinned* record is
//! evicted. By fix 2, its sender holds no token whose slot was consumed,
//! so each token it holds for the evicted incarnation gets a NACK and is
//! sent again in a new slot: an honest sender loses a retransmission,
//! never a duplicate (and never a message). A pinned record cannot be
//! evicted (its sender may still need its ACK); if every record is pinned,
//! new REQSLOTS are refused and their senders retry later.

pub mod clock;
pub mod guard;
pub mod journal;
mod machine;
mod node;
pub mod secure;
pub mod wire;

use std::fmt;

pub use machine::{
    DurablePartial, DurableReceiver, DurableSender, DurableState, Event, Feedback, Machine,
    MachineConfig, MachineStats, RestoreError, SendError, RECORD_BYTES, SLOT_BYTES,
};
pub use node::{ExonCc, ExonNode, NodeConfig, NodeStats, Transmit, MAX_DATAGRAM_SIZE};
pub use secure::{
    AcceptAnyKey, Cipher, DiscoveryError, Endorsement, EndorsementError, Identity, PeerVerifier,
    PublicKey, Security, SecurityStats, SessionConfig,
};

/// A node's logical identity. Peers are named by it, never by address.
///
/// An authenticated node's ID is derived from its static public key
/// ([`NodeId::of`], the same value as `braid_identity::NodeId`), and a
/// peer's ID is only ever taken from a session that proved the key: it
/// cannot be chosen. The raw constructor names IDs in the protocol's state
/// machine and its models, and of [`Security::InsecureNoAuth`] nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

impl NodeId {
    /// The ID of the node whose static key is `key`.
    pub fn of(key: &PublicKey) -> NodeId {
        NodeId(key.node_id().get())
    }
}

impl From<braid_identity::NodeId> for NodeId {
    fn from(id: braid_identity::NodeId) -> Self {
        NodeId(id.get())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Names a message handed to `send`, unique within one life of the
/// sending node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageId(pub u64);
