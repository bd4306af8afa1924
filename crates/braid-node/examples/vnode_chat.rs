//! A chat between virtual nodes: three users share one host's node, a
//! fourth lives on another node. Messages between users of the same host
//! never leave the process (and are never serialized); the others go
//! over TCP. `cargo run -p braid-node --example vnode_chat`.

use std::time::Duration;

use braid_node::{BasicAddress, BasicHeader, Header, Message, MessageType, Node, NodeConfig, Transport, Vnode, VnodeId};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone)]
struct Say {
    from: String,
    text: String,
}
impl MessageType for Say {
    const NAME: &'static str = "example.chat.Say";
}

struct User {
    name: String,
    vnode: Vnode<BasicHeader>,
    addr: BasicAddress,
}

impl User {
    async fn say(&self, to: &[BasicAddress], text: &str) -> Result<(), braid_node::SendError> {
        for dst in to.iter().filter(|d| **d != self.addr) {
            let h = BasicHeader::new(self.addr, *dst, Transport::Tcp);
            self.vnode.send(Message::typed(h, Say { from: self.name.clone(), text: text.into() })).await?;
        }
        Ok(())
    }

    async fn read(&self, expect: usize) {
        for _ in 0..expect {
            match tokio::time::timeout(Duration::from_secs(5), self.vnode.recv()).await {
                Ok(Some(m)) => {
                    let local = m.is_unserialized();
                    let src = *m.header().source();
                    if let Ok((_, s)) = m.decode::<Say>() {
                        let how = if local { "in-process" } else { "over tcp" };
                        println!("[{}] {}: {} ({how}, from {src})", self.name, s.from, s.text);
                    }
                }
                _ => println!("[{}] (nothing more)", self.name),
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host1: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
    let host2: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
    let mut users = Vec::new();
    for (i, (name, host)) in [("ada", &host1), ("bob", &host1), ("cy", &host1), ("dee", &host2)].into_iter().enumerate() {
        let id = VnodeId(i as u64);
        users.push(User { name: name.into(), vnode: host.vnode(id)?, addr: BasicAddress::new(host.local_addr()).with_vnode(id) });
    }
    let everyone: Vec<BasicAddress> = users.iter().map(|u| u.addr).collect();
    users[0].say(&everyone, "hello all").await?;
    users[3].say(&everyone, "greetings from the other host").await?;
    for u in &users {
        u.read(2 - usize::from(u.name == "ada" || u.name == "dee")).await;
    }
    let (s1, s2) = (host1.stats(), host2.stats());
    println!("host1: {} in-process deliveries, {} over tcp; host2: {} over tcp", s1.local_deliveries, s1.tcp.messages_sent, s2.tcp.messages_sent);
    host1.close().await;
    host2.close().await;
    Ok(())
}
