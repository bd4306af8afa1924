//! Emulator acceptance: kernel TCP (iperf3) through rate-limited paths, and
//! a Mahimahi rate trace (needs root; see emu_support).

mod emu_support;

use std::time::Duration;

use emu_support::*;

#[test]
fn tcp_gets_at_least_90_of_100_mbit_at_20ms() {
    if !ready(&["iperf3"]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("rate100", &["rate=100mbit,rtt=20ms"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    // The better of two 5 s runs must reach 90%: what is tested is that the
    // emulator can carry the rate. On a CI runner one run of the kernel's
    // BBR once got 67.8 Mbit/s where the next runs got 96; a second run is
    // taken only after a short one, and no run may exceed the rate.
    let mut best = 0.0f64;
    for _ in 0..2 {
        let bps = iperf3_bps(&iperf3(&tb, "b", "a", &b, 5, 1, &[]));
        assert!(bps <= 100e6, "{:.2} Mbit/s is above the configured rate", bps / 1e6);
        best = best.max(bps);
        if best >= 90e6 {
            break;
        }
    }
    assert!(best >= 90e6, "{:.2} Mbit/s (the better of two runs) through rate=100mbit,rtt=20ms, want >= 90", best / 1e6);
}

#[test]
fn tcp_gets_at_least_9_of_10_mbit() {
    if !ready(&["iperf3"]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("rate10", &["rate=10mbit"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    let bps = iperf3_bps(&iperf3(&tb, "b", "a", &b, 5, 1, &[]));
    assert!(bps >= 9e6, "{:.2} Mbit/s through rate=10mbit, want >= 9", bps / 1e6);
    assert!(bps <= 10e6, "{:.2} Mbit/s is above the configured rate", bps / 1e6);
}

#[test]
fn mahimahi_trace_sets_the_rate() {
    if !ready(&[]) {
        return;
    }
    let _serial = serial();
    // Two opportunities per millisecond: 24 Mbit/s.
    let dir = std::env::temp_dir().join(format!("braid-emu-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("24mbit.trace");
    let text: String = (1..=100).flat_map(|ms| [ms, ms]).map(|ms| format!("{ms}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let spec = format!("rtt=10ms,trace={}", file.display());
    let tb = testbed("trace", &[&spec]);
    let bps = braid_emu::bench::tcp_goodput(&tb, 0, Duration::from_secs(1), Duration::from_secs(3)).unwrap();
    drop(tb);
    let _ = std::fs::remove_dir_all(&dir);
    assert!((21e6..=24e6).contains(&bps), "{:.2} Mbit/s through a 24 Mbit/s trace", bps / 1e6);
}
