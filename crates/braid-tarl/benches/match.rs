//! Evaluations per second of the shipped rules on views of 10, 50 and 200
//! nodes (dense views, the worst case at that size: see
//! `braid_tarl::bench`). `braid tarl bench [--json]` runs the same.
//!
//! Run: `cargo bench -p braid-tarl --bench match`

use std::time::Duration;

use braid_tarl::algorithms::SHIPPED;
use braid_tarl::bench::bench_rule;

fn main() {
    println!(
        "{:<16} {:>6} {:>3} {:>12} {:>12} {:>10}",
        "rule", "view", "k", "evals/s", "matches", "steps"
    );
    for s in SHIPPED {
        for n in [10usize, 50, 200] {
            let r = bench_rule(s, n, Duration::from_millis(400)).expect("shipped rule benchmarks");
            let matches = r.matches.map_or_else(|| "-".to_string(), |m| m.to_string());
            println!(
                "{:<16} {:>6} {:>3} {:>12.0} {:>12} {:>10}",
                r.rule, r.view_nodes, r.k, r.evals_per_sec, matches, r.steps
            );
        }
    }
}
