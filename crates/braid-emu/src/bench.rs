//! Measurements through a testbed, used by `braid emu bench` and the
//! tests: bulk kernel-TCP throughput and one-way delay of UDP datagrams.
//!
//! Both ends run as threads of this process inside the hosts' namespaces,
//! so one-way delays are measured against one monotonic clock.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{EmuError, Testbed};

fn io(what: &str) -> impl FnOnce(std::io::Error) -> EmuError + '_ {
    move |e| EmuError::io(what, e)
}

/// Addresses of path `id` on its two hosts, and the hosts.
fn ends(tb: &Testbed, id: usize) -> Result<(String, Ipv4Addr, String, Ipv4Addr), EmuError> {
    let p = tb
        .layout()
        .paths
        .get(id)
        .ok_or_else(|| EmuError::NoSuchPath(id.to_string()))?;
    Ok((p.a.clone(), p.a_addr, p.b.clone(), p.b_addr))
}

/// Goodput of one kernel TCP connection from the first to the second host
/// of path `id`, in bit/s, counted at the receiver over `measure` after a
/// `warmup` (slow start excluded).
pub fn tcp_goodput(
    tb: &Testbed,
    id: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<f64, EmuError> {
    let (a, _, b, b_addr) = ends(tb, id)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let receiver = tb.in_host(&b, move || -> Result<f64, EmuError> {
        let listener = TcpListener::bind((b_addr, 0)).map_err(io("binding the receiver"))?;
        let _ = tx.send(listener.local_addr().map_err(io("receiver address"))?);
        let (mut s, _) = listener.accept().map_err(io("accepting"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io("socket setup"))?;
        let mut buf = vec![0u8; 1 << 20];
        let start = Instant::now();
        let (t0, t1) = (start + warmup, start + warmup + measure);
        let mut counted = 0u64;
        loop {
            let n = s.read(&mut buf).map_err(io("receiving"))?;
            let now = Instant::now();
            if n == 0 || now >= t1 {
                break;
            }
            if now >= t0 {
                counted += n as u64;
            }
        }
        Ok(counted as f64 * 8.0 / measure.as_secs_f64())
    })?;
    let addr: SocketAddr = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| EmuError::io("receiver", std::io::Error::other("did not start")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let sender = tb.in_host(&a, move || -> Result<(), EmuError> {
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(io("connecting"))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))
            .map_err(io("socket setup"))?;
        let buf = vec![0x5au8; 1 << 18];
        while !stop2.load(Ordering::Relaxed) {
            if s.write_all(&buf).is_err() {
                break; // the receiver closed after its measurement
            }
        }
        Ok(())
    })?;
    let result = receiver
        .join()
        .map_err(|_| EmuError::io("receiver", std::io::Error::other("panicked")))?;
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    result
}

/// One-way delays of `count` small UDP datagrams sent from the first to the
/// second host of path `id`, one every `interval` (low load). Lost
/// datagrams are missing from the result.
pub fn udp_one_way_delays(
    tb: &Testbed,
    id: usize,
    count: usize,
    interval: Duration,
) -> Result<Vec<Duration>, EmuError> {
    let (a, a_addr, b, b_addr) = ends(tb, id)?;
    let epoch = Instant::now();
    let rx_sock = {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let h = tb.in_host(&b, move || {
            let _ = tx.send(UdpSocket::bind((b_addr, 0)));
        })?;
        let _ = h.join();
        rx.recv()
            .map_err(|_| EmuError::ForwarderGone)?
            .map_err(io("binding the receiver"))?
    };
    let dst = rx_sock.local_addr().map_err(io("receiver address"))?;
    let tail = Duration::from_secs(2);
    rx_sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(io("socket setup"))?;
    let total = interval * count as u32 + tail;
    // Both ends of the measurement run real-time (below the forwarder), so
    // their own wake-up latency on a busy machine is not counted as delay
    // added by the emulator.
    let receiver = std::thread::spawn(move || {
        crate::sys::set_thread_realtime(5);
        let mut delays = Vec::with_capacity(count);
        let mut buf = [0u8; 64];
        while epoch.elapsed() < total && delays.len() < count {
            if let Ok(n) = rx_sock.recv(&mut buf) {
                if n >= 8 {
                    let sent = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                    let now = epoch.elapsed().as_nanos() as u64;
                    delays.push(Duration::from_nanos(now.saturating_sub(sent)));
                }
            }
        }
        delays
    });
    let sender = tb.in_host(&a, move || -> Result<(), EmuError> {
        crate::sys::set_thread_realtime(5);
        let s = UdpSocket::bind((a_addr, 0)).map_err(io("binding the sender"))?;
        let start = Instant::now();
        for i in 0..count {
            let due = start + interval * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let stamp = (epoch.elapsed().as_nanos() as u64).to_le_bytes();
            s.send_to(&stamp, dst).map_err(io("sending"))?;
        }
        Ok(())
    })?;
    sender
        .join()
        .map_err(|_| EmuError::io("sender", std::io::Error::other("panicked")))??;
    receiver
        .join()
        .map_err(|_| EmuError::io("receiver", std::io::Error::other("panicked")))
}

/// The `q`-quantile (0..=1) of `v` (nearest rank), or zero if empty.
pub fn quantile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&v, 1.0), Duration::from_millis(100));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
