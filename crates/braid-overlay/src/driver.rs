//! The tokio driver of one overlay member: a Braid [`Node`] carrying the
//! membership protocol's messages, a timer, and the TARL engine evaluated
//! on the member's view on the timer and after topology changes
//! ([`EvalTrigger`]).
//!
//! Transports: membership heartbeats on one transport, link sessions on
//! another (default Braid and TCP), so a link's channel in the node carries
//! the link's traffic only: once a link is gone (closed here or by the
//! peer), the driver closes the node's link channels to that peer
//! ([`Node::close_channels_to`]) after queueing the `Unlink`, which they
//! still carry.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use braid_core::Instant;
use braid_node::{BasicAddress, BasicHeader, Message, Node, NodeConfig, NodeError, Transport};
use braid_tarl::{Engine, EvalTrigger, NodeId, RuleOutcome};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, MembershipConfig};
use crate::membership::{Lane, LinkInfo, Membership, MembershipStats};
use crate::msg::OverlayMsg;

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// A configuration field is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Braid node could not start.
    #[error("braid node: {0}")]
    Node(#[from] NodeError),
    /// The engine's rules were checked against another schema.
    #[error("the engine's rules were compiled against another schema than the overlay's (use overlay_schema)")]
    Schema,
    /// The transports the lanes use must be enabled and ordered.
    #[error("invalid transport for `{lane}`: {why}")]
    Transport {
        /// `membership_transport` or `link_transport`.
        lane: &'static str,
        /// What is required.
        why: &'static str,
    },
}

/// Everything one member needs.
#[derive(Clone, Debug)]
pub struct OverlayConfig {
    /// The membership protocol.
    pub membership: MembershipConfig,
    /// The Braid node (transports, security, channel idle timeout).
    pub node: NodeConfig,
    /// Transport of heartbeats.
    pub membership_transport: Transport,
    /// Transport of link sessions (ordered: TCP or Braid).
    pub link_transport: Transport,
    /// Evaluate the rules at least this often.
    pub eval_period: Duration,
    /// ... and this long after the view changed (debounce).
    pub eval_hold_off: Duration,
}

impl OverlayConfig {
    /// Membership over Braid, links over TCP, rules every second and 100 ms
    /// after a change; the node's channels close after 2 s idle (a removed
    /// link's channel is closed at once; this is for channels that only
    /// answered a member this one forgot).
    pub fn new(membership: MembershipConfig, node: NodeConfig) -> Self {
        OverlayConfig {
            membership,
            node: NodeConfig {
                idle_timeout: Duration::from_secs(2),
                ..node
            },
            membership_transport: Transport::Braid,
            link_transport: Transport::Tcp,
            eval_period: Duration::from_secs(1),
            eval_hold_off: Duration::from_millis(100),
        }
    }
}

/// Counters of the rule engine at one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Evaluations run.
    pub evaluations: u64,
    /// Actions that changed the topology.
    pub changes: u64,
    /// Evaluations a rule was cut off by the budget in.
    pub cutoffs: u64,
    /// The latest cut-off: the rule and the budget it exhausted (its
    /// actions were not run). Kept apart from `failures`: the rule is
    /// valid, the view too large for the budget.
    pub last_cutoff: Option<String>,
    /// The last few failures (evaluation errors, refused actions), rendered.
    pub failures: Vec<String>,
    /// Messages the node refused to send.
    pub send_errors: u64,
}

const MAX_FAILURES: usize = 16;

/// What one member holds now.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The member's id.
    pub id: NodeId,
    /// Candidate neighbours.
    pub candidates: Vec<NodeId>,
    /// Link sessions in any state.
    pub links: Vec<(NodeId, LinkInfo)>,
    /// Links open and kept alive now.
    pub open_links: Vec<NodeId>,
    /// Measured round-trip times to the candidates that have one.
    pub rtts: Vec<(NodeId, Duration)>,
    /// Protocol counters.
    pub membership: MembershipStats,
    /// Engine counters.
    pub engine: EngineStats,
}

struct Shared {
    state: Mutex<Membership>,
    engine_stats: Mutex<EngineStats>,
    start: tokio::time::Instant,
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn state(&self) -> MutexGuard<'_, Membership> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, EngineStats> {
        self.engine_stats.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One running overlay member.
pub struct OverlayNode {
    node: Node<BasicHeader>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl OverlayNode {
    /// Binds a Braid node at `bind` and runs the member with `engine`'s
    /// rules (compiled against [`crate::overlay_schema`]).
    ///
    /// # Errors
    /// Configuration out of range, a node that cannot bind, an engine for
    /// another schema.
    pub async fn start(
        bind: SocketAddr,
        config: OverlayConfig,
        engine: Engine,
    ) -> Result<OverlayNode, OverlayError> {
        config.membership.validate()?;
        let probe = Membership::new(config.membership.clone(), bind)?;
        if engine.evaluate(&probe, config.membership.id).reports.iter().any(|r| {
            matches!(
                r.outcome,
                RuleOutcome::Failed(braid_tarl::EvalError::SchemaMismatch)
            )
        }) {
            return Err(OverlayError::Schema);
        }
        for (lane, t) in [
            ("membership_transport", config.membership_transport),
            ("link_transport", config.link_transport),
        ] {
            if !config.node.transports.contains(&t) {
                return Err(OverlayError::Transport {
                    lane,
                    why: "must be one of the node's transports",
                });
            }
        }
        if !matches!(config.link_transport, Transport::Tcp | Transport::Braid) {
            return Err(OverlayError::Transport {
                lane: "link_transport",
                why: "must be ordered per destination: tcp or braid",
            });
        }
        let node: Node<BasicHeader> = Node::bind(bind, config.node.clone()).await?;
        let state = Membership::new(config.membership.clone(), node.local_addr())?;
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            engine_stats: Mutex::new(EngineStats::default()),
            start: tokio::time::Instant::now(),
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(node.clone(), shared.clone(), config, engine, stopped));
        Ok(OverlayNode {
            node,
            shared,
            stop,
            task,
        })
    }

    /// The member's node address (IP and base port).
    pub fn addr(&self) -> SocketAddr {
        self.node.local_addr()
    }

    /// The Braid node underneath.
    pub fn node(&self) -> &Node<BasicHeader> {
        &self.node
    }

    /// What the member holds now.
    pub fn snapshot(&self) -> Snapshot {
        let now = self.shared.now();
        let s = self.shared.state();
        Snapshot {
            id: s.id(),
            candidates: s.candidates(),
            links: s.links(),
            open_links: s.open_links(now),
            rtts: s.candidates().into_iter().filter_map(|c| s.rtt(c).map(|r| (c, r))).collect(),
            membership: s.stats(),
            engine: self.shared.stats().clone(),
        }
    }

    /// Stops the member and closes its node.
    pub async fn close(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
        self.node.close().await;
    }
}

async fn run(
    node: Node<BasicHeader>,
    shared: Arc<Shared>,
    config: OverlayConfig,
    engine: Engine,
    mut stopped: watch::Receiver<bool>,
) {
    let me = BasicAddress::new(node.local_addr());
    let id = config.membership.id;
    let mut trigger = EvalTrigger::new(config.eval_period, config.eval_hold_off);
    // Timers run at a quarter heartbeat: heartbeats are due at most that late.
    let tick_every = (config.membership.heartbeat / 4).max(Duration::from_millis(5));
    let mut linked: HashMap<NodeId, SocketAddr> = HashMap::new();
    let mut ticker = tokio::time::interval(tick_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            m = node.recv() => {
                let Some(m) = m else { break };
                let src = m.header().src.socket;
                match m.decode::<OverlayMsg>() {
                    Ok((_, msg)) => shared.state().handle(shared.now(), src, msg),
                    Err(e) => tracing::debug!(%src, error = %e, "not an overlay message"),
                }
            }
            _ = ticker.tick() => {
                let now = shared.now();
                let mut state = shared.state();
                state.tick(now);
                if state.take_changed() {
                    trigger.topology_changed(now);
                }
                if trigger.due(now) {
                    trigger.evaluated(now);
                    let eval = engine.evaluate(&*state, id);
                    let applied = engine.apply(&mut *state, &eval);
                    let mut st = shared.stats();
                    st.evaluations += 1;
                    st.changes += applied.changed as u64;
                    for r in &eval.reports {
                        match &r.outcome {
                            RuleOutcome::CutOff(e) => {
                                st.cutoffs += 1;
                                let what = format!("{}: {e}", r.rule);
                                // Warn when it differs from the last one only: a rule cut off on a view is cut off again every period until the view shrinks.
                                if st.last_cutoff.as_ref() != Some(&what) {
                                    tracing::warn!(node = %id, cutoff = %what, "rule cut off by the evaluation budget; no actions run");
                                }
                                st.last_cutoff = Some(what);
                            }
                            RuleOutcome::Failed(e) => push_failure(&mut st, format!("{}: {e}", r.rule)),
                            RuleOutcome::Matched(_) => {}
                        }
                    }
                    for (a, e) in &applied.failed {
                        push_failure(&mut st, format!("{:?}: {e}", a.change));
                    }
                }
            }
        }
        let (out, changed) = {
            let mut s = shared.state();
            (s.drain_outbox(), s.take_changed())
        };
        if changed {
            trigger.topology_changed(shared.now());
        }
        for o in out {
            let transport = match o.lane {
                Lane::Membership => config.membership_transport,
                Lane::Link => config.link_transport,
            };
            let h = BasicHeader::new(me, BasicAddress::new(o.to), transport);
            if node.send(Message::typed(h, o.msg)).await.is_err() {
                shared.stats().send_errors += 1;
            }
        }
        close_unlinked(&node, &shared, config.link_transport, &mut linked);
    }
}

/// Close the link channels to peers whose link is gone since the last
/// call (`linked` holds the links then, with their addresses: a forgotten
/// peer's address is no longer in the membership state).
fn close_unlinked(
    node: &Node<BasicHeader>,
    shared: &Shared,
    transport: Transport,
    linked: &mut HashMap<NodeId, SocketAddr>,
) {
    let now: HashMap<NodeId, SocketAddr> = {
        let s = shared.state();
        s.links()
            .into_iter()
            .filter_map(|(id, _)| s.addr(id).or_else(|| linked.get(&id).copied()).map(|a| (id, a)))
            .collect()
    };
    for (id, addr) in linked.iter() {
        if !now.contains_key(id) && !now.values().any(|a| a == addr) {
            node.close_channels_to(*addr, transport);
        }
    }
    *linked = now;
}

fn push_failure(st: &mut EngineStats, f: String) {
    if st.failures.len() >= MAX_FAILURES {
        st.failures.remove(0);
    }
    st.failures.push(f);
}
