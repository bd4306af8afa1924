//! What runs in the two emulated hosts of an `adapt` experiment: a server
//! node on host `b` answering requests and absorbing bulk data, and a
//! client node on host `a` running the rule set under test with a
//! scenario's workload. Both hosts are threads of this process (each in
//! its namespace, each with its own tokio runtime), so they share the
//! clock: the server logs when each bulk message arrived, and only the
//! bytes that arrived inside the client's measured window count
//! ([`bytes_in_window`]).
//!
//! The measured window. Every workload first runs `warmup` unmeasured
//! (connection set-up, slow start, the rules' first windows filling), then
//! `duration` measured. Bulk throughput is what crossed the link in the
//! measured window, not what the client handed its node: a Braid channel
//! queues up to `channel_queue` messages in the node and its connection
//! buffers more, so counting sent bytes, or received bytes until the
//! client's node has drained its queues on close, overstates the rate.
//! (The old count, every bulk byte the server received until the client's
//! node had closed over the workload's duration, put `bulk_mbps` above the
//! link rate: the drain of up to `connect_timeout` was counted over a
//! window that did not include it.)
//!
//! Wire format of the raw messages (no serde: the sizes are the workload):
//! `[kind u8][id u64 LE][response size u32 LE][padding]`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use braid::emu::Testbed;
use braid::node::{AppliedAction, BasicAddress, BasicHeader, Message, Node, NodeAuth, NodeConfig, RulesConfig, Transport};
use bytes::{BufMut, Bytes, BytesMut};

use crate::template::{ResultExt, TemplateError};

const REQUEST: u8 = 1;
const RESPONSE: u8 = 2;
const BULK: u8 = 3;
const HEADER: usize = 13;

/// The transports both nodes run (the rules choose among the first three;
/// DATA is a header transport the node vocabulary does not offer).
pub const TRANSPORTS: [Transport; 3] = [Transport::Tcp, Transport::Braid, Transport::Exon];

fn frame(kind: u8, id: u64, response: u32, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(HEADER));
    b.put_u8(kind);
    b.put_u64_le(id);
    b.put_u32_le(response);
    b.resize(size.max(HEADER), 0x5a);
    b.freeze()
}

fn parse(b: &[u8]) -> Option<(u8, u64, u32)> {
    if b.len() < HEADER {
        return None;
    }
    let id = u64::from_le_bytes(b[1..9].try_into().ok()?);
    let resp = u32::from_le_bytes(b[9..13].try_into().ok()?);
    Some((b[0], id, resp))
}

fn runtime() -> Result<tokio::runtime::Runtime, TemplateError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TemplateError::io("starting a runtime in a host", e))
}

fn config() -> NodeConfig {
    // Bare protocols: the experiments compare transports and their
    // adaptation, and handshakes of fresh identities would only add a
    // constant to every run.
    NodeConfig { transports: TRANSPORTS.to_vec(), security: NodeAuth::insecure(), ..Default::default() }
}

/// Set by the client, read by the server; and the server's bulk log.
struct Shared {
    stop: AtomicBool,
    /// When each bulk message was received by the server and its bytes,
    /// on the clock both hosts share (at most a few thousand messages per
    /// second for at most 10 minutes).
    bulk: Mutex<Vec<(Instant, u64)>>,
}

/// Bytes of the `arrivals` at or after `from` and before `from + len`:
/// what crossed the link in that window, to one message at each edge (a
/// message counts when its last byte arrived).
pub fn bytes_in_window(arrivals: &[(Instant, u64)], from: Instant, len: Duration) -> u64 {
    let to = from + len;
    arrivals.iter().filter(|(t, _)| *t >= from && *t < to).map(|(_, b)| *b).sum()
}

/// Throughput in Mbit/s of the `arrivals` per `bin` of the window
/// `[from, from + len)`, as `(bin start since from, Mbit/s)`; a last partial
/// bin is scaled by its length.
pub fn throughput_bins(arrivals: &[(Instant, u64)], from: Instant, len: Duration, bin: Duration) -> Vec<(Duration, f64)> {
    if bin.is_zero() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = Duration::ZERO;
    while at < len {
        let width = bin.min(len - at);
        let bytes = bytes_in_window(arrivals, from + at, width);
        out.push((at, bytes as f64 * 8.0 / width.as_secs_f64() / 1e6));
        at += bin;
    }
    out
}

/// The server's thread handle.
type Server = std::thread::JoinHandle<Result<(), TemplateError>>;

fn spawn_server(tb: &Testbed, addr: SocketAddr, shared: Arc<Shared>, limit: Duration) -> Result<(Server, SocketAddr), TemplateError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let handle = tb
        .in_host("b", move || -> Result<(), TemplateError> {
            let rt = runtime()?;
            rt.block_on(async move {
                let node: Node<BasicHeader> = Node::bind(addr, config()).await.context("binding the server node")?;
                let _ = tx.send(node.local_addr());
                let deadline = tokio::time::Instant::now() + limit;
                while !shared.stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < deadline {
                    let m = match tokio::time::timeout(Duration::from_millis(50), node.recv()).await {
                        Ok(Some(m)) => m,
                        Ok(None) => break,
                        Err(_) => continue,
                    };
                    let Some(b) = m.raw_bytes() else { continue };
                    match parse(b) {
                        Some((REQUEST, id, resp)) => {
                            // Answer over the transport the request came on
                            // (the client's rules chose it).
                            let h = m.header().reply(m.header().proto);
                            let _ = node.send(Message::raw(h, frame(RESPONSE, id, 0, resp as usize))).await;
                        }
                        Some((BULK, _, _)) => {
                            let now = Instant::now();
                            if let Ok(mut log) = shared.bulk.lock() {
                                log.push((now, b.len() as u64));
                            }
                        }
                        _ => {}
                    }
                }
                node.close().await;
                Ok(())
            })
        })
        .context("starting the server host")?;
    let got = rx.recv_timeout(Duration::from_secs(10)).context("the server node did not start")?;
    Ok((handle, got))
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    /// When it was sent, since the workload started.
    pub at: Duration,
    /// Its round trip.
    pub latency: Duration,
    /// The transport the response came back on.
    pub transport: Transport,
}

/// What the client host reports.
#[derive(Debug, Clone, Default)]
pub struct ClientRun {
    /// Requests answered inside the measured window, in order of answer.
    pub exchanges: Vec<Exchange>,
    /// Requests given up after the request timeout inside the window.
    pub expired: u64,
    /// How long the measured window lasted (`duration`, and for the
    /// priority scenario the last exchange's wait).
    pub elapsed: Duration,
    /// What the rules applied.
    pub applied: Vec<AppliedAction>,
    /// The rule runtime's counters (evaluations, applied, rejected, failed).
    pub evaluations: u64,
    /// Actions the engine rejected or an actuator refused.
    pub refused: u64,
    /// Bulk bytes the server received inside the measured window
    /// (priority scenario).
    pub bulk_bytes: u64,
    /// Bulk throughput per 250 ms of the measured window, as (time since
    /// the workload started, Mbit/s).
    pub bulk_series: Vec<(Duration, f64)>,
    /// Seconds interactive traffic was on (priority scenario).
    pub interactive_secs: f64,
}

/// The workload of the client.
#[derive(Debug, Clone)]
pub enum Workload {
    /// A closed loop of `window` outstanding request/response exchanges
    /// over the transport the rules pick (Braid until they pick).
    Transport {
        /// Outstanding requests.
        window: u32,
        /// Request bytes.
        request: usize,
        /// Response bytes.
        response: u32,
    },
    /// A background bulk transfer over Braid plus interactive requests
    /// over TCP in on/off phases (on first, `on` then `off`, repeated).
    Priority {
        /// Bulk message bytes.
        bulk_message: usize,
        /// Bulk messages the client keeps queued or in flight (not yet
        /// acknowledged by the server's Braid): enough to fill the link,
        /// few enough that the node's close drains them quickly.
        bulk_in_flight: usize,
        /// Interactive phase length.
        on: Duration,
        /// Idle phase length.
        off: Duration,
        /// Gap between interactive requests while on.
        gap: Duration,
        /// Request bytes.
        request: usize,
        /// Response bytes.
        response: u32,
    },
}

/// Everything the client needs.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The rule set's text (empty: no rules).
    pub rules: String,
    /// The rule runtime's configuration.
    pub rules_config: RulesConfig,
    /// How long the workload runs unmeasured first.
    pub warmup: Duration,
    /// How long the workload runs measured, after the warm-up.
    pub duration: Duration,
    /// A request unanswered for this long is given up (and replaced).
    pub request_timeout: Duration,
    /// The workload.
    pub workload: Workload,
}

/// Runs one experiment on the testbed: server on `b`, client on `a`.
pub fn run(tb: &Testbed, s: &ClientSettings) -> Result<ClientRun, TemplateError> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { stop: AtomicBool::new(false), bulk: Mutex::new(Vec::new()) });
    let limit = s.warmup + s.duration + s.request_timeout + Duration::from_secs(30);
    let (server, b_addr) = spawn_server(tb, SocketAddr::new(p.b_addr.into(), 0), shared.clone(), limit)?;
    let s2 = s.clone();
    let client = tb
        .in_host("a", move || -> Result<(ClientRun, Instant), TemplateError> {
            let rt = runtime()?;
            rt.block_on(async move {
                let node: Node<BasicHeader> = Node::bind(SocketAddr::new(p.a_addr.into(), 0), config()).await.context("binding the client node")?;
                if !s2.rules.trim().is_empty() {
                    node.set_rules_source(&s2.rules, s2.rules_config).map_err(|e| TemplateError::Invalid(format!("rules: {e}")))?;
                }
                let started = Instant::now();
                let mut run = match &s2.workload {
                    Workload::Transport { window, request, response } => {
                        closed_loop(&node, b_addr, &s2, started, *window, *request, *response).await?
                    }
                    Workload::Priority { bulk_message, bulk_in_flight, on, off, gap, request, response } => {
                        let bulk = (*bulk_message, *bulk_in_flight);
                        on_off(&node, b_addr, &s2, started, bulk, (*on, *off, *gap), *request, *response).await?
                    }
                };
                // The server runs until this node has closed: a peer gone
                // first leaves this node's TCP channel waiting out its
                // close-acknowledgement timeout (5 s per experiment). The
                // bulk sender bounds what it queues, so the close's drain
                // is short, and nothing after the window counts.
                run.applied = node.rule_log();
                let st = node.rule_stats();
                run.evaluations = st.evaluations;
                run.refused = st.rejected + st.failed;
                node.close().await;
                Ok((run, started))
            })
        })
        .context("starting the client host")?;
    let res = client.join().map_err(|_| TemplateError::Failed("the client host panicked".into()));
    shared.stop.store(true, Ordering::Release);
    let (mut run, started) = res??;
    server.join().map_err(|_| TemplateError::Failed("the server host panicked".into()))??;
    let log = shared.bulk.lock().map(|l| l.clone()).unwrap_or_default();
    let from = started + s.warmup;
    run.bulk_bytes = bytes_in_window(&log, from, run.elapsed);
    run.bulk_series = throughput_bins(&log, from, run.elapsed, Duration::from_millis(250)).into_iter().map(|(t, v)| (t + s.warmup, v)).collect();
    Ok(run)
}

/// The closed loop from `start`: exchanges answered, and requests given
/// up, after the warm-up count; the loop runs on through it unchanged, so
/// the measured window starts with the window of requests in flight.
async fn closed_loop(
    node: &Node<BasicHeader>,
    dst: SocketAddr,
    s: &ClientSettings,
    start: Instant,
    window: u32,
    request: usize,
    response: u32,
) -> Result<ClientRun, TemplateError> {
    let h = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(dst), Transport::Braid);
    let measured = start + s.warmup;
    let end = measured + s.duration;
    let mut outstanding: HashMap<u64, Instant> = HashMap::new();
    let mut next = 0u64;
    let mut run = ClientRun::default();
    let send = |id: u64| node.send(Message::raw(h.clone(), frame(REQUEST, id, response, request)));
    while (outstanding.len() as u32) < window {
        send(next).await.context("sending a request")?;
        outstanding.insert(next, Instant::now());
        next += 1;
    }
    while Instant::now() < end {
        let wait = end.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
        if let Ok(Some(m)) = tokio::time::timeout(wait, node.recv()).await {
            if let Some((RESPONSE, id, _)) = m.raw_bytes().and_then(|b| parse(b)) {
                if let Some(sent) = outstanding.remove(&id) {
                    if Instant::now() >= measured {
                        run.exchanges.push(Exchange { at: sent.duration_since(start), latency: sent.elapsed(), transport: m.header().proto });
                    }
                }
            }
        }
        let now = Instant::now();
        let before = outstanding.len();
        outstanding.retain(|_, t| now.duration_since(*t) < s.request_timeout);
        if now >= measured {
            run.expired += (before - outstanding.len()) as u64;
        }
        while (outstanding.len() as u32) < window && Instant::now() < end {
            send(next).await.context("sending a request")?;
            outstanding.insert(next, Instant::now());
            next += 1;
        }
    }
    run.elapsed = measured.elapsed();
    Ok(run)
}

/// Bulk from `start`; the on/off interactive phases start after the
/// warm-up (bulk alone until then), so every run measures the same phases.
#[allow(clippy::too_many_arguments)]
async fn on_off(
    node: &Node<BasicHeader>,
    dst: SocketAddr,
    s: &ClientSettings,
    origin: Instant,
    (bulk_message, bulk_in_flight): (usize, usize),
    (on, off, gap): (Duration, Duration, Duration),
    request: usize,
    response: u32,
) -> Result<ClientRun, TemplateError> {
    let me = BasicAddress::new(node.local_addr());
    let bulk_h = BasicHeader::new(me, BasicAddress::new(dst), Transport::Braid);
    let ping_h = BasicHeader::new(me, BasicAddress::new(dst), Transport::Tcp);
    let stop = Arc::new(AtomicBool::new(false));
    let bulk = {
        let node = node.clone();
        let stop = stop.clone();
        let chunk = frame(BULK, 0, 0, bulk_message);
        tokio::spawn(async move {
            let mut pending: std::collections::VecDeque<braid::node::Notify> = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                if pending.len() >= bulk_in_flight.max(1) {
                    if let Some(mut oldest) = pending.pop_front() {
                        if let braid::node::DeliveryStatus::Failed(_) = oldest.outcome().await {
                            break;
                        }
                    }
                }
                match node.send_notify(Message::raw(bulk_h.clone(), chunk.clone())).await {
                    Ok(n) => pending.push_back(n),
                    Err(_) => break,
                }
            }
        })
    };
    let start = origin + s.warmup;
    tokio::time::sleep_until(start.into()).await;
    let end = start + s.duration;
    let period = on + off;
    let mut run = ClientRun::default();
    let mut id = 0u64;
    while Instant::now() < end {
        let t = start.elapsed();
        let in_period = Duration::from_nanos((t.as_nanos() % period.as_nanos().max(1)) as u64);
        if in_period >= on {
            // Idle phase: wait for the next interactive phase.
            let rest = (period - in_period).min(end.saturating_duration_since(Instant::now()));
            tokio::time::sleep(rest).await;
            continue;
        }
        id += 1;
        let sent = Instant::now();
        node.send(Message::raw(ping_h.clone(), frame(REQUEST, id, response, request))).await.context("sending an interactive request")?;
        let until = sent + s.request_timeout;
        let got = loop {
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, node.recv()).await {
                Ok(Some(m)) => {
                    if let Some((RESPONSE, n, _)) = m.raw_bytes().and_then(|b| parse(b)) {
                        if n == id {
                            break true;
                        }
                    }
                }
                _ => break false,
            }
        };
        if got {
            run.exchanges.push(Exchange { at: sent.duration_since(origin), latency: sent.elapsed(), transport: Transport::Tcp });
        } else {
            run.expired += 1;
        }
        tokio::time::sleep(gap).await;
    }
    stop.store(true, Ordering::Relaxed);
    bulk.abort();
    run.elapsed = start.elapsed();
    let full = (s.duration.as_nanos() / period.as_nanos().max(1)) as u32;
    let rest = s.duration.saturating_sub(period * full);
    run.interactive_secs = (on * full + rest.min(on)).as_secs_f64();
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_short_ones_are_ignored() {
        let f = frame(REQUEST, 42, 4096, 100);
        assert_eq!(f.len(), 100);
        assert_eq!(parse(&f), Some((REQUEST, 42, 4096)));
        assert_eq!(frame(BULK, 1, 0, 3).len(), HEADER, "never shorter than the header");
        assert_eq!(parse(&f[..12]), None);
    }

    /// Only what arrived inside the measured window counts: not the
    /// warm-up's bytes, and not what the client's node drained after the
    /// window (the old count took every byte until the client had closed,
    /// over the window's length, and exceeded the link rate).
    #[test]
    fn bulk_bytes_count_only_inside_the_measured_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // 10 kB every 10 ms for 3 s: 8 Mbit/s; the window is [1 s, 2 s).
        let arrivals: Vec<(Instant, u64)> = (0..300).map(|i| (t0 + ms(10 * i), 10_000)).collect();
        let from = t0 + ms(1000);
        assert_eq!(bytes_in_window(&arrivals, from, ms(1000)), 100 * 10_000);
        assert_eq!(bytes_in_window(&arrivals, from, Duration::ZERO), 0);
        assert_eq!(bytes_in_window(&arrivals, t0 + ms(5000), ms(1000)), 0, "after the log");
        let bins = throughput_bins(&arrivals, from, ms(1000), ms(250));
        assert_eq!(bins.len(), 4);
        for (i, (at, mbps)) in bins.iter().enumerate() {
            assert_eq!(*at, ms(250 * i as u64));
            assert!((mbps - 8.0).abs() < 1e-9, "bin {i}: {mbps}");
        }
        // A partial last bin is scaled by its width.
        let bins = throughput_bins(&arrivals, from, ms(1100), ms(250));
        assert_eq!(bins.len(), 5);
        assert!((bins[4].1 - 8.0).abs() < 1e-9, "{bins:?}");
        assert!(throughput_bins(&arrivals, from, ms(1000), Duration::ZERO).is_empty());
    }
}
