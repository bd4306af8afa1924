//! The synthetic study the store and web benches share: the redundancy
//! study's shape (seed 001 ch. 4, MACI's 30,720 experiments): 5 schedulers
//! × 3 gains (configuration) × 8 RTT ratios × 4 loss rates × 4 flow sizes
//! (environment) × 16 repetitions, 10 metrics each. Included by each bench
//! with `#[path = "common/synthetic.rs"] mod synthetic;`.

use std::path::Path;
use std::time::{Duration, Instant};

use braid_lab::param::{ParamDecl, ParamType, Params, Value};
use braid_lab::plan::PlannedExperiment;
use braid_lab::record::Record;
use braid_lab::store::{ExperimentStatus, FinishedExperiment, Store, StudyRecord};

pub const SCHEDULERS: [&str; 5] = ["minrtt", "redundant", "opportunistic", "redundant_if_queue_empty", "round_robin"];
pub const GAINS: [i64; 3] = [1, 2, 3];
pub const RTT_RATIOS: [i64; 8] = [1, 2, 3, 4, 5, 6, 8, 10];
pub const LOSSES: [f64; 4] = [0.0, 0.01, 0.02, 0.05];
pub const SIZES: [u64; 4] = [16 << 10, 256 << 10, 1 << 20, 8 << 20];
pub const REPETITIONS: u32 = 16;
pub const METRICS: [&str; 10] = [
    "fct_s",
    "bytes_on_wire",
    "goodput_mbps",
    "retransmits",
    "rtt_p50_ms",
    "rtt_p99_ms",
    "cpu_s",
    "redundancy_ratio",
    "reorder_ms",
    "loss_events",
];

pub const STUDY: &str = "synthetic-redundancy";

/// The time series an experiment with series carries: two flows' `cwnd`
/// (one figure, `cwnd`) and the path RTT (another).
pub const SERIES: [&str; 3] = ["cwnd.flow0", "cwnd.flow1", "rtt_ms"];

/// Uniform in [-1, 1).
pub fn noise(seed: u64) -> f64 {
    (braid_core::splitmix64(seed) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

pub fn study_record() -> StudyRecord {
    StudyRecord {
        name: STUDY.into(),
        file_path: None,
        file_text: "# synthetic study for the lab benches\n".into(),
        template: "sim-multipath".into(),
        template_version: 1,
        params: vec![
            ParamDecl::config("scheduler", ParamType::one_of(&SCHEDULERS), Value::Enum("minrtt".into())),
            ParamDecl::config("cwnd_gain", ParamType::int_range(1, 8), Value::Int(1)),
            ParamDecl::env("rtt_ratio", ParamType::int_range(1, 10), Value::Int(1)),
            ParamDecl::env("loss", ParamType::float_range(0.0, 1.0), Value::Float(0.0)),
            ParamDecl::env("bytes", ParamType::Size, Value::Size(1 << 20)),
        ],
        planned: (SCHEDULERS.len() * GAINS.len() * RTT_RATIOS.len() * LOSSES.len() * SIZES.len()) as u64
            * u64::from(REPETITIONS),
    }
}

/// The `i`-th experiment of the synthetic study with `metrics` scalars
/// (the first ten are named, the rest `extra_N`).
pub fn experiment(i: u64, metrics: usize) -> FinishedExperiment {
    experiment_with_series(i, metrics, 0)
}

/// [`experiment`] with `points` samples of each of [`SERIES`] (one per
/// 100 ms of the transfer).
pub fn experiment_with_series(i: u64, metrics: usize, points: usize) -> FinishedExperiment {
    let mut k = i;
    let rep = (k % u64::from(REPETITIONS)) as u32;
    k /= u64::from(REPETITIONS);
    let pick = |k: &mut u64, n: usize| {
        let v = (*k % n as u64) as usize;
        *k /= n as u64;
        v
    };
    let s = pick(&mut k, SCHEDULERS.len());
    let g = pick(&mut k, GAINS.len());
    let r = pick(&mut k, RTT_RATIOS.len());
    let l = pick(&mut k, LOSSES.len());
    let b = pick(&mut k, SIZES.len());
    let mut params = Params::default();
    params.insert("scheduler", Value::Enum(SCHEDULERS[s].into()));
    params.insert("cwnd_gain", Value::Int(GAINS[g]));
    params.insert("rtt_ratio", Value::Int(RTT_RATIOS[r]));
    params.insert("loss", Value::Float(LOSSES[l]));
    params.insert("bytes", Value::Size(SIZES[b]));
    let base = SIZES[b] as f64 / 1e6 * (1.0 + RTT_RATIOS[r] as f64 / 4.0) * (1.0 + 20.0 * LOSSES[l])
        / (1.0 + s as f64 / 10.0)
        + GAINS[g] as f64 * 0.01;
    let mut records: Vec<Record> = (0..metrics)
        .map(|m| {
            let name = METRICS.get(m).map(|n| n.to_string()).unwrap_or_else(|| format!("extra_{m}"));
            let value = base * (1.0 + m as f64) * (1.0 + 0.1 * noise(i * 131 + m as u64));
            Record::Metric { name, value }
        })
        .collect();
    for (n, name) in SERIES.iter().enumerate() {
        for p in 0..points {
            let t = p as f64 * 0.1;
            let value = 10.0 * (1.0 + n as f64) * (1.0 + (t * (1.0 + s as f64)).sin() / 2.0)
                + noise(i * 7919 + (n * points + p) as u64);
            records.push(Record::Series { name: name.to_string(), t, value });
        }
    }
    FinishedExperiment {
        planned: PlannedExperiment {
            id: format!("{:016x}", braid_core::splitmix64(i ^ 0x5eed)),
            template: "sim-multipath".into(),
            template_version: 1,
            params,
            repetition: rep,
            seed: braid_core::splitmix64(i),
            timeout: Duration::from_secs(60),
            exclusive: false,
            expected: Duration::from_secs(1),
        },
        status: ExperimentStatus::Ok,
        exit_code: Some(0),
        error: None,
        stderr_tail: String::new(),
        started: 1.7e9 + i as f64,
        ended: 1.7e9 + i as f64 + 0.5,
        host: "bench".into(),
        braid_version: "0.1.0".into(),
        git_commit: "0000000".into(),
        records,
    }
}

/// Insert experiments `from..to`, one transaction each; the time taken.
pub fn ingest(store: &mut Store, study: i64, from: u64, to: u64, metrics: usize) -> Duration {
    let batch: Vec<FinishedExperiment> = (from..to).map(|i| experiment(i, metrics)).collect();
    let t = Instant::now();
    for e in &batch {
        store.insert_experiment(study, e).expect("insert");
    }
    t.elapsed()
}

/// A new database at `dir/name` (replacing one there) with the synthetic
/// study registered: the store and the study's id.
pub fn fresh_store(dir: &Path, name: &str) -> (Store, i64) {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let mut store = Store::open(&path).expect("open");
    let id = store.upsert_study(&study_record()).expect("study");
    (store, id)
}

/// Median of `runs` timings of `f`.
pub fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}
