//! The virtual playout buffer of Braid's ABR client (sans-IO: the driver passes the time in),
//! which turns segment arrivals into the same [`PlaybackTrace`] the browser players' events give.
//!
//! Model (the playback model of Yin et al., SIGCOMM 2015, §3, and of Pensieve's simulator):
//! the buffer holds whole downloaded segments; once the first segment is in, media plays at
//! 1× wall-clock speed while the buffer is non-empty; when it runs dry before the video's end,
//! a stall begins, and it ends the moment the next segment arrives. The client fetches the next
//! segment only while the buffer is below its target ([`Player::fetch_delay_s`] says how long to
//! wait otherwise), as dash.js and Shaka do with their buffer goals.

use std::collections::VecDeque;

use crate::qoe::{PlaybackTrace, Played, Stall};

/// Slack for floating-point sums of durations, seconds.
const EPS: f64 = 1e-9;

/// A downloaded segment not yet fully played.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    media_start_s: f64,
    remaining_s: f64,
    duration_s: f64,
    kbps: f64,
}

/// The virtual player (see the module documentation). Times are seconds since the session
/// began (the manifest request).
#[derive(Debug, Clone)]
pub struct Player {
    target_s: f64,
    total_media_s: f64,
    queue: VecDeque<Chunk>,
    /// Time up to which playback has been simulated.
    clock_s: f64,
    stall_start: Option<f64>,
    downloaded_s: f64,
    played_s: f64,
    trace: PlaybackTrace,
}

impl Player {
    /// A player with buffer target `buffer_target_s` for a video of `total_media_s` seconds.
    pub fn new(buffer_target_s: f64, total_media_s: f64) -> Player {
        Player {
            target_s: buffer_target_s.max(0.0),
            total_media_s: total_media_s.max(0.0),
            queue: VecDeque::new(),
            clock_s: 0.0,
            stall_start: None,
            downloaded_s: 0.0,
            played_s: 0.0,
            trace: PlaybackTrace::default(),
        }
    }

    /// Plays from the last call's time to `now_s`. Earlier times are ignored (time never runs back).
    pub fn advance(&mut self, now_s: f64) {
        // Also refuses NaN.
        if now_s.partial_cmp(&self.clock_s) != Some(std::cmp::Ordering::Greater) {
            return;
        }
        if self.trace.startup_s.is_none() || self.trace.ended || self.stall_start.is_some() {
            self.clock_s = now_s;
            return;
        }
        while self.clock_s < now_s - EPS {
            let Some(front) = self.queue.front_mut() else {
                if self.played_s >= self.total_media_s - EPS {
                    self.trace.ended = true;
                } else {
                    self.stall_start = Some(self.clock_s);
                }
                break;
            };
            let play = front.remaining_s.min(now_s - self.clock_s);
            let media_start = front.media_start_s + (front.duration_s - front.remaining_s);
            let kbps = front.kbps;
            front.remaining_s -= play;
            if front.remaining_s <= EPS {
                self.queue.pop_front();
            }
            self.clock_s += play;
            self.played_s += play;
            match self.trace.played.last_mut() {
                Some(last) if last.kbps == kbps && (last.start_s + last.duration_s - media_start).abs() < 1e-6 => {
                    last.duration_s += play;
                }
                _ => self.trace.played.push(Played { start_s: media_start, duration_s: play, kbps }),
            }
        }
        // The video may end exactly at `now_s`.
        if self.queue.is_empty() && self.stall_start.is_none() && self.played_s >= self.total_media_s - EPS {
            self.trace.ended = true;
        }
        self.clock_s = now_s;
    }

    /// A segment of `duration_s` media seconds at `kbps` finished downloading at `now_s`.
    pub fn segment_arrived(&mut self, now_s: f64, duration_s: f64, kbps: f64) {
        self.advance(now_s);
        let now_s = now_s.max(self.clock_s);
        let duration_s = duration_s.max(0.0);
        self.queue.push_back(Chunk { media_start_s: self.downloaded_s, remaining_s: duration_s, duration_s, kbps });
        self.downloaded_s += duration_s;
        if self.trace.startup_s.is_none() {
            self.trace.startup_s = Some(now_s);
            self.clock_s = now_s;
        }
        if let Some(start) = self.stall_start.take() {
            self.trace.stalls.push(Stall { start_s: start, duration_s: now_s - start });
        }
    }

    /// Media seconds buffered ahead of the playhead.
    pub fn buffer_s(&self) -> f64 {
        // `+ 0.0`: an empty f64 sum is -0.0.
        self.queue.iter().map(|c| c.remaining_s).sum::<f64>() + 0.0
    }

    /// Wall seconds to wait before requesting the next segment: zero while the buffer is below
    /// its target, else the time for playback to drain it down to the target.
    pub fn fetch_delay_s(&self) -> f64 {
        if self.trace.startup_s.is_none() || self.stall_start.is_some() {
            return 0.0;
        }
        (self.buffer_s() - self.target_s).max(0.0)
    }

    /// Whether a stall is in progress.
    pub fn stalled(&self) -> bool {
        self.stall_start.is_some()
    }

    /// Whether the whole video has played.
    pub fn ended(&self) -> bool {
        self.trace.ended
    }

    /// Media seconds downloaded so far.
    pub fn downloaded_s(&self) -> f64 {
        self.downloaded_s
    }

    /// Media seconds played so far.
    pub fn played_s(&self) -> f64 {
        self.played_s
    }

    /// Seconds until the buffer runs dry if nothing arrives (infinite before startup).
    pub fn time_to_empty_s(&self) -> f64 {
        if self.trace.startup_s.is_none() {
            f64::INFINITY
        } else {
            self.buffer_s()
        }
    }

    /// The trace so far.
    pub fn trace(&self) -> &PlaybackTrace {
        &self.trace
    }

    /// Ends the session at `now_s`: plays up to it and closes a stall in progress there.
    pub fn finish(mut self, now_s: f64) -> PlaybackTrace {
        self.advance(now_s);
        if let Some(start) = self.stall_start.take() {
            let end = now_s.max(start);
            self.trace.stalls.push(Stall { start_s: start, duration_s: end - start });
        }
        self.trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qoe::summarize;
    use proptest::prelude::*;

    #[test]
    fn startup_play_stall_resume_end() {
        let mut p = Player::new(10.0, 4.0);
        p.advance(0.5);
        assert!(p.trace().startup_s.is_none());
        p.segment_arrived(1.0, 2.0, 500.0);
        assert_eq!(p.trace().startup_s, Some(1.0));
        p.advance(2.0);
        assert!((p.buffer_s() - 1.0).abs() < 1e-9);
        // Runs dry at 3.0; the next segment arrives at 4.5.
        p.segment_arrived(4.5, 2.0, 1000.0);
        assert_eq!(p.trace().stalls, vec![Stall { start_s: 3.0, duration_s: 1.5 }]);
        let t = p.finish(7.0);
        assert!(t.ended);
        assert_eq!(t.played, vec![Played { start_s: 0.0, duration_s: 2.0, kbps: 500.0 }, Played { start_s: 2.0, duration_s: 2.0, kbps: 1000.0 }]);
        let s = summarize(&t);
        assert_eq!((s.stall_count, s.switches), (1, 1));
    }

    #[test]
    fn fetching_waits_above_the_target() {
        let mut p = Player::new(4.0, 100.0);
        p.segment_arrived(0.2, 2.0, 500.0);
        p.segment_arrived(0.3, 2.0, 500.0);
        p.segment_arrived(0.4, 2.0, 500.0);
        // 6 s buffered minus 0.2 s played: 1.8 s above the 4 s target.
        assert!((p.fetch_delay_s() - 1.8).abs() < 1e-9);
        p.advance(2.2);
        assert!(p.fetch_delay_s().abs() < 1e-9);
    }

    #[test]
    fn a_session_cut_during_a_stall_counts_the_stall() {
        let mut p = Player::new(4.0, 100.0);
        p.segment_arrived(1.0, 2.0, 500.0);
        let t = p.finish(10.0);
        assert_eq!(t.stalls, vec![Stall { start_s: 3.0, duration_s: 7.0 }]);
        assert!(!t.ended);
    }

    proptest! {
        /// Arrivals at increasing times with random segment lengths; the invariants of the model.
        #[test]
        fn conservation_laws(gaps in proptest::collection::vec((0.0f64..5.0, 0.5f64..4.0, 0usize..3), 1..40), tail in 0.0f64..20.0) {
            let total: f64 = gaps.iter().map(|g| g.1).sum();
            let mut p = Player::new(8.0, total);
            let mut now = 0.0;
            for (gap, dur, rung) in &gaps {
                now += gap;
                p.segment_arrived(now, *dur, [300.0, 1000.0, 3000.0][*rung]);
                prop_assert!(p.played_s() <= p.downloaded_s() + 1e-9);
                prop_assert!(p.buffer_s() >= -1e-9);
                prop_assert!((p.downloaded_s() - p.played_s() - p.buffer_s()).abs() < 1e-6);
            }
            let startup = p.trace().startup_s.unwrap();
            let end = now + tail;
            let t = p.finish(end);
            let played: f64 = t.played.iter().map(|x| x.duration_s).sum();
            let stalled: f64 = t.stalls.iter().map(|s| s.duration_s).sum();
            prop_assert!(played <= total + 1e-6);
            if t.ended {
                prop_assert!((played - total).abs() < 1e-6);
                prop_assert!(played + stalled <= end - startup + 1e-6);
            } else {
                // Every second after startup was either playing or stalled.
                prop_assert!((played + stalled - (end - startup)).abs() < 1e-6, "{played} + {stalled} vs {}", end - startup);
            }
            // Played stretches are contiguous in media time.
            for w in t.played.windows(2) {
                prop_assert!((w[0].start_s + w[0].duration_s - w[1].start_s).abs() < 1e-6);
            }
            for s in &t.stalls {
                prop_assert!(s.duration_s >= 0.0 && s.start_s >= startup - 1e-9);
            }
        }
    }
}
