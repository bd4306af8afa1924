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

use crate::harness::priority_sim::{self, EpochTiming, ScenarioConfig, ScenarioError, ScenarioOptions};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::builtin::priority::{self, setup, setup::ScenarioChoice};
use crate::template::builtin::sim_transfer::{cc_param, cc_value, CC_NAMES};
use crate::template::{Context, Template, TemplateError};

/// The `sim-priority` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimPriority;

/// The scenarios, as the `scenario` parameter names them (DTL's five and
/// the issue-25 grid's `versus` and `pair`).
pub const SCENARIOS: [&str; 7] = priority_sim::SCENARIO_NAMES;

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

impl SimPriority {
    /// The scenario config of an experiment's parameters and seed.
    pub fn config(params: &Params, seed: u64) -> Result<ScenarioConfig, TemplateError> {
        Self::config_and_timing(params, seed).map(|(cfg, _)| cfg)
    }

    /// [`SimPriority::config`], with the epoch timing when `epochs` set the
    /// scale.
    pub fn config_and_timing(
        params: &Params,
        seed: u64,
    ) -> Result<(ScenarioConfig, Option<EpochTiming>), TemplateError> {
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
            scale: 1.0,
            tcp: cc_param(params, "tcp")?,
            ns: vec![n],
            dtl_params,
            seed,
            warmup: None,
        };
        let choice = ScenarioChoice { scenario, n, multcp_pair: params.bool("multcp_pair")?, additive };
        let scale = params.float("scale")?;
        let explicit = move |_: &ScenarioConfig| Ok((scale != 1.0).then_some(scale));
        let (cfg, timing) = setup::configure(params, opts, choice, &explicit)?;
        priority_sim::validate(&cfg).map_err(|e| TemplateError::Invalid(e.to_string()))?;
        Ok((cfg, timing))
    }
}

impl Template for SimPriority {
    fn name(&self) -> &str {
        "sim-priority"
    }

    /// 3: `polite` has a TCP-alone phase (phase3, flow2) and judges TCP
    /// against it; the `versus` and `pair` scenarios; `queue_bdp`, `aqm`,
    /// `epochs` and `max_phase`. 2: the emulator `priority` template's
    /// metrics (by phase and flow index, the unit first) and series (at the
    /// middle of each bin); the empty link as the scenario's own.
    fn version(&self) -> u32 {
        3
    }

    fn description(&self) -> &str {
        "one of DTL's priority scenarios (polite, latecomer, multcp, switch, five) on the simulator (braid sim priority)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let d = ScenarioOptions::default();
        let mut decls = vec![
            ParamDecl::env("scenario", ParamType::one_of(&SCENARIOS), Value::Enum("polite".into())).doc(
                "DTL's scenario: polite, latecomer, multcp, switch or five; or the grid's versus (priority n \
                 against TCP: polite at n = 0, multcp above) or pair (two flows at priority n)",
            ),
            ParamDecl::env("link", ParamType::Link, Value::Link(String::new()))
                .doc("the bottleneck path; empty (default) or any ideal link: the scenario's own, the paper's"),
        ];
        decls.extend(setup::path_and_timing_params());
        decls.extend([
            ParamDecl::env("scale", ParamType::float_range(1e-3, 100.0), Value::Float(d.scale))
                .doc("multiplies every time of the scenario (1 = the paper's timings)"),
            ParamDecl::env("tcp", ParamType::one_of(&CC_NAMES), cc_value(d.tcp))
                .doc("controller of the competing \"TCP\" flows"),
            ParamDecl::env("multcp_pair", ParamType::Bool, Value::Bool(false))
                .doc("multcp only: two MulTCP(n) flows instead of MulTCP(n) against TCP"),
            ParamDecl::config("n", ParamType::float_range(0.0, 100.0), Value::Float(1.0)).doc(
                "multcp, versus, pair: the DTL flows' priority N (MulTCP(N)); above 0 for multcp",
            ),
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
        ]);
        decls
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(cfg) = SimPriority::config(params, 1) else { return Duration::from_secs(1) };
        let rate_mbit = cfg.link.rate().map_or(10.0, |r| r.bits_per_sec() as f64 / 1e6);
        let secs = cfg.duration.as_secs_f64() * rate_mbit / 10.0 * WALL_SECS_PER_VIRTUAL_SEC_AT_10MBIT;
        Duration::from_secs_f64(secs.max(0.01))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let (mut cfg, timing) = SimPriority::config_and_timing(ctx.params, ctx.seed)?;
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
        if let Some(t) = &timing {
            setup::record_timing(ctx, t);
        }
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
