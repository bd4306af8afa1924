//! ProgMP, the language for multipath packet schedulers (Frömmgen's
//! thesis, chapter 3; grammar in appendix A.5), in user space.
//!
//! Owns: the lexer, parser and type checker, the compiler to closures and
//! the runtime semantics of §3.3, the [`Environment`] interface a multipath
//! transport implements to run schedulers, an in-memory environment for
//! tests ([`MemoryEnv`]), the schedulers of chapter 5 as `.progmp`
//! sources ([`BUILTINS`]), and choosing a scheduler by a shipped one's
//! name or a `.progmp` file ([`load_scheduler`]), as commands and studies
//! name them.
//!
//! Must not depend on: tokio, sockets, `braid-net`, `braid-proto`, the
//! system clock or a thread RNG. Time comes in as a
//! [`braid_core::Instant`]; `RANDOM` draws from a seeded generator. The
//! transport (subflows, queues, loss detection) lives elsewhere and only
//! meets this crate through [`Environment`].
//!
//! ```
//! use std::sync::Arc;
//! use braid_core::Instant;
//! use braid_progmp::{builtin, MemoryEnv, Program, Scheduler, SubflowInfo};
//!
//! let program = Arc::new(Program::compile(builtin("redundant").unwrap().source).unwrap());
//! let mut env = MemoryEnv::new();
//! env.add_subflow(SubflowInfo { id: 1, rtt_us: 20_000, cwnd: 10, ..Default::default() });
//! env.add_subflow(SubflowInfo { id: 2, rtt_us: 50_000, cwnd: 10, ..Default::default() });
//! env.write(1400, 0, true);
//!
//! let mut scheduler = Scheduler::new(program, 7);
//! scheduler.run_until_idle(&mut env, Instant::ZERO, 16);
//! let on: Vec<u32> = env.transmissions().iter().map(|t| t.subflow_id).collect();
//! assert_eq!(on, [1, 2]); // the one packet went out on both subflows
//! ```
//!
//! # The language
//!
//! A scheduler is an optional `SCHEDULER name;` header and a list of
//! statements, run from the top each time the transport calls it.
//! Comments are `// ...` and `/* ... */`. Variables start with a lower-case
//! letter; everything upper case is a keyword, an entity or a property.
//!
//! **Entities.** `SUBFLOWS` (subflow list), `Q` (unsent packets), `QU`
//! (sent, unacknowledged), `RQ` (suspected lost, to reinject), registers
//! `R1`..`R6` (integers kept per connection between runs, settable by the
//! application), `CURRENT_TIME_MS` (the run's time in milliseconds),
//! `RANDOM` (uniform in 0..2³¹, fresh at each use).
//!
//! **Subflow properties** (integers unless marked): `ID`; `RTT` (smoothed
//! round-trip time, **µs**); `RTT_MS` (the same in **ms**); `RTT_VAR`
//! (µs); `CWND`, `SSTHRESH` (packets); `SKBS_IN_FLIGHT` alias
//! `PACKETS_IN_FLIGHT` (packets); `QUEUED` (packets given to the subflow,
//! not yet sent); `LOST_SKBS` (packets); `DELAY_IN`, `DELAY_OUT`,
//! `DELAY_OUT_ESTIMATOR` (one-way delay estimators of thesis §5.8, µs,
//! only comparable between subflows); `USER` (the scheduler's own
//! per-subflow integer); booleans `IS_BACKUP`, `THROTTLED` alias
//! `IS_THROTTLED`, `LOSSY` alias `IS_LOSSY`; `HAS_WINDOW_FOR(packet)`
//! (boolean: the receive window admits the packet). See [`SubflowInfo`].
//!
//! **Packet properties:** `LENGTH` (bytes), `SEQ` (data sequence number),
//! `USER` (the application's tag), `PSH` (boolean: ends a write),
//! `SENT_ON(subflow)` (boolean). See [`PacketInfo`].
//!
//! **Lists.** `EMPTY` alias `IS_EMPTY`, `COUNT`, `FILTER(x => bool)`,
//! `MIN(x => int)`, `MAX(x => int)` (first element on ties), `SUM(x =>
//! int)`, `GET(i)`; packet lists also `TOP` and `POP()` (`POP` only on `Q`
//! and `RQ`). A subflow list is a value fixed when computed; a packet list
//! is a view of its queue, so it reflects the run's own `POP`s.
//!
//! **Expressions**, by increasing precedence, all left-associative: `OR`;
//! `AND`; `==` `!=`; `<` `>` `<=` `>=`; `+` `-`; `*` `/` `%`; prefix `!`;
//! postfix `.PROPERTY`. Integers are 64-bit and wrap; `x / 0` and `x % 0`
//! are 0. `==` and `!=` compare integers, booleans, subflows and packets,
//! and subflows or packets with `NULL`.
//!
//! **Statements:** `VAR x = expr;` (single assignment: a name cannot be
//! declared again where it is visible); `IF (c) { } ELSE IF (c) { } ELSE {
//! }`; `FOREACH (VAR x IN list) { }` (over the list as it was when the
//! loop began); `sbf.PUSH(packet);`; `sbf.SET_USER(int);`; `SET(Rn,
//! int);`; `DROP(packet);`; `PRINT("fmt %d", value, ...);` (`%d`, `%i`,
//! `%u`; integers and booleans); `RETURN;` (last in its block).
//!
//! # Runtime semantics (thesis §3.3, §3.4.2)
//!
//! - A run sees one snapshot of the environment, and its own effects at
//!   once: after `sbf.PUSH(p)`, `sbf.QUEUED` is one higher and
//!   `p.SENT_ON(sbf)` is true; `SET` and `SET_USER` are visible
//!   immediately; a popped packet leaves its queue (one from `Q` appears
//!   at the end of `QU`).
//! - Effects go to an action queue applied after the run
//!   ([`Action`], [`Environment::apply`]).
//! - NULL never fails a run: `MIN`, `MAX`, `GET` and `TOP` of an empty list
//!   are NULL; properties of NULL are 0 or false; `PUSH` and `SET_USER` on
//!   a NULL subflow do nothing and do not evaluate their argument (so
//!   `NULL.PUSH(Q.POP())` pops nothing); pushing or dropping NULL does
//!   nothing.
//! - A popped packet is never lost: one neither pushed nor dropped by the
//!   end of the run goes back to its queue, and `DROP` of a packet of `Q`
//!   that was never sent anywhere is refused (counted in
//!   [`RunReport::refused_drops`]), since a reliable stream cannot discard
//!   data. `DROP` of an `RQ` packet withdraws the reinjection; the packet
//!   stays in flight.
//! - `POP`, the only expression with a side effect, is rejected by the type
//!   checker inside `IF` conditions, lambdas, `FOREACH` lists and `PRINT`
//!   arguments.
//! - `PRINT` lines go to `tracing` (target `braid_progmp::print`),
//!   rate-limited, and are all available from [`Scheduler::prints`].
//! - A program is compiled once to closures and shared through an `Arc`;
//!   each connection's [`Scheduler`] preallocates the run's memory, so runs
//!   do not allocate (buffers sized by the environment grow to its high
//!   water mark and are then reused).

#![warn(missing_docs)]

mod ast;
mod check;
mod compile;
mod diag;
mod env;
mod ir;
mod lexer;
mod library;
mod memory;
mod parser;
mod runtime;
mod state;

pub use diag::{CompileError, Diagnostic, Span};
pub use env::{
    Action, Environment, PacketId, PacketInfo, PacketRef, Queue, Register, SubflowInfo,
    MAX_SUBFLOWS,
};
pub use library::{
    builtin, load_scheduler, Builtin, Library, LibraryError, LoadError, BUILTINS, DEFAULT_SCHEDULER,
};
pub use memory::{MemPacket, MemoryEnv, Transmission};
pub use runtime::{Program, RunReport, Scheduler, PRINT_BURST, PRINT_PER_SECOND};

/// What `braid progmp check FILE` does: compiles `source` and returns a
/// one-line summary, or every error rendered with its position, the
/// quoted source line and a hint. `origin` names the source in messages.
///
/// ```
/// let ok = braid_progmp::check("s.progmp", "SCHEDULER s; SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap();
/// assert!(ok.contains("scheduler s"));
/// let err = braid_progmp::check("s.progmp", "VAR x = 1;\nx = 2;").unwrap_err();
/// assert!(err.contains("s.progmp:2:3") && err.contains("hint:"));
/// ```
pub fn check(origin: &str, source: &str) -> Result<String, String> {
    match Program::compile(source) {
        Ok(p) => Ok(match p.name() {
            Some(n) => format!("{origin}: ok, scheduler {n}"),
            None => format!("{origin}: ok (no SCHEDULER header)"),
        }),
        Err(e) => Err(e.render(origin, source)),
    }
}
