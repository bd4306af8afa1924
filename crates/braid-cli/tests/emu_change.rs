//! Emulator acceptance: changing a path at runtime (needs root; see
//! emu_support).

mod emu_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use emu_support::*;
use sha2::{Digest, Sha256};

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn rtt_change_shows_in_ping_within_200ms() {
    if !ready(&["ping"]) {
        return;
    }
    let _serial = serial();
    let mut tb = testbed("chg", &["rtt=20ms"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    let mut c = tb.command("a", "ping").unwrap();
    c.args(["-D", "-n", "-c", "300", "-i", "0.01", &b]);
    let pinger = std::thread::spawn(move || run_limited(c, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(1500));
    let changed_at = unix_now();
    tb.set_path("0", &"rtt=100ms".parse().unwrap()).unwrap();
    let out = pinger.join().unwrap();
    let replies = parse_ping(&String::from_utf8_lossy(&out.stdout));
    assert!(replies.len() >= 280, "only {} replies", replies.len());
    let before: Vec<f64> = replies.iter().filter(|(t, _)| *t < changed_at).map(|&(_, r)| r).collect();
    assert!((median(&before) - 20.0).abs() <= 1.0, "before the change: {before:?}");
    // The first reply that saw the new delay (in either direction) came
    // within 200 ms of the change.
    let first = replies.iter().find(|(t, r)| *t >= changed_at && *r > 30.0).expect("no reply after the change saw it");
    assert!(first.0 - changed_at <= 0.2, "the change showed {:.0} ms after it was made", (first.0 - changed_at) * 1e3);
    // Pings sent well after the change see the full new rtt.
    let late: Vec<f64> = replies.iter().filter(|(t, _)| *t > changed_at + 0.3).map(|&(_, r)| r).collect();
    assert!((median(&late) - 100.0).abs() <= 1.0, "after the change: {late:?}");
    assert_eq!(tb.stats().unwrap().forwarder.write_errors, 0);
}

#[test]
fn tcp_transfer_across_a_change_completes_intact() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    let mut tb = testbed("chgtcp", &["rtt=20ms,rate=50mbit"]);
    let p = tb.layout().paths[0].clone();
    const BYTES: usize = 24 << 20; // about 4 s at 50 Mbit/s
    let data: Vec<u8> = (0..BYTES).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let want = Sha256::digest(&data);
    let (tx, rx) = std::sync::mpsc::channel();
    let b_addr = p.b_addr;
    let receiver = tb
        .in_host("b", move || {
            let l = TcpListener::bind((b_addr, 0)).unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut got = Vec::with_capacity(BYTES);
            s.read_to_end(&mut got).unwrap();
            got
        })
        .unwrap();
    let addr = rx.recv().unwrap();
    let sender = tb
        .in_host("a", move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&data).unwrap();
        })
        .unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    tb.set_path("0", &"rtt=100ms,rate=50mbit".parse().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    // And back down: arrivals must stay in order across a delay decrease.
    tb.set_path("0", &"rtt=20ms,rate=50mbit".parse().unwrap()).unwrap();
    sender.join().unwrap();
    let got = receiver.join().unwrap();
    assert!(t0.elapsed() > Duration::from_millis(2500), "the transfer ended before the changes");
    assert_eq!(got.len(), BYTES);
    assert_eq!(Sha256::digest(&got), want, "received data differs");
}
