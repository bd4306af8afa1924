//! The Braid lab: every Braid experiment, benchmark and study runs here.
//!
//! MACI's model (seed 001, ch. 4): an *experiment* is one template, one
//! configuration (the system's parameters), one environment (the network's
//! parameters) and the code version; a *study* is the Cartesian product of
//! value lists, repeated; results go into one database; analysis reads only
//! the database.
//!
//! Data flows one way: study file ([`study`]) → plan ([`plan`]) → runner
//! ([`runner`]) running templates ([`template`]) → records ([`record`]) →
//! store ([`store`]) → analysis ([`analysis`]) → table, JSON, plot
//! ([`plot`]).
//!
//! Owns: templates and their typed parameters, study files, the runner and
//! its executors, the SQLite store, analysis, plots, and the scenario
//! harnesses the templates drive.
//!
//! Must not depend on: the CLI (`braid-cli`, clap). Nothing but the CLI and
//! the lab's own tools depend on it: applications link the `braid` facade,
//! which knows nothing of the lab.

pub mod analysis;
pub mod browser;
pub mod figures;
pub mod fossa;
pub mod harness;
pub mod oneoff;
pub mod param;
pub mod plan;
pub mod plot;
pub mod record;
pub mod runner;
pub mod search;
pub mod session;
pub mod store;
pub mod study;
pub mod template;
pub mod web;
