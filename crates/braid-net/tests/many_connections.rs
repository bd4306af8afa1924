//! Acceptance criterion: 100 concurrent connections each exchange 1000
//! messages of random sizes between 1 B and 1 MiB, intact.
//!
//! Sizes are drawn log-uniformly (every order of magnitude equally likely,
//! mean ≈ 75 KB) rather than uniformly (mean 512 KiB), which keeps the
//! volume at about 7.5 GB each way instead of 50 GB while still covering
//! one-byte, MTU-sized and megabyte messages. Each client sends its
//! messages while a second task reads the echoes and compares them with
//! what was sent; contents are slices of a seeded random pool at seeded
//! offsets, so a corrupted, truncated, lost or reordered message is caught.

mod common;

use std::time::Instant;

use braid_net::{Bytes, EndpointConfig};
use common::{bounded, log_uniform_size, pair, random_bytes, spawn_echo_server};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CONNECTIONS: u64 = 100;
const MESSAGES: usize = 1000;
const MAX_SIZE: usize = 1 << 20;
const SEED: u64 = 0x0b5a_1d00;
const POOL_SIZE: usize = 2 * MAX_SIZE;

/// The `MESSAGES` messages of connection `c`, as (offset, length) in the
/// pool: the sender and the verifier both derive them from the seed.
fn schedule(c: u64) -> impl Iterator<Item = (usize, usize)> {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ (c << 32));
    (0..MESSAGES).map(move |_| {
        let len = log_uniform_size(&mut rng, MAX_SIZE);
        (rng.random_range(0..=POOL_SIZE - len), len)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_connections_exchange_random_messages_intact() {
    let mut config = EndpointConfig::default();
    // Bounded memory: 100 connections × 4 buffers of this size at worst.
    config.transport.receive_window = 4 << 20;
    config.transport.send_buffer = 4 << 20;
    let (server, client) = pair(config);
    let server_addr = server.local_addr();
    spawn_echo_server(server.clone());
    let pool = random_bytes(SEED, POOL_SIZE);
    let started = Instant::now();

    let (total, lost, rtos) = bounded(600, "100 connections × 1000 messages", async {
        let mut tasks = Vec::new();
        for c in 0..CONNECTIONS {
            let client = client.clone();
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                let conn = client.connect(server_addr).await.unwrap();
                let sender = tokio::spawn({
                    let conn = conn.clone();
                    let pool = pool.clone();
                    async move {
                        for (off, len) in schedule(c) {
                            conn.send_message(pool.slice(off..off + len)).await.unwrap();
                        }
                    }
                });
                let mut bytes = 0u64;
                for (i, (off, len)) in schedule(c).enumerate() {
                    let echoed: Bytes = conn.recv_message().await.unwrap();
                    assert_eq!(echoed.len(), len, "connection {c}, message {i}: length");
                    assert!(echoed == pool.slice(off..off + len), "connection {c}, message {i}: content");
                    bytes += len as u64;
                }
                sender.await.unwrap();
                conn.close().await.unwrap();
                let stats = conn.stats();
                (bytes, stats.packets_lost, stats.rto_count)
            }));
        }
        let (mut total, mut lost, mut rtos) = (0, 0, 0);
        for t in tasks {
            let (bytes, l, r) = t.await.unwrap();
            total += bytes;
            lost += l;
            rtos += r;
        }
        (total, lost, rtos)
    })
    .await;

    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{CONNECTIONS} connections × {MESSAGES} messages: {:.2} GB echoed in {secs:.1} s ({:.2} Gbit/s each way); \
         client side: {lost} packets lost, {rtos} retransmission timeouts",
        total as f64 / 1e9,
        total as f64 * 8.0 / secs / 1e9
    );
    let stats = client.stats();
    assert_eq!(stats.connections_initiated, CONNECTIONS);
    assert_eq!(server.stats().connections_accepted, CONNECTIONS);
    // Neither side ever receives a datagram it cannot parse: GSO batches
    // hold equal datagrams (only the last shorter), or GRO splits them
    // into garbage.
    assert_eq!(stats.malformed_datagrams, 0);
    assert_eq!(server.stats().malformed_datagrams, 0);
}
