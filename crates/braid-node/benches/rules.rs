//! Cost of one rule evaluation on a live Node against the cost of one
//! message (issue 20 item 2: "cost per evaluation is measured and small
//! against a message's cost").
//!
//! Two nodes on loopback (authenticated, as deployed), one Braid
//! connection between them. An evaluation is what the rule timer does per
//! tick: sample the destination's Braid connection (RTT, loss, throughput,
//! backlog), feed the engine and evaluate a four-rule set; a message is a
//! 100-byte Braid message sent and received. Run with
//! `cargo bench -p braid-node --bench rules`.

use std::time::{Duration, Instant};

use braid_node::{BasicAddress, BasicHeader, Message, Node, NodeConfig, RulesConfig, Transport};

const RULES: &str = "on first match
  avg(rtt, 2s) > 80ms and max(loss, 5s) > 2%: set transport = tcp;
  rate(sent, 1s) > 1000/s: set priority = 2;
  avg(throughput, 1s) < 1mbit: set cc = bbr;
  true: set transport = braid;";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let (sa, sb) = braid_node::NodeAuth::pinned_pair().expect("identities");
        let cfg = |security| NodeConfig { transports: vec![Transport::Tcp, Transport::Braid], security, ..NodeConfig::default() };
        let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse().unwrap(), cfg(sa)).await.expect("bind a");
        let b: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse().unwrap(), cfg(sb)).await.expect("bind b");
        let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Braid);
        // Messages: warm up, then time N sent and received.
        let n = 20_000;
        for _ in 0..1_000 {
            a.send(Message::raw(h.clone(), vec![0u8; 100])).await.unwrap();
            b.recv().await.unwrap();
        }
        let t = Instant::now();
        let reader = {
            let b = b.clone();
            tokio::spawn(async move {
                for _ in 0..n {
                    b.recv().await.unwrap();
                }
            })
        };
        for _ in 0..n {
            a.send(Message::raw(h.clone(), vec![0u8; 100])).await.unwrap();
        }
        reader.await.unwrap();
        let per_message = t.elapsed() / n;

        // Evaluations: the rule set installed with a timer too slow to
        // interfere; evaluate by hand.
        a.set_rules_source(RULES, RulesConfig { interval: Duration::from_secs(3600), ..RulesConfig::default() }).unwrap();
        a.send(Message::raw(h.clone(), vec![0u8; 100])).await.unwrap();
        b.recv().await.unwrap();
        let evals = 100_000u32;
        let t = Instant::now();
        for _ in 0..evals {
            a.evaluate_rules();
        }
        let per_eval = t.elapsed() / evals;
        // The send and receive paths' extra work with rules on: an event
        // per message (recorded only if a rule counts it, as `sent` here).
        let t = Instant::now();
        let reader = {
            let b = b.clone();
            tokio::spawn(async move {
                for _ in 0..n {
                    b.recv().await.unwrap();
                }
            })
        };
        for _ in 0..n {
            a.send(Message::raw(h.clone(), vec![0u8; 100])).await.unwrap();
        }
        reader.await.unwrap();
        let per_message_rules = t.elapsed() / n;
        println!("message (100 B over Braid, sent and received): {per_message:?}");
        println!("message with the rule set installed: {per_message_rules:?}");
        println!("rule evaluation (sample 1 destination + evaluate 4 rules): {per_eval:?}");
        println!("evaluation / message: {:.3}", per_eval.as_secs_f64() / per_message.as_secs_f64());
        println!("evaluations per second at the default 100 ms interval per destination: 10; share of one core: {:.5}%",
            per_eval.as_secs_f64() * 10.0 * 100.0);
        println!("{:?}", a.rule_stats());
        a.close().await;
        b.close().await;
    });
}
