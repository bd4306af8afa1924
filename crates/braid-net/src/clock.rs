//! Maps tokio's monotonic clock to the protocol's [`braid_core::Instant`].

use std::time::Duration;

use braid_core::Instant;

/// The epoch (taken at bind) from which protocol time counts nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock { epoch: tokio::time::Instant::now() }
    }

    /// The current protocol time.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The tokio deadline of protocol time `t`. A deadline too far to
    /// represent becomes "in a year", which is as good as never.
    pub(crate) fn deadline(&self, t: Instant) -> tokio::time::Instant {
        const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
        self.epoch
            .checked_add(t.since_epoch().min(FAR + self.epoch.elapsed()))
            .unwrap_or_else(|| tokio::time::Instant::now() + FAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn now_and_deadline_round_trip() {
        let clock = Clock::new();
        let t = clock.now() + Duration::from_millis(5);
        let d = clock.deadline(t);
        assert_eq!(d - clock.epoch, t.since_epoch());
        // The far future saturates instead of overflowing.
        assert!(clock.deadline(Instant::MAX) > tokio::time::Instant::now() + Duration::from_secs(3600));
        assert!(clock.now() >= t - Duration::from_millis(5));
    }
}
