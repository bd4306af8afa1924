//! The protocol ratio (seed 000 §IV-B): how many messages of a data
//! stream go over Braid (the paper's UDT) rather than TCP.

use std::fmt;

/// A ratio of Braid messages, `braid` out of every `total`, kept as a
/// reduced fraction so the pattern selector can build an exact pattern.
///
/// The paper uses three forms interchangeably; all are available:
/// [`Ratio::braid_fraction`] in `[0, 1]` (the probability of Braid),
/// [`Ratio::signed`] in `[-1, 1]` (−1 = all TCP, 0 = half and half,
/// 1 = all Braid), and the fraction itself for patterns.
///
/// ```
/// use braid_node::data::Ratio;
/// let r = Ratio::new(3, 10);
/// assert_eq!(r.braid_fraction(), 0.3);
/// assert!((r.signed() + 0.4).abs() < 1e-12);
/// assert_eq!(Ratio::new(5, 10), Ratio::new(1, 2));
/// assert_eq!(Ratio::from_signed(0.2, 10), Ratio::new(6, 10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    braid: u32,
    total: u32,
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Ratio {
    /// All TCP.
    pub const TCP: Ratio = Ratio { braid: 0, total: 1 };
    /// All Braid.
    pub const BRAID: Ratio = Ratio { braid: 1, total: 1 };

    /// `braid` of every `total` messages over Braid (clamped to `total`;
    /// a zero `total` means all TCP).
    pub fn new(braid: u32, total: u32) -> Ratio {
        if total == 0 {
            return Ratio::TCP;
        }
        let braid = braid.min(total);
        let g = gcd(braid, total).max(1);
        Ratio { braid: braid / g, total: total / g }
    }

    /// The ratio nearest to `signed` (in `[-1, 1]`, clamped) on a grid of
    /// `steps` Braid fractions (`k / steps`).
    pub fn from_signed(signed: f64, steps: u32) -> Ratio {
        let steps = steps.max(1);
        let u = ((signed.clamp(-1.0, 1.0) + 1.0) / 2.0 * f64::from(steps)).round() as u32;
        Ratio::new(u, steps)
    }

    /// Braid messages per `total()`.
    pub fn braid(self) -> u32 {
        self.braid
    }

    /// The denominator (reduced).
    pub fn total(self) -> u32 {
        self.total
    }

    /// TCP messages per `total()`.
    pub fn tcp(self) -> u32 {
        self.total - self.braid
    }

    /// The probability of Braid, in `[0, 1]`.
    pub fn braid_fraction(self) -> f64 {
        f64::from(self.braid) / f64::from(self.total)
    }

    /// In `[-1, 1]`: −1 all TCP, 1 all Braid.
    pub fn signed(self) -> f64 {
        2.0 * self.braid_fraction() - 1.0
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} braid ({:+.2})", self.braid, self.total, self.signed())
    }
}
