//! Priority scenarios on the simulator: competing flows, each with its own
//! congestion controller, start and stop time and priority schedule, on one
//! simulated bottleneck (DTL's experiments, issue 5).
//!
//! All flows are connections of one client [`Endpoint`] to one server over
//! one path, so they share its drop-tail bottleneck; each connection gets
//! its own controller through [`Endpoint::connect_with`]. Senders are bulk:
//! they keep their send buffer full from their start to their stop time
//! (after which what is buffered drains). Priorities change on the live
//! connections through [`braid_proto::cc::CongestionController::set_parameter`].
//!
//! Measured, in virtual time:
//! - per flow, bytes acknowledged in order, in bins (a throughput series)
//!   and per phase (mean throughput, share of the link rate, of the phase's
//!   total, Jain's index over the flows active throughout the phase);
//! - queuing delay, from a 32-byte probe echoed by the server every
//!   `probe_interval` through the same bottleneck (as `ping` would in a real
//!   experiment): RTT minus the smallest RTT seen; p50/p99 per phase;
//! - loss: packets the senders declared lost over packets they sent, and
//!   the bottleneck's queue drops;
//! - stalls at priority switches: the longest time after a switch in which
//!   the switched flow sent nothing, against its smoothed RTT at the switch.
//!
//! The figures are computed by [`build_report`] from [`Measurements`]
//! (counter snapshots, probe samples, switches), which the emulator's
//! runner (`braid bench priority`) records too, so both report the same
//! quantities the same way; [`checks`] evaluates issue 5's acceptance
//! criteria on either's reports.
//!
//! Scenario builders ([`polite`], [`latecomer`], [`multcp`],
//! [`multcp_pair`], [`switch`], [`five`]) follow DTL's figures; their
//! timings scale with [`ScenarioOptions::scale`]. The issue-25 grid runs
//! [`versus`] and [`pair`] with a scale from [`epoch_timing`], so that each
//! measured phase spans several congestion epochs of the competing TCP on
//! the link at hand. [`parse_priority_schedule`]
//! reads the `0@0s,1@60s,2@120s` syntax of a priority schedule.
//!
//! ```
//! use braid_lab::harness::priority_sim::{run, switch, ScenarioOptions};
//! let cfg = switch(&ScenarioOptions { scale: 0.05, ..ScenarioOptions::default() }).unwrap();
//! let report = run(&cfg).unwrap();
//! assert_eq!(report.phases.len(), 3);
//! assert_eq!(report.switches.len(), 2);
//! // Same config, same seed: the same run.
//! assert_eq!(run(&cfg).unwrap().trace_hash, report.trace_hash);
//! ```

mod acceptance;
mod host;
mod report;
mod scenarios;
mod schedule;
mod timing;

pub use acceptance::{checks, Check};
pub use report::{
    build_report, jain_index, FlowCounters, FlowResult, Measurements, PhaseFlow, PhaseResult,
    ScenarioReport, Snapshot, SwitchRecord, SwitchResult,
};
pub use scenarios::{
    five, latecomer, multcp, multcp_pair, pair, polite, scenarios, switch, timing_name, versus,
    ScenarioOptions, DEFAULT_LINK, MULTCP_LINK, SCENARIO_NAMES, SWITCH_LINK,
};
pub use schedule::{parse_priority_schedule, ScheduleError};
pub use timing::{
    convergence_epochs, epoch, epoch_timing, has_aqm, paper_phase_secs, EpochTiming, AQM_QUEUE_DELAY,
    DEFAULT_MAX_PHASE, MIN_PHASE,
};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use braid_core::{splitmix64, Instant};
use crate::harness::sim_endpoints::seeded_pair;
use braid_link::{Direction, LinkSpec, LinkStats};
use braid_proto::cc::CcError;
use braid_proto::{CcAlgorithm, ConnectError, EndpointConfig, TransportConfig};
use braid_sim::{SimError, Simulator, IPV4_UDP_OVERHEAD};

use host::{client_addr, server_addr, Action, Host};

use super::sim_transfer::WallClock;

/// One flow of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// Name in reports (`tcp`, `dtl`, `ledbat1`, ...).
    pub label: String,
    /// Its congestion controller.
    pub cc: CcAlgorithm,
    /// When it connects and starts sending.
    pub start: Duration,
    /// When it stops adding data (what is buffered still drains); `None` =
    /// until the end.
    pub stop: Option<Duration>,
    /// Controller parameters set as the connection opens, e.g.
    /// `("priority", 0.0)` or `("delay_beta", 1.0)`.
    pub params: Vec<(String, f64)>,
    /// Priority changes on the live connection: at each time, the
    /// `priority` parameter is set to the value.
    pub schedule: Vec<(Duration, f64)>,
}

impl FlowSpec {
    /// A flow from `start` to the end with the controller's defaults.
    pub fn new(label: &str, cc: CcAlgorithm, start: Duration) -> Self {
        FlowSpec {
            label: label.to_string(),
            cc,
            start,
            stop: None,
            params: Vec::new(),
            schedule: Vec::new(),
        }
    }

    /// DTL's priority controller starting at priority `p`.
    pub fn dtl(label: &str, p: f64, start: Duration) -> Self {
        let mut f = FlowSpec::new(label, CcAlgorithm::Priority, start);
        f.params.push(("priority".to_string(), p));
        f
    }

    /// The priority in force at `t`, if the flow has one.
    fn priority_at(&self, t: Duration) -> Option<f64> {
        let initial = self
            .params
            .iter()
            .rev()
            .find(|(n, _)| n == "priority")
            .map(|&(_, v)| v)
            .or((self.cc == CcAlgorithm::Priority).then_some(1.0));
        self.schedule
            .iter()
            .filter(|(at, _)| *at <= t)
            .max_by_key(|(at, _)| *at)
            .map(|&(_, p)| p)
            .or(initial)
    }

    fn active_throughout(&self, start: Duration, end: Duration) -> bool {
        self.start <= start && self.stop.is_none_or(|s| s >= end)
    }
}

/// A named time interval over which results are averaged.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSpec {
    /// Name in reports.
    pub name: String,
    /// Start of the interval.
    pub start: Duration,
    /// End of the interval.
    pub end: Duration,
}

impl PhaseSpec {
    /// The interval `[start, end)` in seconds.
    pub fn new(name: &str, start_secs: f64, end_secs: f64) -> Self {
        PhaseSpec {
            name: name.to_string(),
            start: Duration::from_secs_f64(start_secs),
            end: Duration::from_secs_f64(end_secs),
        }
    }
}

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioConfig {
    /// Scenario name in reports.
    pub name: String,
    /// The path; its rate is the bottleneck.
    pub link: LinkSpec,
    /// The competing flows.
    pub flows: Vec<FlowSpec>,
    /// Virtual time simulated.
    pub duration: Duration,
    /// Intervals results are averaged over.
    pub phases: Vec<PhaseSpec>,
    /// Resolution of the throughput series.
    pub bin: Duration,
    /// Queuing-delay probe period; `None` = no probe (no delay figures).
    pub probe_interval: Option<Duration>,
    /// Seed of the simulator and both endpoints.
    pub seed: u64,
    /// The emulator's Braid flows are authenticated and encrypted (each end
    /// a fresh identity pinned to the other's); false runs the bare
    /// protocol, for measuring what encryption costs. The simulator always
    /// encrypts, with keys from the seed (see `sim_endpoints`): in virtual
    /// time encryption costs bytes, not time, and runs must repeat.
    pub encrypted: bool,
    /// Give up (with [`ScenarioError::WallDeadline`]) once the wall clock
    /// passes this; `None`: no limit. The lab sets it from the
    /// experiment's deadline.
    pub wall_deadline: Option<std::time::Instant>,
}

/// The scenario could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A config field is out of range.
    #[error("invalid priority scenario `{field}`: expected {expected}")]
    InvalidConfig {
        /// The field.
        field: String,
        /// The allowed form.
        expected: &'static str,
    },
    /// A flow's controller rejected a parameter.
    #[error("flow `{flow}`: {source}")]
    Parameter {
        /// The flow's label.
        flow: String,
        /// Why.
        source: CcError,
    },
    /// The scenario name is not known.
    #[error(
        "unknown priority scenario `{0}`: expected one of polite, latecomer, multcp, switch, five, versus, pair"
    )]
    UnknownScenario(String),
    /// A connection could not be opened.
    #[error("cannot connect: {0}")]
    Connect(#[from] ConnectError),
    /// The simulated network could not be built.
    #[error("cannot build the simulated network: {0}")]
    Network(#[from] SimError),
    /// The wall-clock deadline passed before the scenario's end.
    #[error("the wall-clock deadline passed at {virtual_secs:.1} s of {duration_secs:.1} s of virtual time")]
    WallDeadline {
        /// Virtual time reached.
        virtual_secs: f64,
        /// Virtual time the scenario runs.
        duration_secs: f64,
    },
}

/// Run a scenario.
pub fn run(cfg: &ScenarioConfig) -> Result<ScenarioReport, ScenarioError> {
    validate(cfg)?;
    let (server, client) = seeded_pair(
        cfg.seed,
        EndpointConfig { accept_incoming: true, transport: transport_config(cfg, None), ..EndpointConfig::default() },
        EndpointConfig { accept_incoming: false, transport: transport_config(cfg, None), ..EndpointConfig::default() },
    );
    let mut sim = Simulator::new(splitmix64(cfg.seed ^ 0x5151));
    let client_id = sim.add_node(
        [client_addr().ip()],
        Host::client(client, cfg.flows.len(), cfg.probe_interval),
    )?;
    sim.add_node([server_addr().ip()], Host::server(server))?;
    sim.add_path(client_addr().ip(), server_addr().ip(), &cfg.link)?;

    // Everything that happens, in time order; a stable sort keeps starts
    // before priority changes before stops at equal times.
    let mut actions: Vec<(Duration, Action)> = Vec::new();
    for (i, f) in cfg.flows.iter().enumerate() {
        actions.push((f.start, Action::Start(i)));
        actions.extend(
            f.schedule
                .iter()
                .map(|&(t, p)| (t, Action::SetPriority(i, p))),
        );
        actions.extend(f.stop.map(|t| (t, Action::Stop(i))));
    }
    actions.sort_by_key(|&(t, a)| {
        let order = match a {
            Action::Start(_) => 0,
            Action::SetPriority(..) => 1,
            Action::Stop(_) => 2,
        };
        (t, order)
    });

    let bins = bin_edges(cfg);
    let mut times: BTreeSet<Duration> = bins.iter().copied().collect();
    times.extend(cfg.phases.iter().flat_map(|p| [p.start, p.end]));
    times.extend(actions.iter().map(|&(t, _)| t));
    times.extend(cfg.flows.iter().filter_map(|f| f.stop));
    times.insert(cfg.duration);

    let mut snapshots: BTreeMap<Duration, Snapshot> = BTreeMap::new();
    let mut next_action = 0;
    let mut wall = WallClock::new(cfg.wall_deadline);
    for &t in times.iter().filter(|&&t| t <= cfg.duration) {
        if sim.run_until_condition(Instant::ZERO + t, |_| wall.passed()) {
            return Err(ScenarioError::WallDeadline {
                virtual_secs: sim.now().since_epoch().as_secs_f64(),
                duration_secs: cfg.duration.as_secs_f64(),
            });
        }
        while next_action < actions.len() && actions[next_action].0 <= t {
            let (_, action) = actions[next_action];
            next_action += 1;
            let now = sim.now();
            let host = sim.node_mut(client_id);
            host.apply(now, action, cfg)?;
        }
        let link = forward_stats(&sim);
        snapshots.insert(t, sim.node(client_id).snapshot(&link));
    }
    Ok(report::report(cfg, &sim, client_id, &bins, &snapshots))
}

/// Checks a config before anything runs: every field in range, every
/// flow parameter and priority accepted by its controller.
pub fn validate(cfg: &ScenarioConfig) -> Result<(), ScenarioError> {
    let check = |ok: bool, field: &str, expected| {
        if ok {
            Ok(())
        } else {
            Err(ScenarioError::InvalidConfig {
                field: field.to_string(),
                expected,
            })
        }
    };
    check(!cfg.flows.is_empty(), "flows", "at least one flow")?;
    check(
        !cfg.duration.is_zero() && cfg.duration <= Duration::from_secs(100_000),
        "duration",
        "a positive duration of at most 100000 s",
    )?;
    check(
        !cfg.bin.is_zero() && cfg.duration.as_nanos() / cfg.bin.as_nanos() <= 1_000_000,
        "bin",
        "a positive duration, at most a million bins per run",
    )?;
    check(
        cfg.probe_interval
            .is_none_or(|p| p >= Duration::from_millis(1)),
        "probe_interval",
        "at least 1 ms",
    )?;
    for p in &cfg.phases {
        check(
            p.start < p.end && p.end <= cfg.duration,
            &format!("phases.{}", p.name),
            "an interval with start < end <= duration",
        )?;
    }
    let transport = transport_config(cfg, None);
    let mtu = u64::from(transport.max_datagram_size);
    for f in &cfg.flows {
        let field = |what: &str| format!("flows.{}.{what}", f.label);
        check(
            f.start < cfg.duration,
            &field("start"),
            "a time before the end of the run",
        )?;
        check(
            f.stop.is_none_or(|s| s > f.start),
            &field("stop"),
            "a time after the flow's start",
        )?;
        // The parameters and the schedule must be accepted by the
        // controller: try them on one before simulating anything.
        let mut cc = f.cc.build(mtu, 10 * mtu);
        for (name, value) in &f.params {
            cc.set_parameter(name, *value)
                .map_err(|source| ScenarioError::Parameter {
                    flow: f.label.clone(),
                    source,
                })?;
        }
        for &(at, p) in &f.schedule {
            check(
                at >= f.start && at < cfg.duration,
                &field("schedule"),
                "times from the flow's start to the end of the run",
            )?;
            cc.set_parameter("priority", p)
                .map_err(|source| ScenarioError::Parameter {
                    flow: f.label.clone(),
                    source,
                })?;
        }
    }
    Ok(())
}

/// Per-connection transport: the defaults with the flow's controller, a
/// send buffer of twice what the path can hold (bandwidth × (RTT + 1 s)),
/// so the sender is never application-limited yet a stopped flow drains
/// quickly, datagrams that fit the path MTU, and timeouts as long as the
/// run.
pub fn transport_config(cfg: &ScenarioConfig, cc: Option<CcAlgorithm>) -> TransportConfig {
    let mut t = TransportConfig {
        congestion_control: cc.unwrap_or_default(),
        handshake_timeout: cfg.duration + Duration::from_secs(60),
        idle_timeout: cfg.duration + Duration::from_secs(60),
        ..TransportConfig::default()
    };
    if let Some(rate) = cfg.link.rate() {
        let holds =
            rate.bytes_per_sec_f64() * (cfg.link.rtt() + Duration::from_secs(1)).as_secs_f64();
        t.send_buffer = ((2.0 * holds) as u64).clamp(256 << 10, 64 << 20);
    }
    let mtu = cfg
        .link
        .params(Direction::AToB)
        .mtu
        .into_iter()
        .chain(cfg.link.params(Direction::BToA).mtu)
        .min();
    if let Some(mtu) = mtu {
        let fit = (mtu as usize).saturating_sub(IPV4_UDP_OVERHEAD);
        t.max_datagram_size = t
            .max_datagram_size
            .min(u16::try_from(fit).unwrap_or(u16::MAX))
            .max(TransportConfig::MIN_DATAGRAM_SIZE);
    }
    t
}

/// Edges of the throughput bins: 0, `bin`, 2·`bin`, ... up to the duration.
pub fn bin_edges(cfg: &ScenarioConfig) -> Vec<Duration> {
    let mut v = Vec::new();
    let mut t = Duration::ZERO;
    while t <= cfg.duration {
        v.push(t);
        t += cfg.bin;
    }
    v
}

fn forward_stats(sim: &Simulator<Host>) -> LinkStats {
    sim.link_stats(client_addr().ip(), server_addr().ip())
        .copied()
        .unwrap_or_default()
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_at_follows_the_schedule() {
        let mut f = FlowSpec::dtl("x", 0.0, Duration::ZERO);
        f.schedule = vec![
            (Duration::from_secs(10), 1.0),
            (Duration::from_secs(20), 2.0),
        ];
        assert_eq!(f.priority_at(Duration::from_secs(5)), Some(0.0));
        assert_eq!(f.priority_at(Duration::from_secs(10)), Some(1.0));
        assert_eq!(f.priority_at(Duration::from_secs(25)), Some(2.0));
        assert_eq!(
            FlowSpec::new("t", CcAlgorithm::Cubic, Duration::ZERO).priority_at(Duration::ZERO),
            None
        );
        assert_eq!(
            FlowSpec::new("p", CcAlgorithm::Priority, Duration::ZERO).priority_at(Duration::ZERO),
            Some(1.0)
        );
    }

    #[test]
    fn bad_configs_name_the_field() {
        let opts = ScenarioOptions::default();
        let err = |f: fn(&mut ScenarioConfig)| {
            let mut c = polite(&opts).unwrap();
            f(&mut c);
            run(&c).unwrap_err().to_string()
        };
        assert!(err(|c| c.flows.clear()).contains("`flows`"));
        assert!(err(|c| c.bin = Duration::ZERO).contains("`bin`"));
        assert!(err(|c| c.phases[0].end = Duration::from_secs(1000)).contains("`phases.alone`"));
        assert!(err(|c| c.flows[1].stop = Some(Duration::ZERO)).contains("`flows.tcp.stop`"));
        let e = err(|c| c.flows[0].params.push(("priority".into(), -1.0)));
        assert!(
            e.contains("flow `ledbat`") && e.contains("`priority`"),
            "{e}"
        );
        let e = err(|c| c.flows[1].schedule.push((Duration::from_secs(50), 1.0)));
        assert!(
            e.contains("flow `tcp`") && e.contains("no parameter `priority`"),
            "{e}"
        );
        let bad = ScenarioOptions {
            scale: 0.0,
            ..ScenarioOptions::default()
        };
        assert!(polite(&bad).unwrap_err().to_string().contains("`scale`"));
        let bad = ScenarioOptions {
            ns: vec![-1.0],
            ..ScenarioOptions::default()
        };
        assert!(scenarios("multcp", &bad)
            .unwrap_err()
            .to_string()
            .contains("`ns`"));
        // p = 0 against TCP is polite, not MulTCP(0); a pair at 0 is fine.
        let zero = ScenarioOptions {
            ns: vec![0.0],
            ..ScenarioOptions::default()
        };
        assert!(scenarios("multcp", &zero)
            .unwrap_err()
            .to_string()
            .contains("`n`"));
        assert_eq!(scenarios("versus", &zero).unwrap()[0].name, "polite");
        assert_eq!(scenarios("pair", &zero).unwrap()[0].name, "multcp_pair_0");
        assert!(scenarios("nope", &opts)
            .unwrap_err()
            .to_string()
            .contains("polite, latecomer"));
    }
}
