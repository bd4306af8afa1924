//! Adaptive bitrate (ABR) algorithms of Braid's DASH client, sans-IO: each picks the
//! representation of the next segment from the ladder, the buffer level and the throughput of
//! past segments.
//!
//! - [`Throughput`]: rate-based adaptation as in dash.js's `ThroughputRule`: the harmonic mean of
//!   the last 5 segment throughputs, times a safety factor 0.9, and the highest bitrate below it.
//! - [`Bola`]: BOLA-BASIC of Spiteri, Urgaonkar and Sitaraman, "BOLA: Near-Optimal Bitrate
//!   Adaptation for Online Videos" (INFOCOM 2016, Algorithm 1): maximise
//!   `(V·(υ_m + γp) − Q) / S_m` over rungs `m`, with utility `υ_m = ln(S_m/S_1)` and `V`, `γp`
//!   derived from the buffer target as dash.js's `BolaRule` does (`calculateBolaParameters`),
//!   plus dash.js's guard against oscillation: an up-switch never goes above the higher of the
//!   current rung and the throughput rule's choice.
//! - [`Mpc`]: robustMPC of Yin, Jindal, Sekar and Sinopoli, "A Control-Theoretic Approach for
//!   Dynamic Adaptive Video Streaming over HTTP" (SIGCOMM 2015, §4–5): over a horizon of 5
//!   segments, enumerate every bitrate plan, simulate the buffer with the throughput predicted as
//!   the harmonic mean of the last 5 samples divided by `1 + max recent relative error`, and pick
//!   the first step of the plan with the best linear QoE (Pensieve's weights, see [`crate::qoe`]).

use std::str::FromStr;

use crate::qoe::REBUFFER_PENALTY;

/// Past samples the throughput estimate uses (dash.js and robustMPC both use 5).
pub const HISTORY: usize = 5;
/// Fraction of the estimated throughput the throughput rule dares to use (dash.js: 0.9).
pub const SAFETY: f64 = 0.9;
/// MPC's look-ahead in segments (Yin et al.: 5).
pub const MPC_HORIZON: usize = 5;
/// dash.js BOLA: buffer level (s) below which the lowest rung is chosen...
const BOLA_MIN_BUFFER_S: f64 = 10.0;
/// ...and the extra buffer per rung (s) its top threshold needs at least.
const BOLA_BUFFER_PER_LEVEL_S: f64 = 2.0;

/// What an algorithm sees before each segment.
#[derive(Debug, Clone, Copy)]
pub struct AbrInput<'a> {
    /// Bitrates of the representations, kbit/s, ascending.
    pub ladder_kbps: &'a [f64],
    /// Media seconds in the buffer now.
    pub buffer_s: f64,
    /// The player's buffer target, seconds.
    pub buffer_target_s: f64,
    /// Media seconds of the next segment.
    pub segment_s: f64,
    /// Index of the previous segment's representation, if any.
    pub last: Option<usize>,
    /// Throughputs of past segment downloads, kbit/s, oldest first.
    pub throughput_kbps: &'a [f64],
    /// Segments still to fetch, this one included.
    pub segments_left: usize,
}

/// An adaptation algorithm.
pub trait Abr: Send {
    /// Its name (`throughput`, `bola`, `mpc`).
    fn name(&self) -> &'static str;
    /// The ladder index of the next segment (always `< ladder_kbps.len()`; 0 for an empty ladder).
    fn choose(&mut self, input: &AbrInput) -> usize;
}

/// The algorithms by name, for configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AbrKind {
    /// [`Throughput`].
    Throughput,
    /// [`Bola`].
    Bola,
    /// [`Mpc`].
    Mpc,
}

impl AbrKind {
    /// A fresh instance.
    pub fn build(self) -> Box<dyn Abr> {
        match self {
            AbrKind::Throughput => Box::new(Throughput),
            AbrKind::Bola => Box::new(Bola),
            AbrKind::Mpc => Box::new(Mpc::default()),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            AbrKind::Throughput => "throughput",
            AbrKind::Bola => "bola",
            AbrKind::Mpc => "mpc",
        }
    }
}

impl FromStr for AbrKind {
    type Err = String;
    fn from_str(s: &str) -> Result<AbrKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "throughput" | "rate" => Ok(AbrKind::Throughput),
            "bola" => Ok(AbrKind::Bola),
            "mpc" | "robustmpc" => Ok(AbrKind::Mpc),
            _ => Err(format!("unknown ABR algorithm `{s}`: expected throughput, bola or mpc")),
        }
    }
}

/// Harmonic mean of the last [`HISTORY`] samples (robust to one fast outlier), if any.
pub fn harmonic_mean(samples: &[f64]) -> Option<f64> {
    let recent: Vec<f64> = samples.iter().rev().take(HISTORY).copied().filter(|x| x.is_finite() && *x > 0.0).collect();
    if recent.is_empty() {
        return None;
    }
    Some(recent.len() as f64 / recent.iter().map(|x| 1.0 / x).sum::<f64>())
}

/// The highest rung whose bitrate is at most `kbps` (the lowest if none is).
fn highest_below(ladder: &[f64], kbps: f64) -> usize {
    ladder.iter().rposition(|&b| b <= kbps).unwrap_or(0)
}

/// Throughput-based adaptation (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Throughput;

impl Abr for Throughput {
    fn name(&self) -> &'static str {
        "throughput"
    }

    fn choose(&mut self, input: &AbrInput) -> usize {
        match harmonic_mean(input.throughput_kbps) {
            Some(est) => highest_below(input.ladder_kbps, est * SAFETY),
            None => 0,
        }
    }
}

/// BOLA-BASIC (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Bola;

impl Bola {
    /// `(V, γp)` for `levels` rungs whose top utility is `top_utility` and buffer target
    /// `target_s`. dash.js spans the thresholds from 10 s to `max(target, 10 + 2·levels)` s; with
    /// a smaller target, both ends shrink in proportion so that the top rung stays reachable
    /// within the buffer the player actually keeps.
    fn parameters(levels: usize, top_utility: f64, target_s: f64) -> (f64, f64) {
        let dash_js_top = BOLA_MIN_BUFFER_S + BOLA_BUFFER_PER_LEVEL_S * levels as f64;
        let (low, high) = if target_s >= dash_js_top {
            (BOLA_MIN_BUFFER_S, target_s)
        } else {
            let scale = target_s.max(1e-3) / dash_js_top;
            (BOLA_MIN_BUFFER_S * scale, target_s.max(1e-3))
        };
        // dash.js: gp = (u_max − 1) / (bufferTime / MINIMUM_BUFFER_S − 1), Vp = MINIMUM_BUFFER_S / gp,
        // with utilities shifted so the lowest is 1.
        let gp = (top_utility - 1.0) / (high / low - 1.0);
        (low / gp, gp)
    }
}

impl Abr for Bola {
    fn name(&self) -> &'static str {
        "bola"
    }

    fn choose(&mut self, input: &AbrInput) -> usize {
        let ladder = input.ladder_kbps;
        if ladder.len() < 2 {
            return 0;
        }
        let base = ladder[0].max(1e-9);
        // υ_m = ln(S_m/S_1) + 1 (dash.js shifts the utilities so the lowest is 1).
        let utility = |b: f64| (b.max(1e-9) / base).ln() + 1.0;
        let top = utility(ladder[ladder.len() - 1]);
        if top <= 1.0 {
            return 0;
        }
        let (v, gp) = Bola::parameters(ladder.len(), top, input.buffer_target_s);
        let q = input.buffer_s;
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        for (m, &b) in ladder.iter().enumerate() {
            let score = (v * (utility(b) + gp) - q) / b.max(1e-9);
            if score >= best_score {
                best_score = score;
                best = m;
            }
        }
        // dash.js: BOLA may up-switch only as far as the throughput allows, or stay where it is.
        if let Some(last) = input.last {
            if best > last {
                let safe = Throughput.choose(input);
                best = best.min(safe.max(last));
            }
        }
        best
    }
}

/// robustMPC (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Mpc {
    /// The prediction made for the segment now downloading, and the history length it saw.
    pending: Option<(f64, usize)>,
    /// Relative errors of past predictions, newest last.
    errors: Vec<f64>,
}

impl Mpc {
    /// The linear QoE of following `plan` (ladder indices) from buffer `buffer_s` with throughput
    /// `kbps`, after representation `last`.
    fn plan_qoe(ladder: &[f64], plan: &[usize], mut buffer_s: f64, last: usize, kbps: f64, segment_s: f64) -> f64 {
        let mut qoe = 0.0;
        let mut prev = ladder[last];
        for &m in plan {
            let rate = ladder[m];
            let download_s = rate * segment_s / kbps;
            let rebuffer = (download_s - buffer_s).max(0.0);
            buffer_s = (buffer_s - download_s).max(0.0) + segment_s;
            // Per segment: bitrate in Mbit/s per second of media, as crate::qoe counts it.
            qoe += rate / 1000.0 * segment_s - REBUFFER_PENALTY * rebuffer - (rate - prev).abs() / 1000.0;
            prev = rate;
        }
        qoe
    }
}

impl Abr for Mpc {
    fn name(&self) -> &'static str {
        "mpc"
    }

    fn choose(&mut self, input: &AbrInput) -> usize {
        let ladder = input.ladder_kbps;
        let history = input.throughput_kbps;
        // Score the last prediction against the throughput that was then measured.
        if let Some((predicted, seen)) = self.pending.take() {
            if let Some(&actual) = history.get(seen).filter(|a| a.is_finite() && **a > 0.0) {
                self.errors.push((predicted - actual).abs() / actual);
                if self.errors.len() > HISTORY {
                    self.errors.remove(0);
                }
            }
        }
        let Some(mean) = harmonic_mean(history) else { return 0 };
        if ladder.len() < 2 {
            return 0;
        }
        let max_error = self.errors.iter().copied().fold(0.0, f64::max);
        let predicted = mean / (1.0 + max_error);
        self.pending = Some((mean, history.len()));
        let horizon = input.segments_left.clamp(1, MPC_HORIZON);
        let last = input.last.unwrap_or(0).min(ladder.len() - 1);
        let segment_s = input.segment_s.max(1e-3);
        // Every plan of `horizon` steps (9^5 = 59049 for the thesis ladder), as Yin et al. do.
        let mut plan = vec![0usize; horizon];
        let (mut best, mut best_qoe) = (0, f64::NEG_INFINITY);
        loop {
            let qoe = Mpc::plan_qoe(ladder, &plan, input.buffer_s, last, predicted, segment_s);
            if qoe > best_qoe {
                best_qoe = qoe;
                best = plan[0];
            }
            // Next plan in lexicographic order.
            let mut i = horizon;
            loop {
                if i == 0 {
                    return best;
                }
                i -= 1;
                plan[i] += 1;
                if plan[i] < ladder.len() {
                    break;
                }
                plan[i] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LADDER: [f64; 9] = [250.0, 500.0, 750.0, 1000.0, 1500.0, 2500.0, 4000.0, 6000.0, 10000.0];

    fn input<'a>(buffer_s: f64, tput: &'a [f64], last: Option<usize>) -> AbrInput<'a> {
        AbrInput { ladder_kbps: &LADDER, buffer_s, buffer_target_s: 30.0, segment_s: 2.0, last, throughput_kbps: tput, segments_left: 50 }
    }

    #[test]
    fn throughput_rule_uses_the_harmonic_mean_with_safety() {
        // Harmonic mean of 1000 and 4000 is 1600; × 0.9 = 1440 -> 1000.
        assert_eq!(Throughput.choose(&input(0.0, &[1000.0, 4000.0], None)), 3);
        // Only the last five count.
        assert_eq!(Throughput.choose(&input(0.0, &[100.0, 5000.0, 5000.0, 5000.0, 5000.0, 5000.0], None)), 6);
        assert_eq!(Throughput.choose(&input(0.0, &[], None)), 0);
    }

    #[test]
    fn bola_climbs_with_the_buffer() {
        let fast = [100_000.0; 5];
        let mut prev = 0;
        for q in [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0] {
            let m = Bola.choose(&input(q, &fast, None));
            assert!(m >= prev, "buffer {q}: {m} < {prev}");
            prev = m;
        }
        assert_eq!(Bola.choose(&input(0.0, &fast, None)), 0);
        assert_eq!(prev, LADDER.len() - 1);
        // A small target still reaches the top within it.
        let mut i = input(5.0, &fast, None);
        i.buffer_target_s = 5.0;
        assert_eq!(Bola.choose(&i), LADDER.len() - 1);
    }

    #[test]
    fn bola_does_not_up_switch_beyond_the_throughput() {
        // Full buffer, but the network carries only ~1 Mbit/s: stay at or below the safe rung.
        assert!(Bola.choose(&input(30.0, &[1100.0; 5], Some(1))) <= 3);
    }

    #[test]
    fn mpc_follows_a_stable_throughput_and_backs_off_after_errors() {
        let mut mpc = Mpc::default();
        let steady = [3000.0; 5];
        let m = mpc.choose(&input(10.0, &steady, Some(4)));
        assert!((4..=6).contains(&m), "{m}");
        // Empty buffer and a slow link: lowest rungs.
        let mut mpc = Mpc::default();
        assert!(mpc.choose(&input(0.0, &[300.0; 5], Some(0))) <= 1);
        // A wildly wrong past prediction makes it more careful.
        let mut careful = Mpc::default();
        let _ = careful.choose(&input(10.0, &[3000.0; 5], Some(4)));
        let mut hist = vec![3000.0; 5];
        hist.push(600.0);
        let after = careful.choose(&input(4.0, &hist, Some(4)));
        let naive = Mpc::default().choose(&input(4.0, &hist, Some(4)));
        assert!(after <= naive, "{after} > {naive}");
    }

    #[test]
    fn names_parse() {
        assert_eq!("BOLA".parse::<AbrKind>(), Ok(AbrKind::Bola));
        assert!("pensieve".parse::<AbrKind>().unwrap_err().contains("throughput, bola or mpc"));
        for k in [AbrKind::Throughput, AbrKind::Bola, AbrKind::Mpc] {
            assert_eq!(k.build().name(), k.as_str());
        }
    }

    proptest! {
        #[test]
        fn every_choice_is_a_valid_rung(
            buffer in 0.0f64..60.0,
            target in 1.0f64..60.0,
            tput in proptest::collection::vec(0.0f64..20_000.0, 0..8),
            last in proptest::option::of(0usize..9),
            left in 1usize..10,
            n in 1usize..=9,
        ) {
            let ladder = &LADDER[..n];
            let i = AbrInput { ladder_kbps: ladder, buffer_s: buffer, buffer_target_s: target, segment_s: 2.0, last: last.map(|l| l.min(n - 1)), throughput_kbps: &tput, segments_left: left };
            for kind in [AbrKind::Throughput, AbrKind::Bola, AbrKind::Mpc] {
                prop_assert!(kind.build().choose(&i) < n);
            }
        }

        #[test]
        fn more_throughput_never_lowers_the_throughput_rule(a in 1.0f64..20_000.0, b in 1.0f64..20_000.0) {
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            prop_assert!(Throughput.choose(&input(0.0, &[lo], None)) <= Throughput.choose(&input(0.0, &[hi], None)));
        }
    }
}
