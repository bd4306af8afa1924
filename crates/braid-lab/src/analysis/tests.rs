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

/// The export from the study loaded once writes the very bytes the former
/// one did from whole experiment rows (`Store::experiments`, parameters
/// from their JSON): every status, an undeclared key, keys and metrics
/// some experiments lack, a metric named like a parameter, a cell that
/// needs quoting, and rows of another study interleaved.
#[test]
fn export_matches_whole_rows() {
    use std::time::Duration;

    use crate::param::{ParamDecl, ParamType, Params, Value};
    use crate::plan::PlannedExperiment;
    use crate::record::Record;
    use crate::store::{ExperimentStatus, FinishedExperiment, Store, StudyRecord};

    let mut store = Store::open_in_memory().unwrap();
    let record = |name: &str| StudyRecord {
        name: name.into(),
        file_path: None,
        file_text: String::new(),
        template: "sim-transfer".into(),
        template_version: 1,
        params: vec![
            ParamDecl::config("scheduler", ParamType::String, Value::String("a".into())),
            ParamDecl::env("bytes", ParamType::Size, Value::Size(1 << 20)),
            ParamDecl::env("loss", ParamType::float_range(0.0, 1.0), Value::Float(0.0)),
        ],
        planned: 100,
    };
    let ids = [store.upsert_study(&record("s")).unwrap(), store.upsert_study(&record("other")).unwrap()];
    let mut seed = 11u64;
    let mut next = |n: u64| {
        seed = braid_core::splitmix64(seed);
        seed % n
    };
    let statuses = [ExperimentStatus::Ok, ExperimentStatus::Failed, ExperimentStatus::TimedOut];
    for i in 0..90u64 {
        let mut params = Params::default();
        params.insert("scheduler", Value::String(["a", "b,c", "say \"hi\""][next(3) as usize].into()));
        if next(4) != 0 {
            params.insert("bytes", Value::Size(1 << (10 * (1 + next(3)))));
        }
        params.insert("loss", Value::Float(next(4) as f64 / 100.0));
        if next(5) == 0 {
            params.insert("extra", Value::Int(next(3) as i64));
        }
        let mut records = Vec::new();
        for m in ["fct_s", "loss", "zz", "a"] {
            if next(4) != 0 {
                records.push(Record::Metric { name: m.into(), value: (next(10_000) as f64 - 5000.0) / 3.0 });
            }
        }
        let status = statuses[next(3) as usize];
        let e = FinishedExperiment {
            planned: PlannedExperiment {
                id: format!("e{i}"),
                template: "sim-transfer".into(),
                template_version: 1,
                params,
                repetition: next(4) as u32,
                seed: u64::MAX - next(1000),
                timeout: Duration::from_secs(1),
                exclusive: false,
                expected: Duration::from_secs(1),
            },
            status,
            exit_code: None,
            error: None,
            stderr_tail: String::new(),
            started: 0.0,
            ended: 1.0,
            host: "h".into(),
            braid_version: "0".into(),
            git_commit: "0".into(),
            records,
        };
        store.insert_experiment(ids[next(4) as usize / 3], &e).unwrap();
    }

    // The former export, from whole rows.
    let former = |format: ExportFormat| {
        let view = common::StudyView::load(&store, "s").unwrap();
        let keys = view.keys();
        let metrics = store.metric_names(view.info.id).unwrap();
        let rows = store.experiments(view.info.id).unwrap();
        let mut columns: Vec<String> = ["id", "status", "repetition", "seed"].map(String::from).to_vec();
        columns.extend(keys.iter().cloned());
        for m in &metrics {
            columns.push(if columns.contains(m) { format!("metric:{m}") } else { m.clone() });
        }
        let quote = |c: &str| if c.contains([',', '"', '\n', '\r']) { format!("\"{}\"", c.replace('"', "\"\"")) } else { c.to_string() };
        let mut out = String::new();
        if format == ExportFormat::Csv {
            out.push_str(&columns.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
            out.push_str("\r\n");
        }
        for r in &rows {
            match format {
                ExportFormat::Csv => {
                    let mut cells: Vec<String> =
                        vec![r.id.clone(), r.status.as_str().into(), r.repetition.to_string(), r.seed.to_string()];
                    cells.extend(keys.iter().map(|k| r.params.get(k).map(|v| v.to_text()).unwrap_or_default()));
                    cells.extend(metrics.iter().map(|m| r.scalars.get(m).map(|v| v.to_string()).unwrap_or_default()));
                    out.push_str(&cells.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
                    out.push_str("\r\n");
                }
                ExportFormat::Jsonl => {
                    let params: serde_json::Map<String, serde_json::Value> = keys
                        .iter()
                        .filter_map(|k| r.params.get(k).ok().map(|v| (k.clone(), serde_json::Value::String(v.to_text()))))
                        .collect();
                    #[derive(serde::Serialize)]
                    struct Row<'a> {
                        id: &'a str,
                        status: &'a str,
                        repetition: u32,
                        seed: u64,
                        params: serde_json::Map<String, serde_json::Value>,
                        metrics: &'a std::collections::BTreeMap<String, f64>,
                    }
                    let row = Row {
                        id: &r.id,
                        status: r.status.as_str(),
                        repetition: r.repetition,
                        seed: r.seed,
                        params,
                        metrics: &r.scalars,
                    };
                    out.push_str(&serde_json::to_string(&row).unwrap());
                    out.push('\n');
                }
            }
        }
        (out, rows.len() as u64, columns)
    };
    for format in [ExportFormat::Csv, ExportFormat::Jsonl] {
        let (want, n, columns) = former(format);
        let mut got = Vec::new();
        let summary = export(&store, "s", format, &mut got).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want, "{format:?}");
        assert_eq!((summary.experiments, summary.columns), (n, columns));
        assert!(n > 40, "{n} experiments");
    }
}
