//! Scheduled (multipath) sending: the stream cut into segments, the queues
//! a ProgMP scheduler works on, and the [`Environment`] that shows them to
//! it (thesis §3.3.1, "Model of the Scheduling Environment").
//!
//! - `Q` holds segments the application wrote that the scheduler has not
//!   taken out yet: the stream after the last byte cut, in segments of at
//!   most one packet each, never mixing two application tags (`USER`).
//! - `QU` holds segments taken out of `Q` and not yet acknowledged, in the
//!   order they were taken.
//! - `RQ` holds segments of `QU` that a path suspects lost (three later
//!   packets acknowledged, the RACK time threshold, or a retransmission
//!   timeout) or that a removed path still carried: candidates for
//!   reinjection on another path. Acknowledged segments leave all queues.
//!
//! A run's `PUSH` appends the segment to the path's own queue (`QUEUED`);
//! the path sends it when its congestion window and pacer allow. Like an
//! MPTCP subflow, a path also resends what it lost itself, so a scheduler
//! that ignores `RQ` still delivers everything.
//!
//! Segments are identified by ProgMP [`PacketId`]s that increase with the
//! data sequence number, so a segment is found by its id in O(1).

use std::collections::VecDeque;

use braid_progmp::{
    Action, Environment, PacketId, PacketInfo, Queue, Register, Scheduler, SubflowInfo,
};

use crate::path::Path;
use crate::send_stream::SendStream;

/// Most paths a connection holds at once (slots of the `SENT_ON` bitmask).
pub const MAX_PATHS: usize = 16;

/// A path with this many segments given to it and not yet sent is
/// `THROTTLED`: more would only wait in its queue, and the scheduler should
/// decide close to the wire (thesis §3.3.3), as Linux's TCP small queues
/// throttle an MPTCP subflow.
pub(crate) const PATH_QUEUE_LIMIT: usize = 2;

/// Pushes beyond this many segments queued on one path are refused, so a
/// scheduler that ignores `QUEUED` cannot make a queue grow without bound.
pub(crate) const PATH_QUEUE_HARD_LIMIT: usize = 256;

/// Runs per trigger at most (a run that pushes nothing ends the series).
pub(crate) const MAX_RUNS_PER_TRIGGER: u32 = 64;

/// PRINT lines kept for [`crate::Endpoint::take_scheduler_prints`].
const MAX_CAPTURED_PRINTS: usize = 1 << 16;

/// A piece of the stream the scheduler sees as one packet.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub seq: u64,
    pub len: u32,
    /// Bytes its DATA frames take.
    pub frame_bytes: u32,
    pub user: i64,
    /// Ends a message (TCP's PSH).
    pub psh: bool,
    pub acked: bool,
    pub in_q: bool,
    pub in_rq: bool,
    /// A transmission of it was declared lost.
    pub was_lost: bool,
    /// Bit per path slot: pushed to (hence sent or about to be sent on)
    /// that path.
    pub sent_on: u64,
}

/// Segments and the queues `Q`, `QU` and `RQ` (by segment id).
#[derive(Debug, Default)]
pub(crate) struct Segments {
    segs: VecDeque<Segment>,
    /// Id of `segs[0]`.
    base: u64,
    q: VecDeque<u64>,
    qu: VecDeque<u64>,
    rq: VecDeque<u64>,
    /// Stream offset where the next segment starts.
    carved_end: u64,
    /// Most frame bytes in one segment.
    budget: usize,
    /// Acknowledged segments may still sit in `QU` or `RQ`.
    compact_due: bool,
}

impl Segments {
    pub fn new(carved_end: u64, budget: usize) -> Self {
        Segments { carved_end, budget, ..Default::default() }
    }

    /// The id of the live segment starting at stream offset `seq`.
    pub fn id_at(&self, seq: u64) -> Option<u64> {
        let i = self.segs.partition_point(|s| s.seq < seq);
        self.segs.get(i).filter(|s| s.seq == seq && !s.acked).map(|_| self.base + i as u64)
    }

    /// The live segment `id`; `None` once acknowledged and freed.
    pub fn get(&self, id: u64) -> Option<&Segment> {
        let i = id.checked_sub(self.base)?;
        self.segs.get(i as usize).filter(|s| !s.acked)
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Segment> {
        let i = id.checked_sub(self.base)?;
        self.segs.get_mut(i as usize).filter(|s| !s.acked)
    }

    pub fn q_len(&self) -> usize {
        self.q.len()
    }

    /// Length of `QU`, acknowledged entries still included.
    pub fn qu_len(&self) -> usize {
        self.qu.len()
    }

    pub fn rq_len(&self) -> usize {
        self.rq.len()
    }

    /// The head of `Q`.
    pub fn q_front(&self) -> Option<&Segment> {
        self.q.front().and_then(|&id| self.get(id))
    }

    /// Cuts the stream written since the last call into segments at the
    /// end of `Q`. The last segment grows instead if no path has taken it
    /// yet and the new bytes share its tag.
    pub fn carve(&mut self, send: &mut SendStream) {
        let newest = (self.base + self.segs.len() as u64).checked_sub(1);
        if self.q.back().is_some() && self.q.back().copied() == newest {
            if let Some(seg) = self.segs.back_mut().filter(|s| s.sent_on == 0 && s.in_q && !s.acked) {
                {
                    if let Some(e) = send.measure(seg.seq, self.budget) {
                        if e.len > u64::from(seg.len) && e.user == seg.user {
                            seg.len = e.len as u32;
                            seg.frame_bytes = e.frame_bytes as u32;
                            seg.psh = e.message_end;
                            self.carved_end = seg.seq + e.len;
                        }
                    }
                }
            }
        }
        while let Some(e) = send.measure(self.carved_end, self.budget) {
            let id = self.base + self.segs.len() as u64;
            self.segs.push_back(Segment {
                seq: self.carved_end,
                len: e.len as u32,
                frame_bytes: e.frame_bytes as u32,
                user: e.user,
                psh: e.message_end,
                acked: false,
                in_q: true,
                in_rq: false,
                was_lost: false,
                sent_on: 0,
            });
            self.q.push_back(id);
            self.carved_end += e.len;
        }
        send.skip_unsent_to(self.carved_end);
    }

    /// Segment `id` was acknowledged: it leaves every queue. Returns
    /// whether it was not acknowledged before.
    pub fn on_acked(&mut self, id: u64) -> bool {
        let Some(seg) = self.get_mut(id) else { return false };
        seg.acked = true;
        let in_q = seg.in_q;
        if in_q {
            // Pushed with `Q.TOP` and never popped: rare, so a search.
            if let Some(pos) = self.q.iter().position(|&x| x == id) {
                self.q.remove(pos);
            }
        }
        self.compact_due = true;
        while self.segs.front().is_some_and(|s| s.acked) {
            self.segs.pop_front();
            self.base += 1;
        }
        true
    }

    /// A transmission of segment `id` was declared lost: it joins `RQ`
    /// (once) if it is in flight (`QU`). Returns whether it is still
    /// unacknowledged.
    pub fn on_lost(&mut self, id: u64) -> bool {
        let Some(seg) = self.get_mut(id) else { return false };
        seg.was_lost = true;
        let join = !seg.in_q && !seg.in_rq;
        if join {
            seg.in_rq = true;
            self.rq.push_back(id);
        }
        true
    }

    /// Segment `id` needs another path (its path is gone or failing): it
    /// joins `RQ` if in flight.
    pub fn reinject(&mut self, id: u64) {
        if let Some(seg) = self.get_mut(id) {
            if !seg.in_q && !seg.in_rq {
                seg.in_rq = true;
                self.rq.push_back(id);
            }
        }
    }

    /// Forget path slot `slot` in every segment (it is being reused).
    pub fn clear_slot(&mut self, slot: u8) {
        let mask = !(1u64 << slot);
        for s in &mut self.segs {
            s.sent_on &= mask;
        }
    }

    fn compact(&mut self) {
        if !self.compact_due {
            return;
        }
        self.compact_due = false;
        let (segs, base) = (&self.segs, self.base);
        let live = |id: &u64| id.checked_sub(base).and_then(|i| segs.get(i as usize)).is_some_and(|s| !s.acked);
        self.qu.retain(live);
        self.rq.retain(live);
    }

    fn queue(&self, queue: Queue) -> &VecDeque<u64> {
        match queue {
            Queue::Send => &self.q,
            Queue::Unacked => &self.qu,
            Queue::Reinject => &self.rq,
        }
    }

    fn at(&self, queue: Queue, index: usize) -> Option<(u64, &Segment)> {
        let id = *self.queue(queue).get(index)?;
        self.get(id).map(|s| (id, s))
    }

    /// Takes segment `id` out of `Q` into `QU`.
    fn take_from_q(&mut self, id: u64) {
        if let Some(pos) = self.q.iter().position(|&x| x == id) {
            self.q.remove(pos);
            if let Some(seg) = self.get_mut(id) {
                seg.in_q = false;
                self.qu.push_back(id);
            }
        }
    }

    /// Puts segment `id`, taken out of `Q` but pushed nowhere (its pushes
    /// were refused), back into `Q` in sequence order: a popped packet is
    /// never lost (thesis §3.3.2).
    fn return_to_q(&mut self, id: u64) {
        let Some(seg) = self.get_mut(id) else { return };
        if seg.in_q || seg.acked || seg.sent_on != 0 {
            return;
        }
        seg.in_q = true;
        if let Some(pos) = self.qu.iter().position(|&x| x == id) {
            self.qu.remove(pos);
        }
        let at = self.q.partition_point(|&x| x < id);
        self.q.insert(at, id);
    }

    fn take_from_rq(&mut self, id: u64) {
        if let Some(pos) = self.rq.iter().position(|&x| x == id) {
            self.rq.remove(pos);
            if let Some(seg) = self.get_mut(id) {
                seg.in_rq = false;
            }
        }
    }
}

/// What the scheduler did, for [`crate::ConnectionStats`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SchedCounters {
    pub runs: u64,
    pub pushes: u64,
    pub refused_pushes: u64,
}

/// A connection's scheduled-sending state.
pub(crate) struct Multipath {
    pub scheduler: Scheduler,
    pub segments: Segments,
    pub registers: [i64; 6],
    /// Something happened that may let the scheduler make progress.
    pub due: bool,
    pub prints: Option<VecDeque<String>>,
    pub counters: SchedCounters,
}

impl std::fmt::Debug for Multipath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multipath")
            .field("scheduler", &self.scheduler)
            .field("q", &self.segments.q_len())
            .field("qu", &self.segments.qu_len())
            .field("rq", &self.segments.rq_len())
            .finish()
    }
}

impl Multipath {
    pub fn new(scheduler: Scheduler, send: &mut SendStream, budget: usize) -> Self {
        let mut segments = Segments::new(send.next_unsent(), budget);
        segments.carve(send);
        Multipath { scheduler, segments, registers: [0; 6], due: true, prints: None, counters: SchedCounters::default() }
    }

    /// Runs the scheduler until a run pushes nothing (at most
    /// [`MAX_RUNS_PER_TRIGGER`] runs), applying each run's actions.
    pub fn run(&mut self, now: braid_core::Instant, paths: &mut [Path], peer_max_data: u64) {
        self.due = false;
        self.segments.compact();
        let mut env = Env::new(paths, &mut self.segments, &mut self.registers, peer_max_data);
        for _ in 0..MAX_RUNS_PER_TRIGGER {
            let report = self.scheduler.run(&mut env, now);
            self.counters.runs += 1;
            self.counters.pushes += u64::from(report.pushes);
            if let Some(log) = &mut self.prints {
                for line in self.scheduler.prints() {
                    if log.len() == MAX_CAPTURED_PRINTS {
                        log.pop_front();
                    }
                    log.push_back(line.to_string());
                }
            }
            if report.pushes == 0 {
                break;
            }
        }
        self.counters.refused_pushes += env.refused;
    }
}

/// The scheduling environment of one run: the validated paths (in the
/// order they were added) as `SUBFLOWS`, the segment queues, the
/// registers.
struct Env<'a> {
    paths: &'a mut [Path],
    /// `SUBFLOWS[i]` is `paths[visible[i]]`.
    visible: [u8; MAX_PATHS],
    count: usize,
    segments: &'a mut Segments,
    registers: &'a mut [i64; 6],
    peer_max_data: u64,
    refused: u64,
    /// Segments whose push was refused in the current run.
    refused_ids: Vec<u64>,
}

impl<'a> Env<'a> {
    fn new(paths: &'a mut [Path], segments: &'a mut Segments, registers: &'a mut [i64; 6], peer_max_data: u64) -> Self {
        let mut visible = [0u8; MAX_PATHS];
        let mut count = 0;
        for (i, p) in paths.iter().enumerate() {
            if p.validated && count < MAX_PATHS {
                visible[count] = i as u8;
                count += 1;
            }
        }
        Env { paths, visible, count, segments, registers, peer_max_data, refused: 0, refused_ids: Vec::new() }
    }

    fn path(&self, subflow: usize) -> Option<&Path> {
        (subflow < self.count).then(|| &self.paths[self.visible[subflow] as usize])
    }
}

impl Environment for Env<'_> {
    fn subflow_count(&self) -> usize {
        self.count
    }

    fn subflow(&self, index: usize) -> SubflowInfo {
        self.path(index).map(Path::subflow_info).unwrap_or_default()
    }

    fn queue_len(&self, queue: Queue) -> usize {
        self.segments.queue(queue).len()
    }

    fn packet(&self, queue: Queue, index: usize) -> PacketInfo {
        match self.segments.at(queue, index) {
            Some((id, s)) => PacketInfo { id: PacketId(id), seq: s.seq, length: s.len, user: s.user, psh: s.psh },
            None => PacketInfo::default(),
        }
    }

    fn sent_on(&self, queue: Queue, index: usize, subflow: usize) -> bool {
        match (self.segments.at(queue, index), self.path(subflow)) {
            (Some((_, s)), Some(p)) => s.sent_on & (1 << p.slot) != 0,
            _ => false,
        }
    }

    fn has_window_for(&self, subflow: usize, queue: Queue, index: usize) -> bool {
        match (self.segments.at(queue, index), self.path(subflow)) {
            (Some((_, s)), Some(_)) => s.seq + u64::from(s.len) <= self.peer_max_data,
            _ => false,
        }
    }

    fn register(&self, register: Register) -> i64 {
        self.registers[register.index()]
    }

    fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            match *action {
                Action::Push { subflow, packet, .. } => {
                    let Some(&pi) = self.visible[..self.count].get(subflow) else { continue };
                    let path = &mut self.paths[pi as usize];
                    let Some(seg) = self.segments.get_mut(packet.id.0) else { continue };
                    if path.sched.queued.len() >= PATH_QUEUE_HARD_LIMIT {
                        self.refused += 1;
                        self.refused_ids.push(packet.id.0);
                        continue;
                    }
                    seg.sent_on |= 1 << path.slot;
                    path.sched.queued.push_back(packet.id.0);
                }
                Action::Remove { packet } => match packet.queue {
                    Queue::Send => self.segments.take_from_q(packet.id.0),
                    Queue::Reinject => self.segments.take_from_rq(packet.id.0),
                    Queue::Unacked => {}
                },
                Action::SetSubflowUser { subflow, value, .. } => {
                    if let Some(&pi) = self.visible[..self.count].get(subflow) {
                        self.paths[pi as usize].sched.user = value;
                    }
                }
                Action::SetRegister { register, value } => self.registers[register.index()] = value,
            }
        }
        // After every action of the run, so that a POP applied after the
        // refused PUSH of its packet is undone too.
        for id in self.refused_ids.drain(..) {
            self.segments.return_to_q(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn carving_fills_segments_and_grows_an_untaken_tail() {
        let mut send = SendStream::new();
        send.push_tagged(Bytes::from(vec![0u8; 100]), 0);
        let mut s = Segments::new(0, 1400);
        s.carve(&mut send);
        assert_eq!(s.q_len(), 1);
        assert_eq!(s.get(0).unwrap().len, 102); // a 2-byte length prefix

        // More data with the same tag: the tail grows.
        send.push_tagged(Bytes::from(vec![0u8; 100]), 0);
        s.carve(&mut send);
        assert_eq!(s.q_len(), 1);
        assert_eq!(s.get(0).unwrap().len, 204);
        // Another tag starts a new segment.
        send.push_tagged(Bytes::from(vec![0u8; 100]), 5);
        s.carve(&mut send);
        assert_eq!(s.q_len(), 2);
        assert_eq!((s.get(1).unwrap().seq, s.get(1).unwrap().user), (204, 5));
        // A big write is cut into segments that each fit the budget.
        send.push_tagged(Bytes::from(vec![0u8; 10_000]), 5);
        s.carve(&mut send);
        let mut end = 0;
        for id in 0..s.q_len() as u64 {
            let g = s.get(id).unwrap();
            assert_eq!(g.seq, end);
            assert!(g.frame_bytes as usize <= 1400);
            end = g.seq + u64::from(g.len);
        }
        assert_eq!(end, send.end());
        assert_eq!(send.next_unsent(), end);
    }

    #[test]
    fn a_segment_pushed_nowhere_goes_back_to_q_in_order() {
        let mut send = SendStream::new();
        send.push_tagged(Bytes::from(vec![0u8; 5000]), 0);
        let mut s = Segments::new(0, 1400);
        s.carve(&mut send);
        s.take_from_q(0);
        s.take_from_q(1);
        s.return_to_q(1);
        s.return_to_q(0);
        assert_eq!(s.q.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(s.qu_len(), 0);
        // One pushed somewhere stays out.
        s.take_from_q(0);
        s.get_mut(0).unwrap().sent_on = 1;
        s.return_to_q(0);
        assert_eq!((s.q_len(), s.qu_len()), (3, 1));
    }

    #[test]
    fn acknowledged_segments_leave_every_queue() {
        let mut send = SendStream::new();
        send.push_tagged(Bytes::from(vec![0u8; 5000]), 0);
        let mut s = Segments::new(0, 1400);
        s.carve(&mut send);
        s.take_from_q(0);
        s.take_from_q(1);
        assert!(s.on_lost(1));
        assert_eq!((s.q_len(), s.qu_len(), s.rq_len()), (2, 2, 1));
        assert!(s.on_acked(1));
        assert!(!s.on_acked(1), "acknowledged once");
        assert_eq!(s.id_at(s.get(2).unwrap().seq), Some(2));
        assert!(s.on_acked(2), "still in Q: acknowledged after a PUSH of Q.TOP");
        assert_eq!(s.id_at(1400), None);
        s.compact();
        assert_eq!((s.q_len(), s.qu_len(), s.rq_len()), (1, 1, 0));
        assert!(s.on_acked(0));
        assert!(s.get(0).is_none() && s.get(1).is_none() && s.get(3).is_some());
    }
}
