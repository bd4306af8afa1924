//! What a priority scenario run leaves in the lab: its
//! [`ScenarioReport`] as flat scalars (per phase and flow, per phase, per
//! flow, per switch, whole run), each flow's throughput over time as a
//! series, and the report itself as the `report` artifact, from which
//! `braid bench priority` rebuilds its tables, checks and JSON.
//!
//! Flows, phases and switches are named by their index (`flow0`,
//! `phase1`, `switch0`), not by their labels: a label can change with a
//! parameter (`multcp2` for n = 2), an index cannot, so one metric name
//! means the same thing across a whole study. The report carries the
//! labels.
//!
//! Shared with any template that produces a [`ScenarioReport`] (the
//! simulator's as well as the emulator's).

use crate::harness::priority_sim::ScenarioReport;
use crate::oneoff::OneOffResult;
use crate::template::{Context, TemplateError};

/// The artifact holding the [`ScenarioReport`] as JSON.
pub const REPORT_ARTIFACT: &str = "report";

/// Every scalar of `r`, by metric name:
/// - per phase `k` and flow `i`: `phase{k}.flow{i}.throughput_mbps`,
///   `.share_of_capacity_ratio` (when the link has a rate),
///   `.share_of_total_ratio`;
/// - per phase: `phase{k}.utilization_ratio`, `.jain_index` (two or more
///   flows active throughout), `.queuing_delay_p50_ms`, `.queuing_delay_p99_ms`
///   (when the probe answered), `.loss_ratio`, `.bottleneck_loss_ratio`,
///   `.queue_drops_packets`;
/// - per flow: `flow{i}.throughput_mbps` (mean from its start to its stop),
///   `.bytes`, `.loss_ratio`, `.congestion_events`, `.rto_count`;
/// - per switch `j`: `switch{j}.at_secs`, `.stall_ms`, `.stall_rtts`, and
///   `max_stall_rtts` over them;
/// - the run: `queuing_delay_p50_ms`, `queuing_delay_p99_ms`,
///   `bottleneck_loss_ratio`, `queue_drops_packets`.
///
/// A figure the report lacks (`None`) is left out, never recorded as 0.
pub fn report_scalars(r: &ScenarioReport) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let mut put = |name: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.push((name, v));
        }
    };
    for (k, p) in r.phases.iter().enumerate() {
        for (i, f) in p.flows.iter().enumerate() {
            put(format!("phase{k}.flow{i}.throughput_mbps"), Some(f.mbps));
            put(format!("phase{k}.flow{i}.share_of_capacity_ratio"), f.share_of_capacity);
            put(format!("phase{k}.flow{i}.share_of_total_ratio"), Some(f.share_of_total));
        }
        put(format!("phase{k}.utilization_ratio"), p.utilization);
        put(format!("phase{k}.jain_index"), p.jain);
        put(format!("phase{k}.queuing_delay_p50_ms"), p.queuing_delay_p50_ms);
        put(format!("phase{k}.queuing_delay_p99_ms"), p.queuing_delay_p99_ms);
        put(format!("phase{k}.loss_ratio"), Some(p.loss));
        put(format!("phase{k}.bottleneck_loss_ratio"), Some(p.bottleneck_loss));
        put(format!("phase{k}.queue_drops_packets"), Some(p.queue_drops as f64));
    }
    for (i, f) in r.flows.iter().enumerate() {
        put(format!("flow{i}.throughput_mbps"), Some(f.mean_mbps));
        put(format!("flow{i}.bytes"), Some(f.bytes as f64));
        put(format!("flow{i}.loss_ratio"), Some(f.loss));
        put(format!("flow{i}.congestion_events"), Some(f.congestion_events as f64));
        put(format!("flow{i}.rto_count"), Some(f.rto_count as f64));
    }
    for (j, s) in r.switches.iter().enumerate() {
        put(format!("switch{j}.at_secs"), Some(s.at_secs));
        put(format!("switch{j}.stall_ms"), Some(s.longest_stall_ms));
        put(format!("switch{j}.stall_rtts"), Some(s.stall_rtts));
    }
    put("max_stall_rtts".into(), r.switches.iter().map(|s| s.stall_rtts).reduce(f64::max));
    put("queuing_delay_p50_ms".into(), r.queuing_delay_p50_ms);
    put("queuing_delay_p99_ms".into(), r.queuing_delay_p99_ms);
    let link = &r.forward_link;
    put("bottleneck_loss_ratio".into(), Some(link.dropped() as f64 / link.offered.max(1) as f64));
    put("queue_drops_packets".into(), Some(link.dropped_queue as f64));
    out
}

/// Record `r`: its [`report_scalars`], each flow's throughput per bin as
/// series `throughput_mbps.flow{i}` (at the middle of each bin, seconds
/// from the start), a warning per failed flow, and the report as the
/// [`REPORT_ARTIFACT`].
pub fn record_report(ctx: &mut Context<'_>, r: &ScenarioReport) {
    for (name, v) in report_scalars(r) {
        ctx.record(&name, v);
    }
    for (i, f) in r.flows.iter().enumerate() {
        let series = format!("throughput_mbps.flow{i}");
        for (k, &v) in f.throughput_mbps.iter().enumerate() {
            ctx.series(&series, (k as f64 + 0.5) * r.bin_secs, v);
        }
        if let Some(e) = &f.error {
            ctx.warn(&format!("{}: flow {i} ({}) failed: {e}", r.scenario, f.label));
        }
    }
    match serde_json::to_value(r) {
        Ok(json) => ctx.artifact(REPORT_ARTIFACT, json),
        // Cannot happen for this plain data; say so rather than lose it silently.
        Err(e) => ctx.warn(&format!("the report could not be serialized: {e}")),
    }
}

/// The [`ScenarioReport`] an experiment recorded (its
/// [`REPORT_ARTIFACT`]).
pub fn report_of(result: &OneOffResult) -> Result<ScenarioReport, TemplateError> {
    let json = result
        .artifact(REPORT_ARTIFACT)
        .ok_or_else(|| TemplateError::Failed(format!("the experiment recorded no `{REPORT_ARTIFACT}` artifact")))?;
    serde_json::from_value(json.clone())
        .map_err(|e| TemplateError::Failed(format!("the `{REPORT_ARTIFACT}` artifact is not a scenario report: {e}")))
}
