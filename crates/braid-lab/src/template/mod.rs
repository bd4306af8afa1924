//! Templates: experiments with declared, typed parameters.
//!
//! A template takes one experiment's parameter values, a seed, a deadline
//! and, when it asks for one, a fresh emulator testbed, and produces
//! records (scalars, time series, warnings). Two kinds implement the one
//! [`Template`] trait:
//! - built-in Rust templates ([`builtin`]): the measurements behind
//!   `braid bench` and the simulator scenarios;
//! - [`command::CommandTemplate`]: any program, in any language, with
//!   `{{name}}` in its command line and `BRAID_PARAM_<NAME>` in its
//!   environment, reporting through `BRAID_LAB_RECORDS`.
//!
//! A template never opens the store, draws a plot or prints: it reports
//! records through its [`Context`] and the lab does the rest.
//!
//! ```
//! use braid_lab::param::{ParamDecl, ParamType, Params, Value};
//! use braid_lab::record::Recorder;
//! use braid_lab::template::{Context, Template, TemplateError};
//! use std::time::{Duration, Instant};
//!
//! /// Records the square of `x`.
//! struct Square;
//! impl Template for Square {
//!     fn name(&self) -> &str { "square" }
//!     fn description(&self) -> &str { "x squared" }
//!     fn params(&self) -> Vec<ParamDecl> {
//!         vec![ParamDecl::config("x", ParamType::float(), Value::Float(1.0))]
//!     }
//!     fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
//!         let x = ctx.params.float("x")?;
//!         ctx.record("square", x * x);
//!         Ok(())
//!     }
//! }
//!
//! let mut params = Params::default();
//! params.insert("x", Value::Float(3.0));
//! let mut rec = Recorder::in_memory();
//! let dir = std::env::temp_dir();
//! let mut ctx = Context::new(&params, 7, Instant::now() + Duration::from_secs(5), &mut rec, &dir, "doc");
//! Square.run(&mut ctx).unwrap();
//! assert_eq!(rec.take().len(), 1);
//! ```

pub mod builtin;
pub mod command;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::param::{ParamDecl, ParamError, Params};
use crate::record::Recorder;
use crate::runner::Interrupt;

/// What a template needs from the machine and the runner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requirements {
    /// It builds emulator testbeds (root, `/dev/net/tun`, iproute2).
    pub emulator: bool,
    /// It measures time or throughput on the real machine: by default its
    /// experiments run alone (a study can still say `exclusive = false`).
    pub exclusive: bool,
}

/// An experiment kind with declared parameters.
pub trait Template: Send + Sync {
    /// The name studies use (`stream`, `sim-transfer`, ...).
    fn name(&self) -> &str;

    /// Bump when a change makes old results incomparable: it is part of
    /// every experiment's id, so a new version reruns instead of resuming.
    fn version(&self) -> u32 {
        1
    }

    /// One line for `braid lab templates`.
    fn description(&self) -> &str;

    /// Every parameter, with its type, role and default.
    fn params(&self) -> Vec<ParamDecl>;

    /// What it needs to run.
    fn requirements(&self) -> Requirements {
        Requirements::default()
    }

    /// About how long one experiment with `params` takes (wall clock), for
    /// `braid lab plan` and the progress bar's first ETA.
    fn expected_duration(&self, _params: &Params) -> Duration {
        Duration::from_secs(1)
    }

    /// Run one experiment: read `ctx.params`, measure, report through `ctx`.
    /// Return before `ctx.deadline` (the runner ends the experiment soon
    /// after it).
    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError>;
}

/// Why an experiment failed.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A parameter is missing or of the wrong type.
    #[error(transparent)]
    Param(#[from] ParamError),
    /// The parameter values are well typed but make no sense together.
    #[error("invalid parameters: {0}")]
    Invalid(String),
    /// The machine cannot run it (no root, no TUN, a program missing).
    #[error("cannot run here: {0}")]
    Unavailable(String),
    /// It ran past its deadline.
    #[error("deadline passed: {0}")]
    Timeout(String),
    /// It was asked to stop (the worker got SIGTERM: the run was
    /// interrupted) and unwound at the named step.
    #[error("interrupted: {0}")]
    Interrupted(String),
    /// The measurement itself failed.
    #[error("{0}")]
    Failed(String),
    /// An I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl TemplateError {
    /// `Failed` from anything printable (an `anyhow::Error` with its chain:
    /// format it with `{:#}` first).
    pub fn failed(e: impl std::fmt::Display) -> TemplateError {
        TemplateError::Failed(e.to_string())
    }

    /// `Io` with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> TemplateError {
        TemplateError::Io { context: context.into(), source }
    }
}

/// What a running experiment gets: its parameters, seed and deadline, a
/// recorder, a private work directory, and testbed names no other
/// experiment uses.
pub struct Context<'a> {
    /// Every declared parameter's value (defaults filled in).
    pub params: &'a Params,
    /// The experiment's seed: all randomness derives from it.
    pub seed: u64,
    /// When the runner gives up on the experiment.
    pub deadline: Instant,
    recorder: &'a mut Recorder,
    work_dir: &'a Path,
    /// `None`: the caller's directory, which exists. `Some`: the runner's
    /// private directory, made fresh on the first [`work_dir`](Self::work_dir)
    /// call (whether that worked).
    on_demand: Option<OnceLock<bool>>,
    tag: String,
    testbeds: u32,
    progress: Option<&'a (dyn Fn(f64) + Sync)>,
    /// A request to stop early (issue 21): the worker's SIGTERM.
    stop: Option<Interrupt>,
}

impl<'a> Context<'a> {
    /// A context. `tag` (a few characters of `a-z0-9`) makes the
    /// experiment's testbed names unique; the runner derives it from the
    /// experiment id.
    pub fn new(
        params: &'a Params,
        seed: u64,
        deadline: Instant,
        recorder: &'a mut Recorder,
        work_dir: &'a Path,
        tag: &str,
    ) -> Context<'a> {
        Context {
            params,
            seed,
            deadline,
            recorder,
            work_dir,
            on_demand: None,
            tag: unique_tag(tag),
            testbeds: 0,
            progress: None,
            stop: None,
        }
    }

    /// A context that a request of `stop` ends early: from then on
    /// [`check_deadline`](Self::check_deadline) fails with
    /// [`TemplateError::Interrupted`] and [`remaining`](Self::remaining)
    /// is zero, so the template unwinds through its usual teardown (its
    /// testbed's `down()`) as it would at its deadline.
    pub fn with_stop(mut self, stop: Interrupt) -> Context<'a> {
        self.stop = Some(stop);
        self
    }

    /// Whether the experiment was asked to stop early.
    pub fn is_stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(Interrupt::is_requested)
    }

    /// A context whose work directory (the runner's private one for this
    /// experiment, which may hold what a killed earlier attempt left) is
    /// made empty and fresh only when the template first asks for it: most
    /// in-process templates never touch the file system, and a directory
    /// created and removed per experiment was most of the runner's cost for
    /// short ones.
    pub(crate) fn with_work_dir_on_demand(mut self) -> Context<'a> {
        self.on_demand = Some(OnceLock::new());
        self
    }

    /// Whether the template asked for its on-demand work directory and it
    /// was made (always true for a context from [`new`](Self::new)).
    pub(crate) fn work_dir_made(&self) -> bool {
        self.on_demand.as_ref().is_none_or(|made| made.get().copied().unwrap_or(false))
    }

    /// Report progress (0..=1) to this callback.
    pub fn with_progress(mut self, progress: &'a (dyn Fn(f64) + Sync)) -> Context<'a> {
        self.progress = Some(progress);
        self
    }

    /// A scalar result.
    pub fn record(&mut self, metric: &str, value: f64) {
        self.recorder.record(metric, value);
    }

    /// A time-series point `t` seconds into the experiment.
    pub fn series(&mut self, series: &str, t: f64, value: f64) {
        self.recorder.series(series, t, value);
    }

    /// A warning for whoever reads the results.
    pub fn warn(&mut self, message: &str) {
        self.recorder.warn(message);
    }

    /// A structured document: a bench's full report, read back by the
    /// command that printed it before the lab existed.
    pub fn artifact(&mut self, name: &str, json: serde_json::Value) {
        self.recorder.artifact(name, json);
    }

    /// The recorder itself (to hand to measurement code).
    pub fn recorder(&mut self) -> &mut Recorder {
        self.recorder
    }

    /// A directory only this experiment writes to (logs, artifacts); it
    /// exists. (Under the runner it is made, empty, on the first call: if
    /// that fails, the error is logged and the template's own use of the
    /// directory reports it with the path.)
    pub fn work_dir(&self) -> &Path {
        if let Some(made) = &self.on_demand {
            made.get_or_init(|| match fresh_dir(self.work_dir) {
                Ok(()) => true,
                Err(e) => {
                    let dir = self.work_dir.display();
                    tracing::warn!(dir = %dir, error = %e, "cannot make the experiment's work directory");
                    false
                }
            });
        }
        self.work_dir
    }

    /// Time left before the deadline (zero once it passed, or once the
    /// experiment was asked to stop).
    pub fn remaining(&self) -> Duration {
        if self.is_stopped() {
            return Duration::ZERO;
        }
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// `Err(Interrupted)` once the experiment was asked to stop,
    /// `Err(Timeout)` once the deadline passed.
    pub fn check_deadline(&self, doing: &str) -> Result<(), TemplateError> {
        if self.is_stopped() {
            Err(TemplateError::Interrupted(doing.to_string()))
        } else if Instant::now() >= self.deadline {
            Err(TemplateError::Timeout(doing.to_string()))
        } else {
            Ok(())
        }
    }

    /// Report that a fraction (0..=1) of the work is done.
    pub fn progress(&self, fraction: f64) {
        if let Some(p) = self.progress {
            p(fraction.clamp(0.0, 1.0));
        }
    }

    /// A name for a new emulator testbed (1–8 characters), unique to this
    /// experiment and call: parallel experiments never share namespaces or
    /// devices. Pass it to `braid_emu::Testbed::builder().name(..)`; the
    /// testbed is torn down when dropped.
    pub fn testbed_name(&mut self) -> String {
        let n = self.testbeds;
        self.testbeds += 1;
        let mut name = format!("l{}{}", self.tag, base36(u64::from(n)));
        name.truncate(8);
        name
    }

    /// A testbed builder already named with [`testbed_name`](Self::testbed_name)
    /// and seeded from the experiment's seed.
    pub fn testbed(&mut self) -> braid_emu::TestbedBuilder {
        let name = self.testbed_name();
        braid_emu::Testbed::builder().name(&name).seed(self.seed)
    }
}

/// An empty directory at `dir`: whatever an earlier attempt left there
/// (records, logs) must not mix into this one.
pub(crate) fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)
}

/// Six base-36 characters from `tag`, this process and a process-wide
/// counter: two contexts never share testbed names, whether they run the
/// same experiment in two processes (two databases, a rerun beside the
/// study) or in one.
fn unique_tag(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CONTEXTS: AtomicU32 = AtomicU32::new(0);
    let mut h = blake3::Hasher::new();
    h.update(tag.as_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&CONTEXTS.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let bytes = h.finalize();
    let n = u64::from_le_bytes(bytes.as_bytes()[..8].try_into().unwrap_or([0; 8]));
    let mut tag = base36(n);
    tag.truncate(6);
    tag
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}

/// Every built-in template.
pub fn builtins() -> Vec<Arc<dyn Template>> {
    builtin::all()
}

/// The built-in template named `name`.
pub fn find_builtin(name: &str) -> Option<Arc<dyn Template>> {
    builtins().into_iter().find(|t| t.name() == name)
}

/// `anyhow::Context`'s shape for template code, producing
/// [`TemplateError::Failed`] with the context and the cause: measurement
/// code keeps its readable `.context("...")?` and the library still
/// returns a typed error.
pub trait ResultExt<T> {
    /// On error: `Failed("{context}: {error}")`.
    fn context(self, context: impl std::fmt::Display) -> Result<T, TemplateError>;
    /// [`context`](Self::context) computed only on error.
    fn with_context<C: std::fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T, TemplateError>;
}

impl<T, E: std::fmt::Display> ResultExt<T> for Result<T, E> {
    fn context(self, context: impl std::fmt::Display) -> Result<T, TemplateError> {
        self.map_err(|e| TemplateError::Failed(format!("{context}: {e}")))
    }
    fn with_context<C: std::fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T, TemplateError> {
        self.map_err(|e| TemplateError::Failed(format!("{}: {e}", f())))
    }
}

impl<T> ResultExt<T> for Option<T> {
    fn context(self, context: impl std::fmt::Display) -> Result<T, TemplateError> {
        self.ok_or_else(|| TemplateError::Failed(context.to_string()))
    }
    fn with_context<C: std::fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T, TemplateError> {
        self.ok_or_else(|| TemplateError::Failed(f().to_string()))
    }
}

/// `bail!`: return `Err(TemplateError::Failed(format!(...)))`.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => { return Err($crate::template::TemplateError::Failed(format!($($arg)*))) };
}

/// `ensure!`: fail with the message unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { $crate::fail!($($arg)*); } };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::Params;

    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-lab-ctx-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn an_on_demand_work_dir_is_made_fresh_only_when_asked_for() {
        let dir = scratch("on-demand");
        let params = Params::default();
        let mut rec = Recorder::in_memory();
        let deadline = Instant::now() + Duration::from_secs(5);
        {
            let ctx = Context::new(&params, 1, deadline, &mut rec, &dir, "t").with_work_dir_on_demand();
            assert!(!ctx.work_dir_made());
            assert!(!dir.exists(), "not made before it is asked for");
        }
        // What an earlier attempt left is gone once it is asked for.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("records.jsonl"), "{\"metric\":\"old\",\"value\":1}\n").unwrap();
        {
            let ctx = Context::new(&params, 1, deadline, &mut rec, &dir, "t").with_work_dir_on_demand();
            assert_eq!(ctx.work_dir(), dir.as_path());
            assert!(ctx.work_dir_made());
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
            // Asked again: made once, what the template wrote stays.
            std::fs::write(dir.join("log"), "x").unwrap();
            ctx.work_dir();
            assert!(dir.join("log").exists());
        }
        // A caller's directory is used as it is.
        let ctx = Context::new(&params, 1, deadline, &mut rec, &dir, "t");
        assert!(ctx.work_dir_made());
        assert!(ctx.work_dir().join("log").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stop_request_fails_check_deadline_and_zeroes_remaining() {
        let params = Params::default();
        let mut rec = Recorder::in_memory();
        let dir = std::env::temp_dir();
        let stop = Interrupt::new();
        let ctx = Context::new(&params, 1, Instant::now() + Duration::from_secs(60), &mut rec, &dir, "t")
            .with_stop(stop.clone());
        assert!(ctx.check_deadline("before").is_ok());
        assert!(ctx.remaining() > Duration::from_secs(30));
        stop.request();
        match ctx.check_deadline("measuring") {
            Err(TemplateError::Interrupted(doing)) => assert_eq!(doing, "measuring"),
            other => panic!("expected Interrupted, got {other:?}"),
        }
        assert_eq!(ctx.remaining(), Duration::ZERO);
    }

    #[test]
    fn an_on_demand_work_dir_that_cannot_be_made_is_reported_as_not_made() {
        let file = scratch("not-a-dir");
        std::fs::write(&file, "a file where a parent directory should be").unwrap();
        let dir = file.join("work");
        let params = Params::default();
        let mut rec = Recorder::in_memory();
        let ctx = Context::new(&params, 1, Instant::now() + Duration::from_secs(5), &mut rec, &dir, "t")
            .with_work_dir_on_demand();
        assert_eq!(ctx.work_dir(), dir.as_path());
        assert!(!ctx.work_dir_made());
        std::fs::remove_file(&file).unwrap();
    }
}
