//! Cost of one rule evaluation against a rough message cost.
//!
//! Run: `cargo bench -p braid-rules --bench engine`. The rule set is the
//! transport-choice shape the case studies learn (three rules over windowed
//! aggregates, current values and an event count, plus two priority rules);
//! one iteration records three metric samples (and every thousandth an
//! event) and evaluates. The comparison point is a rough message cost
//! measured alongside: one 64-byte UDP datagram sent and received over
//! loopback, the system calls any transport pays per datagram.

use std::hint::black_box;
use std::time::Duration;

use braid_core::Instant;
use braid_rules::{compile, ActionKind, Dimension, Engine, EngineConfig, Vocabulary};

use criterion::{criterion_group, criterion_main, Criterion};

fn vocab() -> Vocabulary {
    Vocabulary::new()
        .metric("rtt", Dimension::Time, 0.0, 2.0)
        .metric("loss", Dimension::Ratio, 0.0, 0.5)
        .metric("throughput", Dimension::Bitrate, 0.0, 1e10)
        .event("timeout")
        .choice(ActionKind::Set, "transport", &["tcp", "braid", "exon", "data"])
        .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true)
}

const RULES: &str = "on first match
  avg(loss, 5s) > 2% or count(timeout, 30s) > 3: set transport = braid;
  rtt < 20ms and max(rtt, 5s) < 40ms: set transport = exon;
  true: set transport = tcp;
on every match
  avg(throughput, 2s) < 1mbit: set priority = 0;
  avg(throughput, 2s) >= 1mbit: set priority = 2;
";

fn bench(c: &mut Criterion) {
    let v = vocab();
    let rules = compile(RULES, &v).expect("bench rules compile");
    let mut engine = Engine::new(&rules, &v, EngineConfig::default()).expect("engine");
    let rtt = v.metric_id("rtt").expect("rtt");
    let loss = v.metric_id("loss").expect("loss");
    let tput = v.metric_id("throughput").expect("throughput");
    let timeout = v.event_id("timeout").expect("timeout");
    let mut t = Instant::from_nanos(1);
    let mut i = 0u64;
    c.bench_function("sample+event+evaluate", |b| {
        b.iter(|| {
            i += 1;
            t += Duration::from_micros(100);
            engine.sample(t, rtt, 0.010 + (i % 50) as f64 * 1e-3);
            engine.sample(t, loss, (i % 7) as f64 * 0.005);
            engine.sample(t, tput, 5e6);
            if i % 1000 == 0 {
                engine.event(t, timeout);
            }
            black_box(engine.evaluate(t).len())
        })
    });
    c.bench_function("evaluate only", |b| {
        b.iter(|| {
            t += Duration::from_micros(100);
            black_box(engine.evaluate(t).len())
        })
    });
    // The message cost to compare with: one 64-byte UDP datagram sent over
    // loopback (the system call every transport pays per datagram).
    if let (Ok(rx), Ok(tx)) = (std::net::UdpSocket::bind("127.0.0.1:0"), std::net::UdpSocket::bind("127.0.0.1:0")) {
        if let Ok(addr) = rx.local_addr() {
            let _ = rx.set_nonblocking(true);
            let msg = [7u8; 64];
            let mut buf = [0u8; 128];
            c.bench_function("udp send 64 B loopback (message cost)", |b| {
                b.iter(|| {
                    let _ = tx.send_to(&msg, addr);
                    let _ = rx.recv_from(&mut buf);
                })
            });
        }
    }
    println!("engine state: {} bytes for {} rules", engine.state_bytes(), rules.len());
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
