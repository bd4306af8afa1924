//! Exon over real UDP sockets on 127.0.0.1: many messages both ways with
//! backpressure, one larger than a datagram, every one delivered once and
//! acknowledged; the durable clock file moves forward across restarts.
//! Bounded in count and time.

use std::collections::HashMap;
use std::time::Duration;

use braid_exon::clock::{ClockStore, FileClockStore};
use std::sync::Arc;

use braid_exon::NodeId;
use braid_exon_net::{
    AcceptAnyKey, ClockFile, ExonSecurity, ExonSocket, Identity, Outcome, SocketConfig,
};

/// The fixed identity of test node `n`.
fn identity(n: u64) -> Identity {
    Identity::from_seed(&[n as u8; 32])
}

/// The node ID of test node `n` (derived from its key).
fn id(n: u64) -> NodeId {
    NodeId::of(&identity(n).public_key())
}

/// Binds test node `n` on loopback, authenticated (any peer key accepted).
async fn bind(n: u64, mut cfg: SocketConfig) -> ExonSocket {
    cfg.security = ExonSecurity::Authenticated {
        identity: identity(n),
        verifier: Arc::new(AcceptAnyKey),
    };
    ExonSocket::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap()
}

/// Tells `a` where `b` is, by `b`'s key.
fn know(a: &ExonSocket, b: &ExonSocket) {
    a.add_peer(&b.public_key().unwrap(), b.local_addr())
        .unwrap();
}
use bytes::Bytes;

fn message(from: u64, k: u64, len: usize) -> Bytes {
    let mut v = vec![(k % 251) as u8; len.max(16)];
    v[..8].copy_from_slice(&from.to_be_bytes());
    v[8..16].copy_from_slice(&k.to_be_bytes());
    Bytes::from(v)
}

fn config() -> SocketConfig {
    let mut cfg = SocketConfig::default();
    cfg.node.machine.max_outstanding = 64; // backpressure after 64 in flight
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_both_ways_exactly_once() {
    let a = bind(1, config()).await;
    let b = bind(2, config()).await;
    know(&a, &b);
    know(&b, &a);
    let (a, b) = (std::sync::Arc::new(a), std::sync::Arc::new(b));
    const N_AB: u64 = 3_000;
    const N_BA: u64 = 500;
    let run = async {
        let sa = {
            let a = a.clone();
            tokio::spawn(async move {
                for k in 0..N_AB {
                    let len = if k == 7 { 1 << 20 } else { 1024 };
                    a.send(id(2), message(1, k, len)).await.unwrap();
                }
            })
        };
        let sb = {
            let b = b.clone();
            tokio::spawn(async move {
                for k in 0..N_BA {
                    b.send(id(1), message(2, k, 64)).await.unwrap();
                }
            })
        };
        let check = |sock: std::sync::Arc<ExonSocket>, from: u64, n: u64| async move {
            let mut seen = HashMap::new();
            while (seen.len() as u64) < n {
                let (peer, m) = sock.recv().await.unwrap();
                assert_eq!(peer, id(from));
                let k = u64::from_be_bytes(m[8..16].try_into().unwrap());
                assert_eq!(m, message(from, k, m.len()));
                *seen.entry(k).or_insert(0u32) += 1;
            }
            assert!(seen.values().all(|&c| c == 1));
        };
        let outcomes = |sock: std::sync::Arc<ExonSocket>, n: u64| async move {
            for _ in 0..n {
                assert_eq!(sock.next_outcome().await.unwrap().1, Outcome::Delivered);
            }
        };
        let (r1, r2, r3, r4) = tokio::join!(
            check(b.clone(), 1, N_AB),
            check(a.clone(), 2, N_BA),
            outcomes(a.clone(), N_AB),
            outcomes(b.clone(), N_BA)
        );
        let _ = (r1, r2, r3, r4);
        sa.await.unwrap();
        sb.await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("loopback exchange took over 60 s");
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn the_clock_file_moves_forward_across_restarts() {
    let dir = std::env::temp_dir().join(format!("exon-net-clock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("clock");
    let _ = std::fs::remove_file(&path);
    let mut last = 0;
    for life in 0..2 {
        let cfg = SocketConfig {
            clock: ClockFile::Path(path.clone()),
            ..config()
        };
        let a = bind(1, cfg.clone()).await;
        // b with the default security (a fresh identity), found by address.
        let b = ExonSocket::bind("127.0.0.1:0".parse().unwrap(), SocketConfig::default())
            .await
            .unwrap();
        let b_id = a.connect(b.local_addr()).await.unwrap();
        assert_eq!(Some(b_id), b.public_key().map(|k| NodeId::of(&k)));
        a.send(b_id, Bytes::from_static(b"hello")).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), b.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got.1[..], b"hello");
        a.close().await;
        b.close().await;
        let now = FileClockStore::new(&path).load().unwrap();
        assert!(now > last, "life {life}: clock {now} not above {last}");
        last = now;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Many sends issued at once (more than the driver takes in per step, some
/// parked behind a full window) all get an answer and arrive once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_concurrent_sends_all_answered() {
    let a = std::sync::Arc::new(bind(1, config()).await);
    let b = bind(2, config()).await;
    know(&a, &b);
    const N: u64 = 1_000;
    let sends: Vec<_> = (0..N)
        .map(|k| {
            let a = a.clone();
            tokio::spawn(async move { a.send(id(2), message(1, k, 64)).await })
        })
        .collect();
    let run = async {
        let mut seen = HashMap::new();
        while (seen.len() as u64) < N {
            let (_, m) = b.recv().await.unwrap();
            let k = u64::from_be_bytes(m[8..16].try_into().unwrap());
            *seen.entry(k).or_insert(0u32) += 1;
        }
        assert!(seen.values().all(|&c| c == 1));
        for s in sends {
            s.await.unwrap().expect("every send answered");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("all sends answered and delivered within 30 s");
    a.close().await;
    b.close().await;
}

/// Batches both ways: `send_many` hands over thousands of small messages
/// (several batches parked behind a full window), they share datagrams,
/// arrive once each through `recv_many`, and every outcome comes through
/// `outcomes_many`. With datagrams held to 1,400 bytes (no loopback MTU),
/// the count of datagrams shows the packing; with the loopback MTU, fewer
/// still. A message over the limit refuses its whole batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_share_datagrams_and_arrive_once() {
    for loopback_mtu in [false, true] {
        let cfg = SocketConfig {
            loopback_mtu,
            ..SocketConfig::default()
        };
        let mut small = cfg.clone();
        small.node.machine.max_outstanding = 1_000;
        let a = bind(1, small).await;
        let b = bind(2, cfg).await;
        know(&a, &b);
        let too_big = vec![message(1, 0, 8), Bytes::from(vec![0u8; (16 << 20) + 1])];
        assert!(matches!(
            a.send_many(id(2), too_big).await,
            Err(braid_exon_net::Error::Send(
                braid_exon::SendError::TooLarge(_)
            ))
        ));
        const N: u64 = 20_000;
        const BATCH: u64 = 2_500;
        let run = async {
            let sender = async {
                let mut ids = Vec::new();
                for first in (0..N).step_by(BATCH as usize) {
                    let msgs = (first..first + BATCH).map(|k| message(1, k, 64)).collect();
                    ids.extend(a.send_many(id(2), msgs).await.unwrap());
                }
                ids
            };
            let receiver = async {
                let mut seen = vec![0u32; N as usize];
                let (mut got, mut batch) = (0, Vec::new());
                while got < N {
                    batch.clear();
                    assert!(b.recv_many(&mut batch).await > 0);
                    for (from, m) in &batch {
                        assert_eq!((*from, m.len()), (id(1), 64));
                        seen[u64::from_be_bytes(m[8..16].try_into().unwrap()) as usize] += 1;
                        got += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "each message exactly once");
            };
            let (ids, ()) = tokio::join!(sender, receiver);
            assert_eq!(ids.len() as u64, N);
            let (mut outcomes, mut batch) = (0, Vec::new());
            while outcomes < N {
                batch.clear();
                assert!(a.outcomes_many(&mut batch).await > 0);
                assert!(batch.iter().all(|(_, o)| *o == Outcome::Delivered));
                outcomes += batch.len() as u64;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("all delivered within 60 s");
        let st = a.stats();
        // 17 messages of 64 bytes fill a 1,400-byte datagram; allow for
        // requests, retransmissions and partly filled datagrams.
        assert!(
            st.datagrams_sent * 8 <= N,
            "loopback_mtu {loopback_mtu}: {} datagrams for {N} messages",
            st.datagrams_sent
        );
        a.close().await;
        b.close().await;
    }
}

/// Binds a socket whose Exon key (fresh at bind) is endorsed by node key
/// `node`, trusting only the node keys in `trusted`.
async fn bind_endorsed(node: u64, trusted: &[u64]) -> ExonSocket {
    let trusted: Vec<_> = trusted.iter().map(|&n| identity(n).public_key()).collect();
    let verifier = move |_: std::net::SocketAddr, key: &braid_exon_net::PublicKey| {
        if trusted.contains(key) { Ok(()) } else { Err(format!("unknown key {key}")) }
    };
    let mut cfg = config();
    cfg.security = ExonSecurity::Endorsed { node: identity(node), verifier: Arc::new(verifier) };
    ExonSocket::bind("127.0.0.1:0".parse().unwrap(), cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_are_judged_by_the_node_key_that_endorses_their_exon_key() {
    // a and a2 share node key 1 (one key file, two processes); b is node 2;
    // c is node 3, whom nobody trusts.
    let a = bind_endorsed(1, &[2]).await;
    let a2 = bind_endorsed(1, &[2]).await;
    let b = bind_endorsed(2, &[1]).await;
    let c = bind_endorsed(3, &[1, 2]).await;
    // Exon IDs are the sockets' own, not the shared node key's.
    assert_ne!(a.id(), a2.id());
    assert_ne!(a.id(), id(1));
    for sender in [&a, &a2] {
        let to_b = sender.connect(b.local_addr()).await.expect("b's node key is trusted");
        assert_eq!(to_b, b.id());
        let m = sender.send(to_b, Bytes::from_static(b"hello")).await.unwrap();
        assert_eq!(tokio::time::timeout(Duration::from_secs(10), sender.next_outcome()).await.unwrap(), Some((m, Outcome::Delivered)));
        let (from, msg) = tokio::time::timeout(Duration::from_secs(10), b.recv()).await.unwrap().unwrap();
        assert_eq!((from, &msg[..]), (sender.id(), &b"hello"[..]));
    }
    // a refuses c at discovery: c's Exon key is endorsed by an unknown node key.
    let err = a.connect(c.local_addr()).await.unwrap_err().to_string();
    assert!(err.contains(&identity(3).public_key().to_string()), "{err}");
    // c trusts b, but b refuses c's handshakes: nothing is delivered.
    let to_b = c.connect(b.local_addr()).await.expect("c trusts b");
    c.send(to_b, Bytes::from_static(b"intruder")).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(1500), b.recv()).await.is_err());
    assert!(b.stats().security.refused >= 1, "{:?}", b.stats().security);
}
