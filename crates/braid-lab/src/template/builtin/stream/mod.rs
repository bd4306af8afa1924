//! The `stream` template: one transfer (bulk data, or a message-rate run)
//! between a sender and a receiver over one peer: Braid, kernel TCP or
//! QUIC (quinn, configured as Braid's twin: [`quic`]). `braid bench stream`
//! is a small study of it: every peer, round after round, the order
//! rotating so slow drift of the machine hits all peers alike
//! ([`summary`] compares them).
//!
//! Without a `link` both ends run in this process on 127.0.0.1; with one
//! the receiver runs in host `b` and the sender in host `a` of an emulator
//! testbed joined by that link (root, `/dev/net/tun`: checked only then).
//!
//! ```
//! use braid_lab::template::builtin::stream::{settings, Peer, Stream};
//! use braid_lab::template::Template;
//! use braid_lab::param::{Params, Value};
//! let mut p = Params::default();
//! for d in Stream.params() {
//!     p.insert(&d.name, d.default.clone());
//! }
//! p.insert("peer", Value::Enum("quinn".into()));
//! p.insert("cc", Value::Enum("bbr".into()));
//! // quinn has no BBR: the experiment is invalid before anything runs.
//! assert!(settings(&p).unwrap_err().to_string().contains("newreno or cubic"));
//! ```

pub mod peers;
mod place;
pub mod quic;
pub mod summary;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use braid::{CcAlgorithm, EndpointConfig, LinkSpec, TransportConfig};
use bytes::Bytes;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, ResultExt, Template, TemplateError};
use peers::{PeerConfigs, Workload};
use place::Ends;
use summary::{BraidCounters, StreamRun};

use peers::RunResult;

/// The artifact holding a run's [`StreamRun`].
pub const REPORT_ARTIFACT: &str = "report";

/// Largest chunk or message.
const MAX_PIECE: u64 = 16 << 20;

/// IPv4 and UDP headers: a datagram of `mtu` payload bytes needs an
/// interface MTU this much larger.
const UDP_OVERHEAD: u32 = 28;

/// The peer a transfer runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// Braid (braid-net).
    Braid,
    /// Kernel TCP.
    Tcp,
    /// QUIC (quinn).
    Quinn,
}

impl Peer {
    /// Every peer, in the order `braid bench stream` reports them.
    pub const ALL: [Peer; 3] = [Peer::Braid, Peer::Tcp, Peer::Quinn];

    /// The parameter value: `braid`, `tcp`, `quinn`.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Braid => "braid",
            Peer::Tcp => "tcp",
            Peer::Quinn => "quinn",
        }
    }
}

impl FromStr for Peer {
    type Err = TemplateError;
    fn from_str(s: &str) -> Result<Peer, TemplateError> {
        Peer::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| TemplateError::Invalid(format!("peer `{s}`: expected braid, tcp or quinn")))
    }
}

/// What a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `bytes` in `chunk`-sized pieces: throughput.
    Bulk,
    /// `messages` messages of `size` bytes: message rate.
    Messages,
}

/// Congestion controllers Braid can run (quinn: newreno and cubic).
const CC_NAMES: [&str; 8] = CcAlgorithm::NAMES;

/// The `stream` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stream;

impl Template for Stream {
    fn name(&self) -> &str {
        "stream"
    }

    fn description(&self) -> &str {
        "one transfer (bulk or message rate) over Braid, kernel TCP or quinn, on loopback or an emulated link"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let default_mtu = TransportConfig::default().max_datagram_size;
        vec![
            ParamDecl::config("peer", ParamType::one_of(&["braid", "tcp", "quinn"]), Value::Enum("braid".into()))
                .doc("the transport measured: braid, tcp (kernel) or quinn (QUIC)"),
            ParamDecl::config("mode", ParamType::one_of(&["bulk", "messages"]), Value::Enum("bulk".into()))
                .doc("bulk (bytes in chunks: Gbit/s) or messages (a message rate: msgs/s)"),
            ParamDecl::config("bytes", ParamType::Size, Value::Size(256 << 20)).doc("bulk: bytes transferred"),
            ParamDecl::config("chunk", ParamType::Size, Value::Size(128 << 10))
                .doc("bulk: application chunk (Braid message, TCP/quinn write), 1 B to 16 MiB"),
            ParamDecl::config("messages", ParamType::int_range(1, i64::MAX), Value::Int(100_000))
                .doc("messages: how many, pipelined (length-prefixed frames on TCP and quinn)"),
            ParamDecl::config("size", ParamType::Size, Value::Size(1024))
                .doc("messages: bytes per message, 1 B to 16 MiB"),
            ParamDecl::config("cc", ParamType::one_of(&CC_NAMES), Value::Enum("cubic".into()))
                .doc("congestion control of Braid and quinn (quinn: newreno or cubic); kernel TCP's is tcp_cc"),
            ParamDecl::config("tcp_cc", ParamType::String, Value::String(String::new())).doc(
                "kernel TCP's congestion control (TCP_CONGESTION: cubic, reno, bbr, ...); empty: the kernel's \
                 default, net.ipv4.tcp_congestion_control (BBR on some machines: name it when comparing)",
            ),
            ParamDecl::config("mtu", ParamType::int_range(1200, 65527), Value::Int(i64::from(default_mtu)))
                .doc("largest UDP payload of Braid and quinn, bytes"),
            ParamDecl::config("encrypted", ParamType::Bool, Value::Bool(true)).doc(
                "braid: authenticated and encrypted (each end a fresh identity pinned to the other's); false: \
                 --insecure-no-auth, the bare protocol",
            ),
            ParamDecl::env("link", ParamType::Link, Value::Link(String::new())).doc(
                "empty: loopback in this process; a spec: the receiver in host b, the sender in host a of an \
                 emulator testbed over that link (needs root)",
            ),
        ]
    }

    fn requirements(&self) -> Requirements {
        // Static per template: the emulator is needed only with a link,
        // checked when the experiment runs.
        Requirements { emulator: false, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let Ok(s) = settings(params) else { return Duration::from_secs(1) };
        let bits = s.workload.total_bytes() as f64 * 8.0;
        let secs = match s.link.as_ref().and_then(LinkSpec::rate) {
            Some(rate) => bits / rate.bits_per_sec() as f64 + 2.0,
            // Loopback: a few Gbit/s.
            None => bits / 2e9 + 0.5,
        };
        Duration::from_secs_f64(secs.min(1e6))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = settings(ctx.params)?;
        if s.link.is_some() {
            braid_emu::check_capabilities().map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        }
        let cfgs = PeerConfigs {
            tcp_cc: match ctx.params.str("tcp_cc")?.trim() {
                "" => None,
                name => Some(name.to_string()),
            },
            braid: s.endpoint.clone(),
            braid_security: match (s.peer, s.encrypted) {
                (Peer::Braid, true) => Some(braid_net::pinned_pair().map_err(|e| TemplateError::Failed(e.to_string()))?),
                _ => None,
            },
            quic: match s.peer {
                Peer::Quinn => Some(quic::configs(&s.endpoint.transport)?),
                _ => None,
            },
        };
        ctx.check_deadline("starting the transfer")?;
        let testbed = match &s.link {
            Some(link) => Some(ctx.testbed().link(link.clone()).build().context("building the testbed")?),
            None => None,
        };
        let outcome = transfer(ctx, &s, &cfgs, testbed.as_ref());
        if let Some(tb) = testbed {
            if let Err(e) = tb.down() {
                ctx.warn(&format!("tearing the testbed down: {e}"));
            }
        }
        let result = outcome?;
        report(ctx, &s, &result);
        Ok(())
    }
}

/// One experiment's settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The peer.
    pub peer: Peer,
    /// Bulk or messages.
    pub mode: Mode,
    /// What is sent.
    pub workload: Arc<Workload>,
    /// Braid's endpoint configuration (quinn's derives from it).
    pub endpoint: EndpointConfig,
    /// The emulated link, or `None` for loopback.
    pub link: Option<LinkSpec>,
    /// Braid authenticates and encrypts.
    pub encrypted: bool,
}

/// The settings the parameters describe (every parameter of [`Stream`]
/// present), or why they make no sense together.
pub fn settings(params: &Params) -> Result<Settings, TemplateError> {
    let peer: Peer = params.str("peer")?.parse()?;
    let cc: CcAlgorithm = params.str("cc")?.parse().map_err(|e| TemplateError::Invalid(format!("cc: {e}")))?;
    if peer == Peer::Quinn {
        quic::check_cc(cc)?;
    }
    let mtu = params.int("mtu")?;
    let mtu = u16::try_from(mtu).map_err(|_| TemplateError::Invalid(format!("mtu {mtu}: expected 1200..=65527")))?;
    let mut endpoint = EndpointConfig::default();
    endpoint.transport.congestion_control = cc;
    endpoint.transport.max_datagram_size = mtu;
    endpoint.transport.validate().map_err(|e| TemplateError::Invalid(format!("mtu {mtu}: {e}")))?;
    let piece = |name: &str| -> Result<usize, TemplateError> {
        let v = params.size(name)?;
        match usize::try_from(v) {
            Ok(n) if (1..=MAX_PIECE).contains(&v) => Ok(n),
            _ => Err(TemplateError::Invalid(format!("{name} {v}: expected 1 byte to 16 MiB"))),
        }
    };
    let (mode, workload) = match params.str("mode")? {
        "bulk" => {
            let chunk = piece("chunk")?;
            (Mode::Bulk, Workload::Bulk { bytes: params.size("bytes")?, chunk, payload: random_payload(chunk) })
        }
        "messages" => {
            let size = piece("size")?;
            let count = params.int("messages")?;
            let count = u64::try_from(count)
                .ok()
                .filter(|&c| c >= 1 && c.checked_mul(size as u64).is_some())
                .ok_or_else(|| TemplateError::Invalid(format!("messages {count}: expected at least 1")))?;
            (Mode::Messages, Workload::Messages { count, payload: random_payload(size) })
        }
        other => return Err(TemplateError::Invalid(format!("mode `{other}`: expected bulk or messages"))),
    };
    let link = match params.str("link")? {
        "" => None,
        _ => Some(params.link("link")?),
    };
    if let Some(link) = &link {
        let iface = braid_emu::iface_mtu(link);
        if u32::from(mtu) + UDP_OVERHEAD > iface {
            return Err(TemplateError::Invalid(format!(
                "mtu {mtu}: datagrams of {mtu} bytes do not fit the link's {iface}-byte MTU \
                 (at most {} here)",
                iface - UDP_OVERHEAD
            )));
        }
    }
    let encrypted = params.bool("encrypted")?;
    Ok(Settings { peer, mode, workload: Arc::new(workload), endpoint, link, encrypted })
}

/// Incompressible payload, the same for every peer and experiment (a
/// fixed seed: runs that differ only in the peer send identical bytes).
fn random_payload(len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(7).fill_bytes(&mut v);
    Bytes::from(v)
}

/// Run the transfer before the deadline, reporting progress as the
/// receiver's byte count grows.
fn transfer(
    ctx: &Context<'_>,
    s: &Settings,
    cfgs: &PeerConfigs,
    testbed: Option<&braid_emu::Testbed>,
) -> Result<RunResult, TemplateError> {
    let ends = match testbed {
        Some(tb) => Ends::testbed(tb)?,
        None => Ends::loopback(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| TemplateError::io("starting the async runtime", e))?;
    let received = Arc::new(AtomicU64::new(0));
    let total = s.workload.total_bytes().max(1) as f64;
    let limit = ctx.remaining();
    let outcome = rt.block_on(async {
        let run = peers::run(s.peer, s.workload.clone(), cfgs, &ends, received.clone());
        tokio::pin!(run);
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                r = &mut run => break r,
                _ = tick.tick() => ctx.progress(received.load(Ordering::Relaxed) as f64 / total),
                _ = &mut deadline => break Err(TemplateError::Timeout(format!(
                    "{} transfer not finished after {:.1} s", s.peer.name(), limit.as_secs_f64()
                ))),
            }
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    ctx.progress(1.0);
    outcome
}

/// The run's scalars and its [`StreamRun`] artifact.
fn report(ctx: &mut Context<'_>, s: &Settings, r: &RunResult) {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let bytes = s.workload.total_bytes();
    let gbps = bytes as f64 * 8.0 / secs / 1e9;
    ctx.record("elapsed_secs", secs);
    ctx.record("gbps", gbps);
    let (chunk, messages, size, msgs_per_s) = match s.workload.as_ref() {
        Workload::Bulk { chunk, .. } => (Some(*chunk as u64), None, None, None),
        Workload::Messages { count, payload } => {
            let rate = *count as f64 / secs;
            ctx.record("msgs_per_s", rate);
            (None, Some(*count), Some(payload.len() as u64), Some(rate))
        }
    };
    let braid = r.braid_stats.map(|st| BraidCounters {
        packets_lost: st.packets_lost,
        retransmitted_bytes: st.retransmitted_bytes,
        smoothed_rtt_ms: st.smoothed_rtt.as_secs_f64() * 1e3,
        min_rtt_ms: st.min_rtt.as_secs_f64() * 1e3,
    });
    if let Some(mtu) = r.quinn_mtu {
        ctx.record("quinn_mtu", f64::from(mtu));
    }
    if let Some(b) = braid {
        ctx.record("packets_lost", b.packets_lost as f64);
        ctx.record("retransmitted_bytes", b.retransmitted_bytes as f64);
        ctx.record("smoothed_rtt_ms", b.smoothed_rtt_ms);
        ctx.record("min_rtt_ms", b.min_rtt_ms);
    }
    let run = StreamRun {
        peer: s.peer,
        mode: s.mode,
        bytes,
        chunk,
        messages,
        size,
        cc: s.endpoint.transport.congestion_control.as_str().to_string(),
        mtu: s.endpoint.transport.max_datagram_size,
        link: s.link.as_ref().map(ToString::to_string),
        elapsed_secs: secs,
        gbps,
        msgs_per_s,
        braid,
        encrypted: s.peer == Peer::Braid && s.encrypted,
        quinn_mtu: r.quinn_mtu,
    };
    match serde_json::to_value(&run) {
        Ok(json) => ctx.artifact(REPORT_ARTIFACT, json),
        Err(e) => ctx.warn(&format!("the run's report did not serialize: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneoff::{run_experiments, OneOffOptions};

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&Stream)
    }

    #[test]
    fn declarations_have_todays_defaults_and_valid_names() {
        // Every default is a value of its own type, but the link's: empty
        // stands for loopback.
        crate::template::builtin::test_support::assert_declarations_valid(&Stream, &["link"]);
        let decls = Stream.params();
        let p = defaults();
        assert_eq!(p.size("bytes").unwrap(), 256 << 20);
        assert_eq!(p.size("chunk").unwrap(), 128 << 10);
        assert_eq!(p.size("size").unwrap(), 1024);
        assert_eq!(p.str("cc").unwrap(), "cubic");
        assert_eq!(p.int("mtu").unwrap(), 1452);
        assert_eq!(p.str("link").unwrap(), "");
        let s = settings(&p).unwrap();
        assert_eq!((s.peer, s.mode, s.link.is_none()), (Peer::Braid, Mode::Bulk, true));
        assert_eq!(Stream.requirements(), Requirements { emulator: false, exclusive: true });
        let link = decls.iter().find(|d| d.name == "link").unwrap();
        assert_eq!(link.role, crate::param::Role::Environment);
    }

    #[test]
    fn bad_combinations_are_invalid() {
        let with = |k: &str, v: Value| {
            let mut p = defaults();
            p.insert(k, v);
            settings(&p)
        };
        let invalid = |r: Result<Settings, TemplateError>, want: &str| match r {
            Err(TemplateError::Invalid(m)) => assert!(m.contains(want), "{m}"),
            other => panic!("expected Invalid({want}), got {other:?}"),
        };
        invalid(with("chunk", Value::Size(0)), "chunk 0");
        invalid(with("chunk", Value::Size(32 << 20)), "16 MiB");
        let mut p = defaults();
        p.insert("mode", Value::Enum("messages".into()));
        p.insert("size", Value::Size(0));
        invalid(settings(&p), "size 0");
        // 9000-byte datagrams do not fit a 1500-byte link.
        let mut p = defaults();
        p.insert("mtu", Value::Int(9000));
        p.insert("link", Value::Link("rtt=10ms".into()));
        invalid(settings(&p), "at most 1472");
        let mut p = defaults();
        p.insert("peer", Value::Enum("quinn".into()));
        p.insert("cc", Value::Enum("ledbat".into()));
        invalid(settings(&p), "quinn has no `ledbat`");
        p.insert("peer", Value::Enum("braid".into()));
        assert!(settings(&p).is_ok(), "Braid runs LEDBAT");
    }

    #[test]
    fn expected_duration_follows_the_link_rate() {
        let mut p = defaults();
        p.insert("bytes", Value::Size(12_500_000));
        p.insert("link", Value::Link("rtt=10ms,rate=10mbit".into()));
        let d = Stream.expected_duration(&p).as_secs_f64();
        assert!((11.0..13.0).contains(&d), "{d}");
    }

    /// Every peer over loopback through the one-off runner: the scalars
    /// agree with the artifact, and the bytes that arrived are the bytes
    /// asked for.
    #[test]
    fn loopback_runs_record_what_the_artifact_says() {
        let stream: Arc<dyn Template> = Arc::new(Stream);
        let experiments = [("braid", "bulk"), ("tcp", "messages"), ("quinn", "bulk")]
            .into_iter()
            .map(|(peer, mode)| {
                vec![
                    ("peer".to_string(), Value::Enum(peer.into())),
                    ("mode".to_string(), Value::Enum(mode.into())),
                    ("bytes".to_string(), Value::Size(1 << 20)),
                    ("messages".to_string(), Value::Int(500)),
                ]
            })
            .collect();
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_secs(60)) };
        let runs = run_experiments(stream, experiments, &options).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?}", r.error);
            let a: StreamRun = serde_json::from_value(r.artifact(REPORT_ARTIFACT).unwrap().clone()).unwrap();
            assert_eq!(r.metric("elapsed_secs"), Some(a.elapsed_secs));
            assert_eq!(r.metric("gbps"), Some(a.gbps));
            assert!(a.elapsed_secs > 0.0);
            assert!((a.gbps - a.bytes as f64 * 8.0 / a.elapsed_secs / 1e9).abs() < 1e-9);
            match a.peer {
                Peer::Braid => {
                    assert_eq!(a.bytes, 1 << 20);
                    let b = a.braid.expect("braid counters");
                    assert_eq!(r.metric("packets_lost"), Some(b.packets_lost as f64));
                    assert!(b.smoothed_rtt_ms > 0.0);
                }
                Peer::Tcp => {
                    assert_eq!((a.mode, a.messages, a.bytes), (Mode::Messages, Some(500), 500 * 1024));
                    assert_eq!(r.metric("msgs_per_s"), a.msgs_per_s);
                    assert!(a.braid.is_none() && r.metric("packets_lost").is_none());
                }
                Peer::Quinn => assert_eq!(a.chunk, Some(128 << 10)),
            }
        }
    }

    /// An `mtu` larger than a QUIC Initial may be (its Length field is
    /// below 2^14) used to panic quinn: it now starts at the largest
    /// Initial. Each peer gets every byte.
    #[test]
    fn large_datagrams_run_on_every_peer() {
        let stream: Arc<dyn Template> = Arc::new(Stream);
        let experiments = ["braid", "quinn"]
            .into_iter()
            .map(|peer| {
                vec![
                    ("peer".to_string(), Value::Enum(peer.into())),
                    ("bytes".to_string(), Value::Size(32 << 20)),
                    ("mtu".to_string(), Value::Int(65_000)),
                ]
            })
            .collect();
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_secs(60)) };
        let runs = run_experiments(stream, experiments, &options).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?}", r.error);
        }
        // quinn's path MTU at the end, whatever it is (its peer's default
        // max_udp_payload_size keeps it at 1472 bytes), is on record.
        let quinn_mtu = runs[1].metric("quinn_mtu").expect("quinn's path MTU");
        assert!((1200.0..=65_000.0).contains(&quinn_mtu), "quinn at {quinn_mtu} bytes");
        assert!(runs[0].metric("quinn_mtu").is_none());
    }

    /// With a link, every peer runs between the hosts of a testbed and
    /// gets the link's rate, not loopback's (needs root: skipped without).
    #[test]
    fn an_emulated_link_limits_every_peer() {
        if let Err(e) = braid_emu::check_capabilities() {
            eprintln!("skipped (needs the emulator): {e}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("stream-emu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for peer in Peer::ALL {
            let mut p = defaults();
            p.insert("peer", Value::Enum(peer.name().into()));
            p.insert("bytes", Value::Size(2 << 20));
            p.insert("link", Value::Link("rtt=10ms,rate=50mbit".into()));
            let mut rec = crate::record::Recorder::in_memory();
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            // Tags of their own: other tests' testbeds never share names.
            let mut ctx = Context::new(&p, 1, deadline, &mut rec, &dir, &format!("s{}", peer.name()));
            Stream.run(&mut ctx).unwrap_or_else(|e| panic!("{}: {e}", peer.name()));
            let gbps = rec.take().iter().find_map(|r| match r {
                crate::record::Record::Metric { name, value } if name == "gbps" => Some(*value),
                _ => None,
            });
            let gbps = gbps.expect("gbps recorded");
            // 50 Mbit/s less headers, slow start and the handshake: well
            // below the rate, far below loopback's gigabits.
            assert!((0.015..0.05).contains(&gbps), "{}: {gbps} Gbit/s over a 50 Mbit/s link", peer.name());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_deadline_too_short_is_a_timeout() {
        let stream: Arc<dyn Template> = Arc::new(Stream);
        let experiments = vec![vec![
            ("peer".to_string(), Value::Enum("tcp".into())),
            ("bytes".to_string(), Value::Size(64 << 30)),
        ]];
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_millis(300)) };
        let runs = run_experiments(stream, experiments, &options).unwrap();
        let err = runs[0].error.as_deref().unwrap_or("");
        assert!(err.contains("tcp transfer not finished"), "{err}");
    }
}
