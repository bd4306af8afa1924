//! Any text given to the ProgMP front end compiles or yields positioned
//! errors that render, never a panic; a program that compiles runs on a
//! small environment without panicking or losing a packet.
#![no_main]

use std::sync::Arc;

use braid_core::Instant;
use braid_progmp::{MemoryEnv, Program, Queue, Scheduler, SubflowInfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    match Program::compile(&src) {
        Err(e) => {
            let _ = e.render("fuzz", &src);
        }
        Ok(program) => {
            let mut env = MemoryEnv::new();
            for id in 1..=3u32 {
                env.add_subflow(SubflowInfo {
                    id,
                    rtt_us: u64::from(id) * 7_000,
                    cwnd: 4,
                    is_backup: id == 3,
                    ..Default::default()
                });
            }
            for i in 0..6 {
                env.write(1000 + i, i64::from(i % 3), i % 2 == 0);
            }
            let mut s = Scheduler::new(Arc::new(program), 1);
            s.run_until_idle(&mut env, Instant::from_nanos(1_000_000_000), 64);
            if let Some(p) = env.queue(Queue::Unacked).first() {
                let id = p.info.id;
                env.lose(id);
            }
            s.run_until_idle(&mut env, Instant::from_nanos(2_000_000_000), 64);
            let held = env.queue(Queue::Send).len() + env.queue(Queue::Unacked).len();
            assert_eq!(held, 6, "a packet went missing");
        }
    }
});
