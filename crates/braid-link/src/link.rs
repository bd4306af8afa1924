//! [`Link`]: one direction of a path, as a sans-IO object that tells the
//! fate of each packet offered to it.
//!
//! A packet goes through, in order: the MTU check; the drop-tail queue and
//! the rate limiter (so a packet lost later still used the bottleneck, like
//! a packet corrupted on the wire after a router); random loss (Bernoulli,
//! then Gilbert–Elliott); propagation delay plus jitter, clamped so arrivals
//! never go backwards; then, with the `reorder` probability, an extra delay
//! that lets later packets overtake it; and with the `dup` probability a
//! second copy, made after the bottleneck, arriving together with the first.

use std::fmt;
use std::time::Duration;

use braid_core::{Instant, Rng, RngExt, SeedableRng};

use crate::bottleneck::Bottleneck;
use crate::loss::BurstState;
use crate::spec::{Change, LinkParams, ResolvedQueue};

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Larger than the MTU.
    Mtu,
    /// The queue in front of the bottleneck was full (tail drop).
    QueueFull,
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
            DropReason::Loss => "random loss",
            DropReason::BurstLoss => "burst loss",
        })
    }
}

/// The fate of one offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
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
        self.dropped_mtu + self.dropped_queue + self.dropped_loss + self.dropped_burst
    }

    /// Packets dropped for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Mtu => self.dropped_mtu,
            DropReason::QueueFull => self.dropped_queue,
            DropReason::Loss => self.dropped_loss,
            DropReason::BurstLoss => self.dropped_burst,
        }
    }
}

/// One direction of a link: offer it packets, it answers with their fate.
///
/// No I/O and no clock: time is whatever the caller passes to
/// [`offer`](Self::offer), which must not go backwards. The same params,
/// seed and sequence of offers always give the same verdicts.
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
    /// Latest time passed to `offer` (taken as "now" by `set_params`).
    last_now: Instant,
}

impl Link {
    /// A link with `params`, its randomness drawn from `seed`.
    ///
    /// A schedule in `params` counts from [`Instant::ZERO`], the epoch of
    /// the caller's clock (the start of a simulation or of an emulator).
    pub fn new(mut params: LinkParams, seed: u64) -> Link {
        let schedule = std::mem::take(&mut params.schedule);
        Link {
            queue: params.effective_queue(),
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
        }
    }

    /// Change the parameters. Packets offered from now on see the new ones;
    /// packets already scheduled keep their times, and none is dropped by
    /// the change. Arrivals stay in order across a delay decrease. "Now" is
    /// the latest time passed to [`offer`](Self::offer); a schedule in
    /// `params` replaces the old one and counts from then, and a rate
    /// trace starts over then. Use [`set_params_at`](Self::set_params_at)
    /// when the time is known.
    pub fn set_params(&mut self, params: LinkParams) {
        self.set_params_at(self.last_now, params);
    }

    /// [`set_params`](Self::set_params) at a known time `now` (not before
    /// earlier offers): a schedule in `params` counts from `now`, and a
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
    }

    /// Apply the scheduled changes due by `now`, each from its own time.
    fn apply_schedule(&mut self, now: Instant) {
        while let Some(change) = self.schedule.get(self.next_change) {
            let due = self.schedule_origin + change.at;
            if due > now {
                break;
            }
            let params = change.params.clone();
            self.next_change += 1;
            self.install(due, params);
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

    /// Counters so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Bytes waiting in the queue (not yet serialized) at `now`.
    pub fn backlog_bytes(&mut self, now: Instant) -> u64 {
        self.bottleneck.backlog(now)
    }

    /// Offer a packet of `len` bytes (headers included) at `now` and learn
    /// its fate.
    pub fn offer(&mut self, now: Instant, len: usize) -> Verdict {
        self.last_now = self.last_now.max(now);
        if self.next_change < self.schedule.len() {
            self.apply_schedule(now);
        }
        let len = len as u64;
        self.stats.offered += 1;
        self.stats.bytes_offered += len;
        match self.fate(now, len) {
            Ok((at, duplicate_at)) => {
                self.stats.delivered += 1;
                self.stats.bytes_delivered += len;
                self.stats.duplicated += u64::from(duplicate_at.is_some());
                Verdict::Deliver { at, duplicate_at }
            }
            Err(reason) => {
                match reason {
                    DropReason::Mtu => self.stats.dropped_mtu += 1,
                    DropReason::QueueFull => self.stats.dropped_queue += 1,
                    DropReason::Loss => self.stats.dropped_loss += 1,
                    DropReason::BurstLoss => self.stats.dropped_burst += 1,
                }
                Verdict::Dropped(reason)
            }
        }
    }

    fn fate(&mut self, now: Instant, len: u64) -> Result<(Instant, Option<Instant>), DropReason> {
        let p = &self.params;
        if p.mtu.is_some_and(|mtu| len > u64::from(mtu)) {
            return Err(DropReason::Mtu);
        }
        let served = match (&p.trace, p.rate, self.queue) {
            (Some(trace), _, Some(queue)) => Some(
                self.bottleneck
                    .offer_trace(now, len, trace, self.since, queue)
                    .ok_or(DropReason::QueueFull)?,
            ),
            (None, Some(rate), Some(queue)) => Some(
                self.bottleneck
                    .offer(now, len, rate, queue)
                    .ok_or(DropReason::QueueFull)?,
            ),
            _ => None,
        };
        let departure = match served {
            Some((finish, backlog)) => {
                self.stats.max_backlog_bytes = self.stats.max_backlog_bytes.max(backlog);
                finish
            }
            None => now,
        };
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
