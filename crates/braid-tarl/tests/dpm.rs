//! Distributed pattern matching finds exactly the central matcher's matches,
//! for every view size and with or without broadcast; its costs behave as the
//! model says.

use braid_tarl::compile;
use braid_tarl::dpm::{
    distributed_match, engine_matches, listing_7_2_rule, net_schema, pattern_horizon, study_point,
    view_cost, Net, StudyParams,
};

#[test]
fn dpm_finds_exactly_the_central_matches() {
    for seed in 0..6u64 {
        let net = Net::erdos_renyi(40, 2.0 + seed as f64 * 0.5, seed);
        for thr in [0.3, 0.7, 1.0] {
            let rule = compile("p", &listing_7_2_rule(thr), &net_schema()).expect("compiles");
            let central = engine_matches(&net, &rule, net.len() as u32).expect("central");
            assert_eq!(
                engine_matches(&net, &rule, pattern_horizon(&rule).unwrap()).unwrap(),
                central,
                "baseline view"
            );
            if thr == 1.0 && seed > 1 {
                assert!(!central.is_empty(), "seed {seed}: the pattern should occur");
            }
            for k in 1..=4 {
                for broadcast in [false, true] {
                    let run = distributed_match(&net, &rule, k, broadcast).expect("dpm");
                    assert_eq!(
                        run.matches, central,
                        "seed {seed} thr {thr} k {k} broadcast {broadcast}"
                    );
                }
            }
        }
    }
}

#[test]
fn dpm_handles_closing_edges_and_other_patterns() {
    // A triangle plus a tail: the closing edge is checked where a list is known.
    let src = "filter(match(TP, Net, self <- a -> x, x <- b -> y, y <- c -> self, y <- d -> z), a.weight + d.weight < 1.2)\nexecute every match:\n  at (self, TP, Net) add_neighbor(z)";
    let rule = compile("tri", src, &net_schema()).expect("compiles");
    assert_eq!(pattern_horizon(&rule).unwrap(), 2);
    for seed in 0..4 {
        let net = Net::erdos_renyi(30, 5.0, 100 + seed);
        let central = engine_matches(&net, &rule, 30).unwrap();
        assert!(!central.is_empty());
        for k in 1..=3 {
            assert_eq!(
                distributed_match(&net, &rule, k, false).unwrap().matches,
                central,
                "k {k}"
            );
        }
    }
}

#[test]
fn horizon_of_listing_7_2_is_3() {
    let rule = compile("p", &listing_7_2_rule(0.5), &net_schema()).unwrap();
    assert_eq!(pattern_horizon(&rule).unwrap(), 3);
}

#[test]
fn costs_follow_the_model() {
    let net = Net::erdos_renyi(100, 4.0, 7);
    // k = 1 needs no view; broadcast never costs more messages than unicast.
    assert_eq!(view_cost(&net, 1, false).messages, 0);
    assert!(view_cost(&net, 3, true).messages < view_cost(&net, 3, false).messages);
    let mut last = 0;
    for thr in [0.1, 0.3, 0.6, 1.0] {
        let p = StudyParams {
            nodes: 100,
            mean_degree: 4.0,
            weight_threshold: thr,
            k: 1,
            broadcast: false,
            seed: 7,
        };
        let m = study_point(&p).unwrap();
        assert!(m.same_matches);
        // Non-distributed cost does not depend on the pattern frequency; DPM's grows.
        assert_eq!(m.baseline.messages, view_cost(&net, 3, false).messages);
        assert!(m.dpm.messages >= last, "DPM cost must grow with frequency");
        last = m.dpm.messages;
    }
    let rare = study_point(&StudyParams {
        nodes: 100,
        mean_degree: 4.0,
        weight_threshold: 0.2,
        k: 1,
        broadcast: false,
        seed: 7,
    })
    .unwrap();
    assert!(
        rare.dpm.messages < rare.baseline.messages,
        "DPM wins at low frequency: {rare:?}"
    );
}

#[test]
fn bad_study_parameters_are_rejected() {
    let mut p = StudyParams {
        nodes: 10,
        mean_degree: 2.0,
        weight_threshold: 0.5,
        k: 0,
        broadcast: false,
        seed: 1,
    };
    assert!(study_point(&p).unwrap_err().to_string().contains("`k`"));
    p.k = 1;
    p.mean_degree = f64::NAN;
    assert!(study_point(&p)
        .unwrap_err()
        .to_string()
        .contains("mean_degree"));
}

#[test]
fn larger_pattern_needs_k_4_and_dpm_still_agrees() {
    use braid_tarl::dpm::{larger_pattern_rule, study_point_for};
    let rule = compile("big", &larger_pattern_rule(0.6), &net_schema()).unwrap();
    assert_eq!(pattern_horizon(&rule).unwrap(), 4);
    for k in [1, 2, 4] {
        let p = StudyParams {
            nodes: 60,
            mean_degree: 3.0,
            weight_threshold: 0.6,
            k,
            broadcast: false,
            seed: 3,
        };
        let m = study_point_for(&p, &larger_pattern_rule(0.6)).unwrap();
        assert!(m.same_matches && m.baseline.matches > 0, "{m:?}");
        assert_eq!(m.baseline.k, 4);
    }
}

/// The thesis's findings (§7.4.1, Figure 7.3) on a quick version of
/// `studies/tarl-dpm.toml` (400 nodes, 5 graphs per point, summed): the
/// non-distributed cost is the same at every pattern frequency while DPM's
/// grows; DPM wins at low frequency, by more without broadcast; at degree 2
/// and low frequency k = 1 is the best view. The full study's numbers are in
/// the README.
#[test]
fn quick_study_reproduces_the_thesis_findings() {
    let total = |degree: f64, thr: f64, k: u32, broadcast: bool| {
        let (mut dpm, mut base) = (0u64, 0u64);
        for seed in 0..5 {
            let p = StudyParams { nodes: 400, mean_degree: degree, weight_threshold: thr, k, broadcast, seed };
            let m = study_point(&p).unwrap();
            assert!(m.same_matches, "{p:?}: {m:?}");
            dpm += m.dpm.messages;
            base += m.baseline.messages;
        }
        (dpm as f64, base as f64)
    };
    for broadcast in [false, true] {
        let (rare, base_rare) = total(2.0, 0.2, 1, broadcast);
        let (mid, base_mid) = total(2.0, 0.6, 1, broadcast);
        let (often, base_often) = total(2.0, 1.0, 1, broadcast);
        assert!(base_rare == base_mid && base_mid == base_often, "non-distributed cost is flat in the frequency");
        assert!(rare < mid && mid < often, "DPM's cost grows with the frequency: {rare} {mid} {often}");
        assert!(rare < base_rare && often > base_often, "DPM wins at low frequency only: {rare} vs {base_rare}, {often} vs {base_often}");
        for thr in [0.2, 0.4] {
            let k1 = total(2.0, thr, 1, broadcast).0;
            let k2 = total(2.0, thr, 2, broadcast).0;
            let k4 = total(2.0, thr, 4, broadcast).0;
            assert!(k1 < k2 && k1 < k4, "degree 2, threshold {thr}, broadcast {broadcast}: k = 1 best: {k1} {k2} {k4}");
        }
    }
    let (d, b) = total(2.0, 0.2, 1, false);
    let (db, bb) = total(2.0, 0.2, 1, true);
    assert!(d / b < db / bb, "DPM's benefit is larger without broadcast: {} vs {}", d / b, db / bb);
}
