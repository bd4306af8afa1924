//! When a node should evaluate its rules: periodically and soon after its
//! view changed (Frömmgen 2018, §7.2: rules react to the monitored topology).
//!
//! Sans-IO: the caller passes the current time in and asks whether an
//! evaluation is due; a change is debounced by a short hold-off so that a
//! burst of membership updates causes one evaluation, not one per update.

use std::time::Duration;

use braid_core::Instant;

/// Decides when to run [`Engine::step`](crate::Engine::step) at one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalTrigger {
    period: Duration,
    hold_off: Duration,
    last: Option<Instant>,
    changed_at: Option<Instant>,
}

impl EvalTrigger {
    /// Evaluate every `period`, and `hold_off` after a topology change
    /// (never more often than `hold_off` apart).
    pub fn new(period: Duration, hold_off: Duration) -> Self {
        EvalTrigger {
            period,
            hold_off,
            last: None,
            changed_at: None,
        }
    }

    /// Records that the node's view changed at `now` (first change of a burst counts).
    pub fn topology_changed(&mut self, now: Instant) {
        if self.changed_at.is_none() {
            self.changed_at = Some(now);
        }
    }

    /// Whether an evaluation is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        let Some(last) = self.last else { return true };
        let since_last = now.saturating_duration_since(last);
        if since_last >= self.period {
            return true;
        }
        match self.changed_at {
            // A change counts only from when it happened: asked about an earlier instant
            // (a timer that fired early), the answer is the periodic one.
            Some(c) => now >= c && now.saturating_duration_since(c) >= self.hold_off && since_last >= self.hold_off,
            None => false,
        }
    }

    /// Records an evaluation at `now`.
    pub fn evaluated(&mut self, now: Instant) {
        self.last = Some(now);
        self.changed_at = None;
    }

    /// The next instant at which [`due`](Self::due) becomes true (for a timer).
    pub fn next_due(&self) -> Instant {
        let Some(last) = self.last else {
            return Instant::ZERO;
        };
        let periodic = last.checked_add(self.period).unwrap_or(Instant::MAX);
        match self.changed_at {
            Some(c) => {
                let after_change = c.checked_add(self.hold_off).unwrap_or(Instant::MAX);
                let after_last = last.checked_add(self.hold_off).unwrap_or(Instant::MAX);
                periodic.min(after_change.max(after_last))
            }
            None => periodic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(x: u64) -> Instant {
        Instant::from_nanos(x * 1_000_000)
    }

    #[test]
    fn periodic_and_on_change() {
        let mut t = EvalTrigger::new(Duration::from_secs(1), Duration::from_millis(50));
        assert!(t.due(ms(0)));
        t.evaluated(ms(0));
        assert!(!t.due(ms(500)));
        t.topology_changed(ms(500));
        t.topology_changed(ms(520));
        assert!(!t.due(ms(530)));
        assert!(t.due(ms(550)));
        assert_eq!(t.next_due(), ms(550));
        t.evaluated(ms(550));
        assert!(!t.due(ms(1000)));
        assert!(t.due(ms(1550)));
    }

    proptest! {
        #[test]
        fn due_exactly_from_next_due(period in 1u64..5000, hold in 0u64..500, last in 0u64..10_000, change in proptest::option::of(0u64..20_000)) {
            let mut t = EvalTrigger::new(Duration::from_millis(period), Duration::from_millis(hold));
            t.evaluated(ms(last));
            if let Some(c) = change {
                t.topology_changed(ms(last + c));
            }
            let nd = t.next_due();
            prop_assert!(t.due(nd));
            // Not due at any time between the last evaluation and next_due.
            if nd > ms(last) {
                prop_assert!(!t.due(Instant::from_nanos(nd.as_nanos() - 1)));
            }
        }
    }
}
