//! Shared by the node's integration tests: configurations that never touch
//! the real `$BRAID_HOME`.

#![allow(dead_code)]

use std::sync::Arc;

use braid_identity::{Identity, KnownHosts, TrustPolicy, TrustStore};
use braid_node::{NodeAuth, NodeConfig, Transport};

/// An identity from a fixed seed (tests repeat).
pub fn identity(n: u8) -> Identity {
    Identity::from_seed(&[n; 32])
}

/// Keys judged by known hosts given as text (`{pattern} {key}` lines).
pub fn keys(identity: Identity, known_hosts: &str) -> NodeAuth {
    let hosts = KnownHosts::parse(known_hosts, "test known hosts").expect("known hosts");
    NodeAuth::Keys { identity, trust: Arc::new(TrustStore::new(TrustPolicy::KnownHosts, hosts)) }
}

/// The configuration the transport tests start from: every node of the test
/// shares one in-memory identity (so they trust each other and no one else),
/// with UDP, TCP and Braid (UDP allowed explicitly: it is unauthenticated).
pub fn base() -> NodeConfig {
    NodeConfig {
        transports: vec![Transport::Udp, Transport::Tcp, Transport::Braid],
        allow_unauthenticated_udp: true,
        security: keys(identity(200), ""),
        ..NodeConfig::default()
    }
}
