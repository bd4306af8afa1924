//! Benchmark messages and their end-to-end check.
//!
//! Every message (Exon payload, or the body of a TCP frame) starts with an
//! 8-byte big-endian identifier; the rest is filled with a byte derived
//! from it, so a receiver can tell a whole, correct message from a
//! corrupted one. Receivers record each identifier in a [`Tally`]: how
//! often it arrived and when first, which gives `lost` (accepted, never
//! delivered) and `duplicated` (delivered more than once).

use std::collections::HashMap;
use std::time::Duration;

/// Smallest message: the identifier.
pub const MIN_SIZE: usize = 8;

/// The fill byte of message `id`.
fn fill(id: u64) -> u8 {
    (id % 251) as u8
}

/// Message `id` of `size` bytes (at least [`MIN_SIZE`]).
pub fn encode(id: u64, size: usize) -> Vec<u8> {
    let mut v = vec![fill(id); size.max(MIN_SIZE)];
    v[..8].copy_from_slice(&id.to_be_bytes());
    v
}

/// The identifier of a well-formed message of `size` bytes, or `None`.
pub fn decode(m: &[u8], size: usize) -> Option<u64> {
    if m.len() != size.max(MIN_SIZE) {
        return None;
    }
    let id = u64::from_be_bytes(m[..8].try_into().ok()?);
    m[8..].iter().all(|&b| b == fill(id)).then_some(id)
}

/// Arrivals by message identifier.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// id → (times delivered, first delivery since the run's epoch).
    seen: HashMap<u64, (u32, Duration)>,
    /// Messages that did not decode.
    pub corrupt: u64,
}

impl Tally {
    /// Record a delivery of `id` at `at`; true if it is the first.
    pub fn record(&mut self, id: u64, at: Duration) -> bool {
        let e = self.seen.entry(id).or_insert((0, at));
        e.0 += 1;
        e.0 == 1
    }

    /// Distinct identifiers delivered.
    pub fn distinct(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Deliveries beyond the first of each identifier.
    pub fn duplicated(&self) -> u64 {
        self.seen.values().map(|&(n, _)| u64::from(n - 1)).sum()
    }

    /// Whether `id` was delivered.
    pub fn contains(&self, id: u64) -> bool {
        self.seen.contains_key(&id)
    }

    /// Distinct identifiers first delivered in `[from, to]`.
    pub fn delivered_between(&self, from: Duration, to: Duration) -> u64 {
        self.seen.values().filter(|&&(_, t)| t >= from && t <= to).count() as u64
    }

    /// When the latest first delivery happened.
    pub fn last_first_delivery(&self) -> Option<Duration> {
        self.seen.values().map(|&(_, t)| t).max()
    }

    /// Distinct identifiers first delivered in each `bin` of `[from, to]`
    /// (the last bin may be shorter; empty if the interval or `bin` is).
    pub fn per_bin(&self, from: Duration, to: Duration, bin: Duration) -> Vec<u64> {
        if to <= from || bin.is_zero() {
            return Vec::new();
        }
        let n = (to - from).as_nanos().div_ceil(bin.as_nanos()) as usize;
        let mut bins = vec![0u64; n];
        for &(_, t) in self.seen.values() {
            if t >= from && t <= to {
                let i = ((t - from).as_nanos() / bin.as_nanos()) as usize;
                bins[i.min(n - 1)] += 1;
            }
        }
        bins
    }
}

/// Parser of length-prefixed frames (`u32` big-endian length, then the
/// message) from a byte stream read in arbitrary pieces.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

/// Largest frame accepted (the largest `--size`).
pub const MAX_FRAME: usize = 16 << 20;

impl FrameReader {
    /// Append bytes read from the stream.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > (1 << 20) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame's message, if any; `Err` on a length over
    /// [`MAX_FRAME`] (the stream is then unusable).
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, usize> {
        let avail = &self.buf[self.start..];
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(avail[..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_FRAME {
            return Err(len);
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let at = self.start + 4;
        self.start = at + len;
        Ok(Some(&self.buf[at..at + len]))
    }
}

/// Appends the frame of `message` to `out`.
pub fn frame(out: &mut Vec<u8>, message: &[u8]) {
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_decode_and_corruption() {
        let m = encode(77, 1000);
        assert_eq!(decode(&m, 1000), Some(77));
        let mut bad = m.clone();
        bad[500] ^= 1;
        assert_eq!(decode(&bad, 1000), None);
        assert_eq!(decode(&m[..999], 1000), None);
    }

    #[test]
    fn tally_counts_duplicates_and_windows() {
        let mut t = Tally::default();
        let ms = Duration::from_millis;
        assert!(t.record(1, ms(5)));
        assert!(!t.record(1, ms(9)));
        assert!(t.record(2, ms(20)));
        assert_eq!((t.distinct(), t.duplicated()), (2, 1));
        assert_eq!(t.delivered_between(ms(0), ms(10)), 1);
        assert_eq!(t.last_first_delivery(), Some(ms(20)));
        assert_eq!(t.per_bin(ms(0), ms(25), ms(10)), vec![1, 0, 1]);
        assert_eq!(t.per_bin(ms(10), ms(20), ms(5)), vec![0, 1]);
        assert!(t.per_bin(ms(20), ms(20), ms(5)).is_empty());
    }

    proptest! {
        /// Frames come out whole and in order however the stream is cut.
        #[test]
        fn frames_survive_any_split(sizes in prop::collection::vec(8usize..3000, 1..20), cut in 1usize..5000) {
            let mut stream = Vec::new();
            for (i, s) in sizes.iter().enumerate() {
                frame(&mut stream, &encode(i as u64, *s));
            }
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            for piece in stream.chunks(cut) {
                r.extend(piece);
                while let Some(m) = r.next_frame().unwrap() {
                    got.push(decode(m, m.len()).unwrap());
                }
            }
            prop_assert_eq!(got, (0..sizes.len() as u64).collect::<Vec<_>>());
        }
    }
}
