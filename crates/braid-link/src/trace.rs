//! Rate traces in Mahimahi's format: a link whose capacity varies over time
//! as recorded on a real network.
//!
//! A trace file has one integer per line: a time in milliseconds at which
//! the link may deliver one full packet ("delivery opportunity"). The same
//! time may appear several times (several packets in that millisecond);
//! times never decrease; the last one is the trace's period, after which it
//! repeats. This is the format of Mahimahi's `mm-link` (Netravali et al.,
//! "Mahimahi: Accurate Record-and-Replay for HTTP", USENIX ATC 2015).
//!
//! Each opportunity carries [`RateTrace::BYTES_PER_OPPORTUNITY`] bytes. As
//! in Mahimahi, a packet may use what an earlier packet left of an
//! opportunity, a large packet spans several opportunities, and an
//! opportunity that finds the queue empty is lost.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use braid_core::Instant;

use crate::units::Rate;

/// Why a trace could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read the trace file: {0}")]
    Read(String),
    /// A line is not a whole number of milliseconds.
    #[error("line {line}: `{text}` is not a whole number of milliseconds")]
    NotANumber {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A time is smaller than the one before it.
    #[error("line {line}: {ms} ms is earlier than the line before; times must not decrease")]
    Decreasing {
        /// 1-based line number.
        line: usize,
        /// The time on that line.
        ms: u64,
    },
    /// The trace has no line, or its last time is 0 (it must last a while
    /// to repeat).
    #[error("the trace must have at least one delivery opportunity and a last time above 0 ms")]
    Empty,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Inner {
    /// How the trace was named in the spec (its path), printed back.
    name: String,
    /// Opportunity times within one period, nanoseconds, non-decreasing.
    offsets: Vec<u64>,
    /// The period, nanoseconds (> 0).
    period: u64,
}

/// A Mahimahi delivery-opportunity trace (cheap to clone).
///
/// ```
/// use braid_link::RateTrace;
/// use std::time::Duration;
/// // 12 Mbit/s: one 1500-byte packet per millisecond.
/// let t = RateTrace::parse("12mbit.trace", "1\n2\n3\n4\n").unwrap();
/// assert_eq!(t.period(), Duration::from_millis(4));
/// assert_eq!(t.mean_rate().bits_per_sec(), 12_000_000);
/// assert!(RateTrace::parse("bad", "3\n2\n").is_err());
/// ```
#[derive(Clone)]
pub struct RateTrace(Arc<Inner>);

impl RateTrace {
    /// Bytes one delivery opportunity carries: one 1500-byte IP packet
    /// (Mahimahi counts 1504, its packets carrying a 4-byte TUN header that
    /// Braid's do not).
    pub const BYTES_PER_OPPORTUNITY: u64 = 1500;

    /// Parse a trace's text; `name` is how specs print it.
    pub fn parse(name: &str, text: &str) -> Result<RateTrace, TraceError> {
        let mut offsets = Vec::new();
        let mut last = 0u64;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let ms: u64 = line
                .parse()
                .ok()
                .filter(|&ms: &u64| ms <= u64::MAX / 1_000_000)
                .ok_or_else(|| TraceError::NotANumber {
                    line: i + 1,
                    text: line.to_string(),
                })?;
            if ms < last {
                return Err(TraceError::Decreasing { line: i + 1, ms });
            }
            last = ms;
            offsets.push(ms * 1_000_000);
        }
        if offsets.is_empty() || last == 0 {
            return Err(TraceError::Empty);
        }
        Ok(RateTrace(Arc::new(Inner {
            name: name.to_string(),
            offsets,
            period: last * 1_000_000,
        })))
    }

    /// Read and parse the trace file at `path` (named by `path` as given).
    pub fn load(path: &Path) -> Result<RateTrace, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|e| TraceError::Read(e.to_string()))?;
        RateTrace::parse(&path.to_string_lossy(), &text)
    }

    /// The name given at parse time (the file's path in a spec).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Length of one repetition.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.0.period)
    }

    /// Delivery opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.0.offsets.len()
    }

    /// The average rate over a period (at least 1 bit/s).
    pub fn mean_rate(&self) -> Rate {
        let bits = self.0.offsets.len() as u128
            * u128::from(Self::BYTES_PER_OPPORTUNITY)
            * 8
            * 1_000_000_000;
        let bps = (bits / u128::from(self.0.period)).clamp(1, u128::from(u64::MAX)) as u64;
        Rate::from_bits_per_sec(bps).expect("clamped to at least 1")
    }

    /// The average rate over the first `window` of the trace as a link
    /// plays it (repeating after its period): what a link started at time 0
    /// can deliver in [0, `window`), at least 1 bit/s. A zero window is the
    /// period's mean. Used to rank traces by the part an experiment sees.
    pub fn mean_rate_over(&self, window: Duration) -> Rate {
        if window.is_zero() {
            return self.mean_rate();
        }
        let count = self.first_at_or_after(Instant::ZERO, Instant::ZERO + window);
        let bits = u128::from(count) * u128::from(Self::BYTES_PER_OPPORTUNITY) * 8 * 1_000_000_000;
        let bps = (bits / window.as_nanos().max(1)).clamp(1, u128::from(u64::MAX)) as u64;
        Rate::from_bits_per_sec(bps).expect("clamped to at least 1")
    }

    /// Time of opportunity number `k` (counting across periods) of a trace
    /// started at `origin`.
    pub(crate) fn time(&self, origin: Instant, k: u64) -> Instant {
        let n = self.0.offsets.len() as u64;
        let cycle = k / n;
        let ns = cycle
            .saturating_mul(self.0.period)
            .saturating_add(self.0.offsets[(k % n) as usize]);
        origin + Duration::from_nanos(ns)
    }

    /// Number of the first opportunity at or after `t` of a trace started
    /// at `origin`.
    pub(crate) fn first_at_or_after(&self, origin: Instant, t: Instant) -> u64 {
        let rel = (t - origin).as_nanos() as u64;
        let n = self.0.offsets.len() as u64;
        let cycle = rel / self.0.period;
        let within = rel % self.0.period;
        let i = self.0.offsets.partition_point(|&o| o < within) as u64;
        let mut k = cycle.saturating_mul(n).saturating_add(i);
        // Opportunities at the very end of the previous period (an offset
        // equal to the period, as the last line always is) fall at the same
        // instant as the start of this one: they come first.
        while k > 0 && self.time(origin, k - 1) >= t {
            k -= 1;
        }
        k
    }
}

impl PartialEq for RateTrace {
    fn eq(&self, other: &RateTrace) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for RateTrace {}

impl Hash for RateTrace {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Debug for RateTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RateTrace({:?}, {} opportunities per {:?})",
            self.0.name,
            self.0.offsets.len(),
            self.period()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opportunity_times_repeat_with_the_period() {
        let t = RateTrace::parse("t", "0\n2\n2\n5\n").unwrap();
        let o = Instant::from_micros(1000);
        let ms = |k| (t.time(o, k) - o).as_millis();
        assert_eq!(
            (0..8).map(ms).collect::<Vec<_>>(),
            [0, 2, 2, 5, 5, 7, 7, 10]
        );
        assert_eq!(t.first_at_or_after(o, o), 0);
        assert_eq!(t.first_at_or_after(o, o + Duration::from_micros(1)), 1);
        assert_eq!(t.first_at_or_after(o, o + Duration::from_millis(3)), 3);
        assert_eq!(t.first_at_or_after(o, o + Duration::from_millis(6)), 5);
        // At 5 ms: the period's last opportunity (number 3), not the next
        // period's first at the same instant (number 4).
        assert_eq!(t.first_at_or_after(o, o + Duration::from_millis(5)), 3);
        // Before the origin: the first opportunity.
        assert_eq!(t.first_at_or_after(o, Instant::ZERO), 0);
    }

    #[test]
    fn the_mean_over_a_window_counts_its_opportunities_with_repeats() {
        // 12 Mbit/s for the first 4 ms of a 8 ms period, nothing after.
        let t = RateTrace::parse("t", "1\n2\n3\n4\n8\n").unwrap();
        let mbit = |ms| t.mean_rate_over(Duration::from_millis(ms)).bits_per_sec() as f64 / 1e6;
        assert_eq!(mbit(4), 9.0); // opportunities at 1, 2, 3 (4 is not before 4 ms)
        assert_eq!(mbit(5), 9.6);
        // Two periods: the second repeats the first.
        assert_eq!(mbit(16), 6.75); // 1, 2, 3, 4, 8, then 9, 10, 11, 12
        assert_eq!(t.mean_rate_over(Duration::ZERO), t.mean_rate());
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            RateTrace::parse("t", "1\nx\n").unwrap_err(),
            TraceError::NotANumber {
                line: 2,
                text: "x".into()
            }
        );
        assert_eq!(
            RateTrace::parse("t", "5\n4\n").unwrap_err(),
            TraceError::Decreasing { line: 2, ms: 4 }
        );
        assert_eq!(RateTrace::parse("t", "\n").unwrap_err(), TraceError::Empty);
        assert_eq!(
            RateTrace::parse("t", "0\n0\n").unwrap_err(),
            TraceError::Empty
        );
        assert!(RateTrace::parse("t", "-1\n").is_err());
        assert!(matches!(
            RateTrace::load(Path::new("/nonexistent/trace")),
            Err(TraceError::Read(_))
        ));
    }

    #[test]
    fn equality_is_by_content() {
        let a = RateTrace::parse("t", "1\n2\n").unwrap();
        assert_eq!(a, RateTrace::parse("t", "1\n2\n").unwrap());
        assert_ne!(a, RateTrace::parse("t", "1\n3\n").unwrap());
        assert_ne!(a, RateTrace::parse("u", "1\n2\n").unwrap());
    }
}
