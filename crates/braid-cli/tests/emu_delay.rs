//! Emulator acceptance: delay and jitter measured with ping, per-direction
//! delay and scheduled changes (needs root; see emu_support).

mod emu_support;

use emu_support::*;

#[test]
fn ping_median_matches_rtt_within_1ms() {
    if !ready(&["ping"]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("delay", &["rtt=40ms"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    let rtts: Vec<f64> = ping(&tb, "a", &b, 250, 0.02).into_iter().map(|(_, r)| r).collect();
    assert!(rtts.len() >= 245, "only {} replies of 250", rtts.len());
    let m = median(&rtts);
    assert!((m - 40.0).abs() <= 1.0, "median rtt {m:.3} ms, want 40 ± 1 ms");
    let stats = tb.stats().unwrap();
    assert!(stats.paths[0].a2b.delivered >= 245 && stats.paths[0].b2a.delivered >= 245, "{stats:?}");
}

#[test]
fn jitter_gives_the_configured_standard_deviation() {
    if !ready(&["ping"]) {
        return;
    }
    let _serial = serial();
    let tb = testbed("jitter", &["rtt=40ms,jitter=5ms"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    let rtts: Vec<f64> = ping(&tb, "a", &b, 400, 0.02).into_iter().map(|(_, r)| r).collect();
    assert!(rtts.len() >= 390, "only {} replies of 400", rtts.len());
    let sd = std_dev(&rtts);
    assert!((sd - 5.0).abs() <= 1.0, "rtt standard deviation {sd:.3} ms, want 5 ms ± 20%");
    let m = median(&rtts);
    assert!((m - 40.0).abs() <= 1.5, "median rtt {m:.3} ms with jitter, want about 40 ms");
}

#[test]
fn per_direction_delays_add_up_and_schedules_apply() {
    if !ready(&["ping"]) {
        return;
    }
    let _serial = serial();
    // 5 ms there, 35 ms back; after 3 s both directions become 30 ms.
    let tb = testbed("asym", &["a2b:delay=5ms,b2a:delay=35ms;at=3s:rtt=60ms"]);
    let b = tb.layout().paths[0].b_addr.to_string();
    let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let replies = ping(&tb, "a", &b, 50, 0.1);
    assert!(replies.len() >= 45, "only {} replies", replies.len());
    let before: Vec<f64> = replies.iter().filter(|(t, _)| t - start < 2.0).map(|&(_, r)| r).collect();
    let after: Vec<f64> = replies.iter().filter(|(t, _)| t - start > 4.0).map(|&(_, r)| r).collect();
    assert!(before.len() >= 10 && after.len() >= 5, "{replies:?}");
    let (mb, ma) = (median(&before), median(&after));
    assert!((mb - 40.0).abs() <= 1.0, "asymmetric 5+35 ms: median {mb:.3} ms");
    assert!((ma - 60.0).abs() <= 1.0, "after the scheduled change to rtt=60ms: median {ma:.3} ms");
}
