//! A set of slot numbers kept as runs: the receiver record's `slt` and
//! consumed slots (l. 14).
//!
//! Slots are created in contiguous runs (l. 54-57 create `sck..s+n`) and
//! consumed nearly in order, so both sets are a handful of runs whatever
//! their size: creating a run, consuming its lowest slot and forgetting
//! everything below the frontier (l. 53) each touch one end of a deque.
//! A B-tree set paid an insertion or removal per slot, the largest cost of
//! a small message at the receiver.
//!
//! The representation is canonical: runs sorted, disjoint and never
//! adjacent, so two sets holding the same slots are equal and hash equal
//! whatever their history (the model checker hashes machine states).

use std::collections::VecDeque;
use std::ops::Range;

/// Slot numbers as sorted, disjoint, non-adjacent, non-empty runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct SlotSet {
    runs: VecDeque<Range<u64>>,
    /// Slots in all runs.
    len: u64,
}

impl SlotSet {
    /// Number of slots.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the first run ending above `x` (the run that holds `x`, if
    /// any does).
    fn run_at(&self, x: u64) -> usize {
        // The common case, a slot of the lowest run, without a search.
        match self.runs.front() {
            Some(r) if x < r.end => 0,
            _ => self.runs.partition_point(|r| r.end <= x),
        }
    }

    pub(crate) fn contains(&self, x: u64) -> bool {
        self.runs
            .get(self.run_at(x))
            .is_some_and(|r| r.start <= x)
    }

    /// Adds the slots of `range`; returns how many were not present.
    pub(crate) fn insert_range(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        // The common case: slots created above every slot held.
        let n = range.end - range.start;
        match self.runs.back_mut() {
            Some(last) if range.start >= last.start && range.start <= last.end => {
                let added = range.end.saturating_sub(last.end);
                last.end = last.end.max(range.end);
                self.len += added;
                return added;
            }
            Some(last) if range.start < last.start => {}
            _ => {
                self.runs.push_back(range);
                self.len += n;
                return n;
            }
        }
        // Anywhere else: merge with every run it overlaps or touches.
        let first = self.runs.partition_point(|r| r.end < range.start);
        let mut last = first;
        let (mut start, mut end) = (range.start, range.end);
        let mut held = 0;
        while let Some(r) = self.runs.get(last).filter(|r| r.start <= end) {
            held += r.end - r.start;
            start = start.min(r.start);
            end = end.max(r.end);
            last += 1;
        }
        self.runs.drain(first..last);
        self.runs.insert(first, start..end);
        let added = (end - start) - held;
        self.len += added;
        added
    }

    /// Adds slot `x`; returns whether it was not present.
    pub(crate) fn insert(&mut self, x: u64) -> bool {
        x < u64::MAX && self.insert_range(x..x + 1) == 1
    }

    /// Removes slot `x`; returns whether it was present.
    pub(crate) fn remove(&mut self, x: u64) -> bool {
        let i = self.run_at(x);
        let Some(r) = self.runs.get_mut(i).filter(|r| r.start <= x) else {
            return false;
        };
        self.len -= 1;
        if r.start == x {
            r.start += 1;
            if r.is_empty() {
                self.runs.remove(i);
                self.shrink();
            }
        } else if r.end == x + 1 {
            r.end = x;
        } else {
            let upper = x + 1..r.end;
            r.end = x;
            self.runs.insert(i + 1, upper);
        }
        true
    }

    /// Forgets every slot below `l` (l. 53).
    pub(crate) fn remove_below(&mut self, l: u64) {
        while let Some(r) = self.runs.front_mut() {
            if r.end <= l {
                self.len -= r.end - r.start;
                self.runs.pop_front();
            } else {
                if r.start < l {
                    self.len -= l - r.start;
                    r.start = l;
                }
                break;
            }
        }
        self.shrink();
    }

    /// The slots, ascending.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().flat_map(Range::clone)
    }

    /// The runs, ascending.
    pub(crate) fn runs(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.runs.iter().cloned()
    }

    /// Gives back the memory of a deque that once held many more runs
    /// (a burst of scattered consumption), so that what a record holds
    /// follows its slots ([`SLOT_BYTES`](super::SLOT_BYTES) each).
    fn shrink(&mut self) {
        let cap = self.runs.capacity();
        if cap > 64 && self.runs.len() < cap / 4 {
            self.runs.shrink_to(self.runs.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::hash::{DefaultHasher, Hash, Hasher};

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        InsertRange(u64, u64),
        Remove(u64),
        RemoveBelow(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // A small universe, so that runs meet, split and merge often.
        prop_oneof![
            (0u64..64).prop_map(Op::Insert),
            (0u64..64, 0u64..12).prop_map(|(a, n)| Op::InsertRange(a, a + n)),
            (0u64..64).prop_map(Op::Remove),
            (0u64..64).prop_map(Op::RemoveBelow),
        ]
    }

    fn apply(set: &mut SlotSet, model: &mut BTreeSet<u64>, op: &Op) {
        match *op {
            Op::Insert(x) => assert_eq!(set.insert(x), model.insert(x)),
            Op::InsertRange(a, b) => {
                let added = (a..b).filter(|x| model.insert(*x)).count() as u64;
                assert_eq!(set.insert_range(a..b), added);
            }
            Op::Remove(x) => assert_eq!(set.remove(x), model.remove(&x)),
            Op::RemoveBelow(l) => {
                set.remove_below(l);
                *model = model.split_off(&l);
            }
        }
    }

    fn hash(s: &SlotSet) -> u64 {
        let mut h = DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    }

    /// The set is in canonical form: sorted, non-empty, disjoint and
    /// non-adjacent runs, and `len` counts them.
    fn canonical(s: &SlotSet) -> bool {
        s.runs.iter().all(|r| r.start < r.end)
            && s.runs.iter().zip(s.runs.iter().skip(1)).all(|(a, b)| a.end < b.start)
            && s.len == s.runs.iter().map(|r| r.end - r.start).sum::<u64>()
    }

    proptest! {
        /// Behaves as a `BTreeSet<u64>` under any sequence of operations.
        #[test]
        fn agrees_with_a_btree_set(ops in proptest::collection::vec(op(), 0..80)) {
            let (mut set, mut model) = (SlotSet::default(), BTreeSet::new());
            for op in &ops {
                apply(&mut set, &mut model, op);
                prop_assert!(canonical(&set), "{set:?} after {op:?}");
                prop_assert_eq!(set.len(), model.len() as u64);
                prop_assert_eq!(set.is_empty(), model.is_empty());
                prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                for x in 0..80 {
                    prop_assert_eq!(set.contains(x), model.contains(&x));
                }
            }
        }

        /// Two sets holding the same slots are equal and hash equal, however
        /// they were built (the model checker relies on it).
        #[test]
        fn equal_contents_compare_and_hash_equal(
            a in proptest::collection::vec(op(), 0..60),
            b in proptest::collection::vec(op(), 0..60),
        ) {
            let (mut x, mut mx) = (SlotSet::default(), BTreeSet::new());
            let (mut y, mut my) = (SlotSet::default(), BTreeSet::new());
            for op in &a { apply(&mut x, &mut mx, op); }
            for op in &b { apply(&mut y, &mut my, op); }
            // Bring y to x's contents by another path: one slot at a time.
            for s in my.difference(&mx).copied().collect::<Vec<_>>() { y.remove(s); }
            for s in mx.difference(&my).copied().collect::<Vec<_>>() { y.insert(s); }
            prop_assert_eq!(&x, &y);
            prop_assert_eq!(hash(&x), hash(&y));
        }
    }

    #[test]
    fn slots_at_the_top_of_the_clock_do_not_overflow() {
        let mut s = SlotSet::default();
        assert!(!s.insert(u64::MAX));
        assert_eq!(s.insert_range(u64::MAX - 2..u64::MAX), 2);
        assert!(s.remove(u64::MAX - 1));
        assert!(!s.contains(u64::MAX));
        assert_eq!(s.runs().collect::<Vec<_>>(), vec![u64::MAX - 2..u64::MAX - 1]);
    }
}
