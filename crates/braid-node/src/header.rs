//! Headers (seed 000 §III-A, Listings 3 and 5): what every message
//! carries, extensible by the application through its own types.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Address, Transport};

/// The minimum the node needs from a header: where a message comes from,
/// where it goes next, and how. Applications add fields (a reply-to
/// address, a multi-hop route, ...) by implementing this trait for their
/// own type; the node is generic over it, so the fields come back typed
/// on the receiving side.
pub trait Header: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The address type.
    type Addr: Address;
    /// The sender of this hop.
    fn source(&self) -> &Self::Addr;
    /// The receiver of this hop.
    fn destination(&self) -> &Self::Addr;
    /// How this hop travels.
    fn transport(&self) -> Transport;
    /// Replace how this hop travels, for a transport the node chose for
    /// the destination ([`crate::Node::set_transport_for`]); returns false
    /// if this header type cannot be rewritten (the default), in which
    /// case the message travels as its header says.
    fn override_transport(&mut self, _transport: Transport) -> bool {
        false
    }
}

/// A header whose transport can be replaced, which is what the DATA
/// interceptor (seed 000 §IV-A, "DataHeader") needs to resolve
/// [`Transport::Data`] into `Tcp` or `Braid`.
pub trait DataHeader: Header {
    /// Replace the transport.
    fn set_transport(&mut self, transport: Transport);
}

/// The default header: source, destination and transport.
///
/// ```
/// use braid_node::{BasicAddress, BasicHeader, Header, Transport};
/// let a = BasicAddress::new("127.0.0.1:7000".parse().unwrap());
/// let b = BasicAddress::new("127.0.0.1:8000".parse().unwrap());
/// let h = BasicHeader::new(a, b, Transport::Tcp);
/// assert_eq!(h.destination(), &b);
/// assert_eq!(h.reply(Transport::Udp).destination(), &a);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BasicHeader<A = crate::BasicAddress> {
    /// The sender.
    pub src: A,
    /// The receiver.
    pub dst: A,
    /// How the message travels.
    pub proto: Transport,
}

impl<A: Address> BasicHeader<A> {
    /// A header from `src` to `dst` over `proto`.
    pub fn new(src: A, dst: A, proto: Transport) -> Self {
        BasicHeader { src, dst, proto }
    }

    /// The header of a reply: source and destination swapped.
    pub fn reply(&self, proto: Transport) -> Self {
        BasicHeader { src: self.dst.clone(), dst: self.src.clone(), proto }
    }
}

impl<A: Address> Header for BasicHeader<A> {
    type Addr = A;
    fn source(&self) -> &A {
        &self.src
    }
    fn destination(&self) -> &A {
        &self.dst
    }
    fn transport(&self) -> Transport {
        self.proto
    }
    fn override_transport(&mut self, transport: Transport) -> bool {
        self.proto = transport;
        true
    }
}

impl<A: Address> DataHeader for BasicHeader<A> {
    fn set_transport(&mut self, transport: Transport) {
        self.proto = transport;
    }
}

/// The intermediate hops of a multi-hop route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route<A> {
    hops: Vec<A>,
    /// Index of the hop the message travels to now; `hops.len()` once
    /// every hop was visited (the message then goes to its final
    /// destination).
    next: usize,
}

impl<A: Address> Route<A> {
    /// A route through `hops`, in order.
    pub fn new(hops: Vec<A>) -> Self {
        Route { hops, next: 0 }
    }

    /// Whether an intermediate hop is still ahead.
    pub fn has_next(&self) -> bool {
        self.next < self.hops.len()
    }

    /// The intermediate hops.
    pub fn hops(&self) -> &[A] {
        &self.hops
    }
}

/// The paper's Listing 5: a header that forwards a message through
/// intermediate hosts before its final destination. `source()` and
/// `destination()` describe the current hop, so the node needs nothing
/// else to carry it; [`RoutingHeader::origin`] and
/// [`RoutingHeader::final_destination`] stay available to the
/// application, typed, at every hop (a reply can go straight back to the
/// origin).
///
/// ```
/// use braid_node::{BasicAddress, Header, RoutingHeader, Transport};
/// let a = BasicAddress::new("127.0.0.1:7000".parse().unwrap());
/// let b = BasicAddress::new("127.0.0.1:7100".parse().unwrap());
/// let c = BasicAddress::new("127.0.0.1:7200".parse().unwrap());
/// let mut h = RoutingHeader::routed(a, c, vec![b], Transport::Tcp);
/// assert_eq!((h.source(), h.destination()), (&a, &b));
/// assert!(h.forward()); // at b: on to c
/// assert_eq!((h.source(), h.destination()), (&b, &c));
/// assert!(!h.forward()); // at c: arrived
/// assert_eq!(h.origin(), &a);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingHeader<A = crate::BasicAddress> {
    base: BasicHeader<A>,
    route: Option<Route<A>>,
}

impl<A: Address> RoutingHeader<A> {
    /// A direct message (no intermediate hop).
    pub fn direct(src: A, dst: A, proto: Transport) -> Self {
        RoutingHeader { base: BasicHeader::new(src, dst, proto), route: None }
    }

    /// A message from `origin` to `dst` through `hops`.
    pub fn routed(origin: A, dst: A, hops: Vec<A>, proto: Transport) -> Self {
        let route = if hops.is_empty() { None } else { Some(Route::new(hops)) };
        RoutingHeader { base: BasicHeader::new(origin, dst, proto), route }
    }

    /// Who sent the message first.
    pub fn origin(&self) -> &A {
        &self.base.src
    }

    /// Where the message ends.
    pub fn final_destination(&self) -> &A {
        &self.base.dst
    }

    /// The route, if any.
    pub fn route(&self) -> Option<&Route<A>> {
        self.route.as_ref()
    }

    /// Called by the host the message just reached: moves the header to
    /// the next hop and returns true if the message must be sent on, or
    /// returns false if this host is its final destination.
    pub fn forward(&mut self) -> bool {
        match &mut self.route {
            Some(r) if r.has_next() => {
                r.next += 1;
                true
            }
            _ => false,
        }
    }
}

impl<A: Address> Header for RoutingHeader<A> {
    type Addr = A;
    fn source(&self) -> &A {
        match &self.route {
            // `get`: a header from the wire may carry any `next`.
            Some(r) if r.next > 0 => r.hops.get(r.next - 1).unwrap_or(&self.base.src),
            _ => &self.base.src,
        }
    }
    fn destination(&self) -> &A {
        match &self.route {
            Some(r) if r.has_next() => &r.hops[r.next],
            _ => &self.base.dst,
        }
    }
    fn transport(&self) -> Transport {
        self.base.proto
    }
    fn override_transport(&mut self, transport: Transport) -> bool {
        self.base.proto = transport;
        true
    }
}

impl<A: Address> DataHeader for RoutingHeader<A> {
    fn set_transport(&mut self, transport: Transport) {
        self.base.proto = transport;
    }
}
