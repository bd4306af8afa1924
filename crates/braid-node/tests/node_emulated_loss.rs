//! Each transport's semantics over an emulated lossy path (braid-emu: two
//! network namespaces, 2 % random loss each way). Needs root,
//! /dev/net/tun and `ip`: skipped with a message without them, and fails
//! under CI=true.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use braid_node::{BasicAddress, BasicHeader, Message, MessageType, Node, NodeConfig, Transport};
use serde::{Deserialize, Serialize};

mod common;

#[derive(Serialize, Deserialize)]
struct Seq(u32, Vec<u8>);
impl MessageType for Seq {
    const NAME: &'static str = "test.emu.Seq";
}

fn ready() -> bool {
    match braid_emu::check_capabilities() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("emulator test cannot run under CI=true: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

const N: u32 = 400;

#[test]
fn tcp_and_braid_stay_fifo_and_complete_udp_loses_without_duplicates() {
    if !ready() {
        return;
    }
    let tb = braid_emu::Testbed::builder()
        .name("nodeloss")
        .link("rtt=10ms,rate=50mbit,loss=2%".parse().unwrap())
        .seed(7)
        .build()
        .expect("testbed");
    let p = tb.layout().paths[0].clone();
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let receiver = tb
        .in_host("b", move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let b: Node<BasicHeader> = Node::bind(SocketAddr::new(p.b_addr.into(), 0), common::base()).await.unwrap();
                tx.send(b.local_addr()).unwrap();
                let mut per: Vec<Vec<u32>> = vec![Vec::new(); 3];
                // Reliable transports deliver 2 × N; UDP some of N. Stop
                // 3 s after the last message.
                while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(3), b.recv()).await {
                    let i = match m.header().proto {
                        Transport::Udp => 0,
                        Transport::Tcp => 1,
                        _ => 2,
                    };
                    per[i].push(m.decode::<Seq>().unwrap().1 .0);
                }
                per
            })
        })
        .unwrap();
    let b_addr = rx.recv_timeout(Duration::from_secs(10)).expect("receiver address");
    let sender = tb
        .in_host("a", move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let a: Node<BasicHeader> = Node::bind(SocketAddr::new(p.a_addr.into(), 0), common::base()).await.unwrap();
                for t in [Transport::Udp, Transport::Tcp, Transport::Braid] {
                    let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b_addr), t);
                    for n in 0..N {
                        a.send(Message::typed(h.clone(), Seq(n, vec![0; 1000]))).await.unwrap();
                        if t == Transport::Udp {
                            tokio::time::sleep(Duration::from_micros(300)).await;
                        }
                    }
                }
                a.close().await;
            })
        })
        .unwrap();
    sender.join().expect("sender");
    let per = receiver.join().expect("receiver");
    let want: Vec<u32> = (0..N).collect();
    assert_eq!(per[1], want, "TCP lost or reordered messages over a lossy path");
    assert_eq!(per[2], want, "Braid lost or reordered messages over a lossy path");
    let udp: HashSet<u32> = per[0].iter().cloned().collect();
    assert_eq!(udp.len(), per[0].len(), "UDP delivered a message twice");
    assert!(per[0].len() < N as usize && per[0].len() > N as usize * 9 / 10, "UDP got {} of {N} at 2 % loss", per[0].len());
}

#[test]
fn exon_delivers_exactly_once_unordered_nothing_lost() {
    if !ready() {
        return;
    }
    let tb = braid_emu::Testbed::builder()
        .name("nodeexon")
        .link("rtt=10ms,rate=50mbit,loss=2%".parse().unwrap())
        .seed(11)
        .build()
        .expect("testbed");
    let p = tb.layout().paths[0].clone();
    let cfg = || NodeConfig { transports: vec![Transport::Exon], ..common::base() };
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let receiver = tb
        .in_host("b", move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let b: Node<BasicHeader> = Node::bind(SocketAddr::new(p.b_addr.into(), 0), cfg()).await.unwrap();
                tx.send(b.local_addr()).unwrap();
                let mut got = Vec::new();
                while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(3), b.recv()).await {
                    assert_eq!(m.header().proto, Transport::Exon);
                    got.push(m.decode::<Seq>().unwrap().1 .0);
                }
                got
            })
        })
        .unwrap();
    let b_addr = rx.recv_timeout(Duration::from_secs(10)).expect("receiver address");
    let sender = tb
        .in_host("a", move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let a: Node<BasicHeader> = Node::bind(SocketAddr::new(p.a_addr.into(), 0), cfg()).await.unwrap();
                let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b_addr), Transport::Exon);
                let mut notes = Vec::new();
                for n in 0..N {
                    notes.push(a.send_notify(Message::typed(h.clone(), Seq(n, vec![0; 1000]))).await.unwrap());
                }
                let mut delivered = 0;
                for mut n in notes {
                    let o = tokio::time::timeout(Duration::from_secs(20), n.outcome()).await.expect("outcome");
                    delivered += usize::from(o == braid_node::DeliveryStatus::Delivered);
                }
                a.close().await;
                delivered
            })
        })
        .unwrap();
    let delivered = sender.join().expect("sender");
    let got = receiver.join().expect("receiver");
    assert_eq!(delivered, N as usize, "every Exon message is reported delivered");
    let set: HashSet<u32> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "Exon delivered a message twice");
    assert_eq!(set, (0..N).collect::<HashSet<u32>>(), "Exon lost messages over a lossy path");
}
