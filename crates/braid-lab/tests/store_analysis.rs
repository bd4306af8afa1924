//! The store on disk (migrations, reopening, refusals that leave the file
//! as it was, duplicates, retries) and the analyses on hand-made and random
//! studies, checked against values computed independently here (naive
//! statistics, reference values from numpy/scipy).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use braid_lab::analysis::{
    self, best, dominates, export, pareto, series, show, status, AnalysisError, BestQuery, ExportFormat, Goal,
    Objective, ParetoQuery, ShowQuery,
};
use braid_lab::param::{ParamDecl, ParamType, Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::record::Record;
use braid_lab::store::schema::SCHEMA_VERSION;
use braid_lab::store::{ExperimentStatus, FinishedExperiment, Store, StoreError, StudyRecord};
use proptest::prelude::*;

// ---------------------------------------------------------------- fixtures

fn decls() -> Vec<ParamDecl> {
    vec![
        ParamDecl::config("scheduler", ParamType::String, Value::String("a".into())),
        ParamDecl::config("gain", ParamType::int_range(1, 9), Value::Int(1)),
        ParamDecl::env("loss", ParamType::float_range(0.0, 1.0), Value::Float(0.0)),
        ParamDecl::env("bytes", ParamType::Size, Value::Size(1 << 20)),
    ]
}

fn study_record(name: &str, planned: u64) -> StudyRecord {
    StudyRecord {
        name: name.into(),
        file_path: Some(format!("studies/{name}.toml")),
        file_text: format!("# {name}\ntemplate = \"sim-transfer\"\n"),
        template: "sim-transfer".into(),
        template_version: 2,
        params: decls(),
        planned,
    }
}

/// One experiment: `scheduler`, `gain`, `loss` as given, `bytes` 1 MiB.
fn exp(
    id: &str,
    scheduler: &str,
    gain: i64,
    loss: f64,
    rep: u32,
    status: ExperimentStatus,
    metrics: &[(&str, f64)],
) -> FinishedExperiment {
    let mut params = Params::default();
    params.insert("scheduler", Value::String(scheduler.into()));
    params.insert("gain", Value::Int(gain));
    params.insert("loss", Value::Float(loss));
    params.insert("bytes", Value::Size(1 << 20));
    FinishedExperiment {
        planned: PlannedExperiment {
            id: id.into(),
            template: "sim-transfer".into(),
            template_version: 2,
            params,
            repetition: rep,
            seed: 42 + u64::from(rep),
            timeout: Duration::from_secs(10),
            exclusive: false,
            expected: Duration::from_secs(1),
        },
        status,
        exit_code: if status == ExperimentStatus::Ok { Some(0) } else { Some(1) },
        error: (status != ExperimentStatus::Ok).then(|| "exit status 1".into()),
        stderr_tail: String::new(),
        started: 1.0,
        ended: 2.0,
        host: "h".into(),
        braid_version: "0.1.0".into(),
        git_commit: "c0ffee".into(),
        records: metrics.iter().map(|(n, v)| Record::Metric { name: n.to_string(), value: *v }).collect(),
    }
}

fn ok(id: &str, scheduler: &str, gain: i64, loss: f64, rep: u32, metrics: &[(&str, f64)]) -> FinishedExperiment {
    exp(id, scheduler, gain, loss, rep, ExperimentStatus::Ok, metrics)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1.0)
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn sidecars_absent(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    ["-wal", "-shm", "-journal"].iter().all(|s| !path.with_file_name(format!("{name}{s}")).exists())
}

// ------------------------------------------------------------ store files

#[test]
fn migrations_run_on_an_empty_file() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    std::fs::write(&path, b"").unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    drop(store);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let mode: String = raw.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> = raw
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in ["experiments", "logs", "params", "scalars", "series", "studies", "warnings"] {
        assert!(tables.iter().any(|x| x == t), "{t} missing from {tables:?}");
    }
}

#[test]
fn reopening_keeps_everything_and_migrates_nothing() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    {
        let mut s = Store::open(&path).unwrap();
        let id = s.upsert_study(&study_record("s", 2)).unwrap();
        s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[("x", 1.5)])).unwrap();
    }
    for read_only in [false, true] {
        let s = if read_only { Store::open_read_only(&path).unwrap() } else { Store::open(&path).unwrap() };
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
        let id = s.study_id("s").unwrap().unwrap();
        assert_eq!(s.stored_experiments(id).unwrap().len(), 1);
        assert_eq!(s.experiment("e1").unwrap().unwrap().scalars["x"], 1.5);
    }
    // A read-only store cannot write.
    let mut ro = Store::open_read_only(&path).unwrap();
    assert!(ro.upsert_study(&study_record("t", 1)).is_err());
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    drop(Store::open(&path).unwrap());
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.pragma_update(None, "user_version", 99).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    for result in [Store::open(&path), Store::open_read_only(&path)] {
        match result {
            Err(e @ StoreError::NewerSchema { found: 99, supported, .. }) => {
                assert_eq!(supported, SCHEMA_VERSION);
                let msg = e.to_string();
                assert!(msg.contains("99") && msg.contains(&format!("version {SCHEMA_VERSION}")), "{msg}");
            }
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_untouched() {
    let dir = temp();
    let path = dir.path().join("notes.db");
    let text: Vec<u8> = b"these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    for result in [Store::open(&path), Store::open_read_only(&path)] {
        match result {
            Err(e @ StoreError::Corrupt { .. }) => assert!(e.to_string().contains("not a database"), "{e}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&path).unwrap(), text);
    assert!(sidecars_absent(&path));
}

#[test]
fn a_damaged_database_gives_an_error_not_a_panic() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    {
        let mut s = Store::open(&path).unwrap();
        let id = s.upsert_study(&study_record("s", 1)).unwrap();
        s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[("x", 1.0)])).unwrap();
    }
    // Garble the schema page behind the 100-byte header.
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[100..4096] {
        *b = 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    match Store::open(&path) {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn another_programs_database_is_refused() {
    let dir = temp();
    let path = dir.path().join("other.db");
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance REAL); INSERT INTO accounts VALUES (1, 9.5);",
        )
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(Store::open(&path), Err(StoreError::NotALabDatabase { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_missing_file_is_not_created_by_a_reader() {
    let dir = temp();
    let path = dir.path().join("absent.db");
    assert!(matches!(Store::open_read_only(&path), Err(StoreError::NotFound { .. })));
    assert!(!path.exists());
}

#[test]
fn a_locked_database_reports_locked_after_the_busy_timeout() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    let id = Store::open(&path).unwrap().upsert_study(&study_record("s", 1)).unwrap();
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut s = Store::open_with_timeout(&path, Duration::from_millis(300)).unwrap();
    let t = Instant::now();
    match s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[])) {
        Err(e @ StoreError::Locked { .. }) => assert!(e.to_string().contains("locked"), "{e}"),
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(250), "gave up after {:?}", t.elapsed());
    holder.execute_batch("COMMIT").unwrap();
    s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[])).unwrap();

    // A new file held exclusively (rollback journal) cannot even be read.
    let path = dir.path().join("held.db");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("CREATE TABLE t (x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);").unwrap();
    assert!(matches!(Store::open_with_timeout(&path, Duration::from_millis(100)), Err(StoreError::Locked { .. })));
}

#[test]
fn duplicates_are_refused_and_failures_are_retried_across_reopens() {
    let dir = temp();
    let path = dir.path().join("lab.db");
    let id = {
        let mut s = Store::open(&path).unwrap();
        let id = s.upsert_study(&study_record("s", 3)).unwrap();
        s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[("x", 1.0)])).unwrap();
        s.insert_experiment(id, &exp("e2", "a", 1, 0.0, 1, ExperimentStatus::TimedOut, &[("x", 99.0)])).unwrap();
        id
    };
    let mut s = Store::open(&path).unwrap();
    assert!(
        matches!(s.insert_experiment(id, &ok("e1", "a", 1, 0.0, 0, &[("x", 2.0)])), Err(StoreError::Duplicate(d)) if d == "e1")
    );
    assert_eq!(s.experiment("e1").unwrap().unwrap().scalars["x"], 1.0, "a refused insert changes nothing");
    s.insert_experiment(id, &ok("e2", "a", 1, 0.0, 1, &[("x", 3.0)])).unwrap();
    let e2 = s.experiment("e2").unwrap().unwrap();
    assert_eq!((e2.status, e2.scalars["x"], e2.error.clone()), (ExperimentStatus::Ok, 3.0, None));
    let stored = s.stored_experiments(id).unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.values().all(|st| *st == ExperimentStatus::Ok));
}

// ------------------------------------------------------------- analyses

/// The numpy data set: mean 5.65, percentiles 2.435 / 5.55 / 9.52.
const NUMPY_X: [f64; 10] = [3.1, 4.1, 5.9, 2.6, 5.3, 5.8, 9.7, 9.3, 2.3, 8.4];

fn naive_summary(values: &[f64]) -> (f64, f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    let sd = if v.len() > 1 {
        (values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        f64::NAN
    };
    (mean, median, sd)
}

/// Scheduler a/b × loss 0/0.02, gain fixed; numpy's data set for (a, 0).
fn small_study() -> (Store, BTreeMap<(String, String), Vec<f64>>) {
    let mut s = Store::open_in_memory().unwrap();
    let id = s.upsert_study(&study_record("small", 40)).unwrap();
    let mut expected: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut n = 0;
    for (sched, loss) in [("a", 0.0), ("a", 0.02), ("b", 0.0), ("b", 0.02)] {
        for rep in 0..10u32 {
            let x = if (sched, loss) == ("a", 0.0) {
                NUMPY_X[rep as usize]
            } else {
                10.0 * loss + f64::from(rep * rep) + sched.len() as f64
            };
            n += 1;
            s.insert_experiment(id, &ok(&format!("e{n}"), sched, 1, loss, rep, &[("x", x), ("y", 2.0 * x)])).unwrap();
            expected.entry((sched.to_string(), Value::Float(loss).to_text())).or_default().push(x);
        }
    }
    // Failures take no part.
    s.insert_experiment(id, &exp("bad", "a", 1, 0.0, 11, ExperimentStatus::Failed, &[("x", 1e9)])).unwrap();
    (s, expected)
}

#[test]
fn show_matches_numpy_and_naive_statistics() {
    let (s, expected) = small_study();
    let r = show(&s, &ShowQuery { study: "small".into(), metrics: vec!["x".into()], ..Default::default() }).unwrap();
    // Default group-by: the parameters that vary, in declaration order.
    assert_eq!(r.group_by, vec!["scheduler".to_string(), "loss".into()]);
    assert_eq!(r.experiments, 40);
    assert_eq!(r.rows.len(), 4);
    for row in &r.rows {
        let values = &expected[&(row.group[0].clone(), row.group[1].clone())];
        let (mean, median, sd) = naive_summary(values);
        let sm = &row.summary;
        assert_eq!(sm.n, 10);
        assert!(
            close(sm.mean, mean, 1e-12) && close(sm.median, median, 1e-12) && close(sm.sd.unwrap(), sd, 1e-12),
            "{row:?}"
        );
    }
    let a0 = r.rows.iter().find(|r| r.group == ["a", "0.0"]).unwrap();
    assert!(close(a0.summary.p5, 2.435, 1e-12) && close(a0.summary.p95, 9.52, 1e-12), "{a0:?}");
    let (lo, hi) = a0.summary.ci95.unwrap();
    assert!(close(lo, 3.699276529281285, 1e-10) && close(hi, 7.600723470718714, 1e-10));
    let table = r.table();
    assert_eq!(table.columns[..3], ["scheduler".to_string(), "loss".into(), "metric".into()]);
    assert_eq!(table.rows.len(), 4);
    assert!(serde_json::to_string(&r).unwrap().contains("\"ci95\""));
}

#[test]
fn show_filters_and_groups_as_asked() {
    let (s, expected) = small_study();
    // A filter's value is canonicalized with the parameter's type: 0.02 = 2e-2.
    let q = ShowQuery {
        study: "small".into(),
        filters: vec!["loss=2e-2".into()],
        group_by: Some(vec![]),
        metrics: vec!["y".into()],
    };
    let r = show(&s, &q).unwrap();
    assert_eq!(r.filters, vec![("loss".to_string(), "0.02".to_string())]);
    assert_eq!(r.rows.len(), 1);
    let mut both: Vec<f64> = expected[&("a".into(), "0.02".into())].clone();
    both.extend(&expected[&("b".into(), "0.02".into())]);
    let doubled: Vec<f64> = both.iter().map(|x| 2.0 * x).collect();
    assert!(close(r.rows[0].summary.mean, naive_summary(&doubled).0, 1e-12));
    assert_eq!(r.rows[0].summary.n, 20);
    // Size filter in another unit finds the canonical text.
    let r = show(&s, &ShowQuery { study: "small".into(), filters: vec!["bytes=1048576".into()], ..Default::default() })
        .unwrap();
    assert_eq!(r.experiments, 40);

    let err = |q: ShowQuery| show(&s, &q).unwrap_err().to_string();
    let e = err(ShowQuery { study: "small".into(), filters: vec!["colour=red".into()], ..Default::default() });
    assert!(e.contains("colour") && e.contains("scheduler, gain, loss, bytes"), "{e}");
    let e = err(ShowQuery { study: "small".into(), filters: vec!["loss".into()], ..Default::default() });
    assert!(e.contains("KEY=VALUE"), "{e}");
    let e = err(ShowQuery { study: "small".into(), filters: vec!["loss=0.5".into()], ..Default::default() });
    assert!(e.contains("0.0, 0.02"), "{e}");
    let e = err(ShowQuery { study: "small".into(), group_by: Some(vec!["nope".into()]), ..Default::default() });
    assert!(e.contains("group-by `nope`"), "{e}");
    let e = err(ShowQuery { study: "small".into(), metrics: vec!["z".into()], ..Default::default() });
    assert!(e.contains("x, y"), "{e}");
    let e = err(ShowQuery { study: "big".into(), ..Default::default() });
    assert!(e.contains("studies: small"), "{e}");
}

#[test]
fn best_on_a_hand_made_study() {
    let mut s = Store::open_in_memory().unwrap();
    let id = s.upsert_study(&study_record("hand", 24)).unwrap();
    let data: [(&str, f64, [f64; 4]); 6] = [
        ("a", 0.0, [10.0, 11.0, 12.0, 13.0]),
        ("b", 0.0, [20.0, 21.0, 22.0, 23.0]),
        ("c", 0.0, [20.5, 20.5, 21.5, 22.5]),
        ("a", 0.02, [30.0, 31.0, 30.0, 31.0]),
        ("b", 0.02, [5.0, 6.0, 7.0, 8.0]),
        ("c", 0.02, [1.0, 2.0, 3.0, 4.0]),
    ];
    let mut n = 0;
    for (sched, loss, values) in data {
        for (rep, v) in values.iter().enumerate() {
            n += 1;
            s.insert_experiment(id, &ok(&format!("h{n}"), sched, 1, loss, rep as u32, &[("goodput", *v)])).unwrap();
        }
    }
    let r =
        best(&s, &BestQuery { study: "hand".into(), metric: "goodput".into(), goal: Goal::Maximize, filters: vec![] })
            .unwrap();
    assert_eq!(r.environment_keys, vec!["loss".to_string()]);
    assert_eq!(r.configuration_keys, vec!["scheduler".to_string()]);
    assert_eq!(r.rows.len(), 2);

    let r0 = &r.rows[0];
    assert_eq!(r0.environment, vec!["0.0"]);
    assert_eq!((r0.best.configuration[0].as_str(), r0.best.mean, r0.best.n), ("b", 21.5, 4));
    let ru = r0.runner_up.as_ref().unwrap();
    assert_eq!((ru.configuration[0].as_str(), ru.mean), ("c", 21.25));
    assert!(close(r0.margin.unwrap(), 0.25, 1e-12));
    assert!(close(r0.relative_margin.unwrap(), 0.25 / 21.25, 1e-12));
    // scipy.stats.ttest_ind([20,21,22,23], [20.5,20.5,21.5,22.5], equal_var=False)
    let t = r0.test.unwrap();
    assert!(close(t.p, 0.7671178257329174, 1e-9) && close(t.df, 5.5335892514395395, 1e-9), "{t:?}");
    assert_eq!((t.n_a, t.n_b, r0.significant), (4, 4, Some(false)));

    let r1 = &r.rows[1];
    assert_eq!(
        (r1.best.configuration[0].as_str(), r1.runner_up.as_ref().unwrap().configuration[0].as_str()),
        ("a", "b")
    );
    assert!(close(r1.test.unwrap().p, 3.0914877071948014e-06, 1e-6), "{:?}", r1.test);
    assert_eq!(r1.significant, Some(true));

    // Minimizing flips the ranking.
    let r =
        best(&s, &BestQuery { study: "hand".into(), metric: "goodput".into(), goal: Goal::Minimize, filters: vec![] })
            .unwrap();
    assert_eq!(r.rows[0].best.configuration, vec!["a"]);
    assert_eq!(r.rows[1].best.configuration, vec!["c"]);
    assert!(close(r.rows[1].margin.unwrap(), 4.0, 1e-12));
    let t = r.table();
    assert_eq!(t.rows[1][1], "scheduler=c");
    assert_eq!(t.rows[1].last().unwrap(), "yes");
}

#[test]
fn pareto_on_a_hand_made_study() {
    let mut s = Store::open_in_memory().unwrap();
    let id = s.upsert_study(&study_record("p", 10)).unwrap();
    // (fct, bytes) to minimize: A, B, C on the front; D dominated by B, E by A.
    let points = [("A", 1.0, 10.0), ("B", 2.0, 5.0), ("C", 3.0, 3.0), ("D", 2.5, 6.0), ("E", 1.0, 11.0)];
    let mut n = 0;
    for (sched, fct, bytes) in points {
        for (loss, shift) in [(0.0, -0.5), (0.02, 0.5)] {
            n += 1;
            s.insert_experiment(
                id,
                &ok(&format!("p{n}"), sched, 1, loss, 0, &[("fct", fct + shift), ("bytes", bytes + shift)]),
            )
            .unwrap();
        }
    }
    let objectives = vec![
        Objective { metric: "fct".into(), goal: Goal::Minimize },
        Objective { metric: "bytes".into(), goal: Goal::Minimize },
    ];
    let q = ParetoQuery { study: "p".into(), objectives: objectives.clone(), per_environment: false, filters: vec![] };
    let r = pareto(&s, &q).unwrap();
    assert_eq!(r.fronts.len(), 1);
    let f = &r.fronts[0];
    let names = |v: &[analysis::ParetoPoint]| v.iter().map(|p| p.configuration[0].clone()).collect::<Vec<_>>();
    assert_eq!(names(&f.front), vec!["A", "B", "C"]);
    assert_eq!(names(&f.dominated), vec!["E", "D"]);
    assert_eq!(f.dominated[0].dominated_by, Some(vec!["A".to_string()]));
    assert_eq!(f.dominated[1].dominated_by, Some(vec!["B".to_string()]));
    assert_eq!(f.front[0].means, vec![1.0, 10.0], "pooled over both environments");
    assert_eq!(f.front[0].n, vec![2, 2]);

    let r = pareto(&s, &ParetoQuery { per_environment: true, ..q.clone() }).unwrap();
    assert_eq!(r.fronts.len(), 2);
    assert_eq!(r.fronts[1].environment, vec!["0.02"]);
    assert_eq!(names(&r.fronts[1].front), vec!["A", "B", "C"]);
    assert_eq!(r.fronts[1].front[0].means, vec![1.5, 10.5]);
    assert_eq!(r.table().rows.len(), 10);

    // Maximizing bytes instead: E (1, 11) now dominates A and C's 3 is worst.
    let q2 = ParetoQuery {
        objectives: vec![objectives[0].clone(), Objective { metric: "bytes".into(), goal: Goal::Maximize }],
        ..q.clone()
    };
    let r = pareto(&s, &q2).unwrap();
    assert_eq!(names(&r.fronts[0].front), vec!["E"]);
    assert!(matches!(
        pareto(&s, &ParetoQuery { objectives: vec![objectives[0].clone()], ..q }),
        Err(AnalysisError::TooFewObjectives(1))
    ));
}

#[test]
fn export_series_and_status() {
    let (mut s, _) = small_study();
    let id = s.study_id("small").unwrap().unwrap();
    let mut e = ok("with-series", "a, \"quoted\"", 2, 0.0, 0, &[("x", 0.1)]);
    e.records.push(Record::Series { name: "cwnd".into(), t: 0.2, value: 20.0 });
    e.records.push(Record::Series { name: "cwnd".into(), t: 0.1, value: 10.0 });
    s.insert_experiment(id, &e).unwrap();

    let mut csv = Vec::new();
    let summary = export(&s, "small", ExportFormat::Csv, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(summary.experiments, 42);
    assert_eq!(lines.len(), 43);
    assert_eq!(lines[0], "id,status,repetition,seed,scheduler,gain,loss,bytes,x,y");
    assert_eq!(lines[1], "e1,ok,0,42,a,1,0.0,1MiB,3.1,6.2");
    assert!(lines.iter().any(|l| l.starts_with("bad,failed,")));
    assert_eq!(*lines.last().unwrap(), "with-series,ok,0,42,\"a, \"\"quoted\"\"\",2,0.0,1MiB,0.1,");

    let mut jsonl = Vec::new();
    export(&s, "small", ExportFormat::Jsonl, &mut jsonl).unwrap();
    let rows: Vec<serde_json::Value> =
        String::from_utf8(jsonl).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 42);
    assert_eq!(rows[0]["params"]["bytes"], "1MiB");
    assert_eq!(rows[0]["metrics"]["y"], 6.2);

    let sr = series(&s, "with-series", "cwnd").unwrap();
    assert_eq!(sr.points, vec![(0.1, 10.0), (0.2, 20.0)]);
    let e = series(&s, "with-series", "rtt").unwrap_err().to_string();
    assert!(e.contains("its series: cwnd"), "{e}");
    assert!(matches!(series(&s, "nope", "cwnd"), Err(AnalysisError::UnknownExperiment(_))));

    s.insert_experiment(id, &exp("late", "b", 1, 0.0, 12, ExperimentStatus::TimedOut, &[])).unwrap();
    let st = status(&s, Some("small")).unwrap();
    let row = &st.studies[0];
    assert_eq!((row.planned, row.ok, row.failed, row.timed_out, row.missing), (40, 41, 1, 1, 0));
    s.upsert_study(&study_record("small", 50)).unwrap();
    assert_eq!(status(&s, None).unwrap().studies[0].missing, 7);
    assert!(status(&s, Some("other")).is_err());
    assert_eq!(st.table().rows[0][7], "100%");
}

// ------------------------------------------------------------- property tests

/// A random study: `configs` schedulers × `envs` loss values, each cell with
/// 1..4 repetitions of two metrics.
fn random_study(cells: &[Vec<(f64, f64)>], envs: usize) -> Store {
    let mut s = Store::open_in_memory().unwrap();
    let id = s.upsert_study(&study_record("r", 0)).unwrap();
    let mut n = 0;
    for (c, reps) in cells.iter().enumerate() {
        let (config, env) = (c / envs, c % envs);
        for (rep, (m1, m2)) in reps.iter().enumerate() {
            n += 1;
            let e = ok(
                &format!("r{n}"),
                &format!("s{config:02}"),
                1,
                env as f64 / 100.0,
                rep as u32,
                &[("m1", *m1), ("m2", *m2)],
            );
            s.insert_experiment(id, &e).unwrap();
        }
    }
    s
}

fn cells_strategy() -> impl Strategy<Value = (usize, usize, Vec<Vec<(f64, f64)>>)> {
    (1usize..8, 1usize..3).prop_flat_map(|(configs, envs)| {
        let cell =
            proptest::collection::vec((0i32..20, 0i32..20).prop_map(|(a, b)| (f64::from(a), f64::from(b))), 1..4);
        (Just(configs), Just(envs), proptest::collection::vec(cell, configs * envs))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn pareto_fronts_are_exactly_the_non_dominated((configs, envs, cells) in cells_strategy(), max_second in any::<bool>(), per_env in any::<bool>()) {
        let s = random_study(&cells, envs);
        let goals = [Goal::Minimize, if max_second { Goal::Maximize } else { Goal::Minimize }];
        let q = ParetoQuery {
            study: "r".into(),
            objectives: vec![Objective { metric: "m1".into(), goal: goals[0] }, Objective { metric: "m2".into(), goal: goals[1] }],
            per_environment: per_env,
            filters: vec![],
        };
        let r = pareto(&s, &q).unwrap();
        for f in &r.fronts {
            let all: Vec<&analysis::ParetoPoint> = f.front.iter().chain(&f.dominated).collect();
            prop_assert_eq!(all.len(), if configs > 1 { configs } else { 1 });
            // Means are the plain means of the inserted values.
            for p in &all {
                let config: usize = if configs > 1 { p.configuration[0][1..].parse().unwrap() } else { 0 };
                let env_cells: Vec<usize> = if per_env && envs > 1 {
                    let e = r.environment_keys.iter().position(|k| k == "loss").map(|i| f.environment[i].clone()).unwrap();
                    let e = (e.parse::<f64>().unwrap() * 100.0).round() as usize;
                    vec![config * envs + e]
                } else {
                    (0..envs).map(|e| config * envs + e).collect()
                };
                let values: Vec<(f64, f64)> = env_cells.iter().flat_map(|&c| cells[c].clone()).collect();
                let n = values.len() as f64;
                prop_assert!(close(p.means[0], values.iter().map(|v| v.0).sum::<f64>() / n, 1e-12));
                prop_assert!(close(p.means[1], values.iter().map(|v| v.1).sum::<f64>() / n, 1e-12));
            }
            // No front member is dominated by any point.
            for p in &f.front {
                prop_assert!(all.iter().all(|o| !dominates(&o.means, &p.means, &goals)));
            }
            // Every other point is dominated by the front member it names.
            for p in &f.dominated {
                let by = p.dominated_by.as_ref().unwrap();
                let member = f.front.iter().find(|m| &m.configuration == by);
                prop_assert!(member.is_some(), "names a non-member");
                prop_assert!(dominates(&member.unwrap().means, &p.means, &goals));
            }
        }
    }

    #[test]
    fn best_picks_the_best_mean_per_environment((configs, envs, cells) in cells_strategy(), maximize in any::<bool>()) {
        let s = random_study(&cells, envs);
        let goal = if maximize { Goal::Maximize } else { Goal::Minimize };
        let r = best(&s, &BestQuery { study: "r".into(), metric: "m1".into(), goal, filters: vec![] }).unwrap();
        prop_assert_eq!(r.rows.len(), envs);
        for (e, row) in r.rows.iter().enumerate() {
            let mut means: Vec<f64> = (0..configs)
                .map(|c| { let v = &cells[c * envs + e]; v.iter().map(|x| x.0).sum::<f64>() / v.len() as f64 })
                .collect();
            means.sort_by(|a, b| goal.oriented(*b).partial_cmp(&goal.oriented(*a)).unwrap());
            prop_assert!(close(row.best.mean, means[0], 1e-12));
            prop_assert_eq!(row.configurations as usize, configs);
            match &row.runner_up {
                Some(ru) => {
                    prop_assert!(close(ru.mean, means[1], 1e-12));
                    prop_assert!(close(row.margin.unwrap(), (means[0] - means[1]).abs(), 1e-9));
                    prop_assert_eq!(row.significant.is_some(), row.best.n > 1 && ru.n > 1);
                }
                None => prop_assert_eq!(configs, 1),
            }
        }
    }
}
