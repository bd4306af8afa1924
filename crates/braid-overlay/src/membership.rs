//! The membership protocol and overlay link sessions of one member, as a
//! sans-IO state machine that is also the member's TARL topology provider
//! (Frömmgen 2018, §7.2: the provider monitors the topology and executes
//! actions).
//!
//! Membership (a heartbeat protocol with rendezvous and gossip): every
//! heartbeat a member sends its `State` (position, neighbour lists, measured
//! delays, and the peers it knows nearest to the receiver) to each candidate
//! neighbour and linked peer, and every `seed_every` heartbeats to the seeds.
//! A member answers a `State` from someone it does not send to (once per
//! heartbeat), so a seed tells every newcomer who is near it. Gossip carries
//! each peer's age (time since someone heard it directly) so it cannot keep
//! a dead peer alive: a peer unheard for `peer_timeout` is forgotten.
//!
//! Links (one session per linked peer and topology `Ctrl`): `Link` opens,
//! `LinkAck` confirms or refuses, `Unlink` closes, `Keepalive` every
//! heartbeat keeps it; a link without keepalives for `link_timeout` is
//! closed, a keepalive for a link the receiver does not hold is answered by
//! `Unlink`. All link messages travel on one ordered transport, so a
//! session's messages arrive in the order they were sent. A member that
//! closed a link keeps a tombstone, so the initial-topology policy never
//! reopens it (a rule may).
//!
//! Bounds: at most `max_peers` peers, links and tombstones; lists and
//! delays in a received `State` are cut to `max_peers`, gossip to
//! `max_gossip`; messages that break the rules (wrong list count,
//! non-finite positions, an id claimed from another address) are dropped
//! and counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_tarl::value::dist;
use braid_tarl::{ActionError, AttrId, Change, NodeId, Schema, TopoId, TopologyProvider, Value};

use crate::config::{
    overlay_schema, ConfigError, InitialLinks, MembershipConfig, WeightSource, ATTR_DELAY,
    ATTR_ID, ATTR_POS, ATTR_WEIGHT, TOPO_CTRL, TOPO_PHYS,
};
use crate::msg::{Echo, Lists, OverlayMsg, PeerRecord, State};

/// Which kind of traffic a message is: the driver maps each to a transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Heartbeats and gossip.
    Membership,
    /// A link session's messages (must be one ordered transport).
    Link,
}

/// A message the member wants sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    /// The receiver's node address.
    pub to: SocketAddr,
    /// Its lane.
    pub lane: Lane,
    /// The message.
    pub msg: OverlayMsg,
}

/// A link session's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// `Link` sent, no answer yet.
    Opening,
    /// Both ends hold the link.
    Open,
}

/// One overlay link as this member holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// This member -> peer exists.
    pub out: bool,
    /// Peer -> this member exists.
    pub inn: bool,
    /// Session state.
    pub state: LinkState,
    /// When it was opened or last heard from.
    pub last_rx: Instant,
}

#[derive(Clone, Debug)]
struct Peer {
    addr: SocketAddr,
    pos: (f64, f64),
    last_heard: Instant,
    /// Neighbour lists it reported (sorted), once heard directly.
    lists: Option<Vec<(Vec<NodeId>, Vec<NodeId>)>>,
    /// Its one-way delay estimates, microseconds.
    delays: BTreeMap<u64, u64>,
    /// Smoothed round-trip time.
    rtt: Option<Duration>,
    /// Its last stamp and when it arrived (to echo).
    their_stamp: Option<(u64, Instant)>,
    /// When a `State` was last sent to it.
    last_sent: Option<Instant>,
}

/// Counters of one member's protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Messages handled.
    pub received: u64,
    /// Messages queued for sending.
    pub sent: u64,
    /// Messages dropped as malformed or inconsistent.
    pub dropped: u64,
    /// Peers forgotten after `peer_timeout`.
    pub peers_expired: u64,
    /// Links closed after `link_timeout`.
    pub links_expired: u64,
}

/// One member's membership and link state (see the module comment).
#[derive(Clone, Debug)]
pub struct Membership {
    cfg: MembershipConfig,
    schema: Schema,
    addr: SocketAddr,
    peers: BTreeMap<u64, Peer>,
    by_addr: HashMap<SocketAddr, u64>,
    phys: BTreeSet<u64>,
    links: BTreeMap<u64, LinkInfo>,
    tombstones: BTreeSet<u64>,
    auto_done: BTreeSet<u64>,
    outbox: Vec<Outgoing>,
    changed: bool,
    last_heartbeat: Option<Instant>,
    heartbeats: u64,
    stats: MembershipStats,
    /// The time of the last `handle` or `tick`.
    now: Instant,
}

fn ids(s: impl IntoIterator<Item = u64>) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = s.into_iter().map(NodeId).collect();
    v.sort();
    v.dedup();
    v
}

fn finite(p: (f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite()
}

impl Membership {
    /// A member with `cfg` reachable at `addr` (its node's address).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the field out of range.
    pub fn new(cfg: MembershipConfig, addr: SocketAddr) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Membership {
            schema: overlay_schema(cfg.ctrl_directed),
            cfg,
            addr,
            peers: BTreeMap::new(),
            by_addr: HashMap::new(),
            phys: BTreeSet::new(),
            links: BTreeMap::new(),
            tombstones: BTreeSet::new(),
            auto_done: BTreeSet::new(),
            outbox: Vec::new(),
            changed: false,
            last_heartbeat: None,
            heartbeats: 0,
            stats: MembershipStats::default(),
            now: Instant::ZERO,
        })
    }

    /// The member's id.
    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    /// The configuration.
    pub fn config(&self) -> &MembershipConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> MembershipStats {
        self.stats
    }

    /// Candidate neighbours now (topology `Phys`).
    pub fn candidates(&self) -> Vec<NodeId> {
        ids(self.phys.iter().copied())
    }

    /// Every peer known now.
    pub fn known(&self) -> Vec<NodeId> {
        ids(self.peers.keys().copied())
    }

    /// The link sessions this member holds (any state).
    pub fn links(&self) -> Vec<(NodeId, LinkInfo)> {
        self.links.iter().map(|(&p, &l)| (NodeId(p), l)).collect()
    }

    /// The node address of a known member.
    pub fn addr(&self, peer: NodeId) -> Option<SocketAddr> {
        self.peers.get(&peer.0).map(|p| p.addr)
    }

    /// Peers with an open link heard from within `link_timeout` of `now`.
    pub fn open_links(&self, now: Instant) -> Vec<NodeId> {
        self.links
            .iter()
            .filter(|(_, l)| {
                l.state == LinkState::Open
                    && now.saturating_duration_since(l.last_rx) <= self.cfg.link_timeout
            })
            .map(|(&p, _)| NodeId(p))
            .collect()
    }

    /// The measured round-trip time to `peer`.
    pub fn rtt(&self, peer: NodeId) -> Option<Duration> {
        self.peers.get(&peer.0).and_then(|p| p.rtt)
    }

    /// Whether the view changed since the last call (for [`braid_tarl::EvalTrigger`]).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Messages to send, in order.
    pub fn drain_outbox(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outbox)
    }

    fn push(&mut self, to: SocketAddr, lane: Lane, msg: OverlayMsg) {
        self.stats.sent += 1;
        self.outbox.push(Outgoing { to, lane, msg });
    }

    fn drop_msg(&mut self) {
        self.stats.dropped += 1;
    }

    /// Checks that `id` at `src` is consistent with what is known (an id
    /// stays with the first address it was heard from until it expires)
    /// and records a direct contact; false if the message must be dropped.
    fn admit(&mut self, now: Instant, src: SocketAddr, id: u64, pos: (f64, f64)) -> bool {
        if id == self.cfg.id.0 || !finite(pos) || src == self.addr {
            return false;
        }
        if let Some(&other) = self.by_addr.get(&src) {
            if other != id {
                // The address now speaks for another id (a restarted member):
                // the old one is gone.
                self.forget(other);
            }
        }
        match self.peers.get_mut(&id) {
            Some(p) if p.addr != src => return false,
            Some(p) => {
                p.last_heard = now;
                if p.pos != pos {
                    p.pos = pos;
                    self.changed = true;
                }
            }
            None => {
                if self.peers.len() >= self.cfg.max_peers {
                    return false;
                }
                self.peers.insert(
                    id,
                    Peer {
                        addr: src,
                        pos,
                        last_heard: now,
                        lists: None,
                        delays: BTreeMap::new(),
                        rtt: None,
                        their_stamp: None,
                        last_sent: None,
                    },
                );
                self.by_addr.insert(src, id);
            }
        }
        true
    }

    fn forget(&mut self, id: u64) {
        if let Some(p) = self.peers.remove(&id) {
            self.by_addr.remove(&p.addr);
        }
        if self.links.remove(&id).is_some() | self.phys.remove(&id) {
            self.changed = true;
        }
        self.tombstones.remove(&id);
        self.auto_done.remove(&id);
    }

    /// Handles a message that arrived at `now` from the node at `src`.
    pub fn handle(&mut self, now: Instant, src: SocketAddr, msg: OverlayMsg) {
        self.stats.received += 1;
        self.now = self.now.max(now);
        match msg {
            OverlayMsg::State(s) => self.on_state(now, src, s),
            OverlayMsg::Link {
                from,
                pos,
                topo,
                sender_out,
                sender_in,
                auto,
            } => {
                if !self.admit(now, src, from, pos) {
                    return self.drop_msg();
                }
                let accepted = usize::from(topo) == TOPO_CTRL.0
                    && !(auto && self.tombstones.contains(&from))
                    && (self.links.contains_key(&from) || self.links.len() < self.cfg.max_peers);
                if accepted {
                    let l = self.links.entry(from).or_insert(LinkInfo {
                        out: false,
                        inn: false,
                        state: LinkState::Open,
                        last_rx: now,
                    });
                    let (out, inn) = (l.out || sender_in, l.inn || sender_out);
                    let changed = (out, inn) != (l.out, l.inn);
                    *l = LinkInfo {
                        out,
                        inn,
                        state: LinkState::Open,
                        last_rx: now,
                    };
                    self.changed |= changed;
                    self.tombstones.remove(&from);
                    self.auto_done.insert(from);
                }
                let id = self.cfg.id.0;
                self.push(
                    src,
                    Lane::Link,
                    OverlayMsg::LinkAck {
                        from: id,
                        topo,
                        accepted,
                    },
                );
            }
            OverlayMsg::LinkAck {
                from,
                topo,
                accepted,
            } => {
                if self.by_addr.get(&src) != Some(&from) || usize::from(topo) != TOPO_CTRL.0 {
                    return self.drop_msg();
                }
                match self.links.get_mut(&from) {
                    Some(l) if accepted => {
                        l.state = LinkState::Open;
                        l.last_rx = now;
                    }
                    Some(_) => {
                        self.links.remove(&from);
                        self.tombstone(from);
                        self.changed = true;
                    }
                    None if accepted => {
                        // Closed here meanwhile: close it there too.
                        let id = self.cfg.id.0;
                        self.push(src, Lane::Link, OverlayMsg::Unlink { from: id, topo });
                    }
                    None => {}
                }
            }
            OverlayMsg::Unlink { from, topo } => {
                if self.by_addr.get(&src) != Some(&from) || usize::from(topo) != TOPO_CTRL.0 {
                    return self.drop_msg();
                }
                if self.links.remove(&from).is_some() {
                    self.changed = true;
                }
                self.tombstone(from);
            }
            OverlayMsg::Keepalive { from, topo } => {
                if self.by_addr.get(&src) != Some(&from) || usize::from(topo) != TOPO_CTRL.0 {
                    // A keepalive from a member this one forgot: tell it the
                    // link is gone (the id is the sender's claim; the reply
                    // goes to the address it came from).
                    let id = self.cfg.id.0;
                    self.push(src, Lane::Link, OverlayMsg::Unlink { from: id, topo });
                    return;
                }
                if let Some(p) = self.peers.get_mut(&from) {
                    p.last_heard = now;
                }
                match self.links.get_mut(&from) {
                    Some(l) => {
                        l.state = LinkState::Open;
                        l.last_rx = now;
                    }
                    None => {
                        let id = self.cfg.id.0;
                        self.push(src, Lane::Link, OverlayMsg::Unlink { from: id, topo });
                    }
                }
            }
        }
    }

    fn tombstone(&mut self, id: u64) {
        if self.tombstones.len() < self.cfg.max_peers {
            self.tombstones.insert(id);
        }
    }

    fn on_state(&mut self, now: Instant, src: SocketAddr, s: State) {
        let topologies = self.schema.topologies.len();
        if s.lists.len() != topologies || !self.admit(now, src, s.from, s.pos) {
            return self.drop_msg();
        }
        let max = self.cfg.max_peers;
        let lists: Vec<(Vec<NodeId>, Vec<NodeId>)> = s
            .lists
            .iter()
            .map(|Lists { out, inn }| {
                (
                    ids(out.iter().take(max).copied()),
                    ids(inn.iter().take(max).copied()),
                )
            })
            .collect();
        let rtt_sample = s.echo.and_then(|Echo { stamp, held_ns }| {
            now.as_nanos()
                .checked_sub(stamp)
                .and_then(|x| x.checked_sub(held_ns))
                .map(Duration::from_nanos)
        });
        let Some(p) = self.peers.get_mut(&s.from) else {
            return;
        };
        if p.lists.as_ref() != Some(&lists) {
            p.lists = Some(lists);
            self.changed = true;
        }
        p.delays = s.delays.iter().take(max).copied().collect();
        if let Some(sample) = rtt_sample {
            // RFC 6298's smoothing (gain 1/8).
            p.rtt = Some(match p.rtt {
                Some(r) => r - r / 8 + sample / 8,
                None => sample,
            });
        }
        p.their_stamp = Some((s.stamp, now));
        let reply = !self.phys.contains(&s.from)
            && !self.links.contains_key(&s.from)
            && p.last_sent
                .is_none_or(|t| now.saturating_duration_since(t) >= self.cfg.heartbeat);
        for r in s.gossip.into_iter().take(self.cfg.max_gossip) {
            self.learn(now, r);
        }
        self.refresh(now);
        if reply {
            self.send_state(now, s.from);
        }
    }

    fn learn(&mut self, now: Instant, r: PeerRecord) {
        if r.id == self.cfg.id.0 || r.addr == self.addr || !finite(r.pos) {
            return;
        }
        let heard = Instant::from_nanos(now.as_nanos().saturating_sub(r.age_ms.saturating_mul(1_000_000)));
        if now.saturating_duration_since(heard) > self.cfg.peer_timeout {
            return;
        }
        match self.peers.get_mut(&r.id) {
            Some(p) if p.addr == r.addr => {
                if heard > p.last_heard {
                    p.last_heard = heard;
                }
            }
            Some(_) => {}
            None => {
                if self.peers.len() >= self.cfg.max_peers || self.by_addr.contains_key(&r.addr) {
                    return;
                }
                self.by_addr.insert(r.addr, r.id);
                self.peers.insert(
                    r.id,
                    Peer {
                        addr: r.addr,
                        pos: r.pos,
                        last_heard: heard,
                        lists: None,
                        delays: BTreeMap::new(),
                        rtt: None,
                        their_stamp: None,
                        last_sent: None,
                    },
                );
            }
        }
    }

    /// Recomputes the candidates and opens initial links to new ones.
    fn refresh(&mut self, now: Instant) {
        let me = self.cfg.pos;
        let phys: BTreeSet<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| dist(me, p.pos) <= self.cfg.radius)
            .map(|(&id, _)| id)
            .collect();
        if phys != self.phys {
            self.phys = phys;
            self.changed = true;
        }
        if self.cfg.initial == InitialLinks::CopyOfCandidates {
            let new: Vec<u64> = self
                .phys
                .iter()
                .copied()
                .filter(|p| {
                    !self.auto_done.contains(p)
                        && !self.tombstones.contains(p)
                        && !self.links.contains_key(p)
                })
                .collect();
            for p in new {
                if self.auto_done.len() < self.cfg.max_peers {
                    self.auto_done.insert(p);
                    let dirs = (true, !self.cfg.ctrl_directed);
                    self.open(now, p, dirs, true);
                }
            }
        }
    }

    /// Opens (or widens) the link to `peer` with directions `(out, inn)`.
    fn open(&mut self, now: Instant, peer: u64, (out, inn): (bool, bool), auto: bool) -> bool {
        let Some(addr) = self.peers.get(&peer).map(|p| p.addr) else {
            return false;
        };
        let l = self.links.entry(peer).or_insert(LinkInfo {
            out: false,
            inn: false,
            state: LinkState::Opening,
            last_rx: now,
        });
        let (o, i) = (l.out || out, l.inn || inn);
        if (o, i) == (l.out, l.inn) {
            return false;
        }
        l.out = o;
        l.inn = i;
        self.changed = true;
        let (id, pos) = (self.cfg.id.0, self.cfg.pos);
        self.push(
            addr,
            Lane::Link,
            OverlayMsg::Link {
                from: id,
                pos,
                topo: TOPO_CTRL.0 as u16,
                sender_out: o,
                sender_in: i,
                auto,
            },
        );
        true
    }

    fn close(&mut self, peer: u64) -> Option<LinkInfo> {
        let l = self.links.remove(&peer)?;
        self.changed = true;
        self.tombstone(peer);
        if let Some(addr) = self.peers.get(&peer).map(|p| p.addr) {
            let id = self.cfg.id.0;
            self.push(
                addr,
                Lane::Link,
                OverlayMsg::Unlink {
                    from: id,
                    topo: TOPO_CTRL.0 as u16,
                },
            );
        }
        Some(l)
    }

    fn own_lists(&self) -> Vec<Lists> {
        let phys: Vec<u64> = self.phys.iter().copied().collect();
        let out = self.links.iter().filter(|(_, l)| l.out).map(|(&p, _)| p).collect();
        let inn = self.links.iter().filter(|(_, l)| l.inn).map(|(&p, _)| p).collect();
        vec![
            Lists {
                out: phys.clone(),
                inn: phys,
            },
            Lists { out, inn },
        ]
    }

    fn send_state(&mut self, now: Instant, to: u64) {
        let Some(peer) = self.peers.get(&to) else {
            return;
        };
        let (addr, their_pos) = (peer.addr, peer.pos);
        let echo = peer.their_stamp.map(|(stamp, at)| Echo {
            stamp,
            held_ns: now.as_nanos().saturating_sub(at.as_nanos()),
        });
        let mut near: Vec<(&u64, &Peer)> = self.peers.iter().filter(|(&id, _)| id != to).collect();
        near.sort_by(|a, b| dist(their_pos, a.1.pos).total_cmp(&dist(their_pos, b.1.pos)));
        let gossip = near
            .into_iter()
            .take(self.cfg.max_gossip)
            .map(|(&id, p)| PeerRecord {
                id,
                addr: p.addr,
                pos: p.pos,
                age_ms: u64::try_from(now.saturating_duration_since(p.last_heard).as_millis())
                    .unwrap_or(u64::MAX),
            })
            .collect();
        let delays = self
            .peers
            .iter()
            .filter_map(|(&id, p)| p.rtt.map(|r| (id, u64::try_from(r.as_micros() / 2).unwrap_or(u64::MAX))))
            .collect();
        let state = State {
            from: self.cfg.id.0,
            pos: self.cfg.pos,
            stamp: now.as_nanos(),
            echo,
            lists: self.own_lists(),
            delays,
            gossip,
        };
        if let Some(p) = self.peers.get_mut(&to) {
            p.last_sent = Some(now);
        }
        self.push(addr, Lane::Membership, OverlayMsg::State(state));
    }

    /// Timers: forgets silent peers, closes silent links, opens initial
    /// links, and sends heartbeats, keepalives and seed contacts when due.
    pub fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let dead: Vec<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_heard) > self.cfg.peer_timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            self.stats.peers_expired += 1;
            self.forget(id);
        }
        let silent: Vec<u64> = self
            .links
            .iter()
            .filter(|(_, l)| now.saturating_duration_since(l.last_rx) > self.cfg.link_timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in silent {
            self.stats.links_expired += 1;
            self.links.remove(&id);
            self.changed = true;
        }
        self.refresh(now);
        let due = self
            .last_heartbeat
            .is_none_or(|t| now.saturating_duration_since(t) >= self.cfg.heartbeat);
        if !due {
            return;
        }
        self.last_heartbeat = Some(now);
        let targets: BTreeSet<u64> = self.phys.iter().chain(self.links.keys()).copied().collect();
        for t in targets {
            self.send_state(now, t);
        }
        let id = self.cfg.id.0;
        let keep: Vec<SocketAddr> = self
            .links
            .keys()
            .filter_map(|p| self.peers.get(p).map(|p| p.addr))
            .collect();
        for addr in keep {
            self.push(
                addr,
                Lane::Link,
                OverlayMsg::Keepalive {
                    from: id,
                    topo: TOPO_CTRL.0 as u16,
                },
            );
        }
        if self.heartbeats % u64::from(self.cfg.seed_every) == 0 {
            let seeds: Vec<SocketAddr> = self.cfg.seeds.iter().copied().filter(|&s| s != self.addr).collect();
            for s in seeds {
                let state = State {
                    from: id,
                    pos: self.cfg.pos,
                    stamp: now.as_nanos(),
                    echo: None,
                    lists: self.own_lists(),
                    delays: Vec::new(),
                    gossip: Vec::new(),
                };
                self.push(s, Lane::Membership, OverlayMsg::State(state));
            }
        }
        self.heartbeats += 1;
    }

    fn reported(&self, t: TopoId, node: NodeId) -> Option<&(Vec<NodeId>, Vec<NodeId>)> {
        self.peers.get(&node.0)?.lists.as_ref()?.get(t.0)
    }

    fn own(&self, t: TopoId) -> Option<(Vec<NodeId>, Vec<NodeId>)> {
        if t == TOPO_PHYS {
            let p = ids(self.phys.iter().copied());
            Some((p.clone(), p))
        } else if t == TOPO_CTRL {
            Some((
                ids(self.links.iter().filter(|(_, l)| l.out).map(|(&p, _)| p)),
                ids(self.links.iter().filter(|(_, l)| l.inn).map(|(&p, _)| p)),
            ))
        } else {
            None
        }
    }

    fn has_edge(&self, t: TopoId, a: NodeId, b: NodeId) -> bool {
        if a == self.cfg.id {
            return self.own(t).is_some_and(|(out, _)| out.binary_search(&b).is_ok());
        }
        if b == self.cfg.id {
            return self.own(t).is_some_and(|(_, inn)| inn.binary_search(&a).is_ok());
        }
        self.reported(t, a).is_some_and(|(out, _)| out.binary_search(&b).is_ok())
            || self.reported(t, b).is_some_and(|(_, inn)| inn.binary_search(&a).is_ok())
    }

    fn pos_of(&self, n: NodeId) -> Option<(f64, f64)> {
        if n == self.cfg.id {
            Some(self.cfg.pos)
        } else {
            self.peers.get(&n.0).map(|p| p.pos)
        }
    }

    /// One-way delay of `a`–`b` in milliseconds: measured here for this
    /// member's own edges, as reported by an end otherwise.
    fn delay_ms(&self, a: NodeId, b: NodeId) -> Option<f64> {
        let me = self.cfg.id;
        let own = |other: NodeId| self.rtt(other).map(|r| r.as_secs_f64() * 1000.0 / 2.0);
        if a == me {
            return own(b);
        }
        if b == me {
            return own(a);
        }
        let rep = |x: NodeId, y: NodeId| {
            self.peers
                .get(&x.0)
                .and_then(|p| p.delays.get(&y.0))
                .map(|&us| us as f64 / 1000.0)
        };
        rep(a, b).or_else(|| rep(b, a))
    }
}

impl TopologyProvider for Membership {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn out_neighbors(&self, t: TopoId, node: NodeId) -> Option<Vec<NodeId>> {
        if node == self.cfg.id {
            return self.own(t).map(|(out, _)| out);
        }
        self.reported(t, node).map(|(out, _)| out.clone())
    }

    fn in_neighbors(&self, t: TopoId, node: NodeId) -> Option<Vec<NodeId>> {
        if node == self.cfg.id {
            return self.own(t).map(|(_, inn)| inn);
        }
        self.reported(t, node).map(|(_, inn)| inn.clone())
    }

    fn node_attr(&self, node: NodeId, attr: AttrId) -> Option<Value> {
        match attr {
            ATTR_POS => self.pos_of(node).map(|(x, y)| Value::Pos(x, y)),
            ATTR_ID => self.pos_of(node).map(|_| Value::Num(node.0 as f64)),
            _ => None,
        }
    }

    fn edge_attr(&self, t: TopoId, a: NodeId, b: NodeId, attr: AttrId) -> Option<Value> {
        if !self.has_edge(t, a, b) {
            return None;
        }
        let weight = match (attr, self.cfg.weight) {
            (ATTR_WEIGHT, WeightSource::Distance) => dist(self.pos_of(a)?, self.pos_of(b)?),
            (ATTR_WEIGHT, WeightSource::Delay) | (ATTR_DELAY, _) => self.delay_ms(a, b)?,
            _ => return None,
        };
        Some(Value::Num(weight))
    }

    fn apply(&mut self, at: NodeId, t: TopoId, change: Change) -> Result<bool, ActionError> {
        if at != self.cfg.id {
            return Err(ActionError::Refused(format!(
                "a member changes only its own links: {at} is not this member ({})",
                self.cfg.id
            )));
        }
        if t == TOPO_PHYS {
            return Err(ActionError::Refused(
                "`Phys` is the candidate topology the membership protocol maintains; rules change `Ctrl`".into(),
            ));
        }
        if t != TOPO_CTRL {
            return Err(ActionError::UnknownTopology(t.0));
        }
        let known = |s: &Self, n: NodeId| {
            if n == s.cfg.id {
                Err(ActionError::SelfLoop(n))
            } else if s.peers.contains_key(&n.0) {
                Ok(n.0)
            } else {
                Err(ActionError::UnknownNode(n))
            }
        };
        // Actions carry no time: a new session starts at the last event.
        let now = self.now;
        match change {
            Change::Add(v) => {
                let v = known(self, v)?;
                self.tombstones.remove(&v);
                Ok(self.open(now, v, (true, !self.cfg.ctrl_directed), false))
            }
            Change::Remove(v) => Ok(self.close(v.0).is_some()),
            Change::Move { from, to } => {
                let to = known(self, to)?;
                let Some(old) = self.links.get(&from.0).copied() else {
                    return Err(ActionError::NotANeighbor {
                        at,
                        from,
                        topology: "Ctrl".into(),
                    });
                };
                self.close(from.0);
                self.tombstones.remove(&to);
                self.open(now, to, (old.out, old.inn), false);
                Ok(true)
            }
        }
    }
}

