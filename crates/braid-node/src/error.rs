//! Errors of the node.

use std::io;
use std::net::SocketAddr;

use crate::{Transport, VnodeId};

/// A configuration value outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node config `{field}`: expected {expected}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// The allowed form.
    pub expected: &'static str,
}

/// Creating a node (or a virtual node) failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// [`crate::Node::bind`] was called outside a tokio runtime.
    #[error("Node::bind must be called from within a tokio runtime")]
    NoRuntime,
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The address cannot be advertised in headers.
    #[error("cannot bind a node to {0}: give a concrete IP address (it is the node's address in headers)")]
    UnspecifiedAddress(SocketAddr),
    /// A socket could not be bound.
    #[error("cannot bind {transport} to {addr}: {source}")]
    Bind {
        /// The transport.
        transport: Transport,
        /// The address asked for.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// No free set of ports was found for an ephemeral bind.
    #[error("no free base port found for {0:?} after 64 attempts")]
    NoFreePorts(Vec<Transport>),
    /// Braid's endpoint could not start.
    #[error("cannot start Braid's endpoint: {0}")]
    Braid(#[from] braid_net::NetError),
    /// The transport cannot be a listening transport (`Data` is a
    /// pseudo-transport handled by the DATA interceptor).
    #[error("transport {transport} cannot be enabled: {reason}")]
    TransportUnavailable {
        /// The transport.
        transport: Transport,
        /// Why.
        reason: &'static str,
    },
    /// The identity or known hosts could not be loaded (see
    /// [`crate::NodeAuth`]).
    #[error("node security: {0}")]
    Security(String),
    /// The virtual node is already registered on this node.
    #[error("virtual node {0} is already registered")]
    VnodeTaken(VnodeId),
}

/// Why a message was not sent or not delivered (in a
/// [`crate::DeliveryStatus::Failed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailReason {
    /// No channel to the destination could be opened.
    #[error("cannot connect to {addr} over {transport}: {reason}")]
    ConnectFailed {
        /// The transport.
        transport: Transport,
        /// The destination's transport address.
        addr: SocketAddr,
        /// What went wrong.
        reason: String,
    },
    /// The channel failed before the message was known to be delivered;
    /// it may or may not have arrived (never twice).
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The destination is on this host, but no virtual node of that id is
    /// registered.
    #[error("no virtual node {0} on this host")]
    UnknownVnode(VnodeId),
    /// The node was closed (or the message dropped) before the outcome was
    /// known.
    #[error("node closed before the message was sent")]
    NodeClosed,
    /// The socket refused the datagram.
    #[error("socket error: {0}")]
    Io(String),
}

/// [`crate::Node::send`] refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The message is larger than its transport allows (for UDP: one
    /// datagram, `NodeConfig::udp_max_datagram`).
    #[error("message of {size} bytes (framed) exceeds the {transport} limit of {max} bytes")]
    TooLarge {
        /// The transport.
        transport: Transport,
        /// Framed size of the message.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The node does not run this transport.
    #[error("transport {0} is not enabled on this node")]
    TransportDisabled(Transport),
    /// `Data` must be resolved by the DATA interceptor first.
    #[error("transport `data` must be resolved by a DataInterceptor before the node sends")]
    UnresolvedData,
    /// The destination's port plus the transport's offset overflows.
    #[error("destination {0} has no {1} port (base port + offset > 65535)")]
    NoTransportPort(SocketAddr, Transport),
    /// The header or a typed body could not be encoded.
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What failed (`header` or the type's name).
        what: &'static str,
        /// What postcard said.
        reason: String,
    },
    /// The destination vnode is on this host but not registered.
    #[error("no virtual node {0} on this host")]
    UnknownVnode(VnodeId),
    /// The node is closed.
    #[error("node closed")]
    Closed,
}
