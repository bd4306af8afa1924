//! Emulator acceptance: random and Gilbert-Elliott loss over 50,000 UDP
//! datagrams (needs root; see emu_support).

mod emu_support;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use braid_emu::Testbed;
use emu_support::*;

const PACKETS: u32 = 50_000;

/// Send `PACKETS` numbered datagrams from a to b (paced at 25,000 per
/// second so nothing but the model drops them) and return which arrived.
fn received(tb: &Testbed) -> Vec<bool> {
    let p = &tb.layout().paths[0];
    let (a_addr, b_addr) = (p.a_addr, p.b_addr);
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = tb
        .in_host("b", move || {
            let s = UdpSocket::bind((b_addr, 0)).unwrap();
            let _ = socket2::SockRef::from(&s).set_recv_buffer_size(8 << 20);
            tx.send(s.local_addr().unwrap()).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
            let mut got = vec![false; PACKETS as usize];
            let mut buf = [0u8; 64];
            while let Ok(n) = s.recv(&mut buf) {
                if n >= 4 {
                    let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    if let Some(g) = got.get_mut(i as usize) {
                        *g = true;
                    }
                }
            }
            got
        })
        .unwrap();
    let dst = rx.recv().unwrap();
    let sender = tb
        .in_host("a", move || {
            let s = UdpSocket::bind((a_addr, 0)).unwrap();
            let start = Instant::now();
            for i in 0..PACKETS {
                let due = start + Duration::from_micros(40) * i;
                while Instant::now() < due {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let mut msg = [0u8; 100];
                msg[..4].copy_from_slice(&i.to_le_bytes());
                s.send_to(&msg, dst).unwrap();
            }
        })
        .unwrap();
    sender.join().unwrap();
    receiver.join().unwrap()
}

#[test]
fn random_loss_lies_in_the_binomial_999_interval() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("loss", &["loss=2%"]);
    let got = received(&tb);
    let lost = got.iter().filter(|g| !**g).count() as f64;
    let stats = tb.stats().unwrap();
    let n = f64::from(PACKETS);
    let (mean, sd) = (n * 0.02, (n * 0.02 * 0.98).sqrt());
    // 99.9% two-sided: ±3.29 σ (normal approximation, np = 1000).
    let (lo, hi) = (mean - 3.29 * sd, mean + 3.29 * sd);
    assert!((lo..=hi).contains(&lost), "lost {lost} of {n}, want within [{lo:.0}, {hi:.0}]; {stats:?}");
    // Every loss is the model's: the forwarder dropped nothing else.
    assert_eq!(stats.forwarder.dropped_no_buffer + stats.forwarder.write_errors, 0, "{stats:?}");
    assert_eq!(stats.paths[0].a2b.dropped_loss as f64, lost, "{stats:?}");
}

#[test]
fn gilbert_elliott_mean_burst_length_within_20_percent() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    // p = 1%, r = 25%: bursts of 4 packets on average.
    let tb = testbed("ge", &["ge=1%/25%"]);
    let got = received(&tb);
    let (mut lost, mut bursts, mut prev_lost) = (0u32, 0u32, false);
    for g in &got {
        let l = !*g;
        lost += u32::from(l);
        bursts += u32::from(l && !prev_lost);
        prev_lost = l;
    }
    assert!(bursts > 100, "only {bursts} bursts");
    let mean = f64::from(lost) / f64::from(bursts);
    assert!((mean - 4.0).abs() <= 0.8, "mean burst length {mean:.3}, want 4 ± 20%");
}
