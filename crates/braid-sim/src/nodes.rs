//! Small ready-made nodes: an echo server and a pinger. They make the
//! simulator usable and testable on its own (measure a path's RTT, jitter
//! and loss) without a transport.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use bytes::{BufMut, Bytes, BytesMut};

use crate::{Datagram, Node};

/// Sends every datagram it receives back to its sender, from the address it
/// was sent to (a UDP echo server on every port).
#[derive(Debug, Default)]
pub struct EchoNode {
    replies: VecDeque<Datagram>,
    echoed: u64,
}

impl EchoNode {
    /// Datagrams echoed so far.
    pub fn echoed(&self) -> u64 {
        self.echoed
    }
}

impl Node for EchoNode {
    fn handle_datagram(&mut self, _now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        self.echoed += 1;
        self.replies.push_back(Datagram {
            src: dst,
            dst: src,
            payload,
        });
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        self.replies.pop_front()
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Sends `count` numbered probes to a target at a fixed interval, starting
/// when first polled, and records the round-trip time of each reply.
///
/// A probe is 16 bytes (sequence number and send time, little-endian)
/// padded with zeros to the requested size.
#[derive(Debug)]
pub struct PingNode {
    local: SocketAddr,
    target: SocketAddr,
    count: u64,
    interval: Duration,
    size: usize,
    start: Option<Instant>,
    sent: u64,
    seen: HashSet<u64>,
    rtts: Vec<Duration>,
    duplicates: u64,
    malformed: u64,
}

impl PingNode {
    /// Bytes of a probe before padding.
    pub const HEADER: usize = 16;

    /// A pinger at `local` probing `target` `count` times, every `interval`,
    /// with probes of `size` bytes (at least [`Self::HEADER`]).
    pub fn new(
        local: SocketAddr,
        target: SocketAddr,
        count: u64,
        interval: Duration,
        size: usize,
    ) -> Self {
        PingNode {
            local,
            target,
            count,
            interval,
            size: size.max(Self::HEADER),
            start: None,
            sent: 0,
            seen: HashSet::new(),
            rtts: Vec::new(),
            duplicates: 0,
            malformed: 0,
        }
    }

    /// Round-trip times of first replies, in arrival order.
    pub fn rtts(&self) -> &[Duration] {
        &self.rtts
    }

    /// Probes sent.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Probes never answered (so far).
    pub fn lost(&self) -> u64 {
        self.sent - self.seen.len() as u64
    }

    /// Replies to a probe already answered.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Replies too short or for a probe never sent (dropped).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    fn due(&self, i: u64) -> Option<Instant> {
        let start = self.start?;
        (i < self.count).then(|| {
            start
                + self
                    .interval
                    .saturating_mul(u32::try_from(i).unwrap_or(u32::MAX))
        })
    }
}

impl Node for PingNode {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, _dst: SocketAddr, payload: Bytes) {
        let field = |i: usize| {
            payload
                .get(i..i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        };
        let (Some(seq), Some(sent_at)) = (field(0), field(8)) else {
            self.malformed += 1;
            return;
        };
        if src != self.target || seq >= self.sent {
            self.malformed += 1;
        } else if !self.seen.insert(seq) {
            self.duplicates += 1;
        } else {
            self.rtts.push(now - Instant::from_nanos(sent_at));
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        self.start.get_or_insert(now);
        if self.due(self.sent)? > now {
            return None;
        }
        let mut payload = BytesMut::with_capacity(self.size);
        payload.put_u64_le(self.sent);
        payload.put_u64_le(now.as_nanos());
        payload.resize(self.size, 0);
        self.sent += 1;
        Some(Datagram {
            src: self.local,
            dst: self.target,
            payload: payload.freeze(),
        })
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.due(self.sent)
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Either of the ready-made nodes, for a simulator holding both kinds.
#[derive(Debug)]
pub enum BasicNode {
    /// An [`EchoNode`].
    Echo(EchoNode),
    /// A [`PingNode`].
    Ping(PingNode),
}

impl Node for BasicNode {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        match self {
            BasicNode::Echo(n) => n.handle_datagram(now, src, dst, payload),
            BasicNode::Ping(n) => n.handle_datagram(now, src, dst, payload),
        }
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        match self {
            BasicNode::Echo(n) => n.poll_transmit(now),
            BasicNode::Ping(n) => n.poll_transmit(now),
        }
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        match self {
            BasicNode::Echo(n) => n.poll_timeout(),
            BasicNode::Ping(n) => n.poll_timeout(),
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            BasicNode::Echo(n) => n.handle_timeout(now),
            BasicNode::Ping(n) => n.handle_timeout(now),
        }
    }
}
