//! The two measurements, the same for every transport: each end on its own
//! thread with its own single-threaded runtime (on this 2-core machine one
//! core each, as two processes would have), both on 127.0.0.1.
//!
//! - One-way rate: the client sends messages `0, 1, 2, …` in batches as
//!   fast as the transport's flow control takes them, until the time limit
//!   or the message cap; the server checks every message ([`Checker`]).
//!   The rate is distinct messages delivered over the time from the first
//!   send to the last delivery.
//! - Request/response: the client keeps `outstanding` requests in flight
//!   (a closed loop: a reply lets the next request go), the server answers
//!   each request with a message of its identifier, as many per write as
//!   arrived together. Latency is from handing the request to the transport
//!   to taking its reply from it.
//!
//! Every run is bounded: the time limit, then a drain of at most
//! [`RunCfg::drain`] for what was sent to arrive; then both ends close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::exon::place::{join, Ends};
use super::check::{Checker, Verdict};
use super::wire::{connect, ExonOutcomes, Listener, Setup};
use crate::template::TemplateError;

/// Limits of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct RunCfg {
    /// Sending stops after this long.
    pub limit: Duration,
    /// Messages (requests) at most.
    pub cap: u64,
    /// Longest wait after the limit for what was sent to arrive.
    pub drain: Duration,
    /// Requests in flight (request/response only).
    pub outstanding: usize,
}

/// A one-way run's outcome.
#[derive(Debug, Clone)]
pub struct OnewayResult {
    /// Messages the sender handed to the transport.
    pub sent: u64,
    /// The receiver's check.
    pub verdict: Verdict,
    /// From the first send to the last delivery.
    pub window: Duration,
    /// Exon's outcomes at the sender.
    pub exon: Option<ExonOutcomes>,
    /// Kernel TCP's congestion control on the connection (tcp only).
    pub tcp_cc: Option<String>,
    /// Node runs with notifications: batches confirmed delivered.
    pub notified: Option<u64>,
}

impl OnewayResult {
    /// Distinct messages delivered per second.
    pub fn rate(&self) -> f64 {
        self.verdict.delivered as f64 / self.window.as_secs_f64().max(1e-9)
    }
}

/// A request/response run's outcome.
#[derive(Debug, Clone)]
pub struct RpcResult {
    /// Each answered request's latency, in completion order.
    pub latencies: Vec<Duration>,
    /// From the first request to the last reply.
    pub window: Duration,
    /// Requests sent.
    pub sent: u64,
    /// The server's check of the requests.
    pub requests: Verdict,
    /// The client's check of the replies (lost: requests never answered).
    pub replies: Verdict,
    /// Node runs with notifications: the client's batches of requests
    /// confirmed delivered.
    pub notified: Option<u64>,
}

impl RpcResult {
    /// Answered requests per second.
    pub fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// The `q`-quantile of the latencies, in microseconds (nearest rank).
    pub fn latency_us(&self, q: f64) -> Option<f64> {
        (!self.latencies.is_empty()).then(|| braid_emu::bench::quantile(&self.latencies, q).as_secs_f64() * 1e6)
    }
}

/// What the two ends tell each other.
#[derive(Default)]
struct Flags {
    /// Messages the sender handed over so far.
    sent: AtomicU64,
    /// The sender sent its last message.
    sent_all: AtomicBool,
    /// The receiver is finished (it has everything, or gave up).
    received_all: AtomicBool,
}

/// Messages per send: about 64 KiB of them (what a buffered writer hands
/// the kernel at once), at least one.
fn batch_len(size: usize) -> u64 {
    ((64 << 10) / size.max(1)).max(1) as u64
}

/// The server's end: binds, reports its address, accepts.
fn serve<T: Send + 'static, F, Fut>(
    ends: &Ends<'_>,
    setup: &Setup,
    body: F,
) -> Result<(std::thread::JoinHandle<Result<T, TemplateError>>, std::net::SocketAddr), TemplateError>
where
    F: FnOnce(super::wire::Wire) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, TemplateError>>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (setup, ip) = (setup.clone(), ends.b.addr);
    let h = ends.b.spawn_async(move || async move {
        let listener = Listener::bind(&setup, ip).await?;
        let _ = tx.send(listener.addr()?);
        // A client that never comes (it failed) must not hold the thread.
        let wire = tokio::time::timeout(Duration::from_secs(10), listener.accept(&setup))
            .await
            .map_err(|_| TemplateError::failed("the client did not connect within 10 s"))??;
        body(wire).await
    })?;
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(addr) => Ok((h, addr)),
        Err(_) => Err(join(h, "the server").err().unwrap_or_else(|| TemplateError::failed("the server did not start"))),
    }
}

/// One-way: the client sends, the server checks.
pub fn oneway(setup: &Setup, cfg: RunCfg) -> Result<OnewayResult, TemplateError> {
    let ends = Ends::loopback();
    let flags = Arc::new(Flags::default());
    let (ordered, size) = (setup.transport.ordered(), setup.size);
    let f = flags.clone();
    let (server, addr) = serve(&ends, setup, move |mut wire| async move {
        let mut check = Checker::new(ordered, size, cfg.cap);
        let mut last = Instant::now();
        let mut give_up: Option<Instant> = None;
        loop {
            let sent_all = f.sent_all.load(Ordering::Acquire);
            if sent_all && check.delivered() >= f.sent.load(Ordering::Acquire) {
                break;
            }
            // The drain starts when the sender is done.
            if sent_all && *give_up.get_or_insert_with(|| Instant::now() + cfg.drain) <= Instant::now() {
                break;
            }
            // A sender that fails never says it is done: the limit plus the
            // drain bounds the wait all the same.
            if last.elapsed() > cfg.limit + cfg.drain {
                break;
            }
            if wire.recv(|m| {
                check.message(m);
            })
            .await?
                > 0
            {
                last = Instant::now();
            }
        }
        f.received_all.store(true, Ordering::Release);
        wire.close(Duration::ZERO).await;
        Ok((check, last))
    })?;
    let (s, ip) = (setup.clone(), ends.a.addr);
    let f = flags.clone();
    let client = ends.a.spawn_async(move || async move {
        let mut wire = connect(&s, ip, addr).await?;
        let tcp_cc = wire.tcp_congestion_control().map(str::to_string);
        let start = Instant::now();
        let per = batch_len(s.size);
        let mut ids = Vec::with_capacity(per as usize);
        let mut next = 0u64;
        let sending = async {
            while next < cfg.cap && start.elapsed() < cfg.limit {
                ids.clear();
                ids.extend(next..(next + per).min(cfg.cap));
                wire.send(&ids).await?;
                next += ids.len() as u64;
                f.sent.store(next, Ordering::Release);
            }
            // With notifications, sending is done once they all came: the
            // receiver keeps its end open until then (a connection closed
            // under an unconfirmed batch would fail it).
            wire.settle_notifications(cfg.drain).await
        };
        let sent = sending.await;
        f.sent_all.store(true, Ordering::Release);
        let notified = sent?;
        // Closing before the receiver has everything could drop what is
        // still queued (quinn, the Node): wait for it, bounded.
        let until = Instant::now() + cfg.drain + Duration::from_secs(1);
        while !f.received_all.load(Ordering::Acquire) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let exon = wire.close(cfg.drain).await;
        Ok((start, next, exon, tcp_cc, notified))
    })?;
    let c = join(client, "the sending end");
    if c.is_err() {
        flags.sent_all.store(true, Ordering::Release);
    }
    let (check, last) = join(server, "the receiving end")?;
    let (start, sent, exon, tcp_cc, notified) = c?;
    Ok(OnewayResult { sent, verdict: check.verdict(sent), window: last.saturating_duration_since(start), exon, tcp_cc, notified })
}

/// Request/response with `cfg.outstanding` requests in flight.
pub fn rpc(setup: &Setup, cfg: RunCfg) -> Result<RpcResult, TemplateError> {
    let ends = Ends::loopback();
    let stop = Arc::new(AtomicBool::new(false));
    let (ordered, size) = (setup.transport.ordered(), setup.size);
    let st = stop.clone();
    let (server, addr) = serve(&ends, setup, move |mut wire| async move {
        let mut check = Checker::new(ordered, size, cfg.cap);
        let mut ids = Vec::new();
        let bound = Instant::now() + cfg.limit + cfg.drain + Duration::from_secs(1);
        while !st.load(Ordering::Acquire) && Instant::now() < bound {
            ids.clear();
            // A closed connection ends the service; the client's checks
            // tell whether that was early.
            if wire
                .recv(|m| {
                    if let Some(id) = check.message(m) {
                        ids.push(id);
                    }
                })
                .await
                .is_err()
            {
                break;
            }
            if !ids.is_empty() && wire.send(&ids).await.is_err() {
                break;
            }
        }
        wire.close(Duration::ZERO).await;
        Ok(check)
    })?;
    let s = setup.clone();
    let ip = ends.a.addr;
    let client = ends.a.spawn_async(move || async move {
        let mut wire = connect(&s, ip, addr).await?;
        let mut replies = Checker::new(false, s.size, cfg.cap);
        let mut pending: HashMap<u64, Instant> = HashMap::with_capacity(cfg.outstanding * 2);
        let mut latencies = Vec::new();
        let (mut next, mut ids, mut got) = (0u64, Vec::new(), Vec::new());
        let start = Instant::now();
        let mut last = start;
        let mut quiet_since = Instant::now();
        loop {
            if start.elapsed() < cfg.limit {
                ids.clear();
                while pending.len() + ids.len() < cfg.outstanding && next < cfg.cap {
                    ids.push(next);
                    next += 1;
                }
                if !ids.is_empty() {
                    let t0 = Instant::now();
                    pending.extend(ids.iter().map(|&id| (id, t0)));
                    wire.send(&ids).await?;
                }
            }
            if pending.is_empty() {
                break;
            }
            got.clear();
            if wire
                .recv(|m| {
                    if let Some(id) = replies.message(m) {
                        got.push(id);
                    }
                })
                .await?
                == 0
            {
                // Requests unanswered for the drain time are lost.
                if quiet_since.elapsed() > cfg.drain {
                    break;
                }
                continue;
            }
            let now = Instant::now();
            quiet_since = now;
            last = now;
            for id in &got {
                if let Some(t0) = pending.remove(id) {
                    latencies.push(now - t0);
                }
            }
        }
        let notified = wire.settle_notifications(cfg.drain).await?;
        wire.close(Duration::from_secs(1)).await;
        Ok((start, last, next, latencies, replies, notified))
    })?;
    let c = join(client, "the requesting end");
    stop.store(true, Ordering::Release);
    let requests = join(server, "the answering end")?;
    let (start, last, sent, latencies, replies, notified) = c?;
    Ok(RpcResult {
        window: last.saturating_duration_since(start),
        latencies,
        sent,
        requests: requests.verdict(sent),
        replies: replies.verdict(sent),
        notified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_about_64_kib() {
        assert_eq!(batch_len(64), 1024);
        assert_eq!(batch_len(1024), 64);
        assert_eq!(batch_len(1 << 20), 1);
    }
}
