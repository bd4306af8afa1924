//! Simulated bulk transfers over the real transport.
//!
//! K flows (K connections of one client [`Endpoint`]) send `bytes` each to
//! one server endpoint over one simulated path (so they share its
//! bottleneck), in virtual time, with everything derived from one seed. The
//! payload is a pseudo-random pattern per flow that the receiver checks byte
//! by byte, so a report's `ok` means every byte of every flow arrived intact
//! and in order, within the time limit.
//!
//! Each flow's first message is a 16-byte header (magic, flow index, byte
//! count) telling the receiver which pattern to expect; the data follows in
//! messages of `message_size` bytes. Header bytes are not counted.
//!
//! ```
//! use braid_lab::harness::sim_transfer::{run, SimTransferConfig};
//! let cfg = SimTransferConfig {
//!     link: "rtt=20ms,rate=50mbit,loss=1%".parse().unwrap(),
//!     bytes: 200_000,
//!     ..SimTransferConfig::default()
//! };
//! let report = run(&cfg).unwrap();
//! assert!(report.ok);
//! assert_eq!(report.bytes, 200_000);
//! // Same config, same seed: the same run.
//! assert_eq!(run(&cfg).unwrap().trace_hash, report.trace_hash);
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use braid_core::{splitmix64, Instant};
use super::sim_endpoints::seeded_pair;
use braid_link::{Direction, LinkSpec, LinkStats};
use braid_proto::{
    CcAlgorithm, CloseReason, ConnectError, ConnectionHandle, Endpoint, EndpointConfig, Event,
    SendError, TransportConfig,
};
use braid_sim::{Datagram, Node, NodeId, SimError, Simulator, IPV4_UDP_OVERHEAD};
use bytes::Bytes;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTransferConfig {
    /// The path between client and server.
    pub link: LinkSpec,
    /// Bytes each flow transfers.
    pub bytes: u64,
    /// Congestion controller of every connection.
    pub cc: CcAlgorithm,
    /// Number of concurrent flows (connections) sharing the path.
    pub flows: usize,
    /// Seed of the simulator, its links and both endpoints.
    pub seed: u64,
    /// Application message size, bytes.
    pub message_size: usize,
    /// Give up after this much *virtual* time.
    pub time_limit: Duration,
    /// Stop simulating once the wall clock passes this, wherever the run
    /// is (what did not complete is reported as incomplete); `None`: no
    /// limit. The lab sets it from the experiment's deadline.
    pub wall_deadline: Option<std::time::Instant>,
}

impl Default for SimTransferConfig {
    /// `rtt=50ms,rate=100mbit`, 10 MiB, CUBIC, one flow, seed 1, 64 KiB
    /// messages, 600 s of virtual time.
    fn default() -> Self {
        SimTransferConfig {
            link: "rtt=50ms,rate=100mbit"
                .parse()
                .expect("the default link spec is valid"),
            bytes: 10 << 20,
            cc: CcAlgorithm::default(),
            flows: 1,
            seed: 1,
            message_size: 64 << 10,
            time_limit: Duration::from_secs(600),
            wall_deadline: None,
        }
    }
}

/// The outcome of a simulated transfer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimTransferReport {
    /// Every byte of every flow arrived intact within the time limit.
    pub ok: bool,
    /// Bytes delivered intact, all flows together.
    pub bytes: u64,
    /// Virtual time from the first connect to the last flow's completion (or
    /// to the time limit if some flow did not complete).
    pub virtual_secs: f64,
    /// `bytes` over `virtual_secs`, in Mbit/s (10⁶ bit/s).
    pub goodput_mbps: f64,
    /// The path's bottleneck rate client → server, Mbit/s; `None` if
    /// unlimited.
    pub link_mbps: Option<f64>,
    /// Goodput after slow start over the link rate: application bytes
    /// delivered between t₀ and the last completion, divided by what the
    /// link carries in that time. t₀ is the latest of the flows' first
    /// congestion events (when every flow that ever left slow start has),
    /// or the start if no flow saw one. Headers count against it, so the
    /// ceiling is about 0.96. `None` without a rate or if not all flows
    /// completed.
    pub efficiency: Option<f64>,
    /// Packets declared lost by the senders (each one's data is
    /// retransmitted), all flows together.
    pub retransmits: u64,
    /// Jain's fairness index over the flows' throughputs while all were
    /// running: from t₀ (or the start, if t₀ came later) to the first
    /// completion. `None` for one flow.
    pub jain: Option<f64>,
    /// The simulator's trace hash, 16 hex digits: equal for equal configs.
    pub trace_hash: String,
    /// Per-flow details.
    pub flows: Vec<FlowReport>,
    /// Counters of the client → server link.
    pub forward_link: LinkStats,
    /// Counters of the server → client link.
    pub reverse_link: LinkStats,
}

/// One flow's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowReport {
    /// All bytes arrived intact.
    pub ok: bool,
    /// Bytes the receiver verified, in order.
    pub bytes: u64,
    /// Virtual seconds from the start to the last byte, if it completed.
    pub completed_secs: Option<f64>,
    /// `bytes` over `completed_secs` (or the run time), Mbit/s.
    pub goodput_mbps: f64,
    /// Virtual seconds to the sender's first congestion event.
    pub first_congestion_secs: Option<f64>,
    /// Packets the sender declared lost.
    pub packets_lost: u64,
    /// Stream bytes the sender sent again.
    pub retransmitted_bytes: u64,
    /// Congestion events (window reductions) at the sender.
    pub congestion_events: u64,
    /// Retransmission timeouts at the sender.
    pub rto_count: u64,
    /// Sender's minimum RTT, milliseconds.
    pub min_rtt_ms: f64,
    /// Sender's smoothed RTT at the end, milliseconds.
    pub smoothed_rtt_ms: f64,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

/// Progress of a running simulation, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Virtual time so far, seconds.
    pub virtual_secs: f64,
    /// Bytes verified by the receiver so far, all flows.
    pub bytes_delivered: u64,
    /// Bytes of all flows together.
    pub bytes_total: u64,
}

/// The simulation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimTransferError {
    /// A config field is out of range.
    #[error("invalid sim transfer config `{field}`: expected {expected}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// The allowed form.
        expected: &'static str,
    },
    /// The client could not open a connection.
    #[error("cannot connect: {0}")]
    Connect(#[from] ConnectError),
    /// The simulated network could not be built.
    #[error("cannot build the simulated network: {0}")]
    Network(#[from] SimError),
}

/// Virtual time between two progress callbacks.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

const HEADER_MAGIC: [u8; 4] = *b"BRDT";
const HEADER_LEN: usize = 16;

/// Run a simulated transfer.
pub fn run(cfg: &SimTransferConfig) -> Result<SimTransferReport, SimTransferError> {
    run_with_progress(cfg, |_| {})
}

/// Run a simulated transfer, calling `progress` every 100 ms of virtual
/// time.
pub fn run_with_progress(
    cfg: &SimTransferConfig,
    mut progress: impl FnMut(&Progress),
) -> Result<SimTransferReport, SimTransferError> {
    validate(cfg)?;
    let client_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40_000);
    let server_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4_433);

    let transport = transport_config(cfg);
    let (server, mut client) = seeded_pair(
        cfg.seed,
        EndpointConfig { accept_incoming: true, transport: transport.clone(), ..EndpointConfig::default() },
        EndpointConfig { accept_incoming: false, transport, ..EndpointConfig::default() },
    );
    let mut senders = Vec::with_capacity(cfg.flows);
    for flow in 0..cfg.flows {
        let conn = client.connect(Instant::ZERO, server_addr)?;
        senders.push(SendFlow::new(flow, conn, cfg));
    }
    let mut sender = Sender { flows: senders };
    sender.fill_all(&mut client);

    let mut sim = Simulator::new(splitmix64(cfg.seed ^ 0x5151));
    let client_id = sim.add_node(
        [client_addr.ip()],
        Host::new(client_addr, client, App::Sender(sender)),
    )?;
    let receiver = Receiver {
        expected: cfg.bytes,
        flows: vec![RecvFlow::default(); cfg.flows],
        conns: Vec::new(),
        seed: cfg.seed,
    };
    let server_id = sim.add_node(
        [server_addr.ip()],
        Host::new(server_addr, server, App::Receiver(receiver)),
    )?;
    sim.add_path(client_addr.ip(), server_addr.ip(), &cfg.link)?;

    let deadline = Instant::ZERO + cfg.time_limit;
    let total = cfg.bytes.saturating_mul(cfg.flows as u64);
    let mut windows = Windows::new(cfg.flows);
    let mut next_progress = Instant::ZERO + PROGRESS_INTERVAL;
    let mut wall = WallClock::new(cfg.wall_deadline);
    sim.run_until_condition(deadline, |sim| {
        if wall.passed() {
            return true;
        }
        let now = sim.now();
        let recv = receiver_of(sim, server_id);
        windows.observe(now, sender_of(sim, client_id), recv);
        if now >= next_progress {
            next_progress = now + PROGRESS_INTERVAL;
            let delivered = recv.flows.iter().map(|f| f.verified).sum();
            progress(&Progress {
                virtual_secs: secs(now),
                bytes_delivered: delivered,
                bytes_total: total,
            });
        }
        recv.all_finished(sender_of(sim, client_id))
    });
    Ok(report(cfg, &sim, client_id, server_id, &windows))
}

/// Checks a wall-clock deadline every few hundred simulator events (reading
/// the clock at every event would cost more than some events do).
pub(crate) struct WallClock {
    deadline: Option<std::time::Instant>,
    calls: u32,
}

impl WallClock {
    pub(crate) fn new(deadline: Option<std::time::Instant>) -> WallClock {
        WallClock { deadline, calls: 0 }
    }

    /// Whether the deadline has passed (checked on every 256th call).
    pub(crate) fn passed(&mut self) -> bool {
        let Some(deadline) = self.deadline else { return false };
        self.calls = self.calls.wrapping_add(1);
        self.calls % 256 == 0 && std::time::Instant::now() >= deadline
    }
}

fn validate(cfg: &SimTransferConfig) -> Result<(), SimTransferError> {
    let check = |ok: bool, field, expected| {
        if ok {
            Ok(())
        } else {
            Err(SimTransferError::InvalidConfig { field, expected })
        }
    };
    check(cfg.flows >= 1, "flows", "at least 1")?;
    check(cfg.message_size >= 1, "message_size", "at least 1 byte")?;
    check(
        cfg.message_size as u64 <= TransportConfig::default().max_message_size,
        "message_size",
        "at most the transport's max_message_size (64 MiB)",
    )?;
    check(
        !cfg.time_limit.is_zero(),
        "time_limit",
        "a positive duration",
    )?;
    let mtu = cfg
        .link
        .params(Direction::AToB)
        .mtu
        .into_iter()
        .chain(cfg.link.params(Direction::BToA).mtu)
        .min();
    let min_mtu = usize::from(TransportConfig::MIN_DATAGRAM_SIZE) + IPV4_UDP_OVERHEAD;
    check(
        mtu.is_none_or(|m| m as usize >= min_mtu),
        "link",
        "a path whose mtu, if set, is at least 1228 bytes (the transport's 1200-byte minimum datagram plus IPv4 and UDP headers)",
    )
}

/// The transport's defaults with the chosen controller, except:
/// - the handshake and the idle timeout may take the whole time limit: the
///   run has one deadline, and the defaults (30 s each) rightly give up on a
///   peer that stays silent that long, which a link with 20% loss in both
///   directions occasionally produces (several retransmissions and all
///   their acknowledgements lost in a row); a run measures delivery, not
///   when to give up;
/// - datagrams shrink to fit the path MTU if one is set (the path MTU is
///   assumed known).
fn transport_config(cfg: &SimTransferConfig) -> TransportConfig {
    let mut t = TransportConfig {
        congestion_control: cfg.cc,
        handshake_timeout: cfg.time_limit,
        idle_timeout: cfg.time_limit,
        ..TransportConfig::default()
    };
    let mtu = cfg
        .link
        .params(Direction::AToB)
        .mtu
        .into_iter()
        .chain(cfg.link.params(Direction::BToA).mtu)
        .min();
    if let Some(mtu) = mtu {
        let fit = (mtu as usize).saturating_sub(IPV4_UDP_OVERHEAD);
        t.max_datagram_size = t
            .max_datagram_size
            .min(u16::try_from(fit).unwrap_or(u16::MAX));
    }
    t
}

fn secs(t: Instant) -> f64 {
    t.since_epoch().as_secs_f64()
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 * 8.0 / s / 1e6
    } else {
        0.0
    }
}


/// The pseudo-random payload of one flow: byte `i` is byte `i % 8` of
/// `splitmix64(key ^ (i / 8) · φ)`, so any range can be produced or checked
/// independently.
#[derive(Debug, Clone, Copy)]
struct Pattern {
    key: u64,
}

impl Pattern {
    fn new(seed: u64, flow: usize) -> Self {
        Pattern {
            key: splitmix64(seed ^ splitmix64(flow as u64 + 1)),
        }
    }

    fn word(self, index: u64) -> [u8; 8] {
        splitmix64(self.key ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03)).to_le_bytes()
    }

    /// Calls `f(position in the range, expected bytes)` over consecutive
    /// pieces of the pattern covering `offset .. offset + len`.
    fn for_each_piece(
        self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(usize, &[u8]) -> bool,
    ) -> bool {
        let mut pos = 0;
        while pos < len {
            let at = offset + pos as u64;
            let word = self.word(at / 8);
            let skip = (at % 8) as usize;
            let n = (8 - skip).min(len - pos);
            if !f(pos, &word[skip..skip + n]) {
                return false;
            }
            pos += n;
        }
        true
    }

    fn fill(self, offset: u64, out: &mut [u8]) {
        let len = out.len();
        self.for_each_piece(offset, len, |pos, piece| {
            out[pos..pos + piece.len()].copy_from_slice(piece);
            true
        });
    }

    fn matches(self, offset: u64, data: &[u8]) -> bool {
        self.for_each_piece(offset, data.len(), |pos, piece| {
            data[pos..pos + piece.len()] == *piece
        })
    }
}

fn header(flow: usize, bytes: u64) -> Bytes {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(&HEADER_MAGIC);
    h.extend_from_slice(&(flow as u32).to_le_bytes());
    h.extend_from_slice(&bytes.to_le_bytes());
    Bytes::from(h)
}

/// The sending side of one flow.
#[derive(Debug)]
struct SendFlow {
    conn: ConnectionHandle,
    pattern: Pattern,
    total: u64,
    message_size: usize,
    header: Option<Bytes>,
    /// Bytes handed to the connection so far.
    queued: u64,
    /// A message refused with `Blocked`, to retry on `Writable`.
    blocked: Option<Bytes>,
    first_congestion: Option<Instant>,
    error: Option<String>,
}

impl SendFlow {
    fn new(flow: usize, conn: ConnectionHandle, cfg: &SimTransferConfig) -> Self {
        SendFlow {
            conn,
            pattern: Pattern::new(cfg.seed, flow),
            total: cfg.bytes,
            message_size: cfg.message_size,
            header: Some(header(flow, cfg.bytes)),
            queued: 0,
            blocked: None,
            first_congestion: None,
            error: None,
        }
    }

    fn next_message(&mut self) -> Option<Bytes> {
        if let Some(m) = self.blocked.take().or_else(|| self.header.take()) {
            return Some(m);
        }
        let len = (self.total - self.queued).min(self.message_size as u64) as usize;
        if len == 0 {
            return None;
        }
        let mut data = vec![0; len];
        self.pattern.fill(self.queued, &mut data);
        self.queued += len as u64;
        Some(Bytes::from(data))
    }

    /// Queue messages until everything is queued or the buffer is full.
    fn fill(&mut self, endpoint: &mut Endpoint) {
        if self.error.is_some() {
            return;
        }
        while let Some(message) = self.next_message() {
            match endpoint.send_message(self.conn, message) {
                Ok(()) => {}
                Err(SendError::Blocked(m)) => {
                    self.blocked = Some(m);
                    return;
                }
                Err(e) => {
                    self.error = Some(format!("send failed: {e}"));
                    return;
                }
            }
        }
    }
}

#[derive(Debug)]
struct Sender {
    flows: Vec<SendFlow>,
}

impl Sender {
    fn fill_all(&mut self, endpoint: &mut Endpoint) {
        for f in &mut self.flows {
            f.fill(endpoint);
        }
    }
}

/// The receiving side of one flow, indexed by the flow number from its
/// header.
#[derive(Debug, Clone, Default)]
struct RecvFlow {
    /// Bytes checked against the pattern, in order.
    verified: u64,
    completed: Option<Instant>,
    error: Option<String>,
}

#[derive(Debug)]
struct Receiver {
    expected: u64,
    seed: u64,
    flows: Vec<RecvFlow>,
    /// Connections accepted, with the flow they carry once the header came.
    conns: Vec<(ConnectionHandle, Option<usize>)>,
}

impl Receiver {
    fn on_message(&mut self, now: Instant, conn: ConnectionHandle, message: Bytes) {
        let Some(slot) = self.conns.iter().position(|(h, _)| *h == conn) else {
            self.conns.push((conn, None));
            return self.on_message(now, conn, message);
        };
        match self.conns[slot].1 {
            None => {
                // The first message of a connection must be a valid header.
                let flow = parse_header(&message, self.expected).filter(|&f| {
                    f < self.flows.len() && !self.conns.iter().any(|(_, g)| *g == Some(f))
                });
                match flow {
                    Some(f) => {
                        self.conns[slot].1 = Some(f);
                        self.check_complete(now, f);
                    }
                    None => self.conns[slot].1 = Some(usize::MAX),
                }
            }
            Some(usize::MAX) => {}
            Some(f) => {
                let rf = &mut self.flows[f];
                if rf.error.is_some() {
                    return;
                }
                let pattern = Pattern::new(self.seed, f);
                if rf.verified + message.len() as u64 > self.expected {
                    rf.error = Some(format!(
                        "received more than the {} bytes announced",
                        self.expected
                    ));
                } else if !pattern.matches(rf.verified, &message) {
                    rf.error = Some(format!(
                        "corrupt data in the {} bytes after offset {}",
                        message.len(),
                        rf.verified
                    ));
                } else {
                    rf.verified += message.len() as u64;
                    self.check_complete(now, f);
                }
            }
        }
    }

    fn check_complete(&mut self, now: Instant, flow: usize) {
        let rf = &mut self.flows[flow];
        if rf.verified == self.expected && rf.completed.is_none() && rf.error.is_none() {
            rf.completed = Some(now);
        }
    }

    /// Every flow either completed or failed on one side.
    fn all_finished(&self, sender: &Sender) -> bool {
        self.flows
            .iter()
            .zip(&sender.flows)
            .all(|(r, s)| r.completed.is_some() || r.error.is_some() || s.error.is_some())
    }
}

fn parse_header(message: &[u8], expected: u64) -> Option<usize> {
    if message.len() != HEADER_LEN || message[..4] != HEADER_MAGIC {
        return None;
    }
    let flow = u32::from_le_bytes(message[4..8].try_into().ok()?);
    let bytes = u64::from_le_bytes(message[8..16].try_into().ok()?);
    (bytes == expected).then_some(flow as usize)
}

#[derive(Debug)]
enum App {
    Sender(Sender),
    Receiver(Receiver),
}

/// A simulated host: one endpoint and the application on top of it.
struct Host {
    addr: SocketAddr,
    endpoint: Endpoint,
    app: App,
    buf: Vec<u8>,
}

impl Host {
    fn new(addr: SocketAddr, endpoint: Endpoint, app: App) -> Self {
        Host {
            addr,
            endpoint,
            app,
            buf: Vec::with_capacity(2048),
        }
    }

    /// React to the endpoint's events; returns whether there were any.
    fn drive(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some(event) = self.endpoint.poll_event() {
            any = true;
            match (&mut self.app, event) {
                (App::Sender(s), Event::Writable(h)) => {
                    if let Some(f) = s.flows.iter_mut().find(|f| f.conn == h) {
                        f.fill(&mut self.endpoint);
                    }
                }
                (App::Sender(s), Event::Closed(h, reason)) => {
                    if let Some(f) = s.flows.iter_mut().find(|f| f.conn == h) {
                        f.error
                            .get_or_insert_with(|| format!("connection closed: {reason}"));
                    }
                }
                (App::Receiver(r), Event::Accepted(h)) => {
                    if !r.conns.iter().any(|(c, _)| *c == h) {
                        r.conns.push((h, None));
                    }
                }
                (App::Receiver(r), Event::Readable(h)) => {
                    while let Ok(Some(message)) = self.endpoint.recv_message(h) {
                        r.on_message(now, h, message);
                    }
                }
                (App::Receiver(r), Event::Closed(h, reason)) => {
                    while let Ok(Some(message)) = self.endpoint.recv_message(h) {
                        r.on_message(now, h, message);
                    }
                    if let Some(&(_, Some(f))) = r.conns.iter().find(|(c, _)| *c == h) {
                        if let Some(rf) = r.flows.get_mut(f) {
                            if rf.completed.is_none() {
                                rf.error.get_or_insert_with(|| unexpected_close(&reason));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if let App::Sender(s) = &mut self.app {
            // Slow start ends at the first congestion event.
            for f in s.flows.iter_mut().filter(|f| f.first_congestion.is_none()) {
                if self
                    .endpoint
                    .connection_stats(f.conn)
                    .is_some_and(|st| st.congestion_events > 0)
                {
                    f.first_congestion = Some(now);
                }
            }
        }
        any
    }
}

fn unexpected_close(reason: &CloseReason) -> String {
    format!("connection closed before all data arrived: {reason}")
}

impl Node for Host {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, _dst: SocketAddr, payload: Bytes) {
        self.endpoint.handle_datagram(now, src, payload);
        self.drive(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        loop {
            // One datagram per call: each is a separate packet on the link.
            if let Some(t) = self.endpoint.poll_transmit(now, 1, &mut self.buf) {
                let payload = Bytes::copy_from_slice(&self.buf[..t.size]);
                return Some(Datagram {
                    src: self.addr,
                    dst: t.destination,
                    payload,
                });
            }
            // Sending can raise events (a close completing); handling them
            // can queue more data.
            if !self.drive(now) {
                return None;
            }
        }
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.endpoint.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.drive(now);
    }
}

fn sender_of(sim: &Simulator<Host>, id: NodeId) -> &Sender {
    match &sim.node(id).app {
        App::Sender(s) => s,
        App::Receiver(_) => unreachable!("node {id:?} is the client"),
    }
}

fn receiver_of(sim: &Simulator<Host>, id: NodeId) -> &Receiver {
    match &sim.node(id).app {
        App::Receiver(r) => r,
        App::Sender(_) => unreachable!("node {id:?} is the server"),
    }
}

/// Snapshots of the receiver's per-flow byte counts at the moments that
/// bound the efficiency and fairness windows.
#[derive(Debug)]
struct Windows {
    /// Per flow: the time of its first congestion event and the verified
    /// bytes of every flow then.
    first_congestion: Vec<Option<(Instant, Vec<u64>)>>,
    /// The first completion and the verified bytes of every flow then.
    first_completion: Option<(Instant, Vec<u64>)>,
}

impl Windows {
    fn new(flows: usize) -> Self {
        Windows {
            first_congestion: vec![None; flows],
            first_completion: None,
        }
    }

    fn observe(&mut self, now: Instant, sender: &Sender, receiver: &Receiver) {
        let verified = || {
            receiver
                .flows
                .iter()
                .map(|f| f.verified)
                .collect::<Vec<_>>()
        };
        for (slot, f) in self.first_congestion.iter_mut().zip(&sender.flows) {
            if slot.is_none() && f.first_congestion.is_some() {
                *slot = Some((now, verified()));
            }
        }
        if self.first_completion.is_none() && receiver.flows.iter().any(|f| f.completed.is_some()) {
            self.first_completion = Some((now, verified()));
        }
    }

    /// t₀ and the bytes then: the latest first congestion event, or the
    /// start.
    fn after_slow_start(&self, flows: usize) -> (Instant, Vec<u64>) {
        self.first_congestion
            .iter()
            .flatten()
            .max_by_key(|(t, _)| *t)
            .cloned()
            .unwrap_or((Instant::ZERO, vec![0; flows]))
    }
}

fn jain_index(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (x.len() > 1 && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

fn report(
    cfg: &SimTransferConfig,
    sim: &Simulator<Host>,
    client: NodeId,
    server: NodeId,
    w: &Windows,
) -> SimTransferReport {
    let sender = sender_of(sim, client);
    let receiver = receiver_of(sim, server);
    let endpoint = &sim.node(client).endpoint;
    let all_done = receiver
        .flows
        .iter()
        .all(|f| f.completed.is_some() && f.error.is_none());
    let end = if all_done {
        receiver
            .flows
            .iter()
            .filter_map(|f| f.completed)
            .max()
            .unwrap_or(Instant::ZERO)
    } else {
        sim.now()
    };
    let bytes: u64 = receiver.flows.iter().map(|f| f.verified).sum();
    let run_time = end - Instant::ZERO;
    let rate = cfg.link.rate();

    let flows: Vec<FlowReport> = sender
        .flows
        .iter()
        .zip(&receiver.flows)
        .map(|(s, r)| {
            let st = endpoint.connection_stats(s.conn).unwrap_or_default();
            let ok = r.completed.is_some() && r.error.is_none();
            FlowReport {
                ok,
                bytes: r.verified,
                completed_secs: r.completed.map(secs),
                goodput_mbps: mbps(r.verified, r.completed.unwrap_or(end) - Instant::ZERO),
                first_congestion_secs: s.first_congestion.map(secs),
                packets_lost: st.packets_lost,
                retransmitted_bytes: st.retransmitted_bytes,
                congestion_events: st.congestion_events,
                rto_count: st.rto_count,
                min_rtt_ms: st.min_rtt.as_secs_f64() * 1e3,
                smoothed_rtt_ms: st.smoothed_rtt.as_secs_f64() * 1e3,
                error: r.error.clone().or_else(|| s.error.clone()).or_else(|| {
                    (!ok).then(|| {
                        format!("incomplete after {:.3} s of virtual time", secs(sim.now()))
                    })
                }),
            }
        })
        .collect();

    let (t0, at_t0) = w.after_slow_start(cfg.flows);
    let efficiency = match rate {
        Some(rate) if all_done && end > t0 => {
            let carried = (bytes - at_t0.iter().sum::<u64>()) as f64;
            Some(carried / (rate.bytes_per_sec_f64() * (end - t0).as_secs_f64()))
        }
        _ => None,
    };
    let jain = w.first_completion.as_ref().and_then(|(t1, at_t1)| {
        let (start, at_start) = if t0 < *t1 {
            (t0, at_t0.clone())
        } else {
            (Instant::ZERO, vec![0; cfg.flows])
        };
        let span = (*t1 - start).as_secs_f64();
        let rates: Vec<f64> = at_t1
            .iter()
            .zip(&at_start)
            .map(|(b, a)| (b - a) as f64 / span)
            .collect();
        (span > 0.0).then(|| jain_index(&rates)).flatten()
    });

    SimTransferReport {
        ok: all_done,
        bytes,
        virtual_secs: run_time.as_secs_f64(),
        goodput_mbps: mbps(bytes, run_time),
        link_mbps: rate.map(|r| r.bits_per_sec() as f64 / 1e6),
        efficiency,
        retransmits: flows.iter().map(|f| f.packets_lost).sum(),
        jain,
        trace_hash: format!("{:016x}", sim.trace_hash()),
        flows,
        forward_link: sim
            .link_stats(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            )
            .copied()
            .unwrap_or_default(),
        reverse_link: sim
            .link_stats(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            )
            .copied()
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_pieces_agree_with_the_whole() {
        let p = Pattern::new(9, 2);
        let mut whole = vec![0u8; 1000];
        p.fill(0, &mut whole);
        for (off, len) in [(0usize, 1000usize), (3, 17), (8, 8), (999, 1), (13, 0)] {
            let mut part = vec![0u8; len];
            p.fill(off as u64, &mut part);
            assert_eq!(part, whole[off..off + len]);
            assert!(p.matches(off as u64, &whole[off..off + len]));
        }
        let mut bad = whole[100..200].to_vec();
        bad[50] ^= 1;
        assert!(!p.matches(100, &bad));
        assert_ne!(whole, {
            let mut other = vec![0u8; 1000];
            Pattern::new(9, 3).fill(0, &mut other);
            other
        });
    }

    #[test]
    fn receiver_rejects_corruption_and_excess() {
        let mut r = Receiver {
            expected: 20,
            seed: 1,
            flows: vec![RecvFlow::default(); 2],
            conns: Vec::new(),
        };
        let (a, b) = (ConnectionHandle(1), ConnectionHandle(2));
        let good = |flow, off, len| {
            let mut v = vec![0; len];
            Pattern::new(1, flow).fill(off, &mut v);
            Bytes::from(v)
        };
        r.on_message(Instant::ZERO, a, header(0, 20));
        r.on_message(Instant::ZERO, a, good(0, 0, 12));
        r.on_message(Instant::from_nanos(5), a, good(0, 12, 8));
        assert_eq!(r.flows[0].completed, Some(Instant::from_nanos(5)));
        // Flow 1 gets flow 0's pattern: corrupt.
        r.on_message(Instant::ZERO, b, header(1, 20));
        r.on_message(Instant::ZERO, b, good(0, 0, 4));
        assert!(r.flows[1].error.as_deref().unwrap().contains("corrupt"));
        assert_eq!(r.flows[1].verified, 0);
        // A second connection claiming flow 0 is ignored; excess is caught.
        let mut r2 = Receiver {
            expected: 4,
            seed: 1,
            flows: vec![RecvFlow::default()],
            conns: Vec::new(),
        };
        r2.on_message(Instant::ZERO, a, header(0, 4));
        r2.on_message(Instant::ZERO, a, good(0, 0, 8));
        assert!(r2.flows[0].error.as_deref().unwrap().contains("more than"));
        assert_eq!(parse_header(&header(0, 5), 4), None);
        assert_eq!(parse_header(b"nonsense", 4), None);
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(jain_index(&[1.0, 0.0]), Some(0.5));
        assert_eq!(jain_index(&[5.0]), None);
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let bad = |f: fn(&mut SimTransferConfig)| {
            let mut c = SimTransferConfig::default();
            f(&mut c);
            run(&c).unwrap_err().to_string()
        };
        assert!(bad(|c| c.flows = 0).contains("`flows`"));
        assert!(bad(|c| c.message_size = 0).contains("`message_size`"));
        assert!(bad(|c| c.time_limit = Duration::ZERO).contains("`time_limit`"));
        assert!(bad(|c| c.link = "mtu=1000".parse().unwrap()).contains("`link`"));
    }
}
