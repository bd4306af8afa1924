//! Issue 21: a multipath path that goes out for a while is abandoned, and
//! opened again once it answers (see `braid-proto`'s
//! `connection/paths.rs`, `Retry`).
//!
//! A download (server to client, as a DASH player's) over two paths of
//! equal rate. Path 2 drops every packet for 20 s in the middle of the
//! transfer (a cellular outage) and then works again. The server, which
//! sends, notices the outage and abandons the path; the client takes the
//! peer's PATH_ABANDON after a silence as a failure and keeps probing the
//! path's addresses with a new path id, waits doubling from the path's RTO
//! to the 30 s cap. Once a probe is answered the path carries data again.
//! A path that never comes back costs one probe packet per cap.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use braid_core::Instant;
use braid_link::LinkSpec;
use braid_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, PathInfo, SendError, TransportConfig};
use braid_sim::{NodeId, Simulator};
use bytes::Bytes;

mod support;
use support::{App, EndpointNode};

const PORT_CLIENT: u16 = 40_000;
const PORT_SERVER: u16 = 4_433;
/// Message size of the download (as `braid::transfer_stream` cuts a body).
const CHUNK: usize = 64 << 10;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// Client addresses (path 1, path 2) and the server's.
const C: [&str; 2] = ["10.0.1.1", "10.0.2.1"];
const S: [&str; 2] = ["10.0.1.2", "10.0.2.2"];

/// The byte at offset `i` of the download: checks it arrives intact.
fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

/// The application of either end: the server sends the download, the
/// client checks it.
struct Host {
    ips: Vec<IpAddr>,
    port: u16,
    server: bool,
    conn: Option<ConnectionHandle>,
    /// Server: bytes of the download still to hand to the connection, and
    /// the offset of the next.
    to_send: u64,
    offset: u64,
    /// Client: bytes received, all as sent.
    received: u64,
    intact: bool,
}

impl Host {
    /// The node of a host at `ips` (the first is where it sends from by
    /// default) and `port`.
    fn node(ips: &[&str], port: u16, endpoint: Endpoint, server: bool, to_send: u64) -> EndpointNode<Host> {
        let ips: Vec<IpAddr> = ips.iter().map(|s| ip(s)).collect();
        let source = SocketAddr::new(ips[0], port);
        let host = Host { ips, port, server, conn: None, to_send, offset: 0, received: 0, intact: true };
        EndpointNode::new(endpoint, host, source)
    }
}

impl App for Host {
    fn drive(&mut self, endpoint: &mut Endpoint, now: Instant) -> bool {
        let mut any = false;
        while let Some(event) = endpoint.poll_event() {
            any = true;
            match event {
                Event::Accepted(h) => self.conn = Some(h),
                Event::Connected(h) => {
                    // The second path opens once the handshake is done.
                    let local = SocketAddr::new(self.ips[1], self.port);
                    let remote = SocketAddr::new(ip(S[1]), PORT_SERVER);
                    endpoint.add_path(h, Some(local), remote, false).expect("path 2");
                }
                Event::Readable(h) => {
                    while let Ok(Some(m)) = endpoint.recv_message(h) {
                        let base = self.received;
                        self.intact &= m.iter().enumerate().all(|(k, &b)| b == pattern(base + k as u64));
                        self.received += m.len() as u64;
                    }
                }
                _ => {}
            }
        }
        if let (true, Some(conn)) = (self.server, self.conn) {
            while self.to_send > 0 {
                let n = self.to_send.min(CHUNK as u64);
                let m: Vec<u8> = (self.offset..self.offset + n).map(pattern).collect();
                match endpoint.send_message(conn, Bytes::from(m)) {
                    Ok(()) => {
                        self.to_send -= n;
                        self.offset += n;
                        any = true;
                    }
                    Err(SendError::Blocked(_)) => break,
                    Err(e) => panic!("server send failed at {now:?}: {e}"),
                }
            }
        }
        any
    }
}

struct Run {
    sim: Simulator<EndpointNode<Host>>,
    client: NodeId,
    server: NodeId,
    conn: ConnectionHandle,
}

impl Run {
    /// A download of `bytes` over path 1 (`path1`) and path 2 (`path2`).
    fn new(path1: &str, path2: &str, bytes: u64, seed: u64) -> Run {
        let transport = TransportConfig::default();
        let config =
            |accept_incoming| EndpointConfig { accept_incoming, transport: transport.clone(), ..Default::default() };
        let server = Endpoint::new(config(true), seed);
        let mut client = Endpoint::new(config(false), seed + 1);
        let conn = client.connect(Instant::ZERO, SocketAddr::new(ip(S[0]), PORT_SERVER)).expect("connect");
        let mut sim = Simulator::new(seed);
        let server = sim.add_node(S.map(ip), Host::node(&S, PORT_SERVER, server, true, bytes)).expect("server");
        let mut node = Host::node(&C, PORT_CLIENT, client, false, 0);
        node.app.conn = Some(conn);
        let client = sim.add_node(C.map(ip), node).expect("client");
        for (i, spec) in [path1, path2].into_iter().enumerate() {
            let spec: LinkSpec = spec.parse().expect("link");
            sim.add_path(ip(S[i]), ip(C[i]), &spec).expect("path");
        }
        Run { sim, client, server, conn }
    }

    fn client(&self) -> &Endpoint {
        &self.sim.node(self.client).endpoint
    }

    fn server_paths(&self) -> Vec<PathInfo> {
        let node = self.sim.node(self.server);
        node.app.conn.map(|c| node.endpoint.paths(c)).unwrap_or_default()
    }

    /// Datagrams the client offered to path 2's link so far.
    fn client_sent_on_path2(&self) -> u64 {
        self.sim.link_stats(ip(C[1]), ip(S[1])).expect("link").offered
    }

    fn at(secs: f64) -> Instant {
        Instant::ZERO + Duration::from_secs_f64(secs)
    }
}

/// Stream bytes each server path sent (by path id).
fn sent_by_path(paths: &[PathInfo]) -> Vec<(u32, u64)> {
    paths.iter().map(|p| (p.id, p.stream_bytes_sent)).collect()
}

#[test]
fn a_path_out_for_20_s_is_readded_and_carries_its_share_again() {
    // 4 Mbit/s each; path 2 drops everything from 15 s to 35 s (each
    // `at=` replaces the whole spec).
    let bytes = 40 << 20;
    let path2 = "rtt=60ms,rate=4mbit;at=15s:rtt=60ms,rate=4mbit,loss=100%;at=35s:rtt=60ms,rate=4mbit";
    let mut run = Run::new("rtt=40ms,rate=4mbit", path2, bytes, 21);
    let (mut abandoned_in_outage, mut readded_at, mut at_readd) = (None, None, Vec::new());
    let mut t = 0.0;
    while run.sim.node(run.client).app.received < bytes && t < 200.0 {
        t += 0.1;
        run.sim.run_until(Run::at(t));
        let stats = run.client().connection_stats(run.conn).expect("connection");
        if abandoned_in_outage.is_none()
            && (15.0..35.0).contains(&t)
            && run.server_paths().len() == 1
            && stats.paths_abandoned >= 1
        {
            abandoned_in_outage = Some(t);
        }
        if readded_at.is_none() && stats.paths_readded >= 1 {
            readded_at = Some(t);
            at_readd = sent_by_path(&run.server_paths());
        }
    }
    let client = run.sim.node(run.client);
    let stats = client.endpoint.connection_stats(run.conn).expect("connection");
    assert!(
        client.app.received == bytes && client.app.intact,
        "{} of {bytes} bytes by {t:.1} s; {stats:?}",
        client.app.received
    );
    let abandoned_at =
        abandoned_in_outage.unwrap_or_else(|| panic!("path 2 was not abandoned in the outage: {stats:?}"));
    let readded_at = readded_at.unwrap_or_else(|| panic!("path 2 never came back: {stats:?}"));
    // Waits double from ~0.3 s to the 30 s cap: the path is tried again
    // within a cap (plus a probe's timeout) of its return.
    assert!(readded_at > 35.0 && readded_at <= 35.0 + 31.0, "re-added at {readded_at:.1} s");
    // The last part of the transfer: from the re-add to the end.
    let end = sent_by_path(&run.server_paths());
    let before = |id: u32| at_readd.iter().find(|(i, _)| *i == id).map_or(0, |(_, b)| *b);
    let since: Vec<(u32, u64)> = end.iter().map(|&(id, b)| (id, b - before(id))).collect();
    let total: u64 = since.iter().map(|(_, b)| b).sum();
    let readded = run.server_paths().iter().find(|p| p.remote.ip() == ip(C[1])).map(|p| p.id).expect("path 2 is open");
    assert!(readded > 1, "a new path id: {end:?}");
    let share = since.iter().find(|(id, _)| *id == readded).map_or(0, |(_, b)| *b) as f64 / total as f64;
    eprintln!(
        "abandoned at {abandoned_at:.1} s, re-added at {readded_at:.1} s, done at {t:.1} s; since the re-add \
         {total} B, {:.0}% on the re-added path; client retries {} readded {} abandoned {}",
        share * 100.0,
        stats.path_retries,
        stats.paths_readded,
        stats.paths_abandoned
    );
    // Equal rates: about half; the new path's slow start and the time the
    // other path needs to hand over its queue take some of it.
    assert!(total > 4 << 20 && share > 0.3, "{share:.2} of {total} B since the re-add ({since:?})");
}

#[test]
fn a_path_that_never_comes_back_is_probed_once_per_cap() {
    // Path 2 dies for good at 10 s; the download keeps path 1 busy (and
    // the connection alive) for the whole run.
    let path2 = "rtt=60ms,rate=2mbit;at=10s:rtt=60ms,rate=2mbit,loss=100%";
    let mut run = Run::new("rtt=40ms,rate=2mbit", path2, 1 << 40, 22);
    run.sim.run_until(Run::at(60.0));
    let (probes_at_60, retries_at_60) =
        (run.client_sent_on_path2(), run.client().connection_stats(run.conn).unwrap().path_retries);
    run.sim.run_until(Run::at(300.0));
    let stats = run.client().connection_stats(run.conn).expect("connection");
    let probes = run.client_sent_on_path2() - probes_at_60;
    let retries = stats.path_retries - retries_at_60;
    eprintln!("from 60 s to 300 s: {probes} datagrams on path 2, {retries} attempts; {stats:?}");
    assert!(run.client().is_established(run.conn));
    // By 60 s the waits are at the cap: at most one attempt, of one packet,
    // per 30 s (+1 for where the window starts).
    assert!(retries >= 240 / 31, "still trying: {retries} attempts");
    assert!(probes <= retries && probes <= 240 / 30 + 1, "{probes} probes for {retries} attempts");
    assert_eq!(stats.paths_readded, 0);
}
