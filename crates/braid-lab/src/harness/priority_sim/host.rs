//! The simulated hosts of a priority scenario: the client runs the bulk
//! senders (one connection per flow) and the delay probe, the server drains
//! every connection and echoes the probe.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use braid_core::Instant;
use braid_proto::{ConnectionHandle, Endpoint, Event, SendError};
use braid_sim::{Datagram, Node};
use bytes::Bytes;

use super::report::Snapshot;
use super::{transport_config, ScenarioConfig, ScenarioError};
use braid_link::LinkStats;

/// Application message size: small, so that a stopped flow's buffer is
/// small too.
const MESSAGE_SIZE: usize = 16 << 10;
/// Stalls are looked for up to this long after a switch.
const STALL_WINDOW: Duration = Duration::from_secs(10);
/// Port of the delay probe on both hosts.
const PROBE_PORT: u16 = 7;
const PROBE_MAGIC: [u8; 4] = *b"BRPQ";
const PROBE_LEN: usize = 32;

pub(super) fn client_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40_000)
}

pub(super) fn server_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4_433)
}

/// Something that happens to a flow at a given time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Action {
    Start(usize),
    SetPriority(usize, f64),
    Stop(usize),
}

/// The sending side of one flow.
#[derive(Debug, Clone, Default)]
pub(super) struct SendFlow {
    pub(super) conn: Option<ConnectionHandle>,
    stopped: bool,
    /// `packets_sent` at the last check, and when it last grew.
    packets_sent: u64,
    last_send: Option<Instant>,
    pub(super) error: Option<String>,
}

/// A switch being watched for stalls.
#[derive(Debug, Clone)]
pub(super) struct SwitchWatch {
    pub(super) flow: usize,
    pub(super) at: Instant,
    pub(super) from: Option<f64>,
    pub(super) to: f64,
    pub(super) srtt: Duration,
    pub(super) longest: Duration,
}

#[derive(Debug)]
pub(super) struct Client {
    pub(super) flows: Vec<SendFlow>,
    chunk: Bytes,
    pub(super) probe: Option<Probe>,
    pub(super) switches: Vec<SwitchWatch>,
}

/// The queuing-delay probe: a numbered datagram every `interval`, echoed by
/// the server.
#[derive(Debug)]
pub(super) struct Probe {
    interval: Duration,
    next: Instant,
    sent: Vec<Instant>,
    /// `(send time, RTT)` of every echo.
    pub(super) samples: Vec<(Instant, Duration)>,
}

#[derive(Debug)]
enum Role {
    Client(Client),
    Server,
}

/// A simulated host: an endpoint, the application, and the probe.
pub(super) struct Host {
    addr: SocketAddr,
    pub(super) endpoint: Endpoint,
    role: Role,
    /// Probe datagrams and echoes waiting to be sent.
    out: Vec<Datagram>,
    buf: Vec<u8>,
}

impl Host {
    pub(super) fn client(endpoint: Endpoint, flows: usize, probe: Option<Duration>) -> Self {
        Host {
            addr: client_addr(),
            endpoint,
            role: Role::Client(Client {
                flows: vec![SendFlow::default(); flows],
                chunk: Bytes::from(vec![0x5a; MESSAGE_SIZE]),
                probe: probe.map(|interval| Probe {
                    interval,
                    next: Instant::ZERO,
                    sent: Vec::new(),
                    samples: Vec::new(),
                }),
                switches: Vec::new(),
            }),
            out: Vec::new(),
            buf: Vec::with_capacity(2048),
        }
    }

    pub(super) fn server(endpoint: Endpoint) -> Self {
        Host {
            addr: server_addr(),
            endpoint,
            role: Role::Server,
            out: Vec::new(),
            buf: Vec::with_capacity(2048),
        }
    }

    pub(super) fn client_app(&self) -> &Client {
        match &self.role {
            Role::Client(c) => c,
            Role::Server => unreachable!("the client node holds the client"),
        }
    }

    /// Starts, re-prioritizes or stops a flow.
    pub(super) fn apply(
        &mut self,
        now: Instant,
        action: Action,
        cfg: &ScenarioConfig,
    ) -> Result<(), ScenarioError> {
        let Role::Client(client) = &mut self.role else {
            unreachable!("actions go to the client");
        };
        match action {
            Action::Start(i) => {
                let spec = &cfg.flows[i];
                let transport = transport_config(cfg, Some(spec.cc));
                let conn = self.endpoint.connect_with(now, server_addr(), transport)?;
                if let Some(cc) = self.endpoint.congestion_controller(conn) {
                    for (name, value) in &spec.params {
                        cc.set_parameter(name, *value).map_err(|source| {
                            ScenarioError::Parameter {
                                flow: spec.label.clone(),
                                source,
                            }
                        })?;
                    }
                }
                client.flows[i].conn = Some(conn);
                client.fill(&mut self.endpoint, i);
            }
            Action::SetPriority(i, p) => {
                let spec = &cfg.flows[i];
                let Some(conn) = client.flows[i].conn else {
                    return Ok(());
                };
                let srtt = self
                    .endpoint
                    .connection_stats(conn)
                    .map(|s| s.smoothed_rtt)
                    .unwrap_or_default();
                let Some(cc) = self.endpoint.congestion_controller(conn) else {
                    return Ok(());
                };
                let from = cc
                    .parameters()
                    .iter()
                    .find(|(n, _)| *n == "priority")
                    .map(|&(_, v)| v);
                cc.set_parameter("priority", p)
                    .map_err(|source| ScenarioError::Parameter {
                        flow: spec.label.clone(),
                        source,
                    })?;
                client.switches.push(SwitchWatch {
                    flow: i,
                    at: now,
                    from,
                    to: p,
                    srtt,
                    longest: Duration::ZERO,
                });
            }
            Action::Stop(i) => client.flows[i].stopped = true,
        }
        Ok(())
    }

    pub(super) fn snapshot(&self, link: &LinkStats) -> Snapshot {
        let client = self.client_app();
        let mut s = Snapshot {
            queue_drops: link.dropped_queue,
            link_offered: link.offered,
            link_dropped: link.dropped(),
            ..Snapshot::default()
        };
        for f in &client.flows {
            let st = f
                .conn
                .and_then(|c| self.endpoint.connection_stats(c))
                .unwrap_or_default();
            s.acked.push(st.stream_bytes_acked);
            s.sent.push(st.packets_sent);
            s.lost.push(st.packets_lost);
        }
        s
    }

    /// React to the endpoint's events; returns whether there were any.
    fn drive(&mut self) -> bool {
        let mut any = false;
        while let Some(event) = self.endpoint.poll_event() {
            any = true;
            match (&mut self.role, event) {
                (Role::Client(c), Event::Writable(h) | Event::Connected(h)) => {
                    if let Some(i) = c.flows.iter().position(|f| f.conn == Some(h)) {
                        c.fill(&mut self.endpoint, i);
                    }
                }
                (Role::Client(c), Event::Closed(h, reason)) => {
                    if let Some(f) = c.flows.iter_mut().find(|f| f.conn == Some(h)) {
                        f.error
                            .get_or_insert_with(|| format!("connection closed: {reason}"));
                    }
                }
                (Role::Server, Event::Readable(h) | Event::Closed(h, _)) => {
                    while let Ok(Some(_)) = self.endpoint.recv_message(h) {}
                }
                _ => {}
            }
        }
        any
    }

    /// Notes which flows sent since the last check, for stall tracking.
    fn track(&mut self, now: Instant) {
        let Role::Client(client) = &mut self.role else {
            return;
        };
        for (i, f) in client.flows.iter_mut().enumerate() {
            let Some(conn) = f.conn else { continue };
            let sent = self
                .endpoint
                .connection_stats(conn)
                .map_or(0, |s| s.packets_sent);
            if sent > f.packets_sent {
                f.packets_sent = sent;
                if let Some(last) = f.last_send {
                    for s in client.switches.iter_mut().filter(|s| s.flow == i) {
                        if now > s.at && last < s.at + STALL_WINDOW {
                            s.longest = s.longest.max(now - last.max(s.at));
                        }
                    }
                }
                f.last_send = Some(now);
            }
        }
    }

    fn on_probe(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        if payload.len() != PROBE_LEN || payload[..4] != PROBE_MAGIC {
            return;
        }
        match &mut self.role {
            Role::Server => self.out.push(Datagram {
                src: dst,
                dst: src,
                payload,
            }),
            Role::Client(c) => {
                let Some(p) = c.probe.as_mut() else { return };
                let seq = u64::from_le_bytes(payload[4..12].try_into().expect("8 bytes"));
                if let Some(&sent) = usize::try_from(seq).ok().and_then(|s| p.sent.get(s)) {
                    p.samples.push((sent, now - sent));
                }
            }
        }
    }

    fn send_probe(&mut self, now: Instant) {
        let Role::Client(c) = &mut self.role else {
            return;
        };
        let Some(p) = c.probe.as_mut() else { return };
        while p.next <= now {
            let mut payload = vec![0u8; PROBE_LEN];
            payload[..4].copy_from_slice(&PROBE_MAGIC);
            payload[4..12].copy_from_slice(&(p.sent.len() as u64).to_le_bytes());
            p.sent.push(now);
            self.out.push(Datagram {
                src: SocketAddr::new(self.addr.ip(), PROBE_PORT),
                dst: SocketAddr::new(server_addr().ip(), PROBE_PORT),
                payload: Bytes::from(payload),
            });
            p.next += p.interval;
        }
    }
}

impl Client {
    /// Queue messages until the send buffer is full (or the flow stopped).
    fn fill(&mut self, endpoint: &mut Endpoint, i: usize) {
        let f = &mut self.flows[i];
        let Some(conn) = f.conn else { return };
        if f.stopped || f.error.is_some() {
            return;
        }
        loop {
            match endpoint.send_message(conn, self.chunk.clone()) {
                Ok(()) => {}
                // `Writable` follows once there is room again.
                Err(SendError::Blocked(_)) => return,
                Err(e) => {
                    f.error = Some(format!("send failed: {e}"));
                    return;
                }
            }
        }
    }
}

impl Node for Host {
    fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, payload: Bytes) {
        if dst.port() == PROBE_PORT {
            self.on_probe(now, src, dst, payload);
            return;
        }
        self.endpoint.handle_datagram(now, src, payload);
        self.drive();
        self.track(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Datagram> {
        if !self.out.is_empty() {
            return Some(self.out.remove(0));
        }
        loop {
            if let Some(t) = self.endpoint.poll_transmit(now, 1, &mut self.buf) {
                let payload = Bytes::copy_from_slice(&self.buf[..t.size]);
                return Some(Datagram {
                    src: self.addr,
                    dst: t.destination,
                    payload,
                });
            }
            if !self.drive() {
                self.track(now);
                return None;
            }
        }
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        let probe = match &self.role {
            Role::Client(c) => c.probe.as_ref().map(|p| p.next),
            Role::Server => None,
        };
        match (self.endpoint.poll_timeout(), probe) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.send_probe(now);
        self.endpoint.handle_timeout(now);
        self.drive();
        self.track(now);
    }
}
