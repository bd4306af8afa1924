//! Quality-of-experience metrics of one playback (issue 21, item 6), shared by the browser players
//! (whose `<video>` and player events the lab turns into a [`PlaybackTrace`]) and Braid's own ABR
//! client (whose virtual buffer, [`crate::player`], records one).
//!
//! Two QoE models, both computed from the trace alone:
//!
//! - **Hoßfeld et al.**, "Internet Video Delivery in YouTube: From Traffic Measurements to Quality
//!   of Experience" (LNCS 7754, 2013; the stalling QoE of seed 001, Fig. 8.3): a mean opinion score
//!   on the 1..5 scale, exponential in the number of stalls `N` and their (mean) length `L` in
//!   seconds: `MOS = 3.5 · exp(−(0.15·L + 0.19)·N) + 1.5`.
//! - **Yin et al.**, "A Control-Theoretic Approach for Dynamic Adaptive Video Streaming over HTTP"
//!   (SIGCOMM 2015), linear QoE with the weights Pensieve (Mao et al., SIGCOMM 2017) uses:
//!   `Σ bitrate (Mbit/s) − 4.3 · rebuffering (s) − Σ |Δ bitrate| (Mbit/s)`. The sums run over
//!   chunks; so that segment lengths compare fairly, every second of played media counts as one
//!   chunk (a segment of `d` seconds at `r` Mbit/s contributes `r·d`), and the rebuffering includes
//!   the startup delay, as in Pensieve's simulator where the first chunk is fetched with an empty
//!   buffer.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Hoßfeld et al.'s MOS model: `A · exp(−(B·L + C)·N) + D`.
const HOSSFELD_A: f64 = 3.5;
const HOSSFELD_B: f64 = 0.15;
const HOSSFELD_C: f64 = 0.19;
const HOSSFELD_D: f64 = 1.5;
/// The lowest score of the 5-point scale: what a playback that never started gets.
const MOS_FLOOR: f64 = 1.0;

/// Pensieve's rebuffering penalty per second (Mbit/s-equivalents): its highest bitrate, 4.3 Mbit/s.
pub const REBUFFER_PENALTY: f64 = 4.3;

/// One playback interruption after startup, in wall-clock seconds since the session began.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// When the buffer ran dry (seconds since the session began).
    pub start_s: f64,
    /// How long playback waited for data.
    pub duration_s: f64,
}

/// A stretch of media played at one representation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Played {
    /// Media time where the stretch begins (seconds into the video).
    pub start_s: f64,
    /// Seconds of media played.
    pub duration_s: f64,
    /// The representation's bitrate (its manifest `bandwidth`, kbit/s).
    pub kbps: f64,
}

/// What happened during one playback: the input of [`summarize`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaybackTrace {
    /// Seconds from the session's start (the manifest request) to the first frame, if playback started.
    pub startup_s: Option<f64>,
    /// The stalls after startup, in order.
    pub stalls: Vec<Stall>,
    /// The media played, in media-time order.
    pub played: Vec<Played>,
    /// Whether the video played to its end.
    pub ended: bool,
}

/// The metrics of one playback.
///
/// A playback that never started has `startup_s` and `qoe_linear` not-a-number (`null` in JSON)
/// and `qoe_hossfeld` at the scale's floor, 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QoeSummary {
    /// Number of stalls after startup.
    pub stall_count: u32,
    /// Total stall time, seconds.
    pub stall_total_s: f64,
    /// Startup delay, seconds (NaN/`null` if playback never started).
    #[serde(serialize_with = "nan_as_null", deserialize_with = "null_as_nan")]
    pub startup_s: f64,
    /// Mean bitrate over the media played, weighted by duration (kbit/s).
    pub mean_kbps: f64,
    /// Number of representation changes between consecutive played stretches.
    pub switches: u32,
    /// Sum of the absolute bitrate changes at those switches (kbit/s).
    pub switch_magnitude_kbps: f64,
    /// Hoßfeld et al.'s stalling MOS (1..5).
    pub qoe_hossfeld: f64,
    /// Yin et al.'s linear QoE with Pensieve's weights (see the module documentation).
    #[serde(serialize_with = "nan_as_null", deserialize_with = "null_as_nan")]
    pub qoe_linear: f64,
}

fn nan_as_null<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_none()
    }
}

fn null_as_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Hoßfeld et al.'s MOS for `count` stalls of mean length `mean_len_s` seconds.
pub fn hossfeld_mos(count: u32, mean_len_s: f64) -> f64 {
    let n = f64::from(count);
    HOSSFELD_A * (-(HOSSFELD_B * mean_len_s.max(0.0) + HOSSFELD_C) * n).exp() + HOSSFELD_D
}

/// The metrics of `trace` (see [`QoeSummary`]). Negative or non-finite durations in a trace
/// (from a confused event source) count as zero rather than corrupting the sums.
pub fn summarize(trace: &PlaybackTrace) -> QoeSummary {
    let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let stall_count = u32::try_from(trace.stalls.len()).unwrap_or(u32::MAX);
    // `+ 0.0`: an empty f64 sum is -0.0, which prints as "-0".
    let stall_total_s: f64 = trace.stalls.iter().map(|s| clean(s.duration_s)).sum::<f64>() + 0.0;
    let played_s: f64 = trace.played.iter().map(|p| clean(p.duration_s)).sum();
    let kbit: f64 = trace.played.iter().map(|p| clean(p.duration_s) * clean(p.kbps)).sum();
    let mean_kbps = if played_s > 0.0 { kbit / played_s } else { 0.0 };
    let (mut switches, mut switch_magnitude_kbps) = (0u32, 0.0);
    for pair in trace.played.windows(2) {
        let delta = (clean(pair[1].kbps) - clean(pair[0].kbps)).abs();
        if delta > 0.0 {
            switches += 1;
            switch_magnitude_kbps += delta;
        }
    }
    let Some(startup) = trace.startup_s.map(clean) else {
        return QoeSummary {
            stall_count,
            stall_total_s,
            startup_s: f64::NAN,
            mean_kbps,
            switches,
            switch_magnitude_kbps,
            qoe_hossfeld: MOS_FLOOR,
            qoe_linear: f64::NAN,
        };
    };
    let mean_stall = if stall_count > 0 { stall_total_s / f64::from(stall_count) } else { 0.0 };
    let qoe_linear = kbit / 1000.0 - REBUFFER_PENALTY * (stall_total_s + startup) - switch_magnitude_kbps / 1000.0;
    QoeSummary {
        stall_count,
        stall_total_s,
        startup_s: startup,
        mean_kbps,
        switches,
        switch_magnitude_kbps,
        qoe_hossfeld: hossfeld_mos(stall_count, mean_stall),
        qoe_linear,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn played(start_s: f64, duration_s: f64, kbps: f64) -> Played {
        Played { start_s, duration_s, kbps }
    }

    #[test]
    fn a_smooth_playback_scores_the_top_of_the_scale() {
        let trace = PlaybackTrace {
            startup_s: Some(0.5),
            stalls: vec![],
            played: vec![played(0.0, 10.0, 1000.0)],
            ended: true,
        };
        let s = summarize(&trace);
        assert_eq!(s.stall_count, 0);
        assert_eq!(s.switches, 0);
        assert!((s.qoe_hossfeld - 5.0).abs() < 1e-12);
        assert!((s.mean_kbps - 1000.0).abs() < 1e-9);
        // 10 one-second chunks at 1 Mbit/s, minus 4.3 × the 0.5 s startup.
        assert!((s.qoe_linear - (10.0 - 4.3 * 0.5)).abs() < 1e-9);
    }

    #[test]
    fn the_formulas_match_the_papers_on_a_worked_example() {
        let trace = PlaybackTrace {
            startup_s: Some(1.0),
            stalls: vec![Stall { start_s: 5.0, duration_s: 2.0 }, Stall { start_s: 9.0, duration_s: 4.0 }],
            played: vec![played(0.0, 4.0, 500.0), played(4.0, 4.0, 2000.0), played(8.0, 2.0, 1000.0)],
            ended: false,
        };
        let s = summarize(&trace);
        assert_eq!(s.stall_count, 2);
        assert!((s.stall_total_s - 6.0).abs() < 1e-12);
        assert_eq!(s.switches, 2);
        assert!((s.switch_magnitude_kbps - 2500.0).abs() < 1e-9);
        assert!((s.mean_kbps - (2000.0 + 8000.0 + 2000.0) / 10.0).abs() < 1e-9);
        // Hoßfeld: L = 3 s mean, N = 2.
        let mos = 3.5 * (-(0.15 * 3.0 + 0.19) * 2.0_f64).exp() + 1.5;
        assert!((s.qoe_hossfeld - mos).abs() < 1e-12);
        let lin = (2.0 + 8.0 + 2.0) - 4.3 * (6.0 + 1.0) - 2.5;
        assert!((s.qoe_linear - lin).abs() < 1e-9);
    }

    #[test]
    fn a_playback_that_never_started_is_null_in_json_and_round_trips() {
        let s = summarize(&PlaybackTrace::default());
        assert!(s.startup_s.is_nan() && s.qoe_linear.is_nan());
        assert_eq!(s.qoe_hossfeld, 1.0);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"startup_s\":null"), "{json}");
        let back: QoeSummary = serde_json::from_str(&json).unwrap();
        assert!(back.startup_s.is_nan());
        assert_eq!(back.stall_count, 0);
    }

    fn arb_trace() -> impl Strategy<Value = PlaybackTrace> {
        (
            proptest::option::of(0.0f64..30.0),
            proptest::collection::vec((0.0f64..100.0, 0.0f64..20.0), 0..8),
            proptest::collection::vec((0.0f64..10.0, prop::sample::select(vec![250.0, 500.0, 1000.0, 4000.0])), 0..20),
            any::<bool>(),
        )
            .prop_map(|(startup_s, stalls, played_raw, ended)| {
                let mut t = 0.0;
                let played = played_raw
                    .into_iter()
                    .map(|(d, k)| {
                        let p = played(t, d, k);
                        t += d;
                        p
                    })
                    .collect();
                let stalls = stalls.into_iter().map(|(s, d)| Stall { start_s: s, duration_s: d }).collect();
                PlaybackTrace { startup_s, stalls, played, ended }
            })
    }

    proptest! {
        #[test]
        fn metrics_stay_in_their_ranges(trace in arb_trace()) {
            let s = summarize(&trace);
            prop_assert!(s.qoe_hossfeld >= 1.0 && s.qoe_hossfeld <= 5.0 + 1e-12);
            prop_assert!(s.stall_total_s >= 0.0 && s.switch_magnitude_kbps >= 0.0);
            prop_assert!(s.mean_kbps >= 0.0 && s.mean_kbps <= 4000.0 + 1e-9);
            prop_assert!(s.switches as usize <= trace.played.len().saturating_sub(1));
            prop_assert_eq!(s.stall_count as usize, trace.stalls.len());
            let back: QoeSummary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            prop_assert_eq!(back.stall_count, s.stall_count);
        }

        #[test]
        fn one_more_stall_never_raises_either_qoe(trace in arb_trace(), d in 0.0f64..20.0) {
            prop_assume!(trace.startup_s.is_some());
            let before = summarize(&trace);
            let mut worse = trace.clone();
            worse.stalls.push(Stall { start_s: 1000.0, duration_s: d });
            let after = summarize(&worse);
            prop_assert!(after.qoe_linear <= before.qoe_linear + 1e-9);
            // Hoßfeld's exponent is 0.15·(total stall time) + 0.19·N: both grow.
            prop_assert!(after.qoe_hossfeld <= before.qoe_hossfeld + 1e-12);
        }
    }
}
