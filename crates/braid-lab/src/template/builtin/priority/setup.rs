//! What the two priority templates (`priority` over the emulator,
//! `sim-priority` in the simulator) share in turning parameters into a
//! scenario run: the path overrides (`rtt`, `rate_mbps`, `queue`,
//! `queue_bdp`, `aqm`), the scenario by name, and its time scale, either
//! given or derived from the link (`epochs`, `max_phase`: each measured
//! phase spans that many congestion epochs of the competing TCP, issue
//! 25's grid; the model is [`priority_sim::epoch_timing`]'s).

use std::time::Duration;

use braid_link::{Direction, LinkParams, LinkSpec, QueueLimit, Rate, Ratio};

use crate::harness::priority_sim::{
    self, timing_name, EpochTiming, ScenarioConfig, ScenarioError, ScenarioOptions, DEFAULT_MAX_PHASE,
};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, TemplateError};

/// The `aqm` parameter's values: `keep` (the link's own queue discipline)
/// or one of braid-link's (`aqm=` in a link spec; drop-tail is its
/// default).
pub const AQMS: [&str; 6] = ["keep", "droptail", "codel", "pie", "red", "fq_codel"];

/// The path and timing parameters both priority templates declare, in
/// this order, all environment (the network, and how long it is measured).
pub fn path_and_timing_params() -> Vec<ParamDecl> {
    vec![
        ParamDecl::env("rtt", ParamType::Duration, Value::Duration(Duration::ZERO))
            .doc("override the path's RTT (0s: keep it)"),
        ParamDecl::env("rate_mbps", ParamType::float_range(0.0, 100_000.0), Value::Float(0.0))
            .doc("override the path's rate, Mbit/s (0: keep it)"),
        ParamDecl::env("queue", ParamType::Duration, Value::Duration(Duration::ZERO))
            .doc("override the bottleneck buffer, as its drain time at the rate (0s: keep it)"),
        ParamDecl::env("queue_bdp", ParamType::float_range(0.0, 1000.0), Value::Float(0.0)).doc(
            "override the bottleneck buffer as a multiple of the bandwidth-delay product, rate x RTT \
             (0: keep it; not with queue)",
        ),
        ParamDecl::env("aqm", ParamType::one_of(&AQMS), Value::Enum("keep".into())).doc(
            "the bottleneck's queue discipline: keep the link's, or droptail, codel, pie, red, fq_codel \
             (aqm= in the link spec)",
        ),
        ParamDecl::env("jitter_packets", ParamType::float_range(0.0, 100.0), Value::Float(0.0)).doc(
            "when above 0: the path's round-trip delay variation (jitter=, σ) in packet times at its rate \
             (Floyd and Jacobson's random host delay against phase effects; 0: keep the link's)",
        ),
        ParamDecl::env("epochs", ParamType::float_range(0.0, 1000.0), Value::Float(0.0)).doc(
            "when above 0: the time scale is set so that each measured phase spans this many congestion \
             epochs of the competing TCP on the path (at least 20 s, at most max_phase); not with scale \
             or duration",
        ),
        ParamDecl::env("max_phase", ParamType::Duration, Value::Duration(DEFAULT_MAX_PHASE))
            .doc("with epochs: the longest measured phase (20s to 10000s)"),
    ]
}

/// What a scenario is, apart from its path and timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScenarioChoice<'a> {
    /// One of [`priority_sim::SCENARIO_NAMES`].
    pub scenario: &'a str,
    /// The DTL flow's priority (`multcp`, `versus`, `pair`).
    pub n: f64,
    /// `multcp` only: two MulTCP(n) flows.
    pub multcp_pair: bool,
    /// `latecomer` only: RFC 6817's additive decrease.
    pub additive: bool,
}

impl ScenarioChoice<'_> {
    /// The scenario's run with these options.
    pub fn build(&self, opts: &ScenarioOptions) -> Result<ScenarioConfig, ScenarioError> {
        match self.scenario {
            "polite" => priority_sim::polite(opts),
            "latecomer" => priority_sim::latecomer(opts, self.additive),
            "multcp" if self.multcp_pair => priority_sim::multcp_pair(opts, self.n),
            "multcp" => priority_sim::multcp(opts, self.n),
            "switch" => priority_sim::switch(opts),
            "five" => priority_sim::five(opts),
            "versus" => priority_sim::versus(opts, self.n),
            "pair" => priority_sim::pair(opts, self.n),
            other => Err(ScenarioError::UnknownScenario(other.to_string())),
        }
    }

    /// The name [`priority_sim::epoch_timing`] knows this run by.
    fn timing_name(&self) -> &str {
        if self.scenario == "multcp" && self.multcp_pair {
            "pair"
        } else {
            timing_name(self.scenario, self.n)
        }
    }
}

/// The scenario run `choice` describes with `opts` (whose `link` is the
/// `link` parameter's, whose `scale` is ignored), the path overrides of
/// `params` applied, and the time scale: from the `epochs` parameter when
/// it is above 0 (then `explicit_scale` must give `None`), else
/// `explicit_scale` of the run at scale 1 (the template's `scale` or
/// `duration`). Returns the epoch timing when `epochs` set it.
pub fn configure(
    params: &Params,
    mut opts: ScenarioOptions,
    choice: ScenarioChoice<'_>,
    explicit_scale: &dyn Fn(&ScenarioConfig) -> Result<Option<f64>, TemplateError>,
) -> Result<(ScenarioConfig, Option<EpochTiming>), TemplateError> {
    let invalid = |e: ScenarioError| TemplateError::Invalid(e.to_string());
    opts.scale = 1.0;
    let paper = choice.build(&opts).map_err(invalid)?;
    let link = apply_link_overrides(&paper.link, params)?;
    opts.link = Some(link.clone());
    let epochs = params.float("epochs")?;
    let explicit = explicit_scale(&paper)?;
    let timing = if epochs > 0.0 {
        if explicit.is_some() {
            return Err(TemplateError::Invalid(
                "epochs sets the time scale: give epochs, or scale/duration, not both".into(),
            ));
        }
        let t = priority_sim::epoch_timing(choice.timing_name(), &link, opts.tcp, epochs, params.duration("max_phase")?)
            .map_err(invalid)?;
        opts.scale = t.scale;
        if matches!(choice.timing_name(), "multcp" | "pair") {
            opts.warmup = Some(t.warmup);
        }
        Some(t)
    } else {
        opts.scale = explicit.unwrap_or(1.0);
        None
    };
    let cfg = choice.build(&opts).map_err(invalid)?;
    Ok((cfg, timing))
}

/// Record what [`configure`] decided about the timing:
/// `tcp_epoch_secs` (the competing TCP's congestion epoch on the path, by
/// the model), `phase_secs` (the measured phase), `phase_epochs` (epochs
/// it spans) and `phase_capped` (1 if `max_phase` shortened it).
pub fn record_timing(ctx: &mut Context<'_>, t: &EpochTiming) {
    ctx.record("tcp_epoch_secs", t.epoch.as_secs_f64());
    ctx.record("phase_secs", t.phase.as_secs_f64());
    if t.epochs.is_finite() {
        ctx.record("phase_epochs", t.epochs);
    }
    ctx.record("phase_capped", if t.capped { 1.0 } else { 0.0 });
    ctx.record("warmup_secs", t.warmup.as_secs_f64());
}

/// A full-size Braid datagram on the wire (IPv4 and UDP headers included).
fn wire_packet_bytes() -> f64 {
    f64::from(braid_proto::TransportConfig::default().max_datagram_size) + braid_sim::IPV4_UDP_OVERHEAD as f64
}

/// The path of an experiment: `base` with the overrides of `params` that
/// are set (`rtt`, `rate_mbps`, `queue` or `queue_bdp`, `jitter_packets`,
/// `aqm`).
pub fn apply_link_overrides(base: &LinkSpec, params: &Params) -> Result<LinkSpec, TemplateError> {
    let rtt = params.duration("rtt")?;
    let rate_mbps = params.float("rate_mbps")?;
    let queue = params.duration("queue")?;
    let queue_bdp = params.float("queue_bdp")?;
    let aqm = params.str("aqm")?;
    let jitter_packets = params.float("jitter_packets")?;
    if !queue.is_zero() && queue_bdp > 0.0 {
        return Err(TemplateError::Invalid(
            "queue and queue_bdp both set the buffer: give one of them".into(),
        ));
    }
    let rate = if rate_mbps > 0.0 {
        let bps = (rate_mbps * 1e6).round();
        Some(
            Rate::from_bits_per_sec(bps as u64)
                .ok_or_else(|| TemplateError::Invalid(format!("rate_mbps: {rate_mbps} is out of range")))?,
        )
    } else {
        None
    };
    let link = if rtt.is_zero() && rate.is_none() && queue.is_zero() && queue_bdp == 0.0 && jitter_packets == 0.0 {
        base.clone()
    } else {
        let set = |mut p: LinkParams| -> Result<LinkParams, TemplateError> {
            if !rtt.is_zero() {
                p.delay = rtt / 2;
            }
            if let Some(r) = rate {
                p.rate = Some(r);
                p.trace = None;
            }
            let no_rate =
                || TemplateError::Invalid("queue: the link has no rate to size a queue by (set rate_mbps)".into());
            if !queue.is_zero() {
                let r = p.rate.ok_or_else(no_rate)?;
                p.queue = Some(QueueLimit::Bytes(r.bytes_in(queue).max(1500)));
            }
            if queue_bdp > 0.0 {
                p.rate.ok_or_else(no_rate)?;
                p.queue = Some(QueueLimit::Bdp(Ratio::from_billionths((queue_bdp * 1e9).round() as u64)));
            }
            if jitter_packets > 0.0 {
                let r = p.rate.ok_or_else(|| {
                    TemplateError::Invalid("jitter_packets: the link has no rate to time a packet by (set rate_mbps)".into())
                })?;
                p.jitter = Duration::from_secs_f64(jitter_packets * wire_packet_bytes() / r.bytes_per_sec_f64());
            }
            Ok(p)
        };
        let (a2b, b2a) = (set(base.params(Direction::AToB))?, set(base.params(Direction::BToA))?);
        LinkSpec::asymmetric(a2b, b2a).map_err(|e| TemplateError::Invalid(format!("link overrides: {e}")))?
    };
    with_aqm(&link, aqm)
}

/// `link` with its queue discipline set to `aqm` (one of [`AQMS`]; `keep`
/// leaves it). The spec text gets `aqm=X` for X other than drop-tail (the
/// link's default), and loses any `aqm=` of its own; a braid-link that does
/// not know the key yet rejects it here, naming it.
pub fn with_aqm(link: &LinkSpec, aqm: &str) -> Result<LinkSpec, TemplateError> {
    if aqm == "keep" {
        return Ok(link.clone());
    }
    if !AQMS.contains(&aqm) {
        return Err(TemplateError::Invalid(format!("aqm `{aqm}`: expected one of {}", AQMS.join(", "))));
    }
    let text = link.to_string();
    // Changes over time (`;at=...`) keep their own items.
    let (head, changes) = match text.split_once(';') {
        Some((h, c)) => (h.to_string(), format!(";{c}")),
        None => (text.clone(), String::new()),
    };
    let mut items: Vec<&str> = head
        .split(',')
        .map(str::trim)
        .filter(|i| {
            let bare = i.strip_prefix("a2b:").or_else(|| i.strip_prefix("b2a:")).unwrap_or(i);
            !i.is_empty() && !bare.starts_with("aqm=")
        })
        .collect();
    let set = format!("aqm={aqm}");
    if aqm != "droptail" {
        items.push(&set);
    }
    let spec = format!("{}{changes}", items.join(","));
    spec.parse::<LinkSpec>()
        .map_err(|e| TemplateError::Invalid(format!("aqm `{aqm}` on `{spec}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::priority::with_defaults;

    fn params(values: &[(&str, Value)]) -> Params {
        let values: Vec<(String, Value)> = values.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        with_defaults(&values).unwrap()
    }

    fn link(s: &str) -> LinkSpec {
        s.parse().unwrap()
    }

    #[test]
    fn queue_bdp_and_aqm_override_the_path() {
        let p = params(&[
            ("rtt", Value::Duration(Duration::from_millis(50))),
            ("rate_mbps", Value::Float(20.0)),
            ("queue_bdp", Value::Float(0.25)),
        ]);
        let l = apply_link_overrides(&link("rtt=40ms,rate=10mbit,queue=250kb"), &p).unwrap();
        assert_eq!(l.to_string(), "rtt=50ms,rate=20mbit,queue=0.25bdp");
        let both = params(&[("queue", Value::Duration(Duration::from_millis(50))), ("queue_bdp", Value::Float(1.0))]);
        assert!(apply_link_overrides(&link("rtt=40ms,rate=10mbit"), &both).unwrap_err().to_string().contains("queue_bdp"));
        let no_rate = params(&[("queue_bdp", Value::Float(1.0))]);
        assert!(apply_link_overrides(&link("rtt=40ms"), &no_rate).unwrap_err().to_string().contains("rate_mbps"));
        // Jitter in packet times: one 1,500-byte packet (1,472 B of
        // datagram and 28 of headers) at 12 Mbit/s takes 1 ms.
        let jitter = params(&[("jitter_packets", Value::Float(2.0)), ("rate_mbps", Value::Float(12.0))]);
        let l = apply_link_overrides(&link("rtt=40ms,rate=10mbit"), &jitter).unwrap();
        let j = l.params(Direction::AToB).jitter.as_secs_f64() * 1e3;
        let want = 2.0 * wire_packet_bytes() * 8.0 / 12e6 * 1e3;
        assert!((j - want).abs() < 1e-6, "jitter {j} ms, want {want} ms");
        assert_eq!(l.params(Direction::BToA).jitter, l.params(Direction::AToB).jitter);
        let jitter_no_rate = params(&[("jitter_packets", Value::Float(1.0))]);
        assert!(apply_link_overrides(&link("rtt=40ms"), &jitter_no_rate).unwrap_err().to_string().contains("jitter_packets"));
        // Drop-tail is the default: nothing is added, and keep keeps.
        let base = link("rtt=40ms,rate=10mbit");
        assert_eq!(with_aqm(&base, "droptail").unwrap(), base);
        assert_eq!(with_aqm(&base, "keep").unwrap(), base);
        assert!(with_aqm(&base, "blue").unwrap_err().to_string().contains("fq_codel"));
        // Whether braid-link knows `aqm=` yet or not, the answer names it.
        match with_aqm(&base, "codel") {
            Ok(l) => {
                assert!(l.to_string().contains("aqm=codel"), "{l}");
                assert_eq!(with_aqm(&l, "droptail").unwrap(), base);
            }
            Err(e) => assert!(e.to_string().contains("aqm"), "{e}"),
        }
    }

    #[test]
    fn epochs_set_the_scale_from_the_link() {
        let opts = ScenarioOptions::default();
        let choice = ScenarioChoice { scenario: "versus", n: 0.0, multcp_pair: false, additive: false };
        let none = |_: &ScenarioConfig| Ok(None);
        let p = params(&[
            ("rtt", Value::Duration(Duration::from_millis(100))),
            ("rate_mbps", Value::Float(50.0)),
            ("queue_bdp", Value::Float(2.0)),
            ("tcp", Value::Enum("cubic".into())),
            ("epochs", Value::Float(3.0)),
        ]);
        let mut o = opts.clone();
        o.tcp = braid_proto::CcAlgorithm::Cubic;
        let (cfg, t) = configure(&p, o.clone(), choice, &none).unwrap();
        let t = t.unwrap();
        // polite's 30 s phases become 3 CUBIC epochs (≈ 29.5 s here).
        assert_eq!(cfg.name, "polite");
        let phase = cfg.phases[1].end - cfg.phases[1].start;
        assert!((phase.as_secs_f64() - t.phase.as_secs_f64()).abs() < 1e-6, "{phase:?} {t:?}");
        assert!((t.epochs - 3.0).abs() < 1e-9 && !t.capped, "{t:?}");
        assert_eq!(cfg.link.to_string(), "rtt=100ms,rate=50mbit,queue=2bdp");
        let scaled = |_: &ScenarioConfig| Ok(Some(0.5));
        assert!(configure(&p, o.clone(), choice, &scaled).unwrap_err().to_string().contains("not both"));
        let pair = ScenarioChoice { scenario: "pair", ..choice };
        let (cfg, _) = configure(&p, o, pair, &none).unwrap();
        assert_eq!(cfg.name, "multcp_pair_0");
        assert!(((cfg.phases[0].end - cfg.phases[0].start).as_secs_f64() - t.phase.as_secs_f64()).abs() < 1e-6);
    }
}
