//! What runs in the two emulated hosts of an `adapt` experiment: a server
//! node on host `b` answering requests and absorbing bulk data, and a
//! client node on host `a` running the rule set under test with a
//! scenario's workload. Both hosts are threads of this process (each in
//! its namespace, each with its own tokio runtime), so they share the
//! clock and the server reports bulk bytes through an atomic.
//!
//! Wire format of the raw messages (no serde: the sizes are the workload):
//! `[kind u8][id u64 LE][response size u32 LE][padding]`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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

/// Set by the client, read by the server.
struct Shared {
    stop: AtomicBool,
    bulk_bytes: AtomicU64,
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
                            shared.bulk_bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
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
    /// Answered requests, in order of answer.
    pub exchanges: Vec<Exchange>,
    /// Requests given up after the request timeout.
    pub expired: u64,
    /// How long the workload ran.
    pub elapsed: Duration,
    /// What the rules applied.
    pub applied: Vec<AppliedAction>,
    /// The rule runtime's counters (evaluations, applied, rejected, failed).
    pub evaluations: u64,
    /// Actions the engine rejected or an actuator refused.
    pub refused: u64,
    /// Bulk bytes the server received (priority scenario).
    pub bulk_bytes: u64,
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
    /// How long the workload runs.
    pub duration: Duration,
    /// A request unanswered for this long is given up (and replaced).
    pub request_timeout: Duration,
    /// The workload.
    pub workload: Workload,
}

/// Runs one experiment on the testbed: server on `b`, client on `a`.
pub fn run(tb: &Testbed, s: &ClientSettings) -> Result<ClientRun, TemplateError> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { stop: AtomicBool::new(false), bulk_bytes: AtomicU64::new(0) });
    let limit = s.duration + s.request_timeout + Duration::from_secs(30);
    let (server, b_addr) = spawn_server(tb, SocketAddr::new(p.b_addr.into(), 0), shared.clone(), limit)?;
    let s2 = s.clone();
    let client = tb
        .in_host("a", move || -> Result<ClientRun, TemplateError> {
            let rt = runtime()?;
            rt.block_on(async move {
                let node: Node<BasicHeader> = Node::bind(SocketAddr::new(p.a_addr.into(), 0), config()).await.context("binding the client node")?;
                if !s2.rules.trim().is_empty() {
                    node.set_rules_source(&s2.rules, s2.rules_config).map_err(|e| TemplateError::Invalid(format!("rules: {e}")))?;
                }
                let mut run = match &s2.workload {
                    Workload::Transport { window, request, response } => {
                        closed_loop(&node, b_addr, &s2, *window, *request, *response).await?
                    }
                    Workload::Priority { bulk_message, on, off, gap, request, response } => {
                        on_off(&node, b_addr, &s2, *bulk_message, (*on, *off, *gap), *request, *response).await?
                    }
                };
                run.applied = node.rule_log();
                let st = node.rule_stats();
                run.evaluations = st.evaluations;
                run.refused = st.rejected + st.failed;
                node.close().await;
                Ok(run)
            })
        })
        .context("starting the client host")?;
    let res = client.join().map_err(|_| TemplateError::Failed("the client host panicked".into()));
    shared.stop.store(true, Ordering::Release);
    let mut run = res??;
    server.join().map_err(|_| TemplateError::Failed("the server host panicked".into()))??;
    run.bulk_bytes = shared.bulk_bytes.load(Ordering::Relaxed);
    Ok(run)
}

async fn closed_loop(
    node: &Node<BasicHeader>,
    dst: SocketAddr,
    s: &ClientSettings,
    window: u32,
    request: usize,
    response: u32,
) -> Result<ClientRun, TemplateError> {
    let h = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(dst), Transport::Braid);
    let start = Instant::now();
    let end = start + s.duration;
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
                    run.exchanges.push(Exchange { at: sent.duration_since(start), latency: sent.elapsed(), transport: m.header().proto });
                }
            }
        }
        let now = Instant::now();
        let before = outstanding.len();
        outstanding.retain(|_, t| now.duration_since(*t) < s.request_timeout);
        run.expired += (before - outstanding.len()) as u64;
        while (outstanding.len() as u32) < window && Instant::now() < end {
            send(next).await.context("sending a request")?;
            outstanding.insert(next, Instant::now());
            next += 1;
        }
    }
    run.elapsed = start.elapsed();
    Ok(run)
}

async fn on_off(
    node: &Node<BasicHeader>,
    dst: SocketAddr,
    s: &ClientSettings,
    bulk_message: usize,
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
            while !stop.load(Ordering::Relaxed) {
                if node.send(Message::raw(bulk_h.clone(), chunk.clone())).await.is_err() {
                    break;
                }
            }
        })
    };
    let start = Instant::now();
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
            run.exchanges.push(Exchange { at: sent.duration_since(start), latency: sent.elapsed(), transport: Transport::Tcp });
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
}
