//! The link spec: its parameters, its text syntax and its errors.
//!
//! Syntax: comma-separated `key=value` items, in any order, each key at most
//! once, e.g. `rtt=20ms,rate=100mbit,queue=64kb,loss=1%,dup=0.5%,reorder=1%`.
//! The empty spec is an ideal link (no delay, no loss, unlimited rate).
//!
//! An item prefixed `a2b:` or `b2a:` applies to one direction only and
//! overrides an unprefixed item of the same parameter:
//! `rtt=40ms,rate=50mbit,b2a:rate=5mbit` (5 Mbit/s from b to a),
//! `a2b:delay=5ms,b2a:delay=45ms` (asymmetric delay).
//!
//! A schedule of changes follows after `;`: `SPEC;at=10s:SPEC2;at=20s:SPEC3`
//! runs SPEC, replaces it whole by SPEC2 10 s after the link starts (or
//! after the change that installed the schedule) and by SPEC3 at 20 s.
//! Times increase; without a leading SPEC the link starts ideal.
//!
//! `trace=FILE` replaces `rate` by a Mahimahi delivery-opportunity trace
//! (see [`RateTrace`]); the file is read when the spec is parsed. File names
//! cannot contain `,`, `;` or `=`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::trace::RateTrace;
use crate::units::{self, Probability, Rate, Ratio};

/// Every key the spec syntax knows, in canonical order.
pub const KEYS: &[&str] = &[
    "delay",
    "rtt",
    "jitter",
    "rate",
    "queue",
    "aqm",
    "aqm_target",
    "aqm_interval",
    "loss",
    "ge",
    "reorder",
    "reorder_delay",
    "dup",
    "mtu",
    "trace",
];

const DURATION_FORM: &str = "a duration such as 20ms, 0.5ms, 150us or 1s";
const QUEUE_FORM: &str =
    "a queue size in bytes (64kb, 64kib, 1mb, 1500b), packets (100p, 100pkt) or bandwidth-delay products (1bdp, 0.5bdp)";
const GE_FORM: &str = "Gilbert-Elliott probabilities `p/r[/bad_loss[/good_loss]]` such as 1%/25% or 1%/25%/80%/0.1%, \
     where p = P(good→bad) and r = P(bad→good) > 0 per packet";
const MTU_FORM: &str = "a packet size in bytes such as 1500, at least 1";
const AQM_FORM: &str = "a queue discipline: droptail, codel, pie, red or fq_codel";
const POSITIVE_DURATION_FORM: &str = "a duration above zero such as 5ms or 100ms";
const AT_FORM: &str = "a time such as 10s or 500ms after which the following spec applies, as in rtt=20ms;at=10s:rtt=100ms";

/// A link spec that could not be parsed or is inconsistent. The message
/// names the field and the allowed form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// An item is not of the form `key=value`.
    #[error(
        "invalid link spec item `{item}`: expected `key=value`, e.g. rtt=20ms,rate=100mbit,loss=1%"
    )]
    Syntax {
        /// The offending item.
        item: String,
    },
    /// The key is not known.
    #[error("unknown link spec key `{key}`: known keys are {}", KEYS.join(", "))]
    UnknownKey {
        /// The offending key.
        key: String,
    },
    /// A key was given twice.
    #[error("link spec key `{key}` given more than once")]
    Duplicate {
        /// The repeated key.
        key: &'static str,
    },
    /// The value of a key does not have the allowed form or range.
    #[error("invalid `{key}` value `{value}`: expected {expected}")]
    InvalidValue {
        /// The key.
        key: &'static str,
        /// The value as given.
        value: String,
        /// The allowed form.
        expected: &'static str,
    },
    /// Two keys that exclude each other were both given.
    #[error("`{first}` and `{second}` cannot both be given: {why}")]
    Conflict {
        /// One key.
        first: &'static str,
        /// The other key.
        second: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A key has no effect without another one.
    #[error("`{key}` has no effect without `{needs}`")]
    Requires {
        /// The key given.
        key: &'static str,
        /// The key it needs.
        needs: &'static str,
    },
    /// A key that tunes a queue discipline was given with a discipline it
    /// does not apply to.
    #[error("`{key}` does not apply to aqm={aqm}: it applies to aqm={applies_to}")]
    AqmOption {
        /// The tuning key.
        key: &'static str,
        /// The discipline in force.
        aqm: Aqm,
        /// The disciplines the key tunes.
        applies_to: &'static str,
    },
    /// An item's direction prefix is neither `a2b:` nor `b2a:`.
    #[error("unknown direction `{prefix}:` in `{item}`: expected a2b: or b2a: before key=value")]
    UnknownDirection {
        /// The prefix as given.
        prefix: String,
        /// The item.
        item: String,
    },
    /// A `trace=` file could not be read or parsed.
    #[error("invalid `trace` value `{value}`: {reason} (expected a Mahimahi trace file: one delivery time in ms per line)")]
    Trace {
        /// The file name as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A part of a schedule is malformed or out of order.
    #[error("invalid schedule part `{part}`: {reason}")]
    Schedule {
        /// The `;`-separated part.
        part: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Size of the drop-tail queue in front of the rate limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueLimit {
    /// At most this many bytes not yet serialized (`64kb`).
    Bytes(u64),
    /// At most this many packets not yet fully serialized (`100p`).
    Packets(u64),
    /// A multiple of the bandwidth-delay product rate × RTT, where the RTT is
    /// twice this direction's one-way delay (`1bdp`, `0.5bdp`).
    Bdp(Ratio),
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Bytes(b) => f.write_str(&units::format_bytes(*b)),
            QueueLimit::Packets(p) => write!(f, "{p}p"),
            QueueLimit::Bdp(r) => write!(f, "{r}bdp"),
        }
    }
}

impl FromStr for QueueLimit {
    type Err = ();
    fn from_str(text: &str) -> Result<QueueLimit, ()> {
        let lower = text.to_ascii_lowercase();
        if let Some(n) = lower.strip_suffix("bdp") {
            return Ratio::parse(n).map(QueueLimit::Bdp).ok_or(());
        }
        if let Some(n) = lower
            .strip_suffix("pkt")
            .or_else(|| lower.strip_suffix('p'))
        {
            return n.parse().map(QueueLimit::Packets).map_err(|_| ());
        }
        units::parse_bytes(&lower).map(QueueLimit::Bytes).ok_or(())
    }
}

/// The queue discipline in front of the rate limiter (`aqm=`), as Linux's
/// qdiscs and Mahimahi offer them. Each is described, with the paper or
/// RFC it follows, in its module under `aqm/`.
///
/// ```
/// use braid_link::{Aqm, LinkSpec, Direction};
/// let spec: LinkSpec = "rtt=40ms,rate=10mbit,aqm=fq_codel,aqm_target=2ms".parse().unwrap();
/// let p = spec.params(Direction::AToB);
/// assert_eq!(p.aqm, Aqm::FqCodel);
/// assert_eq!(p.effective_aqm_target(), Some(std::time::Duration::from_millis(2)));
/// assert_eq!("aqm=red".parse::<LinkSpec>().unwrap_err().to_string(), "`aqm` has no effect without `rate`");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Aqm {
    /// First in, first out; arrivals to a full queue are dropped. The
    /// default.
    #[default]
    DropTail,
    /// CoDel (RFC 8289): drops at dequeue once the sojourn time stayed
    /// above `aqm_target` for `aqm_interval`.
    Codel,
    /// PIE (RFC 8033): drops at enqueue with a probability steered by a PI
    /// controller towards a queueing delay of `aqm_target`.
    Pie,
    /// RED (Floyd & Jacobson 1993) in Linux's "gentle" mode: drops at
    /// enqueue with a probability rising with the average queue.
    Red,
    /// FQ-CoDel (RFC 8290): 1024 flow queues served by deficit round
    /// robin, new flows first, each managed by CoDel.
    FqCodel,
}

impl Aqm {
    /// Every discipline, in the order the spec syntax lists them.
    pub const ALL: [Aqm; 5] = [Aqm::DropTail, Aqm::Codel, Aqm::Pie, Aqm::Red, Aqm::FqCodel];

    /// The name in a spec (`aqm=NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Aqm::DropTail => "droptail",
            Aqm::Codel => "codel",
            Aqm::Pie => "pie",
            Aqm::Red => "red",
            Aqm::FqCodel => "fq_codel",
        }
    }

    /// Whether the discipline decides a packet's fate when it leaves the
    /// queue (CoDel, FQ-CoDel) rather than when it arrives. Such a
    /// discipline needs [`crate::Link::enqueue`] and
    /// [`crate::Link::poll`]: at enqueue the fate is not known yet.
    pub fn decides_at_dequeue(self) -> bool {
        matches!(self, Aqm::Codel | Aqm::FqCodel)
    }

    /// The default target queueing delay, for the disciplines that have
    /// one: 5 ms for CoDel and FQ-CoDel (RFC 8289 §4.4), 15 ms for PIE
    /// (RFC 8033 §4.1).
    pub fn default_target(self) -> Option<Duration> {
        match self {
            Aqm::Codel | Aqm::FqCodel => Some(Duration::from_millis(5)),
            Aqm::Pie => Some(Duration::from_millis(15)),
            Aqm::DropTail | Aqm::Red => None,
        }
    }

    /// The default CoDel interval, for the disciplines that have one:
    /// 100 ms (RFC 8289 §4.3).
    pub fn default_interval(self) -> Option<Duration> {
        match self {
            Aqm::Codel | Aqm::FqCodel => Some(Duration::from_millis(100)),
            Aqm::DropTail | Aqm::Pie | Aqm::Red => None,
        }
    }
}

impl fmt::Display for Aqm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Aqm {
    type Err = ();
    fn from_str(text: &str) -> Result<Aqm, ()> {
        Aqm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(text.trim()))
            .ok_or(())
    }
}

/// Gilbert–Elliott burst loss: a two-state Markov chain advanced once per
/// packet. In the good state packets are lost with `loss_in_good`, in the bad
/// state with `loss_in_bad`.
///
/// Syntax `ge=p/r[/bad_loss[/good_loss]]`: `p` = P(good→bad), `r` =
/// P(bad→good), `bad_loss` defaults to 100%, `good_loss` to 0%. With the
/// defaults, losses come in bursts of mean length 1/r packets (the mean stay
/// in the bad state), and the long-run loss rate is p / (p + r).
///
/// ```
/// use braid_link::LinkSpec;
/// let spec: LinkSpec = "rtt=20ms,ge=1%/25%".parse().unwrap();
/// let ge = spec.params(braid_link::Direction::AToB).burst_loss.unwrap();
/// assert_eq!(ge.mean_burst_length(), 4.0);
/// assert!((ge.mean_loss_rate() - 0.01 / 0.26).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GilbertElliott {
    /// P(good → bad), evaluated per packet.
    pub good_to_bad: Probability,
    /// P(bad → good), evaluated per packet; must be above zero.
    pub bad_to_good: Probability,
    /// Loss probability in the bad state.
    pub loss_in_bad: Probability,
    /// Loss probability in the good state.
    pub loss_in_good: Probability,
}

impl GilbertElliott {
    /// Mean number of consecutive packets spent in the bad state, 1/r: the
    /// mean loss burst length when `loss_in_bad` is 100%.
    pub fn mean_burst_length(&self) -> f64 {
        1.0 / self.bad_to_good.as_f64()
    }

    /// Long-run fraction of packets lost.
    pub fn mean_loss_rate(&self) -> f64 {
        let (p, r) = (self.good_to_bad.as_f64(), self.bad_to_good.as_f64());
        if p + r == 0.0 {
            return self.loss_in_good.as_f64();
        }
        let bad = p / (p + r);
        bad * self.loss_in_bad.as_f64() + (1.0 - bad) * self.loss_in_good.as_f64()
    }
}

impl fmt::Display for GilbertElliott {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.good_to_bad, self.bad_to_good)?;
        if self.loss_in_bad != Probability::ONE || !self.loss_in_good.is_zero() {
            write!(f, "/{}", self.loss_in_bad)?;
        }
        if !self.loss_in_good.is_zero() {
            write!(f, "/{}", self.loss_in_good)?;
        }
        Ok(())
    }
}

impl FromStr for GilbertElliott {
    type Err = ();
    fn from_str(text: &str) -> Result<GilbertElliott, ()> {
        let parts: Vec<&str> = text.split('/').map(str::trim).collect();
        if !(2..=4).contains(&parts.len()) {
            return Err(());
        }
        let prob = |i: usize, default: Probability| match parts.get(i) {
            Some(s) => s.parse::<Probability>(),
            None => Ok(default),
        };
        let ge = GilbertElliott {
            good_to_bad: prob(0, Probability::ZERO)?,
            bad_to_good: prob(1, Probability::ZERO)?,
            loss_in_bad: prob(2, Probability::ONE)?,
            loss_in_good: prob(3, Probability::ZERO)?,
        };
        if ge.bad_to_good.is_zero() {
            return Err(());
        }
        Ok(ge)
    }
}

/// The parameters of one direction of a link: what [`crate::Link`] runs.
///
/// Build one by parsing a [`LinkSpec`] and calling [`LinkSpec::params`], or
/// start from [`LinkParams::default`] (an ideal link) and set fields.
///
/// ```
/// use braid_link::{LinkParams, Probability};
/// use std::time::Duration;
/// let mut p = LinkParams::default();
/// p.delay = Duration::from_millis(10);
/// p.loss = "1%".parse::<Probability>().unwrap();
/// assert_eq!(p.base_rtt(), Duration::from_millis(20));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct LinkParams {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Standard deviation of the *round-trip* delay variation; each
    /// direction adds normal noise of σ = jitter/√2 to its delay, without
    /// reordering packets.
    pub jitter: Duration,
    /// Bottleneck rate; `None` = unlimited (and no queue).
    pub rate: Option<Rate>,
    /// Drop-tail queue in front of the rate limiter; `None` = the default,
    /// 1 BDP but at least 16 full packets. Only meaningful with a rate.
    pub queue: Option<QueueLimit>,
    /// The queue discipline; [`Aqm::DropTail`] by default. The `queue`
    /// limit bounds the buffer under every discipline (as a qdisc's
    /// `limit`). Only meaningful with a rate.
    pub aqm: Aqm,
    /// Target queueing delay of CoDel, FQ-CoDel or PIE; `None` = the
    /// discipline's default ([`Aqm::default_target`]).
    pub aqm_target: Option<Duration>,
    /// CoDel's interval (CoDel, FQ-CoDel); `None` = 100 ms.
    pub aqm_interval: Option<Duration>,
    /// Independent (Bernoulli) loss probability per packet.
    pub loss: Probability,
    /// Gilbert–Elliott burst loss, applied on top of `loss`.
    pub burst_loss: Option<GilbertElliott>,
    /// Probability that a packet is held back by `reorder_delay` so that
    /// later packets overtake it.
    pub reorder: Probability,
    /// Extra delay of a reordered packet; `None` = the default,
    /// max(1 ms, 25% of the one-way delay).
    pub reorder_delay: Option<Duration>,
    /// Probability that a packet is delivered twice.
    pub dup: Probability,
    /// Larger packets (as offered, headers included) are dropped.
    pub mtu: Option<u32>,
    /// A delivery-opportunity trace serving the queue instead of `rate`
    /// (the two exclude each other). It starts when these parameters take
    /// effect.
    pub trace: Option<RateTrace>,
    /// Changes to come: each entry replaces these parameters whole at its
    /// time, counted from when these parameters take effect
    /// ([`crate::Link::new`]: the epoch; [`crate::Link::set_params_at`]:
    /// its `now`). Times strictly increase; entries have no schedule of
    /// their own.
    pub schedule: Vec<Change>,
}

/// One scheduled change of a link's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// When, relative to the start of the schedule.
    pub at: Duration,
    /// The parameters from then on (with an empty `schedule`).
    pub params: LinkParams,
}

impl LinkParams {
    /// Size of a "full packet" used to size default queues: the MTU if set,
    /// else 1500 bytes.
    pub fn full_packet(&self) -> u64 {
        self.mtu.map_or(1500, u64::from)
    }

    /// Twice the one-way delay: the round trip through a symmetric link.
    pub fn base_rtt(&self) -> Duration {
        self.delay.saturating_mul(2)
    }

    /// The reorder delay in force: the configured one or the default,
    /// max(1 ms, 25% of the one-way delay).
    pub fn effective_reorder_delay(&self) -> Duration {
        self.reorder_delay
            .unwrap_or_else(|| (self.delay / 4).max(Duration::from_millis(1)))
    }

    /// The queue limit in force, `None` when there is no rate (and so no
    /// queue). With a rate trace, its mean rate stands for the rate. A
    /// BDP-relative queue is resolved against
    /// [`base_rtt`](Self::base_rtt) and holds at least one full packet; the
    /// default is 1 BDP but at least 16 full packets.
    pub fn effective_queue(&self) -> Option<ResolvedQueue> {
        let rate = self
            .rate
            .or_else(|| self.trace.as_ref().map(RateTrace::mean_rate))?;
        let bdp = |r: Ratio| r.apply(rate.bytes_in(self.base_rtt()));
        Some(match self.queue {
            None => ResolvedQueue::Bytes(bdp(Ratio::ONE).max(16 * self.full_packet())),
            Some(QueueLimit::Bdp(r)) => ResolvedQueue::Bytes(bdp(r).max(self.full_packet())),
            Some(QueueLimit::Bytes(b)) => ResolvedQueue::Bytes(b),
            Some(QueueLimit::Packets(p)) => ResolvedQueue::Packets(p),
        })
    }

    /// The target queueing delay in force, for the disciplines that have
    /// one (CoDel, FQ-CoDel, PIE).
    pub fn effective_aqm_target(&self) -> Option<Duration> {
        self.aqm
            .default_target()
            .map(|d| self.aqm_target.unwrap_or(d))
    }

    /// The CoDel interval in force, for CoDel and FQ-CoDel.
    pub fn effective_aqm_interval(&self) -> Option<Duration> {
        self.aqm
            .default_interval()
            .map(|d| self.aqm_interval.unwrap_or(d))
    }

    /// Check the rules that tie fields together (the field types already
    /// enforce each field's own range).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.rate.is_some() && self.trace.is_some() {
            return Err(SpecError::Conflict {
                first: "rate",
                second: "trace",
                why: "a trace gives the rate over time",
            });
        }
        let mut last = None;
        for c in &self.schedule {
            if last.is_some_and(|t| c.at <= t) || (last.is_none() && c.at.is_zero()) {
                return Err(SpecError::Schedule {
                    part: format!("at={}", units::format_duration(c.at)),
                    reason:
                        "times must increase, and start above 0 (a change at 0 is the initial spec)",
                });
            }
            if !c.params.schedule.is_empty() {
                return Err(SpecError::Schedule {
                    part: format!("at={}", units::format_duration(c.at)),
                    reason: "a scheduled change cannot carry a schedule of its own",
                });
            }
            c.params.validate()?;
            last = Some(c.at);
        }
        if self.queue.is_some() && self.rate.is_none() && self.trace.is_none() {
            return Err(SpecError::Requires {
                key: "queue",
                needs: "rate",
            });
        }
        if self.aqm != Aqm::DropTail && self.rate.is_none() && self.trace.is_none() {
            return Err(SpecError::Requires {
                key: "aqm",
                needs: "rate",
            });
        }
        for (key, value, applies, applies_to) in [
            (
                "aqm_target",
                self.aqm_target,
                self.aqm.default_target().is_some(),
                "codel, pie or fq_codel",
            ),
            (
                "aqm_interval",
                self.aqm_interval,
                self.aqm.default_interval().is_some(),
                "codel or fq_codel",
            ),
        ] {
            let Some(value) = value else { continue };
            if value.is_zero() {
                return Err(SpecError::InvalidValue {
                    key,
                    value: units::format_duration(value),
                    expected: POSITIVE_DURATION_FORM,
                });
            }
            if self.aqm == Aqm::DropTail {
                return Err(SpecError::Requires { key, needs: "aqm" });
            }
            if !applies {
                return Err(SpecError::AqmOption {
                    key,
                    aqm: self.aqm,
                    applies_to,
                });
            }
        }
        if self.reorder_delay.is_some() && self.reorder.is_zero() {
            return Err(SpecError::Requires {
                key: "reorder_delay",
                needs: "reorder",
            });
        }
        if let Some(ge) = &self.burst_loss {
            if ge.bad_to_good.is_zero() {
                return Err(SpecError::InvalidValue {
                    key: "ge",
                    value: ge.to_string(),
                    expected: GE_FORM,
                });
            }
        }
        if self.mtu == Some(0) {
            return Err(SpecError::InvalidValue {
                key: "mtu",
                value: "0".into(),
                expected: MTU_FORM,
            });
        }
        Ok(())
    }
}

/// A queue limit with BDP-relative sizes resolved to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResolvedQueue {
    /// At most this many bytes not yet serialized.
    Bytes(u64),
    /// At most this many packets not yet fully serialized.
    Packets(u64),
}

/// One direction of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the first endpoint of the path to the second.
    AToB,
    /// From the second endpoint of the path to the first.
    BToA,
}

/// A link spec as written by users: the whole path between two hosts,
/// possibly different in each direction and changing over time.
///
/// Users read the parameters of a direction with [`params`](Self::params);
/// a schedule comes with them ([`LinkParams::schedule`]), and [`crate::Link`]
/// applies it.
///
/// ```
/// use braid_link::{Direction, LinkSpec};
/// use std::time::Duration;
/// let spec: LinkSpec = "rtt=20ms,rate=100mbit,queue=64kb,loss=1%,dup=0.5%,reorder=1%".parse().unwrap();
/// let p = spec.params(Direction::AToB);
/// assert_eq!(p.delay, Duration::from_millis(10));
/// assert_eq!(spec.rtt(), Duration::from_millis(20));
/// assert_eq!(spec.to_string(), "rtt=20ms,rate=100mbit,queue=64kb,loss=1%,reorder=1%,dup=0.5%");
/// assert_eq!(spec.to_string().parse::<LinkSpec>().unwrap(), spec);
///
/// // Per direction, and a schedule.
/// let spec: LinkSpec = "rtt=40ms,rate=50mbit,b2a:rate=5mbit;at=10s:rtt=100ms".parse().unwrap();
/// assert_eq!(spec.params(Direction::BToA).rate.unwrap().to_string(), "5mbit");
/// assert_eq!(spec.params(Direction::AToB).schedule[0].at, Duration::from_secs(10));
/// assert_eq!(spec.to_string(), "rtt=40ms,a2b:rate=50mbit,b2a:rate=5mbit;at=10s:rtt=100ms");
///
/// let err = "rate=fast".parse::<LinkSpec>().unwrap_err();
/// assert_eq!(err.to_string(), "invalid `rate` value `fast`: expected a rate such as 100mbit, 1.5gbit or 800kbit");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LinkSpec {
    /// The initial parameters (`at` zero), then the scheduled changes; no
    /// `LinkParams` here has a schedule of its own.
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Segment {
    at: Duration,
    a2b: LinkParams,
    b2a: LinkParams,
}

impl Default for LinkSpec {
    fn default() -> LinkSpec {
        LinkSpec {
            segments: vec![Segment::default()],
        }
    }
}

impl LinkSpec {
    /// A spec whose two directions both have `params` (and its schedule).
    pub fn symmetric(params: LinkParams) -> Result<LinkSpec, SpecError> {
        LinkSpec::asymmetric(params.clone(), params)
    }

    /// A spec with `a2b` from the first host to the second and `b2a` back.
    /// Their schedules must change at the same times.
    pub fn asymmetric(mut a2b: LinkParams, mut b2a: LinkParams) -> Result<LinkSpec, SpecError> {
        a2b.validate()?;
        b2a.validate()?;
        let (ca, cb) = (
            std::mem::take(&mut a2b.schedule),
            std::mem::take(&mut b2a.schedule),
        );
        if ca.len() != cb.len() || ca.iter().zip(&cb).any(|(x, y)| x.at != y.at) {
            return Err(SpecError::Schedule {
                part: String::new(),
                reason: "both directions must change at the same times",
            });
        }
        let mut segments = vec![Segment {
            at: Duration::ZERO,
            a2b,
            b2a,
        }];
        segments.extend(ca.into_iter().zip(cb).map(|(x, y)| Segment {
            at: x.at,
            a2b: x.params,
            b2a: y.params,
        }));
        Ok(LinkSpec { segments })
    }

    /// The parameters of one direction, with the schedule of its changes.
    pub fn params(&self, direction: Direction) -> LinkParams {
        let pick = |s: &Segment| match direction {
            Direction::AToB => s.a2b.clone(),
            Direction::BToA => s.b2a.clone(),
        };
        let mut p = pick(&self.segments[0]);
        p.schedule = self.segments[1..]
            .iter()
            .map(|s| Change {
                at: s.at,
                params: pick(s),
            })
            .collect();
        p
    }

    /// Round-trip propagation delay of the path at the start (sum of both
    /// directions' one-way delays, without jitter or queueing).
    pub fn rtt(&self) -> Duration {
        self.segments[0].a2b.delay + self.segments[0].b2a.delay
    }

    /// The bottleneck rate from A to B at the start, if limited by a rate.
    pub fn rate(&self) -> Option<Rate> {
        self.segments[0].a2b.rate
    }

    /// Whether both directions are alike (at every time).
    pub fn is_symmetric(&self) -> bool {
        self.segments.iter().all(|s| s.a2b == s.b2a)
    }

    /// Number of scheduled changes.
    pub fn changes(&self) -> usize {
        self.segments.len() - 1
    }
}

impl From<LinkSpec> for String {
    fn from(spec: LinkSpec) -> String {
        spec.to_string()
    }
}

impl TryFrom<String> for LinkSpec {
    type Error = SpecError;
    fn try_from(text: String) -> Result<LinkSpec, SpecError> {
        text.parse()
    }
}

impl serde::Serialize for LinkSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LinkSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LinkSpec, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Each key's value in canonical text, `None` when at its default (and so
/// not printed), in [`KEYS`] order minus `delay`/`rtt` (printed apart).
fn canonical_items(p: &LinkParams) -> [(&'static str, Option<String>); 13] {
    let dur = |d: Duration| units::format_duration(d);
    [
        ("jitter", (!p.jitter.is_zero()).then(|| dur(p.jitter))),
        ("rate", p.rate.map(|r| r.to_string())),
        ("queue", p.queue.map(|q| q.to_string())),
        ("aqm", (p.aqm != Aqm::DropTail).then(|| p.aqm.to_string())),
        ("aqm_target", p.aqm_target.map(dur)),
        ("aqm_interval", p.aqm_interval.map(dur)),
        ("loss", (!p.loss.is_zero()).then(|| p.loss.to_string())),
        ("ge", p.burst_loss.map(|g| g.to_string())),
        (
            "reorder",
            (!p.reorder.is_zero()).then(|| p.reorder.to_string()),
        ),
        ("reorder_delay", p.reorder_delay.map(dur)),
        ("dup", (!p.dup.is_zero()).then(|| p.dup.to_string())),
        ("mtu", p.mtu.map(|m| m.to_string())),
        ("trace", p.trace.as_ref().map(|t| t.name().to_string())),
    ]
}

impl Segment {
    /// `rtt` (or per-direction `delay`s) always, then every non-default
    /// field in [`KEYS`] order, prefixed by its direction where the two
    /// directions differ.
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b) = (&self.a2b, &self.b2a);
        if a.delay == b.delay {
            write!(f, "rtt={}", units::format_duration(a.base_rtt()))?;
        } else {
            write!(
                f,
                "a2b:delay={},b2a:delay={}",
                units::format_duration(a.delay),
                units::format_duration(b.delay)
            )?;
        }
        for ((key, va), (_, vb)) in canonical_items(a).into_iter().zip(canonical_items(b)) {
            if va == vb {
                if let Some(v) = va {
                    write!(f, ",{key}={v}")?;
                }
            } else {
                if let Some(v) = va {
                    write!(f, ",a2b:{key}={v}")?;
                }
                if let Some(v) = vb {
                    write!(f, ",b2a:{key}={v}")?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for LinkSpec {
    /// The canonical spec: each segment as [`Segment::write`] prints it,
    /// changes after `;at=TIME:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                write!(f, ";at={}:", units::format_duration(seg.at))?;
            }
            seg.write(f)?;
        }
        Ok(())
    }
}

/// One parsed `key=value` item.
enum Setting {
    Delay(Duration),
    Rtt(Duration),
    Jitter(Duration),
    Rate(Rate),
    Queue(QueueLimit),
    Aqm(Aqm),
    AqmTarget(Duration),
    AqmInterval(Duration),
    Loss(Probability),
    Ge(GilbertElliott),
    Reorder(Probability),
    ReorderDelay(Duration),
    Dup(Probability),
    Mtu(u32),
    Trace(RateTrace),
}

impl Setting {
    fn parse(key: &'static str, value: &str) -> Result<Setting, SpecError> {
        let invalid = |expected| SpecError::InvalidValue {
            key,
            value: value.to_string(),
            expected,
        };
        let duration = || units::parse_duration(value).ok_or_else(|| invalid(DURATION_FORM));
        let positive_duration = || {
            units::parse_duration(value)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| invalid(POSITIVE_DURATION_FORM))
        };
        let probability = || {
            value
                .parse::<Probability>()
                .map_err(|_| invalid(Probability::EXPECTED))
        };
        Ok(match key {
            "delay" => Setting::Delay(duration()?),
            "rtt" => Setting::Rtt(duration()?),
            "jitter" => Setting::Jitter(duration()?),
            "rate" => Setting::Rate(value.parse().map_err(|_| invalid(Rate::EXPECTED))?),
            "queue" => Setting::Queue(value.parse().map_err(|_| invalid(QUEUE_FORM))?),
            "aqm" => Setting::Aqm(value.parse().map_err(|_| invalid(AQM_FORM))?),
            "aqm_target" => Setting::AqmTarget(positive_duration()?),
            "aqm_interval" => Setting::AqmInterval(positive_duration()?),
            "loss" => Setting::Loss(probability()?),
            "ge" => Setting::Ge(value.parse().map_err(|_| invalid(GE_FORM))?),
            "reorder" => Setting::Reorder(probability()?),
            "reorder_delay" => Setting::ReorderDelay(duration()?),
            "dup" => Setting::Dup(probability()?),
            "mtu" => Setting::Mtu(
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|&m| m > 0)
                    .ok_or_else(|| invalid(MTU_FORM))?,
            ),
            "trace" => {
                Setting::Trace(RateTrace::load(std::path::Path::new(value)).map_err(|e| {
                    SpecError::Trace {
                        value: value.to_string(),
                        reason: e.to_string(),
                    }
                })?)
            }
            _ => unreachable!("every entry of KEYS is matched"),
        })
    }

    fn apply(&self, p: &mut LinkParams) {
        match self {
            Setting::Delay(d) => p.delay = *d,
            Setting::Rtt(d) => p.delay = *d / 2,
            Setting::Jitter(d) => p.jitter = *d,
            Setting::Rate(r) => p.rate = Some(*r),
            Setting::Queue(q) => p.queue = Some(*q),
            Setting::Aqm(a) => p.aqm = *a,
            Setting::AqmTarget(d) => p.aqm_target = Some(*d),
            Setting::AqmInterval(d) => p.aqm_interval = Some(*d),
            Setting::Loss(l) => p.loss = *l,
            Setting::Ge(g) => p.burst_loss = Some(*g),
            Setting::Reorder(r) => p.reorder = *r,
            Setting::ReorderDelay(d) => p.reorder_delay = Some(*d),
            Setting::Dup(d) => p.dup = *d,
            Setting::Mtu(m) => p.mtu = Some(*m),
            Setting::Trace(t) => p.trace = Some(t.clone()),
        }
    }
}

/// Items of one scope (unprefixed, `a2b:` or `b2a:`), checked for repeats
/// and for `rtt` with `delay`.
#[derive(Default)]
struct Scope {
    seen: [bool; KEYS.len()],
    settings: Vec<Setting>,
}

impl Scope {
    fn add(&mut self, index: usize, setting: Setting) -> Result<(), SpecError> {
        if std::mem::replace(&mut self.seen[index], true) {
            return Err(SpecError::Duplicate { key: KEYS[index] });
        }
        if self.seen[0] && self.seen[1] {
            return Err(SpecError::Conflict {
                first: "delay",
                second: "rtt",
                why: "rtt sets the one-way delay to rtt/2",
            });
        }
        self.settings.push(setting);
        Ok(())
    }
}

/// Parse one segment (no `;`): its two directions.
fn parse_segment(text: &str) -> Result<(LinkParams, LinkParams), SpecError> {
    let mut scopes: [Scope; 3] = Default::default(); // both, a2b, b2a
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| SpecError::Syntax {
                item: item.to_string(),
            })?;
        let (scope, key) = match key.split_once(':') {
            None => (0, key),
            Some((dir, k)) if dir.trim().eq_ignore_ascii_case("a2b") => (1, k.trim()),
            Some((dir, k)) if dir.trim().eq_ignore_ascii_case("b2a") => (2, k.trim()),
            Some((dir, _)) => {
                return Err(SpecError::UnknownDirection {
                    prefix: dir.trim().to_string(),
                    item: item.to_string(),
                })
            }
        };
        let index = KEYS
            .iter()
            .position(|k| k.eq_ignore_ascii_case(key))
            .ok_or_else(|| SpecError::UnknownKey {
                key: key.to_string(),
            })?;
        scopes[scope].add(index, Setting::parse(KEYS[index], value)?)?;
    }
    let direction = |own: &Scope| -> Result<LinkParams, SpecError> {
        let mut p = LinkParams::default();
        for s in scopes[0].settings.iter().chain(&own.settings) {
            s.apply(&mut p);
        }
        p.validate()?;
        Ok(p)
    };
    Ok((direction(&scopes[1])?, direction(&scopes[2])?))
}

impl FromStr for LinkSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<LinkSpec, SpecError> {
        let mut segments: Vec<Segment> = Vec::new();
        for (i, part) in text.split(';').map(str::trim).enumerate() {
            let lower = part.get(..3).map(str::to_ascii_lowercase);
            if lower.as_deref() == Some("at=") {
                let schedule_err = |reason| SpecError::Schedule {
                    part: part.to_string(),
                    reason,
                };
                let (time, body) = part[3..]
                    .split_once(':')
                    .ok_or_else(|| schedule_err("expected at=TIME:SPEC, e.g. at=10s:rtt=100ms"))?;
                let at =
                    units::parse_duration(time.trim()).ok_or_else(|| SpecError::InvalidValue {
                        key: "at",
                        value: time.trim().to_string(),
                        expected: AT_FORM,
                    })?;
                if i == 0 && !at.is_zero() {
                    // No initial spec: the link starts ideal.
                    segments.push(Segment::default());
                }
                if segments.last().is_some_and(|s| at <= s.at) {
                    return Err(schedule_err(
                        "times must increase from one change to the next",
                    ));
                }
                let (a2b, b2a) = parse_segment(body)?;
                segments.push(Segment { at, a2b, b2a });
            } else if i == 0 {
                let (a2b, b2a) = parse_segment(part)?;
                segments.push(Segment {
                    at: Duration::ZERO,
                    a2b,
                    b2a,
                });
            } else if !part.is_empty() {
                return Err(SpecError::Schedule {
                    part: part.to_string(),
                    reason: "every part after the first must start with at=TIME:, e.g. rtt=20ms;at=10s:rtt=100ms",
                });
            }
        }
        Ok(LinkSpec { segments })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<LinkSpec, SpecError> {
        s.parse()
    }

    fn a2b(s: &str) -> LinkParams {
        parse(s).unwrap().params(Direction::AToB)
    }

    #[test]
    fn every_key_parses() {
        let p = a2b(
            "delay=10ms, jitter=2ms, rate=100mbit, queue=100p, loss=1%, ge=1%/25%/50%/0.1%, \
             reorder=2%, reorder_delay=3ms, dup=0.5%, mtu=1400",
        );
        assert_eq!(p.delay, Duration::from_millis(10));
        assert_eq!(p.jitter, Duration::from_millis(2));
        assert_eq!(p.rate, Some(Rate::from_mbit(100)));
        assert_eq!(p.queue, Some(QueueLimit::Packets(100)));
        assert_eq!(p.loss.billionths(), 10_000_000);
        let ge = p.burst_loss.unwrap();
        assert_eq!(ge.good_to_bad.billionths(), 10_000_000);
        assert_eq!(ge.bad_to_good.billionths(), 250_000_000);
        assert_eq!(ge.loss_in_bad.billionths(), 500_000_000);
        assert_eq!(ge.loss_in_good.billionths(), 1_000_000);
        assert_eq!(p.reorder.billionths(), 20_000_000);
        assert_eq!(p.reorder_delay, Some(Duration::from_millis(3)));
        assert_eq!(p.dup.billionths(), 5_000_000);
        assert_eq!(p.mtu, Some(1400));
    }

    #[test]
    fn rtt_halves_and_conflicts_with_delay() {
        assert_eq!(a2b("rtt=20ms").delay, Duration::from_millis(10));
        let err = parse("rtt=20ms,delay=10ms").unwrap_err();
        assert!(
            matches!(
                err,
                SpecError::Conflict {
                    first: "delay",
                    second: "rtt",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_spec_is_ideal() {
        assert_eq!(parse("").unwrap(), LinkSpec::default());
        assert_eq!(LinkSpec::default().to_string(), "rtt=0ms");
        assert_eq!(parse("rtt=0ms").unwrap(), LinkSpec::default());
    }

    #[test]
    fn errors_name_field_and_form() {
        let msg = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(
            msg("rate=fast"),
            "invalid `rate` value `fast`: expected a rate such as 100mbit, 1.5gbit or 800kbit"
        );
        assert!(msg("speed=1mbit")
            .contains("unknown link spec key `speed`: known keys are delay, rtt, jitter"));
        assert_eq!(
            msg("loss=1%,loss=2%"),
            "link spec key `loss` given more than once"
        );
        assert!(msg("loss=120%").starts_with("invalid `loss` value `120%`: expected a probability"));
        assert!(msg("dup=-1%").starts_with("invalid `dup` value `-1%`"));
        assert!(msg("delay=-5ms").starts_with("invalid `delay` value `-5ms`: expected a duration"));
        assert!(msg("rtt=20").starts_with("invalid `rtt` value `20`: expected a duration"));
        assert!(msg("rtt=20ms,rate=1mbit,queue=lots").starts_with("invalid `queue` value `lots`"));
        assert!(msg("ge=1%").starts_with("invalid `ge` value `1%`: expected Gilbert-Elliott"));
        assert!(msg("ge=1%/0%").starts_with("invalid `ge` value"));
        assert!(msg("mtu=0").starts_with("invalid `mtu` value `0`"));
        assert!(msg("rtt").contains("expected `key=value`"));
        assert_eq!(msg("queue=10p"), "`queue` has no effect without `rate`");
        assert_eq!(
            msg("reorder_delay=1ms"),
            "`reorder_delay` has no effect without `reorder`"
        );
    }

    #[test]
    fn aqm_keys_parse_print_and_check_what_they_apply_to() {
        let p = a2b("rtt=20ms,rate=10mbit,aqm=codel,aqm_target=2ms,aqm_interval=50ms");
        assert_eq!(p.aqm, Aqm::Codel);
        assert_eq!(p.effective_aqm_target(), Some(Duration::from_millis(2)));
        assert_eq!(p.effective_aqm_interval(), Some(Duration::from_millis(50)));
        assert_eq!(
            a2b("rtt=20ms,rate=10mbit,aqm=pie").effective_aqm_target(),
            Some(Duration::from_millis(15))
        );
        assert_eq!(
            a2b("rtt=20ms,rate=10mbit,aqm=red").effective_aqm_target(),
            None
        );
        assert_eq!(
            parse("rate=10mbit,AQM=FQ_CODEL,queue=100p")
                .unwrap()
                .to_string(),
            "rtt=0ms,rate=10mbit,queue=100p,aqm=fq_codel"
        );
        // Drop-tail is the default, and may be named.
        assert_eq!(
            parse("rate=10mbit,aqm=droptail").unwrap(),
            parse("rate=10mbit").unwrap()
        );
        let msg = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(
            msg("rate=1mbit,aqm=sfq"),
            "invalid `aqm` value `sfq`: expected a queue discipline: droptail, codel, pie, red or fq_codel"
        );
        assert_eq!(msg("aqm=codel"), "`aqm` has no effect without `rate`");
        assert_eq!(
            msg("rate=1mbit,aqm_target=5ms"),
            "`aqm_target` has no effect without `aqm`"
        );
        assert_eq!(
            msg("rate=1mbit,aqm=red,aqm_target=5ms"),
            "`aqm_target` does not apply to aqm=red: it applies to aqm=codel, pie or fq_codel"
        );
        assert_eq!(
            msg("rate=1mbit,aqm=pie,aqm_interval=50ms"),
            "`aqm_interval` does not apply to aqm=pie: it applies to aqm=codel or fq_codel"
        );
        assert!(msg("rate=1mbit,aqm=codel,aqm_target=0ms")
            .starts_with("invalid `aqm_target` value `0ms`: expected a duration above zero"));
    }

    #[test]
    fn keys_are_case_insensitive_and_canonicalised() {
        let spec = parse("RTT=20ms,Rate=100MBIT").unwrap();
        assert_eq!(spec.to_string(), "rtt=20ms,rate=100mbit");
    }

    #[test]
    fn queue_resolution() {
        // 100 Mbit/s × 50 ms = 625 000 bytes.
        let p = a2b("rtt=50ms,rate=100mbit,queue=1bdp");
        assert_eq!(p.effective_queue(), Some(ResolvedQueue::Bytes(625_000)));
        assert_eq!(
            a2b("rtt=50ms,rate=100mbit").effective_queue(),
            Some(ResolvedQueue::Bytes(625_000))
        );
        assert_eq!(
            a2b("rtt=50ms,rate=100mbit,queue=0.5bdp").effective_queue(),
            Some(ResolvedQueue::Bytes(312_500))
        );
        // Default has a floor of 16 full packets; explicit BDP a floor of one.
        assert_eq!(
            a2b("rtt=1ms,rate=1mbit").effective_queue(),
            Some(ResolvedQueue::Bytes(24_000))
        );
        assert_eq!(
            a2b("rtt=1ms,rate=1mbit,mtu=1000").effective_queue(),
            Some(ResolvedQueue::Bytes(16_000))
        );
        assert_eq!(
            a2b("rtt=1ms,rate=1mbit,queue=1bdp").effective_queue(),
            Some(ResolvedQueue::Bytes(1500))
        );
        assert_eq!(
            a2b("rate=1mbit,queue=64kib").effective_queue(),
            Some(ResolvedQueue::Bytes(65_536))
        );
        assert_eq!(
            a2b("rate=1mbit,queue=7pkt").effective_queue(),
            Some(ResolvedQueue::Packets(7))
        );
        assert_eq!(a2b("rtt=5ms").effective_queue(), None);
    }

    #[test]
    fn reorder_delay_default() {
        assert_eq!(
            a2b("rtt=50ms").effective_reorder_delay(),
            Duration::from_micros(6250)
        );
        assert_eq!(
            a2b("rtt=2ms").effective_reorder_delay(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn serde_uses_the_string_form() {
        let spec = parse("rtt=50ms,rate=100mbit,loss=5%").unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(json, "\"rtt=50ms,rate=100mbit,loss=5%\"");
        assert_eq!(serde_json::from_str::<LinkSpec>(&json).unwrap(), spec);
        let err = serde_json::from_str::<LinkSpec>("\"loss=2\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid `loss` value `2`"), "{err}");
    }
}
