//! Evaluations per second of the shipped rules on views of 10, 50 and 200
//! nodes. The views are dense on purpose (every node within radio range of
//! every other: a complete unit-disk graph, or a complete neighbourhood for
//! the low-delay jump), the worst case for pattern matching at that size.
//!
//! Run: `cargo bench -p braid-tarl --bench match`

use std::time::{Duration, Instant};

use braid_tarl::algorithms::SHIPPED;
use braid_tarl::sim::{geometric_world, tree_world};
use braid_tarl::{Budget, Engine, EngineConfig, NodeId, RuleOutcome};

fn main() {
    let budget = Budget {
        max_steps: u64::MAX,
        max_matches: u64::MAX,
    };
    println!(
        "{:<16} {:>6} {:>3} {:>12} {:>12} {:>10}",
        "rule", "view", "k", "evals/s", "matches", "steps"
    );
    for s in SHIPPED {
        let engine = Engine::new(
            (s.schema)(),
            vec![s.compile().expect("compiles")],
            EngineConfig { k: s.k, budget },
        )
        .expect("engine");
        for n in [10usize, 50, 200] {
            let world = if s.name == "low_delay_jump" {
                tree_world(n, 1.5, 1)
            } else {
                let yao = s.name == "yao";
                geometric_world(n, 1.5, 1, yao, yao)
            };
            // The node with the deepest position in the tree gains most from a jump.
            let node = NodeId((n as u64) - 1);
            let start = Instant::now();
            let mut evals = 0u64;
            let mut last = None;
            while start.elapsed() < Duration::from_millis(400) || evals < 3 {
                last = Some(engine.evaluate(&world, node));
                evals += 1;
            }
            let secs = start.elapsed().as_secs_f64();
            let rep = &last.expect("evaluated").reports[0];
            let matches = match rep.outcome {
                RuleOutcome::Matched(m) => m.to_string(),
                ref other => format!("{other:?}"),
            };
            println!(
                "{:<16} {:>6} {:>3} {:>12.0} {:>12} {:>10}",
                s.name,
                n,
                s.k,
                evals as f64 / secs,
                matches,
                rep.steps
            );
        }
    }
}
