//! Scheduled sending: the switch from sending the stream directly on one
//! path to cutting it into segments that a ProgMP program assigns to paths,
//! the program and its registers, message tags and `PRINT` capture, and
//! the per-path queues the scheduler fills (what a path sends next).
//!
//! The model is ProgMP's scheduling environment (thesis §3.3.1): the
//! queues `Q`, `QU` and `RQ` live in [`crate::multipath`]; a run's `PUSH`
//! appends a segment to a path's own queue (`QUEUED`), which the path
//! drains as its window and pacer allow. The scheduler runs only when
//! something it sees changed (`Multipath::due`), and a path sends its own
//! losses before anything new, as an MPTCP subflow retransmits on itself.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use braid_core::Instant;
use braid_progmp::{Program, Register, Scheduler};

use super::Connection;
use crate::multipath::Multipath;
use crate::wire;

/// Longest Data packet header.
const MAX_DATA_HEADER: usize = wire::MAX_DATA_HEADER_LEN;

/// The scheduler used when a connection becomes multipath without one
/// chosen: the shipped minimum-RTT scheduler, compiled once per process.
fn default_program() -> Arc<Program> {
    static DEFAULT: OnceLock<Arc<Program>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let source = braid_progmp::builtin(braid_progmp::DEFAULT_SCHEDULER)
                .expect("the default scheduler is shipped")
                .source;
            Arc::new(Program::compile(source).expect("the shipped default scheduler compiles"))
        })
        .clone()
}

impl Connection {
    /// Switch to scheduled sending (idempotent).
    pub(super) fn enter_multipath(&mut self) {
        if self.mp.is_some() {
            return;
        }
        let program = self.program.clone().unwrap_or_else(default_program);
        // A seed for `RANDOM` that differs between connections but is a
        // function of the endpoint's seed, like the connection ID.
        let scheduler = Scheduler::new(program, self.local_cid ^ 0x5c4e_d01e);
        // A segment fills a datagram: less the header and, when sealed, the tag.
        let budget = usize::from(self.config.max_datagram_size) - MAX_DATA_HEADER - self.seal_overhead();
        // Until now every packet was the first path's: its counters (kept
        // only while several paths share the connection's) start from the
        // connection's.
        let counters = self.single_path_counters();
        self.paths[0].counters = counters;
        let mut mp = Multipath::new(scheduler, &mut self.send, budget);
        mp.registers = self.registers;
        mp.prints = self.capture_prints.then(VecDeque::new);
        self.mp = Some(Box::new(mp));
    }

    /// The first path's counters while it is the only one: the
    /// connection's (every new stream byte sent once, plus resends).
    pub(super) fn single_path_counters(&self) -> crate::path::PathCounters {
        crate::path::PathCounters {
            packets_sent: self.stats.packets_sent,
            bytes_sent: self.stats.bytes_sent,
            packets_received: self.stats.packets_received,
            bytes_received: self.stats.bytes_received,
            packets_lost: self.paths[0].counters.packets_lost,
            stream_bytes_sent: self.send.next_unsent() + self.stats.retransmitted_bytes,
        }
    }

    /// Use `program` to schedule this connection's packets from now on
    /// (scheduled sending even on one path).
    pub(crate) fn set_scheduler(&mut self, program: Arc<Program>) {
        self.program = Some(program.clone());
        match &mut self.mp {
            Some(mp) => {
                mp.scheduler = Scheduler::new(program, self.local_cid ^ 0x5c4e_d01e);
                mp.due = true;
            }
            None => self.enter_multipath(),
        }
    }

    /// The scheduler this connection uses or will use.
    pub(crate) fn scheduler(&self) -> Option<Arc<Program>> {
        match &self.mp {
            Some(mp) => Some(mp.scheduler.program().clone()),
            None => self.program.clone(),
        }
    }

    /// Sets a register: the scheduler's if it runs (a trigger), else kept
    /// for when it starts.
    pub(crate) fn set_register(&mut self, register: Register, value: i64) {
        match &mut self.mp {
            Some(mp) => {
                mp.registers[register.index()] = value;
                mp.due = true;
            }
            None => self.registers[register.index()] = value,
        }
    }

    pub(crate) fn register(&self, register: Register) -> i64 {
        match &self.mp {
            Some(mp) => mp.registers[register.index()],
            None => self.registers[register.index()],
        }
    }

    pub(crate) fn set_user_tag(&mut self, tag: i64) {
        self.user_tag = tag;
    }

    pub(crate) fn capture_prints(&mut self, on: bool) {
        self.capture_prints = on;
        if let Some(mp) = &mut self.mp {
            mp.prints = if on { Some(mp.prints.take().unwrap_or_default()) } else { None };
        }
    }

    pub(crate) fn capture_sent(&mut self, on: bool) {
        self.sent_capture = if on { Some(self.sent_capture.take().unwrap_or_default()) } else { None };
    }

    pub(crate) fn take_sent(&mut self) -> Vec<crate::SentPacketInfo> {
        self.sent_capture.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub(crate) fn take_prints(&mut self) -> Vec<String> {
        match self.mp.as_mut().and_then(|mp| mp.prints.as_mut()) {
            Some(log) => log.drain(..).collect(),
            None => Vec::new(),
        }
    }

    pub(super) fn run_scheduler(&mut self, now: Instant) {
        if let Some(mp) = &mut self.mp {
            if mp.due {
                mp.run(now, &mut self.paths, self.peer_max_data);
            }
        }
    }

    /// Drops acknowledged segments from the heads of path `i`'s queues.
    pub(super) fn purge_path_queues(&mut self, i: usize) {
        let Some(mp) = &mut self.mp else { return };
        let sched = &mut self.paths[i].sched;
        while sched.retransmit.front().is_some_and(|&id| mp.segments.get(id).is_none()) {
            sched.retransmit.pop_front();
        }
        while sched.queued.front().is_some_and(|&id| mp.segments.get(id).is_none()) {
            sched.queued.pop_front();
            // The queue shrank: the path may no longer be throttled.
            mp.due = true;
        }
    }

    /// Path `i` has data it may send now (flow control permitting).
    pub(super) fn path_has_data(&self, i: usize) -> bool {
        let path = &self.paths[i];
        if !path.validated {
            return false;
        }
        if !path.sched.retransmit.is_empty() || self.send.has_retransmissions() {
            return true;
        }
        let Some(mp) = &self.mp else { return false };
        path.sched
            .queued
            .front()
            .and_then(|&id| mp.segments.get(id))
            .is_some_and(|s| s.seq + u64::from(s.len) <= self.peer_max_data)
    }

    /// Takes the next segment path `i` should send, if it fits in `room`
    /// bytes and the peer's window: its own losses first, then what the
    /// scheduler gave it. Data lost before scheduling began goes first of
    /// all (`None` while there is some).
    pub(super) fn take_segment(&mut self, i: usize, room: usize) -> Option<u64> {
        let mp = self.mp.as_mut()?;
        let sched = &mut self.paths[i].sched;
        let max_data = self.peer_max_data;
        let fits = |s: &crate::multipath::Segment| s.frame_bytes as usize <= room && s.seq + u64::from(s.len) <= max_data;
        if let Some(&id) = sched.retransmit.front() {
            if mp.segments.get(id).is_some_and(fits) {
                sched.retransmit.pop_front();
                return Some(id);
            }
            return None;
        }
        if self.send.has_retransmissions() {
            return None;
        }
        let &id = sched.queued.front()?;
        if mp.segments.get(id).is_some_and(fits) {
            sched.queued.pop_front();
            // The queue shrank: the path may no longer be throttled.
            mp.due = true;
            return Some(id);
        }
        None
    }

    /// Writes segment `id`'s DATA frames; returns its stream range.
    pub(super) fn write_segment(&mut self, i: usize, id: u64, buf: &mut Vec<u8>) -> Option<std::ops::Range<u64>> {
        let seg = self.mp.as_ref()?.segments.get(id)?;
        let (seq, len, was_lost) = (seg.seq, u64::from(seg.len), seg.was_lost);
        self.send.encode_range(buf, seq, len);
        if was_lost {
            self.stats.retransmitted_bytes += len;
        }
        self.paths[i].counters.stream_bytes_sent += len;
        Some(seq..seq + len)
    }
}
