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
    assert!(
        multi >= 90e6,
        "MPTCP got {:.2} Mbit/s over two 50 Mbit/s paths, want >= 90; {stats:?}",
        multi / 1e6
    );
}
