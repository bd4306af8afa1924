//! Emulator acceptance: two paths, kernel MPTCP aggregates them while
//! single-path TCP is held to one (needs root, iperf3 and mptcpize).

mod emu_support;

use emu_support::*;

#[test]
fn mptcp_aggregates_two_50_mbit_paths() {
    if !ready(&["iperf3", "mptcpize"]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("mptcp", &["rate=50mbit,rtt=10ms", "rate=50mbit,rtt=10ms"]);
    let ns = tb.netns("a").unwrap().to_string();
    let sysctl = run_limited(
        {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", &ns, "sysctl", "-n", "net.mptcp.enabled"]);
            c
        },
        std::time::Duration::from_secs(10),
    );
    assert_eq!(String::from_utf8_lossy(&sysctl.stdout).trim(), "1", "MPTCP is disabled in the namespace");
    let b0 = tb.layout().paths[0].b_addr.to_string();
    let single = iperf3_bps(&iperf3(&tb, "b", "a", &b0, 5, 1, &[]));
    assert!(single <= 50e6, "single-path TCP got {:.2} Mbit/s, more than one path", single / 1e6);
    let multi = iperf3_bps(&iperf3(&tb, "b", "a", &b0, 6, 2, &["mptcpize", "run"]));
    let stats = tb.stats().unwrap();
    // Aggregation shown two ways that do not depend on how fast this
    // machine forwards: more than one 50 Mbit/s path can carry, and well
    // above the single-path TCP measured on the same testbed a moment ago
    // (a loaded 2-core CI runner forwards less than line rate for both).
    let one_path = 50e6;
    assert!(
        multi >= 1.1 * one_path && multi >= 1.5 * single,
        "MPTCP got {:.2} Mbit/s over two 50 Mbit/s paths, want >= {:.0} (1.1 paths) and >= 1.5x single-path TCP ({:.2}); {stats:?}",
        multi / 1e6,
        1.1 * one_path / 1e6,
        single / 1e6
    );
    for path in &stats.paths {
        assert!(
            path.a2b.bytes_delivered >= 10_000_000,
            "path {} carried only {} bytes: MPTCP did not use both paths; {stats:?}",
            path.id,
            path.a2b.bytes_delivered
        );
    }
}
