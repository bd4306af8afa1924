//! One run over one peer: start its server and client (before the clock),
//! offer the load ([`super::load`]), then check that both ends forgot every
//! connection, and report.
//!
//! What the peers share lives here: [`Handlers`], the server's count of
//! connections it still serves and of those that failed, and the round's
//! one-byte request and answer.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::over_braid::BraidPair;
use super::over_quinn::QuinnPair;
use super::over_tcp::TcpPair;
use super::over_tls::TlsPair;
use super::summary::HandshakeRun;
use super::{load, Peer, Settings, DRAIN_LIMIT};
use crate::template::TemplateError;

/// The byte the client sends once connected.
pub const REQUEST: u8 = 0x51;
/// The byte the server answers with.
pub const ANSWER: u8 = 0x41;

/// How long a server handler waits for the client to close after it
/// answered (the client closes right away; this only bounds a broken one).
pub const HANDLER_LIMIT: Duration = Duration::from_secs(30);

/// How a peer's connections are protected, as observed on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// The cipher sealing the data (`None`: plaintext).
    pub cipher: Option<String>,
    /// Who proves what, with which keys.
    pub auth: String,
}

/// The server's connection handlers: how many still run, how many failed
/// and the first failure.
#[derive(Debug, Default)]
pub struct Handlers {
    live: AtomicUsize,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Handlers {
    /// Serve one accepted connection on a task of its own, bounded by
    /// [`HANDLER_LIMIT`].
    pub fn spawn<F>(self: &Arc<Self>, serve: F)
    where
        F: Future<Output = Result<(), TemplateError>> + Send + 'static,
    {
        self.live.fetch_add(1, Ordering::AcqRel);
        let handlers = self.clone();
        tokio::spawn(async move {
            let outcome = match tokio::time::timeout(HANDLER_LIMIT, serve).await {
                Ok(r) => r,
                Err(_) => Err(TemplateError::Failed(format!(
                    "the client neither closed nor answered within {} s",
                    HANDLER_LIMIT.as_secs()
                ))),
            };
            if let Err(e) = outcome {
                handlers.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = handlers.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| e.to_string());
            }
            handlers.live.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Handlers still running.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// `Err` naming the first failure, if any handler failed.
    pub fn check(&self) -> Result<(), TemplateError> {
        match self.failed.load(Ordering::Relaxed) {
            0 => Ok(()),
            n => {
                let first = self.first_error.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
                Err(TemplateError::Failed(format!("the server failed {n} connection(s), the first: {first}")))
            }
        }
    }
}

/// The first byte a server reads must be the request.
pub fn check_request(got: u8) -> Result<(), TemplateError> {
    crate::ensure!(got == REQUEST, "the server read {got:#04x}, not the request {REQUEST:#04x}");
    Ok(())
}

/// The byte a client reads must be the answer.
pub fn check_answer(got: u8) -> Result<(), TemplateError> {
    crate::ensure!(got == ANSWER, "the client read {got:#04x}, not the answer {ANSWER:#04x}");
    Ok(())
}

/// Both ends of one peer, ready for rounds.
enum Pair {
    Braid(BraidPair),
    Quinn(QuinnPair),
    Tls(TlsPair),
    Tcp(TcpPair),
}

impl Pair {
    async fn start(s: &Settings) -> Result<Pair, TemplateError> {
        Ok(match s.peer {
            Peer::Braid => Pair::Braid(BraidPair::start(&s.endpoint, true)?),
            Peer::BraidInsecure => Pair::Braid(BraidPair::start(&s.endpoint, false)?),
            Peer::Quinn => Pair::Quinn(QuinnPair::start(&s.endpoint.transport)?),
            Peer::Tls => Pair::Tls(TlsPair::start().await?),
            Peer::Tcp => Pair::Tcp(TcpPair::start().await?),
        })
    }

    /// One round; its latency (connect to answer).
    async fn round(&self) -> Result<Duration, TemplateError> {
        match self {
            Pair::Braid(p) => p.round().await,
            Pair::Quinn(p) => p.round().await,
            Pair::Tls(p) => p.round().await,
            Pair::Tcp(p) => p.round().await,
        }
    }

    /// What either end still holds, described (`None`: nothing).
    fn held(&self) -> Option<String> {
        match self {
            Pair::Braid(p) => p.held(),
            Pair::Quinn(p) => p.held(),
            Pair::Tls(p) => p.held(),
            Pair::Tcp(p) => p.held(),
        }
    }

    fn handlers(&self) -> &Handlers {
        match self {
            Pair::Braid(p) => p.handlers(),
            Pair::Quinn(p) => p.handlers(),
            Pair::Tls(p) => p.handlers(),
            Pair::Tcp(p) => p.handlers(),
        }
    }

    fn protection(&self) -> Protection {
        match self {
            Pair::Braid(p) => p.protection(),
            Pair::Quinn(p) => p.protection(),
            Pair::Tls(p) => p.protection(),
            Pair::Tcp(p) => p.protection(),
        }
    }

    async fn close(self) {
        match self {
            Pair::Braid(p) => p.close().await,
            Pair::Quinn(p) => p.close().await,
            Pair::Tls(p) => p.close(),
            Pair::Tcp(p) => p.close(),
        }
    }
}

/// Measure `s.peer`: the load, then the drain check; the ends are closed
/// whatever happened.
pub async fn measure(s: &Settings, progress: &dyn Fn(f64)) -> Result<HandshakeRun, TemplateError> {
    let pair = Pair::start(s).await?;
    let outcome = measure_pair(s, &pair, progress).await;
    pair.close().await;
    outcome
}

async fn measure_pair(s: &Settings, pair: &Pair, progress: &dyn Fn(f64)) -> Result<HandshakeRun, TemplateError> {
    let m = load::run(s.concurrency, s.secs, s.limit, |_| pair.round(), progress).await?;
    let drained = Instant::now();
    loop {
        pair.handlers().check()?;
        match pair.held() {
            None => break,
            Some(what) if drained.elapsed() >= DRAIN_LIMIT => crate::fail!(
                "{} still held {what} {} s after the last connection closed",
                s.peer.name(),
                DRAIN_LIMIT.as_secs()
            ),
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let drain_ms = drained.elapsed().as_secs_f64() * 1e3;
    let protection = pair.protection();
    let secs = m.elapsed.as_secs_f64().max(1e-9);
    Ok(HandshakeRun {
        peer: s.peer,
        secs: s.secs.as_secs_f64(),
        concurrency: s.concurrency as u32,
        connections: m.connections,
        elapsed_secs: secs,
        per_sec: m.connections as f64 / secs,
        p50_us: m.p50_us,
        p99_us: m.p99_us,
        encrypted: protection.cipher.is_some(),
        cipher: protection.cipher,
        auth: protection.auth,
        drain_ms,
    })
}
