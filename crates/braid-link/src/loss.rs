//! Random loss processes: independent (Bernoulli) loss and Gilbert–Elliott
//! burst loss.

use braid_core::Rng;

use crate::spec::GilbertElliott;

/// State of the Gilbert–Elliott chain, kept across parameter changes so a
/// burst in progress is not cut short by an unrelated change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BurstState {
    bad: bool,
}

impl BurstState {
    /// Advance the chain by one packet, then decide that packet's fate in
    /// the new state (the order netem's `gemodel` uses). Returns true if the
    /// packet is lost.
    pub(crate) fn packet_lost(&mut self, ge: &GilbertElliott, rng: &mut Rng) -> bool {
        let flip = if self.bad {
            ge.bad_to_good
        } else {
            ge.good_to_bad
        };
        if flip.sample(rng) {
            self.bad = !self.bad;
        }
        let loss = if self.bad {
            ge.loss_in_bad
        } else {
            ge.loss_in_good
        };
        loss.sample(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::SeedableRng;

    fn ge(spec: &str) -> GilbertElliott {
        spec.parse().unwrap()
    }

    /// Mean length of runs of consecutive losses over `n` packets.
    fn bursts(g: &GilbertElliott, n: usize, seed: u64) -> (f64, f64) {
        let mut rng = Rng::seed_from_u64(seed);
        let mut state = BurstState::default();
        let (mut lost, mut runs, mut prev) = (0u64, 0u64, false);
        for _ in 0..n {
            let l = state.packet_lost(g, &mut rng);
            lost += u64::from(l);
            runs += u64::from(l && !prev);
            prev = l;
        }
        (lost as f64 / runs as f64, lost as f64 / n as f64)
    }

    #[test]
    fn mean_burst_length_and_loss_rate_match_the_model() {
        for (spec, seed) in [("1%/25%", 1), ("0.5%/10%", 2), ("2%/50%", 3)] {
            let g = ge(spec);
            let (burst, rate) = bursts(&g, 400_000, seed);
            let want = g.mean_burst_length();
            assert!(
                (burst - want).abs() / want < 0.1,
                "{spec}: burst {burst} want {want}"
            );
            let want_rate = g.mean_loss_rate();
            assert!(
                (rate - want_rate).abs() / want_rate < 0.1,
                "{spec}: rate {rate} want {want_rate}"
            );
        }
    }

    #[test]
    fn partial_loss_states() {
        // Bad state loses half, good state 1%: long-run rate from the model.
        let g = ge("5%/20%/50%/1%");
        let (_, rate) = bursts(&g, 400_000, 4);
        let want = g.mean_loss_rate();
        assert!((want - (0.2 * 0.5 + 0.8 * 0.01)).abs() < 1e-12);
        assert!((rate - want).abs() / want < 0.05, "rate {rate} want {want}");
    }
}
