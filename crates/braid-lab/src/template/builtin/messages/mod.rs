//! The `messages` template: small-message rate and request/response
//! latency of one transport on loopback (issue 23, "small messages at
//! kernel speed"). `braid bench messages` is a small study of it: every
//! transport at each size, kernel TCP and quinn in the same run, ratios
//! against TCP.
//!
//! Transports: Exon (`braid-exon-net`), Braid's reliable transport (one
//! connection, whole messages), the Node over TCP, Braid and Exon
//! (`node-tcp`, `node-braid`, `node-exon`: the Node's batch API, one
//! header and one buffer per run of messages), kernel TCP (length-prefixed frames,
//! `TCP_NODELAY`) and quinn (one bidirectional stream, framed). See
//! [`wire`] for how each is driven and [`run`] for the two measurements.
//! With `notify`, the Node runs send every batch with one delivery
//! notification and wait for them, a bounded number outstanding (what an
//! application that needs confirmations pays); the scalar `notified` counts
//! the batches confirmed.
//!
//! Every message is checked at the receiver: each identifier delivered
//! once (Exon: exactly once, with every accepted message's outcome
//! reported delivered), none lost, in sending order where the transport
//! promises order (all but Exon and the Node over Exon), whole.
//!
//! ```
//! use braid_lab::template::builtin::messages::{settings, Messages, Transport};
//! use braid_lab::template::Template;
//! use braid_lab::param::{Params, Value};
//! let mut p = Params::default();
//! for d in Messages.params() {
//!     p.insert(&d.name, d.default.clone());
//! }
//! assert_eq!(settings(&p).unwrap().transport, Transport::Tcp);
//! p.insert("size", Value::Size(4));
//! assert!(settings(&p).unwrap_err().to_string().contains("size"));
//! ```

pub mod check;
pub mod run;
pub mod wire;

use std::time::Duration;

use braid::node::Transport as NodeTransport;
use serde::{Deserialize, Serialize};

use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};
use check::Verdict;
use run::RunCfg;
use wire::Setup;

/// The artifact holding a run's [`MessagesRun`].
pub const REPORT_ARTIFACT: &str = "report";

/// Smallest message: its 8-byte identifier.
pub const MIN_SIZE: u64 = 8;

/// Largest message (1 MiB: this template is about small messages; every
/// transport here carries that in one message).
pub const MAX_SIZE: u64 = 1 << 20;

/// Largest `outstanding`.
pub const MAX_OUTSTANDING: i64 = 4096;

/// A measured transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Transport {
    /// Exon exactly-once messaging.
    #[serde(rename = "exon")]
    Exon,
    /// Braid's reliable transport, one connection.
    #[serde(rename = "braid")]
    Braid,
    /// The Node, every message over TCP.
    #[serde(rename = "node-tcp")]
    NodeTcp,
    /// The Node, every message over Braid.
    #[serde(rename = "node-braid")]
    NodeBraid,
    /// The Node, every message over Exon.
    #[serde(rename = "node-exon")]
    NodeExon,
    /// Kernel TCP, length-prefixed frames.
    #[serde(rename = "tcp")]
    Tcp,
    /// quinn, one bidirectional stream, length-prefixed frames.
    #[serde(rename = "quinn")]
    Quinn,
}

impl Transport {
    /// Every transport, in the order the bench lists them.
    pub const ALL: [Transport; 7] = [
        Transport::Exon,
        Transport::Braid,
        Transport::NodeTcp,
        Transport::NodeBraid,
        Transport::NodeExon,
        Transport::Tcp,
        Transport::Quinn,
    ];

    /// The name (the parameter value).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Exon => "exon",
            Transport::Braid => "braid",
            Transport::NodeTcp => "node-tcp",
            Transport::NodeBraid => "node-braid",
            Transport::NodeExon => "node-exon",
            Transport::Tcp => "tcp",
            Transport::Quinn => "quinn",
        }
    }

    /// Every name.
    pub fn names() -> Vec<&'static str> {
        Transport::ALL.iter().map(|t| t.name()).collect()
    }

    /// The transport the Node sends over (`None`: not a Node transport).
    pub fn node_transport(self) -> Option<NodeTransport> {
        match self {
            Transport::NodeTcp => Some(NodeTransport::Tcp),
            Transport::NodeBraid => Some(NodeTransport::Braid),
            Transport::NodeExon => Some(NodeTransport::Exon),
            _ => None,
        }
    }

    /// The bare transport a Node transport runs over (itself otherwise):
    /// what the Node is compared with.
    pub fn bare(self) -> Transport {
        match self {
            Transport::NodeTcp => Transport::Tcp,
            Transport::NodeBraid => Transport::Braid,
            Transport::NodeExon => Transport::Exon,
            t => t,
        }
    }

    /// Whether it delivers in sending order (Exon promises exactly once,
    /// not order).
    pub fn ordered(self) -> bool {
        !matches!(self, Transport::Exon | Transport::NodeExon)
    }

    /// Whether it is authenticated and encrypted when `encrypted` is asked
    /// (quinn always is: QUIC has no plaintext mode; kernel TCP never).
    pub fn encrypted(self, encrypted: bool) -> bool {
        match self {
            Transport::Quinn => true,
            Transport::Tcp => false,
            _ => encrypted,
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Transport, String> {
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown transport `{s}`: expected one of {}", Transport::names().join(", ")))
    }
}

/// The measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// One-way messages as fast as flow control allows: messages/s.
    Oneway,
    /// Request/response with `outstanding` requests in flight: latency.
    Rpc,
}

/// The `messages` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Messages;

impl Template for Messages {
    fn name(&self) -> &str {
        "messages"
    }

    fn description(&self) -> &str {
        "small-message rate (one-way) or request/response latency of one transport on loopback, every message checked"
    }

    fn params(&self) -> Vec<ParamDecl> {
        vec![
            ParamDecl::config("transport", ParamType::one_of(&Transport::names()), Value::Enum("tcp".into()))
                .doc("exon, braid, node-tcp, node-braid, node-exon, tcp (kernel, framed, TCP_NODELAY) or quinn (one stream, framed)"),
            ParamDecl::config("pattern", ParamType::one_of(&["oneway", "rpc"]), Value::Enum("oneway".into()))
                .doc("oneway: messages/s, flow-controlled by the transport; rpc: request/response latency"),
            ParamDecl::config("size", ParamType::Size, Value::Size(64)).doc("message (request, reply) size, 8 B to 1 MiB"),
            ParamDecl::config("outstanding", ParamType::int_range(1, MAX_OUTSTANDING), Value::Int(1))
                .doc("rpc: requests in flight (a reply lets the next one go)"),
            ParamDecl::config("time_limit", ParamType::Duration, Value::Duration(Duration::from_secs(3)))
                .doc("how long the client sends (then at most as long again, at least 5 s, for the rest to arrive)"),
            ParamDecl::config("messages", ParamType::int_range(1, i64::MAX), Value::Int(100_000_000))
                .doc("messages (requests) per run at most"),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "exon, braid and the node authenticated and encrypted (false: --insecure-no-auth); quinn always is, kernel TCP never",
            ),
            ParamDecl::config("tcp_cc", ParamType::String, Value::String(String::new()))
                .doc("kernel TCP's congestion control (a kernel algorithm name; empty: the system default)"),
            ParamDecl::config("notify", ParamType::Bool, Value::Bool(false)).doc(
                "node runs: ask for a delivery notification per batch and wait for them, bounded, as an application that needs confirmations does",
            ),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: false, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        settings(params).map_or(Duration::from_secs(10), |s| s.cfg.limit + Duration::from_secs(2))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = settings(ctx.params)?;
        let mut setup = Setup::new(s.transport, s.size, s.encrypted, s.tcp_cc.clone())?;
        setup.notify = s.notify;
        ctx.progress(0.0);
        let what = format!("{} {} of {} B", s.transport.name(), s.pattern_name(), s.size);
        let report = match s.pattern {
            Pattern::Oneway => {
                let r = run::oneway(&setup, s.cfg).with_context(|| what.clone())?;
                MessagesRun::oneway(&s, &r)
            }
            Pattern::Rpc => {
                let r = run::rpc(&setup, s.cfg).with_context(|| what.clone())?;
                MessagesRun::rpc(&s, &r)
            }
        };
        ctx.progress(1.0);
        report.record(ctx);
        if !report.ok {
            ctx.warn(&format!("{what}: end-to-end checks failed: {:?} {:?}", report.verdict, report.replies));
        }
        match serde_json::to_value(&report) {
            Ok(json) => ctx.artifact(REPORT_ARTIFACT, json),
            Err(e) => ctx.warn(&format!("the run's report did not serialize: {e}")),
        }
        Ok(())
    }
}

/// One experiment's settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The measured transport.
    pub transport: Transport,
    /// One-way or request/response.
    pub pattern: Pattern,
    /// Message size, bytes.
    pub size: usize,
    /// Authenticated and encrypted where the transport can be either.
    pub encrypted: bool,
    /// Kernel TCP's congestion control (`None`: the system default).
    pub tcp_cc: Option<String>,
    /// Node runs: one delivery notification per batch, awaited.
    pub notify: bool,
    /// The run's limits.
    pub cfg: RunCfg,
}

impl Settings {
    fn pattern_name(&self) -> &'static str {
        match self.pattern {
            Pattern::Oneway => "one-way",
            Pattern::Rpc => "request/response",
        }
    }
}

/// The settings the parameters describe (every parameter of [`Messages`]
/// present), or which one is out of range and what it may be.
pub fn settings(params: &Params) -> Result<Settings, TemplateError> {
    let invalid = |m: String| TemplateError::Invalid(m);
    let transport: Transport = params.str("transport")?.parse().map_err(|e| invalid(format!("transport: {e}")))?;
    let pattern = match params.str("pattern")? {
        "oneway" => Pattern::Oneway,
        "rpc" => Pattern::Rpc,
        other => return Err(invalid(format!("pattern `{other}`: expected oneway or rpc"))),
    };
    let size = params.size("size")?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
        return Err(invalid(format!("size {size}: expected 8 B to 1 MiB (e.g. 64, 1KiB)")));
    }
    let outstanding = params.int("outstanding")?;
    if !(1..=MAX_OUTSTANDING).contains(&outstanding) {
        return Err(invalid(format!("outstanding {outstanding}: expected 1 to {MAX_OUTSTANDING}")));
    }
    let limit = params.duration("time_limit")?;
    if limit.is_zero() || limit > Duration::from_secs(3600) {
        return Err(invalid(format!("time_limit {limit:?}: expected more than 0 s and at most 1 h, e.g. 3s")));
    }
    let cap = u64::try_from(params.int("messages")?).ok().filter(|&m| m >= 1);
    let cap = cap.ok_or_else(|| invalid("messages: expected at least 1".into()))?;
    let tcp_cc = match params.str("tcp_cc")?.trim() {
        "" => None,
        cc if cc.len() < 16 && cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => Some(cc.to_string()),
        cc => return Err(invalid(format!("tcp_cc `{cc}`: expected a kernel algorithm name such as cubic, reno or bbr"))),
    };
    Ok(Settings {
        transport,
        pattern,
        size: size as usize,
        encrypted: params.bool("encrypted")?,
        tcp_cc,
        notify: params.bool("notify")?,
        cfg: RunCfg { limit, cap, drain: limit.max(Duration::from_secs(5)), outstanding: outstanding as usize },
    })
}

/// What one run found: the artifact, and the source of its scalars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesRun {
    /// The measured transport.
    pub transport: Transport,
    /// One-way or request/response.
    pub pattern: Pattern,
    /// Message size, bytes.
    pub size: u64,
    /// Requests in flight (request/response).
    pub outstanding: Option<u64>,
    /// Whether this transport ran authenticated and encrypted.
    pub encrypted: bool,
    /// Kernel TCP's congestion control on the connection (tcp).
    pub tcp_cc: Option<String>,
    /// Sending time limit, seconds.
    pub time_limit_s: f64,
    /// Messages (requests) sent.
    pub sent: u64,
    /// One-way: distinct messages delivered per second; request/response:
    /// requests answered per second.
    pub msgs_per_s: f64,
    /// The measurement window, seconds.
    pub window_s: f64,
    /// Request/response latency quantiles, microseconds.
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// The receiver's check (request/response: of the requests).
    pub verdict: Verdict,
    /// Request/response: the client's check of the replies.
    pub replies: Option<Verdict>,
    /// Exon: accepted messages reported in doubt (exactly-once: zero on
    /// loopback).
    pub exon_in_doubt: Option<u64>,
    /// Exon: accepted messages whose outcome never came within the drain.
    pub exon_unsettled: Option<u64>,
    /// Whether the Node sent with a delivery notification per batch.
    #[serde(default)]
    pub notify: bool,
    /// Node runs with notifications: batches the sender saw confirmed
    /// delivered (every batch it sent, when the run is ok).
    #[serde(default)]
    pub notified: Option<u64>,
    /// Every check passed.
    pub ok: bool,
}

impl MessagesRun {
    fn base(s: &Settings) -> MessagesRun {
        MessagesRun {
            transport: s.transport,
            pattern: s.pattern,
            size: s.size as u64,
            outstanding: (s.pattern == Pattern::Rpc).then_some(s.cfg.outstanding as u64),
            encrypted: s.transport.encrypted(s.encrypted),
            tcp_cc: None,
            time_limit_s: s.cfg.limit.as_secs_f64(),
            sent: 0,
            msgs_per_s: 0.0,
            window_s: 0.0,
            p50_us: None,
            p99_us: None,
            verdict: Verdict::default(),
            replies: None,
            exon_in_doubt: None,
            exon_unsettled: None,
            notify: s.notify && s.transport.node_transport().is_some(),
            notified: None,
            ok: false,
        }
    }

    /// The report of a one-way run.
    pub fn oneway(s: &Settings, r: &run::OnewayResult) -> MessagesRun {
        let (in_doubt, unsettled) = match r.exon {
            Some(o) => (Some(o.in_doubt), Some(o.accepted.saturating_sub(o.delivered + o.in_doubt))),
            None => (None, None),
        };
        let exon_ok = in_doubt.unwrap_or(0) == 0 && unsettled.unwrap_or(0) == 0;
        MessagesRun {
            tcp_cc: r.tcp_cc.clone(),
            sent: r.sent,
            msgs_per_s: r.rate(),
            window_s: r.window.as_secs_f64(),
            verdict: r.verdict.clone(),
            exon_in_doubt: in_doubt,
            exon_unsettled: unsettled,
            notified: r.notified,
            ok: r.verdict.ok() && r.sent > 0 && exon_ok,
            ..MessagesRun::base(s)
        }
    }

    /// The report of a request/response run.
    pub fn rpc(s: &Settings, r: &run::RpcResult) -> MessagesRun {
        MessagesRun {
            sent: r.sent,
            msgs_per_s: r.rate(),
            window_s: r.window.as_secs_f64(),
            p50_us: r.latency_us(0.5),
            p99_us: r.latency_us(0.99),
            verdict: r.requests.clone(),
            replies: Some(r.replies.clone()),
            notified: r.notified,
            ok: r.requests.ok() && r.replies.ok() && r.sent > 0,
            ..MessagesRun::base(s)
        }
    }

    fn record(&self, ctx: &mut Context<'_>) {
        ctx.record("msgs_per_s", self.msgs_per_s);
        ctx.record("sent", self.sent as f64);
        ctx.record("delivered", self.verdict.delivered as f64);
        ctx.record("lost", self.verdict.lost as f64);
        ctx.record("duplicated", self.verdict.duplicated as f64);
        ctx.record("reordered", self.verdict.reordered as f64);
        ctx.record("corrupt", self.verdict.corrupt as f64);
        if let Some(v) = self.p50_us {
            ctx.record("p50_us", v);
        }
        if let Some(v) = self.p99_us {
            ctx.record("p99_us", v);
        }
        if let Some(v) = self.exon_in_doubt {
            ctx.record("exon_in_doubt", v as f64);
        }
        if let Some(v) = self.notified {
            ctx.record("notified", v as f64);
        }
        ctx.record("ok", f64::from(u8::from(self.ok)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneoff::{run_experiments, OneOffOptions};
    use crate::template::builtin::test_support::{assert_declarations_valid, assert_each_refused, defaults};
    use std::sync::Arc;

    #[test]
    fn declarations_and_nonsense() {
        assert_declarations_valid(&Messages, &[]);
        let s = settings(&defaults(&Messages)).unwrap();
        assert_eq!((s.transport, s.pattern, s.size, s.cfg.outstanding), (Transport::Tcp, Pattern::Oneway, 64, 1));
        assert_each_refused(
            &Messages,
            [
                ("size", Value::Size(7), "8 B to 1 MiB"),
                ("size", Value::Size(MAX_SIZE + 1), "8 B to 1 MiB"),
                ("time_limit", Value::Duration(Duration::ZERO), "time_limit"),
                ("tcp_cc", Value::String("cu bic".into()), "kernel algorithm name"),
                ("transport", Value::Enum("zmq".into()), "node-exon"),
            ],
            settings,
        );
    }

    #[test]
    fn transport_names_round_trip() {
        for t in Transport::ALL {
            assert_eq!(t.name().parse::<Transport>(), Ok(t));
            assert_eq!(serde_json::to_value(t).unwrap(), serde_json::json!(t.name()));
            assert_eq!(t.bare().node_transport(), None);
        }
        assert!("udp".parse::<Transport>().unwrap_err().contains("exon, braid, node-tcp"));
    }

    /// Every transport, one-way and request/response, through the one-off
    /// runner on loopback: every message checked, rates and latencies
    /// present, the scalars what the artifact says.
    #[test]
    fn every_transport_delivers_every_message() {
        let template: Arc<dyn Template> = Arc::new(Messages);
        let mut experiments = Vec::new();
        for t in Transport::ALL {
            for (pattern, outstanding) in [("oneway", 1), ("rpc", 8)] {
                experiments.push(vec![
                    ("transport".to_string(), Value::Enum(t.name().into())),
                    ("pattern".to_string(), Value::Enum(pattern.into())),
                    ("outstanding".to_string(), Value::Int(outstanding)),
                    ("size".to_string(), Value::Size(100)),
                    ("messages".to_string(), Value::Int(3000)),
                    ("time_limit".to_string(), Value::Duration(Duration::from_secs(5))),
                ]);
            }
        }
        let runs = run_experiments(template, experiments, &OneOffOptions { seed: 1, timeout: None }).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?} {:?}", r.params, r.error);
            let a: MessagesRun = serde_json::from_value(r.artifact(REPORT_ARTIFACT).unwrap().clone()).unwrap();
            assert!(a.ok, "{a:?}");
            assert_eq!((a.sent, a.verdict.delivered, a.verdict.lost), (3000, 3000, 0), "{a:?}");
            assert!(a.msgs_per_s > 0.0);
            assert_eq!(r.metric("msgs_per_s"), Some(a.msgs_per_s));
            assert_eq!(r.metric("ok"), Some(1.0));
            assert_eq!(a.encrypted, a.transport != Transport::Tcp, "encrypted by default: {a:?}");
            match a.pattern {
                Pattern::Oneway => assert_eq!(a.p50_us, None),
                Pattern::Rpc => {
                    assert_eq!(a.outstanding, Some(8));
                    assert!(a.p50_us.unwrap() > 0.0 && a.p50_us <= a.p99_us, "{a:?}");
                    assert_eq!(a.replies.as_ref().map(|v| v.delivered), Some(3000));
                }
            }
            if a.transport == Transport::Tcp && a.pattern == Pattern::Oneway {
                assert!(a.tcp_cc.as_deref().is_some_and(|cc| !cc.is_empty()), "{a:?}");
            }
        }
    }

    /// `notify`: the Node transports send a notification per batch and
    /// wait for them; the run proves they arrived (`notified`: every batch
    /// of the one-way sender, 3000 messages of 100 B in batches of 655;
    /// the requests' batches in request/response). Other transports
    /// ignore it.
    #[test]
    fn node_runs_with_notify_count_the_batches_confirmed() {
        let template: Arc<dyn Template> = Arc::new(Messages);
        let mut experiments = Vec::new();
        for t in [Transport::NodeTcp, Transport::NodeBraid, Transport::NodeExon, Transport::Tcp] {
            for (pattern, outstanding) in [("oneway", 1), ("rpc", 8)] {
                experiments.push(vec![
                    ("transport".to_string(), Value::Enum(t.name().into())),
                    ("pattern".to_string(), Value::Enum(pattern.into())),
                    ("outstanding".to_string(), Value::Int(outstanding)),
                    ("size".to_string(), Value::Size(100)),
                    ("messages".to_string(), Value::Int(3000)),
                    ("time_limit".to_string(), Value::Duration(Duration::from_secs(5))),
                    ("notify".to_string(), Value::Bool(true)),
                ]);
            }
        }
        let runs = run_experiments(template, experiments, &OneOffOptions { seed: 1, timeout: None }).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?} {:?}", r.params, r.error);
            let a: MessagesRun = serde_json::from_value(r.artifact(REPORT_ARTIFACT).unwrap().clone()).unwrap();
            assert!(a.ok, "{a:?}");
            assert_eq!((a.sent, a.verdict.delivered), (3000, 3000), "{a:?}");
            let node = a.transport.node_transport().is_some();
            assert_eq!(a.notify, node, "{a:?}");
            match (node, a.pattern) {
                (false, _) => assert_eq!((a.notified, r.metric("notified")), (None, None), "{a:?}"),
                (true, Pattern::Oneway) => assert_eq!(a.notified, Some(3000u64.div_ceil(655)), "{a:?}"),
                // At least one batch per 8 requests in flight, at most one per request.
                (true, Pattern::Rpc) => assert!(a.notified.is_some_and(|n| (375..=3000).contains(&n)), "{a:?}"),
            }
            if node {
                assert_eq!(r.metric("notified"), a.notified.map(|n| n as f64));
            }
        }
    }
}
