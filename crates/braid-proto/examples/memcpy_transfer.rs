//! Measures the protocol's CPU cost with no I/O: two endpoints joined by an
//! in-memory lossless pipe move `BYTES` (default 1 GiB) in `MSG`-byte
//! messages (default 64 KiB). Prints the rate the state machines alone can
//! sustain on one core: the ceiling for any driver.
//!
//! `cargo run --release -p braid-proto --example memcpy_transfer [BYTES] [MSG]`

use std::net::SocketAddr;
use std::time::Duration;

use braid_core::Instant;
use braid_proto::{Endpoint, EndpointConfig, Event};
use bytes::Bytes;

fn main() {
    let mut args = std::env::args().skip(1);
    let total: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 30);
    let msg_size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64 << 10);
    let a_addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let b_addr: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let mut a = Endpoint::new(EndpointConfig { accept_incoming: false, ..Default::default() }, 1);
    let mut b = Endpoint::new(EndpointConfig::default(), 2);
    let wall = std::time::Instant::now();
    let t0 = wall;
    let now = || Instant::from_nanos(t0.elapsed().as_nanos() as u64);
    let conn = a.connect(now(), b_addr).unwrap();
    let payload = Bytes::from(vec![0xabu8; msg_size]);
    let (mut sent, mut received, mut server) = (0u64, 0u64, None);
    let mut buf = Vec::with_capacity(65536);
    let mut datagrams = 0u64;
    while received < total {
        while sent < total {
            match a.send_message(conn, payload.clone()) {
                Ok(()) => sent += payload.len() as u64,
                Err(_) => break,
            }
        }
        let t = now();
        while let Some(tx) = a.poll_transmit(t, 44, &mut buf) {
            let seg = tx.segment_size.unwrap_or(tx.size);
            let data = Bytes::copy_from_slice(&buf[..tx.size]);
            for off in (0..tx.size).step_by(seg) {
                datagrams += 1;
                b.handle_datagram(t, a_addr, data.slice(off..(off + seg).min(tx.size)));
            }
        }
        while let Some(tx) = b.poll_transmit(t, 44, &mut buf) {
            let seg = tx.segment_size.unwrap_or(tx.size);
            let data = Bytes::copy_from_slice(&buf[..tx.size]);
            for off in (0..tx.size).step_by(seg) {
                a.handle_datagram(t, b_addr, data.slice(off..(off + seg).min(tx.size)));
            }
        }
        while let Some(ev) = b.poll_event() {
            if let Event::Accepted(h) = ev {
                server = Some(h);
            }
        }
        if let Some(h) = server {
            while let Ok(Some(m)) = b.recv_message(h) {
                received += m.len() as u64;
            }
        }
        let t = now();
        if a.poll_timeout().is_some_and(|d| d <= t) {
            a.handle_timeout(t);
        }
        if b.poll_timeout().is_some_and(|d| d <= t) {
            b.handle_timeout(t);
        }
        while a.poll_event().is_some() {}
        if wall.elapsed() > Duration::from_secs(120) {
            eprintln!("timeout");
            break;
        }
    }
    let secs = wall.elapsed().as_secs_f64();
    let stats = a.connection_stats(conn).unwrap();
    println!(
        "{received} bytes in {secs:.3}s: {:.2} Gbit/s, {:.0} datagrams/s, lost {}, srtt {:?}, cwnd {}",
        received as f64 * 8.0 / secs / 1e9,
        datagrams as f64 / secs,
        stats.packets_lost,
        stats.smoothed_rtt,
        stats.cwnd
    );
}
