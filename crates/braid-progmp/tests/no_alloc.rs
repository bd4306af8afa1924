//! A run allocates nothing (thesis §3.3.2): once a scheduler instance has
//! seen an environment of a given size, further runs do not touch the
//! heap. Counted with a global allocator, on this test's thread only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use braid_core::Instant;
use braid_progmp::*;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

/// Environments that drive the schedulers down different paths: plenty of
/// room, full windows, a reinjection pending, packets tagged for HTTP/2.
fn environments() -> Vec<MemoryEnv> {
    let mut out = Vec::new();
    for (n, cwnd, lose) in [
        (2u32, 40u32, false),
        (8, 40, false),
        (4, 0, false),
        (3, 40, true),
    ] {
        let mut env = MemoryEnv::new();
        for id in 1..=n {
            env.add_subflow(SubflowInfo {
                id,
                rtt_us: 10_000 * u64::from(id),
                cwnd,
                is_backup: id == n && n > 2,
                delay_out_us: 1000 * i64::from(n - id),
                ..Default::default()
            });
        }
        env.registers[0] = 1;
        for i in 0..24 {
            env.write(1400, i % 3, i % 5 == 4);
        }
        let mut mover = Scheduler::new(
            Arc::new(Program::compile("SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap()),
            0,
        );
        for _ in 0..8 {
            mover.run(&mut env, Instant::ZERO);
        }
        if lose {
            let id = env.queue(Queue::Unacked)[2].info.id;
            env.lose(id);
        }
        out.push(env);
    }
    out
}

#[test]
fn runs_do_not_allocate_once_warm() {
    let probe = allocations_during(|| {
        std::hint::black_box(Vec::<u8>::with_capacity(16));
    });
    assert_eq!(probe, 1, "the counter counts");
    let extra = "SCHEDULER busy;
        VAR all = Q.FILTER(p => p.LENGTH > 0);
        FOREACH (VAR p IN all) { PRINT(\"seq %d on %d\", p.SEQ, SUBFLOWS.COUNT); }
        FOREACH (VAR s IN SUBFLOWS) { s.SET_USER(s.USER + 1); s.PUSH(QU.MAX(p => p.SEQ)); }
        SET(R2, RANDOM + CURRENT_TIME_MS + QU.SUM(p => p.LENGTH));
        DROP(RQ.POP());";
    let mut sources: Vec<&str> = BUILTINS.iter().map(|b| b.source).collect();
    sources.push(extra);
    let envs = environments();
    for src in sources {
        let program = Arc::new(Program::compile(src).unwrap());
        let mut s = Scheduler::new(program.clone(), 3);
        let mut now = Instant::from_nanos(5_000_000_000);
        for env in &envs {
            s.decide(env, now);
        }
        let n = allocations_during(|| {
            for round in 0..20u64 {
                for env in &envs {
                    now += std::time::Duration::from_millis(round);
                    s.decide(env, now);
                }
            }
        });
        assert_eq!(
            n,
            0,
            "scheduler {:?} allocated {n} times in 80 runs",
            program.name()
        );
    }
}
