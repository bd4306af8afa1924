//! `tarl-dpm`: one point of the distributed pattern matching study
//! (issue 22 item 6; Frömmgen 2018, §7.4, Stein et al. \[F3\]), computed by
//! [`braid_tarl::dpm::study_point`].
//!
//! One experiment: an Erdős–Rényi graph of `nodes` nodes and mean degree
//! `mean_degree` with edge weights uniform in [0, 1) (from the experiment's
//! seed), the thesis's horizon-3 pattern (Listing 7.2) with every edge
//! lighter than `weight_threshold` (the threshold sets how often the pattern
//! occurs), matched by DPM with view size `k` and by non-distributed
//! matching with a view covering the pattern, with or without a broadcast
//! medium. Synchronous rounds, no clock and no network: deterministic from
//! the seed, so experiments share the cores (not exclusive).
//!
//! Records (scalars): `pattern_frequency` (matches per node),
//! `dpm_messages`, `dpm_bytes`, `dpm_view_messages`, `dpm_matches`,
//! `dpm_messages_per_node`, `baseline_messages`, `baseline_bytes`,
//! `baseline_k`, `baseline_matches`, `baseline_messages_per_node`,
//! `same_matches` (1 when DPM found exactly the baseline's matches), and,
//! when there were matches, `dpm_messages_per_match`, `dpm_bytes_per_match`,
//! `baseline_messages_per_match`, `baseline_bytes_per_match`,
//! `dpm_over_baseline` (DPM's messages over the baseline's); artifact
//! `metrics`, the whole [`braid_tarl::dpm::StudyMetrics`].
//!
//! ```
//! use braid_lab::oneoff::{run_experiments, OneOffOptions};
//! use braid_lab::param::Value;
//! use braid_lab::template::find_builtin;
//! let t = find_builtin("tarl-dpm").unwrap();
//! let runs = run_experiments(
//!     t,
//!     vec![vec![("nodes".to_string(), Value::Int(60)), ("weight_threshold".to_string(), Value::Float(1.0))]],
//!     &OneOffOptions::default(),
//! )
//! .unwrap();
//! assert_eq!(runs[0].metric("same_matches"), Some(1.0));
//! ```

use std::time::Duration;

use braid_tarl::dpm::{study_point, DpmError, MatcherMetrics, StudyParams};

use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Template, TemplateError};

/// The `tarl-dpm` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct TarlDpm;

impl TarlDpm {
    /// The study point of an experiment's parameters and seed.
    ///
    /// # Errors
    /// A parameter out of its range, named.
    pub fn study_params(params: &Params, seed: u64) -> Result<StudyParams, TemplateError> {
        let nodes = usize::try_from(params.int("nodes")?)
            .map_err(|_| TemplateError::Invalid("nodes: expected 1 to 20000".into()))?;
        let k = u32::try_from(params.int("k")?).map_err(|_| TemplateError::Invalid("k: expected 1 to 16".into()))?;
        Ok(StudyParams {
            nodes,
            mean_degree: params.float("mean_degree")?,
            weight_threshold: params.float("weight_threshold")?,
            k,
            broadcast: params.bool("broadcast")?,
            seed,
        })
    }
}

impl Template for TarlDpm {
    fn name(&self) -> &str {
        "tarl-dpm"
    }

    fn description(&self) -> &str {
        "TARL distributed pattern matching vs non-distributed matching: messages and bytes per detected match (Erdős–Rényi graphs, Listing 7.2's pattern)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::env("nodes", ParamType::int_range(1, 20_000), Value::Int(200))
                .doc("nodes of the Erdős–Rényi graph"),
            ParamDecl::env("mean_degree", ParamType::float_range(0.0, 100.0), Value::Float(2.0))
                .doc("its mean degree"),
            ParamDecl::env("weight_threshold", ParamType::float_range(0.0, 1.0), Value::Float(0.6))
                .doc("pattern edges must weigh less (weights uniform in [0, 1)): sets the pattern frequency"),
            ParamDecl::config("k", ParamType::int_range(1, 16), Value::Int(2)).doc("DPM's view size (hops)"),
            ParamDecl::config("broadcast", ParamType::Bool, Value::Bool(false))
                .doc("whether the medium has broadcast (one message reaches every neighbour)"),
        ]
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        // The work is about proportional to nodes x (1 + matches per node),
        // and the pattern's four edges make the frequency about
        // (degree x threshold)^4 (measured: 0.42 at degree 2 and threshold
        // 0.4, 261 at degree 4 and 1.0). 2.7 µs per unit, measured over
        // studies/tarl-dpm.toml on a release build (85 s of CPU in all).
        let n = params.int("nodes").unwrap_or(200).max(1) as f64;
        let d = params.float("mean_degree").unwrap_or(2.0).max(0.0);
        let t = params.float("weight_threshold").unwrap_or(0.6).clamp(0.0, 1.0);
        Duration::from_secs_f64((n * (1.0 + (d * t).powi(4)) * 2.7e-6).max(0.001))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let p = TarlDpm::study_params(ctx.params, ctx.seed)?;
        let m = study_point(&p).map_err(|e| match e {
            DpmError::Param { .. } => TemplateError::Invalid(e.to_string()),
            other => TemplateError::failed(other),
        })?;
        ctx.record("pattern_frequency", m.pattern_frequency);
        record_matcher(ctx, "dpm", &m.dpm);
        record_matcher(ctx, "baseline", &m.baseline);
        ctx.record("dpm_view_messages", m.dpm.view_messages as f64);
        ctx.record("baseline_k", f64::from(m.baseline.k));
        ctx.record("same_matches", f64::from(u8::from(m.same_matches)));
        if m.baseline.messages > 0 {
            ctx.record("dpm_over_baseline", m.dpm.messages as f64 / m.baseline.messages as f64);
        }
        if !m.same_matches {
            ctx.warn(&format!(
                "DPM found {} matches, the non-distributed matcher {}",
                m.dpm.matches, m.baseline.matches
            ));
        }
        let json = serde_json::to_value(m).map_err(|e| TemplateError::failed(format!("metrics: {e}")))?;
        ctx.artifact("metrics", json);
        Ok(())
    }
}

fn record_matcher(ctx: &mut Context<'_>, prefix: &str, m: &MatcherMetrics) {
    ctx.record(&format!("{prefix}_messages"), m.messages as f64);
    ctx.record(&format!("{prefix}_bytes"), m.bytes as f64);
    ctx.record(&format!("{prefix}_matches"), m.matches as f64);
    ctx.record(&format!("{prefix}_messages_per_node"), m.messages_per_node);
    if let Some(v) = m.messages_per_match {
        ctx.record(&format!("{prefix}_messages_per_match"), v);
    }
    if let Some(v) = m.bytes_per_match {
        ctx.record(&format!("{prefix}_bytes_per_match"), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, defaults};

    #[test]
    fn declarations_are_valid() {
        assert_declarations_valid(&TarlDpm, &[]);
    }

    #[test]
    fn same_seed_same_records_and_dpm_agrees_with_the_baseline() {
        let mut p = defaults(&TarlDpm);
        p.insert("weight_threshold", Value::Float(1.0));
        p.insert("nodes", Value::Int(80));
        let a = study_point(&TarlDpm::study_params(&p, 9).unwrap()).unwrap();
        let b = study_point(&TarlDpm::study_params(&p, 9).unwrap()).unwrap();
        assert_eq!(a, b);
        assert!(a.same_matches && a.dpm.matches > 0, "{a:?}");
        let c = study_point(&TarlDpm::study_params(&p, 10).unwrap()).unwrap();
        assert_ne!(a, c, "the seed draws the graph");
    }

    #[test]
    fn out_of_range_values_are_refused_by_name() {
        assert_each_refused(
            &TarlDpm,
            [("nodes", Value::Int(0), "nodes"), ("k", Value::Int(0), "k")],
            |p| study_point(&TarlDpm::study_params(p, 1)?).map_err(|e| TemplateError::Invalid(e.to_string())),
        );
    }
}
