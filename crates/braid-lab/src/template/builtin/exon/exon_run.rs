//! Exon's side of a measurement: an [`ExonSocket`] at each end, one-way
//! (a sends, b receives) or RPC (actors at a send requests, b replies to
//! each), every message identified and tallied end to end.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use braid::exon::NodeId;
use braid::exon_net::{ClockFile, DurabilityStats, ExonSecurity, ExonSocket, Outcome, SocketConfig};
use bytes::Bytes;

use super::measure::{rpc_window, window_end, PeerResult, RunCfg};
use super::message::{decode, encode, Tally};
use super::place::{join, Ends};
use super::rpc::{Actors, Pending};
use crate::fail;
use crate::template::{ResultExt, TemplateError};

/// The ends' IDs when Exon runs insecure (authenticated ends derive theirs
/// from their keys).
const A: NodeId = NodeId(0xa);
const B: NodeId = NodeId(0xb);

/// The receiving end's thread: its tally, the replies it accepted and its
/// node's durability counters.
type Server = std::thread::JoinHandle<Result<(Tally, u64, DurabilityStats), TemplateError>>;

/// Poll interval of loops that also watch a stop flag.
const TICK: Duration = Duration::from_millis(20);

/// Node `who`'s socket settings; with a journal directory, its clock and
/// journal there, removed first so that every run starts from a new node.
fn socket_config(cfg: &RunCfg, who: &str) -> Result<SocketConfig, TemplateError> {
    let mut s = cfg.exon.clone();
    if !s.security.is_authenticated() {
        s.security = ExonSecurity::InsecureNoAuth { id: if who == "a" { A } else { B } };
    }
    if let Some(dir) = &cfg.journal_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("journal directory {}", dir.display()))?;
        let (clock, journal) = (dir.join(format!("{who}.clock")), dir.join(format!("{who}.journal")));
        for f in [&clock, &journal] {
            match std::fs::remove_file(f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", f.display()));
                }
                _ => {}
            }
        }
        s.clock = ClockFile::Path(clock);
        s.journal = Some(journal);
    }
    Ok(s)
}

/// Receives until `stop`, tallying messages; `reply` answers each with a
/// message of the same identifier (RPC server). Returns the tally and the
/// replies accepted.
fn serve(
    ends: &Ends,
    cfg: &RunCfg,
    reply: bool,
    stop: Arc<AtomicBool>,
) -> Result<(Server, SocketAddr), TemplateError> {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (size, epoch, scfg, bind) = (cfg.size, ends.epoch, socket_config(cfg, "b")?, SocketAddr::new(ends.b.addr, 0));
    let h = ends.b.spawn_async(move || async move {
        let sock = Arc::new(ExonSocket::bind(bind, scfg).await.context("binding the Exon socket at b")?);
        let _ = addr_tx.send(sock.local_addr());
        let mut tally = Tally::default();
        let replies = Arc::new(AtomicU64::new(0));
        // Messages arrive in batches, as many as the driver's latest
        // wake-up delivered.
        let mut batch = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            batch.clear();
            match tokio::time::timeout(TICK, sock.recv_many(&mut batch)).await {
                Ok(0) => fail!("the Exon driver at b stopped"),
                Ok(_) => {}
                Err(_) => continue,
            }
            let now = epoch.elapsed();
            for (from, m) in batch.drain(..) {
                let Some(id) = decode(&m, size) else {
                    tally.corrupt += 1;
                    continue;
                };
                let first = tally.record(id, now);
                if reply && first {
                    let (s, replies) = (sock.clone(), replies.clone());
                    tokio::spawn(async move {
                        if s.send(from, Bytes::from(encode(id, size))).await.is_ok() {
                            replies.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
        }
        sock.close().await;
        // After close: the driver has stopped, every commit is counted.
        Ok((tally, replies.load(Ordering::Relaxed), sock.durability()))
    })?;
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| TemplateError::failed("the Exon receiver at b did not start"))?;
    Ok((h, addr))
}

/// Counts outcomes of messages sent on `sock` until it closes.
fn count_outcomes(sock: Arc<ExonSocket>) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let (done, doubt) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (d, x) = (done.clone(), doubt.clone());
    tokio::spawn(async move {
        let mut batch = Vec::new();
        while sock.outcomes_many(&mut batch).await > 0 {
            for (_, o) in batch.drain(..) {
                match o {
                    Outcome::Delivered => d.fetch_add(1, Ordering::Relaxed),
                    Outcome::InDoubt => x.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
    });
    (done, doubt)
}

/// Node a, the sending (or RPC client) end: its socket, with b as its
/// peer, and the outcomes of the messages it sent.
struct SenderEnd {
    sock: Arc<ExonSocket>,
    /// b's ID, as found at its address.
    b: NodeId,
    done: Arc<AtomicU64>,
    doubt: Arc<AtomicU64>,
}

impl SenderEnd {
    async fn open(bind: SocketAddr, cfg: SocketConfig, b_addr: SocketAddr) -> Result<SenderEnd, TemplateError> {
        let sock = Arc::new(ExonSocket::bind(bind, cfg).await.context("binding the Exon socket at a")?);
        // b's key (or insecure ID), asked at its address.
        let b = sock.connect(b_addr).await.context("finding the Exon node at b")?;
        let (done, doubt) = count_outcomes(sock.clone());
        Ok(SenderEnd { sock, b, done, doubt })
    }

    /// Waits up to `drain_for` for the outcomes of the `accepted`
    /// messages, closes the socket and reports (without RPC results).
    async fn close(self, start: Duration, accepted: u64, drain_for: Duration) -> SenderReport {
        let drained = drain(&self.done, &self.doubt, accepted, drain_for).await;
        let st = self.sock.stats();
        self.sock.close().await;
        SenderReport {
            durability: self.sock.durability(),
            start,
            accepted,
            acked: self.done.load(Ordering::Relaxed),
            in_doubt: self.doubt.load(Ordering::Relaxed),
            drained,
            datagrams: st.datagrams_sent,
            retransmitted: st.fragments_lost,
            ..Default::default()
        }
    }
}

/// What the sending end reports.
#[derive(Debug, Default)]
pub struct SenderReport {
    start: Duration,
    accepted: u64,
    acked: u64,
    in_doubt: u64,
    drained: bool,
    datagrams: u64,
    retransmitted: u64,
    /// RPC: (completion time, latency) per request.
    completions: Vec<(Duration, Duration)>,
    replies: Tally,
    /// Node a's durability counters, after close.
    durability: DurabilityStats,
}

/// Waits until `want` outcomes arrived or `drain` passed.
async fn drain(done: &AtomicU64, doubt: &AtomicU64, want: u64, drain: Duration) -> bool {
    let until = tokio::time::Instant::now() + drain;
    while done.load(Ordering::Relaxed) + doubt.load(Ordering::Relaxed) < want {
        if tokio::time::Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// A running one-way measurement (so that fairness can run one next to
/// TCP's).
pub struct OnewayRun {
    receiver: Server,
    sender: std::thread::JoinHandle<Result<SenderReport, TemplateError>>,
    stop: Arc<AtomicBool>,
    cfg: RunCfg,
}

/// Starts a one-way measurement: a sends up to `messages` messages until
/// the time limit, as fast as Exon's backpressure lets it.
pub fn oneway_start(ends: &Ends, cfg: &RunCfg) -> Result<OnewayRun, TemplateError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (receiver, b_addr) = serve(ends, cfg, false, stop.clone())?;
    let c = cfg.clone();
    let acfg = socket_config(cfg, "a")?;
    let (epoch, bind) = (ends.epoch, SocketAddr::new(ends.a.addr, 0));
    let sender = ends.a.spawn_async(move || async move {
        let a = SenderEnd::open(bind, acfg, b_addr).await?;
        let start = epoch.elapsed();
        let deadline = start + c.limit;
        // The application hands Exon what it has in batches of 64 KiB
        // (as the TCP peer's buffered writer does). Batches in flight at
        // once: two (each waits for window) without a journal, so one is
        // being built while the other is sent; with one, a send also
        // waits for its group commit, so an application keeps some 4,096
        // messages going and the commits carry them together.
        let per_batch = ((64 << 10) / c.size.max(1)).max(1) as u64;
        let inflight = if c.journal_dir.is_some() { (4_096 / per_batch).max(2) as usize } else { 2 };
        let permits = Arc::new(tokio::sync::Semaphore::new(inflight));
        let mut sends = tokio::task::JoinSet::new();
        let mut accepted = 0;
        let settle = |r: Result<Result<Result<Vec<_>, _>, _>, tokio::task::JoinError>| -> Result<u64, TemplateError> {
            match r.context("Exon send task")? {
                Ok(r) => r.map(|ids| ids.len() as u64).context("Exon send"),
                Err(_) => fail!("an Exon send waited more than {:?} for window", c.drain),
            }
        };
        let mut k = 0;
        while k < c.messages {
            if epoch.elapsed() >= deadline {
                break;
            }
            let permit = permits.clone().acquire_owned().await.context("send permits")?;
            let end = (k + per_batch).min(c.messages);
            let msgs: Vec<Bytes> = (k..end).map(|i| Bytes::from(encode(i, c.size))).collect();
            k = end;
            let (s, drain, b) = (a.sock.clone(), c.drain, a.b);
            sends.spawn(async move {
                let r = tokio::time::timeout(drain, s.send_many(b, msgs)).await;
                drop(permit);
                r
            });
            while let Some(r) = sends.try_join_next() {
                accepted += settle(r)?;
            }
        }
        while let Some(r) = sends.join_next().await {
            accepted += settle(r)?;
        }
        Ok(a.close(start, accepted, c.drain).await)
    })?;
    Ok(OnewayRun { receiver, sender, stop, cfg: cfg.clone() })
}

impl OnewayRun {
    /// Waits for the sender to finish and drain, then checks every
    /// message.
    pub fn finish(self) -> Result<PeerResult, TemplateError> {
        let s = join(self.sender, "Exon sender");
        // Deliveries happen before acknowledgements: nothing more will come.
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, Ordering::Relaxed);
        let (tally, _, b_durability) = join(self.receiver, "Exon receiver")?;
        let s = s?;
        let deadline = s.start + self.cfg.limit;
        let end = window_end(tally.distinct(), tally.last_first_delivery(), self.cfg.messages, deadline);
        let delivered_ok = (0..s.accepted).filter(|&k| tally.contains(k)).count() as u64;
        let unexpected = tally.distinct() - delivered_ok;
        Ok(PeerResult {
            delivered: tally.delivered_between(s.start, end),
            window: end.saturating_sub(s.start),
            accepted: s.accepted,
            lost: s.accepted - delivered_ok,
            // A message never accepted cannot arrive at all: count it as a
            // duplicate (of nothing), so it cannot pass unnoticed.
            duplicated: tally.duplicated() + unexpected,
            corrupt: tally.corrupt,
            in_doubt: s.in_doubt,
            drained: s.drained && s.acked == s.accepted,
            datagrams: s.datagrams,
            retransmitted: s.retransmitted,
            start: s.start,
            tally,
            latencies: Vec::new(),
            durability: [s.durability, b_durability],
        })
    }
}

/// One-way over Exon.
pub fn oneway(ends: &Ends, cfg: &RunCfg) -> Result<PeerResult, TemplateError> {
    oneway_start(ends, cfg)?.finish()
}

/// RPC: `actors` loops at a, each sending a request and waiting for its
/// reply before the next, over one Exon node to one at b.
pub fn rpc(ends: &Ends, cfg: &RunCfg) -> Result<PeerResult, TemplateError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (server, b_addr) = serve(ends, cfg, true, stop.clone())?;
    let c = cfg.clone();
    let acfg = socket_config(cfg, "a")?;
    let (epoch, bind) = (ends.epoch, SocketAddr::new(ends.a.addr, 0));
    let client = ends.a.spawn_async(move || async move {
        let a = SenderEnd::open(bind, acfg, b_addr).await?;
        let pending = Pending::default();
        let replies = Arc::new(Mutex::new(Tally::default()));
        {
            let (sock, pending, replies, size) = (a.sock.clone(), pending.clone(), replies.clone(), c.size);
            tokio::spawn(async move {
                while let Some((_, m)) = sock.recv().await {
                    let now = epoch.elapsed();
                    let mut t = replies.lock().expect("tally");
                    match decode(&m, size) {
                        Some(id) => {
                            t.record(id, now);
                            if let Some(tx) = pending.lock().expect("pending").remove(&id) {
                                let _ = tx.send(now);
                            }
                        }
                        None => t.corrupt += 1,
                    }
                }
            });
        }
        let start = epoch.elapsed();
        let shared = Actors::new(epoch, start, &c, pending);
        let accepted = Arc::new(AtomicU64::new(0));
        let mut actors = Vec::new();
        for _ in 0..c.actors {
            let (sock, accepted, size, drain, b) = (a.sock.clone(), accepted.clone(), c.size, c.drain, a.b);
            actors.push(tokio::spawn(shared.clone().run(move |id| {
                let (sock, accepted) = (sock.clone(), accepted.clone());
                async move {
                    match tokio::time::timeout(drain, sock.send(b, Bytes::from(encode(id, size)))).await {
                        Ok(Ok(_)) => accepted.fetch_add(1, Ordering::Relaxed),
                        Ok(Err(e)) => return Err(TemplateError::Failed(format!("Exon send: {e}"))),
                        Err(_) => fail!("an Exon send waited more than {:?} for window", drain),
                    };
                    Ok(true)
                }
            })));
        }
        let mut completions = Vec::new();
        for a in actors {
            completions.extend(a.await.context("actor task")??);
        }
        let report = a.close(start, accepted.load(Ordering::Relaxed), c.drain).await;
        let replies = std::mem::take(&mut *replies.lock().expect("tally"));
        Ok(SenderReport { completions, replies, ..report })
    })?;
    let s = join(client, "Exon RPC client");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (requests, replies_sent, b_durability) = join(server, "Exon RPC server")?;
    let s = s?;
    let (end, counted) = rpc_window(&s.completions, s.start, cfg);
    // Request i is lost if accepted at a and never delivered at b; its
    // reply if b accepted one (only for a delivered request) and a never
    // got it. Identifiers are handed out in order, so the accepted ones
    // are 0..accepted.
    let req_delivered = (0..s.accepted).filter(|&k| requests.contains(k)).count() as u64;
    let unexpected = requests.distinct() - req_delivered;
    let replies_lost = replies_sent.saturating_sub(s.replies.distinct());
    Ok(PeerResult {
        delivered: counted.len() as u64,
        window: end.saturating_sub(s.start),
        latencies: counted,
        accepted: s.accepted + replies_sent,
        lost: (s.accepted - req_delivered) + replies_lost,
        duplicated: requests.duplicated() + s.replies.duplicated() + unexpected,
        corrupt: requests.corrupt + s.replies.corrupt,
        in_doubt: s.in_doubt,
        drained: s.drained && s.acked == s.accepted,
        datagrams: s.datagrams,
        retransmitted: s.retransmitted,
        start: s.start,
        tally: requests,
        durability: [s.durability, b_durability],
    })
}
