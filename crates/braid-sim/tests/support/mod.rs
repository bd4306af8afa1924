//! The one adapter that runs a `braid_proto::Endpoint` as a simulator
//! [`Node`], shared by braid-sim's integration tests.
//!
//! Every simulator test drives its endpoints the same way: a datagram or a
//! timer goes to the endpoint, then the test's application reacts; the
//! node's transmits are the endpoint's, one datagram each (each is its own
//! packet on the simulated link). Having one copy of that loop means a
//! difference between two tests' results comes from what they test, not
//! from how each wired the endpoint up. It lives here, not in braid-sim's
//! library, because the library must not depend on any protocol crate
//! (braid-proto is only a dev-dependency).

use std::net::SocketAddr;

use braid_core::Instant;
use braid_proto::Endpoint;
use braid_sim::{Datagram, Node};
use bytes::Bytes;

/// A test's application on top of an endpoint.
pub trait App {
    /// React to the endpoint's events and send what can be sent; returns
    /// whether anything happened (the adapter asks the endpoint for more
    /// datagrams only then).
    fn drive(&mut self, endpoint: &mut Endpoint, now: Instant) -> bool;

    /// A datagram arrived, before the endpoint sees it: where a test
    /// measures the network (by default nothing).
    fn on_receive(&mut self, _now: Instant, _payload: &Bytes) {}

    /// A datagram leaves the node (by default nothing).
    fn on_transmit(&mut self, _now: Instant, _payload: &Bytes) {}
}

/// An endpoint and its application as a simulator node.
pub struct EndpointNode<A> {
    pub endpoint: Endpoint,
    pub app: A,
    /// Where a transmit that names no source address leaves from (the
    /// node's first address; multipath sets the source of other paths).
    default_source: SocketAddr,
    buf: Vec<u8>,
}

impl<A> EndpointNode<A> {
    pub fn new(endpoint: Endpoint, app: A, default_source: SocketAddr) -> EndpointNode<A> {
        EndpointNode { endpoint, app, default_source, buf: Vec::with_capacity(2048) }
    }
}

impl<A: App> Node for EndpointNode<A> {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        self.app.on_receive(now, &payload);
        // The local address tells a multi-homed host's paths apart; on a
        // single path it is the address the endpoint answers from anyway.
        self.endpoint.handle_datagram_on(now, Some(dst), src, payload);
        self.app.drive(&mut self.endpoint, now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        loop {
            if let Some(t) = self.endpoint.poll_transmit(now, 1, &mut self.buf) {
                let src = t.source.unwrap_or(self.default_source);
                let payload = Bytes::copy_from_slice(&self.buf[..t.size]);
                self.app.on_transmit(now, &payload);
                return Some(Datagram { src, dst: t.destination, payload });
            }
            // Sending can raise events, and handling them queue more.
            if !self.app.drive(&mut self.endpoint, now) {
                return None;
            }
        }
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.endpoint.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.app.drive(&mut self.endpoint, now);
    }
}
