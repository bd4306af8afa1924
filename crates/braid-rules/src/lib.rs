//! Fossa: event–condition–action adaptation rules and their offline
//! learner (seed 001 chapter 6; issue 20).
//!
//! - [`parse`], [`check()`], [`normalize`] and the `Display` impls: the rule
//!   language of §6.3 (Listing 6.1) with units, a type checker against an
//!   embedder's [`Vocabulary`], a pretty-printer that round-trips and the
//!   normal form of §6.4.2.
//! - [`Engine`]: the sans-IO ECA engine. It collects only what the rules
//!   use, in bounded sliding windows, evaluates on events and on a timer and
//!   emits actions for the embedder to apply.
//! - [`learn`]: the genetic-programming learner of §6.4.1 with the
//!   efficiency measures of §6.4.2; evaluations are delegated to a
//!   caller-supplied [`learn::Evaluator`].
//!
//! Nothing here knows Braid: the embedder declares metrics, events and
//! actuators in a [`Vocabulary`], feeds samples with timestamps, and maps
//! [`Outcome`]s to its own APIs.
//!
//! ```
//! use braid_rules::{compile, Engine, EngineConfig, Vocabulary, Dimension, ActionKind, Outcome, Value};
//! use braid_core::Instant;
//! let vocab = Vocabulary::new()
//!     .metric("rtt", Dimension::Time, 0.0, 1.0)
//!     .event("loss")
//!     .choice(ActionKind::Set, "transport", &["tcp", "braid"]);
//! let rules = compile("on first match\n  count(loss, 10s) > 2 or avg(rtt, 5s) > 80ms: set transport = braid;\n  true: set transport = tcp;", &vocab).unwrap();
//! let mut engine = Engine::new(&rules, &vocab, EngineConfig::default()).unwrap();
//! let rtt = vocab.metric_id("rtt").unwrap();
//! engine.sample(Instant::from_micros(1_000), rtt, 0.120);
//! let out = engine.evaluate(Instant::from_micros(2_000)).to_vec();
//! assert!(matches!(out[0], Outcome::Apply { value: Value::Choice(1), .. }));
//! ```

#![warn(missing_docs)]

pub mod ast;
pub mod check;
pub mod diag;
pub mod engine;
pub mod learn;
mod lexer;
pub mod normal;
pub mod parser;
mod print;
pub mod units;
pub mod vocab;
mod window;

pub use ast::{Action, ActionKind, ActionValue, AggFn, ArithOp, Block, CmpOp, Cond, Literal, Mode, Num, Rule, RuleSet, Span};
pub use check::{check, compile, dimension_of};
pub use diag::{Diagnostic, RuleError, Stage};
pub use engine::{Engine, EngineConfig, EngineError, Outcome, Value};
pub use normal::{const_value, normal_key, normalize};
pub use parser::{parse, parse_condition};
pub use units::{Dimension, Unit};
pub use vocab::{EventId, MetricId, TargetDecl, TargetId, TargetValues, Vocabulary, VocabError};
