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

use anyhow::Context;
use braid::emu::Testbed;
use braid::node::data::{DataConfig, DataInterceptor, DataStats};
use braid::node::{BasicAddress, BasicHeader, Message, MessageType, Node, NodeConfig, Transport};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub node: NodeConfig,
    pub data: DataConfig,
    pub message_size: usize,
    pub limit: Duration,
}

/// A bulk transfer's result.
#[derive(Debug, Clone)]
pub struct BulkResult {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_received: u64,
    pub secs: f64,
    pub complete: bool,
    pub data: Option<DataStats>,
}

/// A ping-pong run's result.
#[derive(Debug, Clone)]
pub struct ControlResult {
    /// Round trips of the control messages, in the order measured.
    pub rtts: Vec<Duration>,
    /// Bulk bytes the receiver got meanwhile.
    pub bulk_bytes: u64,
    pub data: Option<DataStats>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting a runtime in a host")
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
type Receiver = std::thread::JoinHandle<anyhow::Result<(u64, u64, Instant)>>;

/// The receiving host: counts bulk bytes, answers pings over TCP.
/// Returns (bytes, messages, time of the last byte).
fn spawn_receiver(
    tb: &Testbed,
    addr: SocketAddr,
    settings: &RunSettings,
    expect: Option<u64>,
    shared: Arc<Shared>,
) -> anyhow::Result<(Receiver, SocketAddr)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let cfg = settings.node.clone();
    let limit = settings.limit;
    let handle = tb.in_host("b", move || -> anyhow::Result<(u64, u64, Instant)> {
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
    })?;
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
    progress: &dyn Fn(u64),
) -> anyhow::Result<BulkResult> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { received: AtomicU64::new(0), done: AtomicBool::new(false), stop: AtomicBool::new(false) });
    let (receiver, b_addr) = spawn_receiver(tb, SocketAddr::new(p.b_addr.into(), 0), settings, Some(bytes), shared.clone())?;
    let s = settings.clone();
    let sh = shared.clone();
    let sender = tb.in_host("a", move || -> anyhow::Result<(Instant, u64, Option<DataStats>)> {
        let rt = runtime()?;
        rt.block_on(async move {
            let node: Node<BasicHeader> =
                Node::bind(SocketAddr::new(p.a_addr.into(), 0), s.node.clone()).await.context("binding the sending node")?;
            let data = DataInterceptor::new(node.clone(), s.data.clone())?;
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
    })?;
    // Progress until the receiver is done.
    while !shared.done.load(Ordering::Acquire) && !sender.is_finished() {
        progress(shared.received.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = sender.join().map_err(|_| anyhow::anyhow!("the sending host panicked"));
    shared.stop.store(true, Ordering::Release);
    let (start, bytes_sent, data) = sent??;
    let (received, messages, last) = receiver.join().map_err(|_| anyhow::anyhow!("the receiving host panicked"))??;
    progress(received);
    Ok(BulkResult {
        bytes_sent,
        bytes_received: received,
        messages_received: messages,
        secs: last.saturating_duration_since(start).as_secs_f64().max(1e-9),
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
) -> anyhow::Result<ControlResult> {
    let p = tb.layout().paths[0].clone();
    let shared = Arc::new(Shared { received: AtomicU64::new(0), done: AtomicBool::new(false), stop: AtomicBool::new(false) });
    let mut s = settings.clone();
    s.limit = duration + Duration::from_secs(30);
    let (receiver, b_addr) = spawn_receiver(tb, SocketAddr::new(p.b_addr.into(), 0), &s, None, shared.clone())?;
    let sh = shared.clone();
    let sender = tb.in_host("a", move || -> anyhow::Result<(Vec<Duration>, Option<DataStats>)> {
        let rt = runtime()?;
        rt.block_on(async move {
            let node: Node<BasicHeader> =
                Node::bind(SocketAddr::new(p.a_addr.into(), 0), s.node.clone()).await.context("binding the sending node")?;
            let data = Arc::new(DataInterceptor::new(node.clone(), s.data.clone())?);
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
                    rtts.push(sent_at.elapsed());
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
    })?;
    let sent = sender.join().map_err(|_| anyhow::anyhow!("the sending host panicked"));
    shared.stop.store(true, Ordering::Release);
    let (rtts, data) = sent??;
    let (bulk_bytes, _, _) = receiver.join().map_err(|_| anyhow::anyhow!("the receiving host panicked"))??;
    Ok(ControlResult { rtts, bulk_bytes, data })
}
