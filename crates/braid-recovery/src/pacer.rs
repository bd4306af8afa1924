//! Pacing: a token bucket refilled at the congestion controller's pacing
//! rate, so a window is spread over the RTT instead of leaving in one burst
//! that overflows a shallow bottleneck queue.

use std::time::Duration;

use braid_core::Instant;

/// Token bucket of bytes.
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: f64,
    capacity: f64,
    last: Option<Instant>,
}

impl Pacer {
    /// A bucket holding at most `burst` bytes, initially full.
    pub fn new(burst: u64) -> Self {
        Pacer { tokens: burst as f64, capacity: burst as f64, last: None }
    }

    /// A bucket holding at most `burst` bytes, initially holding `tokens`
    /// (more than `burst` lets an initial window leave at once).
    pub fn with_tokens(burst: u64, tokens: u64) -> Self {
        Pacer { tokens: tokens as f64, capacity: burst as f64, last: None }
    }

    /// Change the bucket's depth.
    pub fn set_burst(&mut self, burst: u64) {
        self.capacity = burst as f64;
        self.tokens = self.tokens.min(self.capacity);
    }

    fn refill(&mut self, now: Instant, rate: f64) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * rate).min(self.capacity);
        }
        self.last = Some(now);
    }

    /// `None` if a packet of `bytes` may leave at `now`, else the time it
    /// may. `rate` is in bytes per second.
    #[inline(always)]
    pub fn delay(&mut self, now: Instant, rate: f64, bytes: u64) -> Option<Instant> {
        self.refill(now, rate);
        let need = bytes as f64;
        if self.tokens >= need || rate <= 0.0 || !rate.is_finite() {
            return None;
        }
        let wait = (need - self.tokens) / rate;
        Some(now + Duration::from_secs_f64(wait.min(1.0)).max(Duration::from_micros(1)))
    }

    /// A packet of `bytes` left.
    pub fn on_sent(&mut self, bytes: u64) {
        self.tokens -= bytes as f64;
        if self.tokens < -self.capacity {
            self.tokens = -self.capacity;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_packets_at_the_rate() {
        let mut p = Pacer::new(3000);
        let t0 = Instant::ZERO;
        let rate = 1_000_000.0; // 1 MB/s: 1000 bytes per ms
        assert_eq!(p.delay(t0, rate, 1000), None);
        p.on_sent(1000);
        p.on_sent(1000);
        p.on_sent(1000);
        let next = p.delay(t0, rate, 1000).unwrap();
        assert_eq!(next, t0 + Duration::from_millis(1));
        assert_eq!(p.delay(next, rate, 1000), None);
    }
}
