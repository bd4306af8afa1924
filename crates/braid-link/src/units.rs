//! Exact decimal quantities of the spec syntax: durations, rates, byte
//! sizes, probabilities and ratios.
//!
//! Every quantity is held as an integer of a fixed small unit (nanoseconds,
//! bit/s, bytes, billionths), parsed from decimal text without going through
//! floating point, and printed back exactly. That is what makes
//! `Display` → `FromStr` a lossless round trip and lets specs be compared
//! with `==`.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// Billionths in one: the resolution of [`Probability`] and [`Ratio`].
const BILLION: u64 = 1_000_000_000;

/// Parse a non-negative decimal number (`12`, `0.5`, `.25`) and return
/// `round(value × scale)`, or `None` if the text is not such a number or the
/// result does not fit in a `u64`.
pub(crate) fn parse_decimal_scaled(text: &str, scale: u64) -> Option<u64> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    // More than 19 fractional digits cannot change a result rounded to an
    // integer of any unit used here, and would overflow the arithmetic.
    let frac = &frac[..frac.len().min(19)];
    let int_value: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let denom = 10u128.pow(frac.len() as u32);
    let scale = u128::from(scale);
    let whole = int_value.checked_mul(scale)?;
    let part = (frac_value * scale + denom / 2) / denom;
    u64::try_from(whole.checked_add(part)?).ok()
}

/// Split `text` into its leading number and the unit that follows,
/// lower-cased.
fn split_unit(text: &str) -> (&str, String) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    (&text[..end], text[end..].trim().to_ascii_lowercase())
}

/// `value / unit` as an exact decimal without trailing zeros (`1.5`, `20`).
fn format_exact(value: u64, unit: u64) -> String {
    let int = value / unit;
    let mut rem = value % unit;
    if rem == 0 {
        return int.to_string();
    }
    let mut digits = String::new();
    let mut place = unit;
    while rem > 0 {
        place /= 10;
        let d = rem / place;
        digits.push(char::from(b'0' + d as u8));
        rem -= d * place;
    }
    format!("{int}.{digits}")
}

/// Parse a duration such as `20ms`, `0.5ms`, `150us`, `1s` or `300ns`.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = split_unit(text);
    let scale = match unit.as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    parse_decimal_scaled(number, scale).map(Duration::from_nanos)
}

/// Print a duration in the largest unit not above it (`1.5ms`, `20ms`, `0ms`).
pub(crate) fn format_duration(d: Duration) -> String {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (unit, name) = match ns {
        0 => (1_000_000, "ms"),
        n if n >= 1_000_000_000 => (1_000_000_000, "s"),
        n if n >= 1_000_000 => (1_000_000, "ms"),
        n if n >= 1_000 => (1_000, "us"),
        _ => (1, "ns"),
    };
    format!("{}{name}", format_exact(ns, unit))
}

/// A bottleneck rate in bits per second (never zero: an absent rate means
/// unlimited).
///
/// ```
/// use braid_link::Rate;
/// let r: Rate = "1.5gbit".parse().unwrap();
/// assert_eq!(r.bits_per_sec(), 1_500_000_000);
/// assert_eq!(r.to_string(), "1.5gbit");
/// assert_eq!("100mbps".parse::<Rate>().unwrap(), Rate::from_mbit(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(NonZeroU64);

impl Rate {
    /// The allowed form, quoted in error messages.
    pub const EXPECTED: &'static str = "a rate such as 100mbit, 1.5gbit or 800kbit";

    /// A rate of `bps` bits per second; `None` for zero.
    pub const fn from_bits_per_sec(bps: u64) -> Option<Rate> {
        match NonZeroU64::new(bps) {
            Some(n) => Some(Rate(n)),
            None => None,
        }
    }

    /// A rate of `mbit` × 10⁶ bit/s (saturating; zero gives 1 bit/s).
    pub const fn from_mbit(mbit: u64) -> Rate {
        let bps = mbit.saturating_mul(1_000_000);
        Rate(match NonZeroU64::new(bps) {
            Some(n) => n,
            None => NonZeroU64::MIN,
        })
    }

    /// Bits per second.
    pub const fn bits_per_sec(self) -> u64 {
        self.0.get()
    }

    /// Bytes per second, as a float (for reports).
    pub fn bytes_per_sec_f64(self) -> f64 {
        self.0.get() as f64 / 8.0
    }

    /// Time to serialize `bytes` bytes at this rate, rounded up to the next
    /// nanosecond so that the rate is never exceeded.
    pub fn transmit_time(self, bytes: u64) -> Duration {
        let bits = u128::from(bytes) * 8 * u128::from(BILLION);
        let ns = bits.div_ceil(u128::from(self.0.get()));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Bytes that cross the link in `d` at this rate (rounded down).
    pub fn bytes_in(self, d: Duration) -> u64 {
        let bytes = d.as_nanos() * u128::from(self.0.get()) / (8 * u128::from(BILLION));
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

impl std::str::FromStr for Rate {
    type Err = ();
    fn from_str(text: &str) -> Result<Rate, ()> {
        let (number, unit) = split_unit(text);
        let scale = match unit.as_str() {
            "bit" | "bps" => 1,
            "kbit" | "kbps" => 1_000,
            "mbit" | "mbps" => 1_000_000,
            "gbit" | "gbps" => 1_000_000_000,
            _ => return Err(()),
        };
        parse_decimal_scaled(number, scale)
            .and_then(Rate::from_bits_per_sec)
            .ok_or(())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bps = self.0.get();
        let (unit, name) = match bps {
            n if n >= 1_000_000_000 => (1_000_000_000, "gbit"),
            n if n >= 1_000_000 => (1_000_000, "mbit"),
            n if n >= 1_000 => (1_000, "kbit"),
            _ => (1, "bit"),
        };
        write!(f, "{}{name}", format_exact(bps, unit))
    }
}

/// Parse a byte size: `1500`, `1500b`, `64kb` (×1000), `64kib` (×1024),
/// `1mb`, `1mib`, `1gb`, `1gib`.
pub(crate) fn parse_bytes(text: &str) -> Option<u64> {
    let (number, unit) = split_unit(text);
    let scale = match unit.as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return None,
    };
    parse_decimal_scaled(number, scale)
}

/// Print a byte size in the largest unit that divides it exactly, binary
/// units first (`64kib`, `64kb`, `1500b`).
pub(crate) fn format_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 30, "gib"),
        (1_000_000_000, "gb"),
        (1 << 20, "mib"),
        (1_000_000, "mb"),
        (1 << 10, "kib"),
        (1_000, "kb"),
    ];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.checked_rem(unit) == Some(0) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}b")
}

/// A probability with a resolution of 10⁻⁹, exact in text form.
///
/// Parsed from a percentage (`1%`, `0.5%`) or a fraction (`0.01`); printed
/// as a percentage.
///
/// ```
/// use braid_link::Probability;
/// let p: Probability = "0.5%".parse().unwrap();
/// assert_eq!(p, "0.005".parse().unwrap());
/// assert_eq!(p.to_string(), "0.5%");
/// assert!("101%".parse::<Probability>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Probability(u32);

impl Probability {
    /// Never.
    pub const ZERO: Probability = Probability(0);
    /// Always.
    pub const ONE: Probability = Probability(BILLION as u32);
    /// The allowed form, quoted in error messages.
    pub const EXPECTED: &'static str = "a probability such as 1%, 0.5% or 0.01, from 0% to 100%";

    /// `n` billionths; `None` above one billion.
    pub const fn from_billionths(n: u32) -> Option<Probability> {
        if n as u64 <= BILLION {
            Some(Probability(n))
        } else {
            None
        }
    }

    /// The probability in billionths.
    pub const fn billionths(self) -> u32 {
        self.0
    }

    /// The probability as a float in `[0, 1]`.
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / BILLION as f64
    }

    /// True for the zero probability.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Draw one Bernoulli trial: true with this probability.
    pub(crate) fn sample(self, rng: &mut braid_core::Rng) -> bool {
        use braid_core::RngExt;
        match self.0 {
            0 => false,
            n if u64::from(n) >= BILLION => true,
            n => rng.random_range(0..BILLION as u32) < n,
        }
    }
}

impl std::str::FromStr for Probability {
    type Err = ();
    fn from_str(text: &str) -> Result<Probability, ()> {
        let billionths = match text.strip_suffix('%') {
            Some(percent) => parse_decimal_scaled(percent.trim(), BILLION / 100),
            None => parse_decimal_scaled(text, BILLION),
        };
        billionths
            .and_then(|n| u32::try_from(n).ok())
            .and_then(Probability::from_billionths)
            .ok_or(())
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", format_exact(u64::from(self.0), BILLION / 100))
    }
}

/// A non-negative ratio with a resolution of 10⁻⁹, exact in text form (used
/// for queue sizes relative to the bandwidth-delay product, `0.5bdp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ratio(u64);

impl Ratio {
    /// One.
    pub const ONE: Ratio = Ratio(BILLION);

    /// `n` billionths.
    pub const fn from_billionths(n: u64) -> Ratio {
        Ratio(n)
    }

    /// The ratio in billionths.
    pub const fn billionths(self) -> u64 {
        self.0
    }

    /// `round(value × self)`, saturating.
    pub fn apply(self, value: u64) -> u64 {
        let scaled = (u128::from(value) * u128::from(self.0) + u128::from(BILLION / 2))
            / u128::from(BILLION);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    pub(crate) fn parse(text: &str) -> Option<Ratio> {
        parse_decimal_scaled(text, BILLION).map(Ratio)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_exact(self.0, BILLION))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_exactly() {
        assert_eq!(parse_decimal_scaled("0.5", 1_000_000), Some(500_000));
        assert_eq!(parse_decimal_scaled(".25", 100), Some(25));
        assert_eq!(parse_decimal_scaled("12", 1000), Some(12_000));
        assert_eq!(
            parse_decimal_scaled("1.0000000004", 1_000_000_000),
            Some(1_000_000_000)
        );
        assert_eq!(
            parse_decimal_scaled("1.0000000005", 1_000_000_000),
            Some(1_000_000_001)
        );
        for bad in [
            "",
            ".",
            "-1",
            "1e3",
            "1.2.3",
            " 1",
            "+1",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_decimal_scaled(bad, 1), None, "{bad:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5ms"), Some(Duration::from_micros(500)));
        assert_eq!(parse_duration("20MS"), Some(Duration::from_millis(20)));
        assert_eq!(parse_duration("3s"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(parse_duration("150us"), Some(Duration::from_micros(150)));
        assert_eq!(parse_duration("20"), None);
        assert_eq!(parse_duration("20min"), None);
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(
            format_duration(Duration::from_nanos(1_000_001)),
            "1.000001ms"
        );
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        assert_eq!(format_duration(Duration::from_nanos(999)), "999ns");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
    }

    #[test]
    fn rates() {
        assert_eq!("800kbit".parse::<Rate>().unwrap().bits_per_sec(), 800_000);
        assert_eq!("12bit".parse::<Rate>().unwrap().to_string(), "12bit");
        assert_eq!("1.25mbps".parse::<Rate>().unwrap().to_string(), "1.25mbit");
        assert!("0mbit".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
        assert!("100".parse::<Rate>().is_err());
        let r = Rate::from_mbit(100);
        assert_eq!(r.transmit_time(1500), Duration::from_micros(120));
        assert_eq!(r.bytes_in(Duration::from_micros(120)), 1500);
        // Rounded up: 1 byte at 3 bit/s takes 8/3 s.
        assert_eq!(
            Rate::from_bits_per_sec(3).unwrap().transmit_time(1),
            Duration::from_nanos(2_666_666_667)
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64kb"), Some(64_000));
        assert_eq!(parse_bytes("64KiB"), Some(65_536));
        assert_eq!(parse_bytes("1.5mb"), Some(1_500_000));
        assert_eq!(parse_bytes("1500"), Some(1500));
        assert_eq!(parse_bytes("10pkt"), None);
        assert_eq!(format_bytes(65_536), "64kib");
        assert_eq!(format_bytes(1_500_000), "1500kb");
        assert_eq!(format_bytes(1_234), "1234b");
        assert_eq!(format_bytes(0), "0b");
    }

    #[test]
    fn probabilities() {
        let p: Probability = "1%".parse().unwrap();
        assert_eq!(p.billionths(), 10_000_000);
        assert_eq!(p, "0.01".parse().unwrap());
        assert_eq!("100%".parse::<Probability>().unwrap(), Probability::ONE);
        assert_eq!("1".parse::<Probability>().unwrap(), Probability::ONE);
        assert!("100.1%".parse::<Probability>().is_err());
        assert!("1.5".parse::<Probability>().is_err());
        assert!("-1%".parse::<Probability>().is_err());
        assert_eq!(
            Probability::from_billionths(1).unwrap().to_string(),
            "0.0000001%"
        );
        assert_eq!(Probability::ZERO.to_string(), "0%");
    }

    #[test]
    fn ratios() {
        let r = Ratio::parse("0.5").unwrap();
        assert_eq!(r.apply(1000), 500);
        assert_eq!(r.to_string(), "0.5");
        assert_eq!(Ratio::ONE.to_string(), "1");
        assert_eq!(Ratio::parse("x"), None);
    }
}
