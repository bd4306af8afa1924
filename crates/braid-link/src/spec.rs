//! The link spec: its parameters, its text syntax and its errors.
//!
//! Syntax: comma-separated `key=value` items, in any order, each key at most
//! once, e.g. `rtt=20ms,rate=100mbit,queue=64kb,loss=1%,dup=0.5%,reorder=1%`.
//! The empty spec is an ideal link (no delay, no loss, unlimited rate).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::units::{self, Probability, Rate, Ratio};

/// Every key the spec syntax knows, in canonical order.
pub const KEYS: &[&str] = &[
    "delay",
    "rtt",
    "jitter",
    "rate",
    "queue",
    "loss",
    "ge",
    "reorder",
    "reorder_delay",
    "dup",
    "mtu",
];

const DURATION_FORM: &str = "a duration such as 20ms, 0.5ms, 150us or 1s";
const QUEUE_FORM: &str =
    "a queue size in bytes (64kb, 64kib, 1mb, 1500b), packets (100p, 100pkt) or bandwidth-delay products (1bdp, 0.5bdp)";
const GE_FORM: &str = "Gilbert-Elliott probabilities `p/r[/bad_loss[/good_loss]]` such as 1%/25% or 1%/25%/80%/0.1%, \
     where p = P(good→bad) and r = P(bad→good) > 0 per packet";
const MTU_FORM: &str = "a packet size in bytes such as 1500, at least 1";

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
    /// queue). A BDP-relative queue is resolved against
    /// [`base_rtt`](Self::base_rtt) and holds at least one full packet; the
    /// default is 1 BDP but at least 16 full packets.
    pub fn effective_queue(&self) -> Option<ResolvedQueue> {
        let rate = self.rate?;
        let bdp = |r: Ratio| r.apply(rate.bytes_in(self.base_rtt()));
        Some(match self.queue {
            None => ResolvedQueue::Bytes(bdp(Ratio::ONE).max(16 * self.full_packet())),
            Some(QueueLimit::Bdp(r)) => ResolvedQueue::Bytes(bdp(r).max(self.full_packet())),
            Some(QueueLimit::Bytes(b)) => ResolvedQueue::Bytes(b),
            Some(QueueLimit::Packets(p)) => ResolvedQueue::Packets(p),
        })
    }

    /// Check the rules that tie fields together (the field types already
    /// enforce each field's own range).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.queue.is_some() && self.rate.is_none() {
            return Err(SpecError::Requires {
                key: "queue",
                needs: "rate",
            });
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

/// A link spec as written by users: the whole path between two hosts.
///
/// Today a spec is symmetric: both directions get the same [`LinkParams`].
/// Users read the parameters of a direction with [`params`](Self::params),
/// so per-direction specs (`a2b:`/`b2a:` prefixes), schedules of changes
/// over time and rate traces can be added later without breaking them.
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
/// let err = "rate=fast".parse::<LinkSpec>().unwrap_err();
/// assert_eq!(err.to_string(), "invalid `rate` value `fast`: expected a rate such as 100mbit, 1.5gbit or 800kbit");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LinkSpec {
    both: LinkParams,
}

impl LinkSpec {
    /// A spec whose two directions both have `params`.
    pub fn symmetric(params: LinkParams) -> Result<LinkSpec, SpecError> {
        params.validate()?;
        Ok(LinkSpec { both: params })
    }

    /// The parameters of one direction.
    pub fn params(&self, _direction: Direction) -> LinkParams {
        self.both.clone()
    }

    /// Round-trip propagation delay of the path (sum of both directions'
    /// one-way delays, without jitter or queueing).
    pub fn rtt(&self) -> Duration {
        self.params(Direction::AToB).delay + self.params(Direction::BToA).delay
    }

    /// The bottleneck rate from A to B, if limited.
    pub fn rate(&self) -> Option<Rate> {
        self.params(Direction::AToB).rate
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

impl fmt::Display for LinkSpec {
    /// The canonical spec: `rtt` (twice the one-way delay) always, then
    /// every non-default field in [`KEYS`] order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.both;
        write!(f, "rtt={}", units::format_duration(p.base_rtt()))?;
        if !p.jitter.is_zero() {
            write!(f, ",jitter={}", units::format_duration(p.jitter))?;
        }
        if let Some(rate) = p.rate {
            write!(f, ",rate={rate}")?;
        }
        if let Some(q) = p.queue {
            write!(f, ",queue={q}")?;
        }
        if !p.loss.is_zero() {
            write!(f, ",loss={}", p.loss)?;
        }
        if let Some(ge) = &p.burst_loss {
            write!(f, ",ge={ge}")?;
        }
        if !p.reorder.is_zero() {
            write!(f, ",reorder={}", p.reorder)?;
        }
        if let Some(d) = p.reorder_delay {
            write!(f, ",reorder_delay={}", units::format_duration(d))?;
        }
        if !p.dup.is_zero() {
            write!(f, ",dup={}", p.dup)?;
        }
        if let Some(mtu) = p.mtu {
            write!(f, ",mtu={mtu}")?;
        }
        Ok(())
    }
}

impl FromStr for LinkSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<LinkSpec, SpecError> {
        let mut p = LinkParams::default();
        let mut seen = [false; KEYS.len()];
        let mut rtt = None;
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| SpecError::Syntax {
                    item: item.to_string(),
                })?;
            let index = KEYS
                .iter()
                .position(|k| k.eq_ignore_ascii_case(key))
                .ok_or_else(|| SpecError::UnknownKey {
                    key: key.to_string(),
                })?;
            let key = KEYS[index];
            if std::mem::replace(&mut seen[index], true) {
                return Err(SpecError::Duplicate { key });
            }
            let invalid = |expected| SpecError::InvalidValue {
                key,
                value: value.to_string(),
                expected,
            };
            let duration = || units::parse_duration(value).ok_or_else(|| invalid(DURATION_FORM));
            let probability = || {
                value
                    .parse::<Probability>()
                    .map_err(|_| invalid(Probability::EXPECTED))
            };
            match key {
                "delay" => p.delay = duration()?,
                "rtt" => rtt = Some(duration()?),
                "jitter" => p.jitter = duration()?,
                "rate" => p.rate = Some(value.parse().map_err(|_| invalid(Rate::EXPECTED))?),
                "queue" => p.queue = Some(value.parse().map_err(|_| invalid(QUEUE_FORM))?),
                "loss" => p.loss = probability()?,
                "ge" => p.burst_loss = Some(value.parse().map_err(|_| invalid(GE_FORM))?),
                "reorder" => p.reorder = probability()?,
                "reorder_delay" => p.reorder_delay = Some(duration()?),
                "dup" => p.dup = probability()?,
                "mtu" => {
                    let mtu = value
                        .parse::<u32>()
                        .ok()
                        .filter(|&m| m > 0)
                        .ok_or_else(|| invalid(MTU_FORM))?;
                    p.mtu = Some(mtu);
                }
                _ => unreachable!("every entry of KEYS is matched"),
            }
        }
        if let Some(rtt) = rtt {
            if seen[0] {
                return Err(SpecError::Conflict {
                    first: "delay",
                    second: "rtt",
                    why: "rtt sets the one-way delay to rtt/2",
                });
            }
            p.delay = rtt / 2;
        }
        LinkSpec::symmetric(p)
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
