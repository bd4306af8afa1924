//! The `priority` template: one of DTL's priority scenarios (issue 5) over
//! the emulator, Braid LEDBAT/MulTCP flows (the `priority` controller,
//! changed on the live connections) against kernel TCP on one bottleneck.
//! `braid bench priority` is a small study of it.
//!
//! One experiment is one scenario run: the scenario definitions, the report
//! ([`build_report`](crate::harness::priority_sim::build_report)) and the
//! acceptance checks are the simulator's
//! ([`priority_sim`]); only the runner
//! ([`emu`]) differs. The records it leaves ([`records`]) and the
//! meaning of its `link` ([`link_override`]) are shared with the
//! simulator's `sim-priority` template, so a metric of one means the same
//! in the other.
//!
//! ```
//! use braid_lab::template::builtin::priority::{scenario_config, Priority};
//! use braid_lab::template::Template;
//! use braid_lab::param::{Params, Value};
//! let mut p = Params::default();
//! for d in Priority.params() {
//!     p.insert(&d.name, d.default.clone());
//! }
//! p.insert("scenario", Value::Enum("switch".into()));
//! p.insert("duration", Value::Duration(std::time::Duration::from_secs(12)));
//! let cfg = scenario_config(&p, 1).unwrap();
//! assert_eq!(cfg.name, "switch");
//! assert_eq!(cfg.link.to_string(), "rtt=25ms,rate=5mbit,queue=125kb");
//! assert_eq!(cfg.bin, std::time::Duration::from_millis(250));
//! ```

pub mod emu;
pub mod grid;
pub mod records;
pub mod setup;

use std::time::Duration;

use braid_link::LinkSpec;
use braid_proto::CcAlgorithm;

use crate::harness::priority_sim::{self, EpochTiming, ScenarioConfig, ScenarioOptions};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, Template, TemplateError};

pub use records::{record_report, report_of, report_scalars, report_series, REPORT_ARTIFACT};

/// DTL's scenarios and the issue-25 grid's (`versus`: priority n against
/// TCP, `pair`: two flows at priority n), as the `scenario` parameter names
/// them (the same names and variants as the `sim-priority` template's:
/// `decrease` picks latecomer's baseline, `multcp_pair` multcp's pair of
/// MulTCP(n) flows).
pub const SCENARIOS: [&str; 7] = priority_sim::SCENARIO_NAMES;

/// Shortest default bin of the throughput series: wall-clock samples much
/// shorter than this are noise.
pub const MIN_BIN: Duration = Duration::from_millis(250);

/// How long a run takes beyond the scenario's duration: building the
/// testbed, the receivers' start, the 300 ms head start, winding down.
const SETUP: Duration = Duration::from_secs(5);

/// The paper's length of one run of `scenario` (one of DTL's five; `polite`
/// with its TCP-alone phase).
pub fn paper_duration(scenario: &str) -> Option<Duration> {
    let secs = match scenario {
        "polite" => 160,
        "latecomer" => 150,
        "multcp" => 200,
        "switch" => 480,
        "five" => 340,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

/// The `priority` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Priority;

impl Template for Priority {
    fn name(&self) -> &str {
        "priority"
    }

    /// 3: `polite` has a TCP-alone phase (phase3, flow2) and judges TCP
    /// against it; the `versus` and `pair` scenarios; path overrides and
    /// epoch-scaled timing (`rtt`, `rate_mbps`, `queue`, `queue_bdp`, `aqm`,
    /// `epochs`, `max_phase`). 2: metrics by phase and flow index with the
    /// unit first, shared with the other priority template; series at the
    /// middle of each bin; the scenario, its TCP and its timing are the
    /// environment.
    fn version(&self) -> u32 {
        3
    }

    fn description(&self) -> &str {
        "DTL's priority scenarios over the emulator: Braid LEDBAT/MulTCP flows against kernel TCP on one bottleneck"
    }

    /// Roles as MACI draws the line: the configuration is what Braid
    /// controls (the controller and its settings), the environment is the
    /// network and the competition (the path, the competing TCP, which
    /// flows compete when, the run's length and how it is measured), so
    /// `braid lab best` compares Braid's settings within one network and
    /// one competition. The order and roles are `sim-priority`'s.
    fn params(&self) -> Vec<ParamDecl> {
        let mut decls = vec![
            ParamDecl::env("scenario", ParamType::one_of(&SCENARIOS), Value::Enum("switch".into())).doc(
                "DTL's scenario: polite, latecomer, multcp, switch or five; or the grid's versus (priority n \
                 against TCP: polite at n = 0, multcp above) or pair (two flows at priority n)",
            ),
            ParamDecl::env("link", ParamType::Link, Value::Link(String::new())).doc(
                "the bottleneck path; empty (or any ideal link, which has no bottleneck) = the scenario's in DTL's \
                 evaluation: rtt=40ms,rate=10mbit,queue=250kb; multcp: the same with loss=0.2%; switch: \
                 rtt=25ms,rate=5mbit,queue=125kb",
            ),
        ];
        decls.extend(setup::path_and_timing_params());
        decls.extend([
            ParamDecl::env("scale", ParamType::float_range(0.0, 100.0), Value::Float(1.0)).doc(
                "multiplies every time of the scenario (1 = the paper's: polite 160 s with its TCP-alone phase, \
                 latecomer 150 s, multcp and pair 200 s, switch 480 s, five 340 s)",
            ),
            ParamDecl::env("duration", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("length of the run, the paper's timings scaled to fit (0s = set by scale)"),
            ParamDecl::env("bin", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("width of the throughput bins (0s = 1 s x the time scale, at least 250 ms)"),
            ParamDecl::env("tcp", ParamType::one_of(&["cubic", "newreno"]), Value::Enum("cubic".into()))
                .doc("congestion control of the competing kernel TCP flows (newreno = kernel reno)"),
            ParamDecl::env("multcp_pair", ParamType::Bool, Value::Bool(false))
                .doc("multcp only: two MulTCP(n) flows instead of MulTCP(n) against TCP"),
            ParamDecl::config("n", ParamType::float_range(0.0, 100.0), Value::Float(1.0)).doc(
                "multcp, versus, pair: the Braid flows' priority N (MulTCP(N)), in (0, 100] for multcp, [0, 100] \
                 for versus and pair",
            ),
            ParamDecl::config("ledbat", ParamType::one_of(&["ledbat", "ledbat++"]), Value::Enum("ledbat".into()))
                .doc("the p = 0 controller: RFC 6817 with DTL's multiplicative decrease, or LEDBAT++"),
            ParamDecl::config(
                "decrease",
                ParamType::one_of(&["multiplicative", "additive"]),
                Value::Enum("multiplicative".into()),
            )
            .doc("LEDBAT's decrease: DTL's multiplicative or RFC 6817's additive (delay_beta=1; latecomer_additive)"),
            ParamDecl::config("params", ParamType::String, Value::String(String::new())).doc(
                "extra parameters of every Braid flow's controller, NAME=VALUE,... (e.g. delay_beta=1,target_ms=60)",
            ),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "Braid flows authenticated and encrypted (each end a fresh identity pinned to the other's); \
                 false: the bare protocol (--insecure-no-auth)",
            ),
        ]);
        decls
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: true, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        scenario_config(params, 0).map_or(Duration::from_secs(60), |c| c.duration + SETUP)
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let (cfg, timing) = scenario_config_and_timing(ctx.params, ctx.seed)?;
        let needed = cfg.duration + SETUP;
        if ctx.remaining() < needed {
            return Err(TemplateError::Timeout(format!(
                "the run takes about {:.1} s, {:.1} s are left before the deadline",
                needed.as_secs_f64(),
                ctx.remaining().as_secs_f64()
            )));
        }
        braid_emu::check_capabilities().map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        let builder = ctx.testbed();
        let report = {
            let ctx = &*ctx;
            let total = cfg.duration.as_secs_f64();
            emu::run(&cfg, builder, ctx.deadline, &|t: Duration| ctx.progress(t.as_secs_f64() / total))?
        };
        record_report(ctx, &report, ledbat_target_ms(ctx.params)?);
        if let Some(t) = &timing {
            setup::record_timing(ctx, t);
        }
        Ok(())
    }
}

/// The scenario run the parameters describe (every parameter of
/// [`Priority`] must be present), seeded with `seed`, checked by
/// [`priority_sim::validate`]: a bad `params` or `link` fails here,
/// before any testbed exists.
pub fn scenario_config(params: &Params, seed: u64) -> Result<ScenarioConfig, TemplateError> {
    scenario_config_and_timing(params, seed).map(|(cfg, _)| cfg)
}

/// [`scenario_config`], with the epoch timing when `epochs` set the scale.
pub fn scenario_config_and_timing(
    params: &Params,
    seed: u64,
) -> Result<(ScenarioConfig, Option<EpochTiming>), TemplateError> {
    let scenario = params.str("scenario")?;
    if !SCENARIOS.contains(&scenario) {
        return Err(TemplateError::Invalid(format!("scenario `{scenario}`: expected one of {}", SCENARIOS.join(", "))));
    }
    let duration = params.duration("duration")?;
    let scale = params.float("scale")?;
    if !duration.is_zero() && scale != 1.0 {
        return Err(TemplateError::Invalid(format!(
            "scale {scale} and duration {}: give one of them, not both",
            crate::param::format_duration(duration)
        )));
    }
    let n = params.float("n")?;
    if !(n.is_finite() && (0.0..=100.0).contains(&n)) {
        return Err(TemplateError::Invalid(format!("n = {n} is out of range: expected a number in [0, 100], e.g. 2")));
    }
    let tcp = match params.str("tcp")? {
        "cubic" => CcAlgorithm::Cubic,
        "newreno" => CcAlgorithm::NewReno,
        other => return Err(TemplateError::Invalid(format!("tcp `{other}`: expected cubic or newreno"))),
    };
    let mut dtl_params = match params.str("ledbat")? {
        "ledbat" => Vec::new(),
        "ledbat++" => vec![("variant".to_string(), 1.0)],
        other => return Err(TemplateError::Invalid(format!("ledbat `{other}`: expected ledbat or ledbat++"))),
    };
    let additive = match params.str("decrease")? {
        "multiplicative" => false,
        "additive" => true,
        other => {
            return Err(TemplateError::Invalid(format!("decrease `{other}`: expected multiplicative or additive")))
        }
    };
    // latecomer builds its own baseline (and names it latecomer_additive).
    if additive && scenario != "latecomer" {
        dtl_params.push(("delay_beta".to_string(), 1.0));
    }
    dtl_params.extend(parse_cc_params(params.str("params")?)?);
    let opts = ScenarioOptions { link: link_override(params)?, scale: 1.0, tcp, ns: vec![n], dtl_params, seed, warmup: None };
    let choice = setup::ScenarioChoice { scenario, n, multcp_pair: params.bool("multcp_pair")?, additive };
    // The scale: given, or from the run's length, or (epochs) from the link.
    let explicit = |paper: &ScenarioConfig| -> Result<Option<f64>, TemplateError> {
        let scale = if !duration.is_zero() {
            Some(duration.as_secs_f64() / paper.duration.as_secs_f64())
        } else {
            (scale != 1.0).then_some(scale)
        };
        match scale {
            Some(s) if !(s.is_finite() && s > 0.0 && s <= 100.0) => Err(TemplateError::Invalid(format!(
                "the time scale {s} is out of range: expected a scale in (0, 100], e.g. scale = 0.25 or duration = \"60s\""
            ))),
            s => Ok(s),
        }
    };
    let (mut cfg, timing) = setup::configure(params, opts, choice, &explicit)?;
    let bin = params.duration("bin")?;
    cfg.bin = if bin.is_zero() { cfg.bin.max(MIN_BIN) } else { bin };
    cfg.encrypted = params.bool("encrypted")?;
    priority_sim::validate(&cfg).map_err(|e| TemplateError::Invalid(e.to_string()))?;
    Ok((cfg, timing))
}

/// The `link` parameter of a priority template (`priority` or
/// `sim-priority`): `None`, the scenario's own path (the paper's), for
/// the empty default and for any ideal link (which has no bottleneck, so
/// it is never a priority scenario's path: `rtt=0ms` is how experiments
/// stored before the empty default wrote it); else the path to use.
pub fn link_override(params: &Params) -> Result<Option<LinkSpec>, TemplateError> {
    if params.str("link")?.trim().is_empty() {
        return Ok(None);
    }
    let link = params.link("link")?;
    Ok((link != LinkSpec::default()).then_some(link))
}

/// `NAME=VALUE,...` (empty: none), each value a finite number: the
/// `params` parameter.
pub fn parse_cc_params(text: &str) -> Result<Vec<(String, f64)>, TemplateError> {
    let expected = "expected NAME=VALUE,... with numbers, e.g. delay_beta=1,target_ms=60";
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let bad = || TemplateError::Invalid(format!("params: `{item}`: {expected}"));
            let (name, value) = item.split_once('=').ok_or_else(bad)?;
            let value: f64 = value.trim().parse().map_err(|_| bad())?;
            if name.trim().is_empty() || !value.is_finite() {
                return Err(bad());
            }
            Ok((name.trim().to_string(), value))
        })
        .collect()
}

/// `params` text for these pairs (what [`parse_cc_params`] reads back).
pub fn format_cc_params(pairs: &[(String, f64)]) -> String {
    pairs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(",")
}

/// The p = 0 controller's queuing-delay target, ms (the acceptance checks'
/// bound): the last `target_ms` of `params`, else LEDBAT++'s 60 or
/// LEDBAT's 100.
pub fn ledbat_target_ms(params: &Params) -> Result<f64, TemplateError> {
    let plus_plus = params.str("ledbat")? == "ledbat++";
    let default = if plus_plus { 60.0 } else { 100.0 };
    let pairs = parse_cc_params(params.str("params")?)?;
    Ok(pairs.iter().rev().find(|(n, _)| n == "target_ms").map_or(default, |(_, v)| *v))
}

/// Every parameter of [`Priority`] at its default, overridden by `values`
/// (names it does not declare are an error): the experiment a list of
/// values stands for, to check with [`scenario_config`] before running.
pub fn with_defaults(values: &[(String, Value)]) -> Result<Params, TemplateError> {
    let decls = Priority.params();
    let mut params = Params::default();
    for d in &decls {
        params.insert(&d.name, d.default.clone());
    }
    for (name, value) in values {
        if !decls.iter().any(|d| &d.name == name) {
            return Err(TemplateError::Invalid(format!("the priority template has no parameter `{name}`")));
        }
        params.insert(name, value.clone());
    }
    Ok(params)
}

#[cfg(test)]
mod tests;
