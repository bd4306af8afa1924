//! Helpers shared by the integration tests: loopback endpoints, an echo
//! server and seeded message contents.

#![allow(dead_code)] // each test crate uses a subset

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use braid_net::{Bytes, Connection, Endpoint, EndpointConfig};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const LOOPBACK: &str = "127.0.0.1:0";

pub fn loopback() -> SocketAddr {
    LOOPBACK.parse().unwrap()
}

/// A server endpoint (accepting) and a client endpoint (not accepting).
pub fn pair(config: EndpointConfig) -> (Endpoint, Endpoint) {
    let server = Endpoint::bind_with(loopback(), config.clone()).unwrap();
    let client = Endpoint::bind_with(loopback(), EndpointConfig { accept_incoming: false, ..config }).unwrap();
    (server, client)
}

/// Fail the test instead of hanging.
pub async fn bounded<T>(secs: u64, what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {secs} s"),
    }
}

/// Accept connections forever and echo every message back on each until
/// the peer closes.
pub fn spawn_echo_server(server: Endpoint) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(conn) = server.accept().await {
            tokio::spawn(echo(conn));
        }
    })
}

pub async fn echo(conn: Connection) {
    while let Ok(msg) = conn.recv_message().await {
        if conn.send_message(msg).await.is_err() {
            return;
        }
    }
}

/// `len` bytes of seeded random data.
pub fn random_bytes(seed: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    Bytes::from(v)
}

/// Message sizes drawn log-uniformly from `[1, max]`: every order of
/// magnitude is equally likely, so tiny, medium and large messages all
/// occur while the total stays moderate (mean ≈ max / ln(max)).
pub fn log_uniform_size(rng: &mut ChaCha8Rng, max: usize) -> usize {
    let ln_max = (max as f64).ln();
    let size = rng.random_range(0.0..=ln_max).exp().round() as usize;
    size.clamp(1, max)
}
