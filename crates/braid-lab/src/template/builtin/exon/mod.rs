//! The `exon` template: Exon exactly-once messaging against kernel TCP, in
//! the settings of the Exon paper's evaluation (§V). `braid bench exon` is a
//! small study of it (one run, the paper's grid, fairness or loopback).
//!
//! One experiment measures both peers: the ratio Exon / TCP is the point,
//! so they share the run and the link. Modes:
//! - `separate`: a two-host emulator testbed with the given link; Exon (a
//!   node in host a to a node in host b), then kernel TCP over the same
//!   link, each alone on it;
//! - `fairness`: one Exon flow and one TCP flow at once over the link,
//!   each one's share of it after a warm-up;
//! - `loopback`: Exon, then TCP, on 127.0.0.1 in this process, no emulator.
//!
//! With `journal`, Exon keeps durable records, and a `separate` or
//! `loopback` experiment also measures Exon without them (same settings,
//! right after): the cost of durability as a ratio of rates, and the group
//! commit rate (messages per fsync) from the counters of both nodes'
//! drivers (issue 23 item 4).
//!
//! Every Exon message is checked end to end by its identifier (`lost`,
//! `duplicated`). Patterns: `oneway` (a sends as fast as backpressure
//! allows; msgs/s at b) and `rpc` (`actors` loops at a, each waiting for its
//! reply before the next request; TCP multiplexes them on one connection as
//! the paper's middleware does; requests/s and latency). A run measures
//! until `messages` messages (requests) or `time_limit`, whichever comes
//! first, and the rate is computed over what arrived in that window, so
//! lossy TCP cannot stall a grid.
//!
//! ```
//! use braid_lab::template::builtin::exon::{settings, Exon, Mode};
//! use braid_lab::template::Template;
//! use braid_lab::param::{Params, Value};
//! let mut p = Params::default();
//! for d in Exon.params() {
//!     p.insert(&d.name, d.default.clone());
//! }
//! assert_eq!(settings(&p).unwrap().mode, Mode::Separate);
//! p.insert("mode", Value::Enum("fairness".into()));
//! p.insert("pattern", Value::Enum("rpc".into()));
//! assert!(settings(&p).unwrap_err().to_string().contains("one-way"));
//! ```

mod exon_run;
mod measure;
pub(crate) mod message;
pub(crate) mod place;
pub mod report;
mod rpc;
pub(crate) mod tcp_run;

use std::path::PathBuf;
use std::time::Duration;

use braid::exon::ExonCc;
use braid::exon::NodeId;
use braid::exon_net::{ExonSecurity, SocketConfig};
use braid::LinkSpec;
use serde::{Deserialize, Serialize};

use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};
use measure::{PeerResult, RunCfg};
use message::Tally;
use place::Ends;
use report::{checks_pass, durability_of, ExonRun, FairnessRun, PeerReport};

/// The artifact holding a run's [`ExonRun`] or [`FairnessRun`].
pub const REPORT_ARTIFACT: &str = "report";

/// The paper's link: RTT 10 ms, 100 Mbit/s (queue: the spec's default, one
/// bandwidth-delay product).
pub const DEFAULT_LINK: &str = "rtt=10ms,rate=100mbit";

/// Largest message (Exon's limit).
pub const MAX_SIZE: u64 = 16 << 20;

/// Smallest message: its identifier.
pub const MIN_SIZE: u64 = message::MIN_SIZE as u64;

/// Fairness: time before the shares are measured (start-up excluded).
pub const FAIRNESS_WARMUP: Duration = Duration::from_secs(3);

/// Exon's congestion controllers by name.
const CC_NAMES: [&str; 8] = braid_proto::CcAlgorithm::NAMES;

/// Messaging pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// No-wait unidirectional messages: msgs/s.
    Oneway,
    /// Request/reply loops: requests/s and latency.
    Rpc,
}

impl Pattern {
    /// `oneway` or `rpc`.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Oneway => "oneway",
            Pattern::Rpc => "rpc",
        }
    }

    /// The key of the rate: `msgs_per_s` or `requests_per_s`.
    pub fn rate_key(self) -> &'static str {
        match self {
            Pattern::Oneway => "msgs_per_s",
            Pattern::Rpc => "requests_per_s",
        }
    }
}

/// How the two peers share the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Exon, then TCP, each alone on the emulated link.
    Separate,
    /// One Exon and one TCP flow at once on the emulated link.
    Fairness,
    /// Exon, then TCP, on 127.0.0.1 (no emulator).
    Loopback,
}

impl Mode {
    /// The parameter value.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Separate => "separate",
            Mode::Fairness => "fairness",
            Mode::Loopback => "loopback",
        }
    }
}

/// The `exon` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exon;

impl Template for Exon {
    fn name(&self) -> &str {
        "exon"
    }

    fn description(&self) -> &str {
        "Exon exactly-once messaging vs kernel TCP (one-way or RPC) over an emulated link or loopback, checked end to end"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::config("mode", ParamType::one_of(&["separate", "fairness", "loopback"]), Value::Enum("separate".into()))
                .doc("separate: Exon then TCP, each alone on the link; fairness: both at once, each one's share; loopback: 127.0.0.1, no emulator"),
            ParamDecl::config("pattern", ParamType::one_of(&["oneway", "rpc"]), Value::Enum("oneway".into()))
                .doc("oneway (msgs/s) or rpc (requests/s and latency); fairness runs oneway flows"),
            ParamDecl::config("actors", ParamType::int_range(1, 10_000), Value::Int(200))
                .doc("rpc: concurrent request/reply loops"),
            ParamDecl::config("size", ParamType::Size, Value::Size(1000))
                .doc("message (request, reply) size, 8 B to 16 MiB (1KB = 1000 bytes as in the paper)"),
            ParamDecl::config("messages", ParamType::int_range(1, i64::MAX), Value::Int(100_000))
                .doc("messages (oneway) or requests (rpc, over all actors) per run, at most"),
            ParamDecl::config("time_limit", ParamType::Duration, Value::Duration(Duration::from_secs(10))).doc(
                "longest a run measures (it ends earlier once `messages` arrived); fairness: measured after 3 s of warm-up",
            ),
            ParamDecl::config("cc", ParamType::one_of(&CC_NAMES), Value::Enum("bbr".into()))
                .doc("Exon's congestion control: bbr, or one of Braid's loss-based controllers"),
            ParamDecl::config("queue_loss_guard", ParamType::Bool, Value::Bool(true))
                .doc("Exon's BBR-style controller backs off on queue loss (false: unfair to TCP, for comparison)"),
            ParamDecl::config("tcp_cc", ParamType::String, Value::String("cubic".into()))
                .doc("congestion control of the kernel TCP peer (a kernel algorithm name: cubic, reno, bbr, ...)"),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "Exon seals every datagram in authenticated sessions (false: the bare protocol, --insecure-no-auth, for its cost)",
            ),
            ParamDecl::config("journal", ParamType::Bool, Value::Bool(false)).doc(
                "Exon keeps its sender and receiver records durable (clock and journal files, one fsync per group commit)",
            ),
            ParamDecl::env("journal_dir", ParamType::String, Value::String(String::new()))
                .doc("journal: the directory of the files (its disk is part of the cost; empty: the experiment's work directory)"),
            ParamDecl::env("link", ParamType::Link, Value::Link(DEFAULT_LINK.into()))
                .doc("the emulated link between the hosts (separate, fairness; loopback leaves it at its default)"),
        ]
    }

    fn requirements(&self) -> Requirements {
        // Static per template: loopback needs no emulator, the other modes
        // check for it when they run.
        Requirements { emulator: false, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(s) = settings(params) else { return Duration::from_secs(20) };
        match s.mode {
            Mode::Fairness => FAIRNESS_WARMUP + s.limit + Duration::from_secs(4),
            // With a journal, Exon runs twice: with it and without.
            Mode::Separate | Mode::Loopback => s.limit * (2 + u32::from(s.journal)) + Duration::from_secs(4),
        }
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = settings(ctx.params)?;
        if s.mode != Mode::Loopback {
            braid_emu::check_capabilities().map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        }
        let journal_dir = match (s.journal, &s.journal_dir) {
            (false, _) => None,
            (true, Some(dir)) => Some(dir.clone()),
            (true, None) => Some(ctx.work_dir().join("journal")),
        };
        match s.mode {
            Mode::Loopback => {
                let cfg = run_cfg_with(&s, 4096, journal_dir);
                let m = measure_pair(ctx, &s, &Ends::loopback(), &cfg, "loopback")?;
                report_pair(ctx, &s, &m);
            }
            Mode::Separate | Mode::Fairness => {
                let tb = ctx.testbed().link(s.link.clone()).build().context("building the testbed")?;
                let measured = Ends::testbed(&tb).and_then(|ends| match s.mode {
                    Mode::Fairness => fairness(ctx, &s, &ends, journal_dir).map(|f| report_fairness(ctx, &f)),
                    _ => {
                        let cfg = run_cfg_with(&s, outstanding(&s.link, s.size), journal_dir);
                        let m = measure_pair(ctx, &s, &ends, &cfg, &s.link.to_string())?;
                        report_pair(ctx, &s, &m);
                        Ok(())
                    }
                });
                if let Err(e) = tb.down() {
                    ctx.warn(&format!("tearing the testbed down: {e}"));
                }
                measured?;
            }
        }
        Ok(())
    }
}

/// One experiment's settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How the peers share the experiment.
    pub mode: Mode,
    /// One-way or RPC.
    pub pattern: Pattern,
    /// The emulated link (unused on loopback).
    pub link: LinkSpec,
    /// Message size, bytes.
    pub size: usize,
    /// Messages (requests) at most.
    pub messages: u64,
    /// RPC loops.
    pub actors: u64,
    /// Longest a run measures.
    pub limit: Duration,
    /// Exon's congestion control.
    pub cc: ExonCc,
    /// Its name.
    pub cc_name: String,
    /// Exon's queue-loss guard.
    pub queue_loss_guard: bool,
    /// The TCP peer's congestion control.
    pub tcp_cc: String,
    /// Exon's datagrams sealed in authenticated sessions (false: the bare
    /// protocol).
    pub encrypted: bool,
    /// Durable records.
    pub journal: bool,
    /// Where (`None`: the experiment's work directory).
    pub journal_dir: Option<PathBuf>,
}

/// The settings the parameters describe (every parameter of [`Exon`]
/// present), or why they make no sense together.
pub fn settings(params: &Params) -> Result<Settings, TemplateError> {
    let invalid = |m: String| TemplateError::Invalid(m);
    let mode = match params.str("mode")? {
        "separate" => Mode::Separate,
        "fairness" => Mode::Fairness,
        "loopback" => Mode::Loopback,
        other => return Err(invalid(format!("mode `{other}`: expected separate, fairness or loopback"))),
    };
    let pattern = match params.str("pattern")? {
        "oneway" => Pattern::Oneway,
        "rpc" => Pattern::Rpc,
        other => return Err(invalid(format!("pattern `{other}`: expected oneway or rpc"))),
    };
    if mode == Mode::Fairness && pattern == Pattern::Rpc {
        return Err(invalid("mode fairness runs one-way flows: leave pattern at oneway".into()));
    }
    let size = params.size("size")?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
        return Err(invalid(format!("size {size}: must be between 8 B and 16 MiB (e.g. 1000, 1KiB, 64)")));
    }
    let link = params.link("link")?;
    if mode == Mode::Loopback && link.to_string() != canonical(DEFAULT_LINK) {
        return Err(invalid(format!("mode loopback uses no link: leave link at its default, not `{link}`")));
    }
    let cc_name = params.str("cc")?.to_string();
    let cc: ExonCc = cc_name.parse().map_err(|e| invalid(format!("cc: {e}")))?;
    let tcp_cc = params.str("tcp_cc")?.to_string();
    let ok = !tcp_cc.is_empty() && tcp_cc.len() < 16 && tcp_cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(invalid(format!(
            "tcp_cc `{tcp_cc}`: expected a kernel algorithm name such as cubic, reno or bbr"
        )));
    }
    let journal = params.bool("journal")?;
    let journal_dir = match params.str("journal_dir")? {
        "" => None,
        dir if journal => Some(PathBuf::from(dir)),
        dir => return Err(invalid(format!("journal_dir `{dir}` without journal = true: the directory would not be used"))),
    };
    let messages = u64::try_from(params.int("messages")?).ok().filter(|&m| m >= 1);
    let limit = params.duration("time_limit")?;
    if limit.is_zero() {
        return Err(invalid("time_limit 0s: a run must measure for some time, e.g. 10s".into()));
    }
    Ok(Settings {
        mode,
        pattern,
        link,
        size: size as usize,
        messages: messages.ok_or_else(|| invalid("messages: expected at least 1".into()))?,
        actors: u64::try_from(params.int("actors")?).unwrap_or(1).max(1),
        limit,
        cc,
        cc_name,
        queue_loss_guard: params.bool("queue_loss_guard")?,
        tcp_cc,
        encrypted: params.bool("encrypted")?,
        journal,
        journal_dir,
    })
}

/// The canonical text of a spec known to parse.
fn canonical(spec: &str) -> String {
    spec.parse::<LinkSpec>().map(|l| l.to_string()).unwrap_or_else(|_| spec.to_string())
}

/// Exon's backpressure over `link`: at most ~8 bandwidth-delay products of
/// messages queued or unacknowledged at the sender (TCP's socket buffer
/// plays this role for TCP), so that what was accepted drains within
/// seconds even on a slow link.
fn outstanding(link: &LinkSpec, size: usize) -> usize {
    let rtt = link.rtt().max(Duration::from_millis(1));
    let bdp = link.rate().map_or(1 << 20, |r| (r.bytes_per_sec_f64() * rtt.as_secs_f64()) as u64);
    (8 * bdp / size as u64).clamp(256, 65_536) as usize
}

fn run_cfg_with(s: &Settings, outstanding: usize, journal_dir: Option<PathBuf>) -> RunCfg {
    let mut exon = SocketConfig::default();
    exon.node.cc = s.cc;
    exon.node.queue_loss_guard = s.queue_loss_guard;
    exon.node.machine.max_outstanding = outstanding;
    if !s.encrypted {
        // Each end claims its own ID (see exon_run::socket_config).
        exon.security = ExonSecurity::InsecureNoAuth { id: NodeId(0) };
    }
    RunCfg {
        size: s.size,
        messages: s.messages,
        actors: s.actors as usize,
        limit: s.limit,
        drain: s.limit.max(Duration::from_secs(10)),
        exon,
        journal_dir,
    }
}

/// What one `separate` or `loopback` experiment measured.
struct Measured {
    /// Exon as configured (durable with a journal).
    exon: PeerResult,
    /// With a journal: Exon without one, same settings.
    volatile: Option<PeerResult>,
    tcp: PeerResult,
}

/// Exon (with a journal: durable, then without one), then TCP, between
/// `ends`.
fn measure_pair(ctx: &Context<'_>, s: &Settings, ends: &Ends, cfg: &RunCfg, over: &str) -> Result<Measured, TemplateError> {
    let p = s.pattern.name();
    let exon_run = |cfg: &RunCfg| match s.pattern {
        Pattern::Oneway => exon_run::oneway(ends, cfg),
        Pattern::Rpc => exon_run::rpc(ends, cfg),
    };
    let runs = if cfg.journal_dir.is_some() { 3.0 } else { 2.0 };
    ctx.progress(0.0);
    let exon = exon_run(cfg).with_context(|| format!("Exon {p} over {over}"))?;
    ctx.progress(1.0 / runs);
    let volatile = match cfg.journal_dir {
        Some(_) => {
            ctx.check_deadline("after the durable Exon run, before the volatile one")?;
            let volatile_cfg = RunCfg { journal_dir: None, ..cfg.clone() };
            let v = exon_run(&volatile_cfg).with_context(|| format!("Exon {p} without a journal over {over}"))?;
            ctx.progress(2.0 / runs);
            Some(v)
        }
        None => None,
    };
    ctx.check_deadline("after the Exon run, before TCP's")?;
    let tcp = match s.pattern {
        Pattern::Oneway => tcp_run::oneway(ends, cfg, &s.tcp_cc),
        Pattern::Rpc => tcp_run::rpc(ends, cfg, &s.tcp_cc),
    }
    .with_context(|| format!("TCP {p} over {over}"))?;
    ctx.progress(1.0);
    Ok(Measured { exon, volatile, tcp })
}

/// Width of the bins of a run's rate series: about 20 over the window,
/// between 100 ms and 1 s.
fn series_bin(window: Duration) -> Duration {
    (window / 20).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// `name` over the window of `r` (one-way runs: first deliveries per second).
fn record_rate_series(ctx: &mut Context<'_>, name: &str, r: &PeerResult) {
    let bin = series_bin(r.window);
    for (i, n) in r.tally.per_bin(r.start, r.start + r.window, bin).into_iter().enumerate() {
        let t = (bin * (i as u32 + 1)).min(r.window);
        let width = t.saturating_sub(bin * i as u32).as_secs_f64().max(1e-9);
        ctx.series(name, t.as_secs_f64(), n as f64 / width);
    }
}

/// The scalars, series and artifact of a run of Exon and TCP in turn.
fn report_pair(ctx: &mut Context<'_>, s: &Settings, m: &Measured) {
    let (exon, tcp) = (&m.exon, &m.tcp);
    let (e, t) = (PeerReport::new(s.pattern, exon, true), PeerReport::new(s.pattern, tcp, false));
    let v = m.volatile.as_ref().map(|v| PeerReport::new(s.pattern, v, true));
    let (fsyncs, messages_per_fsync, durable_over_volatile, durability) = durability_of(&e, exon, v.as_ref());
    // Both Exon runs are checked end to end; the sums cover both.
    let (v_lost, v_duplicated) = m.volatile.as_ref().map_or((0, 0), |v| (v.lost, v.duplicated));
    let volatile_ok = m.volatile.as_ref().is_none_or(|v| checks_pass(v, tcp));
    let run = ExonRun {
        mode: s.mode,
        pattern: s.pattern,
        link: (s.mode != Mode::Loopback).then(|| s.link.to_string()),
        size: s.size as u64,
        messages: s.messages,
        actors: (s.pattern == Pattern::Rpc).then_some(s.actors),
        timeout_s: s.limit.as_secs_f64(),
        seed: ctx.seed,
        tcp_cc: s.tcp_cc.clone(),
        exon_cc: s.cc_name.clone(),
        journal: s.journal,
        encrypted: s.encrypted,
        ratio: e.rate() / t.rate().max(1e-9),
        exon: e,
        tcp: t,
        lost: exon.lost + v_lost,
        duplicated: exon.duplicated + v_duplicated,
        ok: checks_pass(exon, tcp) && volatile_ok,
        fsyncs,
        messages_per_fsync,
        volatile: v,
        durable_over_volatile,
        durability,
    };
    let key = s.pattern.rate_key();
    ctx.record(&format!("exon_{key}"), run.exon.rate());
    ctx.record(&format!("tcp_{key}"), run.tcp.rate());
    ctx.record("exon_over_tcp_ratio", run.ratio);
    for (peer, p) in [("exon", &run.exon), ("tcp", &run.tcp)] {
        ctx.record(&format!("{peer}_delivered"), p.delivered as f64);
        ctx.record(&format!("{peer}_corrupt"), p.corrupt as f64);
        if let Some(v) = p.p50_ms {
            ctx.record(&format!("{peer}_p50_ms"), v);
        }
        if let Some(v) = p.p99_ms {
            ctx.record(&format!("{peer}_p99_ms"), v);
        }
    }
    ctx.record("lost", run.lost as f64);
    ctx.record("duplicated", run.duplicated as f64);
    ctx.record("exon_fsyncs", run.fsyncs as f64);
    if let Some(x) = run.messages_per_fsync {
        ctx.record("exon_messages_per_fsync", x);
    }
    if let (Some(v), Some(r)) = (&run.volatile, run.durable_over_volatile) {
        ctx.record(&format!("exon_volatile_{key}"), v.rate());
        ctx.record("durable_over_volatile_ratio", r);
    }
    ctx.record("exon_in_doubt", exon.in_doubt as f64);
    ctx.record("exon_datagrams_sent", exon.datagrams as f64);
    ctx.record("exon_fragments_retransmitted", exon.retransmitted as f64);
    ctx.record("ok", f64::from(u8::from(run.ok)));
    if s.pattern == Pattern::Oneway {
        record_rate_series(ctx, "msgs_per_s.exon", exon);
        record_rate_series(ctx, "msgs_per_s.tcp", tcp);
    }
    for (what, x) in std::iter::once(("Exon", exon)).chain(m.volatile.as_ref().map(|v| ("Exon without a journal", v))) {
        if !checks_pass(x, tcp) {
            ctx.warn(&format!(
                "{what}: end-to-end checks failed: lost {}, duplicated {}, corrupt {}, in doubt {}, drained {}; TCP corrupt {}",
                x.lost, x.duplicated, x.corrupt, x.in_doubt, x.drained, tcp.corrupt
            ));
        }
    }
    artifact(ctx, &run);
}

fn artifact(ctx: &mut Context<'_>, report: &impl Serialize) {
    match serde_json::to_value(report) {
        Ok(json) => ctx.artifact(REPORT_ARTIFACT, json),
        Err(e) => ctx.warn(&format!("the run's report did not serialize: {e}")),
    }
}

/// One Exon flow and one TCP flow at the same time; each one's goodput
/// over the same window after the warm-up.
fn fairness(
    ctx: &mut Context<'_>,
    s: &Settings,
    ends: &Ends,
    journal_dir: Option<PathBuf>,
) -> Result<FairnessRun, TemplateError> {
    let link_bps = s.link.rate().map(|r| r.bits_per_sec() as f64);
    let mut cfg = run_cfg_with(s, outstanding(&s.link, s.size), journal_dir);
    cfg.messages = u64::MAX;
    cfg.limit = FAIRNESS_WARMUP + s.limit;
    ctx.progress(0.0);
    let exon = exon_run::oneway_start(ends, &cfg).context("starting the Exon flow")?;
    let tcp = tcp_run::oneway_start(ends, &cfg, &s.tcp_cc).context("starting the TCP flow")?;
    let tcp = tcp.finish().context("TCP flow")?;
    let exon = exon.finish().context("Exon flow")?;
    ctx.progress(1.0);
    let from = exon.start.max(tcp.start) + FAIRNESS_WARMUP;
    let to = from + s.limit;
    let secs = s.limit.as_secs_f64();
    let bps = |t: &Tally| t.delivered_between(from, to) as f64 * s.size as f64 * 8.0 / secs;
    let (e, t) = (bps(&exon.tally), bps(&tcp.tally));
    for (name, tally) in [("goodput_mbps.exon", &exon.tally), ("goodput_mbps.tcp", &tcp.tally)] {
        let bin = Duration::from_secs(1);
        let start = exon.start.max(tcp.start);
        for (i, n) in tally.per_bin(start, to, bin).into_iter().enumerate() {
            ctx.series(name, (i + 1) as f64, n as f64 * s.size as f64 * 8.0 / 1e6);
        }
    }
    let share = |x: f64| link_bps.map(|l| x / l);
    Ok(FairnessRun {
        link: s.link.to_string(),
        seconds: secs,
        warmup_s: FAIRNESS_WARMUP.as_secs_f64(),
        exon_mbps: e / 1e6,
        tcp_mbps: t / 1e6,
        exon_share: share(e),
        tcp_share: share(t),
        tcp_share_of_total: t / (e + t).max(1e-9),
        lost: exon.lost,
        duplicated: exon.duplicated,
        tcp_cc: s.tcp_cc.clone(),
        exon_cc: s.cc_name.clone(),
        seed: ctx.seed,
        encrypted: s.encrypted,
        ok: exon.lost == 0 && exon.duplicated == 0 && exon.corrupt == 0 && tcp.corrupt == 0,
    })
}

fn report_fairness(ctx: &mut Context<'_>, f: &FairnessRun) {
    ctx.record("exon_mbps", f.exon_mbps);
    ctx.record("tcp_mbps", f.tcp_mbps);
    if let Some(v) = f.exon_share {
        ctx.record("exon_share_ratio", v);
    }
    if let Some(v) = f.tcp_share {
        ctx.record("tcp_share_ratio", v);
    }
    ctx.record("tcp_share_of_total_ratio", f.tcp_share_of_total);
    ctx.record("lost", f.lost as f64);
    ctx.record("duplicated", f.duplicated as f64);
    ctx.record("ok", f64::from(u8::from(f.ok)));
    artifact(ctx, f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneoff::{run_experiments, OneOffOptions};
    use std::sync::Arc;

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&Exon)
    }

    fn invalid(p: &Params, want: &str) {
        match settings(p) {
            Err(TemplateError::Invalid(m)) => assert!(m.contains(want), "{m}"),
            other => panic!("expected Invalid({want}), got {other:?}"),
        }
    }

    #[test]
    fn declarations_have_todays_defaults() {
        crate::template::builtin::test_support::assert_declarations_valid(&Exon, &[]);
        let s = settings(&defaults()).unwrap();
        assert_eq!((s.mode, s.pattern, s.size, s.messages, s.actors), (Mode::Separate, Pattern::Oneway, 1000, 100_000, 200));
        assert_eq!(s.limit, Duration::from_secs(10));
        assert_eq!((s.cc, s.queue_loss_guard, s.tcp_cc.as_str(), s.journal), (ExonCc::Bbr, true, "cubic", false));
        assert_eq!(s.link.to_string(), DEFAULT_LINK);
        assert_eq!(Exon.expected_duration(&defaults()), Duration::from_secs(24));
    }

    #[test]
    fn nonsense_combinations_are_invalid() {
        let mut p = defaults();
        p.insert("size", Value::Size(4));
        invalid(&p, "between 8 B and 16 MiB");
        let mut p = defaults();
        p.insert("tcp_cc", Value::String("cu bic".into()));
        invalid(&p, "kernel algorithm name");
        let mut p = defaults();
        p.insert("mode", Value::Enum("loopback".into()));
        p.insert("link", Value::Link("rtt=50ms".into()));
        invalid(&p, "uses no link");
        let mut p = defaults();
        p.insert("journal_dir", Value::String("/tmp/j".into()));
        invalid(&p, "without journal = true");
        p.insert("journal", Value::Bool(true));
        assert_eq!(settings(&p).unwrap().journal_dir, Some(PathBuf::from("/tmp/j")));
        let mut p = defaults();
        p.insert("time_limit", Value::Duration(Duration::ZERO));
        invalid(&p, "time_limit");
    }

    #[test]
    fn backpressure_scales_with_the_bandwidth_delay_product() {
        let link = |s: &str| s.parse::<LinkSpec>().unwrap();
        // 100 Mbit/s × 10 ms = 125 kB; 8 of them in 1000-byte messages.
        assert_eq!(outstanding(&link("rtt=10ms,rate=100mbit"), 1000), 1000);
        assert_eq!(outstanding(&link("rtt=10ms,rate=1mbit"), 1000), 256);
        assert_eq!(outstanding(&link("rtt=100ms"), 64), 65_536);
    }

    #[test]
    fn series_bins_stay_readable() {
        assert_eq!(series_bin(Duration::from_millis(500)), Duration::from_millis(100));
        assert_eq!(series_bin(Duration::from_secs(10)), Duration::from_millis(500));
        assert_eq!(series_bin(Duration::from_secs(100)), Duration::from_secs(1));
    }

    /// The durability figures agree with each other and with the scalars:
    /// with a journal, fsyncs were counted, messages per fsync times fsyncs
    /// gives the messages, the volatile run happened and the ratio is of
    /// the two rates; without one, nothing was counted.
    fn durability_is_consistent(a: &ExonRun, r: &crate::oneoff::OneOffResult) {
        assert_eq!(r.metric("exon_fsyncs"), Some(a.fsyncs as f64));
        if !a.journal {
            assert_eq!((a.fsyncs, a.messages_per_fsync), (0, None), "{a:?}");
            assert!(a.volatile.is_none() && a.durable_over_volatile.is_none() && a.durability.is_none());
            assert_eq!(r.metric("durable_over_volatile_ratio"), None);
            return;
        }
        let d = a.durability.as_ref().expect("a journal run reports its durability");
        assert!(a.fsyncs > 0 && d.a.fsyncs > 0 && d.b.fsyncs > 0, "{a:?}");
        assert_eq!(a.fsyncs, d.a.fsyncs + d.b.fsyncs);
        let messages = (d.a.messages + d.b.messages) as f64;
        let per = a.messages_per_fsync.unwrap();
        assert!((per * a.fsyncs as f64 - messages).abs() < 1e-6 * messages, "{a:?}");
        for n in [&d.a, &d.b] {
            assert!((n.messages_per_fsync.unwrap() * n.fsyncs as f64 - n.messages as f64).abs() < 1e-6 * n.messages as f64);
            assert!(n.records >= n.messages / 2, "{n:?}");
        }
        // Group commit: the sender's commits carry many messages each.
        assert!(d.a.messages_per_fsync.unwrap() > 1.0, "{d:?}");
        let v = a.volatile.as_ref().expect("the volatile run");
        assert!(v.rate() > 0.0);
        assert_eq!((d.durable_per_s, d.volatile_per_s), (a.exon.rate(), v.rate()));
        assert_eq!(a.durable_over_volatile, Some(a.exon.rate() / v.rate()));
        assert_eq!(r.metric("durable_over_volatile_ratio"), a.durable_over_volatile);
        assert_eq!(r.metric("exon_messages_per_fsync"), a.messages_per_fsync);
        assert!(a.durable_row().is_some());
    }

    /// Loopback through the one-off runner (no root needed): both peers
    /// deliver, Exon's checks pass, the scalars match the artifact.
    #[test]
    fn loopback_run_records_what_the_artifact_says() {
        let exon: Arc<dyn Template> = Arc::new(Exon);
        let experiments = vec![
            vec![
                ("mode".to_string(), Value::Enum("loopback".into())),
                ("size".to_string(), Value::Size(64)),
                ("messages".to_string(), Value::Int(2000)),
                ("time_limit".to_string(), Value::Duration(Duration::from_secs(5))),
            ],
            vec![
                ("mode".to_string(), Value::Enum("loopback".into())),
                ("pattern".to_string(), Value::Enum("rpc".into())),
                ("actors".to_string(), Value::Int(4)),
                ("messages".to_string(), Value::Int(200)),
                ("time_limit".to_string(), Value::Duration(Duration::from_secs(5))),
                ("journal".to_string(), Value::Bool(true)),
            ],
            vec![
                ("mode".to_string(), Value::Enum("loopback".into())),
                ("size".to_string(), Value::Size(64)),
                ("messages".to_string(), Value::Int(2000)),
                ("time_limit".to_string(), Value::Duration(Duration::from_secs(5))),
                ("journal".to_string(), Value::Bool(true)),
            ],
        ];
        let runs = run_experiments(exon, experiments, &OneOffOptions { seed: 9, timeout: None }).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?}", r.error);
            let a: ExonRun = serde_json::from_value(r.artifact(REPORT_ARTIFACT).unwrap().clone()).unwrap();
            assert!(a.ok, "{a:?}");
            let key = a.pattern.rate_key();
            assert_eq!(r.metric(&format!("exon_{key}")), Some(a.exon.rate()));
            assert_eq!(r.metric(&format!("tcp_{key}")), Some(a.tcp.rate()));
            assert_eq!(r.metric("exon_over_tcp_ratio"), Some(a.ratio));
            assert_eq!(r.metric("lost"), Some(0.0));
            assert_eq!(r.metric("ok"), Some(1.0));
            assert!(a.exon.rate() > 0.0 && a.tcp.rate() > 0.0, "{a:?}");
            assert_eq!(a.link, None);
            durability_is_consistent(&a, r);
            match a.pattern {
                Pattern::Oneway if a.journal => {
                    assert_eq!(a.exon.delivered, 2000);
                    // Node a committed each message it sent once, node b
                    // each it received once: 2000 each way.
                    let d = a.durability.as_ref().unwrap();
                    assert_eq!((d.a.messages, d.b.messages), (2000, 2000), "{d:?}");
                }
                Pattern::Oneway => {
                    assert_eq!((a.exon.delivered, a.seed), (2000, 9));
                    let series = r.series("msgs_per_s.exon");
                    assert!(!series.is_empty());
                    // The series counts the same deliveries as the rate.
                    let bin = series_bin(Duration::from_secs_f64(a.exon.window_s)).as_secs_f64();
                    let total: f64 = series.iter().enumerate().map(|(i, &(t, v))| v * (t - bin * i as f64)).sum();
                    assert!((total - 2000.0).abs() < 1e-6, "{total}");
                }
                Pattern::Rpc => {
                    assert!(a.journal);
                    assert_eq!(a.actors, Some(4));
                    assert_eq!(a.exon.delivered, 200);
                    // Requests and replies: 200 sent and 200 received at
                    // each node.
                    let d = a.durability.as_ref().unwrap();
                    assert_eq!((d.a.messages, d.b.messages), (400, 400), "{d:?}");
                    assert_eq!(r.metric("exon_p50_ms"), a.exon.p50_ms);
                    assert!(a.exon.p50_ms <= a.exon.p99_ms);
                }
            }
        }
    }
}
