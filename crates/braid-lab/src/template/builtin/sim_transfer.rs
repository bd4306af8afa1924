//! `sim-transfer`: a bulk transfer of one or more flows over one simulated
//! link, in virtual time ([`crate::harness::sim_transfer`]), the
//! measurement behind `braid sim transfer`.
//!
//! One experiment is one transfer: `flows` connections sending `bytes`
//! each over `link` with controller `cc`. Everything derives from the
//! experiment's seed, so running it again gives the same records (and the
//! same trace hash in the report).
//!
//! Records:
//! - scalars `ok` (1 when every byte of every flow arrived intact in time,
//!   else 0), `bytes`, `goodput_mbps`, `link_mbps` (when the link has a
//!   rate), `efficiency` (goodput after slow start over the link rate),
//!   `retransmits`, `jain` (two or more flows), `virtual_secs`;
//! - series `throughput_mbps`: all flows' delivery rate over every 100 ms
//!   of virtual time;
//! - artifact `report`: the whole [`SimTransferReport`] (what
//!   `braid sim transfer --json` prints), trace hash included.
//!
//! ```
//! use braid_lab::oneoff::{run_experiments, OneOffOptions};
//! use braid_lab::param::Value;
//! use braid_lab::template::find_builtin;
//! let t = find_builtin("sim-transfer").unwrap();
//! let runs = run_experiments(
//!     t,
//!     vec![vec![
//!         ("link".to_string(), Value::Link("rtt=20ms,rate=50mbit".into())),
//!         ("bytes".to_string(), Value::Size(200_000)),
//!     ]],
//!     &OneOffOptions::default(),
//! )
//! .unwrap();
//! assert_eq!(runs[0].metric("ok"), Some(1.0));
//! assert_eq!(runs[0].artifact("report").unwrap()["bytes"], 200_000);
//! ```

use std::time::{Duration, Instant};

use braid_proto::CcAlgorithm;

use crate::harness::sim_transfer::{self, SimTransferConfig, SimTransferError, SimTransferReport};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Template, TemplateError};

/// The `sim-transfer` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTransfer;

/// Names of every congestion controller, as [`CcAlgorithm`] parses and
/// prints them (the values of the simulator templates' `cc`-like
/// parameters).
pub const CC_NAMES: [&str; 8] = CcAlgorithm::NAMES;

/// The controller a `cc`-like parameter names.
pub(crate) fn cc_param(params: &Params, name: &str) -> Result<CcAlgorithm, TemplateError> {
    let text = params.str(name)?;
    text.parse::<CcAlgorithm>().map_err(|e| TemplateError::Invalid(format!("{name}: {e}")))
}

/// A configuration parameter naming a controller (one of [`CC_NAMES`]).
pub(crate) fn cc_decl(name: &str, default: CcAlgorithm) -> ParamDecl {
    ParamDecl::config(name, ParamType::one_of(&CC_NAMES), cc_value(default))
}

/// The parameter value naming `cc`.
pub(crate) fn cc_value(cc: CcAlgorithm) -> Value {
    Value::Enum(cc.as_str().to_string())
}

/// Virtual seconds → wall seconds: about what one simulated packet costs
/// (both endpoints' processing, the link, the acknowledgements), measured
/// on a release build; used only for `expected_duration`.
const WALL_SECS_PER_PACKET: f64 = 4e-6;

impl SimTransfer {
    /// The harness config of an experiment's parameters and seed.
    pub fn config(params: &Params, seed: u64) -> Result<SimTransferConfig, TemplateError> {
        let message_size = usize::try_from(params.size("message_size")?)
            .map_err(|_| TemplateError::Invalid("message_size: too large for this machine".into()))?;
        Ok(SimTransferConfig {
            link: params.link("link")?,
            bytes: params.size("bytes")?,
            cc: cc_param(params, "cc")?,
            flows: usize::try_from(params.int("flows")?)
                .map_err(|_| TemplateError::Invalid("flows: expected at least 1".into()))?,
            seed,
            message_size,
            time_limit: params.duration("time_limit")?,
            wall_deadline: None,
        })
    }
}

impl Template for SimTransfer {
    fn name(&self) -> &str {
        "sim-transfer"
    }

    fn description(&self) -> &str {
        "bulk transfer of one or more flows over one simulated link, in virtual time (braid sim transfer)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let d = SimTransferConfig::default();
        vec![
            ParamDecl::env("link", ParamType::Link, Value::Link(d.link.to_string()))
                .doc("the simulated path, e.g. rtt=20ms,rate=100mbit,loss=1%"),
            ParamDecl::config("bytes", ParamType::Size, Value::Size(d.bytes)).doc("bytes each flow transfers"),
            cc_decl("cc", d.cc).doc("congestion controller of every connection"),
            ParamDecl::config("flows", ParamType::int_range(1, 1000), Value::Int(d.flows as i64))
                .doc("concurrent flows (connections) sharing the link"),
            ParamDecl::config("message_size", ParamType::Size, Value::Size(d.message_size as u64))
                .doc("application message size"),
            ParamDecl::config("time_limit", ParamType::Duration, Value::Duration(d.time_limit))
                .doc("give up after this much virtual time"),
        ]
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let bytes = params.size("bytes").unwrap_or(10 << 20) as f64;
        let flows = params.int("flows").unwrap_or(1).max(1) as f64;
        // Data packets of ~1200 bytes, about one acknowledgement per two.
        let packets = bytes * flows / 1200.0 * 1.5;
        Duration::from_secs_f64((packets * WALL_SECS_PER_PACKET).max(0.01))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let mut cfg = SimTransfer::config(ctx.params, ctx.seed)?;
        cfg.wall_deadline = Some(ctx.deadline);
        let mut last = (0.0f64, 0u64);
        let report = sim_transfer::run_with_progress(&cfg, |p| {
            let (t0, b0) = last;
            if p.virtual_secs > t0 {
                let mbps = (p.bytes_delivered - b0) as f64 * 8.0 / (p.virtual_secs - t0) / 1e6;
                ctx.series("throughput_mbps", p.virtual_secs, mbps);
            }
            last = (p.virtual_secs, p.bytes_delivered);
            if p.bytes_total > 0 {
                ctx.progress(p.bytes_delivered as f64 / p.bytes_total as f64);
            }
        })
        .map_err(|e| match e {
            SimTransferError::InvalidConfig { .. } => TemplateError::Invalid(e.to_string()),
            other => TemplateError::failed(other),
        })?;
        if !report.ok && Instant::now() >= ctx.deadline {
            return Err(TemplateError::Timeout(format!(
                "simulated {:.3} s of virtual time, {} of {} bytes delivered",
                report.virtual_secs,
                report.bytes,
                cfg.bytes.saturating_mul(cfg.flows as u64)
            )));
        }
        record(ctx, &report)
    }
}

/// The scalars, warnings and the report artifact of a finished transfer.
fn record(ctx: &mut Context<'_>, r: &SimTransferReport) -> Result<(), TemplateError> {
    ctx.record("ok", f64::from(u8::from(r.ok)));
    ctx.record("bytes", r.bytes as f64);
    ctx.record("goodput_mbps", r.goodput_mbps);
    if let Some(v) = r.link_mbps {
        ctx.record("link_mbps", v);
    }
    if let Some(v) = r.efficiency {
        ctx.record("efficiency", v);
    }
    ctx.record("retransmits", r.retransmits as f64);
    if let Some(v) = r.jain {
        ctx.record("jain", v);
    }
    ctx.record("virtual_secs", r.virtual_secs);
    for (i, f) in r.flows.iter().enumerate() {
        if let Some(e) = &f.error {
            ctx.warn(&format!("flow {i}: {e}"));
        }
    }
    let json = serde_json::to_value(r).map_err(|e| TemplateError::failed(format!("report: {e}")))?;
    ctx.artifact("report", json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&SimTransfer)
    }

    #[test]
    fn defaults_are_the_harness_defaults() {
        let cfg = SimTransfer::config(&defaults(), 1).unwrap();
        assert_eq!(cfg, SimTransferConfig::default());
    }

    #[test]
    fn every_default_parses_with_its_type() {
        crate::template::builtin::test_support::assert_declarations_valid(&SimTransfer, &[]);
    }

    #[test]
    fn every_controller_name_parses() {
        for name in CC_NAMES {
            assert_eq!(name.parse::<CcAlgorithm>().unwrap().as_str(), name);
        }
    }

    #[test]
    fn bad_values_are_invalid_not_panics() {
        let mut p = defaults();
        p.insert("message_size", Value::Size(0));
        let mut rec = crate::record::Recorder::in_memory();
        let dir = std::env::temp_dir();
        let mut ctx = Context::new(&p, 1, Instant::now() + Duration::from_secs(60), &mut rec, &dir, "t");
        let e = SimTransfer.run(&mut ctx).unwrap_err();
        assert!(matches!(e, TemplateError::Invalid(_)) && e.to_string().contains("message_size"), "{e}");
    }
}
