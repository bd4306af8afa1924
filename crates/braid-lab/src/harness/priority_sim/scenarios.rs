//! The scenarios of DTL's evaluation (issue 5): `polite`, `latecomer`,
//! `multcp`, `switch` and `five`, with the paper's links and timings, scaled
//! by [`ScenarioOptions::scale`]; and the two of the issue-25 grid, `versus`
//! (one DTL flow at priority p against one TCP flow: `polite` at p = 0,
//! `multcp` above) and `pair` (two DTL flows at the same p, from the start).

use std::time::Duration;

use braid_link::LinkSpec;
use braid_proto::CcAlgorithm;

use super::{FlowSpec, PhaseSpec, ScenarioConfig, ScenarioError};

/// The scenario names [`scenarios`] knows.
pub const SCENARIO_NAMES: [&str; 7] = [
    "polite",
    "latecomer",
    "multcp",
    "switch",
    "five",
    "versus",
    "pair",
];

/// A scenario by name (one of [`SCENARIO_NAMES`]). `latecomer` gives DTL's
/// multiplicative decrease, then RFC 6817's additive decrease (the baseline
/// it is compared with). `multcp` gives one MulTCP(N) flow against one TCP
/// flow for each N in [`ScenarioOptions::ns`], then two MulTCP(N) flows for
/// each N. `versus` gives [`versus`] and `pair` [`pair`] for each N in
/// `ns` (where N may be 0).
pub fn scenarios(name: &str, opts: &ScenarioOptions) -> Result<Vec<ScenarioConfig>, ScenarioError> {
    Ok(match name {
        "polite" => vec![polite(opts)?],
        "latecomer" => vec![latecomer(opts, false)?, latecomer(opts, true)?],
        "multcp" => {
            let mut v = Vec::new();
            for &n in &opts.ns {
                v.push(multcp(opts, n)?);
            }
            for &n in &opts.ns {
                v.push(multcp_pair(opts, n)?);
            }
            v
        }
        "switch" => vec![switch(opts)?],
        "five" => vec![five(opts)?],
        "versus" => opts
            .ns
            .iter()
            .map(|&n| versus(opts, n))
            .collect::<Result<_, _>>()?,
        "pair" => opts
            .ns
            .iter()
            .map(|&n| pair(opts, n))
            .collect::<Result<_, _>>()?,
        _ => return Err(ScenarioError::UnknownScenario(name.to_string())),
    })
}

/// Options shared by the scenario builders.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioOptions {
    /// The path; `None` = the scenario's default (see each builder).
    pub link: Option<LinkSpec>,
    /// Multiplies every time of the scenario (1 = the paper's durations).
    pub scale: f64,
    /// The competing "TCP" flows' controller.
    pub tcp: CcAlgorithm,
    /// N values of the `multcp` scenario.
    pub ns: Vec<f64>,
    /// Extra controller parameters for every DTL flow (e.g. `variant` = 1
    /// for LEDBAT++ as the p = 0 controller, `target_ms`).
    pub dtl_params: Vec<(String, f64)>,
    /// Seed.
    pub seed: u64,
    /// `multcp` and `pair`: the time before the measured phase, in which
    /// the flows converge; `None` = the paper's 20 s, scaled.
    pub warmup: Option<Duration>,
}

impl Default for ScenarioOptions {
    /// Paper durations, NewReno as TCP, N = 1..4, seed 1.
    fn default() -> Self {
        ScenarioOptions {
            link: None,
            scale: 1.0,
            tcp: CcAlgorithm::NewReno,
            ns: vec![1.0, 2.0, 3.0, 4.0],
            dtl_params: Vec::new(),
            seed: 1,
            warmup: None,
        }
    }
}

impl ScenarioOptions {
    fn link_or(&self, default: &str) -> LinkSpec {
        self.link
            .clone()
            .unwrap_or_else(|| default.parse().expect("the default link specs are valid"))
    }

    /// DTL's priority controller at priority `p`, with the extra
    /// parameters. Its p > 0 flows are virtual flows of the competing TCP's
    /// kind (`multcp_base`: Reno flows against NewReno, CUBIC flows against
    /// CUBIC), so that p = N means N of *those* flows; an explicit
    /// `multcp_base` in the extra parameters comes later and wins.
    fn dtl(&self, label: &str, p: f64, start: Duration) -> FlowSpec {
        let mut f = FlowSpec::dtl(label, p, start);
        let base = if self.tcp == CcAlgorithm::NewReno {
            0.0
        } else {
            1.0
        };
        f.params.push(("multcp_base".to_string(), base));
        f.params.extend(self.dtl_params.iter().cloned());
        f
    }

    fn at(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs * self.scale)
    }

    /// `multcp`'s and `pair`'s timing: `warmup` (or the paper's 20 s),
    /// then a measured phase `steady` of the paper's 180 s, scaled.
    fn steady_after_warmup(&self, cfg: &mut ScenarioConfig) {
        let warmup = self.warmup.unwrap_or_else(|| self.at(20.0));
        let end = warmup + self.at(180.0);
        cfg.duration = end;
        cfg.phases = vec![PhaseSpec { name: "steady".to_string(), start: warmup, end }];
    }

    fn phase(&self, name: &str, start: f64, end: f64) -> PhaseSpec {
        PhaseSpec {
            name: name.to_string(),
            start: self.at(start),
            end: self.at(end),
        }
    }

    fn check(&self) -> Result<(), ScenarioError> {
        if !(self.scale.is_finite() && self.scale > 0.0 && self.scale <= 100.0) {
            return Err(ScenarioError::InvalidConfig {
                field: "scale".to_string(),
                expected: "a time scale greater than 0 and at most 100",
            });
        }
        if self.ns.is_empty() || self.ns.iter().any(|n| !(*n >= 0.0 && *n <= 100.0)) {
            return Err(ScenarioError::InvalidConfig {
                field: "ns".to_string(),
                expected: "one or more priorities, each in [0, 100] (above 0 for multcp)",
            });
        }
        Ok(())
    }

    fn config(&self, name: &str, link: LinkSpec, duration: f64) -> ScenarioConfig {
        ScenarioConfig {
            name: name.to_string(),
            link,
            flows: Vec::new(),
            duration: self.at(duration),
            phases: Vec::new(),
            bin: self.at(1.0).max(Duration::from_millis(100)),
            probe_interval: Some(Duration::from_millis(20)),
            seed: self.seed,
            encrypted: true,
            wall_deadline: None,
        }
    }
}

/// Default path of `polite`, `latecomer` and `five`: DTL's
/// controlled setup (10 Mbit/s, 20 ms each way) with a 200 ms drop-tail
/// buffer, twice LEDBAT's target: LEDBAT can only notice TCP through a
/// queue longer than its target.
pub const DEFAULT_LINK: &str = "rtt=40ms,rate=10mbit,queue=250kb";
/// Default path of `multcp`: [`DEFAULT_LINK`] with 0.2% random loss.
/// MulTCP2's decrease assumes that a flow's losses are proportional to its
/// packets, as under DTL's testbed (RED queues and a periodic loss). A pure
/// drop-tail queue instead drops from every flow in the same overflow, and
/// with such synchronised losses an AIMD(a, b) flow's share goes as a/b
/// rather than √(a(2−b)/b), so MulTCP(N) takes well over N shares (2.6,
/// 4.6 and 7.3 for N = 2, 3, 4 in this simulator). braid-link has no RED;
/// random loss stands in for it (enough of it that most loss events are
/// random rather than overflows). (LEDBAT scenarios keep the pure drop-tail
/// queue: a queue that never builds up hides TCP from LEDBAT.)
pub const MULTCP_LINK: &str = "rtt=40ms,rate=10mbit,queue=250kb,loss=0.2%";
/// Default path of `switch` (DTL Fig. 6): 5 Mbit/s, RTT 25 ms, 200 ms of
/// buffer.
pub const SWITCH_LINK: &str = "rtt=25ms,rate=5mbit,queue=125kb";

/// `polite`: one LEDBAT flow (DTL priority 0) alone for 40 s, with one TCP
/// flow from 40 s to 80 s, alone again until 120 s, then, once it has
/// stopped, a second TCP flow alone from 125 s to 160 s (times × scale).
/// Phases `alone` (10–40 s), `with_tcp` (50–80 s), `alone_again`
/// (90–120 s) and `tcp_alone` (130–160 s).
///
/// `tcp_alone` is the yardstick of the other phases (issue 25): on a
/// shallow buffer TCP alone cannot fill the link either (NewReno alone
/// reaches about 0.85 of it at 0.25 BDP), so what TCP keeps beside the
/// LEDBAT flow is compared with what it reaches alone on the same link,
/// not with the capacity. It comes last so that the first three phases
/// keep their indices; the LEDBAT flow stops adding data at 120 s and its
/// send buffer (about 2 (RTT + 1 s) at the link rate, see
/// [`super::transport_config`]) has drained by 125 s at every scale of 0.5
/// or more.
pub fn polite(opts: &ScenarioOptions) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    let mut cfg = opts.config("polite", opts.link_or(DEFAULT_LINK), 160.0);
    let mut ledbat = opts.dtl("ledbat", 0.0, opts.at(0.0));
    ledbat.stop = Some(opts.at(120.0));
    cfg.flows.push(ledbat);
    let mut tcp = FlowSpec::new("tcp", opts.tcp, opts.at(40.0));
    tcp.stop = Some(opts.at(80.0));
    cfg.flows.push(tcp);
    cfg.flows
        .push(FlowSpec::new("tcp_alone", opts.tcp, opts.at(125.0)));
    cfg.phases = vec![
        opts.phase("alone", 10.0, 40.0),
        opts.phase("with_tcp", 50.0, 80.0),
        opts.phase("alone_again", 90.0, 120.0),
        opts.phase("tcp_alone", 130.0, 160.0),
    ];
    Ok(cfg)
}

/// `latecomer`: two LEDBAT flows (priority 0), the second 30 s after the
/// first, until 150 s (DTL Table 2). Phases `first_alone` (5–30 s),
/// `overlap` (30–150 s) and `settled` (40–150 s, after the second flow's
/// slow start). `additive`: both use RFC 6817's additive decrease
/// instead of DTL's multiplicative one (`delay_beta = 1`), the baseline.
pub fn latecomer(opts: &ScenarioOptions, additive: bool) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    let name = if additive {
        "latecomer_additive"
    } else {
        "latecomer"
    };
    let mut cfg = opts.config(name, opts.link_or(DEFAULT_LINK), 150.0);
    for (label, start) in [("ledbat1", 0.0), ("ledbat2", 30.0)] {
        let mut f = opts.dtl(label, 0.0, opts.at(start));
        if additive {
            f.params.push(("delay_beta".to_string(), 1.0));
        }
        cfg.flows.push(f);
    }
    cfg.phases = vec![
        opts.phase("first_alone", 5.0, 30.0),
        opts.phase("overlap", 30.0, 150.0),
        opts.phase("settled", 40.0, 150.0),
    ];
    Ok(cfg)
}

/// `multcp`: one MulTCP(N) flow (DTL priority N) against one TCP flow,
/// both from the start, for 200 s, on [`MULTCP_LINK`]; phase `steady`
/// (20–200 s; with [`ScenarioOptions::warmup`], from the warm-up on).
pub fn multcp(opts: &ScenarioOptions, n: f64) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    if !(n > 0.0 && n <= 100.0) {
        return Err(ScenarioError::InvalidConfig {
            field: "n".to_string(),
            expected: "a priority N in (0, 100] (p = 0 against TCP is polite)",
        });
    }
    let mut cfg = opts.config(&format!("multcp_{n}"), opts.link_or(MULTCP_LINK), 200.0);
    cfg.flows
        .push(opts.dtl(&format!("multcp{n}"), n, opts.at(0.0)));
    cfg.flows.push(FlowSpec::new("tcp", opts.tcp, opts.at(0.0)));
    opts.steady_after_warmup(&mut cfg);
    Ok(cfg)
}

/// Two MulTCP(N) flows from the start for 200 s, on [`MULTCP_LINK`]; phase
/// `steady` (20–200 s). N = 0 gives two LEDBAT flows (DTL priority 0)
/// starting together.
pub fn multcp_pair(opts: &ScenarioOptions, n: f64) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    if !(0.0..=100.0).contains(&n) {
        return Err(ScenarioError::InvalidConfig {
            field: "n".to_string(),
            expected: "a priority in [0, 100]",
        });
    }
    let mut cfg = opts.config(
        &format!("multcp_pair_{n}"),
        opts.link_or(MULTCP_LINK),
        200.0,
    );
    for label in ["a", "b"] {
        cfg.flows
            .push(opts.dtl(&format!("multcp{n}_{label}"), n, opts.at(0.0)));
    }
    opts.steady_after_warmup(&mut cfg);
    Ok(cfg)
}

/// The grid's `versus` (issue 25): one DTL flow at priority `p` against one
/// TCP flow: [`polite`] (with its TCP-alone yardstick) at p = 0, [`multcp`]
/// at p > 0.
pub fn versus(opts: &ScenarioOptions, p: f64) -> Result<ScenarioConfig, ScenarioError> {
    if p == 0.0 {
        polite(opts)
    } else {
        multcp(opts, p)
    }
}

/// The grid's `pair` (issue 25): two DTL flows at the same priority `p`
/// (0 included) from the start: [`multcp_pair`].
pub fn pair(opts: &ScenarioOptions, p: f64) -> Result<ScenarioConfig, ScenarioError> {
    multcp_pair(opts, p)
}

/// The builder [`versus`] or [`pair`] uses at priority `p`, by the name
/// [`super::paper_phase_secs`] knows (`polite`, `multcp` or `pair`); other
/// scenarios are their own.
pub fn timing_name(scenario: &str, p: f64) -> &str {
    match scenario {
        "versus" if p == 0.0 => "polite",
        "versus" => "multcp",
        other => other,
    }
}

/// `switch` (DTL Fig. 6): one TCP flow and one DTL flow at priority 0,
/// raised to 1 at 240 s and to 2 at 360 s, until 480 s, on 5 Mbit/s with a
/// 25 ms RTT. Phases `p0` (20–240 s), `p1` (250–360 s), `p2` (370–480 s).
pub fn switch(opts: &ScenarioOptions) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    let mut cfg = opts.config("switch", opts.link_or(SWITCH_LINK), 480.0);
    cfg.flows.push(FlowSpec::new("tcp", opts.tcp, opts.at(0.0)));
    let mut dtl = opts.dtl("dtl", 0.0, opts.at(0.0));
    dtl.schedule = vec![(opts.at(240.0), 1.0), (opts.at(360.0), 2.0)];
    cfg.flows.push(dtl);
    cfg.phases = vec![
        opts.phase("p0", 20.0, 240.0),
        opts.phase("p1", 250.0, 360.0),
        opts.phase("p2", 370.0, 480.0),
    ];
    Ok(cfg)
}

/// `five` (DTL Fig. 7): five DTL flows at priority 0; at 120 s four of
/// them (`dtl1`–`dtl4`) go to 1, at 230 s two of those (`dtl1`, `dtl2`) to
/// 2, until 340 s. Phases `all_p0` (20–120 s), `four_p1` (130–230 s),
/// `two_p2` (240–340 s).
pub fn five(opts: &ScenarioOptions) -> Result<ScenarioConfig, ScenarioError> {
    opts.check()?;
    let mut cfg = opts.config("five", opts.link_or(DEFAULT_LINK), 340.0);
    for i in 0..5 {
        let mut f = opts.dtl(&format!("dtl{i}"), 0.0, opts.at(0.0));
        if i > 0 {
            f.schedule.push((opts.at(120.0), 1.0));
        }
        if i == 1 || i == 2 {
            f.schedule.push((opts.at(230.0), 2.0));
        }
        cfg.flows.push(f);
    }
    cfg.phases = vec![
        opts.phase("all_p0", 20.0, 120.0),
        opts.phase("four_p1", 130.0, 230.0),
        opts.phase("two_p2", 240.0, 340.0),
    ];
    Ok(cfg)
}
