//! Exactly-once across restarts with the durable journal, over real UDP
//! sockets on 127.0.0.1: the sender and the receiver each stop in the
//! middle of a stream (dropping whatever their driver held in memory) and
//! start again from their clock and journal files on a new port. Every
//! message whose `send` returned is received exactly once; one whose
//! `send` was cut short by the stop arrives at most once. Bounded in count
//! and time.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use braid_exon::NodeId;
use braid_exon_net::{
    AcceptAnyKey, ClockFile, ExonSecurity, ExonSocket, Identity, Outcome, SocketConfig,
};
use bytes::Bytes;

/// The two nodes, by the seed of their identity (kept across restarts).
const A: u8 = 0xA;
const B: u8 = 0xB;

fn identity(n: u8) -> Identity {
    Identity::from_seed(&[n; 32])
}

fn id(n: u8) -> NodeId {
    NodeId::of(&identity(n).public_key())
}
const N: u64 = 1_500;

fn message(k: u64) -> Bytes {
    let mut v = vec![(k % 251) as u8; 1_000];
    v[..8].copy_from_slice(&k.to_be_bytes());
    Bytes::from(v)
}

fn durable(dir: &Path, name: &str) -> SocketConfig {
    let mut cfg = SocketConfig {
        clock: ClockFile::Path(dir.join(format!("{name}.clock"))),
        journal: Some(dir.join(format!("{name}.journal"))),
        // Small, so that checkpoints happen within the test.
        compact_bytes: 256 << 10,
        ..SocketConfig::default()
    };
    cfg.node.machine.max_outstanding = 256;
    cfg
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exon-net-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn bind(n: u8, mut cfg: SocketConfig) -> Arc<ExonSocket> {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    cfg.security = ExonSecurity::Authenticated {
        identity: identity(n),
        verifier: Arc::new(AcceptAnyKey),
    };
    Arc::new(ExonSocket::bind(any, cfg).await.unwrap())
}

/// What the receiving application saw: message number → times received.
type Seen = Arc<Mutex<HashMap<u64, u32>>>;

fn receive(sock: Arc<ExonSocket>, seen: Seen) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Until the driver stops: the channel still yields what it was
        // handed before (the application's part of the crash is not
        // simulated: what recv returned counts as received).
        while let Some((from, m)) = sock.recv().await {
            assert_eq!(from, id(A));
            let k = u64::from_be_bytes(m[..8].try_into().unwrap());
            assert_eq!(m, message(k));
            *seen.lock().unwrap().entry(k).or_insert(0) += 1;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_and_receiver_restart_mid_stream_and_nothing_is_lost_or_repeated() {
    let dir = temp_dir();
    let seen: Seen = Arc::default();
    let mut b = bind(B, durable(&dir, "b")).await;
    let mut rx = receive(b.clone(), seen.clone());
    let mut a = bind(A, durable(&dir, "a")).await;
    a.add_peer(&identity(B).public_key(), b.local_addr())
        .unwrap();

    let mut accepted: HashSet<u64> = HashSet::new();
    let mut maybe: HashSet<u64> = HashSet::new();
    let mut k = 0;
    let received = |seen: &Seen| seen.lock().unwrap().len() as u64;
    let wait_until = |seen: Seen, n: u64| async move {
        tokio::time::timeout(Duration::from_secs(30), async {
            while (seen.lock().unwrap().len() as u64) < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .is_ok()
    };
    for phase in 0..3 {
        // Send a third of the stream, without waiting for delivery.
        let until = N * (phase + 1) / 3;
        while k < until {
            match a.send(id(B), message(k)).await {
                Ok(_) => accepted.insert(k),
                Err(e) => panic!("send {k}: {e}"),
            };
            k += 1;
        }
        match phase {
            0 => {
                // The receiver stops once part of it arrived, holding
                // consumed slots and messages not yet handed over.
                assert!(
                    wait_until(seen.clone(), until / 2).await,
                    "phase 0: {} of {} arrived; A {:?}; B {:?}",
                    received(&seen),
                    until / 2,
                    a.stats(),
                    b.stats()
                );
                b.close().await;
                rx.await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                b = bind(B, durable(&dir, "b")).await;
                rx = receive(b.clone(), seen.clone());
                a.add_peer(&identity(B).public_key(), b.local_addr())
                    .unwrap();
            }
            1 => {
                // The sender stops with queued messages and unacknowledged
                // tokens; a send in progress may or may not have been
                // accepted.
                let extra = {
                    let a = a.clone();
                    tokio::spawn(async move { a.send(id(B), message(N)).await })
                };
                a.close().await;
                if let Ok(Ok(_)) = extra.await {
                    accepted.insert(N);
                } else {
                    maybe.insert(N);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                a = bind(A, durable(&dir, "a")).await;
                a.add_peer(&identity(B).public_key(), b.local_addr())
                    .unwrap();
            }
            _ => {}
        }
    }
    assert!(
        wait_until(seen.clone(), accepted.len() as u64).await,
        "end: {} of {} arrived (missing {:?}); A {:?}; B {:?}",
        received(&seen),
        accepted.len(),
        accepted
            .iter()
            .filter(|k| !seen.lock().unwrap().contains_key(k))
            .collect::<Vec<_>>(),
        a.stats(),
        b.stats()
    );
    // Outcomes of this life: every message still unacknowledged when the
    // sender restarted, and every later one, is reported delivered.
    let outcome = tokio::time::timeout(Duration::from_secs(10), a.next_outcome())
        .await
        .expect("an outcome")
        .expect("driver running");
    assert_eq!(outcome.1, Outcome::Delivered);
    // Give stragglers (duplicates, if any) time to show.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = seen.lock().unwrap().clone();
    let missing: Vec<u64> = accepted
        .iter()
        .filter(|k| !seen.contains_key(k))
        .copied()
        .collect();
    assert!(missing.is_empty(), "never received: {missing:?}");
    for k in &accepted {
        assert_eq!(seen.get(k), Some(&1), "message {k}");
    }
    for (k, n) in &seen {
        assert!(
            accepted.contains(k) || maybe.contains(k),
            "message {k} never sent"
        );
        assert!(*n <= 1, "message {k} received {n} times");
    }
    assert!(received(&Arc::new(Mutex::new(seen))) >= N);
    a.close().await;
    b.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
