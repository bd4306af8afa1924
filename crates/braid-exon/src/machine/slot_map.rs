//! Values keyed by slot number, made in ascending order: the sender
//! record's tokens `tok` (l. 9).
//!
//! Tokens are made from the lowest envelope (l. 29-32), so each new one
//! has a higher slot than every token before it, and most often the next
//! one; they are settled (ACK, NACK, STALE) in nearly the same order. A
//! deque sorted by slot fits that: a token is appended, found at the index
//! its distance from the lowest slot gives (a search only after a gap,
//! when envelopes of a dead incarnation were skipped), and removed by
//! leaving a hole that is popped once it reaches either end. A B-tree map
//! paid a rebalancing insertion and removal per message instead.
//!
//! Holes left by out-of-order settlement are swept when they outnumber the
//! live entries, so memory stays proportional to the most tokens held. Equality
//! and hashing see only the live entries: two maps holding the same
//! tokens are equal and hash equal whatever their history (the model
//! checker hashes machine states).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

/// Values by slot: `(slot, value)` ascending, `None` where one was
/// removed; never a hole at either end.
#[derive(Clone)]
pub(crate) struct SlotMap<T> {
    entries: VecDeque<(u64, Option<T>)>,
    /// Entries holding a value.
    live: usize,
}

impl<T> Default for SlotMap<T> {
    fn default() -> Self {
        SlotMap {
            entries: VecDeque::new(),
            live: 0,
        }
    }
}

impl<T> SlotMap<T> {
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Where slot `s` is or would be inserted.
    fn find(&self, s: u64) -> Result<usize, usize> {
        let Some(&(lowest, _)) = self.entries.front() else {
            return Err(0);
        };
        // Without gaps, slot `s` sits `s - lowest` places in.
        if let Some(guess) = s.checked_sub(lowest) {
            if self
                .entries
                .get(usize::try_from(guess).unwrap_or(usize::MAX))
                .is_some_and(|e| e.0 == s)
            {
                return Ok(guess as usize);
            }
        }
        self.entries.binary_search_by_key(&s, |e| e.0)
    }

    pub(crate) fn get(&self, s: u64) -> Option<&T> {
        let i = self.find(s).ok()?;
        self.entries[i].1.as_ref()
    }

    pub(crate) fn get_mut(&mut self, s: u64) -> Option<&mut T> {
        let i = self.find(s).ok()?;
        self.entries[i].1.as_mut()
    }

    /// Puts `value` at slot `s`, returning the value it replaces.
    pub(crate) fn insert(&mut self, s: u64, value: T) -> Option<T> {
        // The common case: above every slot held.
        if self.entries.back().is_none_or(|e| e.0 < s) {
            self.entries.push_back((s, Some(value)));
            self.live += 1;
            return None;
        }
        // Only a replayed journal may insert below (a checkpoint lists
        // tokens in order, but nothing forces a damaged one to).
        match self.find(s) {
            Ok(i) => {
                let old = self.entries[i].1.replace(value);
                if old.is_none() {
                    self.live += 1;
                }
                old
            }
            Err(i) => {
                self.entries.insert(i, (s, Some(value)));
                self.live += 1;
                None
            }
        }
    }

    /// Takes the value at slot `s` out.
    pub(crate) fn remove(&mut self, s: u64) -> Option<T> {
        self.remove_if(s, |_| true)
    }

    /// Takes the value at slot `s` out if `keep_out` accepts it (one
    /// look-up where a check and a removal take two).
    pub(crate) fn remove_if(&mut self, s: u64, keep_out: impl FnOnce(&T) -> bool) -> Option<T> {
        let i = self.find(s).ok()?;
        let entry = &mut self.entries[i].1;
        if !keep_out(entry.as_ref()?) {
            return None;
        }
        let value = entry.take()?;
        self.live -= 1;
        self.sweep();
        Some(value)
    }

    /// Pops holes at both ends; rebuilds without holes when they
    /// outnumber the values held.
    fn sweep(&mut self) {
        while self.entries.front().is_some_and(|e| e.1.is_none()) {
            self.entries.pop_front();
        }
        while self.entries.back().is_some_and(|e| e.1.is_none()) {
            self.entries.pop_back();
        }
        let holes = self.entries.len() - self.live;
        if holes > self.live + 32 {
            self.entries.retain(|e| e.1.is_some());
        }
        // The capacity stays: the map fills and drains with every window
        // of messages, and a large deque given back is page-faulted in
        // again on the next. What it holds is bounded by the outstanding
        // window, and freed when the idle record closes.
    }

    /// The value with the lowest slot.
    pub(crate) fn first(&self) -> Option<(u64, &T)> {
        // Never a hole at the front.
        self.entries
            .front()
            .and_then(|(s, v)| v.as_ref().map(|v| (*s, v)))
    }

    /// The values with their slots, ascending.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &T)> + '_ {
        self.entries
            .iter()
            .filter_map(|(s, v)| v.as_ref().map(|v| (*s, v)))
    }

    /// The values, mutable, with their slots, ascending.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> + '_ {
        self.entries
            .iter_mut()
            .filter_map(|(s, v)| v.as_mut().map(|v| (*s, v)))
    }

    /// The values, ascending by slot.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

impl<T: PartialEq> PartialEq for SlotMap<T> {
    fn eq(&self, other: &Self) -> bool {
        self.live == other.live && self.iter().eq(other.iter())
    }
}

impl<T: Eq> Eq for SlotMap<T> {}

impl<T: Hash> Hash for SlotMap<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.live.hash(h);
        for (s, v) in self.iter() {
            s.hash(h);
            v.hash(h);
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SlotMap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::hash::DefaultHasher;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert at the next slot, `gap` above the highest ever used.
        Append { gap: u64, v: u8 },
        /// Insert anywhere (a replayed journal).
        Insert(u64, u8),
        Remove(u64),
        /// Remove if the value is below the bound.
        RemoveIf(u64, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (prop_oneof![4 => Just(0u64), 1 => 1u64..40], any::<u8>())
                .prop_map(|(gap, v)| Op::Append { gap, v }),
            1 => (0u64..200, any::<u8>()).prop_map(|(s, v)| Op::Insert(s, v)),
            4 => (0u64..200).prop_map(Op::Remove),
            2 => (0u64..200, any::<u8>()).prop_map(|(s, b)| Op::RemoveIf(s, b)),
        ]
    }

    fn apply(m: &mut SlotMap<u8>, model: &mut BTreeMap<u64, u8>, next: &mut u64, op: &Op) {
        match *op {
            Op::Append { gap, v } => {
                *next += gap;
                assert_eq!(m.insert(*next, v), model.insert(*next, v));
                *next += 1;
            }
            Op::Insert(s, v) => {
                assert_eq!(m.insert(s, v), model.insert(s, v));
                *next = (*next).max(s + 1);
            }
            Op::Remove(s) => assert_eq!(m.remove(s), model.remove(&s)),
            Op::RemoveIf(s, below) => {
                let hit = model.get(&s).is_some_and(|v| *v < below);
                let expected = if hit { model.remove(&s) } else { None };
                assert_eq!(m.remove_if(s, |v| *v < below), expected);
            }
        }
    }

    fn hash(m: &SlotMap<u8>) -> u64 {
        let mut h = DefaultHasher::new();
        m.hash(&mut h);
        h.finish()
    }

    proptest! {
        /// Behaves as a `BTreeMap<u64, _>`, with no hole at either end and
        /// no more holes than values (plus a constant).
        #[test]
        fn agrees_with_a_btree_map(ops in proptest::collection::vec(op(), 0..300)) {
            let (mut m, mut model, mut next) = (SlotMap::default(), BTreeMap::new(), 0);
            for op in &ops {
                apply(&mut m, &mut model, &mut next, op);
                prop_assert_eq!(m.len(), model.len());
                prop_assert_eq!(m.is_empty(), model.is_empty());
                prop_assert_eq!(m.first(), model.first_key_value().map(|(k, v)| (*k, v)));
                prop_assert_eq!(m.iter().collect::<Vec<_>>(), model.iter().map(|(k, v)| (*k, v)).collect::<Vec<_>>());
                prop_assert!(m.entries.front().is_none_or(|e| e.1.is_some()));
                prop_assert!(m.entries.back().is_none_or(|e| e.1.is_some()));
                prop_assert!(m.entries.len() <= 2 * m.live + 33);
                for s in 0..220 {
                    prop_assert_eq!(m.get(s), model.get(&s));
                }
            }
        }

        /// Equal contents compare and hash equal whatever the holes.
        #[test]
        fn equal_contents_compare_and_hash_equal(ops in proptest::collection::vec(op(), 0..200)) {
            let (mut m, mut model, mut next) = (SlotMap::default(), BTreeMap::new(), 0);
            for op in &ops {
                apply(&mut m, &mut model, &mut next, op);
            }
            // The same contents, built without a hole.
            let mut fresh = SlotMap::default();
            for (&s, &v) in &model {
                fresh.insert(s, v);
            }
            prop_assert_eq!(&m, &fresh);
            prop_assert_eq!(hash(&m), hash(&fresh));
        }
    }
}
