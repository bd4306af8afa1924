//! The rate limiter and the drop-tail queue in front of it.
//!
//! Packets are serialized back to back: a packet starts when the previous one
//! finished (or when it arrives, if the link is idle) and takes
//! `len × 8 / rate`. The queue holds the bytes not yet serialized, the packet
//! being serialized counting only its unsent part.

use std::collections::VecDeque;

use braid_core::Instant;

use crate::spec::ResolvedQueue;
use crate::trace::RateTrace;
use crate::units::Rate;

/// A packet accepted by the bottleneck and not yet fully serialized.
#[derive(Debug, Clone, Copy)]
struct InService {
    start: Instant,
    finish: Instant,
    len: u64,
}

/// Serialization state of one direction.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bottleneck {
    /// Packets not fully serialized, in order; `start`s and `finish`es are
    /// increasing. Bounded by the queue limit.
    pending: VecDeque<InService>,
    /// Sum of `len` over `pending`.
    pending_bytes: u64,
    /// When the last accepted packet finishes serialization.
    busy_until: Instant,
    /// With a rate trace: the opportunity (its number) that carried the
    /// last byte of the last accepted packet, and the bytes it has left.
    /// `None` after a packet went through a fixed rate or the trace was
    /// (re)started.
    trace_cursor: Option<(u64, u64)>,
}

impl Bottleneck {
    /// Forget packets fully serialized by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(head) = self.pending.front() {
            if head.finish > now {
                break;
            }
            self.pending_bytes -= head.len;
            self.pending.pop_front();
        }
    }

    /// Bytes not yet serialized at `now` (after [`Self::expire`]). Exact even
    /// after a rate change, because each packet keeps its own schedule.
    fn backlog_after_expire(&self, now: Instant) -> u64 {
        match self.pending.front() {
            Some(head) if head.start < now => {
                let span = (head.finish - head.start).as_nanos();
                let done = (now - head.start).as_nanos();
                let sent = u128::from(head.len) * done / span;
                self.pending_bytes - sent as u64
            }
            _ => self.pending_bytes,
        }
    }

    /// Bytes not yet serialized at `now`.
    pub(crate) fn backlog(&mut self, now: Instant) -> u64 {
        self.expire(now);
        self.backlog_after_expire(now)
    }

    /// Packets not yet fully serialized at `now`.
    pub(crate) fn packets(&mut self, now: Instant) -> u64 {
        self.expire(now);
        self.pending.len() as u64
    }

    /// When the last accepted packet finishes serialization.
    pub(crate) fn busy_until(&self) -> Instant {
        self.busy_until
    }

    /// Whether `len` more bytes fit under `limit` at `now`, and the backlog
    /// then (without them).
    pub(crate) fn room(&mut self, now: Instant, len: u64, limit: ResolvedQueue) -> (bool, u64) {
        self.expire(now);
        let backlog = self.backlog_after_expire(now);
        let fits = match limit {
            ResolvedQueue::Bytes(max) => backlog + len <= max,
            ResolvedQueue::Packets(max) => (self.pending.len() as u64) < max,
        };
        (fits, backlog)
    }

    /// Offer a packet of `len` bytes at `now`. Returns when its last bit
    /// leaves the bottleneck, or `None` if the queue is full (tail drop).
    /// On success also returns the backlog including the new packet.
    #[cfg(test)]
    pub(crate) fn offer(
        &mut self,
        now: Instant,
        len: u64,
        source: Source<'_>,
        limit: ResolvedQueue,
    ) -> Option<(Instant, u64)> {
        let (fits, backlog) = self.room(now, len, limit);
        fits.then(|| (self.serve(now, len, source), backlog + len))
    }

    /// When a packet handed over at `now` would start being serialized.
    pub(crate) fn next_start(&self, now: Instant, source: Source<'_>) -> Instant {
        match source {
            Source::Rate(_) => now.max(self.busy_until),
            Source::Trace { trace, origin } => match self.trace_cursor {
                Some((k, left)) if trace.time(origin, k) >= now => {
                    trace.time(origin, if left > 0 { k } else { k + 1 })
                }
                _ => trace.time(
                    origin,
                    trace.first_at_or_after(origin, now.max(self.busy_until)),
                ),
            },
        }
    }

    /// Serialize a packet of `len` bytes handed over at `now`, after those
    /// already accepted, whatever the backlog. Returns when its last bit
    /// leaves.
    pub(crate) fn serve(&mut self, now: Instant, len: u64, source: Source<'_>) -> Instant {
        self.expire(now);
        let (start, finish) = match source {
            Source::Rate(rate) => {
                let start = now.max(self.busy_until);
                self.trace_cursor = None;
                (start, start + rate.transmit_time(len))
            }
            Source::Trace { trace, origin } => self.serve_trace(now, len, trace, origin),
        };
        self.busy_until = self.busy_until.max(finish);
        self.pending.push_back(InService { start, finish, len });
        self.pending_bytes += len;
        finish
    }

    /// Forget where a trace was: the next packet served by a trace starts
    /// at its first opportunity after the backlog.
    pub(crate) fn restart_trace(&mut self) {
        self.trace_cursor = None;
    }

    /// Serve by the delivery opportunities of `trace` started at `origin`
    /// (Mahimahi's model: a packet uses what the previous one left of an
    /// opportunity that has not passed yet, spans several opportunities if
    /// large, and an opportunity that passes with nothing queued is lost).
    /// Returns (start, finish).
    fn serve_trace(
        &mut self,
        now: Instant,
        len: u64,
        trace: &RateTrace,
        origin: Instant,
    ) -> (Instant, Instant) {
        let per = RateTrace::BYTES_PER_OPPORTUNITY;
        let (mut k, mut budget) = match self.trace_cursor {
            Some((k, left)) if trace.time(origin, k) >= now => {
                if left > 0 {
                    (k, left)
                } else {
                    (k + 1, per)
                }
            }
            _ => (
                trace.first_at_or_after(origin, now.max(self.busy_until)),
                per,
            ),
        };
        let start = trace.time(origin, k);
        let mut need = len;
        while need > budget {
            need -= budget;
            k += 1;
            budget = per;
        }
        budget -= need;
        let finish = trace.time(origin, k);
        self.trace_cursor = Some((k, budget));
        (start, finish)
    }
}

/// What serves the queue: a fixed rate or a trace started at `origin`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    /// A fixed rate.
    Rate(Rate),
    /// Delivery opportunities.
    Trace {
        /// The trace.
        trace: &'a RateTrace,
        /// When it started.
        origin: Instant,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn serializes_back_to_back_and_tail_drops() {
        let mut b = Bottleneck::default();
        let rate = Rate::from_mbit(100); // 1500 B = 120 us
        let q = ResolvedQueue::Bytes(3000);
        let t0 = Instant::ZERO;
        assert_eq!(
            b.offer(t0, 1500, Source::Rate(rate), q),
            Some((t0 + Duration::from_micros(120), 1500))
        );
        assert_eq!(
            b.offer(t0, 1500, Source::Rate(rate), q),
            Some((t0 + Duration::from_micros(240), 3000))
        );
        assert_eq!(b.offer(t0, 1, Source::Rate(rate), q), None);
        // Half of the first packet is out after 60 us: 750 bytes free.
        let t = t0 + Duration::from_micros(60);
        assert_eq!(b.backlog(t), 2250);
        assert_eq!(b.offer(t, 751, Source::Rate(rate), q), None);
        assert!(b.offer(t, 750, Source::Rate(rate), q).is_some());
        assert_eq!(b.backlog(t0 + Duration::from_secs(1)), 0);
    }

    #[test]
    fn packet_limit_counts_the_packet_in_service() {
        let mut b = Bottleneck::default();
        let rate = Rate::from_mbit(1);
        let q = ResolvedQueue::Packets(2);
        assert!(b.offer(Instant::ZERO, 100, Source::Rate(rate), q).is_some());
        assert!(b.offer(Instant::ZERO, 100, Source::Rate(rate), q).is_some());
        assert!(b.offer(Instant::ZERO, 100, Source::Rate(rate), q).is_none());
        // The first finishes after 800 us.
        assert!(b
            .offer(Instant::from_micros(800), 100, Source::Rate(rate), q)
            .is_some());
    }

    #[test]
    fn trace_opportunities_carry_1500_bytes_and_are_lost_when_idle() {
        let mut b = Bottleneck::default();
        let t = RateTrace::parse("t", "1\n2\n3\n4\n").unwrap();
        let q = ResolvedQueue::Bytes(1 << 20);
        let o = Instant::ZERO;
        let ms = |x: u64| Instant::from_micros(x * 1000);
        // Two 750-byte packets share the opportunity at 1 ms.
        assert_eq!(
            b.offer(
                o,
                750,
                Source::Trace {
                    trace: &t,
                    origin: o
                },
                q
            )
            .unwrap()
            .0,
            ms(1)
        );
        assert_eq!(
            b.offer(
                o,
                750,
                Source::Trace {
                    trace: &t,
                    origin: o
                },
                q
            )
            .unwrap()
            .0,
            ms(1)
        );
        // The next one waits for 2 ms; a 3000-byte packet uses the rest of
        // 2 ms, all of 3 ms and some of 4 ms.
        assert_eq!(
            b.offer(
                o,
                100,
                Source::Trace {
                    trace: &t,
                    origin: o
                },
                q
            )
            .unwrap()
            .0,
            ms(2)
        );
        assert_eq!(
            b.offer(
                o,
                3000,
                Source::Trace {
                    trace: &t,
                    origin: o
                },
                q
            )
            .unwrap()
            .0,
            ms(4)
        );
        // Idle until 6.5 ms: the opportunities at 5 and 6 ms are lost (the
        // trace repeats every 4 ms: 5, 6, 7, 8, ...).
        assert_eq!(
            b.offer(
                ms(6) + std::time::Duration::from_micros(500),
                1500,
                Source::Trace {
                    trace: &t,
                    origin: o
                },
                q
            )
            .unwrap()
            .0,
            ms(7)
        );
    }

    #[test]
    fn rate_change_keeps_existing_schedule() {
        let mut b = Bottleneck::default();
        let q = ResolvedQueue::Bytes(1 << 20);
        let (f1, _) = b
            .offer(Instant::ZERO, 1000, Source::Rate(Rate::from_mbit(1)), q)
            .unwrap();
        assert_eq!(f1, Instant::from_micros(8000));
        // Faster rate: the new packet starts after the old one finishes.
        let (f2, _) = b
            .offer(Instant::ZERO, 1000, Source::Rate(Rate::from_mbit(8)), q)
            .unwrap();
        assert_eq!(f2, Instant::from_micros(9000));
        assert_eq!(b.backlog(Instant::from_micros(4000)), 1500);
    }
}
