//! Protocol selection policies (seed 000 §IV-B): assign TCP or Braid to
//! each message so that the stream follows a target ratio.

use braid_core::{Rng, RngExt, SeedableRng};

use super::Ratio;
use crate::Transport;

/// Chooses the transport of each message of a data stream.
pub trait SelectionPolicy: Send {
    /// Follow `ratio` from now on.
    fn set_ratio(&mut self, ratio: Ratio);
    /// The transport of the next message (`Tcp` or `Braid`).
    fn select(&mut self) -> Transport;
}

/// Probabilistic selection (§IV-B1, `RandomSelection`): Braid with
/// probability `ratio`, independently per message. Right on average,
/// with no short-term balance.
///
/// ```
/// use braid_node::data::{Ratio, RandomSelection, SelectionPolicy};
/// let mut s = RandomSelection::new(Ratio::new(1, 2), 7);
/// let braid = (0..10_000).filter(|_| s.select() == braid_node::Transport::Braid).count();
/// assert!((4_700..5_300).contains(&braid));
/// ```
#[derive(Debug, Clone)]
pub struct RandomSelection {
    p: f64,
    rng: Rng,
}

impl RandomSelection {
    /// Following `ratio`, with decisions drawn from `seed`.
    pub fn new(ratio: Ratio, seed: u64) -> Self {
        RandomSelection { p: ratio.braid_fraction(), rng: Rng::seed_from_u64(seed) }
    }
}

impl SelectionPolicy for RandomSelection {
    fn set_ratio(&mut self, ratio: Ratio) {
        self.p = ratio.braid_fraction();
    }
    fn select(&mut self) -> Transport {
        if self.rng.random_bool(self.p.clamp(0.0, 1.0)) {
            Transport::Braid
        } else {
            Transport::Tcp
        }
    }
}

/// Which pattern of §IV-B4 a ratio uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// `(Q^b P)^p Q^c` with `b = ⌊q/p⌋`, `c = q − p·b`.
    P,
    /// `(Q^b P)^p Q^b Q^c` with `b = ⌊q/(p+1)⌋`, `c = q − (p+1)·b`.
    PPlusOne,
}

/// The interleaving pattern for `ratio` (§IV-B3/4): with `p` the
/// minority's count and `q` the majority's in the reduced ratio, the
/// p-pattern or the p+1-pattern, whichever leaves the smaller rest `c`
/// (the p-pattern on a tie). Each full run has exactly the ratio.
///
/// ```
/// use braid_node::data::{pattern, PatternKind, Ratio};
/// use braid_node::Transport::{Braid as B, Tcp as T};
/// // 3 Braid for 7 TCP: p = 3, q = 7; p-pattern rest 1, p+1-pattern rest 3.
/// assert_eq!(pattern(Ratio::new(3, 10)), (PatternKind::P, vec![T, T, B, T, T, B, T, T, B, T]));
/// // 1 Braid for 2 TCP: p-pattern rest 0.
/// assert_eq!(pattern(Ratio::new(1, 3)).1, vec![T, T, B]);
/// // 2 Braid for 7 TCP: p-pattern Q^3 rest 1; p+1-pattern Q^2 rest 1: tie.
/// assert_eq!(pattern(Ratio::new(2, 9)).1, vec![T, T, T, B, T, T, T, B, T]);
/// ```
pub fn pattern(ratio: Ratio) -> (PatternKind, Vec<Transport>) {
    let (braid, tcp) = (ratio.braid(), ratio.tcp());
    // P is the minority transport, Q the majority.
    let (p, q, pt, qt) = if braid <= tcp {
        (braid, tcp, Transport::Braid, Transport::Tcp)
    } else {
        (tcp, braid, Transport::Tcp, Transport::Braid)
    };
    if p == 0 {
        return (PatternKind::P, vec![qt]);
    }
    let b1 = q / p;
    let c1 = q - p * b1;
    let b2 = q / (p + 1);
    let c2 = q - (p + 1) * b2;
    let (kind, b, c) = if c2 < c1 { (PatternKind::PPlusOne, b2, c2) } else { (PatternKind::P, b1, c1) };
    let mut out = Vec::with_capacity((p + q) as usize);
    for _ in 0..p {
        out.extend(std::iter::repeat_n(qt, b as usize));
        out.push(pt);
    }
    if kind == PatternKind::PPlusOne {
        out.extend(std::iter::repeat_n(qt, b as usize));
    }
    out.extend(std::iter::repeat_n(qt, c as usize));
    (kind, out)
}

/// Pattern selection (§IV-B3, `PatternSelection`): repeats [`pattern`],
/// so every window of a few messages stays close to the target.
///
/// ```
/// use braid_node::data::{PatternSelection, Ratio, SelectionPolicy};
/// use braid_node::Transport;
/// let mut s = PatternSelection::new(Ratio::new(1, 4));
/// let picks: Vec<_> = (0..8).map(|_| s.select()).collect();
/// assert_eq!(picks.iter().filter(|t| **t == Transport::Braid).count(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct PatternSelection {
    ratio: Ratio,
    pattern: Vec<Transport>,
    pos: usize,
}

impl PatternSelection {
    /// Following `ratio`.
    pub fn new(ratio: Ratio) -> Self {
        PatternSelection { ratio, pattern: pattern(ratio).1, pos: 0 }
    }
}

impl SelectionPolicy for PatternSelection {
    fn set_ratio(&mut self, ratio: Ratio) {
        if ratio != self.ratio {
            *self = PatternSelection::new(ratio);
        }
    }
    fn select(&mut self) -> Transport {
        let t = self.pattern[self.pos % self.pattern.len()];
        self.pos = (self.pos + 1) % self.pattern.len();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A full run of the pattern has exactly the ratio, and each
        /// transport's runs are as the formulas say (no run of P longer
        /// than one).
        #[test]
        fn pattern_run_is_exact(braid in 0u32..40, total in 1u32..40) {
            let r = Ratio::new(braid, total);
            let (_, pat) = pattern(r);
            let b = pat.iter().filter(|t| **t == Transport::Braid).count() as u32;
            prop_assert_eq!(pat.len() as u32, if r.braid() == 0 || r.tcp() == 0 { 1 } else { r.total() });
            if pat.len() > 1 {
                prop_assert_eq!(b, r.braid());
            }
        }
    }
}
