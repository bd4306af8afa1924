//! The ECA rule runtime of a Node (issue 20 item 2; seed 001 §6.3, Fossa's
//! "event processing unit ... only relevant monitoring values are
//! collected").
//!
//! A node given a rule set ([`crate::Node::set_rules`]) runs one
//! [`braid_rules::Engine`] per destination it sends to. The engine's
//! vocabulary ([`vocabulary`]) is what the node can monitor per destination
//! and what it can change (its actuators, [`crate::adapt`]):
//!
//! | name | kind | source |
//! |---|---|---|
//! | `rtt` | metric, time | smoothed RTT of the destination's Braid connections (the largest) |
//! | `loss` | metric, ratio | packets lost / packets sent by them since the last sample |
//! | `throughput` | metric, bit rate | stream bytes they had acknowledged since the last sample, per second |
//! | `backlog` | metric, bytes | stream bytes sent and not yet acknowledged |
//! | `sent`, `received` | events | a message to / from the destination |
//! | `closed` | event | a Braid connection to the destination ended |
//! | `transport` | choice | the transports the node runs (not `data`) |
//! | `cc` | choice | the congestion controllers (`ledbat++` spelled `ledbat_pp`) |
//! | `priority` | number 0..100 | DTL's priority |
//! | `scheduler` | choice | the shipped ProgMP schedulers |
//! | `register R1..R6` | integer | scheduler registers |
//!
//! Only what the rules read is collected: a metric no rule uses is never
//! sampled and an event no rule counts is never recorded (the engine
//! says which, [`braid_rules::Engine::wants_metric`]). Metrics are sampled
//! on a timer ([`RulesConfig::interval`]); the engine is evaluated then and
//! when its next window boundary passes ([`braid_rules::Engine::next_deadline`]).
//! Events are recorded as they happen; a lost connection (`closed`) is
//! evaluated at once, message events count at the next evaluation (so a
//! message never pays for one).
//! An action is applied through the actuators; a value the engine rejects
//! or an actuator refuses is counted in [`RuleStats`] and logged, never a
//! panic. State is bounded: one engine per destination (at most
//! [`RulesConfig::max_destinations`]), each bounded by its rule set.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_net::CcAlgorithm;
use braid_rules::{ActionKind, Dimension, Engine, EngineConfig, EventId, MetricId, Outcome, RuleSet, TargetId, Value, Vocabulary};
use serde::Serialize;

use crate::adapt::{scheduler_names, ActuatorError, Actuators, MAX_PRIORITY};
use crate::Transport;

/// How the rule runtime samples and how much state it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RulesConfig {
    /// Metrics are sampled, and the rules evaluated, this often. Default
    /// 100 ms. From 1 ms to 1 hour.
    pub interval: Duration,
    /// Buckets per sliding window (the engine's resolution is `window /
    /// buckets`). Default 16; 1 to 1024.
    pub buckets: usize,
    /// Destinations with an engine of their own; messages to further ones
    /// are sent as usual but not adapted. Default 1024; at least 1.
    pub max_destinations: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig { interval: Duration::from_millis(100), buckets: 16, max_destinations: 1024 }
    }
}

/// Why a rule set was not installed.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The rules do not parse or type-check against the node's vocabulary.
    #[error("rules: {0}")]
    Rules(#[from] braid_rules::RuleError),
    /// The engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] braid_rules::EngineError),
    /// A configuration value outside its allowed range.
    #[error("rules config `{field}` must be {expected}, got {got}")]
    Config {
        /// The field.
        field: &'static str,
        /// The allowed form.
        expected: &'static str,
        /// The value given.
        got: String,
    },
}

/// Counters of the rule runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RuleStats {
    /// Evaluations (one per destination per evaluation round).
    pub evaluations: u64,
    /// Actions applied.
    pub applied: u64,
    /// Actions whose computed value the engine rejected (out of range).
    pub rejected: u64,
    /// Actions an actuator refused (for example a transport the node does
    /// not run, or a Braid connection that refused the change).
    pub failed: u64,
    /// Destinations with an engine now.
    pub destinations: u64,
}

/// One applied action, as reported by [`crate::Node::rule_log`]: what a
/// rule set changed, for time series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppliedAction {
    /// Time since the rules were installed.
    pub at: Duration,
    /// The destination.
    pub destination: SocketAddr,
    /// The target's name (`transport`, `priority`, `R1`).
    pub target: String,
    /// The value, as text (`tcp`, `2`).
    pub value: String,
    /// The rule that fired (index in the rule set).
    pub rule: usize,
}

/// The congestion controllers under rule-safe names (`ledbat++` is not an
/// identifier).
fn cc_names() -> Vec<&'static str> {
    CcAlgorithm::ALL.iter().map(|a| if *a == CcAlgorithm::LedbatPlusPlus { "ledbat_pp" } else { a.as_str() }).collect()
}

/// The transports a rule may choose on a node running `runs`.
fn choosable(runs: &[Transport]) -> Vec<Transport> {
    runs.iter().copied().filter(|t| *t != Transport::Data).collect()
}

/// The vocabulary rules on a node running `transports` are checked
/// against (see the module table). Ranges are the plausible intervals the
/// learner draws constants from.
pub fn vocabulary(transports: &[Transport]) -> Vocabulary {
    let names: Vec<&str> = choosable(transports).iter().map(|t| t.name()).collect();
    let mut v = Vocabulary::new()
        .metric("rtt", Dimension::Time, 0.0, 2.0)
        .metric("loss", Dimension::Ratio, 0.0, 0.3)
        .metric("throughput", Dimension::Bitrate, 0.0, 10e9)
        .metric("backlog", Dimension::Bytes, 0.0, 64e6)
        .event("sent")
        .event("received")
        .event("closed")
        .choice(ActionKind::Set, "transport", &names)
        .choice(ActionKind::Set, "cc", &cc_names())
        .number(ActionKind::Set, "priority", Dimension::Count, 0.0, MAX_PRIORITY, false)
        .choice(ActionKind::Set, "scheduler", &scheduler_names());
    for r in 1..=6 {
        // Registers are i64; ±2^53 keeps every value exact in the f64 the
        // engine computes in.
        let limit = 9_007_199_254_740_992.0;
        v = v.number(ActionKind::Register, &format!("R{r}"), Dimension::Count, -limit, limit, true);
    }
    v
}

#[derive(Clone, Copy)]
struct Ids {
    rtt: MetricId,
    loss: MetricId,
    throughput: MetricId,
    backlog: MetricId,
    sent: EventId,
    received: EventId,
    closed: EventId,
}

/// What a target of the vocabulary drives.
#[derive(Clone, Debug)]
enum Actuator {
    Transport(Vec<Transport>),
    Cc,
    Priority,
    Scheduler(Vec<&'static str>),
    Register(u8),
}

/// A destination event the node reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeEvent {
    Sent,
    Received,
    Closed,
}

struct Dest {
    engine: Engine,
    /// Braid counters at the last sample: (time, packets sent, packets
    /// lost, stream bytes acknowledged).
    last: Option<(std::time::Instant, u64, u64, u64)>,
}

/// A node's installed rule set and its engines.
pub(crate) struct Runtime {
    template: Engine,
    vocab: Vocabulary,
    config: RulesConfig,
    ids: Ids,
    actuators: Vec<Actuator>,
    runs: Vec<Transport>,
    dests: HashMap<SocketAddr, Dest>,
    epoch: std::time::Instant,
    stats: RuleStats,
    log: Vec<AppliedAction>,
}

/// Applied actions kept for [`crate::Node::rule_log`]; older ones are
/// dropped (a rule set that flaps cannot grow memory without bound).
const LOG_LIMIT: usize = 4096;

impl Runtime {
    pub(crate) fn new(rules: &RuleSet, runs: &[Transport], config: RulesConfig) -> Result<Runtime, RulesError> {
        let interval_ok = config.interval >= Duration::from_millis(1) && config.interval <= Duration::from_secs(3600);
        if !interval_ok {
            return Err(RulesError::Config { field: "interval", expected: "1 ms to 1 hour", got: format!("{:?}", config.interval) });
        }
        if config.max_destinations == 0 {
            return Err(RulesError::Config { field: "max_destinations", expected: "at least 1", got: "0".into() });
        }
        let vocab = vocabulary(runs);
        let template = Engine::new(rules, &vocab, EngineConfig { buckets: config.buckets })?;
        let m = |n: &str| vocab.metric_id(n).unwrap_or(MetricId(usize::MAX));
        let e = |n: &str| vocab.event_id(n).unwrap_or(EventId(usize::MAX));
        let ids = Ids {
            rtt: m("rtt"),
            loss: m("loss"),
            throughput: m("throughput"),
            backlog: m("backlog"),
            sent: e("sent"),
            received: e("received"),
            closed: e("closed"),
        };
        let actuators = vocab
            .targets()
            .iter()
            .map(|t| match (t.kind, t.name.as_str()) {
                (ActionKind::Set, "transport") => Actuator::Transport(choosable(runs)),
                (ActionKind::Set, "cc") => Actuator::Cc,
                (ActionKind::Set, "priority") => Actuator::Priority,
                (ActionKind::Set, "scheduler") => Actuator::Scheduler(scheduler_names()),
                (_, name) => Actuator::Register(name.trim_start_matches('R').parse().unwrap_or(0)),
            })
            .collect();
        Ok(Runtime {
            template,
            vocab,
            config,
            ids,
            actuators,
            runs: runs.to_vec(),
            dests: HashMap::new(),
            epoch: std::time::Instant::now(),
            stats: RuleStats::default(),
            log: Vec::new(),
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn dest(&mut self, dst: SocketAddr) -> Option<&mut Dest> {
        if !self.dests.contains_key(&dst) {
            if self.dests.len() >= self.config.max_destinations {
                return None;
            }
            self.dests.insert(dst, Dest { engine: self.template.clone(), last: None });
        }
        self.dests.get_mut(&dst)
    }

    /// An event concerning `dst`; destinations get their engine on their
    /// first event.
    pub(crate) fn event(&mut self, dst: SocketAddr, ev: NodeEvent) {
        let id = match ev {
            NodeEvent::Sent => self.ids.sent,
            NodeEvent::Received => self.ids.received,
            NodeEvent::Closed => self.ids.closed,
        };
        let now = self.now();
        if let Some(d) = self.dest(dst) {
            if d.engine.wants_event(id) {
                d.engine.event(now, id);
            }
        }
    }

    /// When the next evaluation is due: the timer, or a window boundary
    /// before it.
    pub(crate) fn next_wake(&self) -> std::time::Instant {
        let timer = std::time::Instant::now() + self.config.interval;
        let window = self
            .dests
            .values()
            .filter_map(|d| d.engine.next_deadline())
            .min()
            .map(|t| self.epoch + Duration::from_nanos(t.as_nanos()));
        window.map_or(timer, |w| w.min(timer))
    }

    /// Samples every destination's metrics, evaluates its engine and
    /// applies what it asks for. Returns the number of actions applied.
    pub(crate) fn tick(&mut self, actuators: &Actuators) -> usize {
        let now = self.now();
        let wall = std::time::Instant::now();
        let ids = self.ids;
        let mut todo: Vec<(SocketAddr, Outcome)> = Vec::new();
        for (&dst, d) in self.dests.iter_mut() {
            sample(d, &ids, now, wall, &actuators.connections(dst));
            todo.extend(d.engine.evaluate(now).iter().cloned().map(|o| (dst, o)));
            self.stats.evaluations += 1;
        }
        let mut applied = 0;
        for (dst, o) in todo {
            match o {
                Outcome::Apply { rule, target, value } => match self.apply(actuators, dst, target, value) {
                    Ok((name, text)) => {
                        applied += 1;
                        self.stats.applied += 1;
                        tracing::debug!(%dst, rule, target = %name, value = %text, "rule applied");
                        if self.log.len() >= LOG_LIMIT {
                            self.log.remove(0);
                        }
                        self.log.push(AppliedAction { at: self.epoch.elapsed(), destination: dst, target: name, value: text, rule });
                    }
                    Err(e) => {
                        self.stats.failed += 1;
                        tracing::warn!(%dst, rule, error = %e, "rule action refused");
                    }
                },
                Outcome::Rejected { rule, reason, .. } => {
                    self.stats.rejected += 1;
                    tracing::warn!(%dst, rule, %reason, "rule action rejected");
                }
            }
        }
        applied
    }

    fn apply(&self, actuators: &Actuators, dst: SocketAddr, target: TargetId, value: Value) -> Result<(String, String), ActuatorError> {
        let name = self.vocab.target_decl(target).map(|t| t.name.clone()).unwrap_or_default();
        let bad = |expected: &str, got: String| ActuatorError::Invalid { field: "rule action", expected: expected.to_string(), got };
        let act = self.actuators.get(target.0).ok_or_else(|| bad("a target of the node's vocabulary", format!("{target:?}")))?;
        let text = match (act, value) {
            (Actuator::Transport(ts), Value::Choice(i)) => {
                let t = *ts.get(i).ok_or_else(|| bad("a transport index", i.to_string()))?;
                actuators.set_transport(dst, Some(t), &self.runs)?;
                t.to_string()
            }
            (Actuator::Cc, Value::Choice(i)) => {
                let cc = *CcAlgorithm::ALL.get(i).ok_or_else(|| bad("a controller index", i.to_string()))?;
                actuators.set_congestion_control(dst, cc)?;
                cc.to_string()
            }
            (Actuator::Priority, Value::Number(p)) => {
                actuators.set_priority(dst, p)?;
                p.to_string()
            }
            (Actuator::Scheduler(names), Value::Choice(i)) => {
                let n = *names.get(i).ok_or_else(|| bad("a scheduler index", i.to_string()))?;
                actuators.set_scheduler(dst, n)?;
                n.to_string()
            }
            (Actuator::Register(r), Value::Number(v)) => {
                // In range by the vocabulary (|v| <= 2^53, whole).
                actuators.set_register(dst, *r, v as i64)?;
                (v as i64).to_string()
            }
            (a, v) => return Err(bad("a value of the target's kind", format!("{v:?} for {a:?}"))),
        };
        Ok((name, text))
    }

    pub(crate) fn stats(&self) -> RuleStats {
        RuleStats { destinations: self.dests.len() as u64, ..self.stats }
    }

    pub(crate) fn log(&self) -> &[AppliedAction] {
        &self.log
    }
}

/// Feeds the engine of one destination the metrics it reads, from its
/// Braid connections.
fn sample(d: &mut Dest, ids: &Ids, now: Instant, wall: std::time::Instant, conns: &[braid_net::Connection]) {
    let e = &d.engine;
    let wants = [ids.rtt, ids.loss, ids.throughput, ids.backlog].map(|m| e.wants_metric(m));
    if !wants.iter().any(|w| *w) || conns.is_empty() {
        return;
    }
    let (mut rtt, mut sent_pkts, mut lost, mut acked, mut sent_bytes) = (Duration::ZERO, 0u64, 0u64, 0u64, 0u64);
    for c in conns {
        let s = c.stats();
        rtt = rtt.max(s.smoothed_rtt);
        sent_pkts += s.packets_sent;
        lost += s.packets_lost;
        acked += s.stream_bytes_acked;
        sent_bytes += c.paths().iter().map(|p| p.stream_bytes_sent).sum::<u64>();
    }
    if wants[0] && !rtt.is_zero() {
        d.engine.sample(now, ids.rtt, rtt.as_secs_f64());
    }
    if wants[3] {
        d.engine.sample(now, ids.backlog, sent_bytes.saturating_sub(acked) as f64);
    }
    if let Some((t, s0, l0, a0)) = d.last {
        let secs = wall.saturating_duration_since(t).as_secs_f64();
        let ds = sent_pkts.saturating_sub(s0);
        if wants[1] && ds > 0 {
            d.engine.sample(now, ids.loss, lost.saturating_sub(l0) as f64 / ds as f64);
        }
        if wants[2] && secs > 0.0 {
            d.engine.sample(now, ids.throughput, acked.saturating_sub(a0) as f64 * 8.0 / secs);
        }
    }
    d.last = Some((wall, sent_pkts, lost, acked));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_is_valid_for_every_transport_set() {
        for runs in [vec![Transport::Tcp, Transport::Braid], Transport::ALL.to_vec(), vec![Transport::Exon]] {
            vocabulary(&runs).validate().unwrap();
        }
    }

    #[test]
    fn rules_over_the_node_vocabulary_check_and_bad_ones_name_the_problem() {
        let runs = [Transport::Tcp, Transport::Braid];
        let v = vocabulary(&runs);
        let ok = "on every match\n  avg(rtt, 2s) > 50ms: set transport = tcp;\n  count(closed, 10s) > 2: set cc = ledbat_pp;\n  rate(sent, 1s) > 100/s: set priority = 2;\n  true: set register R1 = 500;";
        let rules = braid_rules::compile(ok, &v).unwrap();
        Runtime::new(&rules, &runs, RulesConfig::default()).unwrap();
        let e = braid_rules::compile("on every match\n  true: set transport = exon;", &v).unwrap_err();
        assert!(e.to_string().contains("exon"), "{e}");
        let e = braid_rules::compile("on every match\n  avg(rtt, 2s) > 5%: set transport = tcp;", &v).unwrap_err();
        assert!(!e.to_string().is_empty());
        let e = Runtime::new(&rules, &runs, RulesConfig { interval: Duration::ZERO, ..RulesConfig::default() }).err().unwrap();
        assert!(e.to_string().contains("interval"), "{e}");
    }

    #[test]
    fn a_rule_applies_through_the_actuators_and_bad_values_are_counted() {
        let runs = [Transport::Tcp, Transport::Braid];
        let v = vocabulary(&runs);
        let dst: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let src = "on every match\n  count(sent, 10s) > 2: set transport = tcp;\n  count(sent, 10s) > 0: set priority = count(sent, 10s) * 40;";
        let rules = braid_rules::compile(src, &v).unwrap();
        let mut rt = Runtime::new(&rules, &runs, RulesConfig::default()).unwrap();
        let act = Actuators::default();
        rt.event(dst, NodeEvent::Sent);
        assert_eq!(rt.tick(&act), 1, "priority 40 applied");
        assert_eq!(act.braid_settings(dst).priority, Some(40.0));
        assert_eq!(act.transport_for(dst), None);
        rt.event(dst, NodeEvent::Sent);
        rt.event(dst, NodeEvent::Sent);
        // Three sends: transport tcp; priority 120 is out of range.
        assert_eq!(rt.tick(&act), 1);
        assert_eq!(act.transport_for(dst), Some(Transport::Tcp));
        let s = rt.stats();
        assert_eq!((s.applied, s.rejected, s.failed, s.destinations), (2, 1, 0, 1));
        assert_eq!(rt.log().last().map(|a| a.value.as_str()), Some("tcp"));
    }

    #[test]
    fn destinations_are_bounded() {
        let runs = [Transport::Tcp, Transport::Braid];
        let rules = braid_rules::compile("on every match\n  count(sent, 1s) > 0: set transport = tcp;", &vocabulary(&runs)).unwrap();
        let mut rt = Runtime::new(&rules, &runs, RulesConfig { max_destinations: 2, ..RulesConfig::default() }).unwrap();
        for p in 0..10u16 {
            rt.event(SocketAddr::from(([127, 0, 0, 1], 4000 + p)), NodeEvent::Sent);
        }
        assert_eq!(rt.stats().destinations, 2);
    }
}
