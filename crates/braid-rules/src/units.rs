//! Physical dimensions and the unit suffixes of rule constants (`80ms`, `1%`,
//! `10mbit`, `64kb`, `2/s`).
//!
//! Model: every value the engine handles is a plain `f64` in the *base unit*
//! of its dimension (seconds, a fraction for ratios, bit/s, bytes, events per
//! second). A constant keeps the unit it was written in, so the
//! pretty-printer gives back what the author wrote; the type checker and the
//! normal form convert it to the base unit. Conversions divide by an integer
//! (`80ms` = 80 / 1000 s) or multiply by one, so a decimal written in any unit
//! lands on the nearest `f64` of its base value.

use std::fmt;

/// What a number measures. Comparisons and sums need equal dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    /// A plain number (a count, a hop number, a priority).
    Count,
    /// A duration, base unit the second.
    Time,
    /// A ratio such as a loss rate, base unit the fraction (1% = 0.01).
    Ratio,
    /// A data rate, base unit bit/s.
    Bitrate,
    /// An amount of data, base unit the byte.
    Bytes,
    /// Events per unit of time, base unit 1/s.
    Frequency,
}

impl Dimension {
    /// Every dimension, in declaration order.
    pub const ALL: [Dimension; 6] = [
        Dimension::Count,
        Dimension::Time,
        Dimension::Ratio,
        Dimension::Bitrate,
        Dimension::Bytes,
        Dimension::Frequency,
    ];

    /// The unit a generated or normalised constant of this dimension is
    /// written in: the one people read most easily.
    pub fn display_unit(self) -> Unit {
        let spelling = match self {
            Dimension::Count => "",
            Dimension::Time => "ms",
            Dimension::Ratio => "%",
            Dimension::Bitrate => "mbit",
            Dimension::Bytes => "kb",
            Dimension::Frequency => "/s",
        };
        Unit::parse(spelling).unwrap_or(Unit(0))
    }

    /// The unit the normal form writes constants in: the base unit itself
    /// where one is spelled (s, bps, b, /s), so normalising twice gives the
    /// same text; ratios use `%` (a ratio's base, the fraction, has no
    /// suffix).
    pub fn base_unit(self) -> Unit {
        let spelling = match self {
            Dimension::Count => "",
            Dimension::Time => "s",
            Dimension::Ratio => "%",
            Dimension::Bitrate => "bps",
            Dimension::Bytes => "b",
            Dimension::Frequency => "/s",
        };
        Unit::parse(spelling).unwrap_or(Unit(0))
    }

    /// The dimension of `a * b`, if the rule language gives it one.
    ///
    /// Scaling by a plain number keeps a dimension, and a frequency times a
    /// duration is a count. Other products (time x bitrate, ...) have no unit
    /// in the language and are type errors.
    pub fn times(a: Dimension, b: Dimension) -> Option<Dimension> {
        use Dimension::*;
        match (a, b) {
            (Count, x) | (x, Count) => Some(x),
            (Frequency, Time) | (Time, Frequency) => Some(Count),
            _ => None,
        }
    }

    /// The dimension of `a / b`, if the rule language gives it one: equal
    /// dimensions give a plain number, a count over a duration a frequency,
    /// a count over a frequency a duration.
    pub fn over(a: Dimension, b: Dimension) -> Option<Dimension> {
        use Dimension::*;
        match (a, b) {
            (x, Count) => Some(x),
            (x, y) if x == y => Some(Count),
            (Count, Time) => Some(Frequency),
            (Count, Frequency) => Some(Time),
            _ => None,
        }
    }

    /// Examples of constants of this dimension, for error messages.
    pub fn examples(self) -> &'static str {
        match self {
            Dimension::Count => "a plain number such as 5 or 2.5",
            Dimension::Time => "a duration such as 80ms, 5s or 2min",
            Dimension::Ratio => "a ratio such as 1% or 0.5%",
            Dimension::Bitrate => "a rate such as 10mbit, 500kbit or 1gbit",
            Dimension::Bytes => "a size such as 64kb, 1mib or 1500b",
            Dimension::Frequency => "a frequency such as 2/s or 10hz",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::Count => "plain number",
            Dimension::Time => "duration",
            Dimension::Ratio => "ratio",
            Dimension::Bitrate => "bitrate",
            Dimension::Bytes => "size",
            Dimension::Frequency => "frequency",
        })
    }
}

/// One unit spelling: (suffix, dimension, multiply, divide) with base value
/// = written value * multiply / divide.
const UNITS: &[(&str, Dimension, f64, f64)] = &[
    ("", Dimension::Count, 1.0, 1.0),
    ("ns", Dimension::Time, 1.0, 1e9),
    ("us", Dimension::Time, 1.0, 1e6),
    ("ms", Dimension::Time, 1.0, 1e3),
    ("s", Dimension::Time, 1.0, 1.0),
    ("min", Dimension::Time, 60.0, 1.0),
    ("h", Dimension::Time, 3600.0, 1.0),
    ("%", Dimension::Ratio, 1.0, 100.0),
    ("bps", Dimension::Bitrate, 1.0, 1.0),
    ("kbit", Dimension::Bitrate, 1e3, 1.0),
    ("mbit", Dimension::Bitrate, 1e6, 1.0),
    ("gbit", Dimension::Bitrate, 1e9, 1.0),
    ("kbps", Dimension::Bitrate, 1e3, 1.0),
    ("mbps", Dimension::Bitrate, 1e6, 1.0),
    ("gbps", Dimension::Bitrate, 1e9, 1.0),
    ("b", Dimension::Bytes, 1.0, 1.0),
    ("kb", Dimension::Bytes, 1e3, 1.0),
    ("mb", Dimension::Bytes, 1e6, 1.0),
    ("gb", Dimension::Bytes, 1e9, 1.0),
    ("kib", Dimension::Bytes, 1024.0, 1.0),
    ("mib", Dimension::Bytes, 1_048_576.0, 1.0),
    ("gib", Dimension::Bytes, 1_073_741_824.0, 1.0),
    ("/s", Dimension::Frequency, 1.0, 1.0),
    ("hz", Dimension::Frequency, 1.0, 1.0),
];

/// A unit suffix, one of a fixed table (`ms`, `%`, `mbit`, `kb`, `/s`, ...;
/// the empty suffix is a plain number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Unit(u8);

impl Unit {
    /// The plain-number unit (no suffix).
    pub const NONE: Unit = Unit(0);

    /// Looks a suffix up, case-insensitively.
    pub fn parse(suffix: &str) -> Option<Unit> {
        let lower = suffix.to_ascii_lowercase();
        UNITS
            .iter()
            .position(|u| u.0 == lower)
            .and_then(|i| u8::try_from(i).ok())
            .map(Unit)
    }

    fn row(self) -> &'static (&'static str, Dimension, f64, f64) {
        UNITS.get(usize::from(self.0)).unwrap_or(&UNITS[0])
    }

    /// How the unit is written.
    pub fn suffix(self) -> &'static str {
        self.row().0
    }

    /// What the unit measures.
    pub fn dimension(self) -> Dimension {
        self.row().1
    }

    /// `value` written in this unit, in the base unit of its dimension.
    pub fn to_base(self, value: f64) -> f64 {
        let (_, _, mul, div) = *self.row();
        value * mul / div
    }

    /// A base-unit value written in this unit (the inverse of [`Unit::to_base`]).
    pub fn from_base(self, base: f64) -> f64 {
        let (_, _, mul, div) = *self.row();
        base * div / mul
    }

    /// Every known suffix, for error messages.
    pub fn all_suffixes() -> String {
        UNITS
            .iter()
            .filter(|u| !u.0.is_empty())
            .map(|u| u.0)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_land_on_the_decimal() {
        let ms = Unit::parse("ms").unwrap();
        assert_eq!(ms.to_base(80.0), 0.08);
        assert_eq!(Unit::parse("%").unwrap().to_base(1.0), 0.01);
        assert_eq!(Unit::parse("MBit").unwrap().to_base(10.0), 10e6);
        assert_eq!(Unit::parse("kib").unwrap().to_base(64.0), 65536.0);
        assert_eq!(Unit::parse("/s").unwrap().dimension(), Dimension::Frequency);
        assert!(Unit::parse("furlong").is_none());
    }

    #[test]
    fn dimension_algebra() {
        use Dimension::*;
        assert_eq!(Dimension::times(Frequency, Time), Some(Count));
        assert_eq!(Dimension::over(Time, Time), Some(Count));
        assert_eq!(Dimension::times(Time, Bitrate), None);
        assert_eq!(Dimension::over(Count, Time), Some(Frequency));
    }
}
