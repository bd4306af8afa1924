//! [`Link`]: one direction of a path, as a sans-IO object that tells the
//! fate of each packet given to it.
//!
//! A packet goes through, in order: the MTU check; the queue discipline
//! and the rate limiter (so a packet lost later still used the bottleneck,
//! like a packet corrupted on the wire after a router); random loss
//! (Bernoulli, then Gilbert–Elliott); propagation delay plus jitter,
//! clamped so arrivals never go backwards; then, with the `reorder`
//! probability, an extra delay that lets later packets overtake it; and
//! with the `dup` probability a second copy, made after the bottleneck,
//! arriving together with the first.
//!
//! Two ways in. [`Link::enqueue`] / [`Link::poll`] work for every queue
//! discipline: a packet is queued now and its fate ([`Outcome`]) is
//! reported as soon as it is decided: at once for disciplines that decide
//! at enqueue (drop-tail, PIE, RED: the queue is one FIFO, so the
//! departure of an accepted packet is known when it arrives), and when the
//! link's server takes it from the queue for CoDel and FQ-CoDel (whose
//! decisions depend on later arrivals: CoDel's test of the backlog behind
//! a packet, FQ-CoDel's order among flows). [`Link::next_event`] says when
//! to poll next. [`Link::offer`] answers at once and is the short way for
//! the enqueue-deciding disciplines.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use braid_core::{Instant, Rng, RngExt, SeedableRng};

use crate::aqm::{Discipline, EarlyDrop, Packet};
use crate::bottleneck::{Bottleneck, Source};
use crate::loss::BurstState;
use crate::spec::{Change, LinkParams, ResolvedQueue};

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Larger than the MTU.
    Mtu,
    /// The queue in front of the bottleneck was full (tail drop, or under
    /// FQ-CoDel a drop from the head of the fattest flow queue).
    QueueFull,
    /// The queue discipline dropped it early (CoDel, PIE, RED, FQ-CoDel).
    Aqm,
    /// Independent random loss (`loss=`).
    Loss,
    /// Gilbert–Elliott burst loss (`ge=`).
    BurstLoss,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::Mtu => "larger than the MTU",
            DropReason::QueueFull => "queue full",
            DropReason::Aqm => "AQM drop",
            DropReason::Loss => "random loss",
            DropReason::BurstLoss => "burst loss",
        })
    }
}

/// A packet's number on its link, in the order packets were given to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PacketId(pub u64);

/// The decided fate of a packet queued by [`Link::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The packet arrives at `at` (and a duplicate at `duplicate_at`).
    Delivered {
        /// Which packet.
        id: PacketId,
        /// Arrival time of the packet.
        at: Instant,
        /// Arrival time of a duplicate, if one is made.
        duplicate_at: Option<Instant>,
    },
    /// The packet never arrives.
    Dropped {
        /// Which packet.
        id: PacketId,
        /// Why.
        reason: DropReason,
    },
}

impl Outcome {
    /// The packet this is about.
    pub fn id(&self) -> PacketId {
        match self {
            Outcome::Delivered { id, .. } | Outcome::Dropped { id, .. } => *id,
        }
    }
}

/// The fate of one offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Queued by a discipline that decides at dequeue (CoDel, FQ-CoDel):
    /// the fate comes later from [`Link::poll`], under this id.
    Queued(PacketId),
    /// The packet never arrives.
    Dropped(DropReason),
    /// The packet arrives at `at`; if `duplicate_at` is set a second copy
    /// arrives then too.
    Deliver {
        /// Arrival time of the packet.
        at: Instant,
        /// Arrival time of a duplicate, if one is made.
        duplicate_at: Option<Instant>,
    },
}

/// Counters of one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkStats {
    /// Packets offered.
    pub offered: u64,
    /// Bytes offered.
    pub bytes_offered: u64,
    /// Packets delivered (duplicates not counted).
    pub delivered: u64,
    /// Bytes delivered (duplicates not counted).
    pub bytes_delivered: u64,
    /// Dropped because larger than the MTU.
    pub dropped_mtu: u64,
    /// Dropped because the queue was full.
    pub dropped_queue: u64,
    /// Dropped by the queue discipline (CoDel, PIE, RED, FQ-CoDel).
    #[serde(default)]
    pub dropped_aqm: u64,
    /// Dropped by independent random loss.
    pub dropped_loss: u64,
    /// Dropped by Gilbert–Elliott burst loss.
    pub dropped_burst: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
    /// Packets held back so that later ones could overtake them.
    pub reordered: u64,
    /// Largest queue backlog seen, in bytes, right after accepting a packet.
    pub max_backlog_bytes: u64,
}

impl LinkStats {
    /// Packets dropped for any reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_mtu
            + self.dropped_queue
            + self.dropped_aqm
            + self.dropped_loss
            + self.dropped_burst
    }

    /// Packets dropped for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Mtu => self.dropped_mtu,
            DropReason::QueueFull => self.dropped_queue,
            DropReason::Aqm => self.dropped_aqm,
            DropReason::Loss => self.dropped_loss,
            DropReason::BurstLoss => self.dropped_burst,
        }
    }

    fn count_drop(&mut self, reason: DropReason) {
        match reason {
            DropReason::Mtu => self.dropped_mtu += 1,
            DropReason::QueueFull => self.dropped_queue += 1,
            DropReason::Aqm => self.dropped_aqm += 1,
            DropReason::Loss => self.dropped_loss += 1,
            DropReason::BurstLoss => self.dropped_burst += 1,
        }
    }
}

/// One direction of a link: give it packets, it tells their fate.
///
/// No I/O and no clock: time is whatever the caller passes to
/// [`enqueue`](Self::enqueue), [`poll`](Self::poll) or
/// [`offer`](Self::offer), which must not go backwards (an earlier time is
/// taken as the latest one). The same params, seed and sequence of calls
/// always give the same fates.
///
/// ```
/// use braid_link::{Direction, Link, LinkSpec, Verdict};
/// use braid_core::Instant;
/// use std::time::Duration;
///
/// let spec: LinkSpec = "rtt=20ms,rate=12mbit".parse().unwrap();
/// let mut link = Link::new(spec.params(Direction::AToB), 7);
/// // 1500 bytes take 1 ms at 12 Mbit/s, then 10 ms of propagation.
/// let v = link.offer(Instant::ZERO, 1500);
/// assert_eq!(v, Verdict::Deliver { at: Instant::ZERO + Duration::from_millis(11), duplicate_at: None });
/// // The next packet waits for the first to be serialized.
/// let v = link.offer(Instant::ZERO, 1500);
/// assert_eq!(v, Verdict::Deliver { at: Instant::ZERO + Duration::from_millis(12), duplicate_at: None });
/// assert_eq!(link.stats().delivered, 2);
/// ```
///
/// With a discipline that decides at dequeue, the fate comes later:
///
/// ```
/// use braid_link::{Direction, Link, LinkSpec, Outcome};
/// use braid_core::Instant;
/// use std::time::Duration;
///
/// let spec: LinkSpec = "rtt=20ms,rate=12mbit,aqm=fq_codel".parse().unwrap();
/// let mut link = Link::new(spec.params(Direction::AToB), 7);
/// // Ten packets of a bulk flow, then one of a sparse flow.
/// let bulk: Vec<_> = (0..10).map(|_| link.enqueue(Instant::ZERO, 1500, 1).unwrap()).collect();
/// let sparse = link.enqueue(Instant::ZERO, 100, 2).unwrap();
/// let mut order = Vec::new();
/// while let Some(t) = link.next_event() {
///     while let Some(o) = link.poll(t) {
///         if let Outcome::Delivered { id, at, .. } = o {
///             order.push((id, at));
///         }
///     }
/// }
/// // The bulk flow spends its quantum (1514 bytes: two packets), then
/// // the new sparse flow goes, ahead of the bulk backlog.
/// assert_eq!(order[0], (bulk[0], Instant::ZERO + Duration::from_millis(11)));
/// assert_eq!(order[2].0, sparse);
/// assert_eq!(link.stats().delivered, 11);
/// ```
#[derive(Debug, Clone)]
pub struct Link {
    params: LinkParams,
    queue: Option<ResolvedQueue>,
    rng: Rng,
    bottleneck: Bottleneck,
    burst: BurstState,
    /// Latest arrival of a packet not picked for reordering: later packets
    /// arrive no earlier, so jitter never reorders.
    last_arrival: Instant,
    stats: LinkStats,
    /// Changes still to come, relative to `schedule_origin`
    /// (`params.schedule` is moved here; `params` holds what is in force).
    schedule: Vec<Change>,
    /// The next entry of `schedule` to apply.
    next_change: usize,
    /// When the current schedule started (creation or the last `set_params`).
    schedule_origin: Instant,
    /// When the parameters in force took effect: where a rate trace starts.
    since: Instant,
    /// Latest time passed in (taken as "now" by `set_params`).
    last_now: Instant,
    /// The queue discipline in force, with its state.
    discipline: Discipline,
    /// Seeds FQ-CoDel's flow hash (as Linux perturbs its hash).
    perturbation: u64,
    /// The id of the next packet.
    next_id: u64,
    /// Decided fates not yet polled, in the order they were decided.
    outcomes: VecDeque<Outcome>,
    /// With a discipline that decides at dequeue: when the server can
    /// take the next packet (the end of the last one's serialization, or
    /// the arrival that found the link idle).
    server_free: Instant,
    /// Reused buffer for the packets a discipline drops.
    dropped: Vec<Packet>,
}

/// What serves the queue under `p` (started at `since`), if anything.
fn source_of(p: &LinkParams, since: Instant) -> Option<Source<'_>> {
    match (&p.trace, p.rate) {
        (Some(trace), _) => Some(Source::Trace {
            trace,
            origin: since,
        }),
        (None, Some(rate)) => Some(Source::Rate(rate)),
        (None, None) => None,
    }
}

/// A per-link value from the seed, kept apart from the random stream so
/// it does not shift the loss draws.
fn perturbation_of(seed: u64) -> u64 {
    let mut z = seed ^ 0x6671_5f63_6f64_656c; // "fq_codel"
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Link {
    /// A link with `params`, its randomness drawn from `seed`.
    ///
    /// A schedule in `params` counts from [`Instant::ZERO`], the epoch of
    /// the caller's clock (the start of a simulation or of an emulator).
    pub fn new(mut params: LinkParams, seed: u64) -> Link {
        let schedule = std::mem::take(&mut params.schedule);
        let perturbation = perturbation_of(seed);
        Link {
            queue: params.effective_queue(),
            discipline: Discipline::build(&params, Instant::ZERO, perturbation),
            params,
            rng: Rng::seed_from_u64(seed),
            bottleneck: Bottleneck::default(),
            burst: BurstState::default(),
            last_arrival: Instant::ZERO,
            stats: LinkStats::default(),
            schedule,
            next_change: 0,
            schedule_origin: Instant::ZERO,
            since: Instant::ZERO,
            last_now: Instant::ZERO,
            perturbation,
            next_id: 0,
            outcomes: VecDeque::new(),
            server_free: Instant::ZERO,
            dropped: Vec::new(),
        }
    }

    /// Change the parameters. Packets given from now on see the new ones;
    /// packets already scheduled keep their times, and none is dropped by
    /// the change (packets waiting in a CoDel or FQ-CoDel queue stay
    /// queued, or go to the bottleneck in arrival order if the new
    /// discipline decides at enqueue). Arrivals stay in order across a
    /// delay decrease. "Now" is the latest time passed in; a schedule in
    /// `params` replaces the old one and counts from then, and a rate
    /// trace starts over then. Use [`set_params_at`](Self::set_params_at)
    /// when the time is known.
    pub fn set_params(&mut self, params: LinkParams) {
        self.set_params_at(self.last_now, params);
    }

    /// [`set_params`](Self::set_params) at a known time `now` (not before
    /// earlier calls): a schedule in `params` counts from `now`, and a
    /// rate trace starts at `now`.
    ///
    /// ```
    /// use braid_link::{Direction, Link, LinkSpec, Verdict};
    /// use braid_core::Instant;
    /// use std::time::Duration;
    ///
    /// let mut link = Link::new("rtt=20ms".parse::<LinkSpec>().unwrap().params(Direction::AToB), 1);
    /// let t = Instant::from_micros(5_000);
    /// // From t: 50 ms one way, then back to 10 ms one second later.
    /// let spec: LinkSpec = "rtt=100ms;at=1s:rtt=20ms".parse().unwrap();
    /// link.set_params_at(t, spec.params(Direction::AToB));
    /// let at = |v| match v { Verdict::Deliver { at, .. } => at, _ => unreachable!() };
    /// assert_eq!(at(link.offer(t, 100)), t + Duration::from_millis(50));
    /// let later = t + Duration::from_secs(2);
    /// assert_eq!(at(link.offer(later, 100)), later + Duration::from_millis(10));
    /// ```
    pub fn set_params_at(&mut self, now: Instant, mut params: LinkParams) {
        let now = now.max(self.last_now);
        self.advance(now);
        self.last_now = now;
        self.schedule = std::mem::take(&mut params.schedule);
        self.next_change = 0;
        self.schedule_origin = now;
        self.install(now, params);
    }

    /// Put `params` in force from `since` on.
    fn install(&mut self, since: Instant, params: LinkParams) {
        self.queue = params.effective_queue();
        self.params = params;
        self.since = since;
        self.bottleneck.restart_trace();
        let held = self
            .discipline
            .reconfigure(&self.params, since, self.perturbation);
        if held.is_empty() {
            return;
        }
        // The old discipline's packets, to the new one, none dropped.
        match &mut self.discipline {
            Discipline::Scheduled(s) => {
                let mut overflow = Vec::new();
                for p in held {
                    s.enqueue(p, ResolvedQueue::Bytes(u64::MAX), &mut overflow);
                }
                self.server_free = self.server_free.max(since);
            }
            Discipline::Fifo(_) => {
                for p in held {
                    let departure = match source_of(&self.params, self.since) {
                        Some(source) => self.bottleneck.serve(since, p.len, source),
                        None => since,
                    };
                    self.leave_bottleneck(PacketId(p.id), p.len, departure);
                }
            }
        }
    }

    /// The parameters in force (after the scheduled changes applied so
    /// far; their own `schedule` is empty).
    ///
    /// ```
    /// # use braid_link::{Direction, Link, LinkSpec};
    /// let link = Link::new("rtt=20ms;at=5s:rtt=40ms".parse::<LinkSpec>().unwrap().params(Direction::AToB), 1);
    /// assert_eq!(link.params().base_rtt(), std::time::Duration::from_millis(20));
    /// ```
    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Counters so far. Packets still queued under CoDel or FQ-CoDel are
    /// counted as offered but neither delivered nor dropped yet.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Bytes waiting in the queue (not yet serialized) at `now`.
    pub fn backlog_bytes(&mut self, now: Instant) -> u64 {
        let now = now.max(self.last_now);
        self.advance(now);
        self.last_now = now;
        self.held_bytes() + self.bottleneck.backlog(now)
    }

    /// Bytes a discipline that decides at dequeue holds.
    fn held_bytes(&self) -> u64 {
        match &self.discipline {
            Discipline::Scheduled(s) => s.bytes(),
            Discipline::Fifo(_) => 0,
        }
    }

    /// Queue a packet of `len` bytes (headers included) of flow `flow` at
    /// `now`. `flow` is any key that tells flows apart (a hash of the
    /// addresses, ports and protocol); only FQ-CoDel looks at it.
    ///
    /// Returns the packet's id, or why it was refused at the door (larger
    /// than the MTU, no room, or an early drop by PIE or RED). Everything
    /// that happens to an accepted packet later, its delivery or a drop,
    /// comes from [`poll`](Self::poll).
    pub fn enqueue(&mut self, now: Instant, len: usize, flow: u64) -> Result<PacketId, DropReason> {
        let now = now.max(self.last_now);
        self.advance(now);
        self.last_now = now;
        let len = len as u64;
        let id = PacketId(self.next_id);
        self.next_id += 1;
        self.stats.offered += 1;
        self.stats.bytes_offered += len;
        match self.admit(now, id, len, flow) {
            Ok(()) => Ok(id),
            Err(reason) => {
                self.stats.count_drop(reason);
                Err(reason)
            }
        }
    }

    /// The door: MTU, discipline and limit. An accepted packet is either
    /// through the bottleneck (its outcome queued) or held by a
    /// discipline that decides at dequeue.
    fn admit(&mut self, now: Instant, id: PacketId, len: u64, flow: u64) -> Result<(), DropReason> {
        if self.params.mtu.is_some_and(|mtu| len > u64::from(mtu)) {
            return Err(DropReason::Mtu);
        }
        let (Some(limit), Some(source)) = (self.queue, source_of(&self.params, self.since)) else {
            // No rate, no queue: straight on.
            self.leave_bottleneck(id, len, now);
            return Ok(());
        };
        match &mut self.discipline {
            Discipline::Fifo(early) => {
                let (fits, backlog) = self.bottleneck.room(now, len, limit);
                let early_drop = match early {
                    EarlyDrop::None => false,
                    EarlyDrop::Pie(pie) => {
                        fits && pie.drop_early(
                            now,
                            backlog,
                            self.bottleneck.busy_until(),
                            &mut self.rng,
                        )
                    }
                    EarlyDrop::Red(red) => {
                        let queued = match limit {
                            ResolvedQueue::Bytes(_) => backlog as f64,
                            ResolvedQueue::Packets(_) => self.bottleneck.packets(now) as f64,
                        };
                        red.drop_on_arrival(
                            now,
                            queued,
                            self.bottleneck.busy_until(),
                            &mut self.rng,
                        )
                    }
                };
                if early_drop {
                    return Err(DropReason::Aqm);
                }
                if !fits {
                    return Err(DropReason::QueueFull);
                }
                let finish = self.bottleneck.serve(now, len, source);
                self.stats.max_backlog_bytes = self.stats.max_backlog_bytes.max(backlog + len);
                self.leave_bottleneck(id, len, finish);
                Ok(())
            }
            Discipline::Scheduled(s) => {
                if s.is_empty() {
                    self.server_free = self.server_free.max(now);
                }
                let packet = Packet {
                    id: id.0,
                    len,
                    enqueued: now,
                    flow,
                };
                let mut dropped = std::mem::take(&mut self.dropped);
                dropped.clear();
                s.enqueue(packet, limit, &mut dropped);
                let held = s.bytes();
                let mut refused = false;
                for p in &dropped {
                    if p.id == id.0 {
                        refused = true;
                    } else {
                        self.drop_later(PacketId(p.id), DropReason::QueueFull);
                    }
                }
                self.dropped = dropped;
                if refused {
                    return Err(DropReason::QueueFull);
                }
                let backlog = held + self.bottleneck.backlog(now);
                self.stats.max_backlog_bytes = self.stats.max_backlog_bytes.max(backlog);
                Ok(())
            }
        }
    }

    /// When [`poll`](Self::poll) next has something: now if outcomes are
    /// waiting, else the next time the server takes a packet from a CoDel
    /// or FQ-CoDel queue (or a scheduled change that may move it). `None`:
    /// nothing will happen until the next packet.
    pub fn next_event(&self) -> Option<Instant> {
        if !self.outcomes.is_empty() {
            return Some(self.last_now);
        }
        let dequeue = self.next_dequeue()?;
        let change = self
            .schedule
            .get(self.next_change)
            .map(|c| self.schedule_origin + c.at);
        Some(change.map_or(dequeue, |c| c.min(dequeue)))
    }

    /// The next decided fate, after running the link up to `now`.
    pub fn poll(&mut self, now: Instant) -> Option<Outcome> {
        let now = now.max(self.last_now);
        self.advance(now);
        self.last_now = now;
        self.outcomes.pop_front()
    }

    /// Offer a packet of `len` bytes (headers included) at `now` and learn
    /// its fate at once: [`Verdict::Dropped`] or [`Verdict::Deliver`]. A
    /// discipline that decides at dequeue (CoDel, FQ-CoDel; see
    /// [`crate::Aqm::decides_at_dequeue`]) cannot tell yet: the packet is
    /// then [`Verdict::Queued`] (as flow 0) and its fate comes from
    /// [`poll`](Self::poll).
    pub fn offer(&mut self, now: Instant, len: usize) -> Verdict {
        match self.enqueue(now, len, 0) {
            Err(reason) => Verdict::Dropped(reason),
            Ok(id) => match self.outcomes.back() {
                Some(o) if o.id() == id => match self.outcomes.pop_back() {
                    Some(Outcome::Delivered {
                        at, duplicate_at, ..
                    }) => Verdict::Deliver { at, duplicate_at },
                    Some(Outcome::Dropped { reason, .. }) => Verdict::Dropped(reason),
                    None => Verdict::Queued(id),
                },
                _ => Verdict::Queued(id),
            },
        }
    }

    /// When the server next takes a packet from a discipline that decides
    /// at dequeue, if it holds any.
    fn next_dequeue(&self) -> Option<Instant> {
        let Discipline::Scheduled(s) = &self.discipline else {
            return None;
        };
        if s.is_empty() {
            return None;
        }
        Some(match source_of(&self.params, self.since) {
            Some(source) => self.bottleneck.next_start(self.server_free, source),
            None => self.server_free,
        })
    }

    /// Run the link up to `until`: the server's dequeues and the scheduled
    /// changes, in time order (a change first on a tie).
    fn advance(&mut self, until: Instant) {
        loop {
            let change = self
                .schedule
                .get(self.next_change)
                .map(|c| self.schedule_origin + c.at);
            let dequeue = self.next_dequeue();
            match (change, dequeue) {
                (Some(c), d) if c <= until && d.is_none_or(|d| c <= d) => {
                    let params = self.schedule[self.next_change].params.clone();
                    self.next_change += 1;
                    self.install(c, params);
                }
                (_, Some(d)) if d <= until => self.dequeue_at(d),
                _ => break,
            }
        }
    }

    /// The server takes the next packet at `now`: the discipline may drop
    /// some on the way.
    fn dequeue_at(&mut self, now: Instant) {
        let Discipline::Scheduled(s) = &mut self.discipline else {
            return;
        };
        let mut dropped = std::mem::take(&mut self.dropped);
        dropped.clear();
        let sent = s.dequeue(now, &mut dropped);
        for p in &dropped {
            self.drop_later(PacketId(p.id), DropReason::Aqm);
        }
        self.dropped = dropped;
        match sent {
            Some(p) => {
                let finish = match source_of(&self.params, self.since) {
                    Some(source) => self.bottleneck.serve(now, p.len, source),
                    None => now,
                };
                self.server_free = finish;
                self.leave_bottleneck(PacketId(p.id), p.len, finish);
            }
            None => self.server_free = now,
        }
    }

    /// A packet already accepted is dropped.
    fn drop_later(&mut self, id: PacketId, reason: DropReason) {
        self.stats.count_drop(reason);
        self.outcomes.push_back(Outcome::Dropped { id, reason });
    }

    /// A packet left the bottleneck at `departure`: random loss, delay,
    /// reordering and duplication decide the rest, and its outcome is
    /// queued.
    fn leave_bottleneck(&mut self, id: PacketId, len: u64, departure: Instant) {
        let outcome = match self.after_bottleneck(departure) {
            Ok((at, duplicate_at)) => {
                self.stats.delivered += 1;
                self.stats.bytes_delivered += len;
                self.stats.duplicated += u64::from(duplicate_at.is_some());
                Outcome::Delivered {
                    id,
                    at,
                    duplicate_at,
                }
            }
            Err(reason) => {
                self.stats.count_drop(reason);
                Outcome::Dropped { id, reason }
            }
        };
        self.outcomes.push_back(outcome);
    }

    fn after_bottleneck(
        &mut self,
        departure: Instant,
    ) -> Result<(Instant, Option<Instant>), DropReason> {
        let p = &self.params;
        if p.loss.sample(&mut self.rng) {
            return Err(DropReason::Loss);
        }
        if let Some(ge) = &p.burst_loss {
            if self.burst.packet_lost(ge, &mut self.rng) {
                return Err(DropReason::BurstLoss);
            }
        }
        let mut at = (departure + self.one_way_delay()).max(self.last_arrival);
        self.last_arrival = at;
        if self.params.reorder.sample(&mut self.rng) {
            at += self.params.effective_reorder_delay();
            self.stats.reordered += 1;
        }
        let duplicate_at = self.params.dup.sample(&mut self.rng).then_some(at);
        Ok((at, duplicate_at))
    }

    /// Propagation delay plus normal noise of σ = jitter/√2 (so the round
    /// trip through two such directions has σ = jitter), never negative.
    fn one_way_delay(&mut self) -> Duration {
        let delay = self.params.delay;
        if self.params.jitter.is_zero() {
            return delay;
        }
        let sigma = self.params.jitter.as_secs_f64() / std::f64::consts::SQRT_2;
        let ns = delay.as_nanos() as f64 + 1e9 * sigma * standard_normal(&mut self.rng);
        Duration::from_nanos(ns.max(0.0).round() as u64)
    }
}

/// One standard normal sample (Box–Muller; the second value is discarded to
/// keep the generator's state a function of the packet count only).
fn standard_normal(rng: &mut Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: ln is finite
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
