//! Deterministic network simulator in virtual time, for any sans-IO Braid
//! state machine.
//!
//! Owns: the event loop that runs [`Node`]s (anything that takes datagrams
//! and time in and gives datagrams and deadlines out, such as a
//! `braid_proto::Endpoint` wrapped with its application) over paths
//! modelled by `braid_link`, and the trace hash that proves two runs
//! identical.
//!
//! Must not depend on: sockets, threads, the system clock, or any protocol
//! crate (the transport plugs in through [`Node`]). Time is virtual and
//! jumps from event to event; randomness comes from the simulator's seed, so
//! a seed and the same calls reproduce a run exactly. Events are ordered by
//! (time, sequence number).
//!
//! ```
//! use braid_sim::{Simulator, nodes::EchoNode, Datagram, Node};
//! use braid_core::Instant;
//! use bytes::Bytes;
//! use std::time::Duration;
//!
//! let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
//! let mut sim: Simulator<EchoNode> = Simulator::new(7);
//! let echo_a = sim.add_node([a], EchoNode::default()).unwrap();
//! let echo_b = sim.add_node([b], EchoNode::default()).unwrap();
//! sim.add_path(a, b, &"rtt=10ms,loss=50%".parse().unwrap()).unwrap();
//! // Inject one datagram at A as if B had sent it: the two echo nodes then
//! // bounce it back and forth until the lossy link drops it.
//! sim.node_mut(echo_a).handle_datagram(Instant::ZERO, "10.0.0.2:1".parse().unwrap(), "10.0.0.1:1".parse().unwrap(), Bytes::from_static(b"ping"));
//! sim.run_until(Instant::ZERO + Duration::from_secs(10));
//! let bounces = sim.node(echo_a).echoed() + sim.node(echo_b).echoed();
//! let dropped: u64 = sim.links().map(|(_, _, s)| s.dropped_loss).sum();
//! assert_eq!(dropped, 1);
//! assert_eq!(sim.stats().datagrams_sent, bounces);
//! ```

mod event;
pub mod nodes;
mod sim;
mod trace;

use std::net::SocketAddr;

pub use braid_core::Instant;
use bytes::Bytes;

pub use sim::{SimError, SimStats, Simulator, IPV4_UDP_OVERHEAD, IPV6_UDP_OVERHEAD};

/// A UDP datagram on the simulated network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Sender address; its IP selects the path.
    pub src: SocketAddr,
    /// Destination address; its IP selects the path and the receiving node.
    pub dst: SocketAddr,
    /// UDP payload.
    pub payload: Bytes,
}

/// Identifies a node of a [`Simulator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    /// Position of the node in the order nodes were added.
    pub fn index(self) -> usize {
        self.0
    }
}

/// A sans-IO host: datagrams and time go in, datagrams and a timer
/// deadline come out.
///
/// After each call into the node (`handle_datagram`, `handle_timeout`, or
/// [`Simulator::node_mut`]) the simulator drains `poll_transmit` until it
/// returns `None`, then asks `poll_timeout` for the next deadline.
pub trait Node {
    /// A datagram from `src` arrived at the node's address `dst`.
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes);
    /// The next datagram to send now, if any.
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram>;
    /// When `handle_timeout` must next be called, if ever.
    fn poll_timeout(&mut self) -> Option<Instant>;
    /// The deadline from `poll_timeout` was reached.
    fn handle_timeout(&mut self, now: Instant);
}

impl<T: Node + ?Sized> Node for Box<T> {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        (**self).handle_datagram(now, src, dst, payload)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
