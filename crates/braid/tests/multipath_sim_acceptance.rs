//! Multipath acceptance in the simulator: minimum RTT aggregates two
//! paths (the benchmark setup, `rate=50mbit,rtt=20ms` and
//! `rate=50mbit,rtt=40ms`), delivering byte-exact.

use std::time::Duration;

use braid::sim_multipath::{run, Scenario};
use braid_proto::CcAlgorithm;

#[test]
fn min_rtt_aggregates_two_50_mbit_paths_beyond_90_mbit() {
    for cc in CcAlgorithm::ALL {
        let mut s = Scenario::new("min_rtt", &["rate=50mbit,rtt=20ms", "rate=50mbit,rtt=40ms"]).unwrap();
        s.cc = cc;
        // Four 10 MiB writes: the last one's arrival ends the transfer.
        for _ in 0..4 {
            s.write_at(Duration::from_millis(100), 10 << 20, 0);
        }
        let r = run(&s).unwrap();
        assert!(r.ok, "{cc}: {:?}", r.error);
        let secs = (r.writes[3].delivered.unwrap() - r.writes[0].at).as_secs_f64();
        let mbps = (40u64 << 20) as f64 * 8.0 / secs / 1e6;
        let bytes = r.bytes_by_path();
        assert!(mbps >= 90.0, "{cc}: {mbps:.1} Mbit/s, {bytes:?} bytes by path, {:?}", r.stats);
        // Both paths carry a fair share (the slower one a little less).
        assert!(bytes.iter().all(|&b| b > (16 << 20)), "{cc}: {bytes:?}");
    }
}
