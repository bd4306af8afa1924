//! Message batches through the node (issue 23): over TCP, Braid, Exon, UDP
//! and to this host, a batch arrives complete and in order; batches and
//! messages sent alone keep their order on one channel, whichever of
//! `recv`, `recv_many` and `recv_batch` reads them; a batch too large for
//! the transport's unit is split, a body too large for it refused before
//! anything is sent; a malformed batch frame is dropped and counted; one
//! notification per batch (`send_batch_notify`) says Delivered only once
//! every frame is, Failed when a frame fails, Sent over UDP.

use std::time::Duration;

use braid_node::{
    BasicAddress, BasicHeader, DeliveryStatus, FailReason, Address, Header, Message, MessageBatch, Node, NodeConfig, SendError,
    Transport, VnodeId,
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

// ---- One delivery notification per batch (`send_batch_notify`) ----

/// A batch of `n` numbered bodies of `size` bytes each (at least 4).
fn numbered_batch(h: &BasicHeader, n: u32, size: usize) -> MessageBatch<BasicHeader> {
    let mut b = MessageBatch::builder(h.clone());
    b.reserve(n as usize * (size + 3));
    for s in 0..n {
        b.push(&body(s, size - 4));
    }
    b.build()
}

/// Reads `n` bodies with `recv_batch`; their numbers, in arrival order,
/// and how many batches (frames) they came in.
async fn read_bodies(b: &Node<BasicHeader>, n: usize) -> (Vec<u32>, usize) {
    let (mut got, mut frames) = (Vec::with_capacity(n), 0);
    while got.len() < n {
        let batch = tokio::time::timeout(LIMIT, b.recv_batch()).await.expect("receive timed out").expect("node closed");
        frames += 1;
        got.extend(batch.iter().map(seq_of));
    }
    (got, frames)
}

/// Over TCP and Braid, a receiver that does not read holds delivery back:
/// its queue takes one frame, its transport a window's worth (Braid: a
/// receive window of 4 MiB; TCP: the kernel's receive buffer, at most
/// `tcp_rmem`'s 32 MiB here), and a batch of 64 MiB in frames of 1 MiB
/// cannot all be acknowledged before it reads. The batch's one
/// notification must not say Delivered until then (its first frames were
/// acknowledged long before), and says it once the receiver read it all.
async fn batch_delivered_only_once_all_is_read(t: Transport) {
    let mut config = NodeConfig { max_frame_size: 1 << 20, recv_queue: 1, ..all() };
    config.braid.transport.receive_window = 4 << 20;
    let a = node(config.clone()).await;
    let b = node(config).await;
    let h = BasicHeader::new(addr(&a), addr(&b), t);
    const N: u32 = 16 << 10;
    let batch = numbered_batch(&h, N, 4096);
    let send = a.send_batch_notify(batch);
    tokio::pin!(send);
    // The frames fit the channel's queue: the call returns without
    // waiting for the receiver (if it waited, the batch is not delivered
    // either, which is what is checked).
    let early = tokio::select! {
        r = &mut send => Some(r.expect("send_batch_notify")),
        _ = tokio::time::sleep(Duration::from_secs(1)) => None,
    };
    if let Some(note) = &early {
        assert!(note.confirms_delivery(), "{t}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = note.status();
        assert!(matches!(s, DeliveryStatus::Queued | DeliveryStatus::Sent), "{t}: {s:?} before the receiver read anything");
    }
    let reading = tokio::spawn({
        let b = b.clone();
        async move { read_bodies(&b, N as usize).await }
    });
    let mut note = match early {
        Some(n) => n,
        None => send.await.expect("send_batch_notify"),
    };
    assert_eq!(tokio::time::timeout(LIMIT, note.outcome()).await.expect("no outcome"), DeliveryStatus::Delivered, "{t}");
    let (got, frames) = reading.await.unwrap();
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "{t}");
    assert!(frames >= 64, "{t}: {frames} frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_batch_notification_waits_for_every_frame() {
    batch_delivered_only_once_all_is_read(Transport::Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braid_batch_notification_waits_for_every_frame() {
    batch_delivered_only_once_all_is_read(Transport::Braid).await;
}

/// To this host, Delivered means in the receiver's queue: with the queue
/// full, the batch waits (and its notification with it) until the
/// receiver makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_batch_notification_waits_for_room_in_the_queue() {
    let a = node(NodeConfig { recv_queue: 1, ..common::base() }).await;
    let h = BasicHeader::new(addr(&a), addr(&a), Transport::Braid);
    a.send(Message::raw(h.clone(), body(1000, 0))).await.unwrap();
    let send = a.send_batch_notify(numbered_batch(&h, 100, 32));
    tokio::pin!(send);
    tokio::select! {
        r = &mut send => panic!("delivered into a full queue: {:?}", r.map(|n| n.status())),
        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
    }
    let first = tokio::time::timeout(LIMIT, a.recv()).await.unwrap().unwrap();
    assert_eq!(seq_of(first.raw_bytes().unwrap()), 1000);
    let mut note = tokio::time::timeout(LIMIT, send).await.expect("room was made").unwrap();
    assert_eq!(note.status(), DeliveryStatus::Delivered);
    assert_eq!(note.outcome().await, DeliveryStatus::Delivered);
    let (got, frames) = read_bodies(&a, 100).await;
    assert_eq!((got, frames), ((0..100).collect::<Vec<_>>(), 1));
}

/// Over Exon (unordered, acknowledged on arrival whatever the receiving
/// application does): a batch split into frames is Delivered, and by then
/// every frame has arrived at the receiving node; the receiver reads all
/// of it, each message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exon_batch_notification_covers_every_frame() {
    let config = NodeConfig { max_frame_size: 64 << 10, ..all() };
    let a = node(config.clone()).await;
    let b = node(config).await;
    let h = BasicHeader::new(addr(&a), addr(&b), Transport::Exon);
    const N: u32 = 2000;
    let mut note = a.send_batch_notify(numbered_batch(&h, N, 1000)).await.unwrap();
    assert!(note.confirms_delivery());
    assert_eq!(tokio::time::timeout(LIMIT, note.outcome()).await.unwrap(), DeliveryStatus::Delivered);
    // Exon delivered every frame to b's socket before acknowledging it:
    // b's node takes them all without a further send.
    tokio::time::timeout(Duration::from_secs(5), async {
        while b.stats().transport(Transport::Exon).messages_received < N as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the batch was reported delivered before it all arrived");
    let (mut got, frames) = read_bodies(&b, N as usize).await;
    got.sort_unstable();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    assert!(frames >= 2_000_000 / (64 << 10), "{frames} frames");
    assert!(tokio::time::timeout(Duration::from_millis(300), b.recv()).await.is_err(), "a message arrived twice");
}

/// Over Exon, delivery is held back by a receiver that is not there yet
/// (without authentication, the sender knows its Exon ID from its address
/// and keeps retransmitting): the batch is not Delivered before the
/// receiver exists, and is once it came up and took every frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exon_batch_notification_waits_for_a_late_receiver() {
    let config = NodeConfig {
        transports: vec![Transport::Exon],
        security: braid_node::NodeAuth::insecure(),
        max_frame_size: 64 << 10,
        ..common::base()
    };
    let a = node(config.clone()).await;
    let (later, holders) = silent_address();
    let h = BasicHeader::new(addr(&a), later, Transport::Exon);
    const N: u32 = 500;
    let mut note = a.send_batch_notify(numbered_batch(&h, N, 1000)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = note.status();
    assert!(matches!(s, DeliveryStatus::Queued | DeliveryStatus::Sent), "{s:?} without a receiver");
    drop(holders);
    let b: Node<BasicHeader> = Node::bind(later.as_socket(), config).await.expect("bind the late receiver");
    assert_eq!(tokio::time::timeout(LIMIT, note.outcome()).await.unwrap(), DeliveryStatus::Delivered);
    let (mut got, frames) = read_bodies(&b, N as usize).await;
    got.sort_unstable();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    assert!(frames >= 7, "{frames} frames");
}

/// A batch to a peer that is not there fails, with the reason its frames
/// failed for (TCP and Braid: the channel could not open, as for single
/// messages; Exon: its key could not be learnt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_to_a_peer_that_is_gone_fails() {
    let mut config = NodeConfig { max_frame_size: 4096, connect_timeout: Duration::from_millis(500), ..all() };
    // Exon gives up learning a silent address's key after its tries.
    config.exon.node.session.handshake_timeout = Duration::from_millis(50);
    config.exon.node.session.discovery_tries = 2;
    let a = node(config).await;
    let (dead, _holders) = silent_address();
    for t in [Transport::Tcp, Transport::Braid, Transport::Exon] {
        let h = BasicHeader::new(addr(&a), dead, t);
        let mut note = a.send_batch_notify(numbered_batch(&h, 200, 100)).await.unwrap();
        match tokio::time::timeout(LIMIT, note.outcome()).await.expect("no outcome") {
            DeliveryStatus::Failed(FailReason::ConnectFailed { transport, .. }) if t != Transport::Exon => assert_eq!(transport, t),
            DeliveryStatus::Failed(FailReason::Io(_)) if t == Transport::Exon => {}
            s => panic!("{t}: {s:?}"),
        }
    }
}

/// UDP cannot confirm: a batch of several datagrams ends at Sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_batch_notification_ends_at_sent() {
    let config = NodeConfig { udp_max_datagram: 1200, ..common::base() };
    let a = node(config.clone()).await;
    let b = node(config).await;
    let h = BasicHeader::new(addr(&a), addr(&b), Transport::Udp);
    let mut note = a.send_batch_notify(numbered_batch(&h, 40, 104)).await.unwrap();
    assert!(!note.confirms_delivery());
    assert_eq!(tokio::time::timeout(LIMIT, note.outcome()).await.unwrap(), DeliveryStatus::Sent);
    // An empty batch has nothing to wait for.
    let empty = MessageBatch::builder(h.clone()).build();
    assert_eq!(a.send_batch_notify(empty).await.unwrap().status(), DeliveryStatus::Sent);
    let empty = MessageBatch::builder(BasicHeader::new(addr(&a), addr(&b), Transport::Braid)).build();
    assert_eq!(a.send_batch_notify(empty).await.unwrap().status(), DeliveryStatus::Delivered);
    // Through a vnode handle, as through the node.
    let v = a.vnode(VnodeId(9)).unwrap();
    let mut note = v.send_batch_notify(numbered_batch(&BasicHeader::new(addr(&a), addr(&b), Transport::Tcp), 10, 8)).await.unwrap();
    assert_eq!(tokio::time::timeout(LIMIT, note.outcome()).await.unwrap(), DeliveryStatus::Delivered);
}

/// A base address whose TCP port refuses connections (bound, not
/// listening) and whose Braid and Exon ports swallow datagrams, with the
/// sockets that hold them.
fn silent_address() -> (BasicAddress, Vec<Box<dyn std::any::Any>>) {
    for _ in 0..100 {
        let Ok(tcp) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None) else { continue };
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        if tcp.bind(&any.into()).is_err() {
            continue;
        }
        let Some(base) = tcp.local_addr().ok().and_then(|a| a.as_socket()) else { continue };
        let mut held: Vec<Box<dyn std::any::Any>> = vec![Box::new(tcp)];
        let mut ok = true;
        for t in [Transport::Braid, Transport::Exon] {
            match base.port().checked_add(t.port_offset()).map(|p| std::net::UdpSocket::bind((base.ip(), p))) {
                Some(Ok(u)) => held.push(Box::new(u)),
                _ => ok = false,
            }
        }
        if ok {
            return (BasicAddress::new(base), held);
        }
    }
    panic!("no free set of loopback ports in 100 tries");
}

/// A receiver that reads everything and closes at once: the batch was
/// acknowledged before the connection ended, so its notification says
/// Delivered, not `ConnectionLost` (acknowledgements are polled every few
/// milliseconds; the channel reads them once more when the connection
/// goes). Several rounds, since the close races the last poll.
async fn acknowledged_then_closed_is_delivered(t: Transport) {
    for round in 0..8 {
        let a = node(all()).await;
        let b = node(all()).await;
        let h = BasicHeader::new(addr(&a), addr(&b), t);
        const N: u32 = 2000;
        let mut note = a.send_batch_notify(numbered_batch(&h, N, 256)).await.expect("send_batch_notify");
        let (got, _) = read_bodies(&b, N as usize).await;
        assert_eq!(got.len(), N as usize);
        b.close().await;
        let outcome = tokio::time::timeout(LIMIT, note.outcome()).await.expect("no outcome");
        assert_eq!(outcome, DeliveryStatus::Delivered, "{t}, round {round}");
        a.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braid_batch_acknowledged_before_the_peer_closed_is_delivered() {
    acknowledged_then_closed_is_delivered(Transport::Braid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_batch_acknowledged_before_the_peer_closed_is_delivered() {
    acknowledged_then_closed_is_delivered(Transport::Tcp).await;
}
