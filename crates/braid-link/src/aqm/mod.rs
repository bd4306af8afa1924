//! Queue disciplines (`aqm=`): what the queue in front of the rate
//! limiter does beyond holding `queue=` bytes or packets.
//!
//! Two kinds, by when they decide (see [`crate::Aqm::decides_at_dequeue`]):
//! - at enqueue: drop-tail, PIE ([`pie`], RFC 8033) and RED ([`red`],
//!   Floyd & Jacobson 1993). The queue stays one FIFO served by the rate
//!   limiter, so a packet's departure is known the moment it is accepted
//!   and [`EarlyDrop`] only says whether to accept it;
//! - at dequeue: CoDel ([`codel`], RFC 8289) judges a packet by its sojourn
//!   time when it leaves, and whether the queue behind it still holds more
//!   than one packet, which depends on later arrivals; FQ-CoDel
//!   ([`fq_codel`], RFC 8290) also reorders flows. These hold their
//!   packets ([`Scheduled`]) until the link's server takes them, and
//!   [`crate::Link`] reports their fate when it is decided.

pub(crate) mod codel;
pub(crate) mod fq_codel;
pub(crate) mod pie;
pub(crate) mod red;

use braid_core::Instant;

use crate::spec::{Aqm, LinkParams, ResolvedQueue};
use crate::trace::RateTrace;
use codel::{CodelFifo, CodelParams};
use fq_codel::FqCodel;
use pie::{Pie, PieParams};
use red::{Red, RedParams};

/// A packet waiting in a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packet {
    /// The link's number for it.
    pub id: u64,
    /// Bytes, headers included.
    pub len: u64,
    /// When it arrived (for the sojourn time).
    pub enqueued: Instant,
    /// The caller's flow key (FQ-CoDel's hash input).
    pub flow: u64,
}

/// The state of an enqueue-deciding discipline beside the FIFO.
#[derive(Debug, Clone)]
pub(crate) enum EarlyDrop {
    /// Drop-tail: only the limit drops.
    None,
    /// PIE.
    Pie(Pie),
    /// RED.
    Red(Red),
}

/// The queue of a dequeue-deciding discipline.
#[derive(Debug, Clone)]
pub(crate) enum Scheduled {
    /// CoDel over one FIFO.
    Codel(CodelFifo),
    /// FQ-CoDel.
    FqCodel(FqCodel),
}

impl Scheduled {
    /// Queue `packet` within `limit`; dropped packets (the arrival, or
    /// under FQ-CoDel the head of the fattest queue) go to `dropped`.
    pub(crate) fn enqueue(
        &mut self,
        packet: Packet,
        limit: ResolvedQueue,
        dropped: &mut Vec<Packet>,
    ) {
        match self {
            Scheduled::Codel(q) => {
                let fits = match limit {
                    ResolvedQueue::Bytes(max) => q.bytes() + packet.len <= max,
                    ResolvedQueue::Packets(max) => q.packets() < max,
                };
                if fits {
                    q.push(packet);
                } else {
                    dropped.push(packet);
                }
            }
            Scheduled::FqCodel(q) => q.enqueue(packet, limit, dropped),
        }
    }

    /// The packet the server takes at `now`, if any; packets dropped on
    /// the way go to `dropped`.
    pub(crate) fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Packet>) -> Option<Packet> {
        match self {
            Scheduled::Codel(q) => q.dequeue(now, dropped),
            Scheduled::FqCodel(q) => q.dequeue(now, dropped),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Scheduled::Codel(q) => q.bytes(),
            Scheduled::FqCodel(q) => q.bytes(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Scheduled::Codel(q) => q.packets() == 0,
            Scheduled::FqCodel(q) => q.packets() == 0,
        }
    }

    /// Remove every packet, in arrival order.
    pub(crate) fn take_all(&mut self) -> Vec<Packet> {
        match self {
            Scheduled::Codel(q) => q.take_all(),
            Scheduled::FqCodel(q) => q.take_all(),
        }
    }
}

/// The discipline in force on a link direction.
#[derive(Debug, Clone)]
pub(crate) enum Discipline {
    /// Decides at enqueue; the bottleneck's FIFO holds the packets.
    Fifo(EarlyDrop),
    /// Decides at dequeue; it holds the packets not yet served.
    Scheduled(Scheduled),
}

fn codel_params(p: &LinkParams) -> Option<CodelParams> {
    Some(CodelParams {
        target: p.effective_aqm_target()?,
        interval: p.effective_aqm_interval()?,
    })
}

/// The rate a queue of `p` is served at, on average.
fn service_rate(p: &LinkParams) -> Option<crate::units::Rate> {
    p.rate
        .or_else(|| p.trace.as_ref().map(RateTrace::mean_rate))
}

impl Discipline {
    /// The discipline `p` asks for, fresh, from `now`; `perturbation`
    /// seeds FQ-CoDel's flow hash. Without a rate there is no queue, so
    /// no discipline either.
    pub(crate) fn build(p: &LinkParams, now: Instant, perturbation: u64) -> Discipline {
        let (Some(limit), Some(rate)) = (p.effective_queue(), service_rate(p)) else {
            return Discipline::Fifo(EarlyDrop::None);
        };
        let target = p.effective_aqm_target();
        match (p.aqm, codel_params(p)) {
            (Aqm::Codel, Some(c)) => Discipline::Scheduled(Scheduled::Codel(CodelFifo::new(c))),
            (Aqm::FqCodel, Some(c)) => {
                Discipline::Scheduled(Scheduled::FqCodel(FqCodel::new(c, perturbation)))
            }
            (Aqm::Pie, _) => Discipline::Fifo(EarlyDrop::Pie(Pie::new(
                PieParams::new(target.unwrap_or_default(), p.full_packet()),
                now,
            ))),
            (Aqm::Red, _) => {
                Discipline::Fifo(EarlyDrop::Red(Red::new(RedParams::from_limit(limit, rate))))
            }
            _ => Discipline::Fifo(EarlyDrop::None),
        }
    }

    /// Which discipline this is (drop-tail also when there is no queue).
    pub(crate) fn kind(&self) -> Aqm {
        match self {
            Discipline::Fifo(EarlyDrop::None) => Aqm::DropTail,
            Discipline::Fifo(EarlyDrop::Pie(_)) => Aqm::Pie,
            Discipline::Fifo(EarlyDrop::Red(_)) => Aqm::Red,
            Discipline::Scheduled(Scheduled::Codel(_)) => Aqm::Codel,
            Discipline::Scheduled(Scheduled::FqCodel(_)) => Aqm::FqCodel,
        }
    }

    /// Put new parameters in force at `now`. The same discipline keeps its
    /// state (a controller's probability, CoDel's count) with the new
    /// settings; another one starts fresh, and the packets the old one
    /// still held are returned, in arrival order, for the new one to take.
    pub(crate) fn reconfigure(
        &mut self,
        p: &LinkParams,
        now: Instant,
        perturbation: u64,
    ) -> Vec<Packet> {
        let fresh = Discipline::build(p, now, perturbation);
        if fresh.kind() != self.kind() {
            let held = match self {
                Discipline::Scheduled(s) => s.take_all(),
                Discipline::Fifo(_) => Vec::new(),
            };
            *self = fresh;
            return held;
        }
        match (self, fresh) {
            (Discipline::Fifo(EarlyDrop::Pie(old)), Discipline::Fifo(EarlyDrop::Pie(new))) => {
                old.set_params(new.params())
            }
            (Discipline::Fifo(EarlyDrop::Red(old)), Discipline::Fifo(EarlyDrop::Red(new))) => {
                old.set_params(new.params())
            }
            (
                Discipline::Scheduled(Scheduled::Codel(old)),
                Discipline::Scheduled(Scheduled::Codel(new)),
            ) => old.set_params(new.params()),
            (
                Discipline::Scheduled(Scheduled::FqCodel(old)),
                Discipline::Scheduled(Scheduled::FqCodel(new)),
            ) => old.set_params(new.params()),
            _ => {}
        }
        Vec::new()
    }
}
