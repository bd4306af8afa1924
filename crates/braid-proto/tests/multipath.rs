//! Multipath at the endpoint level, over a tiny in-memory network with one
//! link per address pair: path setup and validation, delivery over several
//! paths under loss, path removal and failure (data rescheduled), backup
//! status, hostile path ids, and the receiver-side cases of the ProgMP
//! thesis §3.4.6 (deliverable data never waits for another path).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use braid_core::{Instant, Rng, RngExt, SeedableRng};
use braid_proto::progmp::{builtin, Program, Register};
use braid_proto::wire::{self, Frame, Header, Packet, PacketType};
use braid_identity::Identity;
use braid_proto::wire::PublicHeader;
use braid_proto::{
    AcceptAnyKey, ConnectionHandle, Endpoint, EndpointConfig, Event, PathError, Security, SendError, TransportConfig,
};
use bytes::Bytes;
use proptest::prelude::*;

const A1: &str = "10.0.0.1:1000";
const A2: &str = "10.0.1.1:1000";
const B1: &str = "10.0.0.2:2000";
const B2: &str = "10.0.1.2:2000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[derive(Clone, Copy)]
struct Link {
    delay: Duration,
    loss: f64,
    up: bool,
}

/// A datagram as the network saw it leave.
#[derive(Debug, Clone)]
#[allow(dead_code)]
struct Seen {
    from_client: bool,
    src: SocketAddr,
    dst: SocketAddr,
    path_id: u32,
    /// (offset, length) of each DATA frame.
    data: Vec<(u64, u64)>,
}

/// Client `a` (addresses A1, A2) and server `b` (B1, B2), with a link per
/// directed address pair.
struct Net {
    now: Instant,
    a: Endpoint,
    b: Endpoint,
    links: HashMap<(IpAddr, IpAddr), Link>,
    rng: Rng,
    /// (arrival, sequence) -> (to the server, src, dst, datagram)
    in_flight: BTreeMap<(Instant, u64), (bool, SocketAddr, SocketAddr, Bytes)>,
    seq: u64,
    events_a: Vec<Event>,
    events_b: Vec<Event>,
    seen: Vec<Seen>,
    buf: Vec<u8>,
    /// Packets are sealed: `seen` records wire bytes per path, not frames.
    sealed: bool,
}

impl Net {
    fn new(seed: u64, transport: TransportConfig) -> Net {
        Net::with_security(seed, transport, Security::Insecure, Security::Insecure)
    }

    /// Authenticated and encrypted endpoints that trust each other.
    fn secure(seed: u64, transport: TransportConfig) -> Net {
        let a = Security::authenticated(Identity::from_seed(&[1; 32]), Arc::new(AcceptAnyKey));
        let b = Security::authenticated(Identity::from_seed(&[2; 32]), Arc::new(AcceptAnyKey));
        Net::with_security(seed, transport, a, b)
    }

    fn with_security(seed: u64, transport: TransportConfig, a: Security, b: Security) -> Net {
        let sealed = a.is_authenticated();
        let cfg = EndpointConfig { transport, ..Default::default() };
        let mut net = Net {
            sealed,
            now: Instant::from_nanos(1_000_000_000),
            a: Endpoint::new(EndpointConfig { accept_incoming: false, security: a, ..cfg.clone() }, seed),
            b: Endpoint::new(EndpointConfig { security: b, ..cfg }, seed + 1),
            links: HashMap::new(),
            rng: Rng::seed_from_u64(seed),
            in_flight: BTreeMap::new(),
            seq: 0,
            events_a: Vec::new(),
            events_b: Vec::new(),
            seen: Vec::new(),
            buf: Vec::new(),
        };
        net.set_link(A1, B1, Duration::from_millis(10), 0.0);
        net.set_link(A2, B2, Duration::from_millis(30), 0.0);
        net
    }

    /// Both directions between `x` and `y`: one-way `delay`, `loss`.
    fn set_link(&mut self, x: &str, y: &str, delay: Duration, loss: f64) {
        let (x, y) = (addr(x).ip(), addr(y).ip());
        for k in [(x, y), (y, x)] {
            self.links.insert(k, Link { delay, loss, up: true });
        }
    }

    fn set_up(&mut self, x: &str, y: &str, up: bool) {
        let (x, y) = (addr(x).ip(), addr(y).ip());
        for k in [(x, y), (y, x)] {
            self.links.get_mut(&k).unwrap().up = up;
        }
    }

    fn flush(&mut self) {
        for to_b in [true, false] {
            loop {
                let (ep, default) = if to_b { (&mut self.a, A1) } else { (&mut self.b, B1) };
                let Some(t) = ep.poll_transmit(self.now, 10, &mut self.buf) else { break };
                let src = t.source.unwrap_or(addr(default));
                let seg = t.segment_size.unwrap_or(t.size);
                for chunk in self.buf[..t.size].chunks(seg) {
                    let d = Bytes::copy_from_slice(chunk);
                    if self.sealed {
                        // Only the public header can be read: count wire bytes.
                        let h = PublicHeader::decode(&d).expect("a decodable public header");
                        let data = vec![(0, d.len() as u64)];
                        self.seen.push(Seen { from_client: to_b, src, dst: t.destination, path_id: h.path_id, data });
                        let Some(link) = self.links.get(&(src.ip(), t.destination.ip())).copied() else { continue };
                        if !link.up || self.rng.random_bool(link.loss) {
                            continue;
                        }
                        self.seq += 1;
                        self.in_flight.insert((self.now + link.delay, self.seq), (to_b, src, t.destination, d));
                        continue;
                    }
                    // What the receiver's GRO split will see: a batch must
                    // hold equal datagrams, only the last shorter.
                    let decoded = Packet::decode(d.clone());
                    if let Err(e) = &decoded {
                        panic!("a batch of {} bytes split at its segment size {seg} gave an undecodable datagram: {e:?}", t.size);
                    }
                    if let Ok(p) = decoded {
                        let data = p
                            .frames()
                            .filter_map(|f| match f {
                                Frame::Data { offset, data, .. } => Some((offset, data.len() as u64)),
                                _ => None,
                            })
                            .collect();
                        self.seen.push(Seen { from_client: to_b, src, dst: t.destination, path_id: p.header.path_id, data });
                    }
                    let Some(link) = self.links.get(&(src.ip(), t.destination.ip())).copied() else { continue };
                    if !link.up || self.rng.random_bool(link.loss) {
                        continue;
                    }
                    self.seq += 1;
                    self.in_flight.insert((self.now + link.delay, self.seq), (to_b, src, t.destination, d));
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

    /// Advance to the next event, if it is no later than `deadline`; false
    /// when nothing is left to happen before it.
    fn step(&mut self, deadline: Instant) -> bool {
        self.flush();
        let next_packet = self.in_flight.keys().next().map(|k| k.0);
        let timers = [self.a.poll_timeout(), self.b.poll_timeout()];
        let Some(next) = [next_packet, timers[0], timers[1]].into_iter().flatten().min() else { return false };
        if next > deadline {
            self.now = deadline;
            return false;
        }
        self.now = self.now.max(next);
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (to_b, src, dst, data) = entry.remove();
            let ep = if to_b { &mut self.b } else { &mut self.a };
            ep.handle_datagram_on(self.now, Some(dst), src, data);
        }
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.flush();
        true
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let deadline = self.now + limit;
        while self.now < deadline {
            if done(self) {
                return true;
            }
            if !self.step(deadline) {
                return done(self);
            }
        }
        done(self)
    }

    fn accepted(&self) -> Option<ConnectionHandle> {
        self.events_b.iter().find_map(|e| if let Event::Accepted(h) = e { Some(*h) } else { None })
    }

    /// Connect on A1–B1 and open a second path A2–B2; wait until both are
    /// validated at both ends.
    fn connect_two_paths(&mut self, backup: bool) -> (ConnectionHandle, ConnectionHandle, u32) {
        let conn = self.a.connect(self.now, addr(B1)).unwrap();
        assert!(self.run_until(Duration::from_secs(2), |n| n.a.is_established(conn)));
        let id = self.a.add_path(conn, Some(addr(A2)), addr(B2), backup).unwrap();
        let ok = self.run_until(Duration::from_secs(2), |n| {
            let server = n.accepted();
            n.a.paths(conn).iter().all(|p| p.validated)
                && server.is_some_and(|s| n.b.paths(s).len() == 2 && n.b.paths(s).iter().all(|p| p.validated))
        });
        assert!(ok, "paths: {:?}", self.a.paths(conn));
        (conn, self.accepted().unwrap(), id)
    }
}

fn message(i: usize, len: usize) -> Bytes {
    Bytes::from((0..len).map(|j| (i * 7 + j * 13) as u8).collect::<Vec<_>>())
}

/// Which end sends in a [`pump`].
#[derive(Clone, Copy)]
enum Direction {
    /// The client sends, the server reads.
    Upload,
    /// The server sends, the client reads.
    Download,
}

/// An upload: [`pump`] from the client to the server.
fn transfer(
    net: &mut Net,
    conn: ConnectionHandle,
    server: ConnectionHandle,
    msgs: &[Bytes],
    limit: Duration,
    during: impl FnMut(&mut Net, usize),
) -> Vec<Bytes> {
    pump(net, Direction::Upload, conn, server, msgs, limit, during)
}

/// Sends `msgs` in `direction` over the connection (`conn` at the client,
/// `server` at the server), respecting backpressure; returns what the other
/// end read within `limit`. `during` runs at every step with the count read
/// so far (to break or change things mid-transfer). One loop for both
/// directions, so uploads and downloads are driven alike.
fn pump(
    net: &mut Net,
    direction: Direction,
    conn: ConnectionHandle,
    server: ConnectionHandle,
    msgs: &[Bytes],
    limit: Duration,
    mut during: impl FnMut(&mut Net, usize),
) -> Vec<Bytes> {
    let mut next = 0;
    let mut got = Vec::new();
    net.run_until(limit, |net| {
        let ((sender, from), (receiver, to)) = match direction {
            Direction::Upload => ((&mut net.a, conn), (&mut net.b, server)),
            Direction::Download => ((&mut net.b, server), (&mut net.a, conn)),
        };
        while next < msgs.len() {
            match sender.send_message(from, msgs[next].clone()) {
                Ok(()) => next += 1,
                Err(SendError::Blocked(_)) => break,
                Err(e) => panic!("send failed: {e}"),
            }
        }
        while let Ok(Some(m)) = receiver.recv_message(to) {
            got.push(m);
        }
        during(net, got.len());
        got.len() == msgs.len()
    });
    got
}

fn program(name: &str) -> Arc<Program> {
    Arc::new(Program::compile(builtin(name).unwrap().source).unwrap())
}

/// Stream bytes each path of the client carried, by path id.
fn carried(net: &Net) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for s in net.seen.iter().filter(|s| s.from_client) {
        *m.entry(s.path_id).or_insert(0) += s.data.iter().map(|d| d.1).sum::<u64>();
    }
    m
}

#[test]
fn a_second_path_is_validated_at_both_ends_with_the_right_addresses() {
    let mut net = Net::new(1, TransportConfig::default());
    let (conn, server, id) = net.connect_two_paths(false);
    assert_eq!(id, 1);
    let client_paths = net.a.paths(conn);
    assert_eq!((client_paths[0].id, client_paths[0].local, client_paths[0].remote), (0, None, addr(B1)));
    assert_eq!((client_paths[1].id, client_paths[1].local, client_paths[1].remote), (1, Some(addr(A2)), addr(B2)));
    let server_paths = net.b.paths(server);
    assert_eq!((server_paths[1].id, server_paths[1].local, server_paths[1].remote), (1, Some(addr(B2)), addr(A2)));
    // Each path has its own RTT: 20 ms and 60 ms round trips.
    let rtt = |p: &braid_proto::PathInfo| p.min_rtt.as_millis();
    assert!((19..=22).contains(&rtt(&client_paths[0])), "{:?}", client_paths[0]);
    assert!((59..=62).contains(&rtt(&client_paths[1])), "{:?}", client_paths[1]);
    // The server answers path 1 from B2 and path 0 from its default address.
    assert!(net.seen.iter().any(|s| !s.from_client && s.path_id == 1 && s.src == addr(B2) && s.dst == addr(A2)));
    assert!(net.seen.iter().filter(|s| !s.from_client && s.path_id == 0).all(|s| s.dst == addr(A1)));
    assert_eq!(net.a.connection_stats(conn).unwrap().paths, 2);
}

#[test]
fn add_path_refuses_duplicates_servers_and_too_many() {
    let mut net = Net::new(2, TransportConfig::default());
    let (conn, server, _) = net.connect_two_paths(false);
    assert_eq!(
        net.a.add_path(conn, Some(addr(A2)), addr(B2), false),
        Err(PathError::Duplicate { local: Some(addr(A2)), remote: addr(B2) })
    );
    assert_eq!(net.b.add_path(server, None, addr(A1), false), Err(PathError::NotClient));
    assert_eq!(net.a.remove_path(ConnectionHandle(999), 1), Err(PathError::UnknownConnection));
    assert_eq!(net.a.remove_path(conn, 7), Err(PathError::UnknownPath(7)));
    for port in 0..(braid_proto::MAX_PATHS - 2) as u16 {
        net.a.add_path(conn, Some(SocketAddr::new(addr(A2).ip(), 3000 + port)), addr(B2), false).unwrap();
    }
    assert_eq!(
        net.a.add_path(conn, Some(addr("10.9.9.9:1")), addr(B2), false),
        Err(PathError::TooMany { max: braid_proto::MAX_PATHS })
    );
}

#[test]
fn data_spreads_over_both_paths_and_arrives_byte_exact_under_loss() {
    let mut net = Net::new(3, TransportConfig::default());
    net.set_link(A1, B1, Duration::from_millis(10), 0.02);
    net.set_link(A2, B2, Duration::from_millis(15), 0.02);
    let (conn, server, _) = net.connect_two_paths(false);
    let msgs: Vec<Bytes> = (0..40).map(|i| message(i, 50_000 + i)).collect();
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(120), |_, _| {});
    assert!(got == msgs, "{} of {} messages", got.len(), msgs.len());
    let by_path = carried(&net);
    let total: u64 = msgs.iter().map(|m| m.len() as u64).sum();
    // Minimum RTT with windows filled: both paths carry a real share.
    for id in [0, 1] {
        assert!(by_path[&id] > total / 10, "path {id} carried {by_path:?} of {total}");
    }
    let stats = net.a.connection_stats(conn).unwrap();
    assert!(stats.packets_lost > 0 && stats.scheduler_runs > 0 && stats.scheduler_pushes > 0, "{stats:?}");
}

#[test]
fn encrypted_multipath_spreads_data_and_survives_a_failed_path() {
    let mut net = Net::secure(3, TransportConfig::default());
    net.set_link(A1, B1, Duration::from_millis(10), 0.02);
    net.set_link(A2, B2, Duration::from_millis(15), 0.02);
    let (conn, server, id) = net.connect_two_paths(false);
    let msgs: Vec<Bytes> = (0..40).map(|i| message(i, 50_000 + i)).collect();
    // Path 1 fails for good half-way.
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(120), |net, n| {
        if n == 20 {
            net.set_up(A2, B2, false);
        }
    });
    assert!(
        got == msgs,
        "{} of {} messages; client {:?}; server {:?}",
        got.len(),
        msgs.len(),
        net.a.connection_stats(conn),
        net.b.connection_stats(server)
    );
    let by_path = carried(&net);
    let total: u64 = msgs.iter().map(|m| m.len() as u64).sum();
    for p in [0, id] {
        assert!(by_path[&p] > total / 10, "path {p} carried {by_path:?} of {total}");
    }
    let (a, b) = (net.a.connection_stats(conn).unwrap(), net.b.connection_stats(server).unwrap());
    assert_eq!(a.auth_failures + b.auth_failures, 0);
    assert!(net.a.cipher_suite(conn).is_some());
}

#[test]
fn removing_a_path_moves_its_data_to_the_others() {
    let mut net = Net::new(4, TransportConfig::default());
    let (conn, server, id) = net.connect_two_paths(false);
    let msgs: Vec<Bytes> = (0..20).map(|i| message(i, 40_000)).collect();
    let mut removed = false;
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(60), |net, n| {
        if n >= 2 && !removed {
            removed = true;
            // Path 1's link dies with the removal: whatever it had in
            // flight is lost and must come back through path 0.
            net.set_up(A2, B2, false);
            net.a.remove_path(conn, id).unwrap();
        }
    });
    assert!(removed && got == msgs, "{} of {}", got.len(), msgs.len());
    assert_eq!(net.a.paths(conn).len(), 1);
    assert_eq!(net.a.remove_path(conn, 0), Err(PathError::LastPath(0)));
    // The server heard the PATH_ABANDON over path 0.
    assert!(net.run_until(Duration::from_secs(1), |n| n.b.paths(server).len() == 1));
    assert_eq!(net.b.connection_stats(server).unwrap().paths_abandoned, 1);
}

#[test]
fn a_failed_path_is_abandoned_and_its_data_rescheduled() {
    let mut net = Net::new(5, TransportConfig::default());
    let (conn, server, _) = net.connect_two_paths(false);
    let msgs: Vec<Bytes> = (0..30).map(|i| message(i, 40_000)).collect();
    let mut broke = None;
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(120), |net, n| {
        if n >= 3 && broke.is_none() {
            broke = Some(net.now);
            net.set_up(A2, B2, false);
        }
    });
    assert!(got == msgs, "{} of {}", got.len(), msgs.len());
    // The path is given up after repeated timeouts (it may already have
    // been, if the transfer outlasted them).
    assert!(net.run_until(Duration::from_secs(30), |n| n.a.paths(conn).len() == 1), "{:?}", net.a.paths(conn));
    let stats = net.a.connection_stats(conn).unwrap();
    assert!(stats.rto_count >= 4 && stats.paths_abandoned == 1, "{stats:?}");
}

#[test]
fn backup_status_reaches_the_peer_and_can_be_changed() {
    let mut net = Net::new(6, TransportConfig::default());
    let (conn, server, id) = net.connect_two_paths(true);
    assert!(net.a.paths(conn)[1].backup);
    assert!(net.run_until(Duration::from_secs(1), |n| n.b.paths(server)[1].backup));
    net.a.set_path_backup(conn, id, false).unwrap();
    assert!(net.run_until(Duration::from_secs(1), |n| !n.b.paths(server)[1].backup));
    // The server may ask too: then the path is a backup at the client.
    net.b.set_path_backup(server, id, true).unwrap();
    assert!(net.run_until(Duration::from_secs(1), |n| n.a.paths(conn)[1].backup));
    assert!(!net.a.paths(conn)[0].backup);
}

#[test]
fn backup_paths_carry_nothing_while_another_is_usable() {
    let mut net = Net::new(7, TransportConfig::default());
    // The backup is the faster path: only the backup semantics keep it idle.
    net.set_link(A1, B1, Duration::from_millis(40), 0.0);
    net.set_link(A2, B2, Duration::from_millis(5), 0.0);
    let conn = net.a.connect(net.now, addr(B1)).unwrap();
    net.a.set_scheduler(conn, program("min_rtt_backup")).unwrap();
    assert!(net.run_until(Duration::from_secs(2), |n| n.a.is_established(conn)));
    net.a.add_path(conn, Some(addr(A2)), addr(B2), true).unwrap();
    let server = net.accepted().unwrap();
    let msgs: Vec<Bytes> = (0..10).map(|i| message(i, 30_000)).collect();
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(60), |_, _| {});
    assert_eq!(got, msgs);
    let by_path = carried(&net);
    assert_eq!(by_path.get(&1).copied().unwrap_or(0), 0, "{by_path:?}");
    assert!(net.a.paths(conn)[1].validated);
}

#[test]
fn unknown_and_retired_path_ids_are_dropped_and_counted() {
    let mut net = Net::new(8, TransportConfig::default());
    let (conn, server, id) = net.connect_two_paths(false);
    net.a.remove_path(conn, id).unwrap();
    assert!(net.run_until(Duration::from_secs(1), |n| n.b.paths(server).len() == 1));
    let server_cid = server_cid(&mut net, conn);
    for path_id in [id, 5, u32::MAX] {
        let before = net.b.connection_stats(server).unwrap().unknown_path_packets;
        let d = forge(server_cid, path_id, 0, &[(0, b"x")]);
        net.b.handle_datagram_on(net.now, Some(addr(B2)), addr(A2), d);
        let after = net.b.connection_stats(server).unwrap();
        // A retired id is refused; a fresh one would open a path, but the
        // client never uses ids it did not open.
        if path_id == id {
            assert_eq!(after.unknown_path_packets, before + 1);
        }
    }
    // Packets on a path the client never opened are dropped at the client.
    let client_cid = client_cid(&mut net, server);
    let before = net.a.connection_stats(conn).unwrap().unknown_path_packets;
    net.a.handle_datagram_on(net.now, Some(addr(A1)), addr(B1), forge(client_cid, 9, 0, &[]));
    assert_eq!(net.a.connection_stats(conn).unwrap().unknown_path_packets, before + 1);
}

/// The connection ID the client's packets carry (the server's).
fn server_cid(net: &mut Net, conn: ConnectionHandle) -> u64 {
    net.a.send_message(conn, Bytes::from_static(b"probe")).unwrap();
    let t = net.a.poll_transmit(net.now, 1, &mut net.buf).unwrap();
    let p = Packet::decode(Bytes::copy_from_slice(&net.buf[..t.size])).unwrap();
    p.header.dst_cid
}

fn client_cid(net: &mut Net, server: ConnectionHandle) -> u64 {
    net.b.send_message(server, Bytes::from_static(b"probe")).unwrap();
    let t = net.b.poll_transmit(net.now, 1, &mut net.buf).unwrap();
    let p = Packet::decode(Bytes::copy_from_slice(&net.buf[..t.size])).unwrap();
    p.header.dst_cid
}

/// A Data packet for connection `cid` on `path_id` carrying stream bytes.
fn forge(cid: u64, path_id: u32, pn: u64, data: &[(u64, &[u8])]) -> Bytes {
    let mut out = Vec::new();
    let header = Header {
        ty: PacketType::Data,
        dst_cid: cid,
        src_cid: 0,
        cookie: Bytes::new(),
        noise: Bytes::new(),
        server_key: Bytes::new(),
        path_id,
        pn,
        timestamp_us: 1,
        echo_timestamp_us: 0,
    };
    wire::encode_header(&mut out, &header);
    if data.is_empty() {
        wire::encode_frame(&mut out, &Frame::Ping);
    }
    for (offset, bytes) in data {
        wire::encode_data_frame(&mut out, *offset, bytes, false);
    }
    Bytes::from(out)
}

/// Messages of 998 bytes: with their 2-byte length prefix, message `i` is
/// stream bytes `1000 i .. 1000 (i + 1)`.
fn stream(messages: usize) -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..messages {
        let mut prefix = Vec::new();
        wire::write_varint(&mut prefix, 998);
        s.extend_from_slice(&prefix);
        s.extend(message(i, 998));
    }
    s
}

/// A server connection with two paths whose client packets the test forges:
/// `deliver(path, pn, range)` hands the server one packet carrying
/// `range` of the stream, and returns how many messages became readable.
struct Receiver {
    net: Net,
    server: ConnectionHandle,
    cid: u64,
    stream: Vec<u8>,
    read: usize,
}

impl Receiver {
    fn new(seed: u64) -> Receiver {
        let mut net = Net::new(seed, TransportConfig::default());
        let (conn, server, _) = net.connect_two_paths(false);
        let cid = server_cid(&mut net, conn);
        Receiver { net, server, cid, stream: stream(8), read: 0 }
    }

    fn deliver(&mut self, path: u32, pn: u64, range: std::ops::Range<usize>) -> usize {
        let (local, remote) = if path == 0 { (B1, A1) } else { (B2, A2) };
        let d = forge(self.cid, path, 1000 + pn, &[(range.start as u64, &self.stream[range])]);
        self.net.b.handle_datagram_on(self.net.now, Some(addr(local)), addr(remote), d);
        let mut n = 0;
        while let Ok(Some(m)) = self.net.b.recv_message(self.server) {
            assert_eq!(m, message(self.read, 998));
            self.read += 1;
            n += 1;
        }
        n
    }
}

/// Thesis Fig. 3.11: a gap in one path's packet numbers (a loss) does not
/// hold back data of that path that is next in the data sequence.
#[test]
fn receiver_delivers_in_sequence_data_behind_a_gap_on_its_path() {
    let mut r = Receiver::new(11);
    assert_eq!(r.deliver(0, 0, 0..1000), 1);
    // Path 1's packet 0 (bytes 2000..3000) is lost; its packet 1 carries
    // bytes 1000..2000, next in sequence: delivered at once.
    assert_eq!(r.deliver(1, 1, 1000..2000), 1);
    assert_eq!(r.deliver(1, 2, 2000..3000), 1);
}

/// Thesis Fig. 3.12: a path's packets in packet-number order need not be
/// in data order.
#[test]
fn receiver_reorders_by_data_sequence_not_by_path_order() {
    let mut r = Receiver::new(12);
    assert_eq!(r.deliver(1, 1, 2000..3000), 0);
    assert_eq!(r.deliver(1, 2, 1000..2000), 0);
    assert_eq!(r.deliver(0, 0, 0..1000), 3);
}

/// Thesis Fig. 3.13: a packet may add only part of its bytes.
#[test]
fn receiver_takes_the_new_part_of_partially_overlapping_packets() {
    let mut r = Receiver::new(13);
    assert_eq!(r.deliver(0, 0, 0..1500), 1);
    assert_eq!(r.deliver(1, 0, 1000..2600), 1);
    assert_eq!(r.deliver(0, 1, 2500..3000), 1);
}

/// Thesis Fig. 3.14: a packet on one path makes data held for another
/// path's gap deliverable.
#[test]
fn receiver_releases_other_paths_data_when_a_gap_fills() {
    let mut r = Receiver::new(14);
    assert_eq!(r.deliver(0, 0, 0..1000), 1);
    assert_eq!(r.deliver(1, 0, 3000..4000), 0);
    assert_eq!(r.deliver(0, 1, 2000..3000), 0);
    assert_eq!(r.deliver(1, 1, 4000..5000), 0);
    // The missing piece arrives on path 0: path 1's two held packets and
    // path 0's own go to the application together.
    assert_eq!(r.deliver(0, 2, 1000..2000), 4);
}

#[test]
fn registers_trigger_the_scheduler_and_tags_reach_packets() {
    let mut net = Net::new(15, TransportConfig::default());
    let (conn, server, _) = net.connect_two_paths(false);
    let gate = Program::compile(
        "SCHEDULER gate;
         IF (R1 == 1 AND !Q.EMPTY) {
           PRINT(\"user %d psh %d len %d\", Q.TOP.USER, Q.TOP.PSH, Q.TOP.LENGTH);
           SUBFLOWS.GET(1).PUSH(Q.POP());
         }",
    )
    .unwrap();
    net.a.set_scheduler(conn, Arc::new(gate)).unwrap();
    net.a.capture_scheduler_prints(conn, true).unwrap();
    net.a.set_user_tag(conn, 5).unwrap();
    net.a.send_message(conn, message(0, 100)).unwrap();
    net.a.set_user_tag(conn, 7).unwrap();
    net.a.send_message(conn, message(1, 100)).unwrap();
    // Gate closed: nothing is sent.
    net.run_until(Duration::from_secs(1), |_| false);
    assert_eq!(net.b.recv_message(server), Ok(None));
    assert!(net.a.take_scheduler_prints(conn).is_empty());
    // Opening the gate is a trigger: both packets go, on path 1 only.
    net.a.set_register(conn, Register::R1, 1).unwrap();
    assert_eq!(net.a.register(conn, Register::R1), Some(1));
    let mut got = Vec::new();
    assert!(net.run_until(Duration::from_secs(1), |n| {
        while let Ok(Some(m)) = n.b.recv_message(server) {
            got.push(m);
        }
        got.len() == 2
    }));
    // Two tags: two packets of one message each (1 + 101 stream bytes).
    assert_eq!(net.a.take_scheduler_prints(conn), ["user 5 psh 1 len 102", "user 7 psh 1 len 102"]);
    let by_path = carried(&net);
    assert_eq!((by_path.get(&0).copied().unwrap_or(0), by_path[&1]), (0, 204));
}

#[test]
fn a_scheduler_on_one_path_still_delivers_through_losses() {
    // Scheduled sending on a single path: the path resends its own losses
    // even though RQ's preamble finds no other path to reinject on.
    let mut net = Net::new(16, TransportConfig::default());
    net.set_link(A1, B1, Duration::from_millis(10), 0.05);
    let conn = net.a.connect(net.now, addr(B1)).unwrap();
    net.a.set_scheduler(conn, program("redundant")).unwrap();
    assert!(net.run_until(Duration::from_secs(5), |n| n.a.is_established(conn)));
    let server = net.accepted().unwrap();
    let msgs: Vec<Bytes> = (0..20).map(|i| message(i, 20_000)).collect();
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(60), |_, _| {});
    assert!(got == msgs);
    assert!(net.a.connection_stats(conn).unwrap().packets_lost > 0);
}

#[test]
fn a_path_added_mid_transfer_takes_over_data_sent_before_scheduling() {
    // Single-path sending, then a second path: data the first path lost
    // before the switch is still resent, and the new path joins in.
    let mut net = Net::new(17, TransportConfig::default());
    net.set_link(A1, B1, Duration::from_millis(10), 0.03);
    let conn = net.a.connect(net.now, addr(B1)).unwrap();
    assert!(net.run_until(Duration::from_secs(5), |n| n.a.is_established(conn)));
    let server = net.accepted().unwrap();
    let msgs: Vec<Bytes> = (0..40).map(|i| message(i, 30_000)).collect();
    let mut added = false;
    let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(60), |net, n| {
        if n >= 5 && !added {
            added = true;
            net.a.add_path(conn, Some(addr(A2)), addr(B2), false).unwrap();
        }
    });
    assert!(got == msgs);
    assert!(carried(&net).get(&1).copied().unwrap_or(0) > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// Whatever the scheduler, the loss on each path and the delays, two
    /// paths deliver every message intact and in order.
    #[test]
    fn any_scheduler_delivers_exactly_over_two_lossy_paths(
        seed in 0u64..1 << 32,
        which in 0usize..braid_proto::progmp::BUILTINS.len(),
        loss0 in 0.0f64..0.08,
        loss1 in 0.0f64..0.08,
        delay0 in 1u64..40,
        delay1 in 1u64..40,
        registers in prop::array::uniform3(0i64..3),
    ) {
        let mut net = Net::new(seed, TransportConfig::default());
        net.set_link(A1, B1, Duration::from_millis(delay0), loss0);
        net.set_link(A2, B2, Duration::from_millis(delay1), loss1);
        let conn = net.a.connect(net.now, addr(B1)).unwrap();
        let name = braid_proto::progmp::BUILTINS[which].name;
        net.a.set_scheduler(conn, program(name)).unwrap();
        for (r, v) in [Register::R1, Register::R2, Register::R3].into_iter().zip(registers) {
            net.a.set_register(conn, r, v).unwrap();
        }
        prop_assert!(net.run_until(Duration::from_secs(20), |n| n.a.is_established(conn)));
        net.a.add_path(conn, Some(addr(A2)), addr(B2), seed % 3 == 0).unwrap();
        let server = net.accepted().unwrap();
        let msgs: Vec<Bytes> = (0..12).map(|i| message(i, (seed as usize % 7 + 1) * 3000 * (i % 3 + 1))).collect();
        let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(300), |_, _| {});
        prop_assert!(got == msgs, "{name}: {} of {} messages", got.len(), msgs.len());
    }
}


proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// Paths break, come back, are removed and added during a transfer:
    /// whatever was in flight on them is rescheduled, and every message
    /// still arrives intact and in order.
    #[test]
    fn churning_paths_lose_no_data(
        seed in 0u64..1 << 32,
        which in 0usize..braid_proto::progmp::BUILTINS.len(),
        events in prop::collection::vec((0usize..12, 0u8..4), 1..6),
    ) {
        let mut net = Net::new(seed, TransportConfig::default());
        net.set_link(A1, B1, Duration::from_millis(5 + seed % 20), 0.01);
        net.set_link(A2, B2, Duration::from_millis(5 + seed % 37), 0.01);
        let conn = net.a.connect(net.now, addr(B1)).unwrap();
        let name = braid_proto::progmp::BUILTINS[which].name;
        net.a.set_scheduler(conn, program(name)).unwrap();
        prop_assert!(net.run_until(Duration::from_secs(20), |n| n.a.is_established(conn)));
        net.a.add_path(conn, Some(addr(A2)), addr(B2), false).unwrap();
        let server = net.accepted().unwrap();
        let msgs: Vec<Bytes> = (0..12).map(|i| message(i, 20_000 + (seed as usize % 5) * 7_000)).collect();
        let mut done = vec![false; events.len()];
        let got = transfer(&mut net, conn, server, &msgs, Duration::from_secs(600), |net, n| {
            for (k, &(at, what)) in events.iter().enumerate() {
                if done[k] || n < at {
                    continue;
                }
                done[k] = true;
                let paths = net.a.paths(conn);
                match what {
                    // Break path 1's link (if it is there), or path 0's.
                    0 => net.set_up(A2, B2, false),
                    1 => net.set_up(A2, B2, true),
                    // Remove the first path, if another remains.
                    2 => {
                        if paths.len() > 1 {
                            net.a.remove_path(conn, paths[0].id).unwrap();
                        }
                    }
                    // Re-open a path over A2-B2 if none uses it.
                    _ => {
                        net.set_up(A2, B2, true);
                        if !paths.iter().any(|p| p.remote == addr(B2)) {
                            net.a.add_path(conn, Some(addr(A2)), addr(B2), false).unwrap();
                        }
                    }
                }
            }
            // Never leave the connection without a working link.
            if net.a.paths(conn).iter().all(|p| p.remote == addr(B2)) {
                net.set_up(A2, B2, true);
            }
        });
        prop_assert!(got == msgs, "{name} {events:?}: {} of {} messages; paths {:?}", got.len(), msgs.len(), net.a.paths(conn));
    }
}

/// A frame for [`forged_path_frames_never_panic`].
fn arb_frame() -> impl Strategy<Value = Frame> {
    let path = prop_oneof![0u32..4, Just(u32::MAX)];
    prop_oneof![
        Just(Frame::Ping),
        any::<[u8; 8]>().prop_map(Frame::PathChallenge),
        any::<[u8; 8]>().prop_map(Frame::PathResponse),
        path.clone().prop_map(|path_id| Frame::PathAbandon { path_id }),
        (path.clone(), any::<u64>(), any::<bool>()).prop_map(|(path_id, seq, backup)| Frame::PathStatus { path_id, seq, backup }),
        (path, 0u64..50, 0u64..50, 0u64..1 << 20).prop_map(|(path_id, largest, len, max_data)| {
            let lo = largest.saturating_sub(len);
            Frame::Ack(wire::AckFrame::for_path(path_id, [(lo, largest)], 10, max_data).unwrap())
        }),
        (0u64..100_000, prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(offset, data)| Frame::Data { offset, data: Bytes::from(data), message_end: false }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// Forged packets on any path, with any path frames, never panic a
    /// multipath connection nor leave it without a path; it still
    /// delivers afterwards.
    #[test]
    fn forged_path_frames_never_panic(
        packets in prop::collection::vec((prop_oneof![0u32..5, Just(1000u32)], 0u64..100, prop::collection::vec(arb_frame(), 1..5)), 1..20),
    ) {
        let mut net = Net::new(21, TransportConfig::default());
        let (conn, server, _) = net.connect_two_paths(false);
        let cid = server_cid(&mut net, conn);
        for (path_id, pn, frames) in &packets {
            let mut out = Vec::new();
            let header = Header {
                ty: PacketType::Data,
                dst_cid: cid,
                src_cid: 0,
                cookie: Bytes::new(),
                noise: Bytes::new(),
                server_key: Bytes::new(),
                path_id: *path_id,
                pn: 500 + pn,
                timestamp_us: 7,
                echo_timestamp_us: 3,
            };
            wire::encode_header(&mut out, &header);
            for f in frames {
                wire::encode_frame(&mut out, f);
            }
            let from = if path_id % 2 == 0 { (B1, A1) } else { (B2, A2) };
            net.b.handle_datagram_on(net.now, Some(addr(from.0)), addr(from.1), Bytes::from(out));
            net.flush();
            prop_assert!(!net.b.paths(server).is_empty());
        }
        // Whatever happened, the connection is either closed with a reason
        // (bad stream data is a protocol violation) or still works.
        if net.b.close_reason(server).is_none() {
            net.step(net.now + Duration::from_millis(1));
            let _ = net.b.send_message(server, message(1, 5000));
            prop_assert!(net.b.paths(server).iter().all(|p| p.id < 1001));
        }
    }
}

// ----- failed paths opened again (issue 21) -----

fn retry_config(cap: Option<Duration>) -> TransportConfig {
    TransportConfig { path_retry_max_backoff: cap, ..TransportConfig::default() }
}

/// Datagrams the client sent from its second address since `seen[from..]`.
fn sent_from_a2(net: &Net, from: usize) -> usize {
    net.seen[from..].iter().filter(|s| s.from_client && s.src == addr(A2)).count()
}

/// Connects two paths, keeps the client sending until path `id` fails
/// over a dead link (A2–B2 down), and returns once the client abandoned it.
fn fail_second_path(net: &mut Net, conn: ConnectionHandle, server: ConnectionHandle) {
    let msgs: Vec<Bytes> = (0..30).map(|i| message(i, 40_000)).collect();
    let got = transfer(net, conn, server, &msgs, Duration::from_secs(120), |net, n| {
        if n == 3 {
            net.set_up(A2, B2, false);
        }
    });
    assert!(got == msgs, "{} of {}", got.len(), msgs.len());
    assert!(
        net.run_until(Duration::from_secs(60), |n| n.a.connection_stats(conn).unwrap().paths_abandoned >= 1),
        "{:?}",
        net.a.connection_stats(conn)
    );
}

/// The times at which the client opened the failed path again, over `span`.
fn attempts(net: &mut Net, conn: ConnectionHandle, span: Duration) -> Vec<Instant> {
    let mut times = Vec::new();
    let mut count = net.a.connection_stats(conn).unwrap().path_retries;
    net.run_until(span, |n| {
        let c = n.a.connection_stats(conn).unwrap().path_retries;
        if c > count {
            times.push(n.now);
            count = c;
        }
        false
    });
    times
}

#[test]
fn a_failed_path_is_reopened_with_doubling_waits_and_carries_data_again() {
    let cap = Duration::from_secs(8);
    let mut net = Net::new(21, retry_config(Some(cap)));
    let (conn, server, id) = net.connect_two_paths(false);
    fail_second_path(&mut net, conn, server);
    let failed_at = net.now;
    let mark = net.seen.len();
    let times = attempts(&mut net, conn, Duration::from_secs(60));
    // Waits double from about the path's RTO (200 ms floor, 30 ms one way)
    // to the cap; each attempt also waits for its probe's RTO (three RTTs
    // of the failed path, at least 200 ms) before the next wait starts.
    assert!(times.len() >= 6, "attempts at {times:?} after failing at {failed_at:?}");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    for g in gaps.windows(2) {
        assert!(g[1] + Duration::from_millis(50) >= g[0], "waits shrank: {gaps:?}");
    }
    let probe_rto = Duration::from_millis(400);
    for g in &gaps[gaps.len() - 2..] {
        assert!(*g >= cap && *g <= cap + probe_rto, "capped waits: {gaps:?}");
    }
    assert!(gaps[0] < Duration::from_secs(2), "first waits: {gaps:?}");
    // One probe packet per attempt, nothing else on the dead path.
    let stats = net.a.connection_stats(conn).unwrap();
    assert_eq!(sent_from_a2(&net, mark), times.len(), "{stats:?}");
    assert_eq!(stats.paths_readded, 0);
    // The path comes back: the next attempt re-adds it, under a new id.
    net.set_up(A2, B2, true);
    assert!(
        net.run_until(cap + Duration::from_secs(2), |n| n.a.connection_stats(conn).unwrap().paths_readded == 1),
        "{:?}",
        net.a.paths(conn)
    );
    let paths = net.a.paths(conn);
    let readded = paths.iter().find(|p| p.local == Some(addr(A2))).expect("the path is back");
    assert!(readded.id > id && readded.validated && readded.remote == addr(B2), "{paths:?}");
    let server_has_it = |n: &mut Net| n.b.paths(server).iter().any(|p| p.id == readded.id && p.validated);
    assert!(net.run_until(Duration::from_secs(2), server_has_it));
    // And carries data again (with some loss on both, so that neither
    // path's window outgrows the whole transfer on this rate-less network).
    net.set_link(A1, B1, Duration::from_millis(10), 0.02);
    net.set_link(A2, B2, Duration::from_millis(30), 0.02);
    let mark = net.seen.len();
    let msgs: Vec<Bytes> = (0..200).map(|i| message(i, 40_000)).collect();
    assert!(transfer(&mut net, conn, server, &msgs, Duration::from_secs(60), |_, _| {}) == msgs);
    let on_readded: u64 = net.seen[mark..]
        .iter()
        .filter(|s| s.from_client && s.path_id == readded.id)
        .map(|s| s.data.iter().map(|d| d.1).sum::<u64>())
        .sum();
    assert!(on_readded > 200 * 40_000 / 20, "the re-added path carried {on_readded} bytes");
}

#[test]
fn a_path_the_application_removes_is_never_reopened() {
    let mut net = Net::new(22, retry_config(Some(Duration::from_secs(2))));
    let (conn, _, id) = net.connect_two_paths(false);
    net.set_up(A2, B2, false);
    net.a.remove_path(conn, id).unwrap();
    let mark = net.seen.len();
    net.run_until(Duration::from_secs(60), |_| false);
    let stats = net.a.connection_stats(conn).unwrap();
    assert_eq!((stats.path_retries, stats.paths_abandoned), (0, 1), "{stats:?}");
    assert_eq!(sent_from_a2(&net, mark), 0);
    assert_eq!(net.a.paths(conn).len(), 1);
}

#[test]
fn removing_a_failed_path_by_its_id_stops_its_retries() {
    let mut net = Net::new(23, retry_config(Some(Duration::from_secs(2))));
    let (conn, server, id) = net.connect_two_paths(false);
    fail_second_path(&mut net, conn, server);
    // At least one attempt, then the application gives the path up (by the
    // id it knows) while no attempt is open.
    assert!(net.run_until(Duration::from_secs(20), |n| {
        n.a.connection_stats(conn).unwrap().path_retries >= 1 && n.a.paths(conn).len() == 1
    }));
    assert_eq!(net.a.remove_path(conn, 999), Err(PathError::UnknownPath(999)));
    net.a.remove_path(conn, id).unwrap();
    assert_eq!(net.a.remove_path(conn, id), Err(PathError::UnknownPath(id)));
    let retries = net.a.connection_stats(conn).unwrap().path_retries;
    let mark = net.seen.len();
    net.set_up(A2, B2, true);
    net.run_until(Duration::from_secs(60), |_| false);
    assert_eq!(net.a.connection_stats(conn).unwrap().path_retries, retries);
    assert_eq!(sent_from_a2(&net, mark), 0);
    assert_eq!(net.a.paths(conn).len(), 1);
}

#[test]
fn without_retries_a_failed_path_stays_abandoned() {
    let mut net = Net::new(24, retry_config(None));
    let (conn, server, _) = net.connect_two_paths(false);
    fail_second_path(&mut net, conn, server);
    let mark = net.seen.len();
    net.set_up(A2, B2, true);
    net.run_until(Duration::from_secs(60), |_| false);
    assert_eq!(net.a.connection_stats(conn).unwrap().path_retries, 0);
    assert_eq!(sent_from_a2(&net, mark), 0);
    assert_eq!(net.a.paths(conn).len(), 1);
}

#[test]
fn a_path_the_server_gives_up_in_a_download_is_reopened_by_the_client() {
    // The server sends; the client only acknowledges on the path, so the
    // server notices the outage and sends PATH_ABANDON, which the client
    // takes as a failure.
    let mut net = Net::new(25, retry_config(Some(Duration::from_secs(4))));
    let (conn, server, id) = net.connect_two_paths(false);
    let msgs: Vec<Bytes> = (0..40).map(|i| message(i, 40_000)).collect();
    let got = pump(&mut net, Direction::Download, conn, server, &msgs, Duration::from_secs(120), |net, n| {
        if n == 3 {
            net.set_up(A2, B2, false);
        }
    });
    assert!(got == msgs, "{} of {}", got.len(), msgs.len());
    assert!(net.run_until(Duration::from_secs(60), |n| n.b.connection_stats(server).unwrap().paths_abandoned >= 1));
    assert!(
        net.run_until(Duration::from_secs(10), |n| n.a.connection_stats(conn).unwrap().path_retries >= 1),
        "{:?}",
        net.a.connection_stats(conn)
    );
    net.set_up(A2, B2, true);
    assert!(net.run_until(Duration::from_secs(10), |n| n.a.connection_stats(conn).unwrap().paths_readded == 1));
    assert!(net.a.paths(conn).iter().any(|p| p.id > id && p.local == Some(addr(A2)) && p.validated));
}

#[test]
fn removing_a_failed_path_while_an_attempt_is_open_ends_the_attempt_too() {
    let mut net = Net::new(26, retry_config(Some(Duration::from_secs(2))));
    let (conn, server, id) = net.connect_two_paths(false);
    fail_second_path(&mut net, conn, server);
    assert!(net.run_until(Duration::from_secs(20), |n| n.a.paths(conn).len() == 2));
    let attempt = net.a.paths(conn)[1].id;
    assert!(attempt > id);
    net.a.remove_path(conn, id).unwrap();
    assert_eq!(net.a.paths(conn).len(), 1);
    let retries = net.a.connection_stats(conn).unwrap().path_retries;
    let mark = net.seen.len();
    net.set_up(A2, B2, true);
    net.run_until(Duration::from_secs(60), |_| false);
    assert_eq!(net.a.connection_stats(conn).unwrap().path_retries, retries);
    assert_eq!(sent_from_a2(&net, mark), 0);
    assert_eq!(net.a.remove_path(conn, attempt), Err(PathError::UnknownPath(attempt)));
}

#[test]
fn a_path_the_server_application_removes_stays_removed() {
    // The client takes the server's PATH_ABANDON for a failure and tries
    // the addresses again; the server refuses them: one probe per wait.
    let mut net = Net::new(27, retry_config(Some(Duration::from_secs(4))));
    let (conn, server, id) = net.connect_two_paths(false);
    net.b.remove_path(server, id).unwrap();
    assert!(net.run_until(Duration::from_secs(2), |n| n.a.paths(conn).len() == 1));
    let mark = net.seen.len();
    net.run_until(Duration::from_secs(60), |_| false);
    let (a, b) = (net.a.connection_stats(conn).unwrap(), net.b.connection_stats(server).unwrap());
    assert_eq!(a.paths_readded, 0, "{a:?}");
    assert!(a.path_retries >= 60 / 5 - 3, "{a:?}");
    let probes = sent_from_a2(&net, mark) as u64;
    assert_eq!(probes, a.path_retries, "one probe per attempt");
    // Every probe reached the server and was dropped (plus what the removed
    // path still had on its way when the mark was taken).
    assert!((probes..=probes + 2).contains(&b.unknown_path_packets), "{probes} probes; {b:?}");
    assert_eq!(net.b.paths(server).len(), 1);
    // The connection carries on over the first path.
    let msgs: Vec<Bytes> = (0..5).map(|i| message(i, 10_000)).collect();
    assert!(transfer(&mut net, conn, server, &msgs, Duration::from_secs(10), |_, _| {}) == msgs);
}
