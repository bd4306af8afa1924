//! The interface between a scheduler and the multipath transport that runs
//! it (thesis §3.3.1, "Model of the Scheduling Environment").
//!
//! The transport implements [`Environment`]: it shows the scheduler its
//! subflows with their properties, the three packet queues (`Q` unsent,
//! `QU` sent but unacknowledged, `RQ` suspected lost and to be reinjected)
//! and the connection's registers, and it carries out the [`Action`]s a
//! run decides. [`crate::MemoryEnv`] is an in-memory implementation for
//! tests.

/// Which packet queue (thesis §3.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// `Q`: packets the application wrote that no subflow has been given
    /// yet (a scheduler may also send a packet and leave it here, as
    /// `sbf.PUSH(Q.TOP)` does).
    Send,
    /// `QU`: packets taken from `Q` and not yet acknowledged.
    Unacked,
    /// `RQ`: packets a subflow suspects lost, to be reinjected. Such a
    /// packet is also still in `QU`.
    Reinject,
}

impl Queue {
    /// The queue's name in ProgMP.
    pub fn name(self) -> &'static str {
        match self {
            Queue::Send => "Q",
            Queue::Unacked => "QU",
            Queue::Reinject => "RQ",
        }
    }
}

/// One of the six per-connection registers `R1`..`R6`: integers that keep
/// their value between runs and that the application may set (thesis
/// §3.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Register(u8);

impl Register {
    /// `R1`.
    pub const R1: Register = Register(0);
    /// `R2`.
    pub const R2: Register = Register(1);
    /// `R3`.
    pub const R3: Register = Register(2);
    /// `R4`.
    pub const R4: Register = Register(3);
    /// `R5`.
    pub const R5: Register = Register(4);
    /// `R6`.
    pub const R6: Register = Register(5);
    /// All six, in order.
    pub const ALL: [Register; 6] = [Self::R1, Self::R2, Self::R3, Self::R4, Self::R5, Self::R6];

    /// The register numbered `n` (1 to 6), or `None`.
    pub fn new(n: u8) -> Option<Register> {
        (1..=6).contains(&n).then(|| Register(n - 1))
    }

    /// Its number, 1 to 6.
    pub fn number(self) -> u8 {
        self.0 + 1
    }

    /// Its position, 0 to 5, for indexing a `[i64; 6]`.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    pub(crate) fn from_index(i: u8) -> Register {
        Register(i.min(5))
    }
}

/// The most subflows a scheduler sees; further subflows are invisible to
/// it (the transport should not open more). Subflow sets are bitmasks.
pub const MAX_SUBFLOWS: usize = 64;

/// What the scheduler knows of a subflow, read once per run (the run's
/// snapshot). Integer properties are in the units listed; a transport that
/// has no value yet (no RTT sample, say) reports 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubflowInfo {
    /// `ID`: the transport's identifier of this subflow, stable for its
    /// lifetime (unlike its position in `SUBFLOWS`).
    pub id: u32,
    /// `RTT`: smoothed round-trip time, in microseconds. `RTT_MS` is this
    /// in whole milliseconds.
    pub rtt_us: u64,
    /// `RTT_VAR`: round-trip time variation, in microseconds.
    pub rtt_var_us: u64,
    /// `CWND`: congestion window, in packets.
    pub cwnd: u32,
    /// `SSTHRESH`: slow-start threshold, in packets.
    pub ssthresh: u32,
    /// `SKBS_IN_FLIGHT` (alias `PACKETS_IN_FLIGHT`): packets sent on this
    /// subflow and not yet acknowledged or declared lost.
    pub in_flight: u32,
    /// `QUEUED`: packets given to this subflow and not yet sent.
    pub queued: u32,
    /// `LOST_SKBS`: packets this subflow has declared lost so far.
    pub lost: u32,
    /// `IS_BACKUP`: the subflow is a backup (RFC 6824 §3.3.8, `MP_PRIO`).
    pub is_backup: bool,
    /// `THROTTLED` (alias `IS_THROTTLED`): the subflow may not send now
    /// (pacing or a full local buffer).
    pub throttled: bool,
    /// `LOSSY` (alias `IS_LOSSY`): the subflow is currently losing packets
    /// (in loss recovery or after a retransmission timeout).
    pub lossy: bool,
    /// `DELAY_IN`: incoming one-way delay estimator `DE_in` (thesis eq.
    /// 5.2), in microseconds, smoothed. Only differences between subflows
    /// of one connection are meaningful; may be negative.
    pub delay_in_us: i64,
    /// `DELAY_OUT`: outgoing one-way delay estimator `DE_out` (thesis eq.
    /// 5.1), in microseconds, smoothed. Only differences between subflows
    /// of one connection are meaningful; may be negative.
    pub delay_out_us: i64,
    /// `DELAY_OUT_ESTIMATOR`: the latest unsmoothed `DE_out` sample, in
    /// microseconds.
    pub delay_out_sample_us: i64,
    /// `USER`: the per-subflow integer the scheduler writes with
    /// `SET_USER`; starts at 0.
    pub user: i64,
}

/// A packet's identity, chosen by the transport and unique among the
/// packets it currently holds. The same packet in `QU` and `RQ` has the
/// same identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PacketId(pub u64);

/// What the scheduler knows of a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Identity, for equality and for naming the packet in actions.
    pub id: PacketId,
    /// `SEQ`: data sequence number of its first byte.
    pub seq: u64,
    /// `LENGTH`: payload bytes.
    pub length: u32,
    /// `USER`: the application's tag for the write this packet belongs to
    /// (thesis §3.3.4, "packet properties"); 0 if untagged.
    pub user: i64,
    /// `PSH`: the packet ends an application write (TCP's PSH flag).
    pub psh: bool,
}

/// A packet as a run saw it: where it was and who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRef {
    /// The queue it was found in.
    pub queue: Queue,
    /// Its position in that queue as it was during the run (before any
    /// action of the run is applied).
    pub index: usize,
    /// Its identity.
    pub id: PacketId,
}

/// One effect of a run, for the transport to carry out. Actions are
/// applied after the run, in order (thesis §3.4.2.2, the deferred action
/// queue); all positions refer to the environment as it was during the
/// run, so a transport should locate packets by [`PacketId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send (a copy of) the packet on the subflow at position `subflow`
    /// of `SUBFLOWS`. Queue membership is unchanged by this action.
    Push {
        /// Position of the subflow in the run's `SUBFLOWS`.
        subflow: usize,
        /// Its `ID`.
        subflow_id: u32,
        /// The packet.
        packet: PacketRef,
    },
    /// Take the packet out of its queue. From `Q`, it joins `QU` (it has
    /// been sent, or is about to be by a `Push` of this run); from `RQ`, it
    /// stays in `QU`. Never issued for `QU`.
    Remove {
        /// The packet.
        packet: PacketRef,
    },
    /// Store `value` as the subflow's `USER`.
    SetSubflowUser {
        /// Position of the subflow in the run's `SUBFLOWS`.
        subflow: usize,
        /// Its `ID`.
        subflow_id: u32,
        /// The new value.
        value: i64,
    },
    /// Store `value` in a register.
    SetRegister {
        /// Which register.
        register: Register,
        /// The new value.
        value: i64,
    },
}

/// The scheduling environment of one connection, as the transport shows it
/// to a scheduler.
///
/// During a run the scheduler holds `&self`, so the environment cannot
/// change: every read of the same property within one run gives the same
/// value. Implementations must keep it that way (no interior mutability
/// behind these methods). Subflow properties are read once per run, into
/// the run's snapshot; packets are read as the scheduler looks at them, so
/// a long queue costs only what the scheduler examines.
pub trait Environment {
    /// Number of subflows (`SUBFLOWS.COUNT`). Only the first
    /// [`MAX_SUBFLOWS`] are shown to the scheduler.
    fn subflow_count(&self) -> usize;

    /// The subflow at position `index` (`0..subflow_count()`).
    fn subflow(&self, index: usize) -> SubflowInfo;

    /// Number of packets in `queue`.
    fn queue_len(&self, queue: Queue) -> usize;

    /// The packet at position `index` (`0..queue_len(queue)`, head first).
    fn packet(&self, queue: Queue, index: usize) -> PacketInfo;

    /// `SENT_ON`: whether the packet at `queue[index]` has already been
    /// sent on the subflow at position `subflow`.
    fn sent_on(&self, queue: Queue, index: usize, subflow: usize) -> bool;

    /// `HAS_WINDOW_FOR`: whether the peer's receive window admits the
    /// packet at `queue[index]` if sent on the subflow at position
    /// `subflow`.
    fn has_window_for(&self, subflow: usize, queue: Queue, index: usize) -> bool;

    /// The current value of a register.
    fn register(&self, register: Register) -> i64;

    /// Carry out the actions of one run, in order.
    fn apply(&mut self, actions: &[Action]);
}
