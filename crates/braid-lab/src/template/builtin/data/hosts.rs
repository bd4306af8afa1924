//! What runs inside the emulated hosts: a receiving node on host `b`, a
//! sending node (plain, or wrapped in the DATA interceptor) on host `a`,
//! and the ping-pong of control messages of the paper's Fig. 8.
//!
//! Both hosts are threads of this process (each in its namespace, each
//! with its own tokio runtime), so they share `std::time::Instant`: a
//! transfer is timed from the sender's first message to the receiver's
//! last byte, on one clock.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid::emu::Testbed;
use braid::node::data::{DataConfig, DataInterceptor, DataStats};
use braid::node::{BasicAddress, BasicHeader, Message, MessageType, Node, NodeAuth, NodeConfig, Transport};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::template::{ResultExt, TemplateError};

/// A control message: sequence number.
#[derive(Serialize, Deserialize)]
struct Ping(u64);
impl MessageType for Ping {
    const NAME: &'static str = "bench.data.Ping";
}

/// The answer to a [`Ping`].
#[derive(Serialize, Deserialize)]
struct Pong(u64);
impl MessageType for Pong {
    const NAME: &'static str = "bench.data.Pong";
}

/// How the bulk data travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataVia {
    /// No bulk transfer (control messages alone: the baseline).
    None,
    /// Every data message over TCP.
    Tcp,
    /// Every data message over Braid.
    Braid,
    /// The DATA interceptor with its learner.
    Data,
}

impl DataVia {
    /// The three ways of carrying bulk data, in the order they run.
    pub const BULK: [DataVia; 3] = [DataVia::Tcp, DataVia::Braid, DataVia::Data];
    /// The control runs: no bulk (the floor), then the three.
    pub const CONTROL: [DataVia; 4] = [DataVia::None, DataVia::Tcp, DataVia::Braid, DataVia::Data];

    /// `none`, `tcp`, `braid` or `data`: the suffix of metric names and
    /// the report's keys.
    pub fn name(self) -> &'static str {
        match self {
            DataVia::None => "none",
            DataVia::Tcp => "tcp",
            DataVia::Braid => "braid",
            DataVia::Data => "data",
        }
    }
}

/// Settings shared by every run.
#[derive(Clone)]
pub struct RunSettings {
    /// Both nodes' configuration (their security apart).
    pub node: NodeConfig,
    /// The receiving node's identity and trust.
    pub receiver_auth: NodeAuth,
    /// The sending node's identity and trust.
    pub sender_auth: NodeAuth,
    /// The sending node's DATA interceptor.
    pub data: DataConfig,
    /// Bytes per bulk message.
    pub message_size: usize,
    /// Longest a transfer may take.
    pub limit: Duration,
}

impl RunSettings {
    /// The sending node's configuration.
    fn sender_config(&self) -> NodeConfig {
        NodeConfig { security: self.sender_auth.clone(), ..self.node.clone() }
    }
}

/// A bulk transfer's result.
#[derive(Debug, Clone)]
pub struct BulkResult {
    /// Bulk bytes the sender handed over.
    pub bytes_sent: u64,
    /// Bulk bytes the receiver got.
    pub bytes_received: u64,
    /// Bulk messages the receiver got.
    pub messages_received: u64,
    /// From the first message sent to the last byte received.
    pub secs: f64,
    /// When the first message was sent.
    pub started: Instant,
    /// Every byte arrived.
    pub complete: bool,
    /// The DATA interceptor's statistics of the stream, if it had one.
    pub data: Option<DataStats>,
}

/// One answered control message.
#[derive(Debug, Clone, Copy)]
pub struct ControlSample {
    /// When the ping was sent.
    pub sent_at: Instant,
    /// Its round trip.
    pub rtt: Duration,
}

/// A ping-pong run's result.
#[derive(Debug, Clone)]
pub struct ControlResult {
    /// Round trips of the control messages after the warm-up, in the
    /// order measured.
    pub samples: Vec<ControlSample>,
    /// Bulk bytes the receiver got meanwhile.
    pub bulk_bytes: u64,
    /// The DATA interceptor's statistics of the bulk stream, if it had one.
    pub data: Option<DataStats>,
}

impl ControlResult {
    /// The round trips alone.
    pub fn rtts(&self) -> Vec<Duration> {
        self.samples.iter().map(|s| s.rtt).collect()
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, TemplateError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TemplateError::io("starting a runtime in a host", e))
}

fn panicked(who: &str) -> TemplateError {
    TemplateError::Failed(format!("{who} panicked"))
}

/// What the receiver was told and what it reports.
struct Shared {
    /// Bulk bytes received so far (progress).
    received: AtomicU64,
    /// The receiver has everything (or was told to stop).
    done: AtomicBool,
    /// Stop now (control runs, time limits).
    stop: AtomicBool,
}

fn body(h: &BasicHeader, chunk: &Bytes) -> Message<BasicHeader> {
    Message::raw(h.clone(), chunk.clone())
}

/// The receiving host's thread: (bulk bytes, bulk messages, time of the
/// last byte).
type Receiver = std::thread::JoinHandle<Result<(u64, u64, Instant), TemplateError>>;

/// The receiving host: counts bulk bytes, answers pings over TCP.
/// Returns (bytes, messages, time of the last byte).
fn spawn_receiver(
    tb: &Testbed,
    addr: SocketAddr,
    settings: &RunSettings,
    expect: Option<u64>,
    shared: Arc<Shared>,
) -> Result<(Receiver, SocketAddr), TemplateError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let cfg = NodeConfig { security: settings.receiver_auth.clone(), ..settings.node.clone() };
    let limit = settings.limit;
    let handle = tb.in_host("b", move || -> Result<(u64, u64, Instant), TemplateError> {
        let rt = runtime()?;
        rt.block_on(async move {
            let node: Node<BasicHeader> = Node::bind(addr, cfg).await.context("binding the receiving node")?;
            let _ = tx.send(node.local_addr());
            let deadline = tokio::time::Instant::now() + limit;
            let (mut bytes, mut messages, mut last) = (0u64, 0u64, Instant::now());
            loop {
                if shared.stop.load(Ordering::Relaxed) || tokio::time::Instant::now() >= deadline {
                    break;
                }
                let m = match tokio::time::timeout(Duration::from_millis(100), node.recv()).await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(_) => continue,
                };
                if let Some(b) = m.raw_bytes() {
                    bytes += b.len() as u64;
                    messages += 1;
                    last = Instant::now();
                    shared.received.store(bytes, Ordering::Relaxed);
                    if expect.is_some_and(|e| bytes >= e) {
                        break;
                    }
                } else if let Ok((h, Ping(n))) = m.decode::<Ping>() {
                    // Answer over TCP, the control transport.
                    let _ = node.send(Message::typed(h.reply(Transport::Tcp), Pong(n))).await;
                }
            }
            shared.done.store(true, Ordering::Release);
            // Keep the node up until the sender is finished with it.
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            while !shared.stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            node.close().await;
            Ok((bytes, messages, last))
        })
    })
    .context("starting the receiving host")?;
    let got = rx.recv_timeout(Duration::from_secs(10)).context("the receiving node did not start")?;
    Ok((handle, got))
}

/// Send `bytes` of bulk data from host `a` to host `b` over `via` (not
/// `None`), timed from the first message to the last byte received.
pub fn bulk(
    tb: &Testbed,
    via: DataVia,
    bytes: u64,
    settings: &RunSettings,
    progress: &mut dyn FnMut(u64),
) -> Result<BulkResult, TemplateError> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { received: AtomicU64::new(0), done: AtomicBool::new(false), stop: AtomicBool::new(false) });
    let (receiver, b_addr) = spawn_receiver(tb, SocketAddr::new(p.b_addr.into(), 0), settings, Some(bytes), shared.clone())?;
    let s = settings.clone();
    let sh = shared.clone();
    let sender = tb.in_host("a", move || -> Result<(Instant, u64, Option<DataStats>), TemplateError> {
        let rt = runtime()?;
        rt.block_on(async move {
            let node: Node<BasicHeader> =
                Node::bind(SocketAddr::new(p.a_addr.into(), 0), s.sender_config()).await.context("binding the sending node")?;
            let data = DataInterceptor::new(node.clone(), s.data.clone()).context("the DATA interceptor's configuration")?;
            let transport = match via {
                DataVia::Tcp => Transport::Tcp,
                DataVia::Braid => Transport::Braid,
                DataVia::Data | DataVia::None => Transport::Data,
            };
            let h = BasicHeader::new(BasicAddress::new(node.local_addr()), BasicAddress::new(b_addr), transport);
            let chunk = Bytes::from(vec![0x5a; s.message_size]);
            let start = Instant::now();
            let deadline = tokio::time::Instant::now() + s.limit;
            let mut sent = 0u64;
            while sent < bytes && tokio::time::Instant::now() < deadline && !sh.stop.load(Ordering::Relaxed) {
                let n = (bytes - sent).min(s.message_size as u64) as usize;
                let m = if n == s.message_size { body(&h, &chunk) } else { Message::raw(h.clone(), chunk.slice(..n)) };
                data.send(m).await.context("sending bulk data")?;
                sent += n as u64;
            }
            data.flush().await;
            while !sh.done.load(Ordering::Acquire) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let stats = data.stats(b_addr);
            sh.stop.store(true, Ordering::Release);
            node.close().await;
            Ok((start, sent, stats))
        })
    })
    .context("starting the sending host")?;
    // Progress until the receiver is done.
    while !shared.done.load(Ordering::Acquire) && !sender.is_finished() {
        progress(shared.received.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = sender.join().map_err(|_| panicked("the sending host"));
    shared.stop.store(true, Ordering::Release);
    let (start, bytes_sent, data) = sent??;
    let (received, messages, last) = receiver.join().map_err(|_| panicked("the receiving host"))??;
    progress(received);
    Ok(BulkResult {
        bytes_sent,
        bytes_received: received,
        messages_received: messages,
        secs: last.saturating_duration_since(start).as_secs_f64().max(1e-9),
        started: start,
        complete: received == bytes,
        data,
    })
}

/// Fig. 8: ping-pong of small control messages over TCP for `duration`
/// (the first `warmup` not counted) while bulk data flows over `via`.
pub fn control(
    tb: &Testbed,
    via: DataVia,
    duration: Duration,
    warmup: Duration,
    settings: &RunSettings,
) -> Result<ControlResult, TemplateError> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { received: AtomicU64::new(0), done: AtomicBool::new(false), stop: AtomicBool::new(false) });
    let mut s = settings.clone();
    s.limit = duration + Duration::from_secs(30);
    let (receiver, b_addr) = spawn_receiver(tb, SocketAddr::new(p.b_addr.into(), 0), &s, None, shared.clone())?;
    let sh = shared.clone();
    let sender = tb.in_host("a", move || -> Result<(Vec<ControlSample>, Option<DataStats>), TemplateError> {
        let rt = runtime()?;
        rt.block_on(async move {
            let node: Node<BasicHeader> =
                Node::bind(SocketAddr::new(p.a_addr.into(), 0), s.sender_config()).await.context("binding the sending node")?;
            let data = Arc::new(DataInterceptor::new(node.clone(), s.data.clone()).context("the DATA interceptor's configuration")?);
            let me = BasicAddress::new(node.local_addr());
            let dst = BasicAddress::new(b_addr);
            let bulk = (via != DataVia::None).then(|| {
                let transport = match via {
                    DataVia::Tcp => Transport::Tcp,
                    DataVia::Braid => Transport::Braid,
                    _ => Transport::Data,
                };
                let h = BasicHeader::new(me, dst, transport);
                let chunk = Bytes::from(vec![0x5a; s.message_size]);
                let data = data.clone();
                let sh = sh.clone();
                tokio::spawn(async move {
                    while !sh.stop.load(Ordering::Relaxed) {
                        if data.send(body(&h, &chunk)).await.is_err() {
                            break;
                        }
                    }
                })
            });
            let start = Instant::now();
            let end = tokio::time::Instant::now() + duration;
            let mut rtts = Vec::new();
            let ping_h = BasicHeader::new(me, dst, Transport::Tcp);
            let mut seq = 0u64;
            while tokio::time::Instant::now() < end {
                seq += 1;
                let sent_at = Instant::now();
                node.send(Message::typed(ping_h.clone(), Ping(seq))).await.context("sending a ping")?;
                // Wait for this ping's pong (a late pong of an earlier
                // ping is skipped), at most until the end of the run
                // plus a grace period.
                let wait_until = end + Duration::from_secs(20);
                let got = loop {
                    match tokio::time::timeout_at(wait_until, node.recv()).await {
                        Ok(Some(m)) => {
                            if let Ok((_, Pong(n))) = m.decode::<Pong>() {
                                if n == seq {
                                    break true;
                                }
                            }
                        }
                        _ => break false,
                    }
                };
                if !got {
                    break;
                }
                if sent_at.duration_since(start) >= warmup {
                    rtts.push(ControlSample { sent_at, rtt: sent_at.elapsed() });
                }
                // Control messages are sparse: one every 10 ms at most.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            sh.stop.store(true, Ordering::Release);
            if let Some(b) = bulk {
                b.abort();
            }
            let stats = data.stats(b_addr);
            node.close().await;
            Ok((rtts, stats))
        })
    })
    .context("starting the sending host")?;
    let sent = sender.join().map_err(|_| panicked("the sending host"));
    shared.stop.store(true, Ordering::Release);
    let (samples, data) = sent??;
    let (bulk_bytes, _, _) = receiver.join().map_err(|_| panicked("the receiving host"))??;
    Ok(ControlResult { samples, bulk_bytes, data })
}
