//! The DATA interceptor over real nodes on loopback.

use std::time::Duration;

use braid_node::data::{DataConfig, DataInterceptor, FlowConfig, LearnerConfig, PolicyConfig, Ratio, SelectionConfig};
use braid_node::{BasicAddress, BasicHeader, Header, Message, Node, NodeConfig, Transport};

mod common;

async fn pair() -> (Node<BasicHeader>, Node<BasicHeader>) {
    let a = Node::bind("127.0.0.1:0".parse().unwrap(), common::base()).await.unwrap();
    let b = Node::bind("127.0.0.1:0".parse().unwrap(), common::base()).await.unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_ratio_with_pattern_selection_splits_exactly() {
    let (a, b) = pair().await;
    // Spilling off: the split follows the pattern exactly, whatever the
    // transports' speed.
    let cfg = DataConfig {
        policy: PolicyConfig::Static(Ratio::new(1, 4)),
        flow: FlowConfig { spill: false, ..Default::default() },
        ..Default::default()
    };
    let data = DataInterceptor::new(a.clone(), cfg).unwrap();
    let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Data);
    const N: usize = 400;
    for i in 0..N {
        data.send(Message::raw(h.clone(), vec![i as u8; 10_000])).await.unwrap();
    }
    // Non-data messages pass straight through.
    let ctl = BasicHeader::new(h.src, h.dst, Transport::Udp);
    data.send(Message::raw(ctl, &b"ctl"[..])).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), data.flush()).await.expect("flush");
    let s = data.stats(b.local_addr()).unwrap();
    assert_eq!((s.tcp_messages, s.braid_messages, s.failed), (300, 100, 0));
    assert_eq!(s.bytes, (N * 10_000) as u64);
    let mut per = [0usize; 3];
    for _ in 0..N + 1 {
        let m = tokio::time::timeout(Duration::from_secs(20), b.recv()).await.unwrap().unwrap();
        match m.header().transport() {
            Transport::Tcp => per[0] += 1,
            Transport::Braid => per[1] += 1,
            Transport::Udp => per[2] += 1,
            t => panic!("unresolved transport {t} arrived"),
        }
    }
    assert_eq!(per, [300, 100, 1]);
    // Every byte is acknowledged in the end (what the reward counts).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while data.stats(b.local_addr()).unwrap().delivered_bytes < s.bytes && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(data.stats(b.local_addr()).unwrap().delivered_bytes, (N * 10_000) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_learner_runs_episodes_on_a_live_stream() {
    let (a, b) = pair().await;
    let cfg = DataConfig {
        policy: PolicyConfig::Learner(LearnerConfig { episode: Duration::from_millis(100), seed: 3, ..Default::default() }),
        selection: SelectionConfig::Random { seed: 1 },
        flow: FlowConfig::default(),
        queue: 64,
    };
    let data = DataInterceptor::new(a.clone(), cfg).unwrap();
    let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Data);
    let drain = tokio::spawn(async move {
        let mut n = 0usize;
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(3), b.recv()).await {
            n += 1;
        }
        n
    });
    let start = tokio::time::Instant::now();
    let mut sent = 0usize;
    while start.elapsed() < Duration::from_millis(1500) {
        data.send(Message::raw(h.clone(), vec![0u8; 16_000])).await.unwrap();
        sent += 1;
    }
    tokio::time::timeout(Duration::from_secs(20), data.flush()).await.expect("flush");
    let s = data.stats(h.dst.socket).unwrap();
    assert!(s.episodes.len() >= 8, "{} episodes", s.episodes.len());
    assert!(s.episodes.iter().filter(|e| e.reward.is_some()).count() >= 5, "{:?}", s.episodes);
    assert!(s.episodes.iter().all(|e| (-1.0..=1.0).contains(&e.ratio)));
    assert_eq!(s.tcp_messages + s.braid_messages, sent as u64);
    assert_eq!(drain.await.unwrap(), sent);
}

/// The stream travels on channels of its own (the bulk lane): a TCP
/// message to the same destination is taken by the kernel while the
/// stream's TCP channel is stalled (the receiver stopped reading). On a
/// shared channel it would wait behind the stalled stream forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_messages_do_not_queue_behind_a_stalled_stream() {
    let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse().unwrap(), common::base()).await.unwrap();
    // A receiver that reads nothing and queues at most 4 messages: the
    // stream backs up into the kernels and then into the sending node.
    let b: Node<BasicHeader> =
        Node::bind("127.0.0.1:0".parse().unwrap(), NodeConfig { recv_queue: 4, ..common::base() }).await.unwrap();
    let cfg = DataConfig { policy: PolicyConfig::Static(Ratio::new(0, 1)), ..Default::default() };
    let data = std::sync::Arc::new(DataInterceptor::new(a.clone(), cfg).unwrap());
    let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Data);
    const N: u64 = 2_000;
    let feeder = {
        let (data, h) = (data.clone(), h.clone());
        tokio::spawn(async move {
            for _ in 0..N {
                if data.send(Message::raw(h.clone(), vec![7u8; 64 << 10])).await.is_err() {
                    break;
                }
            }
        })
    };
    // Wait until the stream is stalled: no byte taken for 1 s.
    let mut last = u64::MAX;
    let stalled = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = data.stats(b.local_addr()).map_or(0, |s| s.bytes);
        if now == last || feeder.is_finished() {
            break now;
        }
        last = now;
    };
    assert!(stalled < N * (64 << 10), "the stream never stalled ({stalled} bytes taken)");
    let ctl = BasicHeader::new(h.src, h.dst, Transport::Tcp);
    let mut n = a.send_notify(Message::raw(ctl, &b"ping"[..])).await.unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(10), n.sent()).await;
    assert!(matches!(sent, Ok(Ok(()))), "the control message waited behind the stream: {sent:?}");
    assert!(data.stats(b.local_addr()).unwrap().tcp_messages < N, "the stream was still stalled");
    assert_eq!(a.open_channels(), 2, "one TCP channel for the stream, one for the application");
    feeder.abort();
    drop(b);
}
