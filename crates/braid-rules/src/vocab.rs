//! The vocabulary an embedder gives the rules: which monitoring values
//! (metrics), which events and which actuators (targets) exist.
//!
//! This is Fossa's input space and transition description (seed 001 §6.4,
//! Figure 6.1: "the events and monitoring values that specify the input
//! metric space", "the transition description ... of the available
//! adaptations"). The crate knows nothing of Braid: a Node declares
//! `transport` with the values it can carry, `priority` with its range, and
//! so on; a rule naming anything else is a type error ("action on a missing
//! capability").

use std::time::Duration;

use crate::ast::ActionKind;
use crate::units::Dimension;

/// Index of a metric in its vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricId(pub usize);

/// Index of an event in its vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub usize);

/// Index of a target in its vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId(pub usize);

/// A monitoring value sampled over time (an RTT, a loss rate).
#[derive(Clone, Debug, PartialEq)]
pub struct MetricDecl {
    /// Its name in rules.
    pub name: String,
    /// What it measures; samples are given in the dimension's base unit.
    pub dimension: Dimension,
    /// The interval its values plausibly lie in (base units), from which the
    /// learner draws constants until it has observed the real interval.
    pub range: (f64, f64),
}

/// A discrete occurrence (a loss, a received message).
#[derive(Clone, Debug, PartialEq)]
pub struct EventDecl {
    /// Its name in rules.
    pub name: String,
}

/// The values a target accepts.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetValues {
    /// One of these names (`tcp`, `braid`, ...).
    Choice(Vec<String>),
    /// A number of this dimension in `[min, max]` (base units).
    Number {
        /// Its dimension.
        dimension: Dimension,
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
        /// Only whole numbers (a computed value is rounded to the nearest).
        integer: bool,
    },
}

/// An actuator: a setting, a register or a parameter transition.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetDecl {
    /// Which action form reaches it.
    pub kind: ActionKind,
    /// Its name in rules.
    pub name: String,
    /// What it accepts.
    pub values: TargetValues,
}

/// A vocabulary that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VocabError {
    /// A name is not a rule identifier or is a reserved word.
    #[error("`{name}` cannot be a {what} name: names start with a letter or `_`, continue with letters, digits or `_`, and are not one of and, or, not, true, false, on, set, execute, register")]
    BadName {
        /// What was declared.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// Two declarations share a name.
    #[error("`{0}` is declared twice (metrics and events share one namespace; targets one per kind)")]
    Duplicate(String),
    /// A range that is empty or not finite.
    #[error("the range of `{name}` must be finite with min <= max, got [{min}, {max}]")]
    BadRange {
        /// The declaration.
        name: String,
        /// Declared minimum.
        min: f64,
        /// Declared maximum.
        max: f64,
    },
    /// A choice target without values.
    #[error("target `{0}` offers no value to choose from")]
    NoChoice(String),
}

/// Words that cannot name a metric, event or target.
pub(crate) const RESERVED: &[&str] = &["and", "or", "not", "true", "false", "on", "set", "execute", "register"];

pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&s)
}

/// Metrics, events and targets, built with the chained methods:
///
/// ```
/// use braid_rules::{Vocabulary, Dimension, ActionKind};
/// let v = Vocabulary::new()
///     .metric("rtt", Dimension::Time, 0.0, 2.0)
///     .metric("loss", Dimension::Ratio, 0.0, 0.3)
///     .event("timeout")
///     .choice(ActionKind::Set, "transport", &["tcp", "braid"])
///     .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true);
/// assert!(v.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Vocabulary {
    metrics: Vec<MetricDecl>,
    events: Vec<EventDecl>,
    targets: Vec<TargetDecl>,
    /// The longest window a rule may aggregate over.
    pub max_window: Duration,
}

impl Default for Vocabulary {
    fn default() -> Self {
        Vocabulary::new()
    }
}

impl Vocabulary {
    /// An empty vocabulary; windows up to one hour.
    pub fn new() -> Self {
        Vocabulary {
            metrics: Vec::new(),
            events: Vec::new(),
            targets: Vec::new(),
            max_window: Duration::from_secs(3600),
        }
    }

    /// Declares a metric with its dimension and plausible range (base units).
    pub fn metric(mut self, name: &str, dimension: Dimension, min: f64, max: f64) -> Self {
        self.metrics.push(MetricDecl {
            name: name.to_string(),
            dimension,
            range: (min, max),
        });
        self
    }

    /// Declares an event.
    pub fn event(mut self, name: &str) -> Self {
        self.events.push(EventDecl { name: name.to_string() });
        self
    }

    /// Declares a target taking one of `values`.
    pub fn choice(mut self, kind: ActionKind, name: &str, values: &[&str]) -> Self {
        self.targets.push(TargetDecl {
            kind,
            name: name.to_string(),
            values: TargetValues::Choice(values.iter().map(|v| v.to_string()).collect()),
        });
        self
    }

    /// Declares a numeric target taking values in `[min, max]` (base units).
    pub fn number(mut self, kind: ActionKind, name: &str, dimension: Dimension, min: f64, max: f64, integer: bool) -> Self {
        self.targets.push(TargetDecl {
            kind,
            name: name.to_string(),
            values: TargetValues::Number {
                dimension,
                min,
                max,
                integer,
            },
        });
        self
    }

    /// Checks names, duplicates and ranges.
    pub fn validate(&self) -> Result<(), VocabError> {
        let mut seen = std::collections::HashSet::new();
        for (what, name) in self
            .metrics
            .iter()
            .map(|m| ("metric", m.name.as_str()))
            .chain(self.events.iter().map(|e| ("event", e.name.as_str())))
        {
            if !is_identifier(name) {
                return Err(VocabError::BadName { what, name: name.to_string() });
            }
            if !seen.insert(name.to_string()) {
                return Err(VocabError::Duplicate(name.to_string()));
            }
        }
        for m in &self.metrics {
            let (min, max) = m.range;
            if !(min.is_finite() && max.is_finite() && min <= max) {
                return Err(VocabError::BadRange { name: m.name.clone(), min, max });
            }
        }
        let mut seen = std::collections::HashSet::new();
        for t in &self.targets {
            if !is_identifier(&t.name) {
                return Err(VocabError::BadName { what: "target", name: t.name.clone() });
            }
            if !seen.insert((t.kind, t.name.clone())) {
                return Err(VocabError::Duplicate(t.name.clone()));
            }
            match &t.values {
                TargetValues::Choice(vs) => {
                    if vs.is_empty() {
                        return Err(VocabError::NoChoice(t.name.clone()));
                    }
                    for v in vs {
                        if !is_identifier(v) {
                            return Err(VocabError::BadName { what: "choice", name: v.clone() });
                        }
                    }
                }
                TargetValues::Number { min, max, .. } => {
                    if !(min.is_finite() && max.is_finite() && min <= max) {
                        return Err(VocabError::BadRange { name: t.name.clone(), min: *min, max: *max });
                    }
                }
            }
        }
        Ok(())
    }

    /// The metrics, in declaration order ([`MetricId`] indexes this).
    pub fn metrics(&self) -> &[MetricDecl] {
        &self.metrics
    }

    /// The events, in declaration order ([`EventId`] indexes this).
    pub fn events(&self) -> &[EventDecl] {
        &self.events
    }

    /// The targets, in declaration order ([`TargetId`] indexes this).
    pub fn targets(&self) -> &[TargetDecl] {
        &self.targets
    }

    /// The metric called `name`.
    pub fn metric_id(&self, name: &str) -> Option<MetricId> {
        self.metrics.iter().position(|m| m.name == name).map(MetricId)
    }

    /// The event called `name`.
    pub fn event_id(&self, name: &str) -> Option<EventId> {
        self.events.iter().position(|e| e.name == name).map(EventId)
    }

    /// The target of this kind called `name`.
    pub fn target_id(&self, kind: ActionKind, name: &str) -> Option<TargetId> {
        self.targets.iter().position(|t| t.kind == kind && t.name == name).map(TargetId)
    }

    /// The declaration of a metric (`None` for an id of another vocabulary).
    pub fn metric_decl(&self, id: MetricId) -> Option<&MetricDecl> {
        self.metrics.get(id.0)
    }

    /// The declaration of a target.
    pub fn target_decl(&self, id: TargetId) -> Option<&TargetDecl> {
        self.targets.get(id.0)
    }

    /// The same metrics and events with only the targets named in `names`
    /// (in this vocabulary's order): what a learner may act on in one case
    /// study. Every rule set that checks against the result checks against
    /// `self` too, since names, dimensions and ranges are unchanged.
    ///
    /// ```
    /// use braid_rules::{Vocabulary, Dimension, ActionKind};
    /// let v = Vocabulary::new()
    ///     .metric("rtt", Dimension::Time, 0.0, 2.0)
    ///     .choice(ActionKind::Set, "transport", &["tcp", "braid"])
    ///     .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true);
    /// let only = v.only_targets(&["priority"]);
    /// assert_eq!(only.targets().len(), 1);
    /// assert!(only.target_id(ActionKind::Set, "transport").is_none());
    /// ```
    pub fn only_targets(&self, names: &[&str]) -> Vocabulary {
        Vocabulary {
            targets: self.targets.iter().filter(|t| names.contains(&t.name.as_str())).cloned().collect(),
            ..self.clone()
        }
    }
}
