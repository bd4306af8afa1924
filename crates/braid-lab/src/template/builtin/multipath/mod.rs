//! The `multipath` template: Braid multipath with ProgMP schedulers
//! against kernel MPTCP over two (or more) emulated paths.
//! `braid bench multipath` runs one goodput experiment and one FCT
//! experiment per scheduler.
//!
//! `part = goodput`: one bulk Braid connection over every path with
//! `scheduler`, one kernel MPTCP connection (the emulator configures the
//! subflow endpoints) and single-path kernel TCP on path 1 for reference,
//! one after the other on the same testbed, each counted at the receiver
//! for `secs` after `warmup`. `braid_over_mptcp_ratio` compares the first
//! two, measured in the same experiment.
//!
//! `part = fct`: `flows` request/response flows (a 64-byte request,
//! `fct_bytes` of response, `gap` apart) on one Braid connection scheduled
//! by `scheduler`, with p50/p90/p99 of their completion times. The bench
//! runs it over its paths with `loss=2%` each; a study lists the lossy
//! links it wants as `path1`, `path2`.
//!
//! For every run, bytes on the wire (IP packets offered to the emulated
//! links, both directions) over application bytes delivered. The
//! experiment's seed seeds the links' random choices (loss).
//!
//! Records: goodput part `goodput_mbps.{braid,mptcp,tcp}`,
//! `wire_per_delivered_ratio.{braid,mptcp,tcp}`, `braid_over_mptcp_ratio`;
//! FCT part `fct_p50_ms`, `fct_p90_ms`, `fct_p99_ms`, `fct_mean_ms`,
//! `fct_max_ms`, `wire_per_delivered_ratio` and the series `fct_ms` (each
//! flow at its start); the artifact `report` ([`report::MultipathRun`]).

pub mod braid_runs;
pub mod kernel;
pub mod report;
pub mod scheduler;

use std::sync::Arc;
use std::time::Duration;

use braid::progmp::Program;
use braid::LinkSpec;
use braid_emu::{Stats, Testbed};

use self::report::{FctRow, GoodputRow, MultipathRun, Part};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};

/// The template (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Multipath;

/// The two paths of the bench and of the template's defaults.
pub const DEFAULT_PATHS: [&str; 2] = ["rate=50mbit,rtt=20ms", "rate=50mbit,rtt=40ms"];

/// Separates the link specs of `more_paths`.
pub const PATH_SEPARATOR: char = ';';

/// Braid's largest UDP payload on `paths`: the smallest path MTU minus 28
/// bytes of IPv4 and UDP headers (what path-MTU discovery finds; kernel
/// TCP and MPTCP size their segments from the MTU too), at least 1200.
pub fn default_datagram<'a>(paths: impl IntoIterator<Item = &'a LinkSpec>) -> u16 {
    let mtu = paths.into_iter().map(braid_emu::iface_mtu).min().unwrap_or(1500);
    u16::try_from(mtu.saturating_sub(28)).unwrap_or(u16::MAX).max(1200)
}

/// A link parameter's value in its canonical form.
fn link_value(text: &str) -> Value {
    ParamType::Link.parse_text(text).unwrap_or_else(|_| Value::Link(text.to_string()))
}

impl Template for Multipath {
    fn name(&self) -> &str {
        "multipath"
    }

    fn description(&self) -> &str {
        "Braid multipath (ProgMP scheduler) vs kernel MPTCP vs one-path TCP over emulated paths: goodput, or request/response flow completion times"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::config("part", ParamType::one_of(&["goodput", "fct"]), Value::Enum("goodput".into()))
                .doc("goodput: Braid vs MPTCP vs TCP bulk; fct: request/response flows of one scheduler"),
            ParamDecl::config("scheduler", ParamType::String, Value::String(braid::progmp::DEFAULT_SCHEDULER.into()))
                .doc("Braid's scheduler: a shipped one's name (braid progmp list) or a .progmp file"),
            ParamDecl::config("secs", ParamType::Duration, Value::Duration(Duration::from_secs(8)))
                .doc("goodput measured per variant, after the warm-up"),
            ParamDecl::config("warmup", ParamType::Duration, Value::Duration(Duration::from_secs(3)))
                .doc("start of each goodput run not counted (slow start)"),
            ParamDecl::config("fct_bytes", ParamType::Size, Value::Size(10_000)).doc("response size of the request/response flows (1 B to 64 MiB)"),
            ParamDecl::config("flows", ParamType::int_range(1, 100_000), Value::Int(300)).doc("request/response flows"),
            ParamDecl::config("gap", ParamType::Duration, Value::Duration(Duration::from_millis(10)))
                .doc("pause between two flows (0s: back to back; at most 60s)"),
            ParamDecl::config("max_datagram_size", ParamType::int_range(0, 65_527), Value::Int(0))
                .doc("Braid's largest UDP payload, 1200 to 65527 bytes; 0: the smallest path MTU minus 28"),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "Braid authenticated and encrypted (each end a fresh identity pinned to the other's); false: the \
                 bare protocol (--insecure-no-auth)",
            ),
            ParamDecl::env("path1", ParamType::Link, link_value(DEFAULT_PATHS[0])).doc("the first path (the one-path TCP's)"),
            ParamDecl::env("path2", ParamType::Link, link_value(DEFAULT_PATHS[1])).doc("the second path"),
            ParamDecl::env("more_paths", ParamType::String, Value::String(String::new()))
                .doc("further paths: link specs separated by `;` (empty: two paths)"),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: true, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(s) = Settings::from_params(params) else { return Duration::from_secs(30) };
        match s.part {
            Part::Goodput => (s.warmup + s.secs + Duration::from_secs(3)) * 3 + Duration::from_secs(3),
            Part::Fct => {
                let rtt = s.paths.iter().map(LinkSpec::rtt).max().unwrap_or_default();
                (s.gap + rtt * 3 + Duration::from_millis(2)) * s.flows as u32 + Duration::from_secs(5)
            }
        }
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = Settings::from_params(ctx.params)?;
        let (name, program) = scheduler::load(&s.scheduler)?;
        braid_emu::check_capabilities()
            .map_err(|e| TemplateError::Unavailable(format!("the multipath template runs over the emulator: {e}")))?;
        let datagram = s.datagram.unwrap_or_else(|| default_datagram(&s.paths));
        let mut builder = ctx.testbed();
        for p in &s.paths {
            builder = builder.link(p.clone());
        }
        let tb = builder.build().context("building the testbed (needs root, /dev/net/tun and iproute2)")?;
        let mut run = MultipathRun {
            part: s.part,
            paths: s.paths.iter().map(LinkSpec::to_string).collect(),
            scheduler: name.clone(),
            max_datagram_size: datagram,
            goodput: Vec::new(),
            fct_bytes: s.fct_bytes as u64,
            fct: None,
        };
        match s.part {
            Part::Goodput => run.goodput = goodput_part(ctx, &tb, &s, &name, program, datagram)?,
            Part::Fct => run.fct = Some(fct_part(ctx, &tb, &s, &name, program, datagram)?),
        }
        drop(tb);
        record_run(ctx, &run);
        let json = serde_json::to_value(&run).context("serializing the report")?;
        ctx.artifact("report", json);
        ctx.progress(1.0);
        Ok(())
    }
}

/// One experiment's parameters, checked.
#[derive(Debug, Clone)]
struct Settings {
    part: Part,
    scheduler: String,
    secs: Duration,
    warmup: Duration,
    fct_bytes: usize,
    flows: usize,
    gap: Duration,
    /// `None`: from the paths' MTUs.
    datagram: Option<u16>,
    paths: Vec<LinkSpec>,
    /// Braid authenticated and encrypted, or the bare protocol.
    encrypted: bool,
}

fn invalid(why: String) -> TemplateError {
    TemplateError::Invalid(why)
}

impl Settings {
    fn from_params(p: &Params) -> Result<Settings, TemplateError> {
        let part = match p.str("part")? {
            "goodput" => Part::Goodput,
            "fct" => Part::Fct,
            other => return Err(invalid(format!("part `{other}`: expected goodput or fct"))),
        };
        let secs = p.duration("secs")?;
        if secs.is_zero() {
            return Err(invalid("secs: expected a positive duration, e.g. 8s".into()));
        }
        let fct_bytes = usize::try_from(p.size("fct_bytes")?)
            .ok()
            .filter(|n| (1..=(64 << 20)).contains(n))
            .ok_or_else(|| invalid("fct_bytes: expected a response size from 1 byte to 64 MiB, e.g. 10KB".into()))?;
        let flows = usize::try_from(p.int("flows")?)
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or_else(|| invalid("flows: expected 1 to 100000".into()))?;
        let gap = p.duration("gap")?;
        if gap > Duration::from_secs(60) {
            return Err(invalid("gap: expected 0s to 60s, e.g. 0s or 10ms".into()));
        }
        let datagram = match p.int("max_datagram_size")? {
            0 => None,
            n => Some(
                u16::try_from(n)
                    .ok()
                    .filter(|n| (1200..=65_527).contains(n))
                    .ok_or_else(|| invalid(format!("max_datagram_size {n}: expected 0 (from the MTU) or 1200 to 65527")))?,
            ),
        };
        let mut paths = vec![p.link("path1")?, p.link("path2")?];
        for (i, text) in p.str("more_paths")?.split(PATH_SEPARATOR).map(str::trim).filter(|t| !t.is_empty()).enumerate() {
            let spec = text.parse::<LinkSpec>().map_err(|e| {
                invalid(format!("more_paths, path {}: `{text}`: {e}; expected link specs separated by `{PATH_SEPARATOR}`", i + 3))
            })?;
            paths.push(spec);
        }
        let scheduler = p.str("scheduler")?.trim().to_string();
        if scheduler.is_empty() {
            return Err(invalid("scheduler: expected a shipped scheduler's name or a .progmp file".into()));
        }
        let encrypted = p.bool("encrypted")?;
        Ok(Settings { part, scheduler, secs, warmup: p.duration("warmup")?, fct_bytes, flows, gap, datagram, paths, encrypted })
    }
}

fn wire_bytes(before: &Stats, after: &Stats) -> u64 {
    let sum = |s: &Stats| s.paths.iter().map(|p| p.a2b.bytes_offered + p.b2a.bytes_offered).sum::<u64>();
    sum(after).saturating_sub(sum(before))
}

fn ratio(wire: u64, delivered: u64) -> f64 {
    if delivered == 0 {
        0.0
    } else {
        wire as f64 / delivered as f64
    }
}

/// What `run` returns, and the bytes the links carried meanwhile.
fn on_wire<T>(tb: &Testbed, run: impl FnOnce() -> Result<T, TemplateError>) -> Result<(T, u64), TemplateError> {
    let stats = || tb.stats().context("reading the links' counters");
    let before = stats()?;
    let r = run()?;
    Ok((r, wire_bytes(&before, &stats()?)))
}

/// A goodput row of a run that delivered `delivered` bytes at `bps`,
/// with `wire` bytes on the links; no per-variant details.
fn goodput_row(variant: String, bps: f64, delivered: u64, wire: u64) -> GoodputRow {
    GoodputRow {
        variant,
        mbps: bps / 1e6,
        bytes_delivered: delivered,
        wire_bytes: wire,
        wire_per_delivered: ratio(wire, delivered),
        stream_bytes_by_path: None,
        mptcp_active: None,
        ok: delivered > 0,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Before a goodput run: enough time left for it.
fn ensure_time(ctx: &Context<'_>, s: &Settings, what: &str) -> Result<(), TemplateError> {
    if ctx.remaining() < s.warmup + s.secs {
        return Err(TemplateError::Timeout(format!("no time left for the {what} run")));
    }
    Ok(())
}

fn goodput_part(
    ctx: &mut Context<'_>,
    tb: &Testbed,
    s: &Settings,
    name: &str,
    program: Arc<Program>,
    datagram: u16,
) -> Result<Vec<GoodputRow>, TemplateError> {
    let mut rows = Vec::new();

    ensure_time(ctx, s, "Braid")?;
    let (b, wire) =
        on_wire(tb, || braid_runs::bulk(tb, program, braid_runs::BraidEnds { datagram, encrypted: s.encrypted }, s.warmup, s.secs).context("Braid goodput run"))?;
    rows.push(GoodputRow {
        stream_bytes_by_path: Some(b.stream_bytes_by_path),
        ..goodput_row(format!("braid:{name}"), b.bps, b.delivered, wire)
    });
    ctx.progress(1.0 / 3.0);

    ensure_time(ctx, s, "kernel MPTCP")?;
    let (m, wire) =
        on_wire(tb, || kernel::goodput(tb, kernel::Kernel::Mptcp, s.warmup, s.secs).context("kernel MPTCP run"))?;
    if !m.mptcp {
        ctx.warn("the kernel MPTCP connection fell back to TCP");
    }
    rows.push(GoodputRow { mptcp_active: Some(m.mptcp), ..goodput_row("mptcp".into(), m.bps, m.delivered, wire) });
    ctx.progress(2.0 / 3.0);

    ensure_time(ctx, s, "kernel TCP")?;
    let (t, wire) =
        on_wire(tb, || kernel::goodput(tb, kernel::Kernel::Tcp, s.warmup, s.secs).context("kernel TCP run"))?;
    rows.push(goodput_row("tcp".into(), t.bps, t.delivered, wire));
    for r in rows.iter().filter(|r| !r.ok) {
        ctx.warn(&format!("{} delivered nothing", r.variant));
    }
    Ok(rows)
}

fn fct_part(
    ctx: &mut Context<'_>,
    tb: &Testbed,
    s: &Settings,
    name: &str,
    program: Arc<Program>,
    datagram: u16,
) -> Result<FctRow, TemplateError> {
    let (r, wire) = on_wire(tb, || {
        braid_runs::fct(tb, program, braid_runs::BraidEnds { datagram, encrypted: s.encrypted }, s.fct_bytes, s.flows, s.gap).with_context(|| format!("FCT run of {name}"))
    })?;
    for (start, fct) in r.starts.iter().zip(&r.fcts) {
        ctx.series("fct_ms", start.as_secs_f64(), ms(*fct));
    }
    let q = |x: f64| ms(braid_emu::bench::quantile(&r.fcts, x));
    let mean = r.fcts.iter().map(|d| ms(*d)).sum::<f64>() / r.fcts.len().max(1) as f64;
    let ok = r.fcts.len() == s.flows;
    if !ok {
        ctx.warn(&format!("{} of {} flows completed", r.fcts.len(), s.flows));
    }
    Ok(FctRow {
        scheduler: name.to_string(),
        flows: r.fcts.len(),
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
        mean_ms: mean,
        max_ms: q(1.0),
        bytes_delivered: r.delivered,
        wire_bytes: wire,
        wire_per_delivered: ratio(wire, r.delivered),
        ok,
    })
}

/// The experiment's scalars.
fn record_run(ctx: &mut Context<'_>, run: &MultipathRun) {
    for g in &run.goodput {
        let variant = if g.variant.starts_with("braid") { "braid" } else { g.variant.as_str() };
        ctx.record(&format!("goodput_mbps.{variant}"), g.mbps);
        ctx.record(&format!("wire_per_delivered_ratio.{variant}"), g.wire_per_delivered);
    }
    if let Some(x) = run.braid_over_mptcp() {
        ctx.record("braid_over_mptcp_ratio", x);
    }
    if let Some(f) = &run.fct {
        ctx.record("fct_p50_ms", f.p50_ms);
        ctx.record("fct_p90_ms", f.p90_ms);
        ctx.record("fct_p99_ms", f.p99_ms);
        ctx.record("fct_mean_ms", f.mean_ms);
        ctx.record("fct_max_ms", f.max_ms);
        ctx.record("wire_per_delivered_ratio", f.wire_per_delivered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneoff::OneOffOptions;
    use crate::param::Role;
    use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, run_on_emulator};

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&Multipath)
    }

    #[test]
    fn declarations_are_valid_and_defaults_are_todays_flags() {
        assert_declarations_valid(&Multipath, &[]);
        let decls = Multipath.params();
        let env: Vec<&str> = decls.iter().filter(|d| d.role == Role::Environment).map(|d| d.name.as_str()).collect();
        assert_eq!(env, ["path1", "path2", "more_paths"]);
        let s = Settings::from_params(&defaults()).unwrap();
        assert_eq!(s.part, Part::Goodput);
        assert_eq!(s.scheduler, "min_rtt");
        assert_eq!((s.secs, s.warmup), (Duration::from_secs(8), Duration::from_secs(3)));
        assert_eq!((s.fct_bytes, s.flows, s.gap), (10_000, 300, Duration::from_millis(10)));
        assert_eq!(s.datagram, None);
        let want: Vec<LinkSpec> = DEFAULT_PATHS.iter().map(|p| p.parse().unwrap()).collect();
        assert_eq!(s.paths, want);
        assert_eq!(default_datagram(&s.paths), 1472);
        assert_eq!(Multipath.requirements(), Requirements { emulator: true, exclusive: true });
    }

    #[test]
    fn more_paths_add_links_and_bad_values_name_the_allowed_form() {
        let mut p = defaults();
        p.insert("more_paths", Value::String("rate=10mbit,rtt=5ms; rtt=80ms ;".into()));
        let s = Settings::from_params(&p).unwrap();
        assert_eq!(s.paths.len(), 4);
        assert_eq!(s.paths[3].rtt(), Duration::from_millis(80));
        let cases: [(&str, Value, &str); 5] = [
            ("more_paths", Value::String("rtt=5ms;rate=fast".into()), "path 4"),
            ("max_datagram_size", Value::Int(900), "1200 to 65527"),
            ("fct_bytes", Value::Size(0), "1 byte to 64 MiB"),
            ("gap", Value::Duration(Duration::from_secs(61)), "0s to 60s"),
            ("scheduler", Value::String(" ".into()), "shipped scheduler"),
        ];
        assert_each_refused(&Multipath, cases, Settings::from_params);
    }

    #[test]
    fn expected_duration_follows_the_part() {
        let goodput = Multipath.expected_duration(&defaults());
        assert!(goodput >= Duration::from_secs(33), "{goodput:?}");
        let mut p = defaults();
        p.insert("part", Value::Enum("fct".into()));
        p.insert("flows", Value::Int(10));
        assert!(Multipath.expected_duration(&p) < goodput);
    }

    /// Over the emulator (root): a short FCT experiment's scalars agree
    /// with its artifact, and an unknown scheduler fails the experiment.
    #[test]
    fn a_short_fct_experiment_records_scalars_that_match_its_report() {
        let fct = |scheduler: &str| {
            vec![
                ("part".to_string(), Value::Enum("fct".into())),
                ("scheduler".to_string(), Value::String(scheduler.into())),
                ("flows".to_string(), Value::Int(10)),
                ("gap".to_string(), Value::Duration(Duration::ZERO)),
                ("path1".to_string(), link_value("rate=20mbit,rtt=10ms,loss=2%")),
                ("path2".to_string(), link_value("rate=20mbit,rtt=20ms,loss=2%")),
            ]
        };
        let Some(runs) = run_on_emulator(
            Arc::new(Multipath),
            vec![fct("redundant"), fct("fastest")],
            &OneOffOptions { seed: 5, timeout: Some(Duration::from_secs(60)) },
        ) else {
            return;
        };
        let r = &runs[0];
        assert!(r.ok(), "{:?}", r.error);
        let run: MultipathRun = serde_json::from_value(r.artifact("report").unwrap().clone()).unwrap();
        let f = run.fct.as_ref().unwrap();
        assert_eq!((f.scheduler.as_str(), f.flows), ("redundant", 10));
        assert_eq!(f.bytes_delivered, 10 * (64 + 10_000));
        assert_eq!(r.metric("fct_p90_ms"), Some(f.p90_ms));
        assert_eq!(r.metric("wire_per_delivered_ratio"), Some(f.wire_per_delivered));
        assert_eq!(r.series("fct_ms").len(), 10);
        assert!(runs[1].error.as_deref().is_some_and(|e| e.contains("not a shipped scheduler")), "{:?}", runs[1].error);
    }
}
