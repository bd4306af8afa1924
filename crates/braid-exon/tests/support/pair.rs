//! Two authenticated Exon nodes wired back to back by hand: the security
//! and cookie tests drive every datagram themselves, so that they can
//! drop, forge, replay or tamper with any of them.

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_exon::{ExonNode, NodeConfig, NodeId};
use bytes::Bytes;

use super::{identity, trusting};

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Every datagram `from` has to send now, as (destination, bytes).
pub fn drain(from: &mut ExonNode, now: Instant) -> Vec<(SocketAddr, Bytes)> {
    if let Some(l) = from.clock_request() {
        from.clock_persisted(l);
    }
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        out.push((t.dst, Bytes::copy_from_slice(&buf[..t.size])));
    }
    out
}

/// `a` (at `sa`) knows where `b` (at `sb`) is; each trusts only the other.
pub struct Pair {
    pub a: ExonNode,
    pub b: ExonNode,
    pub sa: SocketAddr,
    pub sb: SocketAddr,
    pub a_id: NodeId,
    pub b_id: NodeId,
    pub now: Instant,
}

impl Pair {
    /// `a` configured with `a_cfg`, `b` with `b_cfg`, the clock at `now`.
    pub fn new(a_cfg: NodeConfig, b_cfg: NodeConfig, now: Instant) -> Pair {
        let (ka, kb) = (identity(1), identity(2));
        let (pa, pb) = (ka.public_key(), kb.public_key());
        let mut a = ExonNode::new(a_cfg, trusting(ka, pb), [1; 32], 0);
        let b = ExonNode::new(b_cfg, trusting(kb, pa), [2; 32], 0);
        let sb = addr("10.0.0.2:1");
        let b_id = a.add_peer(&pb, sb);
        Pair { a, b, sa: addr("10.0.0.1:1"), sb, a_id: NodeId::of(&pa), b_id, now }
    }

    /// One round: a's datagrams to b, b's to a (those addressed to a's
    /// address), then 1 ms passes. Returns what went each way.
    pub fn round(&mut self) -> (Vec<Bytes>, Vec<Bytes>) {
        let ab: Vec<Bytes> = drain(&mut self.a, self.now).into_iter().map(|(_, d)| d).collect();
        for d in &ab {
            self.b.handle_datagram(self.now, self.sa, d.clone());
        }
        let ba: Vec<Bytes> =
            drain(&mut self.b, self.now).into_iter().filter(|(dst, _)| *dst == self.sa).map(|(_, d)| d).collect();
        for d in &ba {
            self.a.handle_datagram(self.now, self.sb, d.clone());
        }
        self.now += Duration::from_millis(1);
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        (ab, ba)
    }
}
