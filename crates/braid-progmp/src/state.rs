//! The per-connection scratch memory a run works in, allocated when the
//! scheduler is instantiated and reused by every run (thesis §3.3.2:
//! "executable with static memory allocation at scheduler initialization
//! time"). Buffers that depend on the environment's size (the subflow
//! snapshot, `FOREACH` over packets, the action queue) keep their capacity
//! between runs, so a steady workload stops allocating after its first
//! runs.
//!
//! It also holds the run's view of its own side effects (§3.3 and
//! §3.4.2.2): `PUSH` raises the subflow's `QUEUED` and makes `SENT_ON`
//! true, `SET_USER` and `SET` are visible at once, and a `POP`ped packet
//! leaves its queue (a packet from `Q` shows up at the end of `QU`).

use braid_core::Rng;

use crate::env::{Action, Environment, PacketId, PacketRef, Queue, SubflowInfo, MAX_SUBFLOWS};
use crate::ir::Layout;

/// Where a packet is in the environment during one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PktLoc {
    pub queue: Queue,
    pub index: u32,
}

/// A packet the run took out of `Q` or `RQ` (by `POP` or `DROP`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Removal {
    pub loc: PktLoc,
    pub id: PacketId,
    pub dropped: bool,
}

pub(crate) struct RunState {
    pub sbfs: Vec<SubflowInfo>,
    pub all_mask: u64,
    pub regs: [i64; 6],
    pub now_ms: i64,
    pub ints: Vec<i64>,
    pub bools: Vec<bool>,
    pub sbf_slots: Vec<Option<u8>>,
    pub pkt_slots: Vec<Option<PktLoc>>,
    pub masks: Vec<u64>,
    pub loop_bufs: Vec<Vec<PktLoc>>,
    pub removed: Vec<Removal>,
    pub actions: Vec<Action>,
    pub print_buf: String,
    pub print_ends: Vec<usize>,
    pub rng: Rng,
}

/// What the compiled closures see: the frozen environment and the run's
/// own state.
pub(crate) struct Ctx<'a> {
    pub env: &'a dyn Environment,
    pub st: &'a mut RunState,
}

impl RunState {
    pub(crate) fn new(layout: &Layout, rng: Rng) -> Self {
        RunState {
            sbfs: Vec::with_capacity(8),
            all_mask: 0,
            regs: [0; 6],
            now_ms: 0,
            ints: vec![0; layout.ints as usize],
            bools: vec![false; layout.bools as usize],
            sbf_slots: vec![None; layout.sbfs as usize],
            pkt_slots: vec![None; layout.pkts as usize],
            masks: vec![0; layout.masks as usize],
            loop_bufs: (0..layout.loops).map(|_| Vec::new()).collect(),
            removed: Vec::with_capacity(8),
            actions: Vec::with_capacity(16),
            print_buf: String::new(),
            print_ends: Vec::new(),
            rng,
        }
    }

    /// Takes the run's snapshot and clears the previous run's effects.
    pub(crate) fn begin(&mut self, env: &dyn Environment, now_ms: i64) {
        let n = env.subflow_count().min(MAX_SUBFLOWS);
        self.sbfs.clear();
        self.sbfs.extend((0..n).map(|i| env.subflow(i)));
        self.all_mask = if n == MAX_SUBFLOWS {
            u64::MAX
        } else {
            (1u64 << n) - 1
        };
        for r in crate::env::Register::ALL {
            self.regs[r.index()] = env.register(r);
        }
        self.now_ms = now_ms;
        self.removed.clear();
        self.actions.clear();
        self.print_buf.clear();
        self.print_ends.clear();
    }

    pub(crate) fn is_removed(&self, loc: PktLoc) -> bool {
        self.removed.iter().any(|r| r.loc == loc)
    }
}

impl Ctx<'_> {
    pub(crate) fn packet_ref(&self, loc: PktLoc) -> PacketRef {
        let info = self.env.packet(loc.queue, loc.index as usize);
        PacketRef {
            queue: loc.queue,
            index: loc.index as usize,
            id: info.id,
        }
    }

    /// Visits, in queue order, the packets of `queue` as this run sees it,
    /// until `visit` returns `true`.
    pub(crate) fn scan_queue(
        &mut self,
        queue: Queue,
        mut visit: impl FnMut(&mut Ctx<'_>, PktLoc) -> bool,
    ) {
        let n = self.env.queue_len(queue);
        for i in 0..n {
            let loc = PktLoc {
                queue,
                index: i as u32,
            };
            if queue != Queue::Unacked && self.st.is_removed(loc) {
                continue;
            }
            if visit(self, loc) {
                return;
            }
        }
        if queue == Queue::Unacked {
            // Packets this run took out of Q are now unacknowledged.
            let mut j = 0;
            while j < self.st.removed.len() {
                let r = self.st.removed[j];
                j += 1;
                if r.loc.queue == Queue::Send && visit(self, r.loc) {
                    return;
                }
            }
        }
    }

    /// Takes a packet out of its queue for the rest of the run; `DROP`
    /// (dropped = true) on a packet already taken marks it dropped.
    pub(crate) fn remove(&mut self, loc: PktLoc, dropped: bool) {
        if let Some(r) = self.st.removed.iter_mut().find(|r| r.loc == loc) {
            r.dropped |= dropped;
            return;
        }
        if loc.queue == Queue::Unacked {
            // Only acknowledgements remove packets in flight.
            return;
        }
        let id = self.env.packet(loc.queue, loc.index as usize).id;
        self.st.removed.push(Removal { loc, id, dropped });
    }

    /// `SENT_ON`: sent before this run, or pushed by it.
    pub(crate) fn sent_on(&self, loc: PktLoc, sbf: u8) -> bool {
        if self
            .env
            .sent_on(loc.queue, loc.index as usize, sbf as usize)
        {
            return true;
        }
        if self.st.actions.is_empty() {
            return false;
        }
        let id = self.env.packet(loc.queue, loc.index as usize).id;
        self.st.actions.iter().any(|a| matches!(a, Action::Push { subflow, packet, .. } if *subflow == sbf as usize && packet.id == id))
    }
}
