//! The `dash` template's two-path testbed (issue 21: "Braid's ABR client
//! over a two-path Braid connection, the traces as the two paths' rates,
//! against the same client over single-path TCP on the better path").
//!
//! With `trace2` the testbed has two paths for every configuration, so all
//! configurations of an environment see the same network; a single-path
//! transport (or a browser player) then uses "the better path": the one
//! whose server-to-client rate has the higher mean over the window a
//! playback can see ([`window`]). A path with no rate source at all is
//! unlimited and better than any shaped one; a tie keeps path 1.

use std::path::Path;
use std::time::Duration;

use braid_link::RateTrace;

use crate::template::TemplateError;

/// The window the paths are ranked over: the seconds of video played plus
/// `slack_s` (startup, stalls), from the testbed's start, which is when
/// the emulator starts playing a trace. Ranking by the whole file would
/// let a part no experiment reaches decide (the cellular traces run 120 to
/// 1060 s, their means over 60 s and over the whole file differ by 2-3x).
pub fn window(duration: Duration, slack_s: u64) -> Duration {
    duration + Duration::from_secs(slack_s)
}

/// The mean rate of the Mahimahi trace at `path` over the first `window`
/// (repeating after its period, as the link plays it), Mbit/s.
pub fn trace_mean_mbps(path: &Path, window: Duration) -> Result<f64, braid_link::TraceError> {
    let trace = RateTrace::load(path)?;
    Ok(trace.mean_rate_over(window).bits_per_sec() as f64 / 1e6)
}

/// The index (0-based) of the path with the higher mean rate; `None` is
/// an unlimited path. Ties, and no paths at all, give path 0.
pub fn better(means: &[Option<f64>]) -> usize {
    let key = |m: &Option<f64>| m.unwrap_or(f64::INFINITY);
    (1..means.len()).fold(0, |best, i| if key(&means[i]) > key(&means[best]) { i } else { best })
}

/// A trace file's mean for the template: a bad file is an invalid
/// parameter, named.
pub fn mean_of(param: &str, path: &Path, window: Duration) -> Result<f64, TemplateError> {
    trace_mean_mbps(path, window)
        .map_err(|e| TemplateError::Invalid(format!("{param}: `{}` is not a usable Mahimahi trace: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_higher_mean_wins_and_unlimited_beats_any_rate() {
        assert_eq!(better(&[Some(1.0), Some(4.5)]), 1);
        assert_eq!(better(&[Some(4.5), Some(1.0)]), 0);
        assert_eq!(better(&[Some(2.0), Some(2.0)]), 0);
        assert_eq!(better(&[None, Some(100.0)]), 0);
        assert_eq!(better(&[Some(100.0), None]), 1);
        assert_eq!(better(&[Some(1.0)]), 0);
        assert_eq!(better(&[]), 0);
    }

    #[test]
    fn the_mean_is_over_the_window_not_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        // 12 Mbit/s (one packet a millisecond) for 1 s, then 1.2 Mbit/s
        // for 9 s: 2.28 Mbit/s over the 10 s file.
        let mut text = String::new();
        for ms in 1..=1000 {
            text.push_str(&format!("{ms}\n"));
        }
        for ms in (1010..=10_000).step_by(10) {
            text.push_str(&format!("{ms}\n"));
        }
        let path = dir.path().join("t");
        std::fs::write(&path, text).unwrap();
        let m = |s| trace_mean_mbps(&path, Duration::from_secs(s)).unwrap();
        assert!((m(1) - 12.0).abs() < 0.05, "{}", m(1));
        assert!((m(10) - 2.28).abs() < 0.05, "{}", m(10));
        // Two periods: the same mean as one.
        assert!((m(20) - m(10)).abs() < 0.05);
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "5\n3\n").unwrap();
        let e = mean_of("trace2", &bad, Duration::from_secs(1)).unwrap_err().to_string();
        assert!(e.contains("trace2") && e.contains("earlier"), "{e}");
    }
}
