//! Issue 25's priority grid: the `versus` and `pair` scenarios over RTT ×
//! rate × buffer × queue discipline × competing TCP × priority, run through
//! the lab (one experiment per point and scenario, in parallel, with the
//! runner's progress bar) on either priority template (`sim-priority` in
//! the simulator, `priority` on the emulator), and judged point by point
//! with the acceptance checks ([`priority_sim::checks`]).
//!
//! A point's phases last [`GridAxes::epochs`] congestion epochs of its
//! competing TCP ([`priority_sim::epoch_timing`]), capped at
//! [`GridAxes::max_phase`]; each row says how many epochs its phase spanned
//! (`epochs`) and whether the cap shortened it (`capped`), where a verdict
//! rests on less than the asked number. Seeds are fixed per point (derived
//! from the point's parameters by the lab's plan), so the simulator's grid
//! is reproducible point by point.
//!
//! ```
//! use braid_lab::template::builtin::priority::grid::{aqm_supported, GridAxes};
//! let axes = GridAxes::default();
//! // The issue's grid: 3 RTTs × 3 rates × 3 buffers × 5 queue disciplines
//! // × 2 TCPs × 5 priorities, two scenarios each.
//! assert_eq!(axes.points(), 1350);
//! let droptail_only = axes.without_aqm();
//! assert_eq!(droptail_only.points(), 270);
//! # let _ = aqm_supported();
//! ```

use std::sync::Arc;
use std::time::Duration;

use braid_link::LinkSpec;
/// The rate type of the grid's axis (braid-link's), for callers that do
/// not depend on braid-link.
pub use braid_link::Rate;

use crate::harness::priority_sim::{self, DEFAULT_MAX_PHASE};
use crate::oneoff::OneOffResult;
use crate::param::{format_duration, parse_duration, Params, Value};
use crate::plan::{Plan, PlannedExperiment};
use crate::runner::{self, MemorySink, RunOptions};
use crate::store::ExperimentStatus;
use crate::study::Study;
use crate::template::builtin::priority::{ledbat_target_ms, report_of};
use crate::template::{Template, TemplateError};

/// The grid's axes and how long each point is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct GridAxes {
    /// Base round-trip times.
    pub rtts: Vec<Duration>,
    /// Bottleneck rates.
    pub rates: Vec<Rate>,
    /// Bottleneck buffers, in bandwidth-delay products.
    pub queues_bdp: Vec<f64>,
    /// Queue disciplines (`droptail`, `codel`, `pie`, `red`, `fq_codel`).
    pub aqms: Vec<String>,
    /// Competing TCPs (`cubic`, `newreno`).
    pub tcps: Vec<String>,
    /// Priorities of the DTL flows.
    pub ps: Vec<f64>,
    /// Congestion epochs each measured phase spans.
    pub epochs: f64,
    /// The longest measured phase.
    pub max_phase: Duration,
    /// The paths' round-trip delay variation, in packet times at the
    /// point's rate (`jitter_packets`; 0 = none).
    pub jitter_packets: f64,
}

/// The grid's default path jitter: σ of one packet time at the bottleneck
/// rate. A simulated path without any timing noise phase-locks flows that
/// share a drop-tail queue: the same flow meets the full queue at every
/// overflow, and shares come out anywhere (MulTCP(2) against CUBIC gave
/// 9.8× on one link). Real hosts and paths add that noise; Floyd and
/// Jacobson (1992) show that a random delay of up to one bottleneck packet
/// time removes the phase effects, so the grid adds about that, scaled by
/// the point's rate rather than fixed.
pub const GRID_JITTER_PACKETS: f64 = 1.0;

/// The queue disciplines of the grid.
pub const GRID_AQMS: [&str; 5] = ["droptail", "codel", "pie", "red", "fq_codel"];

/// The path every grid point starts from; the point sets its RTT, rate,
/// buffer and AQM. Without it each scenario's own path would be the base,
/// and `multcp`'s carries DTL's 0.2% random loss, which the issue's grid
/// does not have (its losses are the queue's): random loss made a 20 s
/// phase's ratio a matter of luck (MulTCP(1) against NewReno at 10 ms, 20
/// Mbit/s, 4 BDP: 0.90, 1.28, 1.17 over three seeds, 1.00 over 200 s).
pub const GRID_BASE_LINK: &str = "rtt=40ms,rate=10mbit";

/// The scenarios run at each point.
pub const GRID_SCENARIOS: [&str; 2] = ["versus", "pair"];

impl Default for GridAxes {
    /// The issue's grid: RTT 10, 50, 200 ms; 5, 20, 100 Mbit/s; 0.25, 1
    /// and 4 BDP of buffer; drop-tail and every AQM; CUBIC and NewReno;
    /// p = 0..4; 3 epochs per phase, at most 120 s.
    fn default() -> Self {
        GridAxes {
            rtts: [10, 50, 200].map(Duration::from_millis).to_vec(),
            rates: [5, 20, 100].map(Rate::from_mbit).to_vec(),
            queues_bdp: vec![0.25, 1.0, 4.0],
            aqms: GRID_AQMS.map(String::from).to_vec(),
            tcps: vec!["cubic".into(), "newreno".into()],
            ps: vec![0.0, 1.0, 2.0, 3.0, 4.0],
            epochs: 3.0,
            max_phase: DEFAULT_MAX_PHASE,
            jitter_packets: GRID_JITTER_PACKETS,
        }
    }
}

impl GridAxes {
    /// How many points (link × TCP × p; each runs both scenarios).
    pub fn points(&self) -> usize {
        self.rtts.len()
            * self.rates.len()
            * self.queues_bdp.len()
            * self.aqms.len()
            * self.tcps.len()
            * self.ps.len()
    }

    /// The same axes with drop-tail only.
    pub fn without_aqm(&self) -> GridAxes {
        GridAxes { aqms: vec!["droptail".into()], ..self.clone() }
    }

    /// The lab study of the grid on `template` (`sim-priority` or
    /// `priority`): every point × [`GRID_SCENARIOS`], with `extra`
    /// parameter values (e.g. `ledbat`, `params`) for every experiment,
    /// seeds derived from `seed` and each point's parameters.
    pub fn study(
        &self,
        name: &str,
        template: Arc<dyn Template>,
        extra: &[(&str, Value)],
        seed: u64,
    ) -> Result<Study, TemplateError> {
        let mut values: Vec<(&str, Vec<Value>)> = vec![
            ("scenario", GRID_SCENARIOS.iter().map(|s| Value::Enum(s.to_string())).collect()),
            ("n", self.ps.iter().map(|&p| Value::Float(p)).collect()),
            ("tcp", self.tcps.iter().map(|t| Value::Enum(t.clone())).collect()),
            ("rtt", self.rtts.iter().map(|&d| Value::Duration(d)).collect()),
            ("rate_mbps", self.rates.iter().map(|r| Value::Float(r.bits_per_sec() as f64 / 1e6)).collect()),
            ("queue_bdp", self.queues_bdp.iter().map(|&q| Value::Float(q)).collect()),
            ("aqm", self.aqms.iter().map(|a| Value::Enum(a.clone())).collect()),
            ("epochs", vec![Value::Float(self.epochs)]),
            ("max_phase", vec![Value::Duration(self.max_phase)]),
            ("jitter_packets", vec![Value::Float(self.jitter_packets)]),
        ];
        if !extra.iter().any(|(k, _)| *k == "link") {
            let base: LinkSpec = GRID_BASE_LINK.parse().expect("the grid's base link is a valid spec");
            values.push(("link", vec![Value::Link(base.to_string())]));
        }
        values.extend(extra.iter().map(|(k, v)| (*k, vec![v.clone()])));
        Study::from_values(name, template, &values, 1, seed).map_err(|e| TemplateError::Invalid(e.to_string()))
    }
}

/// Whether braid-link knows the `aqm=` key (another part of issue 25 adds
/// it): the grid's AQM points need it. (An AQM needs a rate to act on, so
/// the probe has one.)
pub fn aqm_supported() -> bool {
    "rtt=20ms,rate=10mbit,aqm=codel".parse::<LinkSpec>().is_ok()
}

/// One check of one point (one element of `--grid --json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GridRow {
    /// Base RTT, e.g. `50ms`.
    pub rtt: String,
    /// Bottleneck rate, e.g. `20mbit`.
    pub rate: String,
    /// Bottleneck buffer, e.g. `0.25bdp`.
    pub queue: String,
    /// Queue discipline.
    pub aqm: String,
    /// Competing TCP.
    pub tcp: String,
    /// The DTL flows' priority.
    pub p: f64,
    /// The run the check is of (`polite`, `multcp_2`, `multcp_pair_2`, ...).
    pub scenario: String,
    /// The check (`polite.with_tcp.tcp_over_tcp_alone`, ...; `run` when the
    /// experiment failed).
    pub check: String,
    /// The measured share, ratio or index (`None` if missing).
    pub value: Option<f64>,
    /// The requirement.
    pub want: String,
    /// Whether the value meets it.
    pub pass: bool,
    /// Congestion epochs of the competing TCP the measured phase spans.
    pub epochs: Option<f64>,
    /// The phase cap shortened the phase below the asked epochs.
    pub capped: Option<bool>,
    /// Why the experiment failed, if it did.
    pub error: Option<String>,
}

/// The point parameters of an experiment, as row text.
fn point_of(params: &Params) -> Result<(String, String, String, String, String, f64), TemplateError> {
    let rate = params.float("rate_mbps")?;
    Ok((
        format_duration(params.duration("rtt")?),
        format!("{}mbit", rate),
        format!("{}bdp", params.float("queue_bdp")?),
        params.str("aqm")?.to_string(),
        params.str("tcp")?.to_string(),
        params.float("n")?,
    ))
}

/// The rows of one finished experiment: one per check of its report, or a
/// failed `run` row.
pub fn rows_of(result: &OneOffResult) -> Result<Vec<GridRow>, TemplateError> {
    let (rtt, rate, queue, aqm, tcp, p) = point_of(&result.params)?;
    let row = |scenario: String, check: String, value, want: String, pass, error| GridRow {
        rtt: rtt.clone(),
        rate: rate.clone(),
        queue: queue.clone(),
        aqm: aqm.clone(),
        tcp: tcp.clone(),
        p,
        scenario,
        check,
        value,
        want,
        pass,
        epochs: result.metric("phase_epochs"),
        capped: result.metric("phase_capped").map(|c| c > 0.0),
        error,
    };
    let scenario = result.params.str("scenario")?.to_string();
    if let Some(e) = &result.error {
        return Ok(vec![row(scenario, "run".into(), None, "runs".into(), false, Some(e.clone()))]);
    }
    let report = report_of(result)?;
    let target = match result.params.float("target_ms") {
        Ok(t) if t > 0.0 => t,
        _ => ledbat_target_ms(&result.params)?,
    };
    let mut rows: Vec<GridRow> = priority_sim::checks(std::slice::from_ref(&report), target)
        .into_iter()
        .map(|c| row(report.scenario.clone(), c.name, c.value, c.want, c.pass, None))
        .collect();
    for f in report.flows.iter().filter(|f| f.error.is_some()) {
        rows.push(row(report.scenario.clone(), format!("flow.{}", f.label), None, "runs".into(), false, f.error.clone()));
    }
    Ok(rows)
}

/// One point of the grid: a link, a competing TCP and a priority.
#[derive(Debug, Clone, PartialEq)]
pub struct GridPoint {
    /// Base RTT.
    pub rtt: Duration,
    /// Bottleneck rate.
    pub rate: Rate,
    /// Bottleneck buffer, in bandwidth-delay products.
    pub queue_bdp: f64,
    /// Queue discipline (one of [`GRID_AQMS`]).
    pub aqm: String,
    /// Competing TCP (`cubic` or `newreno`).
    pub tcp: String,
    /// The DTL flows' priority.
    pub p: f64,
}

impl GridPoint {
    /// The grid of this one point, measured as `like` says (`epochs`,
    /// `max_phase`).
    pub fn axes(&self, like: &GridAxes) -> GridAxes {
        GridAxes {
            rtts: vec![self.rtt],
            rates: vec![self.rate],
            queues_bdp: vec![self.queue_bdp],
            aqms: vec![self.aqm.clone()],
            tcps: vec![self.tcp.clone()],
            ps: vec![self.p],
            ..like.clone()
        }
    }
}

/// The experiments of `points` (both scenarios each, measured as `like`
/// says; a point listed twice runs once), on `template`, with `extra`
/// parameter values and seeds derived from `seed` and each point: for
/// [`run_plan`], when the points are a sample rather than a product.
pub fn plan_points(
    name: &str,
    template: Arc<dyn Template>,
    points: &[GridPoint],
    like: &GridAxes,
    extra: &[(&str, Value)],
    seed: u64,
) -> Result<Vec<PlannedExperiment>, TemplateError> {
    let mut out: Vec<PlannedExperiment> = Vec::new();
    for p in points {
        let study = p.axes(like).study(name, template.clone(), extra, seed)?;
        for e in Plan::new(&study).experiments {
            if !out.iter().any(|o| o.id == e.id) {
                out.push(e);
            }
        }
    }
    Ok(out)
}

/// Run `study` (from [`GridAxes::study`]) with [`run_plan`].
pub fn run_study(
    study: &Study,
    jobs: usize,
    timeout: Option<Duration>,
    show_progress: bool,
) -> Result<Vec<OneOffResult>, TemplateError> {
    run_plan(study.template.clone(), Plan::new(study).experiments, jobs, timeout, show_progress)
}

/// Run `experiments` of `template` through the lab's runner, `jobs` at
/// once (an exclusive template, the emulator's, runs one at a time
/// whatever `jobs`), each with `timeout` (`None`: its plan's, 10 × the
/// expected time), with the progress bar on stderr when `show_progress`;
/// returns every experiment's outcome in the given order.
pub fn run_plan(
    template: Arc<dyn Template>,
    mut experiments: Vec<PlannedExperiment>,
    jobs: usize,
    timeout: Option<Duration>,
    show_progress: bool,
) -> Result<Vec<OneOffResult>, TemplateError> {
    if let Some(t) = timeout {
        for e in &mut experiments {
            e.timeout = t;
        }
    }
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let work_root = std::env::temp_dir().join(format!(
        "braid-grid-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut options = RunOptions::new(&work_root);
    options.jobs = jobs.max(1);
    options.show_progress = show_progress;
    let mut sink = MemorySink::default();
    let lookup = move |n: &str| (n == template.name()).then(|| template.clone());
    let outcome = runner::run(0, &experiments, &lookup, &mut sink, &options);
    let _ = std::fs::remove_dir_all(&work_root);
    outcome.map_err(|e| TemplateError::Failed(format!("the grid's runner: {e}")))?;
    Ok(experiments
        .into_iter()
        .map(|p| match sink.get(0, &p.id) {
            Some(done) => OneOffResult {
                params: p.params,
                error: match done.status {
                    ExperimentStatus::Ok => None,
                    _ => Some(done.error.clone().unwrap_or_else(|| format!("{:?}", done.status))),
                },
                records: done.records.clone(),
            },
            None => OneOffResult { params: p.params, error: Some("not run".into()), records: Vec::new() },
        })
        .collect())
}

/// Every row of `results`, ordered by point (RTT, rate, buffer, queue
/// discipline, TCP, p) then scenario.
pub fn rows(results: &[OneOffResult]) -> Result<Vec<GridRow>, TemplateError> {
    let mut keyed = Vec::new();
    for r in results {
        let key = (
            r.params.duration("rtt")?,
            (r.params.float("rate_mbps")? * 1e6) as u64,
            (r.params.float("queue_bdp")? * 1e9) as u64,
            GRID_AQMS.iter().position(|a| Ok(*a) == r.params.str("aqm")).unwrap_or(GRID_AQMS.len()),
            r.params.str("tcp")?.to_string(),
            (r.params.float("n")? * 1e9) as u64,
            r.params.str("scenario")? != "versus",
        );
        keyed.push((key, rows_of(r)?));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(keyed.into_iter().flat_map(|(_, rows)| rows).collect())
}

/// `10ms` (a grid RTT: positive, at most 10 s).
pub fn parse_rtt(text: &str) -> Result<Duration, String> {
    parse_duration(text.trim())
        .filter(|d| !d.is_zero() && *d <= Duration::from_secs(10))
        .ok_or_else(|| format!("invalid RTT `{text}`: expected a duration from 1ms to 10s, e.g. 10ms or 0.2s"))
}

/// `5mbit` (a grid rate: from 100 kbit/s to 10 Gbit/s).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    text.trim()
        .parse::<Rate>()
        .ok()
        .filter(|r| (100_000..=10_000_000_000).contains(&r.bits_per_sec()))
        .ok_or_else(|| format!("invalid rate `{text}`: expected a rate from 100kbit to 10gbit, e.g. 5mbit or 1gbit"))
}

/// `0.25bdp` (a grid buffer, in bandwidth-delay products, in (0, 1000]).
pub fn parse_queue_bdp(text: &str) -> Result<f64, String> {
    let t = text.trim();
    t.strip_suffix("bdp")
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|q| q.is_finite() && *q > 0.0 && *q <= 1000.0)
        .ok_or_else(|| format!("invalid queue `{text}`: expected a buffer in BDPs from above 0 to 1000, e.g. 0.25bdp or 4bdp"))
}

/// `codel` (one of [`GRID_AQMS`]).
pub fn parse_aqm(text: &str) -> Result<String, String> {
    let t = text.trim();
    GRID_AQMS
        .iter()
        .find(|a| **a == t)
        .map(|a| a.to_string())
        .ok_or_else(|| format!("invalid queue discipline `{text}`: expected one of {}", GRID_AQMS.join(", ")))
}

/// `3` (a grid priority, in [0, 100]).
pub fn parse_p(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=100.0).contains(p))
        .ok_or_else(|| format!("invalid priority `{text}`: expected a number from 0 to 100, e.g. 0 or 2"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::priority::Priority;
    use crate::template::builtin::sim_priority::SimPriority;

    #[test]
    fn axes_parse_and_bad_items_name_the_form() {
        assert_eq!(parse_rtt("10ms"), Ok(Duration::from_millis(10)));
        assert!(parse_rtt("0ms").unwrap_err().contains("1ms to 10s"));
        assert_eq!(parse_rate("5mbit").unwrap(), Rate::from_mbit(5));
        assert!(parse_rate("fast").unwrap_err().contains("e.g. 5mbit"));
        assert_eq!(parse_queue_bdp("0.25bdp"), Ok(0.25));
        assert!(parse_queue_bdp("64kb").unwrap_err().contains("BDPs"));
        assert_eq!(parse_aqm("fq_codel").as_deref(), Ok("fq_codel"));
        assert!(parse_aqm("blue").unwrap_err().contains("droptail, codel, pie, red, fq_codel"));
        assert_eq!(parse_p("0"), Ok(0.0));
        assert!(parse_p("-1").is_err());
    }

    #[test]
    fn the_study_has_both_scenarios_at_every_point_on_either_template() {
        let axes = GridAxes {
            rtts: vec![Duration::from_millis(20)],
            rates: vec![Rate::from_mbit(5), Rate::from_mbit(10)],
            queues_bdp: vec![1.0],
            aqms: vec!["droptail".into()],
            tcps: vec!["cubic".into(), "newreno".into()],
            ps: vec![0.0, 2.0],
            ..GridAxes::default()
        };
        for template in [Arc::new(SimPriority) as Arc<dyn Template>, Arc::new(Priority)] {
            let study = axes.study("g", template.clone(), &[("ledbat", Value::Enum("ledbat".into()))], 1).unwrap();
            assert_eq!(study.count(), 2 * axes.points());
            let plan = Plan::new(&study);
            // Seeds are fixed per point: the same study plans the same seeds.
            let again = Plan::new(&axes.study("g", template, &[], 1).unwrap());
            let seeds = |p: &Plan| p.experiments.iter().map(|e| e.seed).collect::<Vec<_>>();
            assert_eq!(seeds(&plan), seeds(&again));
        }
    }

    #[test]
    fn a_short_simulated_grid_gives_rows_for_every_check() {
        let axes = GridAxes {
            rtts: vec![Duration::from_millis(20)],
            rates: vec![Rate::from_mbit(5)],
            queues_bdp: vec![1.0],
            aqms: vec!["droptail".into()],
            tcps: vec!["newreno".into()],
            ps: vec![0.0, 2.0],
            epochs: 1.0,
            max_phase: Duration::from_secs(20),
            jitter_packets: GRID_JITTER_PACKETS,
        };
        let study = axes.study("g", Arc::new(SimPriority), &[], 1).unwrap();
        let results = run_study(&study, 2, None, false).unwrap();
        assert_eq!(results.len(), 4);
        let rows = rows(&results).unwrap();
        let names: Vec<(&str, &str)> = rows.iter().map(|r| (r.scenario.as_str(), r.check.as_str())).collect();
        for want in [
            ("polite", "polite.with_tcp.tcp_over_tcp_alone"),
            ("polite", "polite.alone.ledbat_share"),
            ("multcp_pair_0", "multcp_pair_0.steady.jain"),
            ("multcp_2", "multcp_2.steady.multcp_over_tcp"),
            ("multcp_pair_2", "multcp_pair_2.steady.jain"),
        ] {
            assert!(names.contains(&want), "no {want:?} in {names:?}");
        }
        for r in &rows {
            assert_eq!((r.rtt.as_str(), r.rate.as_str(), r.queue.as_str()), ("20ms", "5mbit", "1bdp"), "{r:?}");
            assert!(r.value.is_some() && r.error.is_none(), "{r:?}");
            assert!(r.epochs.is_some_and(|e| e >= 1.0) && r.capped == Some(false), "{r:?}");
        }
        // Ordered by p: p = 0's rows first.
        assert_eq!(rows[0].p, 0.0);
        assert_eq!(rows.last().unwrap().p, 2.0);
    }
}
