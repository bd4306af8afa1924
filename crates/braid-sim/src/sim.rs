//! [`Simulator`]: hosts running sans-IO nodes, joined by modelled links, in
//! virtual time.

use std::collections::HashMap;
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use braid_core::{Instant, Rng, RngCore, SeedableRng};
use braid_link::{Direction, Link, LinkSpec, LinkStats, Outcome};
use bytes::Bytes;
use siphasher::sip::SipHasher13;

use crate::event::{EventKind, EventQueue};
use crate::trace::{Fate, TraceHasher};
use crate::{Datagram, Node, NodeId};

/// Header bytes a link is charged on top of the UDP payload for IPv4
/// (20-byte IP header + 8-byte UDP header).
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// Header bytes a link is charged on top of the UDP payload for IPv6
/// (40-byte IP header + 8-byte UDP header).
pub const IPV6_UDP_OVERHEAD: usize = 48;

/// Building the simulated network went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Another node already has this address.
    #[error("address {0} already belongs to a node")]
    AddressInUse(IpAddr),
    /// A node needs at least one address.
    #[error("a node needs at least one address")]
    NoAddress,
    /// Both ends of a path are the same address.
    #[error("a path needs two different addresses, got {0} twice")]
    SelfPath(IpAddr),
    /// `add_path` for a pair that already has a path.
    #[error("there is already a path between {0} and {1}; use set_path to change it")]
    PathExists(IpAddr, IpAddr),
    /// `set_path` for a pair without a path.
    #[error("there is no path between {0} and {1}; use add_path to create it")]
    NoSuchPath(IpAddr, IpAddr),
}

/// Simulator-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimStats {
    /// Events processed (arrivals and timers).
    pub events: u64,
    /// Datagrams nodes handed to the network.
    pub datagrams_sent: u64,
    /// Datagrams (duplicates included) handed to a node.
    pub datagrams_delivered: u64,
    /// Datagrams dropped because no path leads from their source to their
    /// destination address.
    pub no_route: u64,
    /// Datagrams that crossed a path to an address no node owns.
    pub unreachable: u64,
    /// Timer events that reached a node (stale ones not counted).
    pub timeouts: u64,
}

#[derive(Debug)]
struct NodeSlot<N> {
    node: N,
    ips: Vec<IpAddr>,
    dirty: bool,
    /// The deadline last reported by `poll_timeout`, and the generation of
    /// the timer event scheduled for it.
    timer: Option<Instant>,
    timer_generation: u64,
}

/// One direction of a path.
#[derive(Debug)]
struct LinkSlot {
    src: IpAddr,
    dst: IpAddr,
    link: Link,
    /// Datagrams the link holds, by packet id, until their fate is
    /// decided.
    held: HashMap<u64, (SocketAddr, SocketAddr, Bytes)>,
    /// The earliest wake-up scheduled for the link, if one is pending.
    wake: Option<Instant>,
}

/// The flow a datagram belongs to, for a queue discipline that tells flows
/// apart (FQ-CoDel): its addresses and ports, hashed with fixed keys so a
/// run is reproducible.
fn flow_key(src: SocketAddr, dst: SocketAddr) -> u64 {
    let mut h = SipHasher13::new_with_keys(0x666c_6f77, 0x006b_6579);
    for a in [src, dst] {
        match a.ip() {
            IpAddr::V4(ip) => h.write(&ip.octets()),
            IpAddr::V6(ip) => h.write(&ip.octets()),
        }
        h.write_u16(a.port());
    }
    h.finish()
}

/// Everything except the nodes, so that a node and the network can be
/// borrowed at once.
#[derive(Debug)]
struct Network {
    queue: EventQueue,
    links: Vec<LinkSlot>,
    link_index: HashMap<(IpAddr, IpAddr), usize>,
    trace: TraceHasher,
    stats: SimStats,
    overhead: Option<usize>,
}

impl Network {
    /// Send a datagram through the link from its source to its
    /// destination address, recording it in the trace.
    fn route(&mut self, now: Instant, d: Datagram) {
        self.stats.datagrams_sent += 1;
        let Some(&index) = self.link_index.get(&(d.src.ip(), d.dst.ip())) else {
            self.stats.no_route += 1;
            self.trace
                .record(now, d.src, d.dst, &d.payload, Fate::NoRoute);
            return;
        };
        let overhead = self.overhead.unwrap_or(match d.dst {
            SocketAddr::V4(_) => IPV4_UDP_OVERHEAD,
            SocketAddr::V6(_) => IPV6_UDP_OVERHEAD,
        });
        let slot = &mut self.links[index];
        let len = d.payload.len() + overhead;
        match slot.link.enqueue(now, len, flow_key(d.src, d.dst)) {
            Ok(id) => {
                self.trace
                    .record(now, d.src, d.dst, &d.payload, Fate::Queued(id));
                slot.held.insert(id.0, (d.src, d.dst, d.payload));
                self.drain_link(index, now);
            }
            Err(reason) => {
                self.trace
                    .record(now, d.src, d.dst, &d.payload, Fate::Refused(reason));
            }
        }
    }

    /// Take the decided fates from link `index`: schedule the arrivals of
    /// delivered datagrams, forget dropped ones, and schedule a wake-up for
    /// the link's next decision.
    fn drain_link(&mut self, index: usize, now: Instant) {
        let slot = &mut self.links[index];
        while let Some(outcome) = slot.link.poll(now) {
            self.trace.record_outcome(now, index, outcome);
            let Some((src, dst, payload)) = slot.held.remove(&outcome.id().0) else {
                continue;
            };
            if let Outcome::Delivered {
                at, duplicate_at, ..
            } = outcome
            {
                if let Some(dup) = duplicate_at {
                    let kind = EventKind::Arrival {
                        src,
                        dst,
                        payload: payload.clone(),
                    };
                    self.queue.push(dup.max(now), kind);
                }
                let kind = EventKind::Arrival { src, dst, payload };
                self.queue.push(at.max(now), kind);
            }
        }
        if slot.wake.is_some_and(|w| w <= now) {
            slot.wake = None;
        }
        if let Some(t) = slot.link.next_event() {
            let t = t.max(now);
            if slot.wake.is_none_or(|w| t < w) {
                slot.wake = Some(t);
                self.queue.push(t, EventKind::LinkWake { link: index });
            }
        }
    }
}

/// A deterministic network simulator in virtual time.
///
/// Nodes (any [`Node`]) own one or more IP addresses; paths join pairs of
/// addresses, each direction modelled by its own [`Link`]. Datagrams a node
/// emits are offered to the link for their (source, destination) addresses
/// and, if delivered, handed to the node owning the destination at the
/// arrival time. Timers come from [`Node::poll_timeout`].
///
/// Links are charged the payload plus the IP and UDP headers (28 bytes for
/// IPv4, 48 for IPv6; see [`set_header_overhead`](Self::set_header_overhead)),
/// so `rate=100mbit` means what it means on a real link.
///
/// Everything is a function of the inputs and the seed: the same calls give
/// the same [`trace_hash`](Self::trace_hash).
///
/// ```
/// use braid_sim::{Simulator, nodes::{BasicNode, EchoNode, PingNode}};
/// use braid_core::Instant;
/// use std::time::Duration;
///
/// let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
/// let mut sim = Simulator::new(1);
/// let pinger = sim
///     .add_node([a], BasicNode::Ping(PingNode::new("10.0.0.1:9".parse().unwrap(), "10.0.0.2:7".parse().unwrap(), 10, Duration::from_millis(100), 64)))
///     .unwrap();
/// sim.add_node([b], BasicNode::Echo(EchoNode::default())).unwrap();
/// sim.add_path(a, b, &"rtt=30ms".parse().unwrap()).unwrap();
/// sim.run_until(Instant::ZERO + Duration::from_secs(2));
/// let BasicNode::Ping(p) = sim.node(pinger) else { unreachable!() };
/// assert_eq!(p.rtts().len(), 10);
/// assert!(p.rtts().iter().all(|r| *r == Duration::from_millis(30)));
/// ```
#[derive(Debug)]
pub struct Simulator<N: Node> {
    now: Instant,
    nodes: Vec<NodeSlot<N>>,
    by_ip: HashMap<IpAddr, NodeId>,
    /// Nodes to poll before the next event, in the order they changed.
    dirty: Vec<NodeId>,
    /// Seeds of links, drawn in the order paths are added.
    seeds: Rng,
    net: Network,
}

impl<N: Node> Simulator<N> {
    /// An empty network at time zero; `seed` drives every link.
    pub fn new(seed: u64) -> Self {
        Simulator {
            now: Instant::ZERO,
            nodes: Vec::new(),
            by_ip: HashMap::new(),
            dirty: Vec::new(),
            seeds: Rng::seed_from_u64(seed),
            net: Network {
                queue: EventQueue::default(),
                links: Vec::new(),
                link_index: HashMap::new(),
                trace: TraceHasher::default(),
                stats: SimStats::default(),
                overhead: None,
            },
        }
    }

    /// Charge links `bytes` of headers per datagram instead of the default
    /// (28 for IPv4, 48 for IPv6); `None` restores the default.
    pub fn set_header_overhead(&mut self, bytes: Option<usize>) {
        self.net.overhead = bytes;
    }

    /// Add a node owning `ips`. It is polled for transmits and timers at
    /// the next step.
    pub fn add_node(
        &mut self,
        ips: impl IntoIterator<Item = IpAddr>,
        node: N,
    ) -> Result<NodeId, SimError> {
        let ips: Vec<IpAddr> = ips.into_iter().collect();
        if ips.is_empty() {
            return Err(SimError::NoAddress);
        }
        for (i, ip) in ips.iter().enumerate() {
            if self.by_ip.contains_key(ip) || ips[..i].contains(ip) {
                return Err(SimError::AddressInUse(*ip));
            }
        }
        let id = NodeId(self.nodes.len());
        for ip in &ips {
            self.by_ip.insert(*ip, id);
        }
        self.nodes.push(NodeSlot {
            node,
            ips,
            dirty: true,
            timer: None,
            timer_generation: 0,
        });
        self.dirty.push(id);
        Ok(id)
    }

    /// The node `id`.
    ///
    /// # Panics
    /// If `id` was not returned by this simulator's `add_node`.
    pub fn node(&self, id: NodeId) -> &N {
        &self.nodes[id.0].node
    }

    /// The node `id`, mutably. The node is re-polled for transmits and
    /// timers at the next step, so whatever is done to it (say, queueing
    /// data) takes effect.
    ///
    /// # Panics
    /// If `id` was not returned by this simulator's `add_node`.
    pub fn node_mut(&mut self, id: NodeId) -> &mut N {
        let slot = &mut self.nodes[id.0];
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(id);
        }
        &mut slot.node
    }

    /// The addresses of node `id`.
    pub fn node_ips(&self, id: NodeId) -> &[IpAddr] {
        &self.nodes[id.0].ips
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Join `a` and `b` by a path described by `spec`: direction a→b gets
    /// [`Direction::AToB`]'s parameters, b→a [`Direction::BToA`]'s, each its
    /// own [`Link`] seeded from the simulator's seed.
    pub fn add_path(&mut self, a: IpAddr, b: IpAddr, spec: &LinkSpec) -> Result<(), SimError> {
        if a == b {
            return Err(SimError::SelfPath(a));
        }
        if self.net.link_index.contains_key(&(a, b)) {
            return Err(SimError::PathExists(a, b));
        }
        for (src, dst, dir) in [(a, b, Direction::AToB), (b, a, Direction::BToA)] {
            let link = Link::new(spec.params(dir), self.seeds.next_u64());
            self.net.link_index.insert((src, dst), self.net.links.len());
            self.net.links.push(LinkSlot {
                src,
                dst,
                link,
                held: HashMap::new(),
                wake: None,
            });
        }
        Ok(())
    }

    /// Change the path between `a` and `b` (as [`Link::set_params`]:
    /// datagrams already in flight keep their schedule).
    pub fn set_path(&mut self, a: IpAddr, b: IpAddr, spec: &LinkSpec) -> Result<(), SimError> {
        for (src, dst, dir) in [(a, b, Direction::AToB), (b, a, Direction::BToA)] {
            let index = *self
                .net
                .link_index
                .get(&(src, dst))
                .ok_or(SimError::NoSuchPath(a, b))?;
            self.net.links[index].link.set_params(spec.params(dir));
            // A new discipline may decide at once what the old one held.
            self.net.drain_link(index, self.now);
        }
        Ok(())
    }

    /// Counters of the link carrying datagrams from `src` to `dst`.
    pub fn link_stats(&self, src: IpAddr, dst: IpAddr) -> Option<&LinkStats> {
        self.net
            .link_index
            .get(&(src, dst))
            .map(|&i| self.net.links[i].link.stats())
    }

    /// Every link as (source address, destination address, counters), in
    /// the order the paths were added.
    pub fn links(&self) -> impl Iterator<Item = (IpAddr, IpAddr, &LinkStats)> {
        self.net
            .links
            .iter()
            .map(|l| (l.src, l.dst, l.link.stats()))
    }

    /// Simulator-wide counters.
    pub fn stats(&self) -> &SimStats {
        &self.net.stats
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Fingerprint of every datagram handed to the network so far: its
    /// time, addresses, length, payload and fate. Equal inputs and seed
    /// give equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.net.trace.finish()
    }

    /// Time of the next pending event, after polling nodes changed since the
    /// last step.
    pub fn next_event_time(&mut self) -> Option<Instant> {
        self.flush_dirty();
        self.net.queue.peek_time()
    }

    /// Number of pending events (stale timers included).
    pub fn pending_events(&self) -> usize {
        self.net.queue.len()
    }

    /// Process the next event (advancing time to it). Returns false if
    /// there was none: the network is idle for good.
    pub fn step(&mut self) -> bool {
        self.flush_dirty();
        let Some(event) = self.net.queue.pop() else {
            return false;
        };
        self.net.stats.events += 1;
        self.now = self.now.max(event.time);
        let now = self.now;
        match event.kind {
            EventKind::Arrival { src, dst, payload } => {
                let Some(&id) = self.by_ip.get(&dst.ip()) else {
                    self.net.stats.unreachable += 1;
                    return true;
                };
                self.net.stats.datagrams_delivered += 1;
                self.nodes[id.0]
                    .node
                    .handle_datagram(now, src, dst, payload);
                self.flush(id);
            }
            EventKind::LinkWake { link } => self.net.drain_link(link, now),
            EventKind::Timer { node, generation } => {
                let slot = &mut self.nodes[node.0];
                if slot.timer_generation == generation && slot.timer.is_some() {
                    slot.timer = None;
                    self.net.stats.timeouts += 1;
                    slot.node.handle_timeout(now);
                    self.flush(node);
                }
            }
        }
        true
    }

    /// Process every event up to and including `deadline`, then set the
    /// time to `deadline` (if later than now).
    pub fn run_until(&mut self, deadline: Instant) {
        while self.next_event_time().is_some_and(|t| t <= deadline) {
            self.step();
        }
        self.now = self.now.max(deadline);
    }

    /// Process events until `condition` holds (checked before the first
    /// event and after each one) or the next event is past `deadline`.
    /// Returns whether the condition held; on false, the time is set to
    /// `deadline`.
    pub fn run_until_condition(
        &mut self,
        deadline: Instant,
        mut condition: impl FnMut(&mut Simulator<N>) -> bool,
    ) -> bool {
        loop {
            if condition(self) {
                return true;
            }
            if self.next_event_time().is_none_or(|t| t > deadline) {
                self.now = self.now.max(deadline);
                return condition(self);
            }
            self.step();
        }
    }

    fn flush_dirty(&mut self) {
        // Index loop: flushing one node never marks another dirty, but keep
        // it robust to that anyway.
        let mut i = 0;
        while i < self.dirty.len() {
            let id = self.dirty[i];
            if self.nodes[id.0].dirty {
                self.flush(id);
            }
            i += 1;
        }
        self.dirty.clear();
    }

    /// Drain a node's transmits into the network and reschedule its timer.
    fn flush(&mut self, id: NodeId) {
        let now = self.now;
        let slot = &mut self.nodes[id.0];
        slot.dirty = false;
        while let Some(d) = slot.node.poll_transmit(now) {
            self.net.route(now, d);
        }
        let deadline = slot.node.poll_timeout();
        if deadline != slot.timer {
            slot.timer = deadline;
            slot.timer_generation += 1;
            if let Some(t) = deadline {
                let kind = EventKind::Timer {
                    node: id,
                    generation: slot.timer_generation,
                };
                self.net.queue.push(t.max(now), kind);
            }
        }
    }
}
