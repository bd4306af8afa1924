//! Web UI render time (issue 19's performance goal: the study page and the
//! analysis views of a 30,720-experiment study render in ≤ 1 s on the
//! server).
//!
//! The synthetic study of the store bench (`common/synthetic.rs`: 5
//! schedulers × 3 gains × 8 RTT ratios × 4 losses × 4 sizes × 16
//! repetitions, 10 metrics) is built once in a temporary file; repetition
//! 0 of every configuration and environment also carries three time
//! series of 100 points (what the experiment page draws). The router is
//! built as `braid lab serve` builds it and every request goes through it
//! in process (`tower::ServiceExt::oneshot`, whole body read), on a
//! two-thread tokio runtime: handler, SQL, rendering and figures, no
//! socket. A table (median of `RUNS` requests after one warm-up, bytes,
//! the goal) and a JSON line come first, then criterion's groups.
//!
//! `cargo bench -p braid-lab --bench web`

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use braid_lab::analysis;
use braid_lab::runner::RunOptions;
use braid_lab::store::{FinishedExperiment, Store};
use braid_lab::web::{router, App, Auth};
use criterion::Criterion;
use tower::ServiceExt;

#[allow(dead_code)]
#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::{experiment_with_series, fresh_store, study_record, METRICS, REPETITIONS, STUDY};

/// Requests per view (after one warm-up); the median is reported.
const RUNS: usize = 5;
/// Points per series of the experiments that carry series.
const SERIES_POINTS: usize = 100;
/// The goal of every view, in milliseconds.
const GOAL_MS: f64 = 1000.0;

/// One response: status, body length.
async fn get(app: &Arc<App>, uri: &str) -> (StatusCode, usize) {
    let req = Request::builder().uri(uri).body(Body::empty()).expect("request");
    let resp = router(app.clone()).oneshot(req).await.expect("router");
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    (status, body.len())
}

/// Build the synthetic study at `dir/web.db`, 256 experiments per
/// transaction; the time taken.
fn build(dir: &std::path::Path) -> Duration {
    let (mut store, id) = fresh_store(dir, "web.db");
    let total = study_record().planned;
    let t = Instant::now();
    let ids: Vec<u64> = (0..total).collect();
    for chunk in ids.chunks(256) {
        let batch: Vec<FinishedExperiment> = chunk
            .iter()
            .map(|&i| {
                let points = if i % u64::from(REPETITIONS) == 0 { SERIES_POINTS } else { 0 };
                experiment_with_series(i, METRICS.len(), points)
            })
            .collect();
        store.insert_experiments(id, &batch).expect("insert");
    }
    t.elapsed()
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let build_t = build(dir.path());
    let db = dir.path().join("web.db");
    // A copy for timing queries by hand (`sqlite3 COPY`), when asked.
    if let Ok(keep) = std::env::var("BRAID_WEB_BENCH_KEEP_DB") {
        std::fs::copy(&db, &keep).expect("copy the database");
        let wal = dir.path().join("web.db-wal");
        if wal.exists() {
            std::fs::copy(&wal, format!("{keep}-wal")).expect("copy the WAL");
        }
    }
    let total = study_record().planned;
    // An experiment with series (repetition 0) and the study's id.
    let (exp_id, study_id) = {
        let store = Store::open_read_only(&db).expect("open");
        let sid = store.study_id(STUDY).expect("study id").expect("study");
        let e = experiment_with_series(16 * 37, METRICS.len(), 0).planned.id;
        assert!(store.experiment(&e).expect("experiment").is_some());
        (e, sid)
    };
    let app = App::new(&db, Auth::open(), RunOptions::new(dir.path().join("runs")));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");

    let s = STUDY;
    let box_q = "metric=fct_s&x=rtt_ratio&g=scheduler&goal=min";
    let pareto_q = "pa=fct_s&pa_goal=min&pb=bytes_on_wire&pb_goal=min";
    let views: Vec<(&str, String)> = vec![
        ("studies page", "/".into()),
        ("study page (first 50 rows)", format!("/studies/{s}")),
        ("study page, filtered, sorted by metric, p.3", format!("/studies/{s}?f=scheduler%3Dredundant&sort=metric%3Afct_s&dir=desc&page=3")),
        ("study page, sorted by param, last page", format!("/studies/{s}?sort=param%3Aloss&page=615")),
        ("study page, 1000 rows", format!("/studies/{s}?per_page=1000&page=7")),
        ("analysis: box plot + summary + best", format!("/studies/{s}/analysis?{box_q}")),
        ("analysis: + Pareto front", format!("/studies/{s}/analysis?{box_q}&{pareto_q}")),
        ("analysis: + Pareto per environment", format!("/studies/{s}/analysis?{box_q}&{pareto_q}&per_env=on")),
        ("analysis: band plot, filtered", format!("/studies/{s}/analysis?metric=goodput_mbps&x=loss&g=scheduler&g=cwnd_gain&f=bytes%3D16KiB&kind=band")),
        ("analysis: defaults (no query)", format!("/studies/{s}/analysis")),
        ("export summary CSV", format!("/studies/{s}/analysis/export?{box_q}&view=summary&format=csv")),
        ("export best JSON", format!("/studies/{s}/analysis/export?{box_q}&view=best&format=json")),
        ("export Pareto CSV", format!("/studies/{s}/analysis/export?{box_q}&{pareto_q}&view=pareto&format=csv")),
        ("export Pareto per env JSON", format!("/studies/{s}/analysis/export?{box_q}&{pareto_q}&per_env=on&view=pareto&format=json")),
        ("export study CSV (all rows)", format!("/studies/{s}/export.csv")),
        ("export study JSON lines (all rows)", format!("/studies/{s}/export.jsonl")),
        ("experiment page (3 series)", format!("/experiments/{exp_id}")),
        ("API /api/studies", "/api/studies".into()),
        ("API /api/studies/{id}", format!("/api/studies/{study_id}")),
        ("API /api/studies/{id}/experiments", format!("/api/studies/{study_id}/experiments")),
        ("API experiments, sorted, p.100", format!("/api/studies/{study_id}/experiments?sort=metric%3Afct_s&page=100")),
        ("API /api/experiments/{id}", format!("/api/experiments/{exp_id}")),
    ];

    let mut table = analysis::Table::new(["view", "median ms", "bytes", "goal ms", "verdict"]);
    let mut json = serde_json::Map::new();
    let mut worst = 0.0f64;
    for (label, uri) in &views {
        let (status, _) = rt.block_on(get(&app, uri));
        assert_eq!(status, StatusCode::OK, "{uri}");
        let mut bytes = 0;
        let med = synthetic::median_time(RUNS, || {
            let (status, n) = rt.block_on(get(&app, uri));
            assert_eq!(status, StatusCode::OK, "{uri}");
            bytes = n;
        });
        let ms = med.as_secs_f64() * 1e3;
        worst = worst.max(ms);
        table.push(vec![
            label.to_string(),
            format!("{ms:.1}"),
            bytes.to_string(),
            format!("{GOAL_MS:.0}"),
            if ms <= GOAL_MS { "ok".into() } else { "over".into() },
        ]);
        json.insert(label.to_string(), serde_json::json!({ "uri": uri, "median_ms": ms, "bytes": bytes }));
    }
    println!("web views of a {total}-experiment study x {} metrics (built in {:.1} s), median of {RUNS}:", METRICS.len(), build_t.as_secs_f64());
    println!("{table}");
    println!(
        "{}",
        serde_json::json!({
            "experiments": total,
            "metrics": METRICS.len(),
            "runs": RUNS,
            "goal_ms": GOAL_MS,
            "worst_ms": worst,
            "views": json,
        })
    );

    // Where the time goes: the store and analysis calls behind the views,
    // each alone on one thread.
    {
        let store = Store::open_read_only(&db).expect("open");
        let mut parts = analysis::Table::new(["call", "median ms"]);
        let mut part = |label: &str, f: &mut dyn FnMut()| {
            let t = synthetic::median_time(RUNS, f);
            parts.push(vec![label.to_string(), format!("{:.1}", t.as_secs_f64() * 1e3)]);
        };
        part("store: study (info and counts)", &mut || drop(store.study(STUDY).expect("study")));
        part("store: param_values", &mut || drop(store.param_values(study_id).expect("values")));
        part("store: metric_names", &mut || drop(store.metric_names(study_id).expect("metrics")));
        part("store: has_metric", &mut || assert!(store.has_metric(study_id, "fct_s").expect("has")));
        let show_q = analysis::ShowQuery {
            study: STUDY.into(),
            filters: vec![],
            group_by: Some(vec!["rtt_ratio".into(), "scheduler".into()]),
            metrics: vec!["fct_s".into()],
        };
        part("analysis: show (rtt_ratio, scheduler)", &mut || drop(analysis::show(&store, &show_q).expect("show")));
        let best_q = analysis::BestQuery {
            study: STUDY.into(),
            metric: "fct_s".into(),
            goal: analysis::Goal::Minimize,
            filters: vec![],
        };
        part("analysis: best", &mut || drop(analysis::best(&store, &best_q).expect("best")));
        let pareto_q = |per_environment| analysis::ParetoQuery {
            study: STUDY.into(),
            objectives: vec![
                analysis::Objective { metric: "fct_s".into(), goal: analysis::Goal::Minimize },
                analysis::Objective { metric: "bytes_on_wire".into(), goal: analysis::Goal::Minimize },
            ],
            per_environment,
            filters: vec![],
        };
        part("analysis: pareto", &mut || drop(analysis::pareto(&store, &pareto_q(false)).expect("pareto")));
        part("analysis: pareto per environment", &mut || {
            drop(analysis::pareto(&store, &pareto_q(true)).expect("pareto"))
        });
        let svg = dir.path().join("box.svg");
        let dq = braid_lab::figures::DistributionQuery {
            study: STUDY.into(),
            metric: "fct_s".into(),
            x: "rtt_ratio".into(),
            group_by: vec!["scheduler".into()],
            filters: vec![],
            kind: braid_lab::figures::Kind::Box,
        };
        part("figure: box plot (rtt_ratio, scheduler)", &mut || {
            drop(braid_lab::figures::distribution(&store, &dq, &svg).expect("figure"))
        });
        println!("{parts}");
    }

    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("web_30720x10");
        group.sample_size(10);
        for (name, uri) in [
            ("study_page", format!("/studies/{s}")),
            ("study_page_sorted", format!("/studies/{s}?f=scheduler%3Dredundant&sort=metric%3Afct_s&dir=desc&page=3")),
            ("analysis_page", format!("/studies/{s}/analysis?{box_q}&{pareto_q}")),
            ("experiment_page", format!("/experiments/{exp_id}")),
        ] {
            group.bench_function(name, |b| b.iter(|| rt.block_on(get(&app, &uri))));
        }
        group.finish();
    }
    c.final_summary();
}
