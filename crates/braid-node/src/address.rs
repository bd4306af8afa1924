//! Addresses (seed 000 §III-A, Listing 4), with the optional virtual-node
//! id of §III-B.

use std::fmt;
use std::fmt::Debug;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::Transport;

/// Names a virtual node: a part of an application that is addressed on
/// its own while sharing its host's node (and sockets) with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VnodeId(pub u64);

impl fmt::Display for VnodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// What the node needs from an address: where the host is, and which of
/// its virtual nodes (if any) a message is for. Applications implement it
/// for their own address types (say, with an interface id that
/// disambiguates multi-homed hosts); the node is generic over it, so no
/// runtime cast is ever needed to get the extra fields back.
///
/// The port is the node's *base* port; each transport listens at
/// `port + Transport::port_offset()`.
pub trait Address: Clone + Eq + Hash + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The host's IP address.
    fn ip(&self) -> IpAddr;
    /// The node's base port.
    fn port(&self) -> u16;
    /// The virtual node this address names, if any.
    fn vnode(&self) -> Option<VnodeId> {
        None
    }
    /// IP and base port.
    fn as_socket(&self) -> SocketAddr {
        SocketAddr::new(self.ip(), self.port())
    }
    /// Whether both addresses name the same node (same IP and base port),
    /// whatever their virtual nodes: messages between them never need the
    /// network.
    fn same_host_as(&self, other: &Self) -> bool {
        self.as_socket() == other.as_socket()
    }
    /// The socket address of `transport` on this node, or `None` if the
    /// port would overflow.
    fn transport_addr(&self, transport: Transport) -> Option<SocketAddr> {
        let port = self.port().checked_add(transport.port_offset())?;
        Some(SocketAddr::new(self.ip(), port))
    }
}

/// The default address: a node's IP and base port, and optionally a
/// virtual node.
///
/// ```
/// use braid_node::{Address, BasicAddress, VnodeId};
/// let host = BasicAddress::new("127.0.0.1:7000".parse().unwrap());
/// let v = host.with_vnode(VnodeId(3));
/// assert!(v.same_host_as(&host));
/// assert_eq!(v.vnode(), Some(VnodeId(3)));
/// assert_eq!(v.to_string(), "127.0.0.1:7000/v3");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BasicAddress {
    /// IP and base port.
    pub socket: SocketAddr,
    /// The virtual node, if any.
    pub vnode: Option<VnodeId>,
}

impl BasicAddress {
    /// The node itself (no virtual node).
    pub fn new(socket: SocketAddr) -> Self {
        BasicAddress { socket, vnode: None }
    }

    /// The same host, virtual node `id`.
    pub fn with_vnode(self, id: VnodeId) -> Self {
        BasicAddress { vnode: Some(id), ..self }
    }

    /// The same host, no virtual node.
    pub fn host(self) -> Self {
        BasicAddress { vnode: None, ..self }
    }
}

impl Address for BasicAddress {
    fn ip(&self) -> IpAddr {
        self.socket.ip()
    }
    fn port(&self) -> u16 {
        self.socket.port()
    }
    fn vnode(&self) -> Option<VnodeId> {
        self.vnode
    }
}

impl fmt::Display for BasicAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vnode {
            Some(v) => write!(f, "{}/{v}", self.socket),
            None => write!(f, "{}", self.socket),
        }
    }
}
