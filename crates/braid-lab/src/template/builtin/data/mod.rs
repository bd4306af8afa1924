//! The `data` template: DATA (the learned TCP/Braid mix of seed 000 §IV)
//! against TCP only and Braid only over one emulated link, and the paper's
//! Fig. 8, the latency of small control messages while a bulk transfer
//! runs. `braid bench data` runs one experiment per RTT and repetition.
//!
//! One experiment builds a two-host testbed (`rtt`, `rate`, and `queue`,
//! by default the link's 1 BDP) and on it:
//!
//! 1. Goodput: `bytes` of bulk data in `message_size` messages from a node
//!    on host `a` to a node on host `b`, over TCP, over Braid and through
//!    the DATA interceptor (learner or a fixed ratio, pattern selection),
//!    each timed from its first message to the receiver's last byte;
//!    `data_over_best_ratio` = DATA's goodput over the better of the other
//!    two, all three measured in this experiment, one after the other.
//! 2. Control latency (Fig. 8; skipped with `control_secs = 0s`): a ping
//!    over TCP, answered by a pong over TCP, one at a time, for
//!    `control_secs`, while bulk data flows over nothing (the baseline),
//!    TCP (the same TCP channel as the pings), Braid or DATA; p50 and p99
//!    of the round trips after a warm-up (the artifact adds p10, p25, p75,
//!    p90 and the mean, which tell a standing queue from occasional
//!    losses). With data over TCP the pings wait behind the TCP channel's
//!    queue (the node's channel queue, and `NodeConfig::tcp_notsent_lowat`
//!    in the kernel); with DATA they do not, since DATA's stream has TCP
//!    and Braid channels of its own. A ping never beats the path's RTT,
//!    nor the bottleneck queue the bulk flow keeps full, so at long RTTs
//!    `p50 / tcp-tcp p50` is bounded below by those, whatever carries the
//!    data.
//!
//! The floor argument. A ping's round trip is at least the no-bulk p50
//! (`control_p50_ms.none`: the path's RTT plus the hosts' processing).
//! What bulk data adds on top has three sources: (a) queues in the sending
//! node and kernel the ping shares with the data (the TCP channel's queue
//! and unsent bytes, and TCP's in-order delivery behind a lost data
//! segment), (b) the bottleneck queue the bulk flow's congestion control
//! keeps, and (c) CPU contention on the hosts. TCP/TCP pays all three;
//! with DATA, whose stream has channels of its own (the node's bulk lane),
//! (a) is gone and only (b) and (c) remain, as for TCP/Braid; and (b) is
//! small, since DATA's Braid connections run BBR (`NodeConfig::
//! bulk_congestion_control`, `data_bulk_cc`), where Braid alone runs
//! Braid's default, CUBIC, which fills the queue as TCP does. So the
//! literal goal, DATA's p50 ≤ 1/10 of TCP/TCP's p50, cannot hold once the
//! RTT is more than 1/10 of TCP/TCP's p50 (150 and 320 ms: TCP/TCP's p50 is
//! the RTT plus a few hundred ms): the comparable measure is the added
//! latency, `control_added_p50_ms` = DATA's p50 − the floor, and
//! `control_added_ratio` = that over TCP/TCP's added p50 (goal ≤ 0.1). At
//! long RTTs a run of `control_secs` holds few pings (one per RTT plus
//! 10 ms), so p50 and above all p99 are noisy there.
//!
//! Buffers: see [`buffers`]. The experiment's seed seeds the DATA
//! learner's exploration.
//!
//! Records: `goodput_mbps.{tcp,braid,data}`, `data_over_best_ratio`,
//! `data_mix_ratio` (DATA's final signed ratio, −1 all TCP … 1 all Braid),
//! `control_p50_ms.{none,tcp,braid,data}`, `control_p99_ms.*`,
//! `control_added_p50_ms`, `control_added_ratio`; series
//! `throughput_mbps.{tcp,braid,data}` (received, every 100 ms),
//! `control_rtt_ms.*` (each ping), `data_episode_ratio` and
//! `data_episode_delivered_mbps` (the learner's path); the artifact
//! `report` ([`report::DataRun`]).

pub mod buffers;
pub mod hosts;
pub mod report;

use std::time::{Duration, Instant};

use braid::node::data::{DataConfig, PolicyConfig, Ratio};
use braid::node::{NodeAuth, NodeConfig, Transport};
use braid::{CcAlgorithm, LinkSpec};

use self::hosts::{ControlResult, DataVia, RunSettings};
use self::report::{BulkReport, ControlReport, DataRun, LearnerReport};
use crate::param::{format_duration, ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};

/// The template (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Data;

/// Congestion controls DATA's Braid connections can run.
pub const BULK_CCS: [&str; 7] = ["newreno", "cubic", "ledbat", "ledbat++", "multcp", "priority", "bbr"];

/// The DATA learner's default episode length.
fn default_episode() -> Duration {
    match DataConfig::default().policy {
        PolicyConfig::Learner(l) => l.episode,
        PolicyConfig::Static(_) => Duration::from_secs(1),
    }
}

impl Template for Data {
    fn name(&self) -> &str {
        "data"
    }

    fn description(&self) -> &str {
        "DATA (learned TCP/Braid mix) vs TCP only and Braid only over one emulated link: goodput, and control-message latency under each bulk (Fig. 8)"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let bulk_cc = NodeConfig::default().bulk_congestion_control.unwrap_or(CcAlgorithm::Bbr);
        vec![
            ParamDecl::env("rtt", ParamType::Duration, Value::Duration(Duration::ZERO))
                .doc("round-trip time of the emulated link (the bench sweeps 0, 3, 150 and 320 ms)"),
            ParamDecl::env("rate", ParamType::String, Value::String("1gbit".into()))
                .doc("bottleneck rate, as in a link spec (1gbit, 500mbit)"),
            ParamDecl::env("queue", ParamType::Size, Value::Size(0)).doc("bottleneck queue in bytes; 0: the link's default, 1 BDP"),
            ParamDecl::config("bytes", ParamType::Size, Value::Size(400 << 20)).doc("bulk bytes per transfer"),
            ParamDecl::config("message_size", ParamType::Size, Value::Size(64 << 10)).doc("bytes per bulk message (1 B to 16 MiB)"),
            ParamDecl::config("control_secs", ParamType::Duration, Value::Duration(Duration::from_secs(10)))
                .doc("length of each control-latency run (0s skips them, else 2s to 600s)"),
            ParamDecl::config("transfer_timeout", ParamType::Duration, Value::Duration(Duration::from_secs(180)))
                .doc("give a transfer up after this long"),
            ParamDecl::config("data_policy", ParamType::one_of(&["learner", "static"]), Value::Enum("learner".into()))
                .doc("how DATA sets its TCP/Braid ratio: the learner, or data_ratio fixed"),
            ParamDecl::config("data_ratio", ParamType::float_range(-1.0, 1.0), Value::Float(0.0))
                .doc("DATA's fixed ratio with data_policy = static (-1 all TCP … 1 all Braid)"),
            ParamDecl::config("data_episode", ParamType::Duration, Value::Duration(default_episode()))
                .doc("length of the learner's episodes (10ms to 60s)"),
            ParamDecl::config("data_window", ParamType::int_range(1, 4096), Value::Int(DataConfig::default().flow.window as i64))
                .doc("DATA's release window, in messages"),
            ParamDecl::config("data_bulk_cc", ParamType::one_of(&BULK_CCS), Value::Enum(bulk_cc.as_str().into()))
                .doc("congestion control of DATA's Braid connections (the node's bulk lane)"),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "both nodes authenticated and encrypted (TLS on TCP, Noise on Braid; each a fresh identity pinned \
                 to the other's); false: the bare protocols (--insecure-no-auth)",
            ),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: true, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(s) = Settings::from_params(params) else { return Duration::from_secs(30) };
        let bps = s.link().ok().and_then(|l| l.rate()).map(|r| r.bits_per_sec()).unwrap_or(1_000_000_000).max(1);
        let transfer = Duration::from_secs_f64(s.bytes as f64 * 8.0 / bps as f64) + s.rtt * 10 + Duration::from_secs(2);
        let control = if s.control.is_zero() { Duration::ZERO } else { (s.control + Duration::from_secs(2)) * 4 };
        transfer * 3 + control + Duration::from_secs(3)
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = Settings::from_params(ctx.params)?;
        braid::emu::check_capabilities().map_err(|e| TemplateError::Unavailable(format!("the data template runs over the emulator: {e}")))?;
        let link = s.link()?;
        let bdp = bdp(&link);
        let _rmem = buffers::raise_global("/proc/sys/net/core/rmem_max", buffers::GLOBAL_BUFFER_MAX)?;
        let _wmem = buffers::raise_global("/proc/sys/net/core/wmem_max", buffers::GLOBAL_BUFFER_MAX)?;
        let tb = ctx.testbed().link(link).build().context("building the testbed (needs root, /dev/net/tun and iproute2)")?;
        buffers::tune_tcp(&tb, buffers::tcp_buffer_max(bdp))?;
        let settings = s.run_settings(ctx.seed, bdp)?;
        let start = Instant::now();
        let phases = 3 + if s.control.is_zero() { 0 } else { 4 };
        let mut run = DataRun {
            rtt_ms: s.rtt.as_secs_f64() * 1e3,
            rate: s.rate.clone(),
            queue_bytes: s.queue,
            bytes: s.bytes,
            message_size: s.message_size,
            control_secs: s.control.as_secs_f64(),
            bulk: Vec::new(),
            control: Vec::new(),
        };
        for (i, via) in DataVia::BULK.into_iter().enumerate() {
            ctx.check_deadline(&format!("before the {} transfer", via.name()))?;
            let mut limited = settings.clone();
            limited.limit = settings.limit.min(ctx.remaining());
            let series = format!("throughput_mbps.{}", via.name());
            let mut last = (Instant::now(), 0u64);
            let bytes = s.bytes;
            let res = hosts::bulk(&tb, via, s.bytes, &limited, &mut |received| {
                let now = Instant::now();
                let dt = now.duration_since(last.0).as_secs_f64();
                if received > last.1 && dt > 0.0 {
                    ctx.series(&series, now.duration_since(start).as_secs_f64(), (received - last.1) as f64 * 8.0 / dt / 1e6);
                }
                last = (now, received);
                ctx.progress((i as f64 + received as f64 / bytes as f64) / phases as f64);
            })
            .with_context(|| format!("the {} transfer", via.name()))?;
            if !res.complete {
                ctx.warn(&format!("the {} transfer delivered {} of {} bytes", via.name(), res.bytes_received, s.bytes));
            }
            if let Some(d) = &res.data {
                record_learner(ctx, d, res.started.saturating_duration_since(start));
            }
            run.bulk.push(BulkReport {
                via,
                secs: res.secs,
                bytes_sent: res.bytes_sent,
                bytes_received: res.bytes_received,
                messages_received: res.messages_received,
                complete: res.complete,
                data: res.data.as_ref().map(LearnerReport::from_stats),
            });
        }
        if !s.control.is_zero() {
            let d = s.control;
            // Skip the connection set-up and the first round trips.
            let warmup = (d / 5).max(s.rtt * 4).min(d / 2);
            for (i, via) in DataVia::CONTROL.into_iter().enumerate() {
                ctx.check_deadline(&format!("before the control run with bulk over {}", via.name()))?;
                ctx.progress((3 + i) as f64 / phases as f64);
                let c = hosts::control(&tb, via, d, warmup, &settings)
                    .with_context(|| format!("the control run with bulk over {}", via.name()))?;
                run.control.push(record_control(ctx, via, &c, d, start));
            }
        }
        drop(tb);
        record_run(ctx, &run);
        let json = serde_json::to_value(&run).context("serializing the report")?;
        ctx.artifact("report", json);
        ctx.progress(1.0);
        Ok(())
    }
}

/// Bandwidth-delay product of `link` in bytes.
fn bdp(link: &LinkSpec) -> u64 {
    let bps = link.rate().map(|r| r.bits_per_sec()).unwrap_or(0);
    (bps as f64 / 8.0 * link.rtt().as_secs_f64()) as u64
}

/// The learner's path as series, `offset` after the experiment's start.
fn record_learner(ctx: &mut Context<'_>, d: &braid::node::data::DataStats, offset: Duration) {
    let mut t = offset.as_secs_f64();
    for e in &d.episodes {
        t += e.secs;
        ctx.series("data_episode_ratio", t, e.ratio);
        ctx.series("data_episode_delivered_mbps", t, e.delivered_bps * 8e-6);
    }
}

/// One control run's pings as a series; its summary.
fn record_control(ctx: &mut Context<'_>, via: DataVia, c: &ControlResult, secs: Duration, start: Instant) -> ControlReport {
    let series = format!("control_rtt_ms.{}", via.name());
    for p in &c.samples {
        ctx.series(&series, p.sent_at.saturating_duration_since(start).as_secs_f64(), p.rtt.as_secs_f64() * 1e3);
    }
    if c.samples.is_empty() {
        ctx.warn(&format!("no ping was answered with bulk data over {}", via.name()));
    }
    ControlReport::new(via, &c.rtts(), c.bulk_bytes, secs.as_secs_f64(), c.data.as_ref().map(|d| d.ratio))
}

/// The experiment's scalars.
fn record_run(ctx: &mut Context<'_>, run: &DataRun) {
    for b in &run.bulk {
        ctx.record(&format!("goodput_mbps.{}", b.via.name()), b.mbps());
    }
    ctx.record("data_over_best_ratio", run.data_over_best());
    if let Some(d) = run.bulk.iter().rev().find_map(|b| b.data.as_ref()) {
        ctx.record("data_mix_ratio", d.ratio);
    }
    for c in &run.control {
        if let (Some(p50), Some(p99)) = (c.figures.p50_ms, c.figures.p99_ms) {
            ctx.record(&format!("control_p50_ms.{}", c.via.name()), p50);
            ctx.record(&format!("control_p99_ms.{}", c.via.name()), p99);
        }
    }
    if let Some(added) = run.added_p50(DataVia::Data) {
        ctx.record("control_added_p50_ms", added);
    }
    if let Some(r) = run.added_ratio() {
        ctx.record("control_added_ratio", r);
    }
}

/// How DATA sets its ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Learner,
    Static(f64),
}

/// One experiment's parameters, checked.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    rtt: Duration,
    rate: String,
    queue: u64,
    bytes: u64,
    message_size: u64,
    control: Duration,
    transfer_timeout: Duration,
    policy: Policy,
    episode: Duration,
    window: u32,
    bulk_cc: CcAlgorithm,
    encrypted: bool,
}

fn invalid(why: String) -> TemplateError {
    TemplateError::Invalid(why)
}

impl Settings {
    fn from_params(p: &Params) -> Result<Settings, TemplateError> {
        let rtt = p.duration("rtt")?;
        check_rtt(rtt)?;
        let rate = p.str("rate")?.trim().to_string();
        format!("rate={rate}")
            .parse::<LinkSpec>()
            .map_err(|e| invalid(format!("rate `{rate}`: {e} (expected e.g. 1gbit, 500mbit)")))?;
        let bytes = p.size("bytes")?;
        if bytes == 0 {
            return Err(invalid("bytes: expected a positive size, e.g. 400MiB".into()));
        }
        let message_size = p.size("message_size")?;
        if !(1..=(16 << 20)).contains(&message_size) {
            return Err(invalid(format!("message_size {message_size}: expected 1 byte to 16MiB")));
        }
        let control = p.duration("control_secs")?;
        if !(control.is_zero() || (Duration::from_secs(2)..=Duration::from_secs(600)).contains(&control)) {
            return Err(invalid(format!("control_secs {}: expected 0s (skip) or 2s to 600s", format_duration(control))));
        }
        let transfer_timeout = p.duration("transfer_timeout")?;
        if transfer_timeout.is_zero() {
            return Err(invalid("transfer_timeout: expected a positive duration, e.g. 180s".into()));
        }
        let policy = match p.str("data_policy")? {
            "learner" => Policy::Learner,
            "static" => Policy::Static(p.float("data_ratio")?),
            other => return Err(invalid(format!("data_policy `{other}`: expected learner or static"))),
        };
        if let Policy::Static(r) = policy {
            if !(-1.0..=1.0).contains(&r) {
                return Err(invalid(format!("data_ratio {r}: expected -1 (all TCP) to 1 (all Braid)")));
            }
        }
        let episode = p.duration("data_episode")?;
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&episode) {
            return Err(invalid(format!("data_episode {}: expected 10ms to 60s", format_duration(episode))));
        }
        let window = u32::try_from(p.int("data_window")?)
            .ok()
            .filter(|w| (1..=4096).contains(w))
            .ok_or_else(|| invalid("data_window: expected 1 to 4096 messages".into()))?;
        let cc_name = p.str("data_bulk_cc")?;
        let bulk_cc: CcAlgorithm = cc_name.parse().map_err(|e| invalid(format!("data_bulk_cc: {e}")))?;
        Ok(Settings {
            rtt,
            rate,
            queue: p.size("queue")?,
            bytes,
            message_size,
            control,
            transfer_timeout,
            policy,
            episode,
            window,
            bulk_cc,
            encrypted: p.bool("encrypted")?,
        })
    }

    /// The emulated link.
    fn link(&self) -> Result<LinkSpec, TemplateError> {
        let mut spec = format!("rtt={},rate={}", format_duration(self.rtt), self.rate);
        if self.queue > 0 {
            spec.push_str(&format!(",queue={}b", self.queue));
        }
        spec.parse().map_err(|e| invalid(format!("link `{spec}`: {e}")))
    }

    /// Node and DATA settings for a path of `bdp` bytes.
    fn run_settings(&self, seed: u64, bdp: u64) -> Result<RunSettings, TemplateError> {
        let (receiver_auth, sender_auth) = if self.encrypted {
            NodeAuth::pinned_pair().map_err(|e| TemplateError::Failed(e.to_string()))?
        } else {
            (NodeAuth::insecure(), NodeAuth::insecure())
        };
        let window = buffers::braid_window(bdp);
        let mut node = NodeConfig { transports: vec![Transport::Tcp, Transport::Braid], ..Default::default() };
        node.braid.transport.receive_window = window;
        node.braid.transport.send_buffer = window;
        node.bulk_congestion_control = Some(self.bulk_cc);
        let mut data = DataConfig::default();
        match self.policy {
            Policy::Learner => {
                if let PolicyConfig::Learner(l) = &mut data.policy {
                    l.seed = seed;
                    l.episode = self.episode;
                }
            }
            Policy::Static(r) => data.policy = PolicyConfig::Static(Ratio::from_signed(r, 20)),
        }
        data.flow.window = self.window as usize;
        Ok(RunSettings {
            node,
            receiver_auth,
            sender_auth,
            data,
            message_size: self.message_size as usize,
            limit: self.transfer_timeout,
        })
    }
}

/// The longest RTT the template takes (the bench's `--rtts` limit).
pub const MAX_RTT: Duration = Duration::from_secs(10);

fn check_rtt(rtt: Duration) -> Result<(), TemplateError> {
    if rtt > MAX_RTT {
        return Err(invalid(format!("rtt {}: expected 0 to 10s", format_duration(rtt))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneoff::OneOffOptions;
    use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, run_on_emulator};
    use std::sync::Arc;

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&Data)
    }

    #[test]
    fn declarations_are_valid_and_defaults_are_todays_flags() {
        assert_declarations_valid(&Data, &[]);
        let decls = Data.params();
        let s = Settings::from_params(&defaults()).unwrap();
        assert_eq!(s.bytes, 400 << 20);
        assert_eq!(s.message_size, 64 << 10);
        assert_eq!(s.control, Duration::from_secs(10));
        assert_eq!(s.transfer_timeout, Duration::from_secs(180));
        assert_eq!(s.policy, Policy::Learner);
        assert_eq!(s.bulk_cc, CcAlgorithm::Bbr);
        assert_eq!(s.link().unwrap().to_string(), "rtt=0ms,rate=1gbit");
        assert_eq!(Data.requirements(), Requirements { emulator: true, exclusive: true });
        let env: Vec<&str> = decls.iter().filter(|d| d.role == crate::param::Role::Environment).map(|d| d.name.as_str()).collect();
        assert_eq!(env, ["rtt", "rate", "queue"]);
    }

    #[test]
    fn settings_reach_the_node_and_the_interceptor() {
        let mut p = defaults();
        p.insert("rtt", Value::Duration(Duration::from_millis(320)));
        p.insert("queue", Value::Size(1 << 20));
        p.insert("data_policy", Value::Enum("static".into()));
        p.insert("data_ratio", Value::Float(-0.5));
        p.insert("data_window", Value::Int(32));
        p.insert("data_bulk_cc", Value::Enum("cubic".into()));
        let s = Settings::from_params(&p).unwrap();
        let link = s.link().unwrap();
        assert_eq!(link.rtt(), Duration::from_millis(320));
        // 1 Gbit/s × 320 ms.
        assert_eq!(bdp(&link), 40_000_000);
        let rs = s.run_settings(9, bdp(&link)).unwrap();
        assert_eq!(rs.node.braid.transport.receive_window, 120_000_000);
        assert_eq!(rs.node.bulk_congestion_control, Some(CcAlgorithm::Cubic));
        assert_eq!(rs.data.flow.window, 32);
        assert_eq!(rs.data.policy, PolicyConfig::Static(Ratio::from_signed(-0.5, 20)));
        let learner = Settings::from_params(&defaults()).unwrap().run_settings(9, 0).unwrap();
        match learner.data.policy {
            PolicyConfig::Learner(l) => assert_eq!(l.seed, 9, "the experiment's seed seeds the learner"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_values_are_refused_with_the_allowed_form() {
        let cases: [(&str, Value, &str); 6] = [
            ("rate", Value::String("fast".into()), "1gbit"),
            ("bytes", Value::Size(0), "positive"),
            ("message_size", Value::Size(32 << 20), "16MiB"),
            ("control_secs", Value::Duration(Duration::from_secs(1)), "2s to 600s"),
            ("data_episode", Value::Duration(Duration::from_millis(1)), "10ms to 60s"),
            ("rtt", Value::Duration(Duration::from_secs(11)), "0 to 10s"),
        ];
        assert_each_refused(&Data, cases, Settings::from_params);
    }

    #[test]
    fn expected_duration_grows_with_the_bytes_and_the_control_runs() {
        let short = Data.expected_duration(&defaults());
        let mut p = defaults();
        p.insert("control_secs", Value::Duration(Duration::ZERO));
        assert!(Data.expected_duration(&p) < short);
        p.insert("bytes", Value::Size(4 << 30));
        assert!(Data.expected_duration(&p) > Duration::from_secs(90));
    }

    /// Over the emulator (root): one short experiment's scalars agree with
    /// its artifact.
    #[test]
    fn a_short_experiment_records_scalars_that_match_its_report() {
        let Some(runs) = run_on_emulator(
            Arc::new(Data),
            vec![vec![
                ("rtt".into(), Value::Duration(Duration::from_millis(10))),
                ("rate".into(), Value::String("200mbit".into())),
                ("bytes".into(), Value::Size(4 << 20)),
                ("control_secs".into(), Value::Duration(Duration::from_secs(2))),
            ]],
            &OneOffOptions { seed: 3, timeout: Some(Duration::from_secs(120)) },
        ) else {
            return;
        };
        let r = &runs[0];
        assert!(r.ok(), "{:?}", r.error);
        let run: DataRun = serde_json::from_value(r.artifact("report").unwrap().clone()).unwrap();
        assert!(run.complete(), "{run:?}");
        for via in DataVia::BULK {
            assert_eq!(r.metric(&format!("goodput_mbps.{}", via.name())), run.goodput(via), "{via:?}");
        }
        assert_eq!(r.metric("data_over_best_ratio"), Some(run.data_over_best()));
        assert_eq!(r.metric("control_p50_ms.none"), run.p50(DataVia::None));
        assert_eq!(run.control.len(), 4);
        assert!(!r.series("control_rtt_ms.tcp").is_empty());
        assert!(!r.series("throughput_mbps.data").is_empty());
    }
}
