//! Scheduler cost: one run of the shipped `min_rtt` scheduler (preamble of
//! thesis Listing 5.1 plus Listing 5.2) with 2 and with 8 subflows, against
//! its peer measured in the same run: the same decision written by hand in
//! Rust over the same `Environment` (the thesis's Figure 3.9 compares its
//! runtime with the C default scheduler the same way).
//!
//! The target is a median of at most 1 µs per run. Criterion
//! reports both timings; the summary at the end prints the medians and the
//! ratio ProgMP / native.
//!
//! Run with `cargo bench -p braid-progmp --bench min_rtt`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant as WallInstant;

use braid_core::Instant;
use braid_progmp::{
    builtin, Action, Environment, MemoryEnv, PacketRef, Program, Queue, Scheduler, SubflowInfo,
};
use criterion::{BenchmarkId, Criterion};

/// `n` subflows with room in their windows and different RTTs, 64 packets
/// in `Q`, 32 in flight, nothing to reinject.
fn environment(n: u32) -> MemoryEnv {
    let mut env = MemoryEnv::new();
    for i in 0..n {
        env.add_subflow(SubflowInfo {
            id: i + 1,
            rtt_us: 40_000 - u64::from(i) * 1_000,
            cwnd: 40,
            in_flight: 8,
            ..Default::default()
        });
    }
    for _ in 0..96 {
        env.write(1400, 0, false);
    }
    // Move 32 packets into QU, as if already sent.
    let mut s = Scheduler::new(
        Arc::new(Program::compile("SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap()),
        0,
    );
    for _ in 0..32 {
        s.run(&mut env, Instant::ZERO);
    }
    for i in 0..n {
        env.subflow_mut(i + 1).unwrap().in_flight = 8;
    }
    env
}

/// The same decision as `min_rtt.progmp`, by hand.
fn native<E: Environment>(env: &E, snapshot: &mut Vec<SubflowInfo>, actions: &mut Vec<Action>) {
    actions.clear();
    snapshot.clear();
    snapshot.extend((0..env.subflow_count()).map(|i| env.subflow(i)));
    let usable = |s: &SubflowInfo| !s.throttled && s.cwnd > s.in_flight + s.queued && !s.lossy;
    if !snapshot.iter().any(usable) {
        return;
    }
    if env.queue_len(Queue::Reinject) > 0 {
        let best = (0..snapshot.len())
            .filter(|&i| usable(&snapshot[i]))
            .filter(|&i| {
                env.has_window_for(i, Queue::Reinject, 0) && !env.sent_on(Queue::Reinject, 0, i)
            })
            .min_by_key(|&i| snapshot[i].rtt_us);
        if let Some(i) = best {
            let packet = PacketRef {
                queue: Queue::Reinject,
                index: 0,
                id: env.packet(Queue::Reinject, 0).id,
            };
            actions.push(Action::Push {
                subflow: i,
                subflow_id: snapshot[i].id,
                packet,
            });
            actions.push(Action::Remove { packet });
            return;
        }
    }
    if env.queue_len(Queue::Send) > 0 {
        let best = (0..snapshot.len())
            .filter(|&i| usable(&snapshot[i]) && env.has_window_for(i, Queue::Send, 0))
            .min_by_key(|&i| snapshot[i].rtt_us);
        if let Some(i) = best {
            let packet = PacketRef {
                queue: Queue::Send,
                index: 0,
                id: env.packet(Queue::Send, 0).id,
            };
            actions.push(Action::Push {
                subflow: i,
                subflow_id: snapshot[i].id,
                packet,
            });
            actions.push(Action::Remove { packet });
        }
    }
}

fn progmp_scheduler() -> Scheduler {
    let program = Arc::new(Program::compile(builtin("min_rtt").unwrap().source).unwrap());
    Scheduler::new(program, 1)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("min_rtt");
    for n in [2u32, 8] {
        let env = environment(n);
        let mut s = progmp_scheduler();
        group.bench_with_input(BenchmarkId::new("progmp", n), &env, |b, env| {
            b.iter(|| black_box(s.decide(black_box(env), Instant::ZERO)))
        });
        let (mut snap, mut actions) = (Vec::new(), Vec::new());
        group.bench_with_input(BenchmarkId::new("native", n), &env, |b, env| {
            b.iter(|| {
                native(black_box(env), &mut snap, &mut actions);
                black_box(actions.len())
            })
        });
    }
    group.finish();
}

/// Median nanoseconds per call of `f`, over 101 samples of 2000 calls.
fn median_ns(mut f: impl FnMut()) -> f64 {
    const CALLS: u32 = 2000;
    let mut samples: Vec<f64> = (0..101)
        .map(|_| {
            let t = WallInstant::now();
            for _ in 0..CALLS {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn summary() {
    println!("\nmin_rtt scheduler cost per run (target: ProgMP median <= 1000 ns)");
    for n in [2u32, 8] {
        let env = environment(n);
        let mut s = progmp_scheduler();
        // Both decide the same: one push on the fastest subflow.
        s.decide(&env, Instant::ZERO);
        let (mut snap, mut actions) = (Vec::new(), Vec::new());
        native(&env, &mut snap, &mut actions);
        assert_eq!(s.actions(), &actions[..], "ProgMP and native disagree");
        let p = median_ns(|| {
            black_box(s.decide(black_box(&env), Instant::ZERO));
        });
        let q = median_ns(|| {
            native(black_box(&env), &mut snap, &mut actions);
            black_box(actions.len());
        });
        println!(
            "  {n} subflows: ProgMP {p:7.1} ns, native {q:7.1} ns, ratio {:.2}",
            p / q
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary();
}
