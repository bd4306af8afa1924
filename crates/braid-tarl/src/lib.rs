//! TARL, the topology adaptation rule language (Frömmgen 2018, ch. 7; Stein
//! et al. \[F8\]; distributed pattern matching \[F3\]), for Braid overlays.
//!
//! A rule is a preamble (constants, selectors), a condition over graph
//! patterns (`match`, `filter`, `join`, `min`, `max`, `count`) and actions
//! (`add_neighbor`, `remove_neighbor`, `move_neighbor`) run for every match:
//!
//! ```
//! use braid_tarl::{compile, tree_schema};
//! let src = "filter(
//!   join(
//!     match(TP, Tree, currentParent - e0 -> self),
//!     min(match(TP, Neighborhood, parentCandidate - e1 -> self), parentCandidate.treeDepth)),
//!   currentParent.treeDepth > parentCandidate.treeDepth)
//! execute every match:
//!   at (self, TP, Tree) move_neighbor(currentParent, parentCandidate)";
//! let rule = compile("ldj", src, &tree_schema()).unwrap();
//! assert_eq!(rule.actions.len(), 1);
//! ```
//!
//! Everything here is sans-IO: the [`Engine`] evaluates a node's rules on its
//! k-hop view through a [`TopologyProvider`] and returns planned actions; the
//! caller decides when (timer, topology change). [`sim`] is an in-memory
//! provider with a round-based driver, [`checkers`] compute the target
//! topologies centrally, [`dpm`] is the distributed pattern matching protocol.

#![warn(missing_docs)]

pub mod algorithms;
pub mod ast;
pub mod bench;
pub mod check;
pub mod checkers;
pub mod dpm;
pub mod engine;
pub mod error;
pub mod ir;
pub mod lexer;
pub mod parser;
pub mod pretty;
pub mod provider;
pub mod schema;
pub mod sim;
pub mod trigger;
pub mod value;
pub mod view;

pub use check::{check, compile};
pub use engine::{
    ApplyReport, Budget, Engine, EngineConfig, EngineError, EvalError, Evaluation, PlannedAction,
    RuleOutcome, RuleReport,
};
pub use error::{ErrorKind, Span, TarlError};
pub use ir::CompiledRule;
pub use parser::parse;
pub use pretty::pretty;
pub use provider::{ActionError, Change, TopologyProvider};
pub use schema::{AttrId, Schema, TopoId, TopologyDecl, Type};
pub use sim::{geometric_schema, tree_schema};
pub use trigger::EvalTrigger;
pub use value::{NodeId, Value};
