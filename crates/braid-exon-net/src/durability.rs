//! What durability costs a socket, counted where it is paid: the driver's
//! blocking tasks add a group commit (or checkpoint, or clock write) once
//! the call that ends in an fsync has returned, and the driver adds the
//! messages that waited for a commit as it lets them out. The issue 23
//! benchmarks read these (messages per fsync) instead of deriving them
//! from how the journal is supposed to batch.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of an [`ExonSocket`](crate::ExonSocket)'s durable records
/// ([`ExonSocket::durability`](crate::ExonSocket::durability)). All zero
/// without a journal and with the clock in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurabilityStats {
    /// Group commits: journal appends that returned, each ending in one
    /// `fdatasync` (the journal's file also gets an `fsync` each time it is
    /// extended, every [`braid_exon::journal::PREALLOCATE`] bytes, not
    /// counted here).
    pub commits: u64,
    /// Journal records those commits wrote.
    pub records: u64,
    /// Checkpoints: journal rewrites (a temporary file written and
    /// fsynced, renamed over the journal, the directory fsynced).
    pub checkpoints: u64,
    /// Writes of the clock file (file and directory fsynced); 0 with the
    /// clock in memory.
    pub clock_writes: u64,
    /// Messages this node accepted for sending whose `send` waited for a
    /// commit (every accepted message, with a journal).
    pub sends_committed: u64,
    /// Messages received that were handed to the application only after
    /// the commit of their receipt (every one, with a journal).
    pub receipts_committed: u64,
}

impl DurabilityStats {
    /// Messages made durable here: sent and received.
    pub fn messages_committed(&self) -> u64 {
        self.sends_committed + self.receipts_committed
    }

    /// The group commit rate: messages made durable per commit (`None`
    /// before the first commit).
    pub fn messages_per_commit(&self) -> Option<f64> {
        (self.commits > 0).then(|| self.messages_committed() as f64 / self.commits as f64)
    }

    /// The sum of two nodes' counters (both ends of a run).
    pub fn plus(&self, o: &DurabilityStats) -> DurabilityStats {
        DurabilityStats {
            commits: self.commits + o.commits,
            records: self.records + o.records,
            checkpoints: self.checkpoints + o.checkpoints,
            clock_writes: self.clock_writes + o.clock_writes,
            sends_committed: self.sends_committed + o.sends_committed,
            receipts_committed: self.receipts_committed + o.receipts_committed,
        }
    }
}

/// The live counters, shared by the driver, its blocking tasks and the
/// socket. Relaxed atomics: each counter is read on its own.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    commits: AtomicU64,
    records: AtomicU64,
    checkpoints: AtomicU64,
    clock_writes: AtomicU64,
    sends_committed: AtomicU64,
    receipts_committed: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// A journal append of `records` records returned (its fdatasync done).
    pub(crate) fn committed(&self, records: usize) {
        add(&self.commits, 1);
        add(&self.records, records as u64);
    }

    /// A checkpoint was written.
    pub(crate) fn checkpointed(&self) {
        add(&self.checkpoints, 1);
    }

    /// The clock file was written.
    pub(crate) fn clock_written(&self) {
        add(&self.clock_writes, 1);
    }

    /// `n` accepted messages were answered after a commit.
    pub(crate) fn sends_released(&self, n: usize) {
        add(&self.sends_committed, n as u64);
    }

    /// `n` received messages were handed over after a commit.
    pub(crate) fn receipts_released(&self, n: usize) {
        add(&self.receipts_committed, n as u64);
    }

    pub(crate) fn snapshot(&self) -> DurabilityStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DurabilityStats {
            commits: r(&self.commits),
            records: r(&self.records),
            checkpoints: r(&self.checkpoints),
            clock_writes: r(&self.clock_writes),
            sends_committed: r(&self.sends_committed),
            receipts_committed: r(&self.receipts_committed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_messages_over_commits() {
        let c = Counters::default();
        assert_eq!(c.snapshot(), DurabilityStats::default());
        assert_eq!(c.snapshot().messages_per_commit(), None);
        c.committed(10);
        c.committed(6);
        c.sends_released(30);
        c.receipts_released(2);
        c.checkpointed();
        c.clock_written();
        let s = c.snapshot();
        assert_eq!((s.commits, s.records, s.checkpoints, s.clock_writes), (2, 16, 1, 1));
        assert_eq!(s.messages_committed(), 32);
        assert_eq!(s.messages_per_commit(), Some(16.0));
        let both = s.plus(&s);
        assert_eq!((both.commits, both.messages_committed()), (4, 64));
    }

    /// Two sockets on 127.0.0.1, once with clock and journal files and
    /// once without: the counters the drivers keep agree with what the
    /// application saw (every accepted message committed once at the
    /// sender, every received one once at the receiver), group commits
    /// carry many messages each, and nothing is counted without a journal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counters_match_the_messages_with_a_journal_and_stay_zero_without() {
        use crate::{ClockFile, ExonSocket, Outcome, SocketConfig};
        use bytes::Bytes;
        const N: usize = 2_000;
        let dir = std::env::temp_dir().join(format!("exon-net-durability-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = |name: &str, durable: bool| {
            let mut cfg = SocketConfig::default();
            if durable {
                cfg.clock = ClockFile::Path(dir.join(format!("{name}.clock")));
                cfg.journal = Some(dir.join(format!("{name}.journal")));
            }
            cfg
        };
        for durable in [true, false] {
            let any = "127.0.0.1:0".parse().unwrap();
            let a = ExonSocket::bind(any, config("a", durable)).await.unwrap();
            let b = ExonSocket::bind(any, config("b", durable)).await.unwrap();
            let peer = a.connect(b.local_addr()).await.unwrap();
            let msgs: Vec<Bytes> = (0..N).map(|i| Bytes::from(vec![i as u8; 64])).collect();
            let mut sent = 0;
            for chunk in msgs.chunks(500) {
                sent += a.send_many(peer, chunk.to_vec()).await.unwrap().len();
            }
            let (mut got, mut batch) = (0, Vec::new());
            while got < N {
                batch.clear();
                got += b.recv_many(&mut batch).await;
            }
            let mut outcomes = Vec::new();
            while outcomes.len() < N {
                a.outcomes_many(&mut outcomes).await;
            }
            assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Delivered));
            a.close().await;
            b.close().await;
            let (da, db) = (a.durability(), b.durability());
            if durable {
                assert_eq!((sent, got), (N, N));
                assert_eq!((da.sends_committed, da.receipts_committed), (N as u64, 0), "{da:?}");
                assert_eq!((db.sends_committed, db.receipts_committed), (0, N as u64), "{db:?}");
                assert!(da.commits > 0 && db.commits > 0, "{da:?} {db:?}");
                // Group commit: far fewer fsyncs than messages (a batch of
                // 500 is one command, committed together).
                assert!(da.commits * 4 <= N as u64, "{da:?}");
                assert!(da.records >= N as u64, "each accepted message is a record: {da:?}");
                assert!(da.clock_writes >= 1 && db.clock_writes >= 1, "{da:?} {db:?}");
                let both = da.plus(&db);
                let rate = both.messages_per_commit().unwrap();
                assert!((rate * both.commits as f64 - 2.0 * N as f64).abs() < 1e-6);
            } else {
                assert_eq!((da, db), (DurabilityStats::default(), DurabilityStats::default()));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
