//! Each shipped rule, run to convergence by the round-based simulator on
//! random geometric graphs, yields exactly its brute-force checker's topology.

use braid_tarl::algorithms::{shipped, Shipped};
use braid_tarl::checkers;
use braid_tarl::sim::{geometric_world, run_to_convergence, tree_world};
use braid_tarl::{Budget, Engine, EngineConfig, TopoId};

fn engine(s: &Shipped, k: u32) -> Engine {
    let rule = s.compile().expect("shipped rule compiles");
    Engine::new(
        (s.schema)(),
        vec![rule],
        EngineConfig {
            k,
            budget: Budget::default(),
        },
    )
    .expect("engine")
}

/// Runs `name` on `graphs` random geometric graphs of `n` nodes and compares
/// the controlled topology with the checker's.
fn geometric(name: &str, graphs: u64, n: usize, radius: f64) {
    let s = shipped(name).expect("shipped");
    let eng = engine(s, s.k);
    let directed = name == "yao";
    for seed in 0..graphs {
        let mut w = geometric_world(n, radius, seed, directed, directed);
        let phys = w.edges(TopoId(0));
        let rep = run_to_convergence(&eng, &mut w, seed ^ 0x5eed, 50);
        assert!(rep.converged, "{name} seed {seed}: no convergence: {rep:?}");
        assert!(
            rep.failures.is_empty() && rep.cutoffs == 0,
            "{name} seed {seed}: {rep:?}"
        );
        let want = match name {
            "gabriel" => checkers::gabriel(w.positions(), &phys),
            "rng" => checkers::relative_neighborhood(w.positions(), &phys),
            "yao" => checkers::yao(w.positions(), &phys, 6.0),
            "ktc" => checkers::ktc(w.positions(), &phys, 1.5),
            other => panic!("no checker for {other}"),
        };
        let got = w.edges(TopoId(1));
        assert_eq!(
            got, want,
            "{name} seed {seed}: topology differs from the checker's"
        );
        if name != "yao" {
            assert!(
                got.len() < phys.len() || phys.is_empty() || got == phys,
                "{name}: sanity"
            );
        }
    }
}

fn low_delay(graphs: u64, n: usize, radius: f64) {
    let s = shipped("low_delay_jump").expect("shipped");
    let eng = engine(s, s.k);
    for seed in 0..graphs {
        let mut w = tree_world(n, radius, seed);
        let nb = w.edges(TopoId(1));
        let rep = run_to_convergence(&eng, &mut w, seed, 200);
        assert!(
            rep.converged && rep.failures.is_empty() && rep.cutoffs == 0,
            "seed {seed}: {rep:?}"
        );
        let tree = w.edges(TopoId(0));
        checkers::low_delay_tree(n, &nb, &tree, 0).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn gabriel_matches_checker_on_100_graphs() {
    geometric("gabriel", 100, 25, 0.35);
}

#[test]
fn rng_matches_checker_on_100_graphs() {
    geometric("rng", 100, 25, 0.35);
}

#[test]
fn yao_matches_checker_on_100_graphs() {
    geometric("yao", 100, 25, 0.35);
}

#[test]
fn ktc_matches_checker_on_100_graphs() {
    geometric("ktc", 100, 25, 0.35);
}

#[test]
fn low_delay_jump_reaches_a_bfs_tree_on_100_graphs() {
    low_delay(100, 25, 0.3);
}

#[test]
#[ignore = "large graphs: cargo test --release -p braid-tarl --test algorithms -- --ignored"]
fn all_rules_on_large_graphs() {
    for name in ["gabriel", "rng", "yao", "ktc"] {
        geometric(name, 100, 200, 0.12);
    }
    low_delay(100, 200, 0.12);
}
