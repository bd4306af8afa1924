//! DATA (seed 000 §IV): a meta-transport that learns online which mix of
//! TCP and Braid carries a data stream fastest on the current path.
//!
//! - [`Ratio`]: the share of messages over Braid.
//! - Selection policies (§IV-B) turn a ratio into a transport per
//!   message: [`RandomSelection`] (Bernoulli) and [`PatternSelection`]
//!   (the p- and p+1-patterns of [`pattern`]).
//! - Ratio policies (§IV-C) set the ratio per episode: [`StaticRatio`] and
//!   the Sarsa(λ) [`TdLearner`] with its three [`ValueFunction`]s.
//! - [`DataFlow`] is the sans-IO interceptor core (window, episodes,
//!   rewards); [`DataInterceptor`] runs it over a [`crate::Node`].
//!
//! Everything but [`DataInterceptor`] is sans-IO and deterministic given
//! its seed, so it runs in virtual time (see the crate's `data_learner`
//! tests).

mod flow;
mod interceptor;
mod learner;
mod policy;
mod ratio;
mod selection;

pub use flow::{AdaptiveEpisode, DataFlow, EpisodeReport, FlowConfig, RewardKind};
pub use interceptor::{DataConfig, DataInterceptor, DataStats, PolicyConfig, SelectionConfig};
pub use learner::{LearnerConfig, LearnerStep, TdLearner, ValueFunction};
pub use policy::{RatioPolicy, StaticRatio};
pub use ratio::Ratio;
pub use selection::{pattern, PatternKind, PatternSelection, RandomSelection, SelectionPolicy};
