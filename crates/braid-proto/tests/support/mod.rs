//! The in-memory network the endpoint and security tests share: two
//! endpoints joined by a one-way delay with random loss, duplication and
//! reordering, in virtual time. Connections are authenticated and
//! encrypted unless a test asks for the bare protocol
//! ([`Net::insecure`]).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use braid_core::{Instant, Rng, RngExt, SeedableRng};
use braid_identity::Identity;
use braid_proto::crypto::TAG_LEN;
use braid_proto::wire::{Packet, PacketType, PublicHeader};
use braid_proto::{AcceptAnyKey, ConnectionHandle, Endpoint, EndpointConfig, Event, PeerVerifier, Security, TransportConfig};
use bytes::Bytes;

/// The identity of endpoint A (the client) in these tests.
pub fn identity_a() -> Identity {
    Identity::from_seed(&[0xa1; 32])
}

/// The identity of endpoint B (the server).
pub fn identity_b() -> Identity {
    Identity::from_seed(&[0xb2; 32])
}

/// Authenticated with `identity`, trusting every key.
pub fn trusting(identity: Identity) -> Security {
    Security::authenticated(identity, Arc::new(AcceptAnyKey))
}

/// Authenticated with `identity`, judging peers with `verifier`.
pub fn judging(identity: Identity, verifier: Arc<dyn PeerVerifier>) -> Security {
    Security::authenticated(identity, verifier)
}

pub const A: &str = "10.0.0.1:1000";
pub const B: &str = "10.0.0.2:2000";

/// Two endpoints joined by a one-way delay, with random loss, duplication
/// and reordering, in virtual time.
pub struct Net {
    pub now: Instant,
    pub a: Endpoint,
    pub b: Endpoint,
    pub delay: Duration,
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    rng: Rng,
    /// (arrival time, sequence) -> (to_b, from, datagram)
    pub in_flight: BTreeMap<(Instant, u64), (bool, SocketAddr, Bytes)>,
    seq: u64,
    /// Datagrams from A to B so far, and which of them (by that count)
    /// to drop.
    pub sent_to_b: u64,
    pub drop_to_b: std::collections::HashSet<u64>,
    pub events_a: Vec<Event>,
    pub events_b: Vec<Event>,
    pub buf: Vec<u8>,
    /// Every datagram put on the wire, both ways (when `capture` is on).
    pub captured: Vec<(bool, Bytes)>,
    pub capture: bool,
    sealed: bool,
    /// A's address (what B sees as the source; B's datagrams reach A only
    /// when sent there).
    pub a_addr: SocketAddr,
    /// Datagrams B sent elsewhere than `a_addr`: (destination, datagram).
    pub misdirected: Vec<(SocketAddr, Bytes)>,
}

impl Net {
    /// Authenticated and encrypted endpoints that trust each other.
    pub fn new(seed: u64, transport: TransportConfig) -> Net {
        Net::with_security(seed, transport, trusting(identity_a()), trusting(identity_b()))
    }

    /// The bare protocol: no handshake keys, plaintext packets.
    pub fn insecure(seed: u64, transport: TransportConfig) -> Net {
        Net::with_security(seed, transport, Security::Insecure, Security::Insecure)
    }

    /// A (client) and B (server) with the given security.
    pub fn with_security(seed: u64, transport: TransportConfig, a: Security, b: Security) -> Net {
        let sealed = a.is_authenticated() && b.is_authenticated();
        let cfg = EndpointConfig { transport, ..Default::default() };
        Net {
            sealed,
            a_addr: A.parse().unwrap(),
            misdirected: Vec::new(),
            captured: Vec::new(),
            capture: false,
            now: Instant::from_nanos(1_000_000_000),
            a: Endpoint::new(EndpointConfig { accept_incoming: false, security: a, ..cfg.clone() }, seed),
            b: Endpoint::new(EndpointConfig { security: b, ..cfg }, seed + 1),
            delay: Duration::from_millis(10),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            rng: Rng::seed_from_u64(seed),
            in_flight: BTreeMap::new(),
            seq: 0,
            sent_to_b: 0,
            drop_to_b: Default::default(),
            events_a: Vec::new(),
            events_b: Vec::new(),
            buf: Vec::new(),
        }
    }

    pub fn flush(&mut self) {
        for to_b in [true, false] {
            loop {
                let a_addr = self.a_addr;
                let (ep, from) = if to_b { (&mut self.a, a_addr) } else { (&mut self.b, B.parse().unwrap()) };
                let Some(t) = ep.poll_transmit(self.now, 10, &mut self.buf) else { break };
                let seg = t.segment_size.unwrap_or(t.size);
                if !to_b && t.destination != a_addr {
                    for chunk in self.buf[..t.size].chunks(seg) {
                        self.misdirected.push((t.destination, Bytes::copy_from_slice(chunk)));
                    }
                    continue;
                }
                for chunk in self.buf[..t.size].chunks(seg) {
                    // What the receiver's GRO split will see: a batch must
                    // hold equal datagrams, only the last shorter; and a
                    // datagram carries something (an empty one wastes a
                    // packet number and the path's capacity).
                    check_datagram(chunk, self.sealed, seg, t.size);
                    if self.capture {
                        self.captured.push((to_b, Bytes::copy_from_slice(chunk)));
                    }
                    if to_b {
                        self.sent_to_b += 1;
                        if self.drop_to_b.contains(&self.sent_to_b) {
                            continue;
                        }
                    }
                    if self.rng.random_bool(self.loss) {
                        continue;
                    }
                    let copies = if self.rng.random_bool(self.dup) { 2 } else { 1 };
                    for _ in 0..copies {
                        let extra = if self.rng.random_bool(self.reorder) { self.delay } else { Duration::ZERO };
                        self.seq += 1;
                        self.in_flight.insert(
                            (self.now + self.delay + extra, self.seq),
                            (to_b, from, Bytes::copy_from_slice(chunk)),
                        );
                    }
                }
            }
        }
        while let Some(e) = self.a.poll_event() {
            self.events_a.push(e);
        }
        while let Some(e) = self.b.poll_event() {
            self.events_b.push(e);
        }
    }

    /// Advance to the next event; false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let next_packet = self.in_flight.keys().next().map(|k| k.0);
        let timers = [self.a.poll_timeout(), self.b.poll_timeout()];
        let next = [next_packet, timers[0], timers[1]].into_iter().flatten().min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (to_b, from, data) = entry.remove();
            if to_b { self.b.handle_datagram(self.now, from, data) } else { self.a.handle_datagram(self.now, from, data) }
        }
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.flush();
        true
    }

    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let deadline = self.now + limit;
        while self.now < deadline {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    pub fn accepted(&self) -> Option<ConnectionHandle> {
        self.events_b.iter().find_map(|e| if let Event::Accepted(h) = e { Some(*h) } else { None })
    }
}

pub fn message(i: usize, len: usize) -> Bytes {
    Bytes::from((0..len).map(|j| (i * 7 + j * 13) as u8).collect::<Vec<_>>())
}

/// Sends `msgs` from A to B (respecting backpressure) and returns what B read.
pub fn transfer(net: &mut Net, msgs: &[Bytes], limit: Duration) -> Vec<Bytes> {
    let conn = net.a.connect(net.now, B.parse().unwrap()).unwrap();
    let mut next = 0;
    let mut got = Vec::new();
    let mut server = None;
    net.run_until(limit, |net| {
        while next < msgs.len() {
            match net.a.send_message(conn, msgs[next].clone()) {
                Ok(()) => next += 1,
                Err(braid_proto::SendError::Blocked(_)) => break,
                Err(e) => panic!("send failed: {e}"),
            }
        }
        server = server.or(net.accepted());
        if let Some(h) = server {
            while let Ok(Some(m)) = net.b.recv_message(h) {
                got.push(m);
            }
        }
        got.len() == msgs.len()
    });
    got
}

/// What the receiver's GRO split will see: a batch must hold equal
/// datagrams, only the last shorter; and a datagram carries something (an
/// empty one wastes a packet number and the path's capacity).
fn check_datagram(chunk: &[u8], sealed: bool, seg: usize, size: usize) {
    let datagram = Bytes::copy_from_slice(chunk);
    let header = PublicHeader::decode(&datagram).unwrap_or_else(|e| {
        panic!("a batch of {size} bytes split at its segment size {seg} gave an undecodable datagram: {e:?}")
    });
    // Accepts without a Noise message are stateless refusals, in plaintext.
    let protected = sealed
        && (header.ty == PacketType::Data || (header.ty == PacketType::Accept && !header.noise.is_empty()));
    if protected {
        // Frames can only be checked by the receiver; a sealed packet is at
        // least a frame and a tag.
        assert!(
            datagram.len() > header.payload_offset + TAG_LEN,
            "an empty sealed packet in a batch of {size} bytes"
        );
        return;
    }
    match Packet::decode(datagram) {
        Ok(p) => assert!(
            p.frames().next().is_some() || p.header.ty != PacketType::Data,
            "an empty packet (number {}) in a batch of {size} bytes",
            p.header.pn
        ),
        Err(e) => panic!("a batch of {size} bytes split at its segment size {seg} gave an undecodable datagram: {e:?}"),
    }
}
