//! Byte sizes as people write them on a command line: `4096`, `100MB`,
//! `1GiB`, `1.5 MiB`.
//!
//! Decimal units (kB, MB, GB, TB) are powers of 1000 and binary units (KiB,
//! MiB, GiB, TiB) powers of 1024, as IEC 80000-13 defines them; `K`, `M`,
//! `G`, `T` alone are read as the decimal (SI) units.

// `u64::is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(clippy::manual_is_multiple_of)]

use std::fmt;
use std::str::FromStr;

/// A number of bytes that parses from and prints as a human-readable size.
///
/// ```
/// use braid::size::ByteSize;
/// assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
/// assert_eq!("100MB".parse::<ByteSize>().unwrap().0, 100_000_000);
/// assert_eq!("1GiB".parse::<ByteSize>().unwrap().0, 1 << 30);
/// assert_eq!("1.5 KiB".parse::<ByteSize>().unwrap().0, 1536);
/// assert_eq!(ByteSize(1 << 30).to_string(), "1 GiB");
/// assert!("ten".parse::<ByteSize>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

/// A size that did not parse; the message shows the allowed form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size `{input}`: {why}; expected a whole number of bytes with an optional unit, \
     e.g. 4096, 64KiB, 100MB, 1GiB (units: B, kB, KiB, MB, MiB, GB, GiB, TB, TiB)"
)]
pub struct SizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

const UNITS: [(&str, u64); 13] = [
    ("", 1),
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("kib", 1 << 10),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("mib", 1 << 20),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("gib", 1 << 30),
    ("tb", 1_000_000_000_000),
    ("tib", 1 << 40),
];

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| SizeError { input: s.to_string(), why };
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let unit = unit.trim().to_ascii_lowercase();
        let unit = if unit == "t" { "tb".to_string() } else { unit };
        if number.is_empty() {
            return Err(err("no number"));
        }
        let multiplier = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, m)| m)
            .ok_or_else(|| err("unknown unit"))?;
        let (whole, frac) = match number.split_once('.') {
            Some((w, f)) => (w, f),
            None => (number, ""),
        };
        if frac.contains('.') || (whole.is_empty() && frac.is_empty()) {
            return Err(err("malformed number"));
        }
        let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| err("number too large"))? };
        let mut bytes = whole.checked_mul(multiplier).ok_or_else(|| err("number too large"))?;
        if !frac.is_empty() {
            // Exact decimal arithmetic: fraction digits beyond what the unit
            // can resolve would be sub-byte, which is refused rather than
            // silently rounded.
            if frac.len() > 19 {
                return Err(err("too many decimals"));
            }
            let digits: u128 = frac.parse().map_err(|_| err("malformed number"))?;
            let scale = 10u128.pow(frac.len() as u32);
            let scaled = digits * u128::from(multiplier);
            if scaled % scale != 0 {
                return Err(err("not a whole number of bytes"));
            }
            let extra = u64::try_from(scaled / scale).map_err(|_| err("number too large"))?;
            bytes = bytes.checked_add(extra).ok_or_else(|| err("number too large"))?;
        }
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    /// Exact binary units when the size is a whole multiple, otherwise
    /// bytes with two decimals of the largest binary unit below it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, m) in units {
            if self.0 >= m {
                return if self.0 % m == 0 {
                    write!(f, "{} {name}", self.0 / m)
                } else {
                    write!(f, "{:.2} {name}", self.0 as f64 / m as f64)
                };
            }
        }
        write!(f, "{} B", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("0"), Ok(0));
        assert_eq!(p("4096"), Ok(4096));
        assert_eq!(p("4096B"), Ok(4096));
        assert_eq!(p("1k"), Ok(1000));
        assert_eq!(p("64KiB"), Ok(65536));
        assert_eq!(p("100MB"), Ok(100_000_000));
        assert_eq!(p("100 mib"), Ok(100 << 20));
        assert_eq!(p("1GiB"), Ok(1 << 30));
        assert_eq!(p("2T"), Ok(2_000_000_000_000));
        assert_eq!(p("1TiB"), Ok(1 << 40));
        assert_eq!(p("0.5KiB"), Ok(512));
        assert_eq!(p(".5KiB"), Ok(512));
    }

    #[test]
    fn rejects_with_a_reason() {
        for bad in ["", "GiB", "ten", "1.2.3", "1XB", "0.3B", "99999999999999999999", "16777216TiB", "-1"] {
            let e = bad.parse::<ByteSize>().unwrap_err();
            assert!(e.to_string().contains("expected a whole number of bytes"), "{e}");
        }
    }

    proptest! {
        #[test]
        fn integer_and_binary_units_round_trip(n in 0u64..(1 << 40), unit in 0usize..4) {
            let (name, m) = [("B", 1u64), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)][unit];
            let n = n / m; // keep n * m in range
            prop_assert_eq!(format!("{n}{name}").parse::<ByteSize>().unwrap().0, n * m);
        }

        #[test]
        fn display_parses_back_when_exact(n in 0u64..(1 << 50), shift in 0u32..40) {
            let v = ByteSize((n >> shift) << shift);
            let shown = v.to_string();
            if !shown.contains('.') {
                prop_assert_eq!(shown.replace(' ', "").parse::<ByteSize>().unwrap(), v);
            }
        }

        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = s.parse::<ByteSize>();
        }
    }
}
