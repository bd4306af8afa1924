//! Multipath scenarios on the simulator: the scheduler test harness, the
//! user-space counterpart of the ProgMP thesis's packetdrill tests (§3.4.5.3).
//!
//! A [`Scenario`] gives the paths between a client and a server (one link
//! spec each, on its own pair of addresses), the client's scheduler, and a
//! script of timed steps: application writes (optionally tagged with a
//! ProgMP `USER` value), register changes, link changes (a path failing or
//! recovering), paths opened, removed or marked backup. [`run`] plays it
//! in virtual time over the real transport and reports every packet that
//! carried data — on which path, with which stream bytes — every `PRINT`
//! line of the scheduler, and when each write reached the server, so tests
//! can assert which subflow carried which packet.
//!
//! Path `i` of a scenario joins client address `10.i.0.1` to server
//! address `10.i.0.2`. Path 0 is the handshake's; the others are opened at
//! the start unless [`PathSpec::open_at_start`] is false (then a
//! [`Step::AddPath`] opens them).
//!
//! ```
//! use std::time::Duration;
//! use braid_lab::harness::sim_multipath::{run, Scenario, Step};
//!
//! let mut s = Scenario::new("redundant", &["rtt=20ms,rate=10mbit", "rtt=50ms,rate=10mbit"]).unwrap();
//! s.write_at(Duration::from_millis(500), 1000, 0);
//! let report = run(&s).unwrap();
//! assert!(report.ok);
//! // The one write went out on both paths.
//! assert_eq!(report.carriers(report.writes[0].range.start), [0, 1]);
//! ```

use braid_core::splitmix64;
use super::sim_endpoints::seeded_pair;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use braid_core::Instant;
use braid_link::{Direction, LinkSpec, LinkStats};
use braid_progmp::{builtin, Program, Register};
use braid_proto::wire;
use braid_proto::{
    CcAlgorithm, ConnectionHandle, ConnectionStats, Endpoint, EndpointConfig, Event, PathInfo, TransportConfig,
};
use braid_sim::{Datagram, Node, SimError, Simulator, IPV4_UDP_OVERHEAD};

use super::sim_transfer::WallClock;
use bytes::Bytes;

/// Ports of the client and the server on every path.
const CLIENT_PORT: u16 = 40_000;
const SERVER_PORT: u16 = 4_433;

/// One path of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// The link between the path's two addresses.
    pub link: LinkSpec,
    /// Open it as a backup path.
    pub backup: bool,
    /// Open it when the connection is established (path 0 always is).
    pub open_at_start: bool,
}

/// Braid's largest UDP payload on `paths`: the smallest path MTU (1500
/// where a link sets none) less 28 bytes of IPv4 and UDP headers, at least
/// the protocol's minimum. What path-MTU discovery finds, and what the
/// emulator's multipath template uses, so both measure the same packets.
fn path_datagram(paths: &[PathSpec]) -> u16 {
    let mtu = paths
        .iter()
        .flat_map(|p| [Direction::AToB, Direction::BToA].map(|d| p.link.params(d).mtu.unwrap_or(1500)))
        .min()
        .unwrap_or(1500);
    let datagram = u16::try_from(mtu.saturating_sub(IPV4_UDP_OVERHEAD as u32)).unwrap_or(u16::MAX);
    datagram.max(TransportConfig::MIN_DATAGRAM_SIZE)
}

/// A scripted action.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The client application writes one message of `bytes` bytes, its
    /// packets tagged `user` (ProgMP packet `USER`).
    Write {
        /// Message size.
        bytes: usize,
        /// Tag.
        user: i64,
    },
    /// The client application sets a scheduler register.
    SetRegister {
        /// Which.
        register: Register,
        /// Its new value.
        value: i64,
    },
    /// The link of a path changes (`loss=100%` makes it fail).
    SetLink {
        /// Path index.
        path: usize,
        /// The new link.
        link: LinkSpec,
    },
    /// The client opens a path that was not opened at the start.
    AddPath {
        /// Path index.
        path: usize,
    },
    /// The client closes a path.
    RemovePath {
        /// Path index.
        path: usize,
    },
    /// The client marks a path as backup, or not.
    SetBackup {
        /// Path index.
        path: usize,
        /// Backup or not.
        backup: bool,
    },
}

/// Closed-loop request/response flows (the flow-completion-time workload
/// of `braid bench multipath`): the client writes a request, the server
/// answers it with a message of `response_bytes`, and `gap` after the
/// whole response arrived the client writes the next request. Both ends
/// schedule with the scenario's scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestResponse {
    /// When the first request is written.
    pub start: Duration,
    /// Number of flows.
    pub flows: u32,
    /// Size of a request message.
    pub request_bytes: usize,
    /// Size of a response message.
    pub response_bytes: usize,
    /// Pause between a response's arrival and the next request.
    pub gap: Duration,
}

/// A scripted multipath run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The paths; path 0 carries the handshake.
    pub paths: Vec<PathSpec>,
    /// The client's scheduler.
    pub scheduler: Arc<Program>,
    /// Steps, at virtual times since the start (any order; ties keep their
    /// order).
    pub steps: Vec<(Duration, Step)>,
    /// Congestion control of every path.
    pub cc: CcAlgorithm,
    /// Seed of the simulator and both endpoints.
    pub seed: u64,
    /// The run ends when every write has arrived and the script is done, or
    /// at this virtual time.
    pub time_limit: Duration,
    /// Request/response flows run besides the script (their requests are
    /// writes too, tag 0); `None` by default.
    pub request_response: Option<RequestResponse>,
    /// Stop simulating once the wall clock passes this, wherever the run
    /// is (the report then says what did not arrive); `None` by default.
    /// The lab sets it from the experiment's deadline.
    pub wall_deadline: Option<std::time::Instant>,
}

/// Setting up a scenario failed.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A link spec does not parse.
    #[error("path {index}: {error}")]
    Link {
        /// Path index.
        index: usize,
        /// The parser's message.
        error: String,
    },
    /// No shipped scheduler has this name.
    #[error("no shipped scheduler named `{0}` (see `braid progmp list`)")]
    UnknownScheduler(String),
    /// The scenario is inconsistent.
    #[error("invalid scenario `{field}`: expected {expected}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The allowed form.
        expected: &'static str,
    },
    /// The simulated network could not be built.
    #[error("cannot build the simulated network: {0}")]
    Network(#[from] SimError),
    /// The transport refused something.
    #[error("transport: {0}")]
    Transport(String),
}

impl Scenario {
    /// Paths from link specs, all opened at the start and none a backup,
    /// with shipped scheduler `scheduler`; CUBIC, seed 1, 60 s limit.
    pub fn new(scheduler: &str, links: &[&str]) -> Result<Scenario, ScenarioError> {
        let b = builtin(scheduler).ok_or_else(|| ScenarioError::UnknownScheduler(scheduler.to_string()))?;
        let program = Program::compile(b.source).map_err(|e| ScenarioError::Transport(e.to_string()))?;
        Self::with_program(Arc::new(program), links)
    }

    /// As [`Scenario::new`], with any compiled scheduler.
    pub fn with_program(scheduler: Arc<Program>, links: &[&str]) -> Result<Scenario, ScenarioError> {
        let paths = links
            .iter()
            .enumerate()
            .map(|(index, l)| {
                let link = l.parse::<LinkSpec>().map_err(|e| ScenarioError::Link { index, error: e.to_string() })?;
                Ok(PathSpec { link, backup: false, open_at_start: true })
            })
            .collect::<Result<Vec<_>, ScenarioError>>()?;
        Ok(Scenario {
            paths,
            scheduler,
            steps: Vec::new(),
            cc: CcAlgorithm::Cubic,
            seed: 1,
            time_limit: Duration::from_secs(60),
            request_response: None,
            wall_deadline: None,
        })
    }

    /// Adds a step at `at`.
    pub fn at(&mut self, at: Duration, step: Step) -> &mut Self {
        self.steps.push((at, step));
        self
    }

    /// Adds a write of `bytes` tagged `user` at `at`.
    pub fn write_at(&mut self, at: Duration, bytes: usize, user: i64) -> &mut Self {
        self.at(at, Step::Write { bytes, user })
    }

    /// Writes of `bytes` every `every`, `count` times from `start`: a thin
    /// (application-limited) stream.
    pub fn thin_stream(&mut self, start: Duration, every: Duration, count: u32, bytes: usize, user: i64) -> &mut Self {
        for i in 0..count {
            self.write_at(start + every * i, bytes, user);
        }
        self
    }

    /// Runs `flows` closed-loop request/response flows from `start`
    /// (see [`RequestResponse`]).
    pub fn request_response(
        &mut self,
        start: Duration,
        flows: u32,
        request_bytes: usize,
        response_bytes: usize,
        gap: Duration,
    ) -> &mut Self {
        self.request_response = Some(RequestResponse { start, flows, request_bytes, response_bytes, gap });
        self
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |field, expected| Err(ScenarioError::Invalid { field, expected });
        if self.paths.is_empty() || self.paths.len() > braid_proto::MAX_PATHS || self.paths.len() > 250 {
            return invalid("paths", "1 to 16 paths");
        }
        if !self.paths[0].open_at_start {
            return invalid("paths[0].open_at_start", "true: path 0 carries the handshake");
        }
        for (_, step) in &self.steps {
            let path = match step {
                Step::SetLink { path, .. } | Step::AddPath { path } | Step::RemovePath { path } | Step::SetBackup { path, .. } => {
                    Some(*path)
                }
                Step::Write { bytes, .. } if *bytes as u64 > TransportConfig::default().max_message_size => {
                    return invalid("steps", "writes of at most 64 MiB");
                }
                _ => None,
            };
            if path.is_some_and(|p| p >= self.paths.len()) {
                return invalid("steps", "path indices of the scenario's paths");
            }
        }
        if let Some(rr) = &self.request_response {
            let max = TransportConfig::default().max_message_size;
            if rr.request_bytes as u64 > max || rr.response_bytes as u64 > max {
                return invalid("request_response", "requests and responses of at most 64 MiB");
            }
        }
        if self.time_limit.is_zero() {
            return invalid("time_limit", "a positive duration");
        }
        Ok(())
    }
}

/// A packet of the client that carried stream data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmission {
    /// When it left.
    pub at: Instant,
    /// The scenario path it left on.
    pub path: usize,
    /// Its path id on the wire.
    pub path_id: u32,
    /// Its packet number on that path.
    pub pn: u64,
    /// The stream bytes of its DATA frames.
    pub ranges: Vec<Range<u64>>,
}

/// One application write, as it entered the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// When the application wrote it.
    pub at: Instant,
    /// Its stream bytes (length prefix included).
    pub range: Range<u64>,
    /// Its tag.
    pub user: i64,
    /// When the server read it whole, if it did.
    pub delivered: Option<Instant>,
    /// For a request of [`Scenario::request_response`]: when the client
    /// read the whole response, if it did.
    pub responded: Option<Instant>,
}

/// What a scenario run did.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// Every write reached the server intact and in order.
    pub ok: bool,
    /// Every packet of the client that carried stream data, in order.
    pub transmissions: Vec<Transmission>,
    /// The writes, in order.
    pub writes: Vec<Write>,
    /// The scheduler's `PRINT` lines with the time of the run.
    pub prints: Vec<(Instant, String)>,
    /// The client's paths at the end.
    pub paths: Vec<PathInfo>,
    /// The client connection's counters.
    pub stats: ConnectionStats,
    /// When the run ended.
    pub end: Instant,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// Number of paths in the scenario.
    pub path_count: usize,
    /// The client scheduler's registers `R1`..`R6` at the end.
    pub registers: [i64; 6],
    /// Counters of each path's links, by scenario index: client → server,
    /// then server → client (bytes on the wire).
    pub link_stats: Vec<[LinkStats; 2]>,
}

impl ScenarioReport {
    /// The paths (by scenario index, sorted, each once) that carried the
    /// stream byte at `seq`.
    pub fn carriers(&self, seq: u64) -> Vec<usize> {
        let set: BTreeSet<usize> =
            self.transmissions.iter().filter(|t| t.ranges.iter().any(|r| r.contains(&seq))).map(|t| t.path).collect();
        set.into_iter().collect()
    }

    /// The path that first carried the stream byte at `seq`.
    pub fn first_carrier(&self, seq: u64) -> Option<usize> {
        self.transmissions.iter().find(|t| t.ranges.iter().any(|r| r.contains(&seq))).map(|t| t.path)
    }

    /// Stream bytes each path carried (copies included), by scenario index.
    pub fn bytes_by_path(&self) -> Vec<u64> {
        let mut v = vec![0; self.path_count];
        for t in &self.transmissions {
            v[t.path] += t.ranges.iter().map(|r| r.end - r.start).sum::<u64>();
        }
        v
    }

    /// Data packets each path carried, by scenario index.
    pub fn packets_by_path(&self) -> Vec<usize> {
        let mut v = vec![0; self.path_count];
        for t in &self.transmissions {
            v[t.path] += 1;
        }
        v
    }

    /// Transmissions carrying bytes of write `index`, in order.
    pub fn transmissions_of(&self, index: usize) -> impl Iterator<Item = &Transmission> {
        let range = self.writes.get(index).map(|w| w.range.clone()).unwrap_or(0..0);
        self.transmissions.iter().filter(move |t| t.ranges.iter().any(|r| r.start < range.end && range.start < r.end))
    }

    /// Completion time of every request/response flow that completed
    /// (request written to whole response read), in order.
    pub fn completion_times(&self) -> Vec<Duration> {
        self.writes.iter().filter_map(|w| w.responded.map(|r| r - w.at)).collect()
    }

    /// The `PRINT` lines alone.
    pub fn print_lines(&self) -> impl Iterator<Item = &str> {
        self.prints.iter().map(|(_, l)| l.as_str())
    }
}

/// Client address of scenario path `i`.
fn client_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, i as u8, 0, 1)), CLIENT_PORT)
}

/// Server address of scenario path `i`.
fn server_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, i as u8, 0, 2)), SERVER_PORT)
}


/// The content of write `index`: bytes the server can check on their own.
fn content(seed: u64, index: usize, len: usize) -> Bytes {
    content_with_key(splitmix64(seed ^ splitmix64(index as u64 + 1)), len)
}

/// The content of the response to write `index`.
fn response_content(seed: u64, index: usize, len: usize) -> Bytes {
    content_with_key(splitmix64(seed ^ 0x7e57 ^ splitmix64(index as u64 + 1)), len)
}

fn content_with_key(key: u64, len: usize) -> Bytes {
    Bytes::from((0..len).map(|j| splitmix64(key ^ (j as u64 / 8)).to_le_bytes()[j % 8]).collect::<Vec<u8>>())
}

struct ClientApp {
    conn: ConnectionHandle,
    seed: u64,
    /// Client IP of each scenario path, to name the path of a packet.
    ips: Vec<IpAddr>,
    transmissions: Vec<Transmission>,
    prints: Vec<(Instant, String)>,
    /// Writes refused with `Blocked`, with their tags, in order.
    pending: std::collections::VecDeque<(Bytes, i64)>,
    next_offset: u64,
    writes: Vec<Write>,
    error: Option<String>,
    /// The request/response workload, if any.
    rr: Option<RequestResponse>,
    /// Requests written so far.
    requests: u32,
    /// When the next request is due.
    next_request: Option<Instant>,
    /// Indices (into `writes`) of requests awaiting their response, in order.
    awaiting: std::collections::VecDeque<usize>,
}

impl ClientApp {
    /// Writes the next request if it is due.
    fn request_if_due(&mut self, endpoint: &mut Endpoint, now: Instant) {
        let (Some(rr), Some(at)) = (self.rr, self.next_request) else { return };
        if now < at {
            return;
        }
        self.next_request = None;
        self.awaiting.push_back(self.writes.len());
        self.requests += 1;
        self.write(endpoint, now, rr.request_bytes, 0);
    }

    /// A response arrived whole.
    fn on_response(&mut self, now: Instant, message: &[u8]) {
        let Some(rr) = self.rr else {
            self.error.get_or_insert_with(|| "the server sent a message unasked".to_string());
            return;
        };
        let Some(index) = self.awaiting.pop_front() else {
            self.error.get_or_insert_with(|| "a response without a request".to_string());
            return;
        };
        if message != &response_content(self.seed, index, rr.response_bytes)[..] {
            self.error.get_or_insert_with(|| format!("response to write {index} arrived corrupt"));
        }
        self.writes[index].responded = Some(now);
        if self.requests < rr.flows {
            self.next_request = Some(now + rr.gap);
        }
    }

    fn write(&mut self, endpoint: &mut Endpoint, now: Instant, bytes: usize, user: i64) {
        let index = self.writes.len();
        let len = bytes as u64;
        let start = self.next_offset;
        self.next_offset += wire::varint_len(len) as u64 + len;
        self.writes.push(Write { at: now, range: start..self.next_offset, user, delivered: None, responded: None });
        self.pending.push_back((content(self.seed, index, bytes), user));
        self.flush(endpoint);
    }

    fn flush(&mut self, endpoint: &mut Endpoint) {
        while let Some((message, user)) = self.pending.pop_front() {
            if let Err(e) = endpoint.set_user_tag(self.conn, user) {
                self.error.get_or_insert_with(|| e.to_string());
                return;
            }
            match endpoint.send_message(self.conn, message) {
                Ok(()) => {}
                Err(braid_proto::SendError::Blocked(m)) => {
                    self.pending.push_front((m, user));
                    return;
                }
                Err(e) => {
                    self.error.get_or_insert_with(|| format!("send failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Notes the packets the endpoint just sent from `src` (captured before
    /// sealing: the wire is encrypted).
    fn record(&mut self, now: Instant, src: SocketAddr, endpoint: &mut Endpoint) {
        let path = self.ips.iter().position(|ip| *ip == src.ip()).unwrap_or(0);
        for p in endpoint.take_sent_packets(self.conn) {
            self.transmissions.push(Transmission { at: now, path, path_id: p.path_id, pn: p.pn, ranges: p.data });
        }
    }
}

#[derive(Default)]
struct ServerApp {
    conn: Option<ConnectionHandle>,
    seed: u64,
    /// Arrival time of each message read, in order.
    received: Vec<Instant>,
    error: Option<String>,
    /// Answer every message with a response of this many bytes, scheduled
    /// by this program.
    respond: Option<(usize, Arc<Program>)>,
    /// Responses refused with `Blocked`, in order.
    pending: std::collections::VecDeque<Bytes>,
}

impl ServerApp {
    fn flush(&mut self, endpoint: &mut Endpoint) {
        let Some(conn) = self.conn else { return };
        while let Some(m) = self.pending.pop_front() {
            match endpoint.send_message(conn, m) {
                Ok(()) => {}
                Err(braid_proto::SendError::Blocked(m)) => {
                    self.pending.push_front(m);
                    return;
                }
                Err(e) => {
                    self.error.get_or_insert_with(|| format!("response failed: {e}"));
                    return;
                }
            }
        }
    }
}

enum Role {
    Client(Box<ClientApp>),
    Server(ServerApp),
}

/// A simulated host: an endpoint with several addresses and its
/// application.
struct Host {
    endpoint: Endpoint,
    /// Source of datagrams whose path leaves the choice to the socket.
    primary: SocketAddr,
    role: Role,
    buf: Vec<u8>,
}

impl Host {
    fn drive(&mut self, now: Instant) {
        while let Some(event) = self.endpoint.poll_event() {
            match (&mut self.role, event) {
                (Role::Client(c), Event::Writable(_)) => c.flush(&mut self.endpoint),
                (Role::Client(c), Event::Readable(h)) => {
                    while let Ok(Some(m)) = self.endpoint.recv_message(h) {
                        c.on_response(now, &m);
                    }
                }
                (Role::Server(s), Event::Writable(_)) => s.flush(&mut self.endpoint),
                (Role::Client(c), Event::Closed(_, reason)) => {
                    c.error.get_or_insert_with(|| format!("connection closed: {reason}"));
                }
                (Role::Server(s), Event::Accepted(h)) => {
                    s.conn = s.conn.or(Some(h));
                    if let Some((_, program)) = &s.respond {
                        if let Err(e) = self.endpoint.set_scheduler(h, program.clone()) {
                            s.error.get_or_insert_with(|| format!("server scheduler: {e}"));
                        }
                    }
                }
                (Role::Server(s), Event::Readable(h)) => {
                    while let Ok(Some(m)) = self.endpoint.recv_message(h) {
                        let index = s.received.len();
                        if s.error.is_none() && m != content(s.seed, index, m.len()) {
                            s.error = Some(format!("write {index} arrived corrupt"));
                        }
                        s.received.push(now);
                        if let Some((bytes, _)) = &s.respond {
                            s.pending.push_back(response_content(s.seed, index, *bytes));
                        }
                    }
                    s.flush(&mut self.endpoint);
                }
                _ => {}
            }
        }
        if let Role::Client(c) = &mut self.role {
            c.request_if_due(&mut self.endpoint, now);
            for line in self.endpoint.take_scheduler_prints(c.conn) {
                c.prints.push((now, line));
            }
        }
    }

    fn client(&mut self) -> (&mut Endpoint, &mut ClientApp) {
        match &mut self.role {
            Role::Client(c) => (&mut self.endpoint, c),
            Role::Server(_) => unreachable!("the client node is node 0"),
        }
    }
}

impl Node for Host {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        self.endpoint.handle_datagram_on(now, Some(dst), src, payload);
        self.drive(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        let t = self.endpoint.poll_transmit(now, 1, &mut self.buf);
        self.drive(now);
        let t = t?;
        let src = t.source.unwrap_or(self.primary);
        if let Role::Client(c) = &mut self.role {
            c.record(now, src, &mut self.endpoint);
        }
        Some(Datagram { src, dst: t.destination, payload: Bytes::copy_from_slice(&self.buf[..t.size]) })
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        let app = match &self.role {
            Role::Client(c) => c.next_request,
            Role::Server(_) => None,
        };
        match (self.endpoint.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.drive(now);
    }
}

fn transport_error(e: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::Transport(e.to_string())
}

/// The client's id of scenario path `i`, if it is open.
fn path_id(endpoint: &Endpoint, conn: ConnectionHandle, i: usize) -> Option<u32> {
    endpoint
        .paths(conn)
        .iter()
        .find(|p| p.local.map_or(i == 0, |l| l == client_addr(i)) && p.remote == server_addr(i))
        .map(|p| p.id)
}

/// Plays a scenario.
pub fn run(s: &Scenario) -> Result<ScenarioReport, ScenarioError> {
    s.validate()?;
    let transport = TransportConfig {
        congestion_control: s.cc,
        handshake_timeout: s.time_limit,
        idle_timeout: s.time_limit,
        max_datagram_size: path_datagram(&s.paths),
        ..TransportConfig::default()
    };
    let (server, mut client) = seeded_pair(
        s.seed,
        EndpointConfig { transport: transport.clone(), ..EndpointConfig::default() },
        EndpointConfig { accept_incoming: false, transport: transport.clone(), ..EndpointConfig::default() },
    );
    let conn = client.connect_with(Instant::ZERO, server_addr(0), transport).map_err(transport_error)?;
    client.set_scheduler(conn, s.scheduler.clone()).map_err(transport_error)?;
    client.capture_scheduler_prints(conn, true).map_err(transport_error)?;
    client.capture_sent_packets(conn, true).map_err(transport_error)?;
    for (i, p) in s.paths.iter().enumerate().skip(1).filter(|(_, p)| p.open_at_start) {
        client.add_path(conn, Some(client_addr(i)), server_addr(i), p.backup).map_err(transport_error)?;
    }
    if s.paths[0].backup {
        client.set_path_backup(conn, 0, true).map_err(transport_error)?;
    }
    let ips: Vec<IpAddr> = (0..s.paths.len()).map(|i| client_addr(i).ip()).collect();
    let app = ClientApp {
        conn,
        seed: s.seed,
        ips: ips.clone(),
        transmissions: Vec::new(),
        prints: Vec::new(),
        pending: Default::default(),
        next_offset: 0,
        writes: Vec::new(),
        error: None,
        rr: s.request_response,
        requests: 0,
        next_request: s.request_response.map(|rr| Instant::ZERO + rr.start),
        awaiting: Default::default(),
    };
    let mut sim = Simulator::new(splitmix64(s.seed ^ 0x5151));
    let client_id = sim.add_node(
        ips.iter().copied(),
        Host { endpoint: client, primary: client_addr(0), role: Role::Client(Box::new(app)), buf: Vec::with_capacity(2048) },
    )?;
    let server_id = sim.add_node(
        (0..s.paths.len()).map(|i| server_addr(i).ip()),
        Host {
            endpoint: server,
            primary: server_addr(0),
            role: Role::Server(ServerApp {
                seed: s.seed,
                respond: s.request_response.map(|rr| (rr.response_bytes, s.scheduler.clone())),
                ..Default::default()
            }),
            buf: Vec::with_capacity(2048),
        },
    )?;
    for (i, p) in s.paths.iter().enumerate() {
        sim.add_path(client_addr(i).ip(), server_addr(i).ip(), &p.link)?;
    }

    let mut steps: Vec<&(Duration, Step)> = s.steps.iter().collect();
    steps.sort_by_key(|(t, _)| *t);
    let deadline = Instant::ZERO + s.time_limit;
    let mut wall = WallClock::new(s.wall_deadline);
    for (at, step) in steps {
        let at = Instant::ZERO + *at;
        if at > deadline {
            break;
        }
        if sim.run_until_condition(at, |_| wall.passed()) {
            break;
        }
        let now = sim.now();
        match step {
            Step::SetLink { path, link } => sim.set_path(client_addr(*path).ip(), server_addr(*path).ip(), link)?,
            step => {
                let host = sim.node_mut(client_id);
                let (endpoint, app) = host.client();
                let result = match step {
                    Step::Write { bytes, user } => {
                        app.write(endpoint, now, *bytes, *user);
                        Ok(())
                    }
                    Step::SetRegister { register, value } => endpoint.set_register(conn, *register, *value),
                    Step::AddPath { path } => endpoint
                        .add_path(conn, Some(client_addr(*path)), server_addr(*path), s.paths[*path].backup)
                        .map(|_| ()),
                    Step::RemovePath { path } => match path_id(endpoint, conn, *path) {
                        Some(id) => endpoint.remove_path(conn, id),
                        None => Ok(()),
                    },
                    Step::SetBackup { path, backup } => match path_id(endpoint, conn, *path) {
                        Some(id) => endpoint.set_path_backup(conn, id, *backup),
                        None => Ok(()),
                    },
                    Step::SetLink { .. } => Ok(()),
                };
                if let Err(e) = result {
                    app.error.get_or_insert_with(|| format!("{step:?}: {e}"));
                }
                host.drive(now);
            }
        }
    }
    let flows = s.request_response.map_or(0, |rr| rr.flows as usize);
    let writes = s.steps.iter().filter(|(_, st)| matches!(st, Step::Write { .. })).count() + flows;
    sim.run_until_condition(deadline, |sim| {
        if wall.passed() {
            return true;
        }
        let Role::Server(server) = &sim.node(server_id).role else { return true };
        let Role::Client(client) = &sim.node(client_id).role else { return true };
        let responded = client.writes.iter().filter(|w| w.responded.is_some()).count();
        (server.received.len() >= writes && responded >= flows) || server.error.is_some() || client.error.is_some()
    });

    let end = sim.now();
    let server_host = sim.node(server_id);
    let Role::Server(server) = &server_host.role else { unreachable!("node 1 is the server") };
    let host = sim.node(client_id);
    let Role::Client(app) = &host.role else { unreachable!("node 0 is the client") };
    let mut writes_out = app.writes.clone();
    for (w, at) in writes_out.iter_mut().zip(&server.received) {
        w.delivered = Some(*at);
    }
    let responded = writes_out.iter().filter(|w| w.responded.is_some()).count();
    let error = app.error.clone().or_else(|| server.error.clone()).or_else(|| {
        (server.received.len() < writes).then(|| format!("{} of {writes} writes arrived by {end:?}", server.received.len()))
    }).or_else(|| (responded < flows).then(|| format!("{responded} of {flows} responses arrived by {end:?}")));
    Ok(ScenarioReport {
        ok: error.is_none(),
        transmissions: app.transmissions.clone(),
        writes: writes_out,
        prints: app.prints.clone(),
        paths: host.endpoint.paths(conn),
        stats: host.endpoint.connection_stats(conn).unwrap_or_default(),
        end,
        error,
        path_count: s.paths.len(),
        registers: Register::ALL.map(|r| host.endpoint.register(conn, r).unwrap_or(0)),
        link_stats: (0..s.paths.len())
            .map(|i| {
                let (c, v) = (client_addr(i).ip(), server_addr(i).ip());
                [(c, v), (v, c)].map(|(a, b)| sim.link_stats(a, b).copied().unwrap_or_default())
            })
            .collect(),
    })
}
