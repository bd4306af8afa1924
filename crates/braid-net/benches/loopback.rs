//! Loopback throughput and message rate of braid-net against quinn measured
//! in the same run, printed as ratios (the project's goal: ≥ 1.5× quinn for
//! both). Not a pass/fail test: machines are noisy.
//!
//! `cargo bench -p braid-net --bench loopback`; `BENCH_MIB` (default 1024)
//! sets the bulk volume, `BENCH_MSGS` (default 500000) the 1 KiB message
//! count, `BENCH_ROUNDS` (default 3) the rounds, each alternating the two
//! stacks; the median of each is reported.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{bounded, env, loopback, median};
use braid_net::{Bytes, Endpoint, EndpointConfig};

const CHUNK: usize = 1 << 20;
const MSG: usize = 1024;
fn payload(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>())
}

/// Seconds to move `count` messages of `msg.len()` bytes over one braid
/// connection, from the first send to the last byte read.
async fn braid_run(msg: Bytes, count: u64) -> f64 {
    let server = Endpoint::bind(loopback()).unwrap();
    let client = Endpoint::bind_with(loopback(), EndpointConfig { accept_incoming: false, ..Default::default() }).unwrap();
    let addr = server.local_addr();
    let reader = tokio::spawn(async move {
        let conn = server.accept().await.unwrap();
        let mut n = 0u64;
        while n < count {
            conn.recv_message().await.unwrap();
            n += 1;
        }
        conn
    });
    let conn = client.connect(addr).await.unwrap();
    let started = Instant::now();
    for _ in 0..count {
        conn.send_message(msg.clone()).await.unwrap();
    }
    let _served = reader.await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    if std::env::var_os("BENCH_VERBOSE").is_some() {
        eprintln!("  braid sender {:?}\n  client endpoint {:?}", conn.stats(), client.stats());
    }
    conn.close().await.unwrap();
    secs
}

fn quinn_endpoints() -> (quinn::Endpoint, quinn::Endpoint) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_der = cert.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
    let server_config = quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key.into()).unwrap();
    let server = quinn::Endpoint::server(server_config, loopback()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let mut client = quinn::Endpoint::client(loopback()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap());
    (server, client)
}

/// The same transfer over one quinn unidirectional stream; messages are
/// framed with a 4-byte length like a message API would.
async fn quinn_run(msg: Bytes, count: u64) -> f64 {
    let (server, client) = quinn_endpoints();
    let addr = server.local_addr().unwrap();
    let mut framed = Vec::with_capacity(msg.len() + 4);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    let framed = Bytes::from(framed);
    let total = framed.len() as u64 * count;
    let reader = tokio::spawn(async move {
        let conn = server.accept().await.unwrap().await.unwrap();
        let mut recv = conn.accept_uni().await.unwrap();
        let mut n = 0u64;
        while n < total {
            let chunk = recv.read_chunk(usize::MAX, true).await.unwrap().expect("stream ended early");
            n += chunk.bytes.len() as u64;
        }
        (conn, server)
    });
    let conn = client.connect(addr, "localhost").unwrap().await.unwrap();
    let started = Instant::now();
    let mut send = conn.open_uni().await.unwrap();
    for _ in 0..count {
        send.write_chunk(framed.clone()).await.unwrap();
    }
    let _keep = reader.await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    conn.close(0u32.into(), b"done");
    client.wait_idle().await;
    secs
}

fn main() {
    let mib = env("BENCH_MIB", 1024);
    let msgs = env("BENCH_MSGS", 500_000);
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let chunk = payload(CHUNK);
        let small = payload(MSG);
        let (mut bb, mut qb, mut bm, mut qm) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            let b = bounded("braid bulk", braid_run(chunk.clone(), mib)).await;
            let only_braid = std::env::var_os("BENCH_ONLY_BRAID").is_some();
            let q = if only_braid { f64::NAN } else { bounded("quinn bulk", quinn_run(chunk.clone(), mib)).await };
            let bms = bounded("braid messages", braid_run(small.clone(), msgs)).await;
            let qms = if only_braid { f64::NAN } else { bounded("quinn messages", quinn_run(small.clone(), msgs)).await };
            let gbit = |s: f64| (mib * CHUNK as u64) as f64 * 8.0 / s / 1e9;
            let rate = |s: f64| msgs as f64 / s;
            eprintln!(
                "round {round}: bulk braid {:.2} / quinn {:.2} Gbit/s; 1 KiB messages braid {:.0} / quinn {:.0} msg/s",
                gbit(b),
                gbit(q),
                rate(bms),
                rate(qms)
            );
            bb.push(gbit(b));
            qb.push(gbit(q));
            bm.push(rate(bms));
            qm.push(rate(qms));
        }
        let (bb, qb, bm, qm) = (median(bb), median(qb), median(bm), median(qm));
        println!("bulk throughput   braid {bb:8.2} Gbit/s  quinn {qb:8.2} Gbit/s  ratio {:.2}x (goal 1.5x)", bb / qb);
        println!("1 KiB msg rate    braid {bm:8.0} msg/s   quinn {qm:8.0} msg/s   ratio {:.2}x (goal 1.5x)", bm / qm);
    });
}
