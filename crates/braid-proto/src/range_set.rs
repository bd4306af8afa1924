//! A set of `u64` values stored as disjoint half-open ranges. Used for
//! received packet numbers (SACK generation), acknowledged stream bytes and
//! the retransmission queue.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent half-open ranges, keyed by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn range_count(&self) -> usize {
        self.map.len()
    }

    /// Adds `range`, merging with neighbours. Returns the number of values
    /// that were not present before.
    pub fn insert(&mut self, range: Range<u64>) -> u64 {
        if range.start >= range.end {
            return 0;
        }
        // Fast path, the common in-order case: extending the range that
        // touches `range.start` when nothing lies after it up to `range.end`.
        if let Some((&s, e)) = self.map.range_mut(..=range.start).next_back() {
            if *e >= range.start && *e < range.end {
                let next_start = self.map.range(s + 1..).next().map(|(&n, _)| n);
                if next_start.is_none_or(|n| n > range.end) {
                    let e = self.map.get_mut(&s).expect("range just found");
                    let new = range.end - *e;
                    *e = range.end;
                    return new;
                }
            }
        }
        let mut new = range.end - range.start;
        let (mut start, mut end) = (range.start, range.end);
        // A range starting at or before `start` that overlaps or touches it.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= start {
                if e >= end {
                    return 0;
                }
                new -= e - start;
                start = s;
                self.map.remove(&s);
            }
        }
        // Ranges starting inside [start, end] are absorbed.
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            self.map.remove(&s);
            let (lo, hi) = (s.max(range.start), e.min(range.end));
            if hi > lo {
                new -= hi - lo;
            }
            end = end.max(e);
        }
        self.map.insert(start, end);
        new
    }

    /// Removes `range` from the set.
    pub fn remove(&mut self, range: Range<u64>) {
        // Empty is the common case (the retransmission queue, on every
        // acknowledgement): no tree walk.
        if range.start >= range.end || self.map.is_empty() {
            return;
        }
        let mut to_reinsert = Vec::new();
        if let Some((&s, &e)) = self.map.range(..range.start).next_back() {
            if e > range.start {
                self.map.insert(s, range.start);
                if e > range.end {
                    to_reinsert.push((range.end, e));
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(range.start..range.end).next() {
            self.map.remove(&s);
            if e > range.end {
                to_reinsert.push((range.end, e));
            }
        }
        for (s, e) in to_reinsert {
            self.map.insert(s, e);
        }
    }

    pub fn contains(&self, value: u64) -> bool {
        self.map.range(..=value).next_back().is_some_and(|(_, &e)| e > value)
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.first_key_value().map(|(&s, &e)| s..e)
    }

    /// Removes and returns up to `max_len` values from the start of the
    /// lowest range.
    #[cfg(test)]
    pub fn pop_front(&mut self, max_len: u64) -> Option<Range<u64>> {
        let (&s, &e) = self.map.iter().next()?;
        self.map.remove(&s);
        let end = e.min(s.saturating_add(max_len.max(1)));
        if end < e {
            self.map.insert(end, e);
        }
        Some(s..end)
    }

    /// Removes the lowest range.
    pub fn pop_first(&mut self) -> Option<Range<u64>> {
        self.map.pop_first().map(|(s, e)| s..e)
    }

    /// Ranges from highest to lowest.
    pub fn iter_rev(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().rev().map(|(&s, &e)| s..e)
    }

    /// Ranges from lowest to highest.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// Ranges intersecting `range`, clipped to it, lowest first.
    pub fn intersecting(&self, range: Range<u64>) -> impl Iterator<Item = Range<u64>> + '_ {
        let first = self
            .map
            .range(..=range.start)
            .next_back()
            .filter(|(_, &e)| e > range.start)
            .map(|(&s, _)| s)
            .unwrap_or(range.start);
        self.map
            .range(first..range.end)
            .map(move |(&s, &e)| s.max(range.start)..e.min(range.end))
            .filter(|r| r.start < r.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #[test]
        fn behaves_like_a_set(ops in prop::collection::vec((any::<bool>(), 0u64..200, 0u64..30), 0..60)) {
            let mut set = RangeSet::new();
            let mut model = BTreeSet::new();
            for (insert, start, len) in ops {
                let r = start..start + len;
                if insert {
                    let new = r.clone().filter(|v| !model.contains(v)).count() as u64;
                    prop_assert_eq!(set.insert(r.clone()), new);
                    model.extend(r);
                } else {
                    set.remove(r.clone());
                    for v in r { model.remove(&v); }
                }
                let flat: BTreeSet<u64> = set.iter().flatten().collect();
                prop_assert_eq!(&flat, &model);
                // Disjoint and non-adjacent.
                let ranges: Vec<_> = set.iter().collect();
                for w in ranges.windows(2) { prop_assert!(w[0].end < w[1].start); }
            }
            for v in 0..240 { prop_assert_eq!(set.contains(v), model.contains(&v)); }
            let clipped: BTreeSet<u64> = set.intersecting(50..120).flatten().collect();
            let expected: BTreeSet<u64> = model.range(50..120).copied().collect();
            prop_assert_eq!(clipped, expected);
        }
    }

    #[test]
    fn pop_front_splits() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        assert_eq!(s.pop_front(4), Some(10..14));
        assert_eq!(s.first(), Some(14..20));
    }
}
