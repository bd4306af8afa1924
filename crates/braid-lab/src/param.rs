//! Declared, typed template parameters and their values.
//!
//! A template declares each parameter it takes ([`ParamDecl`]): a name, a
//! [`ParamType`], a default and a [`Role`]: part of the *configuration* (the
//! system's knobs: controller, scheduler, chunk size) or of the
//! *environment* (the network's conditions: link, loss, trace). Keeping the
//! two apart is what makes "the best configuration per environment" a
//! query (MACI, seed 001 §4.2).
//!
//! Values are parsed from TOML values or from text (`64KB`, `30s`,
//! `rtt=20ms,rate=100mbit`) with errors that say the allowed form, and print
//! back in one canonical text form: the form stored in the database, put in
//! `{{name}}` of a command template and in `BRAID_PARAM_<NAME>`.
//!
//! ```
//! use braid_lab::param::{ParamDecl, ParamType, Role, Value};
//! let decl = ParamDecl::new("bytes", ParamType::Size, Role::Configuration, Value::Size(1 << 20));
//! assert_eq!(decl.ty.parse_text("64KiB").unwrap(), Value::Size(65536));
//! assert!(decl.ty.parse_text("lots").unwrap_err().contains("e.g. 4096, 64KiB"));
//! assert_eq!(Value::Size(65536).to_text(), "64KiB");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether a parameter belongs to the system under test or to the
/// conditions it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system's parameters (`[configuration]` in a study file).
    Configuration,
    /// The network's parameters (`[environment]` in a study file).
    Environment,
}

impl Role {
    /// `configuration` or `environment`: the study file's table name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Configuration => "configuration",
            Role::Environment => "environment",
        }
    }
}

/// The type of a parameter, which decides how its values parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ParamType {
    /// A whole number in `min..=max`.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A finite real number in `min..=max`.
    Float {
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
    },
    /// `true` or `false`.
    Bool,
    /// Any text.
    String,
    /// One of a fixed list of names.
    Enum {
        /// The allowed names.
        values: Vec<String>,
    },
    /// A byte size: `4096`, `64KiB`, `100MB`.
    Size,
    /// A duration: `250ms`, `30s`, `2min`.
    Duration,
    /// A link spec: `rtt=20ms,rate=100mbit,queue=64kb,loss=1%`.
    Link,
    /// A path to an existing file (a rate trace).
    Trace,
}

impl ParamType {
    /// Any `i64`.
    pub fn int() -> ParamType {
        ParamType::Int { min: i64::MIN, max: i64::MAX }
    }

    /// A whole number in `min..=max`.
    pub fn int_range(min: i64, max: i64) -> ParamType {
        ParamType::Int { min, max }
    }

    /// Any finite real.
    pub fn float() -> ParamType {
        ParamType::Float { min: f64::MIN, max: f64::MAX }
    }

    /// A finite real in `min..=max`.
    pub fn float_range(min: f64, max: f64) -> ParamType {
        ParamType::Float { min, max }
    }

    /// One of `values`.
    pub fn one_of(values: &[&str]) -> ParamType {
        ParamType::Enum { values: values.iter().map(|s| s.to_string()).collect() }
    }

    /// The allowed form, for error messages: "a whole number in 1..=64",
    /// "one of cubic, newreno", ...
    pub fn allowed_form(&self) -> String {
        match self {
            ParamType::Int { min, max } if *min == i64::MIN && *max == i64::MAX => "a whole number".into(),
            ParamType::Int { min, max } => format!("a whole number in {min}..={max}"),
            ParamType::Float { min, max } if *min == f64::MIN && *max == f64::MAX => "a number".into(),
            ParamType::Float { min, max } => format!("a number in {min}..={max}"),
            ParamType::Bool => "true or false".into(),
            ParamType::String => "a string".into(),
            ParamType::Enum { values } => format!("one of {}", values.join(", ")),
            ParamType::Size => "a size, e.g. 4096, 64KiB, 100MB, 1GiB".into(),
            ParamType::Duration => "a duration, e.g. 250ms, 30s, 2min".into(),
            ParamType::Link => "a link spec, e.g. rtt=20ms,rate=100mbit,queue=64kb,loss=1% (or empty)".into(),
            ParamType::Trace => "the path of an existing trace file".into(),
        }
    }

    /// The short type name: `int`, `float`, `bool`, `string`, `enum`,
    /// `size`, `duration`, `link`, `trace`.
    pub fn name(&self) -> &'static str {
        match self {
            ParamType::Int { .. } => "int",
            ParamType::Float { .. } => "float",
            ParamType::Bool => "bool",
            ParamType::String => "string",
            ParamType::Enum { .. } => "enum",
            ParamType::Size => "size",
            ParamType::Duration => "duration",
            ParamType::Link => "link",
            ParamType::Trace => "trace",
        }
    }

    /// Parse a value written as text (command line, `BRAID_PARAM_*`, the
    /// database). The error says what was wrong and the allowed form.
    pub fn parse_text(&self, text: &str) -> Result<Value, String> {
        let bad = |why: &str| format!("`{text}`: {why}; expected {}", self.allowed_form());
        let t = text.trim();
        match self {
            ParamType::Int { min, max } => {
                let v: i64 = t.parse().map_err(|_| bad("not a whole number"))?;
                if v < *min || v > *max {
                    return Err(bad("out of range"));
                }
                Ok(Value::Int(v))
            }
            ParamType::Float { .. } => {
                let v: f64 = t.parse().map_err(|_| bad("not a number"))?;
                self.check_float(v).map_err(|why| bad(why))
            }
            ParamType::Bool => match t {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(bad("not a boolean")),
            },
            ParamType::String => Ok(Value::String(text.to_string())),
            ParamType::Enum { values } => {
                if values.iter().any(|v| v == t) {
                    Ok(Value::Enum(t.to_string()))
                } else {
                    Err(bad("not an allowed name"))
                }
            }
            ParamType::Size => t.parse::<braid::size::ByteSize>().map(|b| Value::Size(b.0)).map_err(|e| bad(e.why)),
            ParamType::Duration => parse_duration(t).map(Value::Duration).ok_or_else(|| bad("not a duration")),
            // Empty: "no link" (a template's default meaning loopback, or
            // the scenario's own link); kept as is so it round-trips.
            ParamType::Link if t.is_empty() => Ok(Value::Link(String::new())),
            ParamType::Link => {
                let spec: braid_link::LinkSpec = t.parse().map_err(|e: braid_link::SpecError| bad(&e.to_string()))?;
                Ok(Value::Link(spec.to_string()))
            }
            ParamType::Trace => {
                let p = PathBuf::from(t);
                if p.is_file() {
                    Ok(Value::Trace(p))
                } else {
                    Err(bad("no such file"))
                }
            }
        }
    }

    /// Parse a TOML value: numbers and booleans as themselves, everything
    /// else from its string form (`"64KiB"`, `"30s"`). An integer is
    /// accepted where a float, size (bytes) or duration (seconds) is wanted.
    pub fn parse_toml(&self, value: &toml::Value) -> Result<Value, String> {
        let bad = |why: &str| format!("`{value}`: {why}; expected {}", self.allowed_form());
        match (self, value) {
            (_, toml::Value::String(s)) if !matches!(self, ParamType::Int { .. } | ParamType::Float { .. } | ParamType::Bool) => {
                self.parse_text(s)
            }
            (ParamType::Int { .. }, toml::Value::Integer(i)) => self.parse_text(&i.to_string()),
            (ParamType::Float { .. }, toml::Value::Integer(i)) => self.check_float(*i as f64).map_err(|w| bad(w)),
            (ParamType::Float { .. }, toml::Value::Float(f)) => self.check_float(*f).map_err(|w| bad(w)),
            (ParamType::Bool, toml::Value::Boolean(b)) => Ok(Value::Bool(*b)),
            (ParamType::Size, toml::Value::Integer(i)) if *i >= 0 => Ok(Value::Size(*i as u64)),
            (ParamType::Duration, toml::Value::Integer(i)) if *i >= 0 => Ok(Value::Duration(Duration::from_secs(*i as u64))),
            (ParamType::Duration, toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 && *f < 1e12 => {
                Ok(Value::Duration(Duration::from_secs_f64(*f)))
            }
            _ => Err(bad("wrong type")),
        }
    }

    fn check_float(&self, v: f64) -> Result<Value, &'static str> {
        let ParamType::Float { min, max } = self else { return Err("not a number") };
        if !v.is_finite() {
            return Err("not finite");
        }
        if v < *min || v > *max {
            return Err("out of range");
        }
        Ok(Value::Float(v))
    }
}

/// A typed parameter value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum Value {
    /// A whole number.
    Int(i64),
    /// A real number.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// Text.
    String(String),
    /// One of an enum's names.
    Enum(String),
    /// Bytes.
    Size(u64),
    /// A duration.
    Duration(Duration),
    /// A link spec, in its canonical text form.
    Link(String),
    /// A trace file's path.
    Trace(PathBuf),
}

impl Value {
    /// The canonical text form: what `{{name}}` and `BRAID_PARAM_<NAME>`
    /// become, what the database stores, and what parses back to `self`
    /// with the parameter's type.
    pub fn to_text(&self) -> String {
        match self {
            Value::Int(v) => v.to_string(),
            Value::Float(v) => format_float(*v),
            Value::Bool(v) => v.to_string(),
            Value::String(s) | Value::Enum(s) | Value::Link(s) => s.clone(),
            Value::Size(b) => format_size(*b),
            Value::Duration(d) => format_duration(*d),
            Value::Trace(p) => p.display().to_string(),
        }
    }

    /// The value as a number, where it has one: ints, floats, booleans
    /// (0/1), sizes (bytes) and durations (seconds). Analysis uses it to
    /// order x values and to draw numeric axes.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            Value::Bool(v) => Some(f64::from(u8::from(*v))),
            Value::Size(b) => Some(*b as f64),
            Value::Duration(d) => Some(d.as_secs_f64()),
            _ => None,
        }
    }

    /// The integer inside an `Int`, a `Size` (bytes) or a `Bool` (0/1).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Size(b) => i64::try_from(*b).ok(),
            Value::Bool(v) => Some(i64::from(*v)),
            _ => None,
        }
    }

    /// The text of a `String`, `Enum`, `Link` or `Trace`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Enum(s) | Value::Link(s) => Some(s),
            Value::Trace(p) => p.to_str(),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// A parameter a template declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamDecl {
    /// Lower-case name: `a-z`, `0-9`, `_`.
    pub name: String,
    /// How its values parse.
    pub ty: ParamType,
    /// Configuration or environment.
    pub role: Role,
    /// The value when a study does not list one.
    pub default: Value,
    /// One line for `braid lab templates` and the web form.
    pub doc: String,
    /// Declared after studies of the template were stored (see
    /// [`added_later`](Self::added_later)).
    #[serde(default)]
    pub added_later: bool,
}

impl ParamDecl {
    /// A parameter without documentation (add it with [`doc`](Self::doc)).
    pub fn new(name: &str, ty: ParamType, role: Role, default: Value) -> ParamDecl {
        ParamDecl { name: name.to_string(), ty, role, default, doc: String::new(), added_later: false }
    }

    /// A configuration parameter.
    pub fn config(name: &str, ty: ParamType, default: Value) -> ParamDecl {
        ParamDecl::new(name, ty, Role::Configuration, default)
    }

    /// An environment parameter.
    pub fn env(name: &str, ty: ParamType, default: Value) -> ParamDecl {
        ParamDecl::new(name, ty, Role::Environment, default)
    }

    /// With a one-line description.
    pub fn doc(mut self, doc: &str) -> ParamDecl {
        self.doc = doc.to_string();
        self
    }

    /// A parameter the template gained after studies of it were stored:
    /// at its default it is left out of experiment ids and seeds
    /// ([`Params::identity`]), so those studies keep their ids and resume
    /// where they stopped, and only experiments that set it are new. Its
    /// default must be what the template did before it existed.
    pub fn added_later(mut self) -> ParamDecl {
        self.added_later = true;
        self
    }

    /// The environment variable a command template reads it from:
    /// `BRAID_PARAM_<NAME>` in upper case.
    pub fn env_var(&self) -> String {
        format!("BRAID_PARAM_{}", self.name.to_ascii_uppercase())
    }
}

/// Is `name` a valid parameter name (`a-z`, `0-9`, `_`, starting with a
/// letter, at most 64 characters)?
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The values of one experiment's parameters, by name (every declared
/// parameter is present: defaults fill what the study does not list).
///
/// ```
/// use braid_lab::param::{Params, Value};
/// let mut p = Params::default();
/// p.insert("flows", Value::Int(2));
/// assert_eq!(p.int("flows").unwrap(), 2);
/// assert!(p.int("rate").is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params(pub BTreeMap<String, Value>);

/// A parameter a template asked for is missing or of another type: a bug
/// in the template or a study built by hand, reported, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parameter `{name}`: {why}")]
pub struct ParamError {
    /// The parameter.
    pub name: String,
    /// What is wrong.
    pub why: String,
}

impl Params {
    /// What identifies an experiment with these parameters (its id and its
    /// seed hash this): every value except those of parameters `decls`
    /// marks [`added_later`](ParamDecl::added_later) that are at their
    /// default.
    pub fn identity(&self, decls: &[ParamDecl]) -> Params {
        let at_added_default = |name: &str, value: &Value| {
            decls.iter().any(|d| d.added_later && d.name == name && &d.default == value)
        };
        Params(self.0.iter().filter(|(k, v)| !at_added_default(k, v)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Set `name`.
    pub fn insert(&mut self, name: &str, value: Value) {
        self.0.insert(name.to_string(), value);
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Result<&Value, ParamError> {
        self.0.get(name).ok_or_else(|| ParamError { name: name.into(), why: "missing".into() })
    }

    fn typed<T>(&self, name: &str, want: &str, f: impl FnOnce(&Value) -> Option<T>) -> Result<T, ParamError> {
        let v = self.get(name)?;
        f(v).ok_or_else(|| ParamError { name: name.into(), why: format!("expected {want}, got `{v}`") })
    }

    /// An `Int` (or a size, in bytes).
    pub fn int(&self, name: &str) -> Result<i64, ParamError> {
        self.typed(name, "a whole number", Value::as_i64)
    }

    /// A number of any numeric type.
    pub fn float(&self, name: &str) -> Result<f64, ParamError> {
        self.typed(name, "a number", Value::as_f64)
    }

    /// A `Bool`.
    pub fn bool(&self, name: &str) -> Result<bool, ParamError> {
        self.typed(name, "true or false", |v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        })
    }

    /// The text of a string, enum, link or trace.
    pub fn str(&self, name: &str) -> Result<&str, ParamError> {
        let v = self.get(name)?;
        v.as_str().ok_or_else(|| ParamError { name: name.into(), why: format!("expected text, got `{v}`") })
    }

    /// A `Size` in bytes.
    pub fn size(&self, name: &str) -> Result<u64, ParamError> {
        self.typed(name, "a size", |v| match v {
            Value::Size(b) => Some(*b),
            _ => None,
        })
    }

    /// A `Duration`.
    pub fn duration(&self, name: &str) -> Result<Duration, ParamError> {
        self.typed(name, "a duration", |v| match v {
            Value::Duration(d) => Some(*d),
            _ => None,
        })
    }

    /// A `Link`, parsed.
    pub fn link(&self, name: &str) -> Result<braid_link::LinkSpec, ParamError> {
        let text = self.str(name)?;
        text.parse().map_err(|e: braid_link::SpecError| ParamError { name: name.into(), why: e.to_string() })
    }

    /// Iterate in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// Shortest text that parses back to the same `f64`.
fn format_float(v: f64) -> String {
    let s = format!("{v}");
    if s.contains(['.', 'e', 'E']) || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Exact binary units when the size is a multiple of one, else bytes.
pub fn format_size(b: u64) -> String {
    for (name, m) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= m && b % m == 0 {
            return format!("{}{name}", b / m);
        }
    }
    b.to_string()
}

/// `1.5s`, `250ms`, `40us`, `7ns`, `0s`: the largest unit that keeps the
/// value exact to three decimals.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    for (unit, name) in [(1_000_000_000u128, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= unit && (ns * 1000) % unit == 0 {
            let whole = ns / unit;
            let frac = ns % unit * 1000 / unit;
            return if frac == 0 {
                format!("{whole}{name}")
            } else {
                format!("{whole}.{}{name}", format!("{frac:03}").trim_end_matches('0'))
            };
        }
    }
    format!("{ns}ns")
}

/// `250ms`, `30s`, `1.5s`, `2min`, `1h`, `40us`, `7ns`; a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let nanos_per: f64 = match unit.trim() {
        "" | "s" | "sec" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return None;
    }
    let v: f64 = number.parse().ok()?;
    let ns = (v * nanos_per).round();
    (ns.is_finite() && ns >= 0.0 && ns < 1.8e19).then(|| Duration::from_nanos(ns as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_type_parses_and_names_its_form() {
        let cases: Vec<(ParamType, &str, Value)> = vec![
            (ParamType::int_range(1, 8), "4", Value::Int(4)),
            (ParamType::float(), "0.5", Value::Float(0.5)),
            (ParamType::Bool, "true", Value::Bool(true)),
            (ParamType::String, "x y", Value::String("x y".into())),
            (ParamType::one_of(&["cubic", "bbr"]), "bbr", Value::Enum("bbr".into())),
            (ParamType::Size, "64KiB", Value::Size(65536)),
            (ParamType::Duration, "250ms", Value::Duration(Duration::from_millis(250))),
            (ParamType::Link, "rtt=20ms,rate=100mbit", Value::Link("rtt=20ms,rate=100mbit".into())),
        ];
        for (ty, text, want) in cases {
            assert_eq!(ty.parse_text(text).unwrap(), want, "{text}");
            assert_eq!(ty.parse_text(&want.to_text()).unwrap(), want, "round trip of {text}");
        }
        assert!(ParamType::int_range(1, 8).parse_text("9").unwrap_err().contains("1..=8"));
        assert!(ParamType::one_of(&["cubic", "bbr"]).parse_text("vegas").unwrap_err().contains("one of cubic, bbr"));
        assert!(ParamType::Link.parse_text("rtt=fast").unwrap_err().contains("link spec"));
        assert!(ParamType::Trace.parse_text("/no/such/trace").unwrap_err().contains("no such file"));
        assert!(ParamType::Duration.parse_text("soon").unwrap_err().contains("e.g. 250ms"));
    }

    #[test]
    fn toml_values_parse_by_type() {
        let t = |s: &str| -> toml::Value { toml::from_str::<toml::Table>(&format!("v = {s}")).unwrap()["v"].clone() };
        assert_eq!(ParamType::Size.parse_toml(&t("4096")).unwrap(), Value::Size(4096));
        assert_eq!(ParamType::Size.parse_toml(&t("\"1MiB\"")).unwrap(), Value::Size(1 << 20));
        assert_eq!(ParamType::float().parse_toml(&t("3")).unwrap(), Value::Float(3.0));
        assert_eq!(ParamType::Duration.parse_toml(&t("2")).unwrap(), Value::Duration(Duration::from_secs(2)));
        assert!(ParamType::int().parse_toml(&t("\"4\"")).unwrap_err().contains("wrong type"));
        assert!(ParamType::Bool.parse_toml(&t("1")).is_err());
    }

    proptest! {
        #[test]
        fn durations_round_trip(ns in 0u64..(1u64 << 50)) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }

        #[test]
        fn sizes_round_trip(b in 0u64..(1u64 << 50), shift in 0u32..30) {
            let b = (b >> shift) << shift;
            prop_assert_eq!(ParamType::Size.parse_text(&format_size(b)).unwrap(), Value::Size(b));
        }

        #[test]
        fn floats_round_trip(v in proptest::num::f64::NORMAL | proptest::num::f64::ZERO) {
            prop_assert_eq!(ParamType::float().parse_text(&Value::Float(v).to_text()).unwrap(), Value::Float(v));
        }

        #[test]
        fn text_never_panics(s in "\\PC{0,30}") {
            for ty in [ParamType::int(), ParamType::float(), ParamType::Size, ParamType::Duration, ParamType::Link, ParamType::Bool] {
                let _ = ty.parse_text(&s);
            }
        }
    }
}
