//! The receiver's end-to-end check of a message run, cheap enough to run at
//! millions of messages per second: one bit per message identifier.
//!
//! Messages are the `exon` template's ([`super::super::exon::message`]): an
//! 8-byte big-endian identifier, then a fill byte derived from it. The
//! sender hands out identifiers `0, 1, 2, …` in order, so a bit set indexed
//! by identifier tells first deliveries from duplicates, and the first
//! identifier not yet seen tells an in-order delivery from a reordered one
//! (checked only where the transport promises order). A `HashMap` per
//! message (the `exon` template's `Tally`) would cost the receiver more
//! than some transports spend per message, and the receiver's cost is part
//! of every rate measured here.

use serde::{Deserialize, Serialize};

use super::super::exon::message::MIN_SIZE;

/// The fill byte of message `id` (the `exon` template's).
fn fill(id: u64) -> u8 {
    (id % 251) as u8
}

/// The identifier of a well-formed message of `size` bytes, or `None`: the
/// `exon` template's `decode`, comparing the fill eight bytes at a time
/// without an early exit, so that it vectorizes. Byte by byte it took a
/// quarter of all CPU time of a kernel TCP run of 1 KiB messages (perf),
/// capping the rate the receiver could check.
pub fn decode(m: &[u8], size: usize) -> Option<u64> {
    if m.len() != size.max(MIN_SIZE) {
        return None;
    }
    let mut head = [0u8; 8];
    head.copy_from_slice(&m[..8]);
    let id = u64::from_be_bytes(head);
    let byte = fill(id);
    let word = u64::from_ne_bytes([byte; 8]);
    let mut words = m[8..].chunks_exact(8);
    let diff = words.by_ref().fold(0u64, |acc, c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        acc | (u64::from_ne_bytes(w) ^ word)
    });
    (diff == 0 && words.remainder().iter().all(|&b| b == byte)).then_some(id)
}

/// Appends message `id` of `size` bytes (at least [`MIN_SIZE`]) to `out`
/// without allocating per message.
pub fn put(out: &mut Vec<u8>, id: u64, size: usize) {
    out.extend_from_slice(&id.to_be_bytes());
    out.resize(out.len() + size.max(MIN_SIZE) - 8, fill(id));
}

/// Appends the length-prefixed frame (`u32` big-endian length) of message
/// `id` to `out`: the framing of the byte-stream transports.
pub fn put_frame(out: &mut Vec<u8>, id: u64, size: usize) {
    out.extend_from_slice(&(size.max(MIN_SIZE) as u32).to_be_bytes());
    put(out, id, size);
}

/// Message `id` as one buffer (for the message-oriented transports' APIs,
/// which take ownership of each message).
pub fn message(id: u64, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size.max(MIN_SIZE));
    put(&mut v, id, size);
    v
}

/// What a receiver saw, checked against what the sender sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Deliveries beyond the first of a message.
    pub duplicated: u64,
    /// Sent but never delivered.
    pub lost: u64,
    /// Delivered before an earlier message over a transport that promises
    /// order.
    pub reordered: u64,
    /// Deliveries that did not decode, or carried an identifier never sent.
    pub corrupt: u64,
}

impl Verdict {
    /// Whether every message arrived once, whole, and in order where the
    /// transport promises it.
    pub fn ok(&self) -> bool {
        self.duplicated == 0 && self.lost == 0 && self.reordered == 0 && self.corrupt == 0
    }
}

/// The receiver's record of identifiers.
#[derive(Debug)]
pub struct Checker {
    /// Whether the transport promises delivery in sending order.
    ordered: bool,
    /// Message size every delivery must have.
    size: usize,
    /// Identifiers at or above this were never sent (the run's cap).
    cap: u64,
    /// Bit `id` set once `id` was delivered (grown as identifiers arrive).
    seen: Vec<u64>,
    /// The lowest identifier not yet delivered, for the order check.
    next: u64,
    verdict: Verdict,
}

impl Checker {
    /// A checker of messages of `size` bytes, identifiers below `cap`.
    pub fn new(ordered: bool, size: usize, cap: u64) -> Checker {
        Checker { ordered, size, cap, seen: Vec::new(), next: 0, verdict: Verdict::default() }
    }

    /// Checks and records one delivered message; its identifier if this is
    /// its first delivery.
    pub fn message(&mut self, m: &[u8]) -> Option<u64> {
        match decode(m, self.size) {
            Some(id) if id < self.cap => self.record(id).then_some(id),
            _ => {
                self.verdict.corrupt += 1;
                None
            }
        }
    }

    /// Records a delivery of `id` (below the cap); true if it is the first.
    fn record(&mut self, id: u64) -> bool {
        let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
        if word >= self.seen.len() {
            // Amortized: doubling keeps growth off the per-message path.
            self.seen.resize((word + 1).max(self.seen.len() * 2), 0);
        }
        if self.seen[word] & bit != 0 {
            self.verdict.duplicated += 1;
            return false;
        }
        self.seen[word] |= bit;
        self.verdict.delivered += 1;
        if self.ordered && id != self.next {
            self.verdict.reordered += 1;
        }
        if id == self.next {
            self.advance();
        }
        true
    }

    /// Moves `next` past every delivered identifier.
    fn advance(&mut self) {
        while self.contains(self.next) {
            self.next += 1;
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.seen.get((id / 64) as usize).is_some_and(|w| w & (1u64 << (id % 64)) != 0)
    }

    /// Distinct messages delivered so far.
    pub fn delivered(&self) -> u64 {
        self.verdict.delivered
    }

    /// The verdict once the sender reports it sent identifiers `0..sent`:
    /// those not delivered are lost.
    pub fn verdict(&self, sent: u64) -> Verdict {
        let in_range = (0..sent.min(self.next)).count() as u64 + self.delivered_from(self.next, sent);
        Verdict { lost: sent - in_range.min(sent), ..self.verdict.clone() }
    }

    /// Delivered identifiers in `from..to`.
    fn delivered_from(&self, from: u64, to: u64) -> u64 {
        (from..to).filter(|&id| self.contains(id)).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn put_writes_what_decode_accepts() {
        let mut out = Vec::new();
        put(&mut out, 7, 64);
        put_frame(&mut out, 8, 3);
        assert_eq!(decode(&out[..64], 64), Some(7));
        assert_eq!(&out[64..68], &8u32.to_be_bytes());
        assert_eq!(decode(&out[68..], 8), Some(8));
        assert_eq!(message(9, 1024), super::super::super::exon::message::encode(9, 1024));
    }

    #[test]
    fn corrupt_and_unknown_messages_are_counted() {
        let mut c = Checker::new(true, 64, 10);
        let mut bad = message(1, 64);
        bad[40] ^= 1;
        assert_eq!(c.message(&bad), None);
        assert_eq!(c.message(&message(10, 64)), None, "never sent: at the cap");
        assert_eq!(c.message(&message(1, 32)), None, "wrong size");
        assert_eq!(c.verdict(0).corrupt, 3);
    }

    proptest! {
        /// The fast decoder accepts and refuses exactly what the `exon`
        /// template's does, whatever byte is flipped or cut.
        #[test]
        fn decode_agrees_with_the_exon_template(id: u64, size in 8usize..2100, flip in 0usize..2100, cut in 0usize..3) {
            let slow = super::super::super::exon::message::decode;
            let mut m = message(id, size);
            prop_assert_eq!(decode(&m, size), Some(id));
            let at = flip % m.len();
            m[at] ^= 0x40;
            prop_assert_eq!(decode(&m, size), slow(&m, size));
            m[at] ^= 0x40;
            m.truncate(m.len() - cut);
            prop_assert_eq!(decode(&m, size), slow(&m, size));
        }

        /// Whatever the delivery order and repetition, the verdict counts
        /// exactly the duplicates, the losses and (for an ordered
        /// transport) the deliveries that overtook an earlier message.
        #[test]
        fn verdict_matches_a_plain_model(order in prop::collection::vec(0u64..300, 0..600), sent in 0u64..300, ordered: bool) {
            let order: Vec<u64> = order.into_iter().filter(|&id| id < sent).collect();
            let mut c = Checker::new(ordered, 16, sent);
            let mut seen = std::collections::BTreeSet::new();
            let (mut dup, mut reordered) = (0, 0);
            for &id in &order {
                let first = seen.insert(id);
                if !first {
                    dup += 1;
                } else if ordered && (0..id).any(|e| !seen.contains(&e)) {
                    reordered += 1;
                }
                prop_assert_eq!(c.message(&message(id, 16)), first.then_some(id));
            }
            let v = c.verdict(sent);
            prop_assert_eq!(v.delivered, seen.len() as u64);
            prop_assert_eq!(v.duplicated, dup);
            prop_assert_eq!(v.lost, sent - seen.len() as u64);
            prop_assert_eq!(v.reordered, reordered);
            prop_assert_eq!(v.ok(), dup == 0 && reordered == 0 && seen.len() as u64 == sent);
        }
    }
}
