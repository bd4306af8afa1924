//! Fossa in the lab (issue 20; seed 001 chapter 6): ECA adaptation rules
//! learned by genetic programming, every evaluation an experiment of the
//! `adapt` template stored in the lab's database.
//!
//! - [`study`]: the learning study file (scenario, utility aggregation,
//!   training and held-out environments, GP settings, budget);
//! - [`evaluator`]: the learner's [`braid_rules::learn::Evaluator`] that
//!   runs each batch of evaluations as one lab study;
//! - [`campaign`]: static baselines, GP with and without the efficiency
//!   measures and random search, compared on held-out environments.

pub mod campaign;
pub mod evaluator;
pub mod study;

use braid_rules::Vocabulary;

use crate::template::builtin::adapt::{scenario_target, TRANSPORTS};

/// The vocabulary a scenario's rules are written in: the Node's (the
/// metrics and events it monitors per destination,
/// `braid_node::rules::vocabulary`), acting only on the scenario's target.
/// Every rule set over it runs on a Node unchanged.
pub fn scenario_vocabulary(scenario: &str) -> Vocabulary {
    let full = braid::node::rules::vocabulary(&TRANSPORTS);
    match scenario_target(scenario) {
        Some(t) => full.only_targets(&[t]),
        None => full,
    }
}
