//! `sim-priority`: one of DTL's priority scenarios (issue 5) on the
//! simulator ([`crate::harness::priority_sim`]), the measurement behind
//! `braid sim priority`.
//!
//! One experiment is one scenario run: `polite`, `latecomer` (with DTL's
//! multiplicative or RFC 6817's additive decrease), `multcp` (MulTCP(`n`)
//! against TCP, or two MulTCP(`n`) flows), `switch` or `five`.
//!
//! The path is the scenario's own (the paper's) unless `link` names one
//! (its default, empty, stands for the scenario's own, and so does any
//! ideal link: it has no bottleneck, so it is never a priority
//! scenario's); `rtt`, `rate_mbps` and `queue` then override parts of
//! whichever path is used, each only when set (not zero), so a study can
//! sweep RTT × rate × queue depth around every scenario's own link.
//! `queue` is the buffer as the time it takes to drain at the rate (DTL's
//! "200 ms of buffer"): bytes = rate × queue.
//!
//! The roles are the emulator `priority` template's: the configuration is
//! Braid's controller (`ledbat`, `decrease`, `target_ms`, `n`, `params`),
//! the environment the network and the competition (the path, `tcp`,
//! `scenario`, `multcp_pair`, `scale`), so `braid lab best` compares
//! Braid's settings within one network and one competition.
//!
//! Records: the emulator template's, through the same function
//! ([`priority::record_report`]): per phase, flow and switch by index
//! (`throughput_mbps.phase1.flow0`, `jain_index.phase1`,
//! `queuing_delay_p99_ms.phase1`, `stall_rtts.switch0`, ...), whole-run
//! figures (`queuing_delay_p99_ms`, `loss_ratio`, `max_stall_rtts`,
//! `checks_passed`, `checks_failed`, ...), the series
//! `throughput_mbps.flow{i}` and `queue_drops_packets` at the middle of
//! each bin, and the artifact `report`: the whole
//! [`ScenarioReport`](priority_sim::ScenarioReport) (one
//! element of what `braid sim priority --json` prints), which names the
//! flows and phases.

use std::time::Duration;

use braid_link::{Direction, LinkSpec, QueueLimit, Rate};

use crate::harness::priority_sim::{self, ScenarioConfig, ScenarioError, ScenarioOptions};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::builtin::priority;
use crate::template::builtin::sim_transfer::{cc_param, cc_value, CC_NAMES};
use crate::template::{Context, Template, TemplateError};

/// The `sim-priority` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimPriority;

/// The scenarios, as the `scenario` parameter names them.
pub const SCENARIOS: [&str; 5] = ["polite", "latecomer", "multcp", "switch", "five"];

/// Wall seconds one simulated second of a 10 Mbit/s scenario costs
/// (release build, about 1,700 packets and their acknowledgements): for
/// `expected_duration` only.
const WALL_SECS_PER_VIRTUAL_SEC_AT_10MBIT: f64 = 0.004;

/// The p = 0 controller's delay target after `dtl_params` (applied in
/// order, the last value of a name wins): `target_ms` if given, else
/// LEDBAT++'s 60 ms with `variant=1`, else LEDBAT's 100 ms. The delay
/// criteria of [`priority_sim::checks`] are relative to it.
pub fn ledbat_target_ms(dtl_params: &[(String, f64)]) -> f64 {
    let last = |name: &str| dtl_params.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v);
    let plus_plus = last("variant") == Some(1.0);
    last("target_ms").unwrap_or(if plus_plus { 60.0 } else { 100.0 })
}

/// `NAME=VALUE[,NAME=VALUE...]`: extra controller parameters (an empty
/// text is none). The error names the item and the allowed form.
pub fn parse_controller_params(text: &str) -> Result<Vec<(String, f64)>, String> {
    let expected = "expected NAME=VALUE items with numbers, comma-separated, e.g. delay_beta=1,target_ms=60";
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (name, value) = item.split_once('=').ok_or_else(|| format!("`{item}`: {expected}"))?;
            let value: f64 = value.trim().parse().map_err(|_| format!("`{item}`: {expected}"))?;
            if name.trim().is_empty() || !value.is_finite() {
                return Err(format!("`{item}`: {expected}"));
            }
            Ok((name.trim().to_string(), value))
        })
        .collect()
}

/// The path of an experiment: `base` with the overrides that are set.
fn apply_link_overrides(
    base: &LinkSpec,
    rtt: Duration,
    rate_mbps: f64,
    queue: Duration,
) -> Result<LinkSpec, TemplateError> {
    if rtt.is_zero() && rate_mbps == 0.0 && queue.is_zero() {
        return Ok(base.clone());
    }
    let rate = if rate_mbps > 0.0 {
        let bps = (rate_mbps * 1e6).round();
        Some(
            Rate::from_bits_per_sec(bps as u64)
                .ok_or_else(|| TemplateError::Invalid(format!("rate_mbps: {rate_mbps} is out of range")))?,
        )
    } else {
        None
    };
    let set = |mut p: braid_link::LinkParams| -> Result<braid_link::LinkParams, TemplateError> {
        if !rtt.is_zero() {
            p.delay = rtt / 2;
        }
        if let Some(r) = rate {
            p.rate = Some(r);
            p.trace = None;
        }
        if !queue.is_zero() {
            let r = p.rate.ok_or_else(|| {
                TemplateError::Invalid("queue: the link has no rate to size a queue by (set rate_mbps)".into())
            })?;
            p.queue = Some(QueueLimit::Bytes(r.bytes_in(queue).max(1500)));
        }
        Ok(p)
    };
    let (a2b, b2a) = (set(base.params(Direction::AToB))?, set(base.params(Direction::BToA))?);
    LinkSpec::asymmetric(a2b, b2a).map_err(|e| TemplateError::Invalid(format!("link overrides: {e}")))
}

impl SimPriority {
    /// The scenario config of an experiment's parameters and seed.
    pub fn config(params: &Params, seed: u64) -> Result<ScenarioConfig, TemplateError> {
        let scenario = params.str("scenario")?;
        let mut dtl_params = Vec::new();
        if params.str("ledbat")? == "ledbat++" {
            dtl_params.push(("variant".to_string(), 1.0));
        }
        let target = params.float("target_ms")?;
        if target > 0.0 {
            dtl_params.push(("target_ms".to_string(), target));
        }
        let additive = params.str("decrease")? == "additive";
        if additive && scenario != "latecomer" {
            dtl_params.push(("delay_beta".to_string(), 1.0));
        }
        dtl_params.extend(
            parse_controller_params(params.str("params")?)
                .map_err(|e| TemplateError::Invalid(format!("params: {e}")))?,
        );
        let n = params.float("n")?;
        let opts = ScenarioOptions {
            link: priority::link_override(params)?,
            scale: params.float("scale")?,
            tcp: cc_param(params, "tcp")?,
            ns: vec![n],
            dtl_params,
            seed,
        };
        let invalid = |e: ScenarioError| TemplateError::Invalid(e.to_string());
        let mut cfg = match scenario {
            "polite" => priority_sim::polite(&opts),
            "latecomer" => priority_sim::latecomer(&opts, additive),
            "multcp" if params.bool("multcp_pair")? => priority_sim::multcp_pair(&opts, n),
            "multcp" => priority_sim::multcp(&opts, n),
            "switch" => priority_sim::switch(&opts),
            "five" => priority_sim::five(&opts),
            other => return Err(invalid(ScenarioError::UnknownScenario(other.to_string()))),
        }
        .map_err(invalid)?;
        cfg.link = apply_link_overrides(
            &cfg.link,
            params.duration("rtt")?,
            params.float("rate_mbps")?,
            params.duration("queue")?,
        )?;
        priority_sim::validate(&cfg).map_err(invalid)?;
        Ok(cfg)
    }
}

impl Template for SimPriority {
    fn name(&self) -> &str {
        "sim-priority"
    }

    /// 2: the emulator `priority` template's metrics (by phase and flow
    /// index, the unit first) and series (at the middle of each bin); the
    /// empty link as the scenario's own.
    fn version(&self) -> u32 {
        2
    }

    fn description(&self) -> &str {
        "one of DTL's priority scenarios (polite, latecomer, multcp, switch, five) on the simulator (braid sim priority)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let d = ScenarioOptions::default();
        vec![
            ParamDecl::env("scenario", ParamType::one_of(&SCENARIOS), Value::Enum("polite".into()))
                .doc("DTL's scenario: polite, latecomer, multcp, switch or five"),
            ParamDecl::env("link", ParamType::Link, Value::Link(String::new()))
                .doc("the bottleneck path; empty (default) or any ideal link: the scenario's own, the paper's"),
            ParamDecl::env("rtt", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("override the path's RTT (0s: keep it)"),
            ParamDecl::env("rate_mbps", ParamType::float_range(0.0, 100_000.0), Value::Float(0.0))
                .doc("override the path's rate, Mbit/s (0: keep it)"),
            ParamDecl::env("queue", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("override the bottleneck buffer, as its drain time at the rate (0s: keep it)"),
            ParamDecl::env("scale", ParamType::float_range(1e-3, 100.0), Value::Float(d.scale))
                .doc("multiplies every time of the scenario (1 = the paper's timings)"),
            ParamDecl::env("tcp", ParamType::one_of(&CC_NAMES), cc_value(d.tcp))
                .doc("controller of the competing \"TCP\" flows"),
            ParamDecl::env("multcp_pair", ParamType::Bool, Value::Bool(false))
                .doc("multcp only: two MulTCP(n) flows instead of MulTCP(n) against TCP"),
            ParamDecl::config("n", ParamType::float_range(1e-3, 100.0), Value::Float(1.0))
                .doc("multcp only: the DTL flow's priority N (MulTCP(N))"),
            ParamDecl::config("ledbat", ParamType::one_of(&["ledbat", "ledbat++"]), Value::Enum("ledbat".into()))
                .doc("the p = 0 controller: LEDBAT or LEDBAT++ (variant=1)"),
            ParamDecl::config(
                "decrease",
                ParamType::one_of(&["multiplicative", "additive"]),
                Value::Enum("multiplicative".into()),
            )
            .doc("LEDBAT's decrease: DTL's multiplicative or RFC 6817's additive (delay_beta=1)"),
            ParamDecl::config("target_ms", ParamType::float_range(0.0, 10_000.0), Value::Float(0.0))
                .doc("the p = 0 controller's delay target, ms (0: the variant's, 100 or 60)"),
            ParamDecl::config("params", ParamType::String, Value::String(String::new()))
                .doc("extra DTL controller parameters NAME=VALUE, comma-separated, applied last"),
        ]
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(cfg) = SimPriority::config(params, 1) else { return Duration::from_secs(1) };
        let rate_mbit = cfg.link.rate().map_or(10.0, |r| r.bits_per_sec() as f64 / 1e6);
        let secs = cfg.duration.as_secs_f64() * rate_mbit / 10.0 * WALL_SECS_PER_VIRTUAL_SEC_AT_10MBIT;
        Duration::from_secs_f64(secs.max(0.01))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let mut cfg = SimPriority::config(ctx.params, ctx.seed)?;
        cfg.wall_deadline = Some(ctx.deadline);
        let report = priority_sim::run(&cfg).map_err(|e| match e {
            ScenarioError::WallDeadline { .. } => TemplateError::Timeout(e.to_string()),
            ScenarioError::InvalidConfig { .. }
            | ScenarioError::Parameter { .. }
            | ScenarioError::UnknownScenario(_) => TemplateError::Invalid(e.to_string()),
            other => TemplateError::failed(other),
        })?;
        ctx.progress(1.0);
        let target = ledbat_target_ms(&cfg.flows.iter().flat_map(|f| f.params.clone()).collect::<Vec<_>>());
        priority::record_report(ctx, &report, target);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[(&str, Value)]) -> Params {
        let mut p = Params::default();
        for d in SimPriority.params() {
            p.insert(&d.name, d.default);
        }
        for (k, v) in values {
            p.insert(k, v.clone());
        }
        p
    }

    #[test]
    fn defaults_give_the_papers_scenarios() {
        let opts = ScenarioOptions { seed: 5, ..ScenarioOptions::default() };
        assert_eq!(SimPriority::config(&with(&[]), 5).unwrap(), priority_sim::polite(&opts).unwrap());
        for (name, want) in [
            ("switch", priority_sim::switch(&opts).unwrap()),
            ("five", priority_sim::five(&opts).unwrap()),
            ("multcp", priority_sim::multcp(&opts, 1.0).unwrap()),
        ] {
            assert_eq!(
                SimPriority::config(&with(&[("scenario", Value::Enum(name.into()))]), 5).unwrap(),
                want,
                "{name}"
            );
        }
        let additive =
            with(&[("scenario", Value::Enum("latecomer".into())), ("decrease", Value::Enum("additive".into()))]);
        assert_eq!(SimPriority::config(&additive, 5).unwrap(), priority_sim::latecomer(&opts, true).unwrap());
        let pair = with(&[
            ("scenario", Value::Enum("multcp".into())),
            ("multcp_pair", Value::Bool(true)),
            ("n", Value::Float(3.0)),
        ]);
        assert_eq!(SimPriority::config(&pair, 5).unwrap(), priority_sim::multcp_pair(&opts, 3.0).unwrap());
    }

    #[test]
    fn overrides_change_only_what_they_name() {
        let p = with(&[
            ("scenario", Value::Enum("switch".into())),
            ("rtt", Value::Duration(Duration::from_millis(100))),
            ("queue", Value::Duration(Duration::from_millis(50))),
        ]);
        let cfg = SimPriority::config(&p, 1).unwrap();
        // switch's own 5 Mbit/s; 50 ms of it is 31,250 bytes.
        assert_eq!(cfg.link.to_string(), "rtt=100ms,rate=5mbit,queue=31250b");
        let p = with(&[("rate_mbps", Value::Float(20.0)), ("link", Value::Link("rtt=10ms,rate=1mbit,loss=1%".into()))]);
        assert_eq!(SimPriority::config(&p, 1).unwrap().link.to_string(), "rtt=10ms,rate=20mbit,loss=1%");
        let p =
            with(&[("link", Value::Link("rtt=10ms".into())), ("queue", Value::Duration(Duration::from_millis(50)))]);
        assert!(SimPriority::config(&p, 1).unwrap_err().to_string().contains("rate_mbps"));
    }

    #[test]
    fn controller_parameters_apply_in_order() {
        let p = with(&[
            ("ledbat", Value::Enum("ledbat++".into())),
            ("params", Value::String("target_ms=80, delay_beta=1".into())),
        ]);
        let cfg = SimPriority::config(&p, 1).unwrap();
        let ledbat = &cfg.flows[0].params;
        let tail: Vec<&(String, f64)> = ledbat.iter().rev().take(3).collect();
        assert_eq!(tail[0], &("delay_beta".to_string(), 1.0));
        assert_eq!(tail[1], &("target_ms".to_string(), 80.0));
        assert_eq!(tail[2], &("variant".to_string(), 1.0));
        assert_eq!(ledbat_target_ms(ledbat), 80.0);
        assert_eq!(ledbat_target_ms(&[("variant".into(), 1.0)]), 60.0);
        assert_eq!(ledbat_target_ms(&[]), 100.0);
        let bad = with(&[("params", Value::String("delay_beta".into()))]);
        assert!(SimPriority::config(&bad, 1).unwrap_err().to_string().contains("expected NAME=VALUE"));
        let rejected = with(&[("params", Value::String("delay_beta=2".into()))]);
        assert!(SimPriority::config(&rejected, 1).unwrap_err().to_string().contains("delay_beta"));
    }

    #[test]
    fn roles_and_the_link_default_are_the_emulator_templates() {
        use crate::param::Role;
        use crate::template::builtin::priority::Priority;
        let sim = SimPriority.params();
        let emu = Priority.params();
        // MACI's line: Braid's controller settings are the configuration;
        // the path, the competing TCP and the scenario are the environment.
        let configuration = ["n", "ledbat", "decrease", "target_ms", "params"];
        for d in &sim {
            let want = if configuration.contains(&d.name.as_str()) { Role::Configuration } else { Role::Environment };
            assert_eq!(d.role, want, "{}", d.name);
        }
        let shared = ["scenario", "link", "scale", "tcp", "multcp_pair", "n", "ledbat", "decrease", "params"];
        for name in shared {
            let (a, b) = (sim.iter().find(|d| d.name == name), emu.iter().find(|d| d.name == name));
            let (a, b) = (a.unwrap_or_else(|| panic!("sim: no {name}")), b.unwrap_or_else(|| panic!("emu: no {name}")));
            assert_eq!(a.role, b.role, "{name}");
        }
        let link = |decls: &[ParamDecl]| decls.iter().find(|d| d.name == "link").map(|d| d.default.clone());
        assert_eq!(link(&sim), Some(Value::Link(String::new())));
        assert_eq!(link(&sim), link(&emu));
        // An ideal link, as stored before the empty default, is the
        // scenario's own too.
        let opts = ScenarioOptions { seed: 1, ..ScenarioOptions::default() };
        let ideal = with(&[("link", Value::Link("rtt=0ms".into()))]);
        assert_eq!(SimPriority::config(&ideal, 1).unwrap(), priority_sim::polite(&opts).unwrap());
    }

    #[test]
    fn every_default_parses_with_its_type() {
        for d in SimPriority.params() {
            assert_eq!(d.ty.parse_text(&d.default.to_text()).unwrap(), d.default, "{}", d.name);
            assert!(crate::param::valid_name(&d.name), "{}", d.name);
        }
    }
}
