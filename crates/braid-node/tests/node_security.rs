//! The node secure by default (issue 17 items 3–5): two nodes with their
//! own identities exchange messages over TCP (TLS 1.3), Braid (Noise) and
//! Exon (Noise sessions, Exon keys endorsed by the node keys) when their
//! known hosts list each other; an untrusted peer is refused on all three,
//! the refusal naming its key; files and TOFU; `InsecureNoAuth`.

use std::time::Duration;

use braid_identity::TrustPolicy;
use braid_node::{BasicAddress, BasicHeader, DeliveryStatus, FailReason, Header, Message, Node, NodeAuth, NodeConfig, Transport};

mod common;
use common::{identity, keys};

const LIMIT: Duration = Duration::from_secs(20);

const SECURED: [Transport; 3] = [Transport::Tcp, Transport::Braid, Transport::Exon];

fn config(security: NodeAuth) -> NodeConfig {
    NodeConfig { security, connect_timeout: Duration::from_secs(5), transports: SECURED.to_vec(), ..NodeConfig::default() }
}

async fn node(security: NodeAuth) -> Node<BasicHeader> {
    Node::bind("127.0.0.1:0".parse().unwrap(), config(security)).await.expect("bind")
}

fn header(from: &Node<BasicHeader>, to: &Node<BasicHeader>, t: Transport) -> BasicHeader {
    BasicHeader::new(BasicAddress::new(from.local_addr()), BasicAddress::new(to.local_addr()), t)
}

/// Sends `text` from `a` to `b` over `t` and returns the outcome.
async fn outcome(a: &Node<BasicHeader>, b: &Node<BasicHeader>, t: Transport, text: &'static [u8]) -> DeliveryStatus {
    let mut n = a.send_notify(Message::raw(header(a, b, t), text)).await.unwrap();
    tokio::time::timeout(LIMIT, n.outcome()).await.expect("outcome in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_know_each_other_talk_over_tls_and_braid() {
    let (ia, ib) = (identity(1), identity(2));
    // Known by IP: a node's ports differ per transport, and senders' TCP ports are ephemeral.
    let a = node(keys(ia.clone(), &format!("127.0.0.1 {}", ib.public_key()))).await;
    let b = node(keys(ib.clone(), &format!("127.0.0.1 {}", ia.public_key()))).await;
    assert_eq!(a.public_key(), Some(ia.public_key()));
    assert_eq!(a.trust_policy(), TrustPolicy::KnownHosts);
    for t in SECURED {
        assert_eq!(outcome(&a, &b, t, b"ping").await, DeliveryStatus::Delivered, "{t}");
        let m = tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert_eq!(&m.raw_bytes().unwrap()[..], b"ping");
        assert_eq!(m.header().transport(), t);
        // And back, on the channel b opens to a.
        b.send(Message::raw(header(&b, &a, t), &b"pong"[..])).await.unwrap();
        let m = tokio::time::timeout(LIMIT, a.recv()).await.unwrap().unwrap();
        assert_eq!(&m.raw_bytes().unwrap()[..], b"pong");
    }
    // Large messages over TLS: many records per frame, delivery still confirmed exactly.
    let mut notes = Vec::new();
    for _ in 0..20 {
        notes.push(a.send_notify(Message::raw(header(&a, &b, Transport::Tcp), vec![7u8; 300_000])).await.unwrap());
    }
    for mut n in notes {
        assert_eq!(tokio::time::timeout(LIMIT, n.outcome()).await.unwrap(), DeliveryStatus::Delivered);
    }
    for _ in 0..20 {
        let m = tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert_eq!(m.raw_bytes().unwrap().len(), 300_000);
    }
}

fn failed_reason(status: &DeliveryStatus) -> String {
    match status {
        DeliveryStatus::Failed(FailReason::ConnectFailed { reason, .. }) => reason.clone(),
        DeliveryStatus::Failed(other) => other.to_string(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_receiver_is_refused_on_tcp_and_braid() {
    let (ia, ib) = (identity(1), identity(2));
    // a knows no one; b trusts a.
    let a = node(keys(ia.clone(), "")).await;
    let b = node(keys(ib.clone(), &format!("127.0.0.1 {}", ia.public_key()))).await;
    let tcp = outcome(&a, &b, Transport::Tcp, b"secret").await;
    let reason = failed_reason(&tcp);
    assert!(reason.contains(&ib.public_key().to_string()), "{reason}");
    let braid = outcome(&a, &b, Transport::Braid, b"secret").await;
    assert!(matches!(braid, DeliveryStatus::Failed(_)), "{braid:?}");
    // Exon: b's Exon key is endorsed by b's node key, which a does not know.
    let exon = outcome(&a, &b, Transport::Exon, b"secret").await;
    let reason = failed_reason(&exon);
    assert!(reason.contains(&ib.public_key().to_string()), "{reason}");
    // Nothing reached b.
    assert!(tokio::time::timeout(Duration::from_millis(300), b.recv()).await.is_err());
    let s = b.stats();
    assert_eq!(s.tcp.messages_received + s.braid.messages_received + s.exon.messages_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_sender_is_refused_on_tcp_and_braid() {
    let (ia, ib) = (identity(1), identity(2));
    // a trusts b; b knows no one.
    let a = node(keys(ia.clone(), &format!("127.0.0.1 {}", ib.public_key()))).await;
    let b = node(keys(ib.clone(), "")).await;
    for t in [Transport::Tcp, Transport::Braid] {
        let status = outcome(&a, &b, t, b"secret").await;
        assert!(matches!(status, DeliveryStatus::Failed(_)), "{t}: {status:?}");
    }
    // Exon: b refuses a's handshakes (a's endorsing key is unknown to it),
    // keeping nothing for a; a keeps trying, and nothing is delivered.
    let mut exon = a.send_notify(Message::raw(header(&a, &b, Transport::Exon), &b"secret"[..])).await.unwrap();
    if let Ok(status) = tokio::time::timeout(Duration::from_millis(1500), exon.outcome()).await {
        assert!(matches!(status, DeliveryStatus::Failed(_)), "{status:?}");
    }
    assert_eq!(b.stats().exon.messages_received, 0);
    // TCP: b's refusal reached a's connect (no message was sent, none acknowledged).
    let status = outcome(&a, &b, Transport::Tcp, b"again").await;
    assert!(failed_reason(&status).contains("refused"), "{status:?}");
    assert!(tokio::time::timeout(Duration::from_millis(300), b.recv()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_files_and_tofu() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let files = |dir: &std::path::Path| {
        NodeAuth::Files(braid_net::NodeSecurity {
            identity: Some(dir.join("identity")),
            known_hosts: Some(dir.join("known_hosts")),
            policy: TrustPolicy::Tofu,
        })
    };
    let a = node(files(da.path())).await;
    let b = node(files(db.path())).await;
    assert!(da.path().join("identity").exists());
    assert_ne!(a.public_key(), b.public_key());
    assert_eq!(outcome(&a, &b, Transport::Tcp, b"hi").await, DeliveryStatus::Delivered);
    assert_eq!(outcome(&a, &b, Transport::Braid, b"hi").await, DeliveryStatus::Delivered);
    assert_eq!(outcome(&a, &b, Transport::Exon, b"hi").await, DeliveryStatus::Delivered);
    let learned = std::fs::read_to_string(da.path().join("known_hosts")).unwrap();
    assert!(learned.contains(&b.public_key().unwrap().to_string()), "{learned}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_no_auth_turns_it_all_off_and_udp_needs_asking() {
    let a = node(NodeAuth::insecure()).await;
    let b = node(NodeAuth::insecure()).await;
    assert_eq!(a.public_key(), None);
    for t in [Transport::Tcp, Transport::Braid] {
        assert_eq!(outcome(&a, &b, t, b"plain").await, DeliveryStatus::Delivered, "{t}");
        tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    }
    // UDP is refused on an authenticated node unless asked for by name.
    let udp = NodeConfig { transports: vec![Transport::Udp], ..config(keys(identity(1), "")) };
    let err = Node::<BasicHeader>::bind("127.0.0.1:0".parse().unwrap(), udp.clone()).await.unwrap_err();
    assert!(err.to_string().contains("allow_unauthenticated_udp"), "{err}");
    Node::<BasicHeader>::bind("127.0.0.1:0".parse().unwrap(), NodeConfig { allow_unauthenticated_udp: true, ..udp }).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_garbage_is_refused_and_the_node_keeps_working() {
    use tokio::io::AsyncWriteExt;
    let id = identity(1);
    let b = node(keys(id.clone(), "")).await;
    let mut raw = tokio::net::TcpStream::connect(b.local_addr()).await.unwrap();
    raw.write_all(&5u32.to_be_bytes()).await.unwrap();
    raw.write_all(b"\x09abcd plain frames are not TLS").await.unwrap();
    raw.flush().await.unwrap();
    // Another node of the same identity (trusted as itself) still gets through.
    let a = node(keys(id, "")).await;
    assert_eq!(outcome(&a, &b, Transport::Tcp, b"ok").await, DeliveryStatus::Delivered);
    let m = tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    assert_eq!(&m.raw_bytes().unwrap()[..], b"ok");
    assert_eq!(b.stats().tcp.messages_received, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_a_key_file_are_distinct_exon_peers() {
    // Both trust only their own key (a node's own key is always trusted).
    // Their Exon keys are endorsed by that one node key but are their own,
    // so neither takes the other's messages for its own.
    let id = identity(3);
    let a = node(keys(id.clone(), "")).await;
    let b = node(keys(id, "")).await;
    assert_eq!(outcome(&a, &b, Transport::Exon, b"to b").await, DeliveryStatus::Delivered);
    let m = tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    assert_eq!(&m.raw_bytes().unwrap()[..], b"to b");
    assert_eq!(outcome(&b, &a, Transport::Exon, b"to a").await, DeliveryStatus::Delivered);
    let m = tokio::time::timeout(LIMIT, a.recv()).await.unwrap().unwrap();
    assert_eq!(&m.raw_bytes().unwrap()[..], b"to a");
    assert_eq!((a.stats().exon.messages_received, b.stats().exon.messages_received), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_delivered_means_acknowledged_by_the_peers_kernel() {
    // A TLS peer that completes the handshake and then never reads: its
    // receive buffer fills, its kernel stops acknowledging, and the last
    // messages must stay `Sent` although TLS adds bytes of its own.
    let (ia, ib) = (identity(1), identity(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let trust_a = std::sync::Arc::new(braid_identity::TrustStore::new(
        TrustPolicy::KnownHosts,
        braid_identity::KnownHosts::parse(&format!("* {}", ia.public_key()), "test").unwrap(),
    ));
    let server = braid_tls::TlsSettings::new(&ib, trust_a).unwrap();
    let holder = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let held = server.accept(tcp).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(held);
    });
    let a = node(keys(ia, &format!("127.0.0.1 {}", ib.public_key()))).await;
    let dst = BasicAddress::new(format!("127.0.0.1:{port}").parse().unwrap());
    let mut notes = Vec::new();
    for n in 0..40_000u32 {
        let h = BasicHeader::new(BasicAddress::new(a.local_addr()), dst, Transport::Tcp);
        let body = vec![(n % 251) as u8; 4_000];
        match tokio::time::timeout(Duration::from_millis(300), a.send_notify(Message::raw(h, body))).await {
            Ok(r) => notes.push(r.unwrap()),
            Err(_) => break, // backpressure: the channel queue is full
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = notes.iter().rev().map(|n| n.status()).find(|s| *s != DeliveryStatus::Queued);
    assert_eq!(last, Some(DeliveryStatus::Sent), "the last message written cannot have been acknowledged");
    assert!(notes.iter().any(|n| n.status() == DeliveryStatus::Delivered), "the first ones were acknowledged");
    holder.abort();
}

/// The cost of TLS on the node's TCP channels for the report (`cargo test --release -p
/// braid-node --test node_security tcp_throughput_tls_and_plain -- --ignored --nocapture`):
/// 256 MiB in 64 KiB messages over loopback, TLS 1.3 and plain TCP in the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn tcp_throughput_tls_and_plain() {
    let id = identity(1);
    let mut rates = Vec::new();
    for round in 0..3 {
        for tls in [false, true] {
            let auth = || if tls { keys(id.clone(), "") } else { NodeAuth::insecure() };
            let a = node(auth()).await;
            let b = node(auth()).await;
            let n = 4096;
            let start = std::time::Instant::now();
            let reader = {
                let b = b.clone();
                tokio::spawn(async move {
                    for _ in 0..n {
                        b.recv().await.unwrap();
                    }
                })
            };
            let mut last = None;
            for _ in 0..n {
                last = Some(a.send_notify(Message::raw(header(&a, &b, Transport::Tcp), vec![1u8; 64 << 10])).await.unwrap());
            }
            reader.await.unwrap();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(last.unwrap().outcome().await, DeliveryStatus::Delivered);
            let mbps = (n * (64 << 10)) as f64 / secs / 1e6;
            eprintln!("round {round} {}: {mbps:.0} MB/s", if tls { "TLS 1.3" } else { "plain TCP" });
            rates.push((tls, mbps));
            a.close().await;
            b.close().await;
        }
    }
    let mean = |tls: bool| rates.iter().filter(|r| r.0 == tls).map(|r| r.1).sum::<f64>() / 3.0;
    eprintln!("TLS / plain: {:.2}", mean(true) / mean(false));
}
