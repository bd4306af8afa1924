//! Compiled programs and their per-connection instances (thesis §3.3.3,
//! "Scheduler Triggering and Execution", and §3.4.2).
//!
//! A [`Program`] is compiled once and shared (behind an `Arc`) by every
//! connection that uses it. Each connection owns a [`Scheduler`]: the
//! program plus the memory its runs work in. The transport calls
//! [`Scheduler::run`] whenever something may allow progress (new data in
//! `Q`, an acknowledgement, a loss, a subflow added or removed, a register
//! set by the application); a run may push no packet, one, or many.

use std::fmt;
use std::sync::Arc;

use braid_core::{Instant, Rng, SeedableRng};

use crate::compile::{self, StmtFn};
use crate::diag::CompileError;
use crate::env::{Action, Environment, Queue};
use crate::ir::Layout;
use crate::state::{Ctx, RunState};

/// A compiled scheduler, immutable and shareable across connections and
/// threads.
pub struct Program {
    name: Option<String>,
    source: String,
    body: Vec<StmtFn>,
    layout: Layout,
}

impl Program {
    /// Lexes, parses, type-checks and compiles ProgMP source.
    ///
    /// ```
    /// use braid_progmp::Program;
    /// let p = Program::compile("SCHEDULER first; SUBFLOWS.GET(0).PUSH(Q.POP());").unwrap();
    /// assert_eq!(p.name(), Some("first"));
    ///
    /// let err = Program::compile("VAR x = Q.TOP.RTT;").unwrap_err();
    /// let d = err.first();
    /// assert_eq!((d.line(), d.column()), (1, 15));
    /// assert!(d.hint.as_deref().unwrap().contains("LENGTH, SEQ"));
    /// ```
    pub fn compile(source: &str) -> Result<Program, CompileError> {
        let tokens = crate::lexer::tokenize(source).map_err(CompileError::one)?;
        let script = crate::parser::parse(source, &tokens).map_err(CompileError::one)?;
        let checked =
            crate::check::check(&script).map_err(|diagnostics| CompileError { diagnostics })?;
        Ok(Program {
            name: checked.name,
            source: source.to_string(),
            body: compile::block(checked.body),
            layout: checked.layout,
        })
    }

    /// The name given by the optional `SCHEDULER name;` header.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The source it was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("name", &self.name)
            .field("statements", &self.body.len())
            .finish()
    }
}

/// What one run (or several, for [`Scheduler::run_until_idle`]) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Runs executed.
    pub runs: u32,
    /// `Push` actions issued.
    pub pushes: u32,
    /// Packets taken out of `Q` or `RQ` (`Remove` actions).
    pub removed: u32,
    /// Packets a run popped but neither pushed nor dropped, put back where
    /// they were: a popped packet is never lost.
    pub restored: u32,
    /// `DROP`s of a packet from `Q` that had never been sent on any
    /// subflow. A reliable stream cannot discard data, so the packet stayed
    /// in `Q` (it is also counted in `restored`).
    pub refused_drops: u32,
    /// `PRINT` lines produced.
    pub prints: u32,
    /// `PRINT` lines not passed to `tracing` because of the rate limit.
    pub prints_suppressed: u32,
}

impl RunReport {
    fn add(&mut self, o: RunReport) {
        self.runs += o.runs;
        self.pushes += o.pushes;
        self.removed += o.removed;
        self.restored += o.restored;
        self.refused_drops += o.refused_drops;
        self.prints += o.prints;
        self.prints_suppressed += o.prints_suppressed;
    }
}

/// `PRINT` lines go to `tracing` at no more than a burst of
/// [`PRINT_BURST`] lines and [`PRINT_PER_SECOND`] lines per second after
/// that (the thesis, A.2.2, found unthrottled printing costly).
pub const PRINT_BURST: u32 = 20;
/// See [`PRINT_BURST`].
pub const PRINT_PER_SECOND: u64 = 20;

struct PrintLimiter {
    tokens: u32,
    refilled_at: Option<Instant>,
    suppressed: u64,
}

impl PrintLimiter {
    fn allow(&mut self, now: Instant) -> bool {
        let interval_ns = 1_000_000_000 / PRINT_PER_SECOND;
        match self.refilled_at {
            None => {
                self.tokens = PRINT_BURST;
                self.refilled_at = Some(now);
            }
            Some(at) => {
                let earned = now.saturating_duration_since(at).as_nanos() as u64 / interval_ns;
                if earned > 0 {
                    self.tokens =
                        (u64::from(self.tokens) + earned).min(u64::from(PRINT_BURST)) as u32;
                    self.refilled_at =
                        Some(at + std::time::Duration::from_nanos(earned * interval_ns));
                }
            }
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

/// One connection's instance of a [`Program`]: the program, the memory
/// its runs use, its random generator (for `RANDOM`) and its `PRINT` rate
/// limiter.
pub struct Scheduler {
    program: Arc<Program>,
    st: RunState,
    limiter: PrintLimiter,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("program", &self.program)
            .finish()
    }
}

impl Scheduler {
    /// An instance of `program`; `seed` seeds `RANDOM`.
    pub fn new(program: Arc<Program>, seed: u64) -> Self {
        let st = RunState::new(&program.layout, Rng::seed_from_u64(seed));
        Scheduler {
            program,
            st,
            limiter: PrintLimiter {
                tokens: 0,
                refilled_at: None,
                suppressed: 0,
            },
        }
    }

    /// The program this instance runs.
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// Runs the scheduler once against `env` without applying what it
    /// decided: the actions are in [`Scheduler::actions`] until the next
    /// run. `now` is the run's `CURRENT_TIME_MS` (milliseconds since
    /// `Instant`'s epoch).
    pub fn decide<E: Environment>(&mut self, env: &E, now: Instant) -> RunReport {
        let env: &dyn Environment = env;
        let now_ms = i64::try_from(now.as_nanos() / 1_000_000).unwrap_or(i64::MAX);
        self.st.begin(env, now_ms);
        let mut cx = Ctx {
            env,
            st: &mut self.st,
        };
        compile::run_block(&self.program.body, &mut cx);
        let mut report = finish(&mut cx);
        report.prints = self.st.print_ends.len() as u32;
        report.prints_suppressed = self.emit_prints(now, report.refused_drops);
        report
    }

    /// Runs the scheduler once and has `env` apply its actions.
    pub fn run<E: Environment>(&mut self, env: &mut E, now: Instant) -> RunReport {
        let report = self.decide(&*env, now);
        env.apply(&self.st.actions);
        report
    }

    /// Runs the scheduler repeatedly, applying each run's actions, as long
    /// as runs keep pushing packets, at most `max_runs` times. This is how
    /// a transport drains `Q` into subflows after an event, since one run
    /// often pushes a single packet.
    pub fn run_until_idle<E: Environment>(
        &mut self,
        env: &mut E,
        now: Instant,
        max_runs: u32,
    ) -> RunReport {
        let mut total = RunReport::default();
        for _ in 0..max_runs {
            let r = self.run(env, now);
            total.add(r);
            if r.pushes == 0 {
                break;
            }
        }
        total
    }

    /// The actions of the last run, in the order it decided them (`Remove`
    /// actions last).
    pub fn actions(&self) -> &[Action] {
        &self.st.actions
    }

    /// The `PRINT` lines of the last run, all of them (the rate limit only
    /// applies to `tracing`).
    pub fn prints(&self) -> impl Iterator<Item = &str> + '_ {
        let buf = &self.st.print_buf;
        self.st.print_ends.iter().scan(0usize, move |start, &end| {
            let line = &buf[*start..end];
            *start = end;
            Some(line)
        })
    }

    fn emit_prints(&mut self, now: Instant, refused_drops: u32) -> u32 {
        let name = self.program.name().unwrap_or("unnamed");
        let mut suppressed = 0;
        let mut start = 0;
        for &end in &self.st.print_ends {
            let line = &self.st.print_buf[start..end];
            start = end;
            if self.limiter.allow(now) {
                if self.limiter.suppressed > 0 {
                    tracing::info!(target: "braid_progmp::print", scheduler = name, "({} PRINT lines suppressed)", self.limiter.suppressed);
                    self.limiter.suppressed = 0;
                }
                tracing::info!(target: "braid_progmp::print", scheduler = name, "{line}");
            } else {
                suppressed += 1;
            }
        }
        if refused_drops > 0 && self.limiter.allow(now) {
            tracing::warn!(
                scheduler = name,
                refused_drops,
                "DROP of packets never sent: kept in Q"
            );
        }
        suppressed
    }
}

/// Settles the packets the run took out of `Q` and `RQ`: a packet leaves
/// its queue if the run pushed it, or if it was dropped and that loses no
/// data (an `RQ` entry, or a `Q` packet already sent somewhere). Every
/// other one goes back: a popped packet is never lost.
fn finish(cx: &mut Ctx<'_>) -> RunReport {
    let mut report = RunReport {
        runs: 1,
        ..RunReport::default()
    };
    let n_sbf = cx.st.sbfs.len();
    let mut i = 0;
    while i < cx.st.removed.len() {
        let r = cx.st.removed[i];
        i += 1;
        let pushed = cx
            .st
            .actions
            .iter()
            .any(|a| matches!(a, Action::Push { packet, .. } if packet.id == r.id));
        let leaves = pushed
            || match r.loc.queue {
                Queue::Reinject => r.dropped,
                Queue::Send => {
                    r.dropped
                        && (0..n_sbf).any(|s| cx.env.sent_on(r.loc.queue, r.loc.index as usize, s))
                }
                Queue::Unacked => false,
            };
        if leaves {
            let packet = cx.packet_ref(r.loc);
            cx.st.actions.push(Action::Remove { packet });
            report.removed += 1;
        } else {
            report.restored += 1;
            if r.dropped {
                report.refused_drops += 1;
            }
        }
    }
    report.pushes = cx
        .st
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Push { .. }))
        .count() as u32;
    report
}
