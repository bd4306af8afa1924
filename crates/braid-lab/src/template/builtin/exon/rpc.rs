//! The closed-loop RPC actor both peers run (the paper's RPC pattern):
//! take the next request identifier, send the request, wait for its
//! reply, repeat. Only how a request is sent differs between Exon and TCP.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::measure::RunCfg;
use crate::template::TemplateError;

/// The requests waiting for their reply, by identifier: whatever reads
/// replies sends each one's arrival time (since the run's epoch).
pub type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Duration>>>>;

/// What every actor of a run shares.
#[derive(Clone)]
pub struct Actors {
    /// Time zero of the run.
    pub epoch: Instant,
    /// No request starts after this (since the epoch).
    pub deadline: Duration,
    /// Requests of the whole run at most.
    pub messages: u64,
    /// How long an actor waits for a reply before it gives up.
    pub drain: Duration,
    /// The next request identifier, handed out in order.
    pub next: Arc<AtomicU64>,
    /// The requests waiting for their reply.
    pub pending: Pending,
}

impl Actors {
    /// The actors of a run that starts at `start` (since `epoch`), within
    /// `cfg`'s time limit, request count and drain time.
    pub fn new(epoch: Instant, start: Duration, cfg: &RunCfg, pending: Pending) -> Actors {
        Actors {
            epoch,
            deadline: start + cfg.limit,
            messages: cfg.messages,
            drain: cfg.drain,
            next: Arc::new(AtomicU64::new(0)),
            pending,
        }
    }

    /// Runs one actor until the deadline, the last request, or a reply
    /// that does not come within the drain time. `send(id)` sends request
    /// `id`: `Ok(false)` ends the actor (the connection is gone), an error
    /// ends the run. Returns (completion time, latency) per answered
    /// request.
    pub async fn run<F, Fut>(self, mut send: F) -> Result<Vec<(Duration, Duration)>, TemplateError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = Result<bool, TemplateError>>,
    {
        let mut out = Vec::new();
        while self.epoch.elapsed() < self.deadline {
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            if id >= self.messages {
                break;
            }
            let (tx, rx) = oneshot::channel();
            self.pending.lock().expect("pending").insert(id, tx);
            let t0 = self.epoch.elapsed();
            if !send(id).await? {
                break;
            }
            // Bounded: a reply that never comes (or is stuck behind a lossy
            // stream) ends the actor, and its request counts as lost.
            match tokio::time::timeout(self.drain, rx).await {
                Ok(Ok(at)) => out.push((at, at.saturating_sub(t0))),
                _ => break,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply service: answers every pending request after `delay`, but
    /// never request `lost`.
    fn answer(actors: &Actors, delay: Duration, lost: u64) -> tokio::task::JoinHandle<()> {
        let (pending, epoch) = (actors.pending.clone(), actors.epoch);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(delay).await;
                let mut p = pending.lock().unwrap();
                let due: Vec<u64> = p.keys().copied().filter(|id| *id != lost).collect();
                for tx in due.iter().filter_map(|id| p.remove(id)) {
                    let _ = tx.send(epoch.elapsed());
                }
            }
        })
    }

    fn actors(messages: u64, drain: Duration) -> Actors {
        Actors {
            epoch: Instant::now(),
            deadline: Duration::from_secs(5),
            messages,
            drain,
            next: Arc::default(),
            pending: Pending::default(),
        }
    }

    #[tokio::test]
    async fn actors_share_the_identifiers_and_stop_at_the_last() {
        let a = actors(10, Duration::from_secs(1));
        let server = answer(&a, Duration::from_millis(1), u64::MAX);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let run = |a: Actors| {
            let sent = sent.clone();
            tokio::spawn(a.run(move |id| {
                sent.lock().unwrap().push(id);
                async { Ok(true) }
            }))
        };
        let (x, y) = (run(a.clone()), run(a.clone()));
        let done = x.await.unwrap().unwrap().len() + y.await.unwrap().unwrap().len();
        server.abort();
        assert_eq!(done, 10);
        let mut ids = sent.lock().unwrap().clone();
        ids.sort();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_missing_reply_or_a_closed_connection_ends_the_actor() {
        let a = actors(10, Duration::from_millis(50));
        let server = answer(&a, Duration::from_millis(1), 3);
        let out = a.clone().run(|_| async { Ok(true) }).await.unwrap();
        server.abort();
        assert_eq!(out.len(), 3, "requests 0..3 answered, 3 never");
        assert!(out.iter().all(|&(at, latency)| latency <= at));
        let closed = actors(10, Duration::from_secs(1)).run(|_| async { Ok(false) }).await.unwrap();
        assert!(closed.is_empty());
        let failed = actors(10, Duration::from_secs(1)).run(|_| async { Err(TemplateError::failed("boom")) }).await;
        assert!(failed.is_err());
    }
}
