//! CoDel, "Controlled Delay" (Nichols, Jacobson, McGregor, Iyengar:
//! RFC 8289, 2018): the state machine that decides, as each packet leaves
//! the queue, whether to drop it, and a FIFO queue managed by it.
//!
//! Model (RFC 8289 §3): a *standing* queue, not a burst, is what to fight,
//! and the sign of one is that the smallest sojourn time over an interval
//! stayed above a target. So at each dequeue the packet's sojourn time
//! (now − its arrival) is compared with `target` (5 ms by default); once
//! it has stayed at or above `target` for `interval` (100 ms, about a
//! worst-case RTT) CoDel enters *dropping state*, drops a packet, and then
//! drops the next ones at times following the control law
//! `t + interval / √count` (§4.4): the drop rate grows as √count until the
//! sojourn time falls below `target`, which ends dropping state. When a
//! new dropping state starts soon (16 intervals) after the last one ended,
//! the count restarts from the number of drops of the last cycle rather
//! than 1 (the re-entry rule of §5.6, the Linux form), since that rate
//! controlled the queue last time. A queue holding at most one maximal
//! packet is never above target (`bytes() <= maxpacket_`): on slow links
//! one packet's transmission can exceed the target by itself.
//!
//! The code follows the pseudocode of RFC 8289 §5 (`dodequeue`, `dequeue`,
//! `control_law`), with the largest packet seen as `maxpacket` and the
//! backlog tested after the dequeue, as there and in Linux's
//! `codel_dequeue`.

use std::collections::VecDeque;
use std::time::Duration;

use braid_core::Instant;

use super::Packet;

/// CoDel's two parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodelParams {
    /// Acceptable standing queueing delay.
    pub target: Duration,
    /// How long the sojourn time must stay above `target` before dropping
    /// starts; also the scale of the control law.
    pub interval: Duration,
}

/// What CoDel's dequeue needs from the queue it manages.
pub(crate) trait CodelQueue {
    /// Take the packet at the head.
    fn pop(&mut self) -> Option<Packet>;
    /// Bytes still queued (after a `pop`): the backlog of the `bytes() <=
    /// maxpacket_` test.
    fn backlog(&self) -> u64;
}

/// The per-queue state of RFC 8289 §5.3.
#[derive(Debug, Clone, Default)]
pub(crate) struct CodelVars {
    /// Drops since entering dropping state (`count_`).
    count: u32,
    /// `count` when dropping state was last entered (`lastcount_`).
    lastcount: u32,
    /// In dropping state (`dropping_`).
    dropping: bool,
    /// When the sojourn time, above target since then, will have been so
    /// for an interval (`first_above_time_`; `None` = below target).
    first_above_time: Option<Instant>,
    /// When the next drop is due in dropping state (`drop_next_`).
    drop_next: Instant,
}

impl CodelVars {
    /// Whether the queue is in dropping state.
    #[cfg(test)]
    pub(crate) fn dropping(&self) -> bool {
        self.dropping
    }

    /// Drops in the current (or last) dropping state.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// `control_law`: the next drop time after `t` with `count` drops.
    fn control_law(t: Instant, interval: Duration, count: u32) -> Instant {
        let ns = interval.as_nanos() as f64 / f64::from(count.max(1)).sqrt();
        t + Duration::from_nanos(ns.round() as u64)
    }

    /// `dodequeue`: take the head packet and say whether it may be dropped
    /// (sojourn time above target for at least an interval).
    fn dodequeue(
        &mut self,
        now: Instant,
        p: &CodelParams,
        max_packet: &mut u64,
        queue: &mut impl CodelQueue,
    ) -> (Option<Packet>, bool) {
        let Some(packet) = queue.pop() else {
            // An empty queue cannot be above target.
            self.first_above_time = None;
            return (None, false);
        };
        *max_packet = (*max_packet).max(packet.len);
        let sojourn = now.saturating_duration_since(packet.enqueued);
        if sojourn < p.target || queue.backlog() <= *max_packet {
            // Went below: stay below for at least an interval.
            self.first_above_time = None;
            return (Some(packet), false);
        }
        match self.first_above_time {
            None => {
                self.first_above_time = Some(now + p.interval);
                (Some(packet), false)
            }
            Some(t) => (Some(packet), now >= t),
        }
    }

    /// `dequeue`: the packet to send at `now`, if any; packets CoDel drops
    /// on the way are appended to `dropped`.
    pub(crate) fn dequeue(
        &mut self,
        now: Instant,
        p: &CodelParams,
        max_packet: &mut u64,
        queue: &mut impl CodelQueue,
        dropped: &mut Vec<Packet>,
    ) -> Option<Packet> {
        let (mut packet, mut ok_to_drop) = self.dodequeue(now, p, max_packet, queue);
        if self.dropping {
            if !ok_to_drop {
                // Sojourn time below target: leave dropping state.
                self.dropping = false;
            }
            // A large backlog can make the next drop due already: loop.
            while self.dropping && now >= self.drop_next {
                dropped.extend(packet.take());
                self.count = self.count.saturating_add(1);
                (packet, ok_to_drop) = self.dodequeue(now, p, max_packet, queue);
                if ok_to_drop {
                    self.drop_next = Self::control_law(self.drop_next, p.interval, self.count);
                } else {
                    self.dropping = false;
                }
            }
        } else if ok_to_drop {
            dropped.extend(packet.take());
            (packet, _) = self.dodequeue(now, p, max_packet, queue);
            self.dropping = true;
            // Re-entering soon after the last dropping state: start from
            // the drop rate that controlled the queue then.
            let delta = self.count.saturating_sub(self.lastcount);
            let recent = now < self.drop_next + p.interval.saturating_mul(16);
            self.count = if delta > 1 && recent { delta } else { 1 };
            self.drop_next = Self::control_law(now, p.interval, self.count);
            self.lastcount = self.count;
        }
        packet
    }
}

/// One FIFO queue managed by CoDel (`aqm=codel`, Linux's `codel` qdisc).
#[derive(Debug, Clone)]
pub(crate) struct CodelFifo {
    queue: VecDeque<Packet>,
    bytes: u64,
    vars: CodelVars,
    params: CodelParams,
    max_packet: u64,
}

struct FifoView<'a> {
    queue: &'a mut VecDeque<Packet>,
    bytes: &'a mut u64,
}

impl CodelQueue for FifoView<'_> {
    fn pop(&mut self) -> Option<Packet> {
        let p = self.queue.pop_front()?;
        *self.bytes -= p.len;
        Some(p)
    }
    fn backlog(&self) -> u64 {
        *self.bytes
    }
}

impl CodelFifo {
    pub(crate) fn new(params: CodelParams) -> CodelFifo {
        CodelFifo {
            queue: VecDeque::new(),
            bytes: 0,
            vars: CodelVars::default(),
            params,
            max_packet: 0,
        }
    }

    pub(crate) fn params(&self) -> CodelParams {
        self.params
    }

    pub(crate) fn set_params(&mut self, params: CodelParams) {
        self.params = params;
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn packets(&self) -> u64 {
        self.queue.len() as u64
    }

    /// Append a packet (the caller checked the limit).
    pub(crate) fn push(&mut self, packet: Packet) {
        self.bytes += packet.len;
        self.queue.push_back(packet);
    }

    pub(crate) fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Packet>) -> Option<Packet> {
        let mut view = FifoView {
            queue: &mut self.queue,
            bytes: &mut self.bytes,
        };
        self.vars
            .dequeue(now, &self.params, &mut self.max_packet, &mut view, dropped)
    }

    /// Remove every packet, in arrival order.
    pub(crate) fn take_all(&mut self) -> Vec<Packet> {
        self.bytes = 0;
        self.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(x_us: u64) -> Instant {
        Instant::from_micros(x_us)
    }

    fn packet(id: u64, enqueued: Instant) -> Packet {
        Packet {
            id,
            len: 1500,
            enqueued,
            flow: 0,
        }
    }

    const P: CodelParams = CodelParams {
        target: Duration::from_millis(5),
        interval: Duration::from_millis(100),
    };

    /// A queue whose every packet has waited 50 ms when dequeued at the
    /// times the test uses: a standing queue far above target. Times of
    /// drops must follow the control law.
    #[test]
    fn drops_follow_the_control_law_in_a_standing_queue() {
        let mut q = CodelFifo::new(P);
        for i in 0..20_000 {
            q.push(packet(i, Instant::ZERO));
        }
        let mut drop_times = Vec::new();
        let mut dropped = Vec::new();
        // Dequeue every 1 ms from t = 50 ms (every packet's sojourn >= 50 ms).
        for k in 0..2_000u64 {
            let now = at(50_000 + k * 1000);
            dropped.clear();
            let sent = q.dequeue(now, &mut dropped);
            assert!(sent.is_some());
            drop_times.extend(dropped.iter().map(|_| now));
        }
        // First above target at 50 ms: dropping starts an interval later.
        assert_eq!(drop_times[0], at(150_000));
        // Then drop n+1 comes interval/sqrt(n) after drop n, rounded up to
        // the 1 ms dequeue grid.
        let mut due = at(150_000);
        for (n, t) in drop_times.iter().enumerate().skip(1) {
            due = CodelVars::control_law(due, P.interval, n as u32);
            let grid = at(due.as_nanos().div_ceil(1_000_000) * 1000);
            assert_eq!(*t, grid, "drop {n}");
        }
        assert!(drop_times.len() > 20);
    }

    #[test]
    fn leaves_dropping_state_when_the_queue_drains_and_reuses_the_count() {
        let mut q = CodelFifo::new(P);
        let mut dropped = Vec::new();
        for i in 0..2000 {
            q.push(packet(i, Instant::ZERO));
        }
        let mut now_us = 50_000;
        while q.vars.count() < 6 {
            assert!(q.packets() > 0);
            q.dequeue(at(now_us), &mut dropped);
            now_us += 1000;
        }
        assert!(q.vars.dropping());
        let drops_in_cycle = q.vars.count();
        // The standing queue goes: fresh packets, dequeued at once.
        q.take_all();
        for i in 0..3 {
            q.push(packet(1000 + i, at(now_us)));
        }
        q.dequeue(at(now_us), &mut dropped);
        assert!(!q.vars.dropping(), "below target: dropping state left");
        // A new standing queue soon after: the count restarts from the
        // drops of the last cycle (RFC 8289 §5.6), not from 1.
        q.take_all();
        let t0 = now_us;
        for i in 0..400 {
            q.push(packet(2000 + i, at(t0)));
        }
        let before = dropped.len();
        while dropped.len() == before {
            now_us += 1000;
            q.dequeue(at(now_us), &mut dropped);
        }
        assert!(q.vars.dropping());
        assert_eq!(q.vars.count(), drops_in_cycle - 1);
    }

    #[test]
    fn one_packet_backlog_never_counts_as_above_target() {
        let mut q = CodelFifo::new(P);
        let mut dropped = Vec::new();
        // Two packets at a time, each waiting 20 ms: after each dequeue
        // one packet is left, not more than maxpacket.
        for k in 0..100u64 {
            q.push(packet(2 * k, at(k * 20_000)));
            q.push(packet(2 * k + 1, at(k * 20_000)));
            q.dequeue(at(k * 20_000 + 20_000), &mut dropped);
            q.dequeue(at(k * 20_000 + 20_000), &mut dropped);
        }
        assert!(dropped.is_empty());
    }
}
