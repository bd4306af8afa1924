//! Unit tests of the store (file-level behaviour: corrupt, locked, newer
//! schema: in `tests/store_analysis.rs`).

use std::time::Duration;

use super::*;
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::plan::PlannedExperiment;
use crate::record::Record;

fn study(name: &str, text: &str) -> StudyRecord {
    StudyRecord {
        name: name.into(),
        file_path: Some(format!("studies/{name}.toml")),
        file_text: text.into(),
        template: "sim-transfer".into(),
        template_version: 3,
        params: vec![
            ParamDecl::config("scheduler", ParamType::one_of(&["minrtt", "redundant"]), Value::Enum("minrtt".into())),
            ParamDecl::env("bytes", ParamType::Size, Value::Size(1 << 20)),
        ],
        planned: 4,
    }
}

fn finished(
    id: &str,
    scheduler: &str,
    bytes: u64,
    status: ExperimentStatus,
    records: Vec<Record>,
) -> FinishedExperiment {
    let mut params = Params::default();
    params.insert("scheduler", Value::Enum(scheduler.into()));
    params.insert("bytes", Value::Size(bytes));
    FinishedExperiment {
        planned: PlannedExperiment {
            id: id.into(),
            template: "sim-transfer".into(),
            template_version: 3,
            params,
            repetition: 1,
            seed: u64::MAX - 7,
            timeout: Duration::from_secs(30),
            exclusive: true,
            expected: Duration::from_millis(1500),
        },
        status,
        exit_code: (status != ExperimentStatus::Ok).then_some(3),
        error: (status != ExperimentStatus::Ok).then(|| "boom".to_string()),
        stderr_tail: "last line\n".into(),
        started: 1_700_000_000.25,
        ended: 1_700_000_001.5,
        host: "lab-host".into(),
        braid_version: "0.1.0".into(),
        git_commit: "abc123".into(),
        records,
    }
}

fn metric(name: &str, value: f64) -> Record {
    Record::Metric { name: name.into(), value }
}

#[test]
fn an_experiment_round_trips() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "x = 1\n")).unwrap();
    let records = vec![
        metric("fct_s", 1.5),
        Record::Series { name: "cwnd".into(), t: 0.5, value: 10.0 },
        Record::Series { name: "cwnd".into(), t: 0.25, value: 5.0 },
        Record::Warn { warn: "queue never filled".into() },
        metric("bytes_on_wire", 2e6),
        Record::Artifact { artifact: "report".into(), json: serde_json::json!({"phases": [1, 2]}) },
    ];
    let e = finished("e1", "redundant", 65536, ExperimentStatus::Ok, records);
    s.insert_experiment(sid, &e).unwrap();
    let row = s.experiment("e1").unwrap().unwrap();
    assert_eq!(row.planned(), e.planned);
    assert_eq!(row.study, "a");
    assert_eq!(row.status, ExperimentStatus::Ok);
    assert_eq!(row.seed, u64::MAX - 7);
    assert_eq!(row.scalars.get("fct_s"), Some(&1.5));
    assert_eq!(row.scalars.get("bytes_on_wire"), Some(&2e6));
    assert_eq!(row.warnings, vec!["queue never filled".to_string()]);
    assert_eq!(row.started, 1_700_000_000.25);
    assert_eq!(row.git_commit, "abc123");
    assert_eq!(s.series("e1", "cwnd").unwrap(), vec![(0.25, 5.0), (0.5, 10.0)]);
    assert_eq!(s.series_names("e1").unwrap(), vec!["cwnd".to_string()]);
    assert_eq!(s.metric_names(sid).unwrap(), vec!["bytes_on_wire".to_string(), "fct_s".to_string()]);
    assert_eq!(s.study_file_of("e1").unwrap().as_deref(), Some("x = 1\n"));
    assert_eq!(s.artifact("e1", "report").unwrap(), Some(serde_json::json!({"phases": [1, 2]})));
    assert_eq!(s.artifacts("e1").unwrap().len(), 1);
    assert!(s.experiment("nope").unwrap().is_none());
}

#[test]
fn repeated_and_non_finite_metrics_become_warnings() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    let e = finished(
        "e1",
        "minrtt",
        1,
        ExperimentStatus::Ok,
        vec![metric("x", 1.0), metric("x", 2.0), metric("y", f64::NAN)],
    );
    s.insert_experiment(sid, &e).unwrap();
    let row = s.experiment("e1").unwrap().unwrap();
    assert_eq!(row.scalars.get("x"), Some(&2.0));
    assert!(!row.scalars.contains_key("y"));
    assert_eq!(row.warnings.len(), 2, "{:?}", row.warnings);
    assert!(row.warnings.iter().any(|w| w.contains("metric y is NaN")));
    assert!(row.warnings.iter().any(|w| w.contains("metric x was reported 2 times")));
}

#[test]
fn duplicates_are_refused_and_failures_replaced() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    let failed = finished(
        "e1",
        "minrtt",
        1,
        ExperimentStatus::Failed,
        vec![metric("x", 1.0), Record::Warn { warn: "w".into() }],
    );
    s.insert_experiment(sid, &failed).unwrap();
    assert_eq!(s.stored_experiments(sid).unwrap().get("e1"), Some(&ExperimentStatus::Failed));
    let ok = finished("e1", "minrtt", 1, ExperimentStatus::Ok, vec![metric("x", 2.0)]);
    s.insert_experiment(sid, &ok).unwrap();
    let row = s.experiment("e1").unwrap().unwrap();
    assert_eq!((row.status, row.scalars.get("x"), row.warnings.len()), (ExperimentStatus::Ok, Some(&2.0), 0));
    match s.insert_experiment(sid, &ok) {
        Err(StoreError::Duplicate(id)) => assert_eq!(id, "e1"),
        other => panic!("{other:?}"),
    }
    // The refused insert changed nothing.
    assert_eq!(s.experiment("e1").unwrap().unwrap().scalars.get("x"), Some(&2.0));
    let other = s.upsert_study(&study("b", "")).unwrap();
    assert!(matches!(s.insert_experiment(other, &ok), Err(StoreError::IdInOtherStudy { .. })));
    assert!(matches!(s.insert_experiment(999, &ok), Err(StoreError::UnknownStudy(999))));
}

#[test]
fn a_batch_is_all_or_nothing() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    s.insert_experiment(sid, &finished("e2", "minrtt", 1, ExperimentStatus::Ok, vec![])).unwrap();
    let batch = vec![
        finished("e1", "minrtt", 1, ExperimentStatus::Ok, vec![]),
        finished("e2", "minrtt", 1, ExperimentStatus::Ok, vec![]),
    ];
    assert!(matches!(s.insert_experiments(sid, &batch), Err(StoreError::Duplicate(_))));
    assert!(s.experiment("e1").unwrap().is_none());
}

#[test]
fn delete_failed_removes_only_failures() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    s.insert_experiment(sid, &finished("ok", "minrtt", 1, ExperimentStatus::Ok, vec![metric("x", 1.0)])).unwrap();
    s.insert_experiment(sid, &finished("f", "minrtt", 2, ExperimentStatus::Failed, vec![metric("x", 1.0)])).unwrap();
    s.insert_experiment(sid, &finished("t", "minrtt", 3, ExperimentStatus::TimedOut, vec![])).unwrap();
    let counts = s.counts(sid).unwrap();
    assert_eq!((counts.ok, counts.failed, counts.timed_out), (1, 1, 1));
    assert_eq!(s.delete_failed(sid).unwrap(), 2);
    assert_eq!(s.stored_experiments(sid).unwrap().len(), 1);
    // Their children went with them.
    let n: i64 = s.conn.query_row("SELECT count(*) FROM scalars", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn upsert_updates_and_keeps_every_file_text() {
    let mut s = Store::open_in_memory().unwrap();
    let id = s.upsert_study(&study("a", "v1")).unwrap();
    s.insert_experiment(id, &finished("e1", "minrtt", 1, ExperimentStatus::Ok, vec![])).unwrap();
    let mut changed = study("a", "v2");
    changed.planned = 9;
    assert_eq!(s.upsert_study(&changed).unwrap(), id);
    s.insert_experiment(id, &finished("e2", "minrtt", 2, ExperimentStatus::Ok, vec![])).unwrap();
    let info = s.study("a").unwrap().unwrap();
    assert_eq!((info.file_text.as_str(), info.planned, info.counts.ok), ("v2", 9, 2));
    assert_eq!(info.params, study("a", "").params);
    assert_eq!(s.study_file_of("e1").unwrap().as_deref(), Some("v1"));
    assert_eq!(s.study_file_of("e2").unwrap().as_deref(), Some("v2"));
    assert_eq!(s.studies().unwrap().len(), 1);
}

#[test]
fn param_values_and_grouped_scalars() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    let mut n = 0;
    for (sched, bytes, x) in
        [("minrtt", 1u64 << 20, 1.0), ("minrtt", 4096, 2.0), ("redundant", 4096, 3.0), ("redundant", 4096, 5.0)]
    {
        n += 1;
        s.insert_experiment(sid, &finished(&format!("e{n}"), sched, bytes, ExperimentStatus::Ok, vec![metric("x", x)]))
            .unwrap();
    }
    s.insert_experiment(sid, &finished("bad", "minrtt", 4096, ExperimentStatus::Failed, vec![metric("x", 100.0)]))
        .unwrap();
    let pv = s.param_values(sid).unwrap();
    assert_eq!(pv[0].key, "bytes");
    // Numeric order, not text order ("1MiB" < "4KiB" as text).
    assert_eq!(pv[0].values.iter().map(|v| v.text.as_str()).collect::<Vec<_>>(), vec!["4KiB", "1MiB"]);
    assert_eq!(pv[0].values[0].experiments, 4);

    let q = ScalarQuery {
        study_id: sid,
        filters: vec![],
        group_by: vec!["bytes".into(), "scheduler".into()],
        metrics: vec!["x".into()],
    };
    let t = s.scalars(&q).unwrap();
    assert_eq!(t.experiments, 4, "the failed experiment takes no part");
    assert_eq!(t.groups, vec![vec!["4KiB", "minrtt"], vec!["4KiB", "redundant"], vec!["1MiB", "minrtt"]]);
    let mut by_group: Vec<(u32, f64)> = t.points.iter().map(|p| (p.group, p.value)).collect();
    by_group.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(by_group, vec![(0, 2.0), (1, 3.0), (1, 5.0), (2, 1.0)]);

    let q = ScalarQuery { filters: vec![("scheduler".into(), "redundant".into())], group_by: vec![], ..q };
    let t = s.scalars(&q).unwrap();
    assert_eq!((t.experiments, t.groups.len(), t.points.len()), (2, 1, 2));
}

#[test]
fn logs_keep_order_and_limit() {
    let mut s = Store::open_in_memory().unwrap();
    let sid = s.upsert_study(&study("a", "")).unwrap();
    for i in 0..5 {
        s.log(Some(sid), Some("e1"), "info", &format!("line {i}")).unwrap();
    }
    s.log(None, None, "warn", "global").unwrap();
    let lines = s.logs(Some(sid), 2).unwrap();
    assert_eq!(lines.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(), vec!["line 3", "line 4"]);
    assert_eq!(s.logs(None, 10).unwrap().len(), 6);
}

#[test]
fn status_text_round_trips() {
    for st in ExperimentStatus::ALL {
        assert_eq!(ExperimentStatus::parse(st.as_str()), Some(st));
        assert_eq!(serde_json::to_string(&st).unwrap(), format!("\"{}\"", st.as_str()));
    }
}

/// The frame answers as the SQL path does: a randomized study (every
/// status, keys some experiments lack, a stored value spelled like
/// UNSET, metrics some experiments lack) beside another study whose rows
/// interleave with it.
#[test]
fn frame_matches_sql() {
    let mut store = Store::open_in_memory().unwrap();
    let a = store.upsert_study(&study("a", "x")).unwrap();
    let b = store.upsert_study(&study("b", "y")).unwrap();
    let mut seed = 7u64;
    let mut next = |n: u64| {
        seed = braid_core::splitmix64(seed);
        seed % n
    };
    let statuses = [ExperimentStatus::Ok, ExperimentStatus::Ok, ExperimentStatus::Failed, ExperimentStatus::TimedOut];
    for i in 0..160u64 {
        let mut e = finished(&format!("e{i}"), "minrtt", 0, statuses[next(4) as usize], vec![]);
        let mut params = Params::default();
        if next(8) != 0 {
            let s = ["minrtt", "redundant", "round_robin", query::UNSET][next(4) as usize];
            params.insert("scheduler", Value::Enum(s.into()));
        }
        if next(6) != 0 {
            params.insert("bytes", Value::Size([1 << 10, 1 << 20, 1 << 30][next(3) as usize]));
        }
        params.insert("loss", Value::Float([0.0, 0.01, 0.05, 0.1][next(4) as usize]));
        if next(3) != 0 {
            params.insert("rtt", Value::Int(next(5) as i64 * 10));
        }
        e.planned.params = params;
        e.records = Vec::new();
        for m in ["fct_s", "goodput", "a_first", "zeta"] {
            if next(5) != 0 {
                e.records.push(metric(m, next(1000) as f64 / 7.0 - 50.0));
            }
        }
        let study_id = if next(3) == 0 { b } else { a };
        store.insert_experiment(study_id, &e).unwrap();
    }
    let keys = ["scheduler", "bytes", "loss", "rtt", "missing"].map(String::from);
    let metrics = ["fct_s", "goodput", "a_first", "zeta", "none"].map(String::from);
    for id in [a, b] {
        let frame = store.frame(id).unwrap();
        assert_eq!(frame.param_values(), store.param_values(id).unwrap());
        assert_eq!(frame.metric_names(), store.metric_names(id).unwrap().as_slice());
        for m in &metrics {
            assert_eq!(frame.has_metric(m), store.has_metric(id, m).unwrap(), "{m}");
        }
        let filter_sets: Vec<Vec<(String, String)>> = vec![
            vec![],
            vec![("loss".into(), "0.01".into())],
            vec![("scheduler".into(), "redundant".into()), ("bytes".into(), "1MiB".into())],
            vec![("scheduler".into(), query::UNSET.into())],
            vec![("rtt".into(), "no such value".into())],
            vec![("missing".into(), "1".into())],
        ];
        for (i, filters) in filter_sets.iter().enumerate() {
            for width in 0..=3 {
                let group_by: Vec<String> = keys.iter().cycle().skip(i).take(width).cloned().collect();
                let metrics: Vec<String> = metrics.iter().cycle().skip(i + width).take(1 + (i + width) % 4).cloned().collect();
                let q = ScalarQuery { study_id: id, filters: filters.clone(), group_by: group_by.clone(), metrics: metrics.clone() };
                let want = store.scalars(&q).unwrap();
                let got = frame.table(filters, &group_by, &metrics);
                assert_eq!(got, want, "study {id}, filters {filters:?}, group-by {group_by:?}, metrics {metrics:?}");
            }
        }
    }
}
