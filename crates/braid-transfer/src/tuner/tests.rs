//! Tuner tests on a simulated stage: throughput `min(n·per_worker, cap)` with seeded noise, the
//! first interval after a change a blend of the old and new setting (so settling matters), and
//! for the network stage loss that rises once the offered load passes the cap.

use super::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Relative throughput noise per interval (uniform).
const NOISE: f64 = 0.02;

#[derive(Debug, Clone, Copy)]
struct Model {
    per_worker: f64,
    cap: f64,
    /// Loss ratio when the offered load is twice the cap (0 for storage).
    loss_scale: f64,
}

impl Model {
    fn throughput(&self, n: usize) -> f64 {
        (n as f64 * self.per_worker).min(self.cap)
    }

    fn loss(&self, n: usize) -> f64 {
        let offered = n as f64 * self.per_worker;
        if offered <= self.cap {
            0.0
        } else {
            (self.loss_scale * (offered - self.cap) / offered).min(1.0)
        }
    }

    /// The noise-free utility optima: every worker count whose utility is within the dead band
    /// plus the measurement noise (±2%) of the highest. The tuner cannot tell these apart from
    /// one interval each, and by design (the dead band) need not.
    fn optima(&self, config: &TunerConfig, utility: Utility) -> Vec<usize> {
        let utilities: Vec<f64> = (1..=config.max_workers)
            .map(|n| utility.value(config, n, self.throughput(n), self.loss(n)))
            .collect();
        let top = utilities.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (1..=config.max_workers).filter(|&n| utilities[n - 1] >= top - (config.dead_band + NOISE) * top.abs()).collect()
    }
}

/// Drives a stage through `intervals`, returning the worker count of each interval.
struct Sim {
    rng: ChaCha8Rng,
    previous: usize,
    noise: f64,
}

impl Sim {
    fn new(seed: u64) -> Self {
        Sim { rng: ChaCha8Rng::seed_from_u64(seed), previous: 0, noise: NOISE }
    }

    fn interval(&mut self, model: &Model, n: usize) -> Observation {
        let mut throughput = model.throughput(n);
        if self.previous != 0 && self.previous != n {
            // Workers that just started or stopped: the interval is a blend of both settings.
            throughput = 0.5 * (throughput + model.throughput(self.previous));
        }
        self.previous = n;
        let noise = 1.0 + self.rng.random_range(-self.noise..=self.noise);
        Observation { workers: n, throughput: throughput * noise, loss: model.loss(n), in_use: None, queuing: None }
    }

    fn run(&mut self, tuner: &mut StageTuner, model: &Model, intervals: usize) -> Vec<usize> {
        let mut trace = Vec::with_capacity(intervals);
        for _ in 0..intervals {
            let n = tuner.workers();
            trace.push(n);
            let observation = self.interval(model, n);
            tuner.observe(observation).unwrap();
        }
        trace
    }
}

/// ≥ 0.9 of an optimum's throughput with at most 1.25× its workers.
fn good(model: &Model, optima: &[usize], n: usize) -> bool {
    optima
        .iter()
        .any(|&o| model.throughput(n) >= 0.9 * model.throughput(o) && n as f64 <= 1.25 * o as f64)
}

#[cfg(test)]
fn mode(trace: &[usize]) -> usize {
    let mut counts = std::collections::HashMap::new();
    for &n in trace {
        *counts.entry(n).or_insert(0usize) += 1;
    }
    counts.into_iter().max_by_key(|&(n, c)| (c, std::cmp::Reverse(n))).map(|(n, _)| n).unwrap_or(0)
}

fn changes(trace: &[usize]) -> usize {
    trace.windows(2).filter(|w| w[0] != w[1]).count()
}

/// Checks one episode: a good setting (≥ 0.9 of the optimum's throughput with ≤ 1.25× its
/// workers) within 15 intervals; then, over the next 50, good settings in at least 85% of the
/// intervals (the rest are probes) and at most 12 changes (the reference moves every interval: ~50).
fn check_episode(trace: &[usize], model: &Model, optimum: &[usize]) -> Result<(), String> {
    if !trace.iter().take(15).any(|&n| good(model, optimum, n)) {
        return Err(format!("not good within 15 intervals (optimum {optimum:?}): {trace:?}"));
    }
    check_hold(&trace[trace.len() - 50..], model, optimum)
        .map_err(|e| format!("{e} (optimum {optimum:?}): {trace:?}"))
}

fn check_hold(window: &[usize], model: &Model, optimum: &[usize]) -> Result<(), String> {
    let at_good = window.iter().filter(|&&n| good(model, optimum, n)).count();
    if at_good * 20 < window.len() * 17 || changes(window) > 12 {
        return Err(format!("not holding: {at_good}/{} good, {} changes", window.len(), changes(window)));
    }
    Ok(())
}

fn model_strategy(loss_scale: f64) -> impl Strategy<Value = Model> {
    (10.0f64..100.0, 1.0f64..24.0)
        .prop_map(move |(per_worker, ratio)| Model { per_worker, cap: per_worker * ratio, loss_scale })
}

fn run_step_change(a: Model, b: Model, utility: Utility, seed: u64) -> Result<(), String> {
    let config = TunerConfig::default();
    let mut tuner = StageTuner::new(config.clone(), utility).unwrap();
    let mut sim = Sim::new(seed);
    let first = sim.run(&mut tuner, &a, 65);
    check_episode(&first, &a, &a.optima(&config, utility))?;
    // After a step change the optimum is found again: either the held utility moves (restart)
    // or the next probe towards the better side finds it (probes alternate, so at most
    // 2 × `probe_every_max` intervals later) and a search follows.
    let follow = 2 * config.probe_every_max as usize + 30;
    let second = sim.run(&mut tuner, &b, follow + 50);
    let optimum = &b.optima(&config, utility);
    check_hold(&second[second.len() - 50..], &b, optimum)
        .map_err(|e| format!("after the step: {e} (optimum {optimum:?}): {second:?}"))?;
    match second.iter().position(|&n| good(&b, optimum, n)) {
        Some(t) if t <= follow => Ok(()),
        _ => Err(format!("after the step: not good in time, optimum {optimum:?}: {second:?}")),
    }
}

/// A fixed seed: the properties hold for the generated cases every run (a random seed would
/// make CI flaky on the rare cases `failure_rate` counts).
fn fixed(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d61_726c_696e),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(fixed(256))]

    #[test]
    fn io_stage_converges_holds_and_follows(a in model_strategy(0.0), b in model_strategy(0.0), seed: u64) {
        prop_assert_eq!(run_step_change(a, b, Utility::Io, seed), Ok(()));
    }

    #[test]
    fn network_stage_converges_holds_and_follows(a in model_strategy(0.2), b in model_strategy(0.2), seed: u64) {
        prop_assert_eq!(run_step_change(a, b, Utility::Network, seed), Ok(()));
    }

    #[test]
    fn falcon_uses_more_workers_for_the_same_throughput(
        cap in 100.0f64..1000.0,
        read_n in 2usize..12,
        net_n in 1usize..12,
        write_n in 1usize..12,
        seed: u64,
    ) {
        // Stages with different optima over one end-to-end cap: Falcon's one knob follows the
        // stage needing the most workers and over-provisions the others.
        prop_assume!(read_n.max(net_n).max(write_n) >= read_n.min(net_n).min(write_n) + 3);
        let models = [read_n, net_n, write_n].map(|n| Model { per_worker: cap / n as f64, cap, loss_scale: 0.0 });
        let config = TunerConfig::default();
        let mut marlin = Tuner::Marlin(MarlinTuner::new(config.clone()).unwrap());
        let mut falcon = Tuner::Falcon(FalconTuner::new(config).unwrap());
        let mut totals = [0usize; 2];
        let mut throughputs = [0.0f64; 2];
        for (i, tuner) in [&mut marlin, &mut falcon].into_iter().enumerate() {
            let mut sims = [Sim::new(seed), Sim::new(seed ^ 1), Sim::new(seed ^ 2)];
            for t in 0..160 {
                let c = tuner.concurrency();
                let obs = StageObservations {
                    read: sims[0].interval(&models[0], c.read),
                    network: sims[1].interval(&models[1], c.network),
                    write: sims[2].interval(&models[2], c.write),
                };
                if t >= 60 {
                    totals[i] += c.total();
                    throughputs[i] += models.iter().zip([c.read, c.network, c.write])
                        .map(|(m, n)| m.throughput(n)).fold(f64::INFINITY, f64::min);
                }
                tuner.observe(&obs).unwrap();
            }
        }
        prop_assert!(throughputs[0] >= 0.9 * 100.0 * cap, "marlin throughput {}", throughputs[0] / 100.0);
        prop_assert!(throughputs[1] >= 0.9 * 100.0 * cap, "falcon throughput {}", throughputs[1] / 100.0);
        prop_assert!(totals[1] > totals[0], "falcon {} workers vs marlin {}", totals[1], totals[0]);
    }
}

#[test]
fn paper_testbed_optima() {
    // §4.1: 300 Mbps link, 60 Mbps per read thread, 30 Mbps per connection: read 5, network 10.
    let config = TunerConfig::default();
    for (per_worker, utility, expected) in [(60.0, Utility::Io, 5), (30.0, Utility::Network, 10)] {
        let model = Model { per_worker, cap: 300.0, loss_scale: 0.2 };
        let mut tuner = StageTuner::new(config.clone(), utility).unwrap();
        let trace = Sim::new(7).run(&mut tuner, &model, 65);
        let optima = model.optima(&config, utility);
        assert!(optima.contains(&expected), "{optima:?}");
        assert_eq!(check_episode(&trace, &model, &optima), Ok(()), "{trace:?}");
        assert!(optima.contains(&mode(&trace[15..])), "{trace:?}");
    }
}

#[test]
fn settle_interval_is_not_scored() {
    let config = TunerConfig::default();
    let mut tuner = StageTuner::new(config, Utility::Io).unwrap();
    // The first interval is the start-up transient: even an absurd reading is ignored.
    assert_eq!(tuner.observe(Observation { workers: 1, throughput: 1e12, loss: 0.0, in_use: None, queuing: None }), Ok(1));
    assert_eq!(tuner.observe(Observation { workers: 1, throughput: 10.0, loss: 0.0, in_use: None, queuing: None }), Ok(2));
    // The change to 2 is settling: a reading there does not move the tuner.
    assert_eq!(tuner.observe(Observation { workers: 2, throughput: 0.0, loss: 0.0, in_use: None, queuing: None }), Ok(2));
    // Scored: 2 workers doubled the throughput, so the tuner climbs further.
    let next = tuner.observe(Observation { workers: 2, throughput: 20.0, loss: 0.0, in_use: None, queuing: None }).unwrap();
    assert!(next > 2, "{next}");
}

#[test]
fn memory_evicts_its_oldest_entry() {
    let mut memory = Memory { entries: Vec::new(), capacity: 3 };
    for (workers, utility) in [(1, 5.0), (2, 6.0), (3, 7.0), (4, 1.0)] {
        memory.record(Score { workers, utility, throughput: utility });
    }
    let kept: Vec<usize> = memory.entries.iter().map(|e| e.workers).collect();
    assert_eq!(kept, vec![2, 3, 4]);
    // Re-scoring a setting replaces its old score instead of keeping both.
    memory.record(Score { workers: 2, utility: 9.0, throughput: 9.0 });
    assert_eq!(memory.entries.len(), 3);
    assert_eq!(memory.best(0.0).map(|e| e.workers), Some(2));
    // Within the dead band the fewest workers win.
    memory.record(Score { workers: 3, utility: 9.1, throughput: 9.1 });
    assert_eq!(memory.best(0.02).map(|e| e.workers), Some(2));
    assert_eq!(memory.best(0.0).map(|e| e.workers), Some(3));
}

#[test]
fn bad_config_and_observations_are_named() {
    let config = TunerConfig { k: 0.02, ..TunerConfig::default() };
    let err = StageTuner::new(config, Utility::Io).unwrap_err();
    assert!(err.to_string().contains("`k` = 0.02"), "{err}");
    let config = TunerConfig { max_workers: 0, ..TunerConfig::default() };
    assert!(StageTuner::new(config, Utility::Io).unwrap_err().to_string().contains("max_workers"));
    let mut tuner = StageTuner::new(TunerConfig::default(), Utility::Network).unwrap();
    let err = tuner.observe(Observation { workers: 1, throughput: f64::NAN, loss: 0.0, in_use: None, queuing: None }).unwrap_err();
    assert!(err.to_string().contains("throughput"), "{err}");
    let err = tuner.observe(Observation { workers: 1, throughput: 1.0, loss: 1.5, in_use: None, queuing: None }).unwrap_err();
    assert!(err.to_string().contains("loss"), "{err}");
    let marlin = MarlinTuner::new(TunerConfig::default()).unwrap();
    assert!(marlin.pin(Stage::Read, 0).is_err());
}

#[test]
fn pinned_stage_stays_put() {
    let mut marlin = MarlinTuner::new(TunerConfig::default()).unwrap().pin(Stage::Network, 4).unwrap();
    let model = Model { per_worker: 10.0, cap: 100.0, loss_scale: 0.0 };
    let mut sim = Sim::new(3);
    for _ in 0..40 {
        let c = marlin.concurrency();
        assert_eq!(c.network, 4);
        let obs = StageObservations {
            read: sim.interval(&model, c.read),
            network: Observation { workers: 4, throughput: 40.0, loss: 0.0, in_use: None, queuing: None },
            write: Observation { workers: c.write, throughput: model.throughput(c.write), loss: 0.0, in_use: None, queuing: None },
        };
        marlin.observe(&obs).unwrap();
    }
    assert!(marlin.stage(Stage::Network).is_none());
    assert_eq!(marlin.concurrency().read, 10);
}

/// Counts episodes failing the convergence/hold/follow checks over many random stage models
/// (the numbers the report quotes): `cargo test -p braid-transfer --release --lib failure_rate
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn failure_rate() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (utility, loss_scale) in [(Utility::Io, 0.0), (Utility::Network, 0.2)] {
        let runs = 5000;
        let mut failures = 0;
        for seed in 0..runs {
            let mut model = || {
                let per_worker = rng.random_range(10.0..100.0);
                Model { per_worker, cap: per_worker * rng.random_range(1.0..24.0), loss_scale }
            };
            let (a, b) = (model(), model());
            if let Err(e) = run_step_change(a, b, utility, seed) {
                failures += 1;
                if failures <= 3 {
                    println!("{utility:?}: {e}");
                }
            }
        }
        println!("{utility:?}: {failures}/{runs} episodes failed");
    }
}

/// A stage fed by a slower neighbour at `input` (same unit as throughput): its busy-time
/// throughput is its own capacity, which keeps rising with workers up to its knee (what a
/// busy-time utility alone cannot see past), while each worker is busy only the share of time
/// the input needs of that capacity.
fn starved_interval(rng: &mut ChaCha8Rng, model: &Model, input: f64, n: usize) -> Observation {
    let noise = 1.0 + rng.random_range(-NOISE..=NOISE);
    let in_use = (n as f64 * input / model.throughput(n)).min(n as f64) * noise;
    Observation { workers: n, throughput: model.throughput(n) * noise, loss: 0.0, in_use: Some(in_use), queuing: None }
}

proptest! {
    #![proptest_config(fixed(256))]

    /// Idle workers are cut: a stage that is not the bottleneck settles at the fewest workers
    /// that carry its input at the saturation share and holds there, however its busy-time
    /// throughput (its capacity, up to the knee) would reward more.
    #[test]
    fn a_starved_stage_keeps_only_the_workers_it_uses(model in model_strategy(0.0), load in 0.05f64..0.7, seed: u64) {
        let config = TunerConfig::default();
        let input = load * model.cap;
        let needed = ((input / model.per_worker / config.saturation).ceil() as usize).max(1);
        let mut tuner = StageTuner::new(config, Utility::Io).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut trace = Vec::new();
        for _ in 0..80 {
            let n = tuner.workers();
            trace.push(n);
            tuner.observe(starved_interval(&mut rng, &model, input, n)).unwrap();
        }
        let tail = &trace[30..];
        let held = tail.iter().filter(|&&n| n <= needed + needed / 10).count();
        prop_assert!(held * 20 >= tail.len() * 17, "needed {needed}: {trace:?}");
        prop_assert!(changes(tail) <= 12, "needed {needed}: {trace:?}");
    }
}

#[test]
fn a_saturated_stage_is_searched_as_without_the_measure() {
    // Every worker busy: reporting it changes nothing.
    let model = Model { per_worker: 10.0, cap: 60.0, loss_scale: 0.0 };
    let run = |report: bool| {
        let mut tuner = StageTuner::new(TunerConfig::default(), Utility::Io).unwrap();
        let mut sim = Sim::new(3);
        let mut trace = Vec::new();
        for _ in 0..40 {
            let n = tuner.workers();
            trace.push(n);
            let mut o = sim.interval(&model, n);
            if report {
                o.in_use = Some(n as f64 * 0.97);
            }
            tuner.observe(o).unwrap();
        }
        trace
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn a_bad_in_use_is_refused() {
    let mut tuner = StageTuner::new(TunerConfig::default(), Utility::Io).unwrap();
    let err = tuner.observe(Observation { workers: 1, throughput: 1.0, loss: 0.0, in_use: Some(f64::NAN), queuing: None }).unwrap_err();
    assert!(err.to_string().contains("in_use"), "{err}");
    assert!(TunerConfig { saturation: 0.0, ..TunerConfig::default() }.validate().is_err());
    assert!(TunerConfig { lift: 0.5, ..TunerConfig::default() }.validate().is_err());
}

/// Several transfers, each tuned by its own network stage, on one bottleneck of capacity `cap`
/// with a buffer of `buffer_rtts` base RTTs: every stream gets an equal share (`n·C/N`), the
/// queue stands at the buffer's depth once the offered load passes the capacity, and loss is
/// what a buffer that deep costs (small). Returns each transfer's stream counts over time.
fn shared_bottleneck(transfers: usize, per_stream: f64, cap: f64, report_queue: bool, seed: u64) -> Vec<Vec<usize>> {
    let mut tuners: Vec<StageTuner> =
        (0..transfers).map(|_| StageTuner::new(TunerConfig::default(), Utility::Network).unwrap()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut traces = vec![Vec::new(); transfers];
    for _ in 0..60 {
        let counts: Vec<usize> = tuners.iter().map(StageTuner::workers).collect();
        let total: usize = counts.iter().sum();
        let offered = total as f64 * per_stream;
        let full = offered >= cap;
        for (i, tuner) in tuners.iter_mut().enumerate() {
            let n = counts[i];
            traces[i].push(n);
            let share = if full { n as f64 * cap / total as f64 } else { n as f64 * per_stream };
            let noise = 1.0 + rng.random_range(-NOISE..=NOISE);
            let queuing = report_queue.then_some(if full { 0.8 } else { 0.02 });
            let loss = if full { 1e-4 } else { 0.0 };
            tuner.observe(Observation { workers: n, throughput: share * noise, loss, in_use: None, queuing }).unwrap();
        }
    }
    traces
}

#[test]
fn transfers_sharing_a_full_bottleneck_stop_adding_streams() {
    // One stream fills the link alone: each of four transfers stays at about one stream, where
    // without the queue signal each climbs on the share it takes from the others.
    for seed in 0..8 {
        let with = shared_bottleneck(4, 100.0, 100.0, true, seed);
        let total: usize = with.iter().map(|t| t[40..].iter().max().copied().unwrap_or(0)).sum();
        assert!(total <= 5, "seed {seed}: {with:?}");
        let without = shared_bottleneck(4, 100.0, 100.0, false, seed);
        let total: usize = without.iter().map(|t| *t.last().unwrap()).sum();
        assert!(total >= 8, "seed {seed}: without the signal the transfers should escalate: {without:?}");
    }
}

#[test]
fn window_limited_streams_climb_until_the_link_is_full() {
    // Each stream carries a tenth of the link (the wide-area case): no queue until ten streams,
    // so the search climbs to about ten and holds there (but for its periodic probes down).
    for seed in 0..8 {
        let trace = &shared_bottleneck(1, 10.0, 100.0, true, seed)[0];
        let tail = &trace[30..];
        let held = tail.iter().filter(|&&n| (9..=12).contains(&n)).count();
        assert!(held * 10 >= tail.len() * 8 && tail.iter().all(|&n| n <= 12), "seed {seed}: {trace:?}");
    }
}

#[test]
fn a_bad_queuing_is_refused() {
    let mut tuner = StageTuner::new(TunerConfig::default(), Utility::Network).unwrap();
    let err = tuner.observe(Observation { workers: 1, throughput: 1.0, loss: 0.0, in_use: None, queuing: Some(-1.0) }).unwrap_err();
    assert!(err.to_string().contains("queuing"), "{err}");
    assert!(TunerConfig { full_queue: 0.0, ..TunerConfig::default() }.validate().is_err());
}
