//! One-way Exon message rate on 127.0.0.1, authenticated and encrypted vs
//! the bare protocol (`--insecure-no-auth`), for 64 B and 1 KiB messages:
//! the cost of the session layer.
//!
//! ```text
//! cargo run --release -p braid-exon-net --example exon_rate [MESSAGES] [ROUNDS]
//! ```
//!
//! Each measurement sends MESSAGES messages (default 400,000) from one
//! socket to another in batches (`send_many`), times from the first send
//! to the last message received (every one checked once), and the best of
//! ROUNDS (default 3) runs is reported, the modes interleaved so that both
//! see the same machine load. Both ends run in this process, so its CPU
//! time (user + system, `getrusage`) per message is the cost of the whole
//! exchange: on a shared machine, where wall-clock rates swing with other
//! processes' load, messages per CPU-second compare the modes more
//! steadily, and are reported too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_exon::NodeId;
use braid_exon_net::{AcceptAnyKey, ExonSecurity, ExonSocket, Identity, SocketConfig};
use bytes::Bytes;

fn config(security: ExonSecurity) -> SocketConfig {
    let mut cfg = SocketConfig {
        security,
        ..SocketConfig::default()
    };
    cfg.node.machine.max_outstanding = 65_536;
    cfg
}

fn security(encrypted: bool, n: u8) -> ExonSecurity {
    if encrypted {
        ExonSecurity::Authenticated {
            identity: Identity::from_seed(&[n; 32]),
            verifier: Arc::new(AcceptAnyKey),
        }
    } else {
        ExonSecurity::InsecureNoAuth {
            id: NodeId(u64::from(n)),
        }
    }
}

/// CPU time (user + system) this process has used.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Messages per wall-clock second and per CPU-second of one run.
async fn rate(encrypted: bool, size: usize, messages: u64) -> (f64, f64) {
    let any = "127.0.0.1:0".parse().unwrap();
    let a = ExonSocket::bind(any, config(security(encrypted, 1)))
        .await
        .expect("bind a");
    let b = ExonSocket::bind(any, config(security(encrypted, 2)))
        .await
        .expect("bind b");
    let peer = a.connect(b.local_addr()).await.expect("find b");
    // Warm up: the handshake and the first window.
    a.send(peer, Bytes::from(vec![0u8; size])).await.unwrap();
    let _ = b.recv().await.unwrap();
    let a = Arc::new(a);
    let start = Instant::now();
    let cpu_start = cpu_time();
    let sender = {
        let a = a.clone();
        tokio::spawn(async move {
            let batch = 1_024u64;
            let msg = Bytes::from(vec![7u8; size]);
            let mut k = 0;
            while k < messages {
                let n = batch.min(messages - k);
                let msgs = (0..n).map(|_| msg.clone()).collect();
                a.send_many(peer, msgs).await.expect("send_many");
                k += n;
            }
        })
    };
    let mut got = 0u64;
    let mut buf = Vec::new();
    while got < messages {
        buf.clear();
        let n = tokio::time::timeout(Duration::from_secs(30), b.recv_many(&mut buf))
            .await
            .expect("messages keep arriving");
        assert!(n > 0, "driver stopped");
        assert!(buf.iter().all(|(_, m)| m.len() == size));
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu_start).as_secs_f64();
    sender.await.unwrap();
    let st = b.stats();
    assert_eq!(st.security.auth_failed, 0);
    a.close().await;
    b.close().await;
    (messages as f64 / secs, messages as f64 / cpu.max(1e-9))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let messages: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(400_000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    // EXON_RATE_ONLY=encrypted|insecure runs one mode (for profiling).
    let only = std::env::var("EXON_RATE_ONLY").unwrap_or_default();
    println!(
        "size  encrypted msgs/s  insecure msgs/s  ratio  |  encrypted msgs/cpu-s  insecure msgs/cpu-s  ratio"
    );
    let best = |a: (f64, f64), b: (f64, f64)| (a.0.max(b.0), a.1.max(b.1));
    for size in [64usize, 1024] {
        let (mut enc, mut ins) = ((0f64, 0f64), (0f64, 0f64));
        for _ in 0..rounds {
            if only != "encrypted" {
                ins = best(ins, rate(false, size, messages).await);
            }
            if only != "insecure" {
                enc = best(enc, rate(true, size, messages).await);
            }
        }
        println!(
            "{size:>4}  {:>16.0}  {:>15.0}  {:>5.3}  |  {:>20.0}  {:>19.0}  {:>5.3}",
            enc.0,
            ins.0,
            enc.0 / ins.0,
            enc.1,
            ins.1,
            enc.1 / ins.1
        );
    }
}
