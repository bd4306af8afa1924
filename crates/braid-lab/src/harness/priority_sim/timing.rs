//! Phase lengths that scale with the link: how long a priority scenario
//! must measure so that each measured phase spans several congestion
//! epochs (loss-to-loss cycles) of the competing TCP flow, which is what
//! the issue-25 grid needs from 10 ms to 200 ms and from 5 to 100 Mbit/s.
//!
//! The model (a single flow filling the path; the competing flows of a
//! scenario have smaller windows, so shorter epochs: this is the longest):
//! - the window at a loss is `W` = BDP + the queue it fills, in packets;
//!   under an AQM the queue a flow fills is the AQM's standing queue, not
//!   the buffer ([`AQM_QUEUE_DELAY`] of it at the rate, or the buffer if
//!   that is smaller);
//! - the round trip at that window is `R` = W × packet / rate (the base RTT
//!   plus the queue's drain time);
//! - NewReno (AIMD(1, 1/2), RFC 5681) halves its window at a loss and adds
//!   one packet per round trip: an epoch is W/2 round trips, W/2 × R;
//! - CUBIC (RFC 9438, β = 0.7, C = 0.4) regains its window after
//!   K = ∛(W (1 − β) / C) seconds, or earlier in its Reno-friendly region,
//!   where its AIMD estimate (α = 3 (1 − β)/(1 + β) packets per round trip)
//!   gets there after (1 − β) W / α round trips: the epoch is the shorter.
//!
//! A scenario's measured phase then lasts `epochs` epochs, at least
//! [`MIN_PHASE`] (short epochs: the phase still averages over many) and at
//! most the caller's cap (long epochs: NewReno on a 100 Mbit/s, 200 ms path
//! with 4 BDP of buffer has a 4,000 s epoch, beyond any run). A capped phase
//! spans fewer epochs than asked; [`EpochTiming::epochs`] says how many, so
//! a report can say where a verdict rests on less than one sawtooth.

use std::time::Duration;

use braid_link::{Direction, LinkSpec, ResolvedQueue};
use braid_proto::{CcAlgorithm, TransportConfig};
use braid_sim::IPV4_UDP_OVERHEAD;

use super::ScenarioError;

/// The shortest measured phase: DTL's own phases last 30 s; 20 s still
/// averages over hundreds of round trips on the grid's slowest path.
pub const MIN_PHASE: Duration = Duration::from_secs(20);

/// Default cap of a measured phase (`max_phase`): keeps the largest grid
/// point (100 Mbit/s) at a few minutes of virtual time.
pub const DEFAULT_MAX_PHASE: Duration = Duration::from_secs(120);

/// Standing queue, as queuing delay, that the model assumes under an AQM:
/// CoDel and FQ-CoDel aim at 5 ms, PIE at 15 ms, RED between its
/// thresholds; a flow overshoots that by about the AQM's reaction time.
pub const AQM_QUEUE_DELAY: Duration = Duration::from_millis(20);

/// The warm-up of DTL's `multcp` scenario at scale 1, seconds (its
/// measured phase starts at 20 s).
const PAPER_WARMUP_SECS: f64 = 20.0;

/// NewReno's multiplicative decrease (RFC 5681).
const RENO_BETA: f64 = 0.5;
/// CUBIC's multiplicative decrease and scaling constant (RFC 9438 §4.6, §5).
const CUBIC_BETA: f64 = 0.7;
const CUBIC_C: f64 = 0.4;

/// What [`epoch_timing`] decided for one scenario on one link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochTiming {
    /// The competing TCP's congestion epoch on the link (the model above).
    pub epoch: Duration,
    /// The length of the scenario's measured phase.
    pub phase: Duration,
    /// How many epochs the phase spans (below the asked number where the
    /// cap applied).
    pub epochs: f64,
    /// The cap shortened the phase.
    pub capped: bool,
    /// The time scale that gives the scenario this phase
    /// ([`super::ScenarioOptions::scale`]).
    pub scale: f64,
    /// The time before the measured phase in which two flows that started
    /// together converge ([`convergence_epochs`] epochs, at least the
    /// paper's warm-up at this scale, at most the cap); `multcp` and `pair`
    /// use it ([`super::ScenarioOptions::warmup`]).
    pub warmup: Duration,
}

/// Residual difference between two flows' windows that a warm-up leaves:
/// 10% (their throughput ratio then within about ±20% of where they
/// converge, inside the grid's ±25%).
const CONVERGED: f64 = 0.1;

/// Epochs two flows of `tcp`'s kind need to converge from any start: with
/// losses shared at each overflow (a drop-tail queue drops from every flow
/// in the same overflow), each epoch multiplies the difference of their
/// windows by the decrease factor β (Chiu and Jain 1989), so after k epochs
/// β^k of it is left: k = ln(0.1)/ln β, 3.3 epochs for NewReno (β = 0.5),
/// 6.5 for CUBIC (β = 0.7).
pub fn convergence_epochs(tcp: CcAlgorithm) -> f64 {
    let beta = match tcp {
        CcAlgorithm::Cubic => CUBIC_BETA,
        _ => RENO_BETA,
    };
    CONVERGED.ln() / beta.ln()
}

/// The shortest measured phase of a scenario at scale 1, seconds (DTL's
/// timings): `polite`'s phases last 30 s, `multcp`'s and `pair`'s steady
/// phase 180 s, `latecomer`'s first 25 s, `switch`'s last two 110 s,
/// `five`'s 100 s.
pub fn paper_phase_secs(scenario: &str) -> Option<f64> {
    match scenario {
        "polite" => Some(30.0),
        "multcp" | "pair" => Some(180.0),
        "latecomer" => Some(25.0),
        "switch" => Some(110.0),
        "five" => Some(100.0),
        _ => None,
    }
}

/// Whether a link spec's text names an AQM other than drop-tail (`aqm=X`
/// with X ≠ `droptail`, in any direction or change).
pub fn has_aqm(spec: &str) -> bool {
    spec.split([',', ';'])
        .filter_map(|item| {
            // `a2b:aqm=codel`, `at=10s:aqm=pie`: the key is after the last `:`.
            let item = item.trim().rsplit(':').next().unwrap_or_default();
            item.strip_prefix("aqm=")
        })
        .any(|v| !v.trim().eq_ignore_ascii_case("droptail"))
}

/// The congestion epoch of one `tcp` flow alone on `link` (see the module
/// documentation); `None` for a link without a rate (no bottleneck).
pub fn epoch(link: &LinkSpec, tcp: CcAlgorithm) -> Option<Duration> {
    let p = link.params(Direction::AToB);
    let rate = p.rate?;
    let bytes_per_sec = rate.bytes_per_sec_f64();
    let packet = f64::from(TransportConfig::default().max_datagram_size) + IPV4_UDP_OVERHEAD as f64;
    let buffer = match p.effective_queue()? {
        ResolvedQueue::Bytes(b) => b as f64,
        ResolvedQueue::Packets(n) => n as f64 * packet,
    };
    let queue = if has_aqm(&link.to_string()) {
        buffer.min(bytes_per_sec * AQM_QUEUE_DELAY.as_secs_f64())
    } else {
        buffer
    };
    let bdp = bytes_per_sec * link.rtt().as_secs_f64();
    let w = ((bdp + queue) / packet).max(2.0);
    let round_trip = w * packet / bytes_per_sec;
    let secs = match tcp {
        CcAlgorithm::Cubic => {
            let k = (w * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt();
            let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
            let friendly = (1.0 - CUBIC_BETA) * w / alpha * round_trip;
            k.min(friendly)
        }
        // NewReno, and any other loss-based AIMD(1, 1/2) flow.
        _ => (1.0 - RENO_BETA) * w * round_trip,
    };
    Some(Duration::from_secs_f64(secs))
}

/// The timing of `scenario` (`polite`, `multcp`, `pair`, ... as in
/// [`paper_phase_secs`]) on `link` against `tcp` such that its measured
/// phase spans `epochs` epochs, between [`MIN_PHASE`] and `max_phase`.
///
/// ```
/// use std::time::Duration;
/// use braid_lab::harness::priority_sim::{epoch_timing, MIN_PHASE};
/// use braid_proto::CcAlgorithm;
/// let small = "rtt=10ms,rate=5mbit,queue=1bdp".parse().unwrap();
/// let t = epoch_timing("polite", &small, CcAlgorithm::NewReno, 3.0, Duration::from_secs(120)).unwrap();
/// assert_eq!(t.phase, MIN_PHASE);
/// assert!(!t.capped && t.epochs > 3.0);
/// let big = "rtt=200ms,rate=100mbit,queue=4bdp".parse().unwrap();
/// let t = epoch_timing("multcp", &big, CcAlgorithm::NewReno, 3.0, Duration::from_secs(120)).unwrap();
/// assert!(t.capped && t.epochs < 1.0);
/// assert!((t.scale - 120.0 / 180.0).abs() < 1e-9);
/// ```
pub fn epoch_timing(
    scenario: &str,
    link: &LinkSpec,
    tcp: CcAlgorithm,
    epochs: f64,
    max_phase: Duration,
) -> Result<EpochTiming, ScenarioError> {
    let invalid = |field: &str, expected| ScenarioError::InvalidConfig {
        field: field.to_string(),
        expected,
    };
    let paper = paper_phase_secs(scenario).ok_or_else(|| {
        invalid(
            "scenario",
            "a scenario with a measured phase: polite, latecomer, multcp, pair, switch or five",
        )
    })?;
    if !(epochs.is_finite() && epochs > 0.0 && epochs <= 1000.0) {
        return Err(invalid("epochs", "a number of congestion epochs in (0, 1000]"));
    }
    if max_phase < MIN_PHASE || max_phase > Duration::from_secs(10_000) {
        return Err(invalid("max_phase", "a duration from 20 s to 10000 s"));
    }
    let epoch = epoch(link, tcp).ok_or_else(|| {
        invalid(
            "link",
            "a link with a rate: epochs are counted at a bottleneck",
        )
    })?;
    let wanted = epoch.as_secs_f64() * epochs;
    let phase = wanted.clamp(MIN_PHASE.as_secs_f64(), max_phase.as_secs_f64());
    let scale = phase / paper;
    let paper_warmup = PAPER_WARMUP_SECS * scale;
    let warmup = (epoch.as_secs_f64() * convergence_epochs(tcp)).clamp(paper_warmup, max_phase.as_secs_f64().max(paper_warmup));
    Ok(EpochTiming {
        epoch,
        phase: Duration::from_secs_f64(phase),
        epochs: if epoch.is_zero() {
            f64::INFINITY
        } else {
            phase / epoch.as_secs_f64()
        },
        capped: wanted > max_phase.as_secs_f64(),
        scale,
        warmup: Duration::from_secs_f64(warmup),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(s: &str) -> LinkSpec {
        s.parse().unwrap()
    }

    #[test]
    fn reno_epochs_grow_with_the_square_of_the_window() {
        let a = epoch(&link("rtt=50ms,rate=20mbit,queue=1bdp"), CcAlgorithm::NewReno).unwrap();
        let b = epoch(&link("rtt=100ms,rate=20mbit,queue=1bdp"), CcAlgorithm::NewReno).unwrap();
        let r = b.as_secs_f64() / a.as_secs_f64();
        assert!((r - 4.0).abs() < 0.05, "{a:?} {b:?}");
        // 20 Mbit/s × 50 ms = 125 kB, W = 2 × 125 kB / 1480 B ≈ 169
        // packets; R = 100 ms: W/2 × R ≈ 8.4 s.
        assert!((a.as_secs_f64() - 8.45).abs() < 0.1, "{a:?}");
    }

    #[test]
    fn cubic_epochs_are_cube_roots_on_big_paths_and_reno_like_on_small_ones() {
        let big = link("rtt=200ms,rate=100mbit,queue=4bdp");
        let c = epoch(&big, CcAlgorithm::Cubic).unwrap().as_secs_f64();
        let w = 5.0 * 12.5e6 * 0.2 / 1480.0;
        assert!((c - (w * 0.3 / 0.4f64).cbrt()).abs() < 1e-6, "{c}");
        // 10 ms at 5 Mbit/s with a 0.25-BDP buffer (1,563 bytes): W ≈ 5.3 packets, R =
        // 12.5 ms. CUBIC's Reno-friendly estimate gets there first (0.3 W /
        // 0.53 round trips) and takes longer than NewReno's W/2: it gives
        // up less and grows more slowly.
        let small = link("rtt=10ms,rate=5mbit,queue=0.25bdp");
        let c = epoch(&small, CcAlgorithm::Cubic).unwrap().as_secs_f64();
        let r = epoch(&small, CcAlgorithm::NewReno).unwrap().as_secs_f64();
        let w = (6250.0 + 1563.0) / 1480.0;
        let round_trip = w * 1480.0 / 625_000.0;
        assert!((c - 0.3 * w / (0.9 / 1.7) * round_trip).abs() < 1e-6, "{c}");
        assert!((r - 0.5 * w * round_trip).abs() < 1e-6 && r < c, "{r} {c}");
    }

    #[test]
    fn an_aqm_shortens_the_epoch_and_drop_tail_does_not() {
        assert!(has_aqm("rtt=20ms,rate=10mbit,aqm=codel"));
        assert!(has_aqm("rtt=20ms;at=1s:a2b:aqm=pie"));
        assert!(!has_aqm("rtt=20ms,rate=10mbit,aqm=droptail"));
        assert!(!has_aqm("rtt=20ms,rate=10mbit"));
    }

    /// The warm-up lets two flows converge: β^k = 10% of their difference
    /// left (k = 3.3 NewReno epochs, 6.5 CUBIC ones), at least the paper's
    /// 20 s scaled, at most the cap.
    #[test]
    fn the_warmup_spans_the_convergence_epochs_within_bounds() {
        assert!((0.5f64.powf(convergence_epochs(CcAlgorithm::NewReno)) - 0.1).abs() < 1e-9);
        assert!((0.7f64.powf(convergence_epochs(CcAlgorithm::Cubic)) - 0.1).abs() < 1e-9);
        let cap = Duration::from_secs(120);
        let mid = link("rtt=50ms,rate=20mbit,queue=4bdp");
        let t = epoch_timing("multcp", &mid, CcAlgorithm::Cubic, 3.0, cap).unwrap();
        let want = t.epoch.as_secs_f64() * convergence_epochs(CcAlgorithm::Cubic);
        assert!(want > 20.0 * t.scale && want < 120.0, "{want}");
        assert!((t.warmup.as_secs_f64() - want).abs() < 1e-6, "{t:?}");
        // Short epochs: the paper's warm-up at the scale is the floor.
        let small = link("rtt=10ms,rate=5mbit,queue=1bdp");
        let t = epoch_timing("multcp", &small, CcAlgorithm::NewReno, 3.0, cap).unwrap();
        assert!((t.warmup.as_secs_f64() - 20.0 * t.scale).abs() < 1e-9, "{t:?}");
        // Epochs beyond any run: the cap.
        let big = link("rtt=200ms,rate=100mbit,queue=4bdp");
        let t = epoch_timing("multcp", &big, CcAlgorithm::NewReno, 3.0, cap).unwrap();
        assert_eq!(t.warmup, cap);
    }

    #[test]
    fn phases_are_clamped_and_bad_input_names_the_field() {
        let l = link("rtt=100ms,rate=50mbit,queue=2bdp");
        let t = epoch_timing("pair", &l, CcAlgorithm::NewReno, 3.0, Duration::from_secs(60)).unwrap();
        assert!(t.capped && t.phase == Duration::from_secs(60));
        let uncapped = epoch_timing("pair", &l, CcAlgorithm::Cubic, 3.0, Duration::from_secs(600)).unwrap();
        // CUBIC: W ≈ 1,267 packets, K = ∛(W·0.3/0.4) ≈ 9.8 s: 3 epochs ≈ 29.5 s.
        assert!(!uncapped.capped && (uncapped.epochs - 3.0).abs() < 1e-9, "{uncapped:?}");
        assert!((uncapped.phase.as_secs_f64() - 29.5).abs() < 0.3, "{uncapped:?}");
        let err = |r: Result<EpochTiming, ScenarioError>| r.unwrap_err().to_string();
        assert!(err(epoch_timing("x", &l, CcAlgorithm::Cubic, 3.0, DEFAULT_MAX_PHASE)).contains("`scenario`"));
        assert!(err(epoch_timing("pair", &l, CcAlgorithm::Cubic, 0.0, DEFAULT_MAX_PHASE)).contains("`epochs`"));
        assert!(err(epoch_timing("pair", &l, CcAlgorithm::Cubic, 3.0, Duration::from_secs(1))).contains("`max_phase`"));
        assert!(err(epoch_timing("pair", &link("rtt=10ms"), CcAlgorithm::Cubic, 3.0, DEFAULT_MAX_PHASE))
            .contains("`link`"));
    }
}
