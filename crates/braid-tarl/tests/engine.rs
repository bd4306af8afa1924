//! The matcher against brute force (property test), view sizes, budgets,
//! action failures and schema checks.

use std::collections::BTreeSet;

use braid_tarl::engine::Val;
use braid_tarl::sim::{sim_schema, SimWorld};
use braid_tarl::{compile, Budget, Engine, EngineConfig, EvalError, NodeId, RuleOutcome, TopoId};
use proptest::prelude::*;

fn schema() -> braid_tarl::Schema {
    sim_schema(&[("D", true), ("U", false)])
}

fn world(n: usize, directed: &[(u32, u32)], undirected: &[(u32, u32)]) -> SimWorld {
    let pos = (0..n)
        .map(|i| (i as f64 / n as f64, (i * 7 % n) as f64 / n as f64))
        .collect();
    let mut w = SimWorld::new(schema(), pos);
    for &(a, b) in directed {
        if a != b {
            w.link(TopoId(0), a, b);
        }
    }
    for &(a, b) in undirected {
        if a != b {
            w.link(TopoId(1), a, b);
        }
    }
    w
}

fn engine(src: &str, k: u32, budget: Budget) -> Engine {
    let rule = compile("t", src, &schema()).unwrap_or_else(|e| panic!("{e}"));
    Engine::new(schema(), vec![rule], EngineConfig { k, budget }).expect("engine")
}

/// Pattern: self -> x (D), x <-> y (U), y -> self (D), with x.id < y.id + 3.
const PATTERN: &str = "filter(match(TP, D, self - a -> x, y - c -> self), x.id < y.id + 3)";

fn brute(w: &SimWorld, s: u32, n: u32) -> BTreeSet<(u32, u32)> {
    let d = |a: u32, b: u32| w.successors(TopoId(0), a).contains(&b);
    let u = |a: u32, b: u32| w.successors(TopoId(1), a).contains(&b);
    let mut out = BTreeSet::new();
    for x in 0..n {
        for y in 0..n {
            if x != y
                && x != s
                && y != s
                && d(s, x)
                && u(x, y)
                && d(y, s)
                && f64::from(x) < f64::from(y) + 3.0
            {
                out.insert((x, y));
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn matcher_equals_brute_force(
        n in 3u32..9,
        dir in prop::collection::vec((0u32..9, 0u32..9), 0..40),
        und in prop::collection::vec((0u32..9, 0u32..9), 0..20),
    ) {
        let dir: Vec<_> = dir.into_iter().filter(|&(a, b)| a < n && b < n).collect();
        let und: Vec<_> = und.into_iter().filter(|&(a, b)| a < n && b < n).collect();
        let w = world(n as usize, &dir, &und);
        let src = format!("join({PATTERN}, match(TP, U, x <- b -> y))\nexecute every match:\n  at (self, TP, U) add_neighbor(x)");
        let eng = engine(&src, 3, Budget::default());
        let slot = |name: &str| eng.rules()[0].slots.iter().position(|s| s.name == name).unwrap();
        let (sx, sy) = (slot("x"), slot("y"));
        for s in 0..n {
            let got: BTreeSet<(u32, u32)> = eng.matches(0, &w, NodeId(u64::from(s))).unwrap().iter().map(|b| {
                let node = |i: usize| match b[i] { Val::Node(v) => v.0 as u32, _ => u32::MAX };
                (node(sx), node(sy))
            }).collect();
            prop_assert_eq!(got, brute(&w, s, n));
        }
    }
}

#[test]
fn view_size_limits_what_is_matched() {
    // Triangle 0-1-2 in U: the far edge 1-2 needs the lists of 1 or 2 (k = 2).
    let w = world(3, &[], &[(0, 1), (1, 2), (2, 0)]);
    let src = "match(TP, U, self <- a -> x, x <- b -> y, y <- c -> self)\nexecute every match:\n  at (self, TP, U) remove_neighbor(x)";
    assert_eq!(
        engine(src, 1, Budget::default())
            .matches(0, &w, NodeId(0))
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        engine(src, 2, Budget::default())
            .matches(0, &w, NodeId(0))
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn budget_cuts_off_unbounded_rules_and_plans_nothing() {
    // A 5-path pattern on a complete graph of 30 nodes: ~30^4 matches.
    let n = 30u32;
    let all: Vec<(u32, u32)> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    let w = world(n as usize, &[], &all);
    let src = "match(TP, U, self <- a -> p, p <- b -> q, q <- c -> r, r <- d -> s)\nexecute every match:\n  at (self, TP, U) remove_neighbor(p)";
    let eng = engine(
        src,
        2,
        Budget {
            max_steps: 10_000,
            max_matches: 1_000_000,
        },
    );
    let ev = eng.evaluate(&w, NodeId(0));
    assert!(ev.planned.is_empty());
    assert!(
        matches!(
            ev.reports[0].outcome,
            RuleOutcome::CutOff(EvalError::StepBudget(_))
        ),
        "{:?}",
        ev.reports
    );
    let eng = engine(
        src,
        2,
        Budget {
            max_steps: u64::MAX,
            max_matches: 500,
        },
    );
    let ev = eng.evaluate(&w, NodeId(0));
    assert!(
        matches!(
            ev.reports[0].outcome,
            RuleOutcome::CutOff(EvalError::MatchBudget(_))
        ),
        "{:?}",
        ev.reports
    );
    assert!(ev.planned.is_empty());
}

#[test]
fn failed_actions_and_schema_mismatch_are_reported() {
    let mut w = world(3, &[(1, 0)], &[(0, 2)]);
    let src =
        "match(TP, D, p - a -> self)\nexecute every match:\n  at (self, TP, D) move_neighbor(p, p)";
    assert!(compile("t", src, &schema()).is_err());
    let src = "filter(join(match(TP, U, self <- a -> x), match(TP, D, p - b -> self)), p != x)\nexecute every match:\n  at (self, TP, D) move_neighbor(x, p)";
    let eng = engine(src, 1, Budget::default());
    let (ev, rep) = eng.step(&mut w, NodeId(0));
    assert_eq!(ev.planned.len(), 1);
    assert_eq!(rep.failed.len(), 1, "{rep:?}");
    assert!(
        rep.failed[0].1.to_string().contains("no neighbour n2"),
        "{}",
        rep.failed[0].1
    );
    let other = SimWorld::new(sim_schema(&[("D", true)]), vec![(0.0, 0.0)]);
    let ev = eng.evaluate(&other, NodeId(0));
    assert_eq!(
        ev.reports[0].outcome,
        RuleOutcome::Failed(EvalError::SchemaMismatch)
    );
}

#[test]
fn zero_view_size_is_rejected() {
    let rule = compile(
        "t",
        "match(TP, U, self <- a -> x)\nexecute every match:\n  at (self, TP, U) remove_neighbor(x)",
        &schema(),
    )
    .unwrap();
    assert!(Engine::new(
        schema(),
        vec![rule],
        EngineConfig {
            k: 0,
            budget: Budget::default()
        }
    )
    .is_err());
}
