//! Ping-pong between two nodes on loopback, over each transport:
//! `cargo run -p braid-node --example ping_pong [udp|tcp|braid|exon] [count]`.

use std::time::{Duration, Instant};

use braid_node::{BasicAddress, BasicHeader, Message, MessageType, Node, NodeConfig, Transport};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Ping(u32);
impl MessageType for Ping {
    const NAME: &'static str = "example.Ping";
}

#[derive(Serialize, Deserialize)]
struct Pong(u32);
impl MessageType for Pong {
    const NAME: &'static str = "example.Pong";
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transports: Vec<Transport> = match args.first() {
        Some(t) => vec![t.parse()?],
        None => vec![Transport::Udp, Transport::Tcp, Transport::Braid, Transport::Exon],
    };
    let count: u32 = args.get(1).map(|c| c.parse()).transpose()?.unwrap_or(1000);
    // Every transport, Exon included (it is not on by default).
    let config = NodeConfig { transports: vec![Transport::Udp, Transport::Tcp, Transport::Braid, Transport::Exon], allow_unauthenticated_udp: true, ..Default::default() };
    let pinger: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, config.clone()).await?;
    let ponger: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, config).await?;

    // The ponger answers every ping over the transport it came by.
    let echo = ponger.clone();
    tokio::spawn(async move {
        while let Some(m) = echo.recv().await {
            let t = m.header().proto;
            if let Ok((h, Ping(n))) = m.decode::<Ping>() {
                let _ = echo.send(Message::typed(h.reply(t), Pong(n))).await;
            }
        }
    });

    let (me, peer) = (BasicAddress::new(pinger.local_addr()), BasicAddress::new(ponger.local_addr()));
    for t in transports {
        let mut rtts = Vec::with_capacity(count as usize);
        let mut lost = 0;
        for n in 0..count {
            let start = Instant::now();
            pinger.send(Message::typed(BasicHeader::new(me, peer, t), Ping(n))).await?;
            // UDP may lose a ping: give up on it after a second.
            let pong = match tokio::time::timeout(Duration::from_secs(1), pinger.recv()).await {
                Ok(Some(m)) => m.decode::<Pong>().ok().map(|(_, p)| p.0),
                _ => None,
            };
            if pong == Some(n) {
                rtts.push(start.elapsed());
            } else {
                lost += 1;
            }
        }
        rtts.sort();
        let q = |p: f64| rtts.get(((rtts.len() as f64 - 1.0) * p) as usize).copied().unwrap_or_default();
        println!("{t:>5}: {} pongs, {lost} lost, rtt p50 {:?} p99 {:?}", rtts.len(), q(0.5), q(0.99));
    }
    pinger.close().await;
    ponger.close().await;
    Ok(())
}
