//! Handshake cost: connections established per second, one after another on
//! loopback, for Braid authenticated and encrypted (Noise IK after the
//! stateless cookie: two round trips), Braid without authentication, and
//! quinn (TLS 1.3, one round trip), measured in the same run and printed as
//! ratios. Not a pass/fail test: machines are noisy.
//!
//! `cargo bench -p braid-net --bench handshake`; `BENCH_CONNS` (default
//! 1000) connections per stack and round, `BENCH_ROUNDS` (default 3)
//! rounds alternating the stacks; the median rate is reported.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{bounded, env, loopback, median};
use braid_net::{pinned_pair, Endpoint, EndpointConfig, Security};

/// Connections per second to one Braid server; each connection is kept
/// open (closing is not part of the handshake).
async fn braid_rate(count: u64, encrypted: bool) -> f64 {
    let (server_sec, client_sec) = if encrypted { pinned_pair().unwrap() } else { (Security::Insecure, Security::Insecure) };
    let server = Endpoint::bind_with(loopback(), EndpointConfig { security: server_sec, ..Default::default() }).unwrap();
    let client_cfg = EndpointConfig { accept_incoming: false, security: client_sec, ..Default::default() };
    let client = Endpoint::bind_with(loopback(), client_cfg).unwrap();
    let addr = server.local_addr();
    let acceptor = tokio::spawn(async move {
        let mut held = Vec::new();
        while (held.len() as u64) < count {
            held.push(server.accept().await.unwrap());
        }
        (server, held)
    });
    let started = Instant::now();
    let mut held = Vec::with_capacity(count as usize);
    for _ in 0..count {
        held.push(client.connect(addr).await.unwrap());
    }
    let secs = started.elapsed().as_secs_f64();
    let _server = acceptor.await.unwrap();
    count as f64 / secs
}

async fn quinn_rate(count: u64) -> f64 {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_der = cert.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
    let server_config = quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key.into()).unwrap();
    let server = quinn::Endpoint::server(server_config, loopback()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let mut client = quinn::Endpoint::client(loopback()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap());
    let addr = server.local_addr().unwrap();
    let acceptor = tokio::spawn(async move {
        let mut held = Vec::new();
        while (held.len() as u64) < count {
            held.push(server.accept().await.unwrap().await.unwrap());
        }
        (server, held)
    });
    let started = Instant::now();
    let mut held = Vec::with_capacity(count as usize);
    for _ in 0..count {
        held.push(client.connect(addr, "localhost").unwrap().await.unwrap());
    }
    let secs = started.elapsed().as_secs_f64();
    let _server = acceptor.await.unwrap();
    count as f64 / secs
}

fn main() {
    let conns = env("BENCH_CONNS", 1000).max(1);
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (mut enc, mut plain, mut quic) = (vec![], vec![], vec![]);
        for round in 0..rounds {
            let e = bounded("braid encrypted", braid_rate(conns, true)).await;
            let p = bounded("braid insecure", braid_rate(conns, false)).await;
            let q = bounded("quinn", quinn_rate(conns)).await;
            eprintln!("round {round}: braid encrypted {e:.0}/s, braid --insecure-no-auth {p:.0}/s, quinn {q:.0}/s");
            enc.push(e);
            plain.push(p);
            quic.push(q);
        }
        let (e, p, q) = (median(enc), median(plain), median(quic));
        println!("handshakes/s  braid encrypted {e:.0}  braid insecure {p:.0}  quinn {q:.0}");
        println!("braid encrypted / quinn {:.2}x; encrypted / insecure {:.2}", e / q, e / p);
    });
}
