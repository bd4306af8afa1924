//! The matching-cost benchmark measures what it says: the evaluated node's
//! view holds the requested number of nodes, every shipped rule matches
//! something there, and a view too small to hold a neighbour is refused.

use std::time::Duration;

use braid_tarl::algorithms::SHIPPED;
use braid_tarl::bench::{bench_rule, BenchError};

#[test]
fn every_shipped_rule_is_measured_on_a_full_view() {
    for s in SHIPPED {
        for n in [10usize, 30] {
            let r = bench_rule(s, n, Duration::from_millis(5)).expect("benchmarks");
            assert_eq!(r.view_nodes, n, "{}: the view must hold every node", s.name);
            assert_eq!(r.k, s.k);
            assert!(r.evaluations >= 3 && r.seconds > 0.0, "{r:?}");
            assert!((r.evals_per_sec - r.evaluations as f64 / r.seconds).abs() < 1e-6 * r.evals_per_sec);
            // Dense views always hold work for the rule: witnesses inside
            // circles and triangles (Gabriel, RNG, kTC), a nearest node per
            // cone (Yao), a shallower parent for the deep node (jump).
            assert!(r.matches.is_some_and(|m| m > 0) && r.planned > 0, "{r:?}");
            assert!(r.steps > 0, "{r:?}");
        }
    }
}

#[test]
fn views_without_a_neighbour_or_too_large_are_refused() {
    let e = bench_rule(&SHIPPED[0], 1, Duration::ZERO).expect_err("refused");
    assert!(matches!(e, BenchError::ViewTooSmall(1)), "{e}");
    let e = bench_rule(&SHIPPED[0], braid_tarl::bench::MAX_VIEW + 1, Duration::ZERO).expect_err("refused");
    assert!(e.to_string().contains("at most 1000 nodes"), "{e}");
}
