//! Abandoning a segment download that would take too long (sans-IO), as dash.js's
//! `AbandonRequestsRule` does: a player that has asked for a representation the network can no
//! longer carry stops that download and fetches the segment again at a representation it can.
//! Without it a player waits out the whole download while its buffer drains, however far the
//! rate has fallen (a cellular link that drops from 2 to 0.1 Mbit/s for a minute).
//!
//! The model, at each body chunk of the segment's download:
//! - after a grace time (too little data before it for a rate), the download's own rate so far
//!   is `r = bytes * 8 / elapsed`;
//! - the download would end at `elapsed + remaining * 8 / r`; it is late enough to act on if
//!   that exceeds both `multiplier x segment duration` and the buffer the player had when it
//!   asked for the segment (finishing would stall playback: with more buffer than the download
//!   needs, finishing costs nothing the viewer sees, and a refetch would only lower the quality
//!   and waste what has arrived, which is why dash.js leaves downloads alone above its stable
//!   buffer level);
//! - the replacement is the highest representation whose whole segment (its bitrate times the
//!   segment's duration) `r` carries within the segment's duration, the lowest if none does;
//! - it is abandoned only for a lower representation whose segment is smaller than what is left
//!   of this one (else finishing is cheaper).
//!
//! dash.js's defaults are a 0.5 s grace time and a 1.8 multiplier
//! (`streaming.abr.abandonDurationMultiplier`), which are this module's defaults.

/// The rule's two settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbandonRule {
    /// Seconds of a download before its rate is trusted.
    pub grace_s: f64,
    /// A download projected to take longer than this many segment durations is late.
    pub multiplier: f64,
}

impl Default for AbandonRule {
    fn default() -> Self {
        AbandonRule { grace_s: 0.5, multiplier: 1.8 }
    }
}

/// One segment download in progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Download {
    /// Index of the representation being fetched in the ladder.
    pub representation: usize,
    /// Body bytes received.
    pub bytes: u64,
    /// The body's size (its `Content-Length`, else the representation's bitrate times the
    /// segment's duration).
    pub total_bytes: u64,
    /// Seconds since the request was sent.
    pub elapsed_s: f64,
    /// The segment's media duration, seconds.
    pub segment_s: f64,
    /// Seconds of media the player held when the segment was requested.
    pub buffer_s: f64,
}

impl AbandonRule {
    /// The representation to fetch the segment at instead, if `download` should be abandoned;
    /// `ladder_kbps` ascending, as [`crate::abr::AbrInput::ladder_kbps`].
    pub fn replacement(&self, ladder_kbps: &[f64], download: &Download) -> Option<usize> {
        let d = download;
        if d.representation == 0 || d.elapsed_s < self.grace_s || d.segment_s <= 0.0 || d.bytes >= d.total_bytes {
            return None;
        }
        let rate_bps = d.bytes as f64 * 8.0 / d.elapsed_s;
        let remaining_bits = (d.total_bytes - d.bytes) as f64 * 8.0;
        let projected_s = if rate_bps > 0.0 { d.elapsed_s + remaining_bits / rate_bps } else { f64::INFINITY };
        if projected_s <= self.multiplier * d.segment_s || projected_s <= d.buffer_s {
            return None;
        }
        let fits = |kbps: f64| kbps * 1000.0 <= rate_bps;
        let below = &ladder_kbps[..d.representation.min(ladder_kbps.len())];
        let choice = below.iter().rposition(|&k| fits(k)).unwrap_or(0);
        let replacement_bits = ladder_kbps.get(choice).copied().unwrap_or(0.0) * 1000.0 * d.segment_s;
        (replacement_bits < remaining_bits).then_some(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LADDER: [f64; 5] = [250.0, 500.0, 1000.0, 2000.0, 4000.0];

    fn download(representation: usize, bytes: u64, elapsed_s: f64) -> Download {
        let total_bytes = (LADDER[representation] * 1000.0 * 2.0 / 8.0) as u64;
        Download { representation, bytes, total_bytes, elapsed_s, segment_s: 2.0, buffer_s: 0.0 }
    }

    #[test]
    fn a_download_that_the_rate_carries_in_time_goes_on() {
        let rule = AbandonRule::default();
        // 2 Mbit/s segment (500 KB), 40% of it in 0.8 s: ends at 2 s, within 3.6 s.
        assert_eq!(rule.replacement(&LADDER, &download(3, 200_000, 0.8)), None);
        // Within the grace time nothing is decided, however slow.
        assert_eq!(rule.replacement(&LADDER, &download(3, 10, 0.4)), None);
        // The lowest representation has nothing lower to go to.
        assert_eq!(rule.replacement(&LADDER, &download(0, 10, 5.0)), None);
        // 13 s projected, but 20 s of buffer: finishing stalls nothing.
        let buffered = Download { buffer_s: 20.0, ..download(4, 75_000, 1.0) };
        assert_eq!(rule.replacement(&LADDER, &buffered), None);
        assert_eq!(rule.replacement(&LADDER, &Download { buffer_s: 10.0, ..buffered }), Some(1));
    }

    #[test]
    fn a_collapsed_rate_drops_to_what_it_carries() {
        let rule = AbandonRule::default();
        // 4 Mbit/s segment (1 MB) at 0.6 Mbit/s so far: 13 s projected. 0.6 Mbit/s carries the
        // 500 kbit/s representation within a segment's duration.
        assert_eq!(rule.replacement(&LADDER, &download(4, 75_000, 1.0)), Some(1));
        // Nothing arrived for a second: the lowest.
        assert_eq!(rule.replacement(&LADDER, &download(4, 0, 1.0)), Some(0));
    }

    #[test]
    fn a_nearly_finished_download_is_kept() {
        let rule = AbandonRule::default();
        // 2 Mbit/s segment, 490 of 500 KB after 4 s: 10 KB left is less than any replacement.
        assert_eq!(rule.replacement(&LADDER, &download(3, 490_000, 4.0)), None);
    }

    proptest! {
        #[test]
        fn a_replacement_is_lower_and_smaller_than_what_is_left(
            rep in 0usize..5, frac in 0.0f64..1.0, elapsed in 0.0f64..30.0, buffer in 0.0f64..60.0,
        ) {
            let d = download(rep, 0, elapsed);
            let d = Download { bytes: (d.total_bytes as f64 * frac) as u64, buffer_s: buffer, ..d };
            if let Some(r) = AbandonRule::default().replacement(&LADDER, &d) {
                prop_assert!(r < rep);
                prop_assert!(LADDER[r] * 1000.0 * d.segment_s < (d.total_bytes - d.bytes) as f64 * 8.0);
                prop_assert!(elapsed >= 0.5);
                prop_assert!(elapsed + ((d.total_bytes - d.bytes) as f64 * elapsed / d.bytes.max(1) as f64) > buffer
                    || d.bytes == 0);
            }
        }
    }
}
