//! Unit tests of the Pareto helpers and the shared parsing (the analyses
//! end to end: `tests/store_analysis.rs`).

use proptest::prelude::*;

use super::*;

/// Dominance by definition, for comparison.
fn naive_dominates(a: &[f64], b: &[f64], goals: &[Goal]) -> bool {
    let oriented =
        |v: &[f64]| v.iter().zip(goals).map(|(x, g)| if *g == Goal::Maximize { *x } else { -*x }).collect::<Vec<_>>();
    let (a, b) = (oriented(a), oriented(b));
    a.iter().zip(&b).all(|(x, y)| x >= y) && a.iter().zip(&b).any(|(x, y)| x > y)
}

#[test]
fn goals_parse() {
    assert_eq!("max".parse::<Goal>().unwrap(), Goal::Maximize);
    assert_eq!("minimize".parse::<Goal>().unwrap(), Goal::Minimize);
    assert!("up".parse::<Goal>().is_err());
    assert!(Goal::Minimize.better(1.0, 2.0) && !Goal::Maximize.better(1.0, 2.0));
    assert_eq!("jsonl".parse::<ExportFormat>().unwrap(), ExportFormat::Jsonl);
    assert!("xml".parse::<ExportFormat>().is_err());
}

#[test]
fn filters_need_a_key() {
    assert!(matches!(parse_filter("=x"), Err(AnalysisError::BadFilter(_))));
    assert_eq!(parse_filter(" link = rtt=20ms ").unwrap(), ("link".to_string(), "rtt=20ms".to_string()));
}

#[test]
fn equal_points_are_both_on_the_front() {
    let goals = [Goal::Minimize, Goal::Minimize];
    let v = pareto_front(&[vec![1.0, 1.0], vec![1.0, 1.0], vec![2.0, 2.0]], &goals);
    assert_eq!(v[0], None);
    assert_eq!(v[1], None);
    assert!(matches!(v[2], Some(0) | Some(1)));
}

proptest! {
    #[test]
    fn front_matches_the_definition(
        points in proptest::collection::vec(proptest::collection::vec(0i32..6, 3), 0..40),
        maximize in proptest::collection::vec(any::<bool>(), 3),
    ) {
        let points: Vec<Vec<f64>> = points.into_iter().map(|p| p.into_iter().map(f64::from).collect()).collect();
        let goals: Vec<Goal> = maximize.iter().map(|m| if *m { Goal::Maximize } else { Goal::Minimize }).collect();
        let verdict = pareto_front(&points, &goals);
        for (i, v) in verdict.iter().enumerate() {
            let dominated = points.iter().any(|q| naive_dominates(q, &points[i], &goals));
            match v {
                None => prop_assert!(!dominated, "front member {i} is dominated"),
                Some(f) => {
                    prop_assert!(verdict[*f].is_none(), "dominator {f} is not on the front");
                    prop_assert!(naive_dominates(&points[*f], &points[i], &goals));
                }
            }
            prop_assert_eq!(dominates(&points[i], &points[(i + 1) % points.len()], &goals),
                naive_dominates(&points[i], &points[(i + 1) % points.len()], &goals));
        }
    }
}
