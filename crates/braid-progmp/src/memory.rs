//! An in-memory [`Environment`] for tests and examples: subflows are plain
//! records, packets are sent instantly (a push raises the subflow's
//! packets in flight), and the test plays the network by acknowledging or
//! losing packets.

use crate::env::{Action, Environment, PacketId, PacketInfo, Queue, Register, SubflowInfo};

/// A packet held by [`MemoryEnv`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemPacket {
    /// Its properties.
    pub info: PacketInfo,
    /// `ID`s of the subflows it has been sent on.
    pub sent_on: Vec<u32>,
}

/// One `Push` carried out by [`MemoryEnv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmission {
    /// `ID` of the subflow.
    pub subflow_id: u32,
    /// The packet.
    pub packet: PacketId,
    /// Its `SEQ`.
    pub seq: u64,
}

/// An in-memory scheduling environment.
///
/// ```
/// use std::sync::Arc;
/// use braid_core::Instant;
/// use braid_progmp::{MemoryEnv, Program, Scheduler, SubflowInfo};
///
/// let mut env = MemoryEnv::new();
/// env.add_subflow(SubflowInfo { id: 1, rtt_us: 40_000, cwnd: 10, ..Default::default() });
/// env.add_subflow(SubflowInfo { id: 2, rtt_us: 20_000, cwnd: 10, ..Default::default() });
/// env.write(1400, 0, true);
///
/// let program = Arc::new(Program::compile("SUBFLOWS.MIN(s => s.RTT).PUSH(Q.POP());").unwrap());
/// let mut scheduler = Scheduler::new(program, 1);
/// scheduler.run(&mut env, Instant::ZERO);
/// assert_eq!(env.transmissions()[0].subflow_id, 2);
/// assert!(env.queue(braid_progmp::Queue::Send).is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryEnv {
    subflows: Vec<SubflowInfo>,
    q: Vec<MemPacket>,
    qu: Vec<MemPacket>,
    rq: Vec<MemPacket>,
    /// `R1`..`R6`.
    pub registers: [i64; 6],
    /// `HAS_WINDOW_FOR` is true for packets ending at or before this data
    /// sequence number; `None` means an unlimited window.
    pub receive_window_end: Option<u64>,
    next_id: u64,
    next_seq: u64,
    log: Vec<Transmission>,
}

impl MemoryEnv {
    /// No subflows, empty queues, registers at 0, unlimited window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a subflow at the end of `SUBFLOWS`; returns its position.
    pub fn add_subflow(&mut self, info: SubflowInfo) -> usize {
        self.subflows.push(info);
        self.subflows.len() - 1
    }

    /// Removes the subflow with this `ID`, if any.
    pub fn remove_subflow(&mut self, id: u32) {
        self.subflows.retain(|s| s.id != id);
    }

    /// The subflow with this `ID`, to change its properties.
    pub fn subflow_mut(&mut self, id: u32) -> Option<&mut SubflowInfo> {
        self.subflows.iter_mut().find(|s| s.id == id)
    }

    /// The subflows, in `SUBFLOWS` order.
    pub fn subflows(&self) -> &[SubflowInfo] {
        &self.subflows
    }

    /// The application writes a packet of `length` bytes tagged `user`
    /// (`psh` marks the end of a write); it joins `Q`. Returns its id.
    pub fn write(&mut self, length: u32, user: i64, psh: bool) -> PacketId {
        let id = PacketId(self.next_id);
        self.next_id += 1;
        let info = PacketInfo {
            id,
            seq: self.next_seq,
            length,
            user,
            psh,
        };
        self.next_seq += u64::from(length);
        self.q.push(MemPacket {
            info,
            sent_on: Vec::new(),
        });
        id
    }

    /// The packets of a queue, head first.
    pub fn queue(&self, queue: Queue) -> &[MemPacket] {
        match queue {
            Queue::Send => &self.q,
            Queue::Unacked => &self.qu,
            Queue::Reinject => &self.rq,
        }
    }

    fn queue_mut(&mut self, queue: Queue) -> &mut Vec<MemPacket> {
        match queue {
            Queue::Send => &mut self.q,
            Queue::Unacked => &mut self.qu,
            Queue::Reinject => &mut self.rq,
        }
    }

    /// Every transmission so far, in order.
    pub fn transmissions(&self) -> &[Transmission] {
        &self.log
    }

    /// Takes the transmission log, leaving it empty.
    pub fn take_transmissions(&mut self) -> Vec<Transmission> {
        std::mem::take(&mut self.log)
    }

    /// The packet is acknowledged: it leaves every queue and no longer
    /// counts as in flight on the subflows it was sent on.
    pub fn ack(&mut self, id: PacketId) {
        let mut sent_on = Vec::new();
        for q in [Queue::Send, Queue::Unacked, Queue::Reinject] {
            let v = self.queue_mut(q);
            if let Some(pos) = v.iter().position(|p| p.info.id == id) {
                let p = v.remove(pos);
                if sent_on.is_empty() {
                    sent_on = p.sent_on;
                }
            }
        }
        for s in self.subflows.iter_mut().filter(|s| sent_on.contains(&s.id)) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }

    /// A subflow suspects the packet lost: it joins `RQ` (once).
    pub fn lose(&mut self, id: PacketId) {
        if self.rq.iter().any(|p| p.info.id == id) {
            return;
        }
        if let Some(p) = self.qu.iter().find(|p| p.info.id == id).cloned() {
            self.rq.push(p);
        }
    }

    fn find(&self, queue: Queue, index: usize) -> Option<&MemPacket> {
        self.queue(queue).get(index)
    }
}

impl Environment for MemoryEnv {
    fn subflow_count(&self) -> usize {
        self.subflows.len()
    }

    fn subflow(&self, index: usize) -> SubflowInfo {
        self.subflows.get(index).copied().unwrap_or_default()
    }

    fn queue_len(&self, queue: Queue) -> usize {
        self.queue(queue).len()
    }

    fn packet(&self, queue: Queue, index: usize) -> PacketInfo {
        self.find(queue, index).map(|p| p.info).unwrap_or_default()
    }

    fn sent_on(&self, queue: Queue, index: usize, subflow: usize) -> bool {
        match (self.find(queue, index), self.subflows.get(subflow)) {
            (Some(p), Some(s)) => p.sent_on.contains(&s.id),
            _ => false,
        }
    }

    fn has_window_for(&self, _subflow: usize, queue: Queue, index: usize) -> bool {
        match (self.find(queue, index), self.receive_window_end) {
            (Some(p), Some(end)) => p.info.seq + u64::from(p.info.length) <= end,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    fn register(&self, register: Register) -> i64 {
        self.registers[register.index()]
    }

    fn apply(&mut self, actions: &[Action]) {
        for a in actions {
            match *a {
                Action::Push {
                    subflow_id, packet, ..
                } => {
                    for q in [Queue::Send, Queue::Unacked, Queue::Reinject] {
                        for p in self
                            .queue_mut(q)
                            .iter_mut()
                            .filter(|p| p.info.id == packet.id)
                        {
                            if !p.sent_on.contains(&subflow_id) {
                                p.sent_on.push(subflow_id);
                            }
                        }
                    }
                    if let Some(s) = self.subflow_mut(subflow_id) {
                        s.in_flight = s.in_flight.saturating_add(1);
                    }
                    let seq = [&self.q, &self.qu, &self.rq]
                        .into_iter()
                        .flat_map(|q| q.iter())
                        .find(|p| p.info.id == packet.id)
                        .map_or(0, |p| p.info.seq);
                    self.log.push(Transmission {
                        subflow_id,
                        packet: packet.id,
                        seq,
                    });
                }
                Action::Remove { packet } => {
                    let v = self.queue_mut(packet.queue);
                    if let Some(pos) = v.iter().position(|p| p.info.id == packet.id) {
                        let p = v.remove(pos);
                        if packet.queue == Queue::Send
                            && !self.qu.iter().any(|u| u.info.id == p.info.id)
                        {
                            self.qu.push(p);
                        }
                    }
                }
                Action::SetSubflowUser {
                    subflow_id, value, ..
                } => {
                    if let Some(s) = self.subflow_mut(subflow_id) {
                        s.user = value;
                    }
                }
                Action::SetRegister { register, value } => self.registers[register.index()] = value,
            }
        }
    }
}
