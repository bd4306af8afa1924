//! Matching cost (issue 22 acceptance): evaluations per second of a shipped
//! rule at one node whose view holds a given number of nodes.
//!
//! The views are dense on purpose: every node is within radio range of every
//! other (a complete unit-disk graph, or a complete neighbourhood for the
//! low-delay jump), so a view of n nodes is the worst case for pattern
//! matching at that size, and the view really holds n nodes whatever the
//! rule's k. Shared by `cargo bench -p braid-tarl --bench match` and
//! `braid tarl bench`.

use std::time::{Duration, Instant};

use crate::algorithms::Shipped;
use crate::engine::{Budget, Engine, EngineConfig, EngineError, RuleOutcome};
use crate::error::TarlError;
use crate::sim::{geometric_world, tree_world, SimWorld};
use crate::value::NodeId;
use crate::view::LocalView;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The rule does not compile against its schema.
    #[error(transparent)]
    Compile(#[from] TarlError),
    /// The engine refused its settings.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A view needs at least two nodes (the evaluated node and a neighbour).
    #[error("view size {0}: expected at least 2 nodes")]
    ViewTooSmall(usize),
    /// The dense world has n² links: more than [`MAX_VIEW`] nodes would take
    /// gigabytes.
    #[error("view size {0}: at most {MAX_VIEW} nodes (a dense view has n² links)")]
    ViewTooLarge(usize),
}

/// The largest view [`bench_rule`] builds (about 500,000 links).
pub const MAX_VIEW: usize = 1000;

/// One rule on one view size.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BenchRow {
    /// The shipped rule.
    pub rule: String,
    /// Nodes in the evaluated node's view (itself included).
    pub view_nodes: usize,
    /// The rule's view size in hops.
    pub k: u32,
    /// Evaluations run.
    pub evaluations: u64,
    /// Wall-clock time they took.
    pub seconds: f64,
    /// Evaluations per second.
    pub evals_per_sec: f64,
    /// Matches the rule's condition produced per evaluation (`None`: not matched).
    pub matches: Option<usize>,
    /// Search steps per evaluation (candidates the matcher tried).
    pub steps: u64,
    /// Actions planned per evaluation.
    pub planned: usize,
}

/// The dense world whose node `n - 1` sees all `n` nodes, for rule `s`.
pub fn dense_world(s: &Shipped, n: usize) -> SimWorld {
    // Radius 1.5 exceeds the unit square's diagonal: a complete graph.
    if s.name == "low_delay_jump" {
        tree_world(n, 1.5, 1)
    } else {
        let directed = (s.schema)() == crate::sim::geometric_schema(true);
        geometric_world(n, 1.5, 1, directed, directed)
    }
}

/// Evaluates `s` at the last node of [`dense_world`] of `view_nodes` nodes,
/// without a budget, for at least `min_time` and at least 3 times.
///
/// # Errors
/// [`BenchError`] if the rule does not compile or the view is too small or too large.
pub fn bench_rule(s: &Shipped, view_nodes: usize, min_time: Duration) -> Result<BenchRow, BenchError> {
    if view_nodes < 2 {
        return Err(BenchError::ViewTooSmall(view_nodes));
    }
    if view_nodes > MAX_VIEW {
        return Err(BenchError::ViewTooLarge(view_nodes));
    }
    let budget = Budget {
        max_steps: u64::MAX,
        max_matches: u64::MAX,
    };
    let engine = Engine::new((s.schema)(), vec![s.compile()?], EngineConfig { k: s.k, budget })?;
    let world = dense_world(s, view_nodes);
    // The last node: in the low-delay jump's depth-first tree it is deep,
    // so its parent has shallower candidates to jump to.
    let node = NodeId(view_nodes as u64 - 1);
    let seen = LocalView::new(&world, node, s.k).nodes().len();
    let start = Instant::now();
    let mut evaluations = 0u64;
    let mut last = None;
    while start.elapsed() < min_time || evaluations < 3 {
        last = Some(engine.evaluate(&world, node));
        evaluations += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    let ev = last.expect("evaluated at least 3 times");
    let rep = &ev.reports[0];
    Ok(BenchRow {
        rule: s.name.to_string(),
        view_nodes: seen,
        k: s.k,
        evaluations,
        seconds,
        evals_per_sec: evaluations as f64 / seconds,
        matches: match rep.outcome {
            RuleOutcome::Matched(m) => Some(m),
            _ => None,
        },
        steps: rep.steps,
        planned: ev.planned.len(),
    })
}
