//! Queue disciplines in the emulator, end to end: a UDP flood from host a
//! to host b overloads a 10 Mbit/s path with a 4-BDP buffer while host a
//! pings b. Under drop-tail the pings wait behind the full buffer; under
//! FQ-CoDel (RFC 8290) the ping flow is a sparse flow of its own and
//! waits for almost nothing, and the flood is held by CoDel. Needs root,
//! /dev/net/tun, `ip` and `ping`: skipped with a message without them,
//! and fails under CI=true.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn ready() -> bool {
    let ping = std::path::Path::new("/usr/bin/ping").exists()
        || std::path::Path::new("/bin/ping").exists();
    let check = braid_emu::check_capabilities()
        .map_err(|e| e.to_string())
        .and_then(|()| {
            if ping {
                Ok(())
            } else {
                Err("`ping` is not installed".to_string())
            }
        });
    match check {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("emulator test cannot run under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

/// Median ping RTT (ms) from a to b during a 12 Mbit/s UDP flood over
/// `link`, and the forward link's AQM drops.
fn ping_under_flood(name: &str, link: &str) -> (f64, u64) {
    let tb = braid_emu::Testbed::builder()
        .name(name)
        .link(link.parse().unwrap())
        .seed(3)
        .build()
        .expect("testbed");
    let p = tb.layout().paths[0].clone();
    let dst = SocketAddr::new(p.b_addr.into(), 9);
    let src = SocketAddr::new(p.a_addr.into(), 0);
    let flood = tb
        .in_host("a", move || {
            let sock = UdpSocket::bind(src).unwrap();
            // 1200-byte datagrams every 0.8 ms: 12 Mbit/s for 6 s.
            let start = Instant::now();
            let mut next = start;
            while start.elapsed() < Duration::from_secs(6) {
                let _ = sock.send_to(&[0u8; 1200], dst);
                next += Duration::from_micros(800);
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
        .unwrap();
    // Pings from 2 s on (the queue has built up), 10 per second.
    std::thread::sleep(Duration::from_secs(2));
    let out = tb
        .command("a", "ping")
        .unwrap()
        .args(["-n", "-i", "0.1", "-c", "30", "-s", "56"])
        .arg(p.b_addr.to_string())
        .output()
        .expect("ping");
    flood.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            l.split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(rtts.len() >= 20, "too few ping replies:\n{text}");
    rtts.sort_by(f64::total_cmp);
    let stats = tb.stats().unwrap();
    (rtts[rtts.len() / 2], stats.paths[0].a2b.dropped_aqm)
}

#[test]
fn fq_codel_keeps_a_ping_flow_fast_beside_a_flood_where_drop_tail_does_not() {
    if !ready() {
        return;
    }
    let (tail, tail_aqm) = ping_under_flood("aqmtail", "rtt=20ms,rate=10mbit,queue=4bdp");
    let (fq, fq_aqm) = ping_under_flood("aqmfq", "rtt=20ms,rate=10mbit,queue=4bdp,aqm=fq_codel");
    println!("median ping: drop-tail {tail:.1} ms, fq_codel {fq:.1} ms (AQM drops {fq_aqm})");
    // 4 BDP = 80 ms of queue at 10 Mbit/s on top of the 20 ms RTT.
    assert!(tail > 80.0, "drop-tail median ping {tail} ms");
    assert_eq!(tail_aqm, 0);
    // The ping waits at most for the flood packet being sent (1 ms).
    assert!(fq < 25.0, "fq_codel median ping {fq} ms");
    assert!(fq_aqm > 0, "the flood should meet CoDel drops");
}
