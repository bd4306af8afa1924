//! A study's experiments, each with a content-derived id.
//!
//! An experiment's id is a hash of what determines its outcome: the
//! template's name and version, every parameter value, the repetition and
//! the seed. Resume is "run what is not stored yet"; "never stored twice" is
//! the store's UNIQUE constraint on the id.
//!
//! (The expansion is being written; the types below are the contract the
//! runner and the store use.)

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::param::Params;

/// One experiment to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedExperiment {
    /// Content-derived id (hex, 16 characters).
    pub id: String,
    /// The template's name.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// Every declared parameter's value.
    pub params: Params,
    /// 0-based repetition index.
    pub repetition: u32,
    /// The experiment's seed (derived from the study's base seed, the
    /// configuration, the environment and the repetition).
    pub seed: u64,
    /// When the runner gives up on it.
    pub timeout: Duration,
    /// Run alone (no other experiment at the same time).
    pub exclusive: bool,
    /// Expected wall-clock duration.
    pub expected: Duration,
}
