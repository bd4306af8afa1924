//! What a priority scenario run leaves in the lab, for both templates that
//! run DTL's scenarios (`priority` over the emulator, `sim-priority` in
//! the simulator): its [`ScenarioReport`] as flat scalars, each flow's
//! throughput and the bottleneck's drops over time as series, and the
//! report itself as the `report` artifact, from which `braid sim
//! priority` and `braid bench priority` rebuild their tables, checks and
//! JSON. One function ([`record_report`]) records all of it, so a metric
//! means the same in both templates and a study of one compares with a
//! study of the other.
//!
//! Names are the measure with its unit first, then what it is of, as in
//! the lab's other templates (`goodput_mbps.{path}`):
//! `throughput_mbps.phase1.flow0`. Flows, phases and switches are named by
//! their index (`flow0`, `phase1`, `switch0`) in the scenario's order, not
//! by their labels: a label can change with a parameter (`multcp2` for
//! n = 2, a configuration parameter), an index cannot, so one metric name
//! means the same thing across a whole study and `braid lab show` / `best`
//! can compare configurations by it. The report artifact carries the
//! labels.

use crate::harness::priority_sim::{self, ScenarioReport};
use crate::oneoff::OneOffResult;
use crate::template::{Context, TemplateError};

/// The artifact holding the [`ScenarioReport`] as JSON.
pub const REPORT_ARTIFACT: &str = "report";

/// Every scalar of `r`, by metric name (`k` a phase, `i` a flow, `j` a
/// switch, each an index in the scenario's order):
/// - per phase and flow: `throughput_mbps.phase{k}.flow{i}`,
///   `share_of_capacity_ratio.phase{k}.flow{i}` (of the link rate, when
///   the link has one), `share_of_total_ratio.phase{k}.flow{i}` (of all
///   flows' throughput in the phase);
/// - per phase: `utilization_ratio.phase{k}`, `jain_index.phase{k}` (two
///   or more flows active throughout), `queuing_delay_p50_ms.phase{k}`,
///   `queuing_delay_p99_ms.phase{k}` (when the delay probe answered),
///   `loss_ratio.phase{k}` (packets the senders declared lost over packets
///   sent), `bottleneck_loss_ratio.phase{k}`, `queue_drops_packets.phase{k}`;
/// - per flow, over its whole run: `mean_throughput_mbps.flow{i}` (from its
///   start to its stop), `delivered_bytes.flow{i}`, `loss_ratio.flow{i}`,
///   `congestion_events.flow{i}`, `rto_count.flow{i}`;
/// - per priority switch: `switch_at_secs.switch{j}`, `stall_ms.switch{j}`
///   (the longest time without a packet sent after it), `stall_rtts.switch{j}`;
/// - the whole run: `switch_count`, `max_stall_ms` and `max_stall_rtts`
///   (with at least one switch), `queuing_delay_p50_ms`,
///   `queuing_delay_p99_ms`, `loss_ratio` (over the flows that count their
///   packets: all in the simulator, Braid's in the emulator),
///   `bottleneck_loss_ratio`, `queue_drops_packets`, and issue 5's criteria
///   that apply to this one run ([`priority_sim::checks`] with the p = 0
///   controller's delay target `ledbat_target_ms`): `checks_passed`,
///   `checks_failed`.
///
/// A figure the report lacks (`None`, or not finite) is left out, never
/// recorded as 0.
///
/// ```
/// use braid_lab::harness::priority_sim::{run, switch, ScenarioOptions};
/// use braid_lab::template::builtin::priority::report_scalars;
/// let cfg = switch(&ScenarioOptions { scale: 0.02, ..ScenarioOptions::default() }).unwrap();
/// let report = run(&cfg).unwrap();
/// let scalars = report_scalars(&report, 100.0);
/// let get = |name: &str| scalars.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
/// // switch's phase p1, flow dtl (the second).
/// assert_eq!(get("throughput_mbps.phase1.flow1"), Some(report.phases[1].flows[1].mbps));
/// assert_eq!(get("switch_count"), Some(2.0));
/// ```
pub fn report_scalars(r: &ScenarioReport, ledbat_target_ms: f64) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let mut put = |name: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.push((name, v));
        }
    };
    for (k, p) in r.phases.iter().enumerate() {
        for (i, f) in p.flows.iter().enumerate() {
            put(format!("throughput_mbps.phase{k}.flow{i}"), Some(f.mbps));
            put(format!("share_of_capacity_ratio.phase{k}.flow{i}"), f.share_of_capacity);
            put(format!("share_of_total_ratio.phase{k}.flow{i}"), Some(f.share_of_total));
        }
        put(format!("utilization_ratio.phase{k}"), p.utilization);
        put(format!("jain_index.phase{k}"), p.jain);
        put(format!("queuing_delay_p50_ms.phase{k}"), p.queuing_delay_p50_ms);
        put(format!("queuing_delay_p99_ms.phase{k}"), p.queuing_delay_p99_ms);
        put(format!("loss_ratio.phase{k}"), Some(p.loss));
        put(format!("bottleneck_loss_ratio.phase{k}"), Some(p.bottleneck_loss));
        put(format!("queue_drops_packets.phase{k}"), Some(p.queue_drops as f64));
    }
    let (mut sent, mut lost) = (0u64, 0u64);
    for (i, f) in r.flows.iter().enumerate() {
        put(format!("mean_throughput_mbps.flow{i}"), Some(f.mean_mbps));
        put(format!("delivered_bytes.flow{i}"), Some(f.bytes as f64));
        put(format!("loss_ratio.flow{i}"), Some(f.loss));
        put(format!("congestion_events.flow{i}"), Some(f.congestion_events as f64));
        put(format!("rto_count.flow{i}"), Some(f.rto_count as f64));
        sent += f.packets_sent;
        lost += f.packets_lost;
    }
    for (j, s) in r.switches.iter().enumerate() {
        put(format!("switch_at_secs.switch{j}"), Some(s.at_secs));
        put(format!("stall_ms.switch{j}"), Some(s.longest_stall_ms));
        put(format!("stall_rtts.switch{j}"), Some(s.stall_rtts));
    }
    put("switch_count".into(), Some(r.switches.len() as f64));
    put("max_stall_ms".into(), r.switches.iter().map(|s| s.longest_stall_ms).reduce(f64::max));
    put("max_stall_rtts".into(), r.switches.iter().map(|s| s.stall_rtts).reduce(f64::max));
    put("queuing_delay_p50_ms".into(), r.queuing_delay_p50_ms);
    put("queuing_delay_p99_ms".into(), r.queuing_delay_p99_ms);
    put("loss_ratio".into(), Some(lost as f64 / sent.max(1) as f64));
    let link = &r.forward_link;
    put("bottleneck_loss_ratio".into(), Some(link.dropped() as f64 / link.offered.max(1) as f64));
    put("queue_drops_packets".into(), Some(link.dropped_queue as f64));
    let checks = priority_sim::checks(std::slice::from_ref(r), ledbat_target_ms);
    let passed = checks.iter().filter(|c| c.pass).count();
    put("checks_passed".into(), Some(passed as f64));
    put("checks_failed".into(), Some((checks.len() - passed) as f64));
    out
}

/// Every series of `r`, by name, as `(t, value)` points with `t` the
/// middle of each throughput bin in seconds from the start of the run:
/// `throughput_mbps.flow{i}` per flow (Mbit/s delivered in the bin) and
/// `queue_drops_packets` (packets the bottleneck queue dropped in the bin).
pub fn report_series(r: &ScenarioReport) -> Vec<(String, Vec<(f64, f64)>)> {
    let at_middle = |k: usize| (k as f64 + 0.5) * r.bin_secs;
    let mut out: Vec<(String, Vec<(f64, f64)>)> = r
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let points = f.throughput_mbps.iter().enumerate().map(|(k, &v)| (at_middle(k), v)).collect();
            (format!("throughput_mbps.flow{i}"), points)
        })
        .collect();
    let drops = r.queue_drops.iter().enumerate().map(|(k, &d)| (at_middle(k), d as f64)).collect();
    out.push(("queue_drops_packets".into(), drops));
    out
}

/// Record `r`: its [`report_scalars`] (`ledbat_target_ms`: the p = 0
/// controller's delay target, for the checks), its [`report_series`], a
/// warning per failed flow, and the report as the [`REPORT_ARTIFACT`].
pub fn record_report(ctx: &mut Context<'_>, r: &ScenarioReport, ledbat_target_ms: f64) {
    for (name, v) in report_scalars(r, ledbat_target_ms) {
        ctx.record(&name, v);
    }
    for (name, points) in report_series(r) {
        for (t, v) in points {
            ctx.series(&name, t, v);
        }
    }
    for (i, f) in r.flows.iter().enumerate() {
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
