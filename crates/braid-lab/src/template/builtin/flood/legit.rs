//! The legitimate traffic whose throughput a flood must not take: one
//! sender in host `a`, one receiver in host `b` of the testbed, each on a
//! thread with its own runtime (so its socket belongs to its host), running
//! until told to stop. The receiver counts payload bytes and messages in
//! shared counters, read by the measuring thread at window boundaries, and
//! its endpoint (or socket) stays reachable for samples of its state.
//!
//! - Braid: one encrypted connection (each end a fresh identity pinned to
//!   the other's) carrying a bulk stream of `chunk`-sized messages.
//! - Exon: one encrypted node per host, `a` sending `size`-byte messages in
//!   64 KiB batches, two batches in flight (as `bench exon`'s one-way run).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use braid::exon_net::{ExonSocket, SocketConfig};
use braid::{Endpoint, EndpointConfig, LinkSpec};
use braid_emu::Testbed;
use bytes::Bytes;
use tokio::sync::watch;

use super::Target;
use crate::template::{ResultExt, TemplateError};

/// Longest the receiver may take to listen, and the first bytes to come.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest a closing end waits for its peer.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the receiver got so far.
#[derive(Debug, Default)]
pub struct Counters {
    /// Payload bytes.
    pub bytes: AtomicU64,
    /// Messages.
    pub messages: AtomicU64,
}

impl Counters {
    /// (bytes, messages) now.
    pub fn read(&self) -> (u64, u64) {
        (self.bytes.load(Ordering::Relaxed), self.messages.load(Ordering::Relaxed))
    }
}

/// One look at the receiver's state and counters.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// State it holds: connections (Braid) or sessions (Exon).
    pub held: u64,
    /// Peers it keeps (Exon; Braid: its connections' peers, the same).
    pub peers: u64,
    /// Cumulative counters by name.
    pub counters: BTreeMap<String, u64>,
}

/// Where the receiver's state is read.
enum Probe {
    Braid(Endpoint),
    Exon(Arc<ExonSocket>),
}

/// The running legitimate traffic.
pub struct Traffic {
    /// What the receiver got.
    pub counters: Arc<Counters>,
    /// The receiver's address: the flood's target.
    pub service: SocketAddr,
    probe: Probe,
    stop: watch::Sender<bool>,
    receiver: JoinHandle<Result<(), TemplateError>>,
    sender: JoinHandle<Result<(), TemplateError>>,
}

/// What the traffic sends.
#[derive(Debug, Clone)]
pub struct Load {
    /// Braid's message size in the bulk stream.
    pub chunk: usize,
    /// Exon's message size.
    pub size: usize,
    /// The link (Exon's window follows its bandwidth-delay product).
    pub link: LinkSpec,
}

/// Runs `f` on a thread in `host` with a current-thread runtime.
fn in_host<F, Fut>(tb: &Testbed, host: &str, f: F) -> Result<JoinHandle<Result<(), TemplateError>>, TemplateError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), TemplateError>>,
{
    tb.in_host(host, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TemplateError::io("starting a runtime", e))?;
        rt.block_on(f())
    })
    .with_context(|| format!("starting a thread in host {host}"))
}

/// Resolves once `stop` says so (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn host_addrs(tb: &Testbed) -> Result<(IpAddr, IpAddr), TemplateError> {
    let p = tb.layout().paths.first().context("the testbed has no path")?;
    Ok((IpAddr::V4(p.a_addr), IpAddr::V4(p.b_addr)))
}

/// Starts `target`'s traffic from `a` to `b` and waits until bytes arrive.
pub fn start(target: Target, tb: &Testbed, load: &Load) -> Result<Traffic, TemplateError> {
    let (a_ip, b_ip) = host_addrs(tb)?;
    let counters = Arc::new(Counters::default());
    let (stop, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let traffic = match target {
        Target::Braid => {
            let (server_sec, client_sec) = braid_net::pinned_pair().map_err(TemplateError::failed)?;
            let server_cfg = EndpointConfig { accept_incoming: true, security: server_sec, ..Default::default() };
            let client_cfg = EndpointConfig { accept_incoming: false, security: client_sec, ..Default::default() };
            let (c, mut stop_b) = (counters.clone(), stop_rx.clone());
            let receiver = in_host(tb, "b", move || async move {
                let ep = Endpoint::bind_with(SocketAddr::new(b_ip, 0), server_cfg).context("braid receiver socket")?;
                let _ = ready_tx.send((ep.local_addr(), Probe::Braid(ep.clone())));
                let conn = tokio::select! {
                    c = ep.accept() => c.context("the braid receiver closed before a connection")?,
                    _ = stopped(&mut stop_b) => return Ok(()),
                };
                loop {
                    tokio::select! {
                        m = conn.recv_message() => {
                            let m = m.context("braid receive")?;
                            c.bytes.fetch_add(m.len() as u64, Ordering::Relaxed);
                            c.messages.fetch_add(1, Ordering::Relaxed);
                        }
                        _ = stopped(&mut stop_b) => break,
                    }
                }
                ep.close();
                Ok(())
            })?;
            let (service, probe) = match ready_rx.recv_timeout(START_TIMEOUT) {
                Ok(r) => r,
                Err(_) => return Err(did_not_start(receiver)),
            };
            let (chunk, mut stop_a) = (Bytes::from(vec![0x5a; load.chunk]), stop_rx);
            let sender = in_host(tb, "a", move || async move {
                let ep = Endpoint::bind_with(SocketAddr::new(a_ip, 0), client_cfg).context("braid sender socket")?;
                let conn = ep.connect(service).await.context("braid connect")?;
                loop {
                    tokio::select! {
                        r = conn.send_message(chunk.clone()) => {
                            if let Err(e) = r {
                                if *stop_a.borrow() {
                                    break;
                                }
                                return Err(TemplateError::Failed(format!("braid send: {e}")));
                            }
                        }
                        _ = stopped(&mut stop_a) => break,
                    }
                }
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, conn.close()).await;
                ep.close();
                Ok(())
            })?;
            Traffic { counters, service, probe, stop, receiver, sender }
        }
        Target::Exon => {
            let mut cfg = SocketConfig::default();
            cfg.node.machine.max_outstanding = outstanding(&load.link, load.size);
            let (c, mut stop_b, b_cfg) = (counters.clone(), stop_rx.clone(), cfg.clone());
            let receiver = in_host(tb, "b", move || async move {
                let sock = Arc::new(ExonSocket::bind(SocketAddr::new(b_ip, 0), b_cfg).await.context("exon receiver socket")?);
                let _ = ready_tx.send((sock.local_addr(), Probe::Exon(sock.clone())));
                let mut batch = Vec::new();
                loop {
                    tokio::select! {
                        n = sock.recv_many(&mut batch) => {
                            if n == 0 {
                                crate::fail!("the exon receiver's driver stopped");
                            }
                            for (_, m) in batch.drain(..) {
                                c.bytes.fetch_add(m.len() as u64, Ordering::Relaxed);
                                c.messages.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ = stopped(&mut stop_b) => break,
                    }
                }
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, sock.close()).await;
                Ok(())
            })?;
            let (service, probe) = match ready_rx.recv_timeout(START_TIMEOUT) {
                Ok(r) => r,
                Err(_) => return Err(did_not_start(receiver)),
            };
            let (size, mut stop_a) = (load.size, stop_rx);
            let sender = in_host(tb, "a", move || async move {
                let sock = Arc::new(ExonSocket::bind(SocketAddr::new(a_ip, 0), cfg).await.context("exon sender socket")?);
                let b = sock.connect(service).await.context("finding the exon receiver")?;
                // Outcomes are read, so none piles up.
                let outcomes = {
                    let sock = sock.clone();
                    tokio::spawn(async move {
                        let mut batch = Vec::new();
                        while sock.outcomes_many(&mut batch).await > 0 {
                            batch.clear();
                        }
                    })
                };
                let per_batch = ((64 << 10) / size.max(1)).max(1);
                let payload = Bytes::from(vec![0xa5; size]);
                let permits = Arc::new(tokio::sync::Semaphore::new(2));
                let mut sends = tokio::task::JoinSet::new();
                let mut failed = None;
                loop {
                    let permit = tokio::select! {
                        p = permits.clone().acquire_owned() => p.context("send permits")?,
                        _ = stopped(&mut stop_a) => break,
                    };
                    let (s, msgs) = (sock.clone(), vec![payload.clone(); per_batch]);
                    sends.spawn(async move {
                        let r = s.send_many(b, msgs).await;
                        drop(permit);
                        r.map(|_| ())
                    });
                    while let Some(r) = sends.try_join_next() {
                        if let Ok(Err(e)) = r {
                            failed = Some(e.to_string());
                        }
                    }
                    if let Some(e) = failed.take() {
                        if *stop_a.borrow() {
                            break;
                        }
                        crate::fail!("exon send: {e}");
                    }
                }
                sends.abort_all();
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, sock.close()).await;
                outcomes.abort();
                Ok(())
            })?;
            Traffic { counters, service, probe, stop, receiver, sender }
        }
    };
    traffic.wait_flowing()?;
    Ok(traffic)
}

/// Exon's window: eight bandwidth-delay products of messages, as `bench
/// exon` sizes it, so the link, not the window, limits the rate.
fn outstanding(link: &LinkSpec, size: usize) -> usize {
    let rtt = link.rtt().max(Duration::from_millis(1));
    let bdp = link.rate().map_or(1 << 20, |r| (r.bytes_per_sec_f64() * rtt.as_secs_f64()) as u64);
    (8 * bdp / size.max(1) as u64).clamp(256, 65_536) as usize
}

/// Why the receiver did not start: its own error if it ended with one.
fn did_not_start(receiver: JoinHandle<Result<(), TemplateError>>) -> TemplateError {
    if receiver.is_finished() {
        if let Ok(Err(e)) = receiver.join() {
            return e;
        }
    }
    TemplateError::failed("the receiver did not start")
}

impl Traffic {
    /// Waits until the receiver has bytes (the handshake done, data
    /// flowing).
    fn wait_flowing(&self) -> Result<(), TemplateError> {
        let until = std::time::Instant::now() + START_TIMEOUT;
        while self.counters.read().0 == 0 {
            if self.sender.is_finished() || self.receiver.is_finished() || std::time::Instant::now() >= until {
                self.stop.send_replace(true);
                return Err(TemplateError::failed(format!(
                    "no legitimate data arrived within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// The receiver's state and counters now.
    pub fn sample(&self) -> Sample {
        let mut counters = BTreeMap::new();
        let mut put = |k: &str, v: u64| {
            counters.insert(k.to_string(), v);
        };
        match &self.probe {
            Probe::Braid(ep) => {
                let s = ep.stats();
                put("datagrams_received", s.datagrams_received);
                put("retries_sent", s.retries_sent);
                put("invalid_cookies", s.invalid_cookies);
                put("malformed_datagrams", s.malformed_datagrams);
                put("unknown_connection_datagrams", s.unknown_connection_datagrams);
                put("handshake_failures", s.handshake_failures);
                put("connections_refused", s.connections_refused);
                put("connections_accepted", s.connections_accepted);
                put("stateless_dropped", s.stateless_dropped);
                Sample { held: s.connections_open, peers: s.connections_open, counters }
            }
            Probe::Exon(sock) => {
                let s = sock.stats();
                put("datagrams_received", s.datagrams_received);
                put("malformed", s.malformed);
                put("auth_failed", s.security.auth_failed);
                put("unauthenticated", s.security.unauthenticated);
                put("replayed", s.security.replayed);
                put("responses", s.security.responses);
                put("refused", s.security.refused);
                put("queue_dropped", s.security.queue_dropped);
                put("diffie_hellmans", s.security.diffie_hellmans);
                put("cookies_sent", s.security.cookies_sent);
                put("rate_limited", s.security.rate_limited);
                Sample { held: s.security.sessions, peers: s.security.peers, counters }
            }
        }
    }

    /// Stops both ends and waits for them; the first error either had.
    pub fn stop(self) -> Result<(), TemplateError> {
        self.stop.send_replace(true);
        drop(self.probe);
        let join = |h: JoinHandle<Result<(), TemplateError>>, what: &str| {
            h.join().map_err(|_| TemplateError::Failed(format!("the {what} panicked")))?
        };
        let r = join(self.receiver, "receiver");
        let s = join(self.sender, "sender");
        r.and(s)
    }
}
