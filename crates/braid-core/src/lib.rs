//! Shared vocabulary of every Braid crate.
//!
//! Owns: [`Instant`], the point in time that sans-IO state machines are
//! handed (virtual time in `braid-sim`, a monotonic clock in `braid-net`),
//! and [`Rng`], the seeded random generator every protocol takes instead of
//! a thread RNG; [`diag`], how Braid's small languages (ProgMP, ECA
//! rules) print their errors; and [`pool`], reusable byte buffers handed
//! out as `Bytes` (received messages, file-transfer chunks).
//!
//! Must not depend on: any other Braid crate, tokio, sockets, or the system
//! clock. Protocol crates may only *receive* time, never read it.

pub mod diag;
pub mod pool;

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

pub use rand::{Rng as RngExt, RngCore, SeedableRng};

/// The seeded, platform-independent random generator used by protocols and
/// the simulator, so that a seed fully determines a run.
pub type Rng = rand_chacha::ChaCha8Rng;

/// SplitMix64's finaliser (Steele, Lea, Flood 2014): spreads any 64-bit key
/// over all 64 bits. For hashing keys (flows, packets) deterministically.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One SplitMix64 step: the golden-ratio increment, then [`mix64`]. A
/// stateless, deterministic draw from a key, where a seeded [`Rng`] would be
/// more machinery than needed.
///
/// ```
/// assert_ne!(braid_core::splitmix64(1), braid_core::splitmix64(2));
/// assert_eq!(braid_core::splitmix64(7), braid_core::mix64(7u64.wrapping_add(0x9E37_79B9_7F4A_7C15)));
/// ```
pub fn splitmix64(x: u64) -> u64 {
    mix64(x.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// A point in time, in nanoseconds since an arbitrary epoch chosen by
/// whoever drives the state machine.
///
/// Unlike [`std::time::Instant`], it can be created from a number, which is
/// what lets the simulator run protocols in virtual time. Arithmetic
/// saturates instead of panicking: a protocol fed odd timestamps must not
/// crash.
///
/// ```
/// use braid_core::Instant;
/// use std::time::Duration;
/// let t0 = Instant::ZERO;
/// let t1 = t0 + Duration::from_millis(5);
/// assert_eq!(t1 - t0, Duration::from_millis(5));
/// assert_eq!(t0 - t1, Duration::ZERO); // saturates
/// ```
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant (about 584 years after the epoch).
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros.saturating_mul(1_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Time elapsed since the epoch.
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        u64::try_from(d.as_nanos()).ok().and_then(|n| self.0.checked_add(n)).map(Instant)
    }
}

fn duration_nanos_saturating(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos_saturating(d)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(duration_nanos_saturating(d)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.0 as f64 / 1e9)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::from_micros(3).as_nanos(), 3_000);
        assert_eq!(Instant::ZERO.checked_add(Duration::MAX), None);
    }
}
