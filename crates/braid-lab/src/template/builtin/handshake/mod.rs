//! The `handshake` template: connections established per second, and the
//! time each takes, over one peer on loopback (issue 17, "Performance":
//! handshake cost reported against quinn's). `braid bench handshake` is a
//! small study of it: every peer, round after round, the order rotating so
//! slow drift of the machine hits all peers alike ([`summary`] compares
//! them).
//!
//! Peers ([`Peer`]): Braid (braid-net, Noise IK, the default), Braid with
//! `--insecure-no-auth` (the bare protocol, a reference), quinn (QUIC over
//! rustls TLS 1.3, configured as Braid's twin by
//! [`stream::quic`](super::stream::quic)), `tls` (braid-tls: mutual TLS 1.3
//! over kernel TCP, the Node's TCP transport) and plain kernel TCP (the
//! floor).
//!
//! A round ([`peers`]): the client connects; once the handshake is done it
//! sends one byte and waits for the server's one-byte answer, so every
//! peer's handshake is finished on both ends (the server accepted the
//! connection and the client can send); then the client closes. The round's
//! latency is connect to answer; the rate counts whole rounds, closes
//! included. `concurrency` clients run rounds at once ([`load`]) for `secs`
//! (or `limit` rounds); afterwards both ends must hold no connection state
//! (handlers ended, endpoints' connection counts back to 0), or the run
//! fails: a server that leaks state per connection is not measured kindly.
//!
//! ```
//! use braid_lab::template::builtin::handshake::{settings, Handshake, Peer};
//! use braid_lab::template::Template;
//! use braid_lab::param::{Params, Value};
//! let mut p = Params::default();
//! for d in Handshake.params() {
//!     p.insert(&d.name, d.default.clone());
//! }
//! assert_eq!(settings(&p).unwrap().peer, Peer::Braid);
//! p.insert("concurrency", Value::Int(0));
//! assert!(settings(&p).unwrap_err().to_string().contains("concurrency"));
//! ```

mod load;
mod over_braid;
mod over_quinn;
mod over_tcp;
mod over_tls;
mod peers;
pub mod summary;

use std::str::FromStr;
use std::time::Duration;

use braid::{EndpointConfig, TransportConfig};
use serde::{Deserialize, Serialize};

use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Requirements, Template, TemplateError};
use summary::HandshakeRun;

/// The artifact holding a run's [`HandshakeRun`].
pub const REPORT_ARTIFACT: &str = "report";

/// Most connections in flight at once.
pub const MAX_CONCURRENCY: i64 = 4096;

/// Longest measurement, seconds.
const MAX_SECS: f64 = 86_400.0;

/// How long both ends may take, after the last round, to forget every
/// connection: Braid and quinn keep a closed connection for a closing
/// period of a few probe timeouts (RFC 9000 §10.2), milliseconds on
/// loopback; seconds of it means state that is never released.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The peer a run connects over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// Braid (braid-net), authenticated and encrypted: Noise IK, each end a
    /// fresh identity pinned to the other's.
    Braid,
    /// Braid without authentication or encryption (`--insecure-no-auth`).
    BraidInsecure,
    /// QUIC (quinn), TLS 1.3 with a self-signed server certificate.
    Quinn,
    /// braid-tls over kernel TCP: TLS 1.3, both ends' Ed25519 keys pinned.
    Tls,
    /// Plain kernel TCP.
    Tcp,
}

impl Peer {
    /// Every peer, in the order `braid bench handshake` reports them.
    pub const ALL: [Peer; 5] = [Peer::Braid, Peer::BraidInsecure, Peer::Quinn, Peer::Tls, Peer::Tcp];

    /// The parameter value.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Braid => "braid",
            Peer::BraidInsecure => "braid-insecure",
            Peer::Quinn => "quinn",
            Peer::Tls => "tls",
            Peer::Tcp => "tcp",
        }
    }

    /// Whether the peer's connections are authenticated and encrypted.
    pub fn encrypted(self) -> bool {
        matches!(self, Peer::Braid | Peer::Quinn | Peer::Tls)
    }
}

impl FromStr for Peer {
    type Err = TemplateError;
    fn from_str(s: &str) -> Result<Peer, TemplateError> {
        Peer::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            TemplateError::Invalid(format!("peer `{s}`: expected braid, braid-insecure, quinn, tls or tcp"))
        })
    }
}

/// The `handshake` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handshake;

impl Template for Handshake {
    fn name(&self) -> &str {
        "handshake"
    }

    fn description(&self) -> &str {
        "connections established per second (connect, 1 byte each way, close) over Braid, quinn, TLS or TCP on loopback"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
        let default_mtu = TransportConfig::default().max_datagram_size;
        vec![
            ParamDecl::config("peer", ParamType::one_of(&names), Value::Enum("braid".into())).doc(
                "braid (Noise IK), braid-insecure (--insecure-no-auth), quinn (TLS 1.3), tls (braid-tls over kernel \
                 TCP) or tcp (plain)",
            ),
            ParamDecl::config("secs", ParamType::float_range(0.01, MAX_SECS), Value::Float(2.0))
                .doc("seconds during which new connections are started"),
            ParamDecl::config("concurrency", ParamType::int_range(1, MAX_CONCURRENCY), Value::Int(1))
                .doc("connections in flight at once (clients each running one round after another)"),
            ParamDecl::config("limit", ParamType::int_range(1, i64::MAX), Value::Int(10_000_000))
                .doc("most connections per run, a bound besides secs"),
            ParamDecl::config("mtu", ParamType::int_range(1200, 65527), Value::Int(i64::from(default_mtu)))
                .doc("largest UDP payload of Braid and quinn, bytes"),
        ]
    }

    fn requirements(&self) -> Requirements {
        Requirements { emulator: false, exclusive: true }
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        match settings(params) {
            Ok(s) => s.secs + Duration::from_millis(500),
            Err(_) => Duration::from_secs(1),
        }
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let s = settings(ctx.params)?;
        ctx.check_deadline("starting the handshakes")?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| TemplateError::io("starting the async runtime", e))?;
        let limit = ctx.remaining();
        let ctx_ref = &*ctx;
        let progress = |f| ctx_ref.progress(f);
        let outcome = rt.block_on(async {
            let run = peers::measure(&s, &progress);
            match tokio::time::timeout(limit, run).await {
                Ok(r) => r,
                Err(_) => Err(TemplateError::Timeout(format!(
                    "{} handshakes not finished after {:.1} s",
                    s.peer.name(),
                    limit.as_secs_f64()
                ))),
            }
        });
        rt.shutdown_timeout(Duration::from_secs(1));
        ctx.progress(1.0);
        let run = outcome?;
        report(ctx, &run);
        Ok(())
    }
}

/// One experiment's settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The peer.
    pub peer: Peer,
    /// How long new connections are started.
    pub secs: Duration,
    /// Connections in flight at once.
    pub concurrency: usize,
    /// Most connections in the run.
    pub limit: u64,
    /// Braid's endpoint configuration (quinn's transport derives from it).
    pub endpoint: EndpointConfig,
}

/// The settings the parameters describe (every parameter of [`Handshake`]
/// present), or why they make no sense.
pub fn settings(params: &Params) -> Result<Settings, TemplateError> {
    let peer: Peer = params.str("peer")?.parse()?;
    let secs = params.float("secs")?;
    if !(secs.is_finite() && (0.01..=MAX_SECS).contains(&secs)) {
        return Err(TemplateError::Invalid(format!("secs {secs}: expected 0.01 to {MAX_SECS} seconds")));
    }
    let concurrency = params.int("concurrency")?;
    let concurrency = usize::try_from(concurrency)
        .ok()
        .filter(|&c| (1..=MAX_CONCURRENCY as usize).contains(&c))
        .ok_or_else(|| TemplateError::Invalid(format!("concurrency {concurrency}: expected 1 to {MAX_CONCURRENCY}")))?;
    let limit = params.int("limit")?;
    let limit = u64::try_from(limit)
        .ok()
        .filter(|&l| l >= 1)
        .ok_or_else(|| TemplateError::Invalid(format!("limit {limit}: expected at least 1 connection")))?;
    let mtu = params.int("mtu")?;
    let mtu = u16::try_from(mtu).map_err(|_| TemplateError::Invalid(format!("mtu {mtu}: expected 1200..=65527")))?;
    let mut endpoint = EndpointConfig::default();
    endpoint.transport.max_datagram_size = mtu;
    endpoint.transport.validate().map_err(|e| TemplateError::Invalid(format!("mtu {mtu}: {e}")))?;
    Ok(Settings { peer, secs: Duration::from_secs_f64(secs), concurrency, limit, endpoint })
}

/// The run's scalars and its [`HandshakeRun`] artifact.
fn report(ctx: &mut Context<'_>, run: &HandshakeRun) {
    ctx.record("connections", run.connections as f64);
    ctx.record("per_sec", run.per_sec);
    ctx.record("p50_us", run.p50_us);
    ctx.record("p99_us", run.p99_us);
    ctx.record("drain_ms", run.drain_ms);
    match serde_json::to_value(run) {
        Ok(json) => ctx.artifact(REPORT_ARTIFACT, json),
        Err(e) => ctx.warn(&format!("the run's report did not serialize: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::oneoff::{run_experiments, OneOffOptions};

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&Handshake)
    }

    #[test]
    fn declarations_have_todays_defaults() {
        crate::template::builtin::test_support::assert_declarations_valid(&Handshake, &[]);
        let s = settings(&defaults()).unwrap();
        assert_eq!((s.peer, s.secs, s.concurrency, s.limit), (Peer::Braid, Duration::from_secs(2), 1, 10_000_000));
        assert_eq!(s.endpoint.transport.max_datagram_size, 1452);
        assert_eq!(Handshake.requirements(), Requirements { emulator: false, exclusive: true });
        assert_eq!(Handshake.expected_duration(&defaults()), Duration::from_millis(2500));
        for peer in Peer::ALL {
            assert_eq!(peer.name().parse::<Peer>().unwrap(), peer);
            assert_eq!(serde_json::to_value(peer).unwrap(), peer.name());
        }
    }

    #[test]
    fn bad_values_name_the_parameter() {
        crate::template::builtin::test_support::assert_each_refused(
            &Handshake,
            [
                ("concurrency", Value::Int(0), "concurrency 0"),
                ("concurrency", Value::Int(MAX_CONCURRENCY + 1), "expected 1 to 4096"),
                ("secs", Value::Float(0.0), "secs 0"),
                ("secs", Value::Float(f64::NAN), "secs NaN"),
                ("limit", Value::Int(0), "limit 0"),
                ("mtu", Value::Int(70_000), "mtu 70000"),
                ("peer", Value::Enum("sctp".into()), "braid, braid-insecure, quinn, tls or tcp"),
            ],
            settings,
        );
    }

    /// Every peer through the one-off runner, briefly: connections were
    /// made, the scalars agree with the artifact, and the latencies are
    /// ordered. (The run itself fails if either end kept any state.)
    #[test]
    fn every_peer_makes_connections_and_reports_them() {
        let template: Arc<dyn Template> = Arc::new(Handshake);
        let experiments = Peer::ALL
            .into_iter()
            .map(|peer| {
                vec![
                    ("peer".to_string(), Value::Enum(peer.name().into())),
                    ("secs".to_string(), Value::Float(0.2)),
                    ("concurrency".to_string(), Value::Int(4)),
                ]
            })
            .collect();
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_secs(60)) };
        let runs = run_experiments(template, experiments, &options).unwrap();
        for r in &runs {
            assert!(r.ok(), "{:?}", r.error);
            let a: HandshakeRun = serde_json::from_value(r.artifact(REPORT_ARTIFACT).unwrap().clone()).unwrap();
            assert!(a.connections > 0, "{a:?}");
            assert_eq!(r.metric("connections"), Some(a.connections as f64));
            assert_eq!(r.metric("per_sec"), Some(a.per_sec));
            assert!((a.per_sec - a.connections as f64 / a.elapsed_secs).abs() < 1e-6 * a.per_sec.max(1.0), "{a:?}");
            assert!(a.p50_us > 0.0 && a.p50_us <= a.p99_us, "{a:?}");
            assert_eq!(a.encrypted, a.peer.encrypted(), "{a:?}");
            assert_eq!(a.cipher.is_some(), a.encrypted, "{a:?}");
            assert_eq!(a.concurrency, 4);
        }
    }

    #[test]
    fn the_limit_bounds_the_count() {
        let template: Arc<dyn Template> = Arc::new(Handshake);
        let experiments = vec![vec![
            ("peer".to_string(), Value::Enum("tcp".into())),
            ("secs".to_string(), Value::Float(30.0)),
            ("concurrency".to_string(), Value::Int(3)),
            ("limit".to_string(), Value::Int(10)),
        ]];
        let options = OneOffOptions { seed: 1, timeout: Some(Duration::from_secs(60)) };
        let runs = run_experiments(template, experiments, &options).unwrap();
        assert!(runs[0].ok(), "{:?}", runs[0].error);
        assert_eq!(runs[0].metric("connections"), Some(10.0));
    }
}
