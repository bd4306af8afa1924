//! Store and analysis speed (issue 15's performance goals).
//!
//! - ingest: scalar records per second into a WAL database on disk, one
//!   transaction per experiment (goal ≥ 200,000/s);
//! - `show`, `best`, `pareto` on a synthetic study of 30,720 experiments ×
//!   10 metrics (goal ≤ 2 s each).
//!
//! The synthetic study is the redundancy study's shape: 5 schedulers × 3
//! gains (configuration) × 8 RTT ratios × 4 loss rates × 4 flow sizes
//! (environment) × 16 repetitions (`common/synthetic.rs`, shared with the
//! web bench), built once in a temporary file. Before
//! criterion's runs, a one-shot measurement prints a table and JSON.
//!
//! `cargo bench -p braid-lab --bench store`

use std::hint::black_box;
use std::time::{Duration, Instant};

use braid_lab::analysis::{self, BestQuery, Goal, Objective, ParetoQuery, ShowQuery};
use braid_lab::store::{FinishedExperiment, ScalarQuery, Store};
use criterion::{BenchmarkId, Criterion, Throughput};

#[allow(dead_code)]
#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::{experiment, fresh_store, ingest, median_time, study_record, METRICS, STUDY};

fn show_query() -> ShowQuery {
    ShowQuery { study: STUDY.into(), ..ShowQuery::default() }
}

fn best_query() -> BestQuery {
    BestQuery { study: STUDY.into(), metric: "fct_s".into(), goal: Goal::Minimize, filters: vec![] }
}

fn pareto_query(per_environment: bool) -> ParetoQuery {
    ParetoQuery {
        study: STUDY.into(),
        objectives: vec![
            Objective { metric: "fct_s".into(), goal: Goal::Minimize },
            Objective { metric: "bytes_on_wire".into(), goal: Goal::Minimize },
        ],
        per_environment,
        filters: vec![],
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let total = study_record().planned;

    // Build the synthetic study once, timing the ingest.
    let (mut store, id) = fresh_store(dir.path(), "synthetic.db");
    let build = ingest(&mut store, id, 0, total, METRICS.len());
    let rate_10 = (total * METRICS.len() as u64) as f64 / build.as_secs_f64();
    let (mut wide, wide_id) = fresh_store(dir.path(), "wide.db");
    let wide_time = ingest(&mut wide, wide_id, 0, 2_000, 200);
    let rate_200 = (2_000.0 * 200.0) / wide_time.as_secs_f64();
    drop(wide);
    drop(store);
    let db = dir.path().join("synthetic.db");
    let reader = Store::open_read_only(&db).expect("open read-only");

    let show_t = median_time(5, || {
        black_box(analysis::show(&reader, &show_query()).expect("show"));
    });
    let best_t = median_time(5, || {
        black_box(analysis::best(&reader, &best_query()).expect("best"));
    });
    let pareto_t = median_time(5, || {
        black_box(analysis::pareto(&reader, &pareto_query(false)).expect("pareto"));
    });
    let pareto_env_t = median_time(5, || {
        black_box(analysis::pareto(&reader, &pareto_query(true)).expect("pareto"));
    });
    let show_rows = analysis::show(&reader, &show_query()).expect("show").rows.len();
    // Where the time goes: the store calls behind every analysis.
    let sid = reader.study_id(STUDY).expect("study id").expect("study");
    let param_values_t = median_time(5, || {
        black_box(reader.param_values(sid).expect("param values"));
    });
    let metric_names_t = median_time(5, || {
        black_box(reader.metric_names(sid).expect("metric names"));
    });
    let all_keys: Vec<String> = study_record().params.iter().map(|p| p.name.clone()).collect();
    let scalars_t = median_time(5, || {
        black_box(
            reader
                .scalars(&ScalarQuery {
                    study_id: sid,
                    filters: vec![],
                    group_by: all_keys.clone(),
                    metrics: vec!["fct_s".into()],
                })
                .expect("scalars"),
        );
    });
    let (mut batched, batched_id) = fresh_store(dir.path(), "batched.db");
    let chunks: Vec<Vec<FinishedExperiment>> = (0..total)
        .collect::<Vec<u64>>()
        .chunks(256)
        .map(|c| c.iter().map(|&i| experiment(i, METRICS.len())).collect())
        .collect();
    let t = Instant::now();
    for chunk in &chunks {
        batched.insert_experiments(batched_id, chunk).expect("insert batch");
    }
    let rate_batched = (total * METRICS.len() as u64) as f64 / t.elapsed().as_secs_f64();
    drop(batched);

    let mut table = analysis::Table::new(["measurement", "value", "goal"]);
    table.push(vec![
        format!("ingest, {total} experiments x 10 scalars (1 tx each)"),
        format!("{rate_10:.0} scalars/s ({:.2} s)", build.as_secs_f64()),
        ">= 200000/s".into(),
    ]);
    table.push(vec![
        "ingest, 2000 experiments x 200 scalars (1 tx each)".into(),
        format!("{rate_200:.0} scalars/s"),
        ">= 200000/s".into(),
    ]);
    table.push(vec![
        format!("ingest, {total} experiments x 10 scalars (256 per tx)"),
        format!("{rate_batched:.0} scalars/s"),
        ">= 200000/s".into(),
    ]);
    table.push(vec![
        format!("show (default group-by, {show_rows} rows)"),
        format!("{:.3} s", show_t.as_secs_f64()),
        "<= 2 s".into(),
    ]);
    table.push(vec!["best --min fct_s".into(), format!("{:.3} s", best_t.as_secs_f64()), "<= 2 s".into()]);
    table.push(vec!["pareto fct_s/bytes_on_wire".into(), format!("{:.3} s", pareto_t.as_secs_f64()), "<= 2 s".into()]);
    table.push(vec!["pareto per environment".into(), format!("{:.3} s", pareto_env_t.as_secs_f64()), "<= 2 s".into()]);
    table.push(vec!["  store: param_values".into(), format!("{:.3} s", param_values_t.as_secs_f64()), String::new()]);
    table.push(vec!["  store: metric_names".into(), format!("{:.3} s", metric_names_t.as_secs_f64()), String::new()]);
    table.push(vec![
        "  store: scalars (1 metric, 5 keys)".into(),
        format!("{:.3} s", scalars_t.as_secs_f64()),
        String::new(),
    ]);
    println!("{table}");
    println!(
        "{}",
        serde_json::json!({
            "experiments": total,
            "metrics": METRICS.len(),
            "ingest_scalars_per_s": rate_10,
            "ingest_wide_scalars_per_s": rate_200,
            "ingest_batched_scalars_per_s": rate_batched,
            "show_s": show_t.as_secs_f64(),
            "best_s": best_t.as_secs_f64(),
            "pareto_s": pareto_t.as_secs_f64(),
            "pareto_per_environment_s": pareto_env_t.as_secs_f64(),
        })
    );

    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("ingest");
        group.sample_size(10);
        for metrics in [10usize, 200] {
            let experiments = 1_000u64;
            group.throughput(Throughput::Elements(experiments * metrics as u64));
            group.bench_with_input(BenchmarkId::new("scalars_per_experiment", metrics), &metrics, |b, &metrics| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let (mut store, id) = fresh_store(dir.path(), "ingest.db");
                        spent += ingest(&mut store, id, 0, experiments, metrics);
                    }
                    spent
                })
            });
        }
        group.finish();
    }
    {
        let mut group = c.benchmark_group("analysis_30720x10");
        group.sample_size(10);
        group.bench_function("show", |b| b.iter(|| analysis::show(&reader, &show_query()).expect("show")));
        group.bench_function("best", |b| b.iter(|| analysis::best(&reader, &best_query()).expect("best")));
        group.bench_function("pareto", |b| b.iter(|| analysis::pareto(&reader, &pareto_query(false)).expect("pareto")));
        group.bench_function("pareto_per_environment", |b| {
            b.iter(|| analysis::pareto(&reader, &pareto_query(true)).expect("pareto"))
        });
        group.finish();
    }
    c.final_summary();
}
