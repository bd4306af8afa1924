//! Message batches through the node (issue 23): over TCP, Braid, Exon, UDP
//! and to this host, a batch arrives complete and in order; batches and
//! messages sent alone keep their order on one channel, whichever of
//! `recv`, `recv_many` and `recv_batch` reads them; a batch too large for
//! the transport's unit is split, a body too large for it refused before
//! anything is sent; a malformed batch frame is dropped and counted.

use std::time::Duration;

use braid_node::{
    BasicAddress, BasicHeader, Header, Message, MessageBatch, Node, NodeConfig, SendError, Transport, VnodeId,
};

mod common;

const LIMIT: Duration = Duration::from_secs(20);

async fn node(config: NodeConfig) -> Node<BasicHeader> {
    Node::bind("127.0.0.1:0".parse().unwrap(), config).await.expect("bind")
}

fn addr(n: &Node<BasicHeader>) -> BasicAddress {
    BasicAddress::new(n.local_addr())
}

fn all() -> NodeConfig {
    NodeConfig { transports: vec![Transport::Udp, Transport::Tcp, Transport::Braid, Transport::Exon], ..common::base() }
}

/// Body of message `seq`: its number, then `pad` bytes of it.
fn body(seq: u32, pad: usize) -> Vec<u8> {
    let mut b = seq.to_le_bytes().to_vec();
    b.extend(std::iter::repeat_n(seq as u8, pad));
    b
}

fn seq_of(body: &[u8]) -> u32 {
    let b: [u8; 4] = body[..4].try_into().expect("a body starts with its number");
    let seq = u32::from_le_bytes(b);
    assert!(body[4..].iter().all(|&x| x == seq as u8), "body of {seq} damaged");
    seq
}

/// What the sender sends, in order: messages alone and batches, numbered
/// 0, 1, 2, … across both.
enum Piece {
    Alone(u32),
    Batch(std::ops::Range<u32>),
}

fn pieces() -> Vec<Piece> {
    vec![Piece::Alone(0), Piece::Batch(1..51), Piece::Alone(51), Piece::Alone(52), Piece::Batch(53..253), Piece::Batch(253..254), Piece::Alone(254)]
}

const TOTAL: u32 = 255;

async fn send_pieces(a: &Node<BasicHeader>, h: &BasicHeader, pad: usize) {
    for p in pieces() {
        match p {
            Piece::Alone(s) => a.send(Message::raw(h.clone(), body(s, pad))).await.unwrap(),
            Piece::Batch(r) => {
                let mut b = MessageBatch::builder(h.clone());
                for s in r {
                    b.push(&body(s, pad));
                }
                a.send_batch(b.build()).await.unwrap();
            }
        }
    }
}

/// Receives everything with `recv_batch`: each batch's bodies in order.
async fn recv_batches(b: &Node<BasicHeader>, t: Transport) -> Vec<Vec<u32>> {
    let mut got = Vec::new();
    let mut n = 0;
    while n < TOTAL as usize {
        let batch = tokio::time::timeout(LIMIT, b.recv_batch()).await.expect("receive timed out").expect("node closed");
        assert_eq!(batch.header().transport(), t);
        let seqs: Vec<u32> = batch.iter().map(seq_of).collect();
        assert_eq!(seqs.len(), batch.len());
        n += seqs.len();
        got.push(seqs);
    }
    got
}

/// Receives everything one message at a time, alternating `recv` and
/// `recv_many` (which split batches).
async fn recv_singly(b: &Node<BasicHeader>) -> Vec<u32> {
    let mut got = Vec::new();
    let mut buf = Vec::new();
    while got.len() < TOTAL as usize {
        if got.len() % 2 == 0 {
            let m = tokio::time::timeout(LIMIT, b.recv()).await.expect("receive timed out").expect("node closed");
            got.push(seq_of(m.raw_bytes().unwrap()));
        } else {
            buf.clear();
            let n = tokio::time::timeout(LIMIT, b.recv_many(&mut buf, 7)).await.expect("receive timed out");
            assert!((1..=7).contains(&n));
            got.extend(buf.iter().map(|m| seq_of(m.raw_bytes().unwrap())));
        }
    }
    got
}

/// Over an ordered transport (and to this host): everything in the order
/// sent, whichever way it is read; batches arrive whole (a batch of the
/// sender's is one batch of the receiver's, a message sent alone a batch
/// of one).
async fn ordered(t: Transport, to_self: bool) {
    let a = node(all()).await;
    let b = if to_self { a.clone() } else { node(all()).await };
    let h = BasicHeader::new(addr(&a), addr(&b), t);
    send_pieces(&a, &h, 60).await;
    let batches = recv_batches(&b, t).await;
    let want: Vec<Vec<u32>> = pieces()
        .into_iter()
        .map(|p| match p {
            Piece::Alone(s) => vec![s],
            Piece::Batch(r) => r.collect(),
        })
        .collect();
    assert_eq!(batches, want, "{t}");
    send_pieces(&a, &h, 60).await;
    assert_eq!(recv_singly(&b).await, (0..TOTAL).collect::<Vec<_>>(), "{t}");
    // Counted as messages, not frames.
    if !to_self {
        assert_eq!(b.stats().transport(t).messages_received, 2 * TOTAL as u64, "{t}");
        assert_eq!(a.stats().transport(t).messages_sent, 2 * TOTAL as u64, "{t}");
    } else {
        assert_eq!(a.stats().local_deliveries, 2 * TOTAL as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_batches_arrive_whole_and_in_order() {
    ordered(Transport::Tcp, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braid_batches_arrive_whole_and_in_order() {
    ordered(Transport::Braid, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_batches_arrive_whole_and_in_order() {
    ordered(Transport::Braid, true).await;
}

/// Exon is unordered: each batch arrives whole and in its own order, and
/// everything arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exon_batches_arrive_whole() {
    let a = node(all()).await;
    let b = node(all()).await;
    let h = BasicHeader::new(addr(&a), addr(&b), Transport::Exon);
    send_pieces(&a, &h, 60).await;
    let mut batches = recv_batches(&b, Transport::Exon).await;
    batches.sort();
    let mut want: Vec<Vec<u32>> = pieces()
        .into_iter()
        .map(|p| match p {
            Piece::Alone(s) => vec![s],
            Piece::Batch(r) => r.collect(),
        })
        .collect();
    want.sort();
    assert_eq!(batches, want);
    send_pieces(&a, &h, 60).await;
    let mut got = recv_singly(&b).await;
    got.sort();
    assert_eq!(got, (0..TOTAL).collect::<Vec<_>>());
}

/// A batch larger than one datagram is split into datagrams (each a batch
/// of consecutive messages, within `udp_max_datagram`); a body that does
/// not fit one even alone is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_splits_a_batch_into_datagrams_and_refuses_a_body_above_one() {
    let config = NodeConfig { udp_max_datagram: 1200, ..common::base() };
    let a = node(config.clone()).await;
    let b = node(config).await;
    let h = BasicHeader::new(addr(&a), addr(&b), Transport::Udp);
    let mut batch = MessageBatch::builder(h.clone());
    for s in 0..40 {
        batch.push(&body(s, 100));
    }
    a.send_batch(batch.build()).await.unwrap();
    let mut got = Vec::new();
    let mut frames = 0;
    while got.len() < 40 {
        let batch = tokio::time::timeout(LIMIT, b.recv_batch()).await.expect("receive timed out").expect("node closed");
        frames += 1;
        got.extend(batch.iter().map(seq_of));
    }
    got.sort();
    assert_eq!(got, (0..40).collect::<Vec<_>>());
    // 40 × 105 bytes need at least 4 datagrams of 1200.
    assert!(frames >= 4, "{frames} datagrams");
    assert_eq!(a.stats().udp.messages_sent, 40);

    let mut batch = MessageBatch::builder(h.clone());
    batch.push(&body(100, 10)).push(&vec![0; 1300]);
    let sent_before = a.stats().udp.messages_sent;
    match a.send_batch(batch.build()).await {
        Err(SendError::TooLarge { transport: Transport::Udp, max: 1200, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(a.stats().udp.messages_sent, sent_before, "nothing of a refused batch is sent");
}

/// Over TCP, a batch above `max_frame_size` goes as several frames, in
/// order; a body above it is refused before anything is queued (a message
/// sent after it is the next to arrive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_splits_a_batch_above_the_frame_limit_and_refuses_a_body_above_it() {
    let config = NodeConfig { max_frame_size: 4096, ..common::base() };
    let a = node(config.clone()).await;
    let b = node(config).await;
    let h = BasicHeader::new(addr(&a), addr(&b), Transport::Tcp);
    let mut batch = MessageBatch::builder(h.clone());
    for s in 0..200 {
        batch.push(&body(s, 100));
    }
    a.send_batch(batch.build()).await.unwrap();
    let mut got = Vec::new();
    let mut frames = 0;
    while got.len() < 200 {
        let batch = tokio::time::timeout(LIMIT, b.recv_batch()).await.expect("receive timed out").expect("node closed");
        frames += 1;
        got.extend(batch.iter().map(seq_of));
    }
    assert_eq!(got, (0..200).collect::<Vec<_>>());
    assert!(frames >= 200 * 105 / 4096, "{frames} frames");

    let mut batch = MessageBatch::builder(h.clone());
    batch.push(&body(1000, 10)).push(&vec![0; 5000]);
    assert!(matches!(a.send_batch(batch.build()).await, Err(SendError::TooLarge { transport: Transport::Tcp, max: 4096, .. })));
    a.send(Message::raw(h, body(2000, 3))).await.unwrap();
    let next = tokio::time::timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    assert_eq!(seq_of(next.raw_bytes().unwrap()), 2000);
}

/// A batch to a virtual node reaches that vnode's queue; typed batches
/// decode on the receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_batches_reach_their_vnode() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Tick(u32);
    impl braid_node::MessageType for Tick {
        const NAME: &'static str = "test.batch.Tick";
    }
    let a = node(common::base()).await;
    let b = node(common::base()).await;
    let v = b.vnode(VnodeId(3)).unwrap();
    for to_self in [false, true] {
        let dst = if to_self { addr(&a) } else { addr(&b) };
        let v_here = if to_self { Some(a.vnode(VnodeId(3)).unwrap()) } else { None };
        let mut batch = MessageBatch::typed_builder::<Tick>(BasicHeader::new(addr(&a), dst.with_vnode(VnodeId(3)), Transport::Braid));
        for i in 0..10 {
            batch.push_value(&Tick(i)).unwrap();
        }
        a.send_batch(batch.build()).await.unwrap();
        let rx = v_here.as_ref().unwrap_or(&v);
        let got = tokio::time::timeout(LIMIT, rx.recv_batch()).await.unwrap().unwrap();
        let ticks: Vec<Tick> = got.values::<Tick>().collect::<Result<_, _>>().unwrap();
        assert_eq!(ticks, (0..10).map(Tick).collect::<Vec<_>>());
    }
}

/// Batch frames whose count or lengths run past the end are dropped and
/// counted; the connection and the node keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_batch_frames_are_dropped_and_counted() {
    use tokio::io::AsyncWriteExt;
    let insecure = || NodeConfig { security: braid_node::NodeAuth::insecure(), ..common::base() };
    let b = node(insecure()).await;
    let a_addr: std::net::SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let header = BasicHeader::new(BasicAddress::new(a_addr), addr(&b), Transport::Tcp);
    let h = postcard::to_allocvec(&header).unwrap();
    let batch_frame = |rest: &[u8]| {
        let mut f = vec![1, h.len() as u8];
        f.extend_from_slice(&h);
        f.push(2);
        f.extend_from_slice(rest);
        let mut v = (f.len() as u32).to_be_bytes().to_vec();
        v.extend(f);
        v
    };
    let mut tcp = tokio::net::TcpStream::connect(b.local_addr()).await.unwrap();
    // 100 bodies announced in 3 bytes (zero-length bodies cannot make up
    // for it); a length past the end; a count of 0; bytes after the last
    // body; then a good batch.
    tcp.write_all(&batch_frame(&[100, 0, 0, 0])).await.unwrap();
    tcp.write_all(&batch_frame(&[2, 1, b'x', 9, b'y'])).await.unwrap();
    tcp.write_all(&batch_frame(&[0])).await.unwrap();
    tcp.write_all(&batch_frame(&[1, 1, b'x', b'z'])).await.unwrap();
    tcp.write_all(&batch_frame(&[2, 2, b'o', b'k', 0])).await.unwrap();
    tcp.flush().await.unwrap();
    let got = tokio::time::timeout(LIMIT, b.recv_batch()).await.unwrap().unwrap();
    assert_eq!(got.iter().collect::<Vec<_>>(), [&b"ok"[..], &b""[..]]);
    assert_eq!(b.stats().malformed_frames, 4);
}

/// Forwarding: a received batch sent on, as it is, to another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_received_batch_can_be_forwarded() {
    let a = node(common::base()).await;
    let b = node(common::base()).await;
    let c = node(common::base()).await;
    let mut batch = MessageBatch::builder(BasicHeader::new(addr(&a), addr(&b), Transport::Tcp));
    for s in 0..30 {
        batch.push(&body(s, 8));
    }
    a.send_batch(batch.build()).await.unwrap();
    let mut got = tokio::time::timeout(LIMIT, b.recv_batch()).await.unwrap().unwrap();
    *got.header_mut() = BasicHeader::new(addr(&b), addr(&c), Transport::Braid);
    b.send_batch(got).await.unwrap();
    let got = tokio::time::timeout(LIMIT, c.recv_batch()).await.unwrap().unwrap();
    assert_eq!(got.header().source(), &addr(&b));
    assert_eq!(got.iter().map(seq_of).collect::<Vec<_>>(), (0..30).collect::<Vec<_>>());
}
