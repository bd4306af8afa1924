//! Statistical tests of every field of the link model, with fixed seeds.
//!
//! Bounds are derived from the distributions (binomial standard deviations,
//! sample-σ error) at about five standard errors, so a correct model fails
//! them with negligible probability and a wrong one (e.g. a factor-of-two
//! error) fails them surely.

use std::time::Duration;

use braid_core::Instant;
use braid_link::{Direction, DropReason, Link, LinkParams, LinkSpec, Verdict};

fn params(spec: &str) -> LinkParams {
    spec.parse::<LinkSpec>().unwrap().params(Direction::AToB)
}

fn link(spec: &str, seed: u64) -> Link {
    Link::new(params(spec), seed)
}

/// Asserts `count` successes in `n` trials is within 5 σ of `p`.
fn assert_binomial(count: u64, n: u64, p: f64, what: &str) {
    let mean = n as f64 * p;
    let sigma = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (count as f64 - mean).abs() <= 5.0 * sigma,
        "{what}: {count} of {n}, expected {mean:.1} ± {:.1}",
        5.0 * sigma
    );
}

fn at(v: Verdict) -> Option<Instant> {
    match v {
        Verdict::Deliver { at, .. } => Some(at),
        Verdict::Dropped(_) => None,
        Verdict::Queued(id) => panic!("{id:?} queued: drop-tail decides at once"),
    }
}

#[test]
fn bernoulli_loss_rate_is_binomial() {
    for (spec, p, seed) in [
        ("loss=5%", 0.05, 1),
        ("loss=0.2", 0.2, 2),
        ("loss=0.1%", 0.001, 3),
    ] {
        let mut l = link(spec, seed);
        let n = 200_000;
        for i in 0..n {
            l.offer(Instant::from_micros(i), 100);
        }
        let s = l.stats();
        assert_binomial(s.dropped_loss, n, p, spec);
        assert_eq!(s.delivered + s.dropped(), n);
        assert_eq!(s.dropped_for(DropReason::Loss), s.dropped_loss);
    }
}

#[test]
fn no_loss_means_no_loss() {
    let mut l = link("rtt=10ms", 9);
    for i in 0..10_000 {
        assert!(at(l.offer(Instant::from_micros(i), 1500)).is_some());
    }
}

#[test]
fn gilbert_elliott_mean_burst_length_within_20_percent() {
    for (spec, seed) in [("ge=1%/25%", 4), ("ge=0.5%/10%", 5), ("ge=3%/50%", 6)] {
        let mut l = link(spec, seed);
        let ge = l.params().burst_loss.unwrap();
        let (mut lost, mut bursts, mut prev) = (0u64, 0u64, false);
        let n = 300_000;
        for i in 0..n {
            let dropped = matches!(
                l.offer(Instant::from_micros(i), 100),
                Verdict::Dropped(DropReason::BurstLoss)
            );
            lost += u64::from(dropped);
            bursts += u64::from(dropped && !prev);
            prev = dropped;
        }
        let mean = lost as f64 / bursts as f64;
        let want = ge.mean_burst_length();
        assert!(
            (mean - want).abs() <= 0.2 * want,
            "{spec}: mean burst {mean:.2}, configured {want:.2}"
        );
        let rate = lost as f64 / n as f64;
        assert!(
            (rate - ge.mean_loss_rate()).abs() <= 0.2 * ge.mean_loss_rate(),
            "{spec}: loss rate {rate}"
        );
        assert_eq!(l.stats().dropped_burst, lost);
    }
}

#[test]
fn throughput_never_exceeds_rate() {
    // Offer 2× the rate; a huge queue so nothing is dropped.
    let mut l = link("delay=5ms,rate=10mbit,queue=100mb", 7);
    let delay = Duration::from_millis(5);
    let mut departures = Vec::new();
    for i in 0..20_000u64 {
        // 1250 B every 0.5 ms = 20 Mbit/s.
        let now = Instant::from_micros(i * 500);
        departures.push((at(l.offer(now, 1250)).unwrap() - delay, 1250u64));
    }
    let rate_bytes_per_ns = 10e6 / 8.0 / 1e9;
    // Between any two departures, bytes serialized ≤ rate × elapsed
    // (checked for consecutive packets and over the whole run).
    for w in departures.windows(2) {
        let gap = (w[1].0 - w[0].0).as_nanos() as f64;
        assert!(
            w[1].1 as f64 <= gap * rate_bytes_per_ns + 1e-6,
            "gap {gap} ns too short"
        );
    }
    let span = (departures.last().unwrap().0 - Instant::ZERO).as_nanos() as f64;
    let bytes: u64 = departures.iter().map(|d| d.1).sum();
    let achieved = bytes as f64 / span;
    assert!(achieved <= rate_bytes_per_ns);
    assert!(
        achieved > 0.999 * rate_bytes_per_ns,
        "a saturated link runs at its rate: {achieved}"
    );
}

#[test]
fn byte_queue_bound_is_respected() {
    // 10 Mbit/s, 30 kB queue, offered at 2× the rate.
    let mut l = link("delay=1ms,rate=10mbit,queue=30kb", 8);
    let mut worst_sojourn = Duration::ZERO;
    for i in 0..20_000u64 {
        let now = Instant::from_micros(i * 500);
        if let Some(t) = at(l.offer(now, 1250)) {
            worst_sojourn = worst_sojourn.max(t - now - Duration::from_millis(1));
        }
        assert!(l.backlog_bytes(now) <= 30_000);
    }
    let s = *l.stats();
    assert!(
        s.max_backlog_bytes <= 30_000 && s.max_backlog_bytes > 28_000,
        "{s:?}"
    );
    // Half the offered load cannot fit.
    assert_binomial(s.dropped_queue, s.offered, 0.5, "tail drops");
    // Sojourn ≤ queue / rate = 30 000 B / 1.25 MB/s = 24 ms.
    assert!(
        worst_sojourn <= Duration::from_millis(24),
        "{worst_sojourn:?}"
    );
    assert!(
        worst_sojourn >= Duration::from_millis(22),
        "{worst_sojourn:?}"
    );
}

#[test]
fn packet_queue_bound_is_respected() {
    let mut l = link("rate=1mbit,queue=5p", 9);
    let t0 = Instant::ZERO;
    let verdicts: Vec<_> = (0..8).map(|_| l.offer(t0, 1000)).collect();
    assert!(verdicts[..5].iter().all(|v| at(*v).is_some()));
    assert!(verdicts[5..]
        .iter()
        .all(|v| *v == Verdict::Dropped(DropReason::QueueFull)));
    assert_eq!(l.stats().dropped_queue, 3);
}

#[test]
fn default_queue_is_one_bdp() {
    // 10 Mbit/s × 100 ms = 125 000 bytes; flood it at t = 0.
    let mut l = link("rtt=100ms,rate=10mbit", 10);
    let accepted = (0..200)
        .filter(|_| at(l.offer(Instant::ZERO, 1000)).is_some())
        .count();
    assert_eq!(accepted, 125);
}

#[test]
fn jitter_sigma_is_the_round_trip_sigma_and_mean_is_kept() {
    // Sparse pings (one per 100 ms) so the monotone clamp never binds.
    let spec = "rtt=40ms,jitter=5ms";
    let (mut fwd, mut back) = (link(spec, 11), link(spec, 12));
    let n = 20_000u64;
    let mut rtts = Vec::new();
    for i in 0..n {
        let sent = Instant::from_micros(i * 100_000);
        let there = at(fwd.offer(sent, 84)).unwrap();
        let back_at = at(back.offer(there, 84)).unwrap();
        rtts.push((back_at - sent).as_secs_f64() * 1e3);
    }
    let mean = rtts.iter().sum::<f64>() / n as f64;
    let var = rtts.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sigma = var.sqrt();
    // Standard error of σ̂ is σ/√(2n) ≈ 0.025 ms; of the mean σ/√n ≈ 0.035 ms.
    assert!((sigma - 5.0).abs() < 0.15, "σ = {sigma:.3} ms");
    assert!((mean - 40.0).abs() < 0.2, "mean = {mean:.3} ms");
}

#[test]
fn jitter_never_reorders() {
    let mut l = link("rtt=20ms,jitter=8ms,rate=50mbit", 13);
    let mut last = Instant::ZERO;
    for i in 0..50_000u64 {
        let t = at(l.offer(Instant::from_micros(i * 100), 300)).unwrap();
        assert!(t >= last, "packet {i} overtook its predecessor");
        last = t;
    }
}

#[test]
fn reorder_holds_back_the_configured_fraction() {
    let mut l = link("rtt=20ms,reorder=2%,reorder_delay=3ms", 14);
    let n = 100_000u64;
    let times: Vec<Instant> = (0..n)
        .map(|i| at(l.offer(Instant::from_micros(i * 100), 200)).unwrap())
        .collect();
    assert_binomial(l.stats().reordered, n, 0.02, "reordered");
    // A held packet arrives 3 ms late, so the ~29 packets sent after it
    // overtake it: count packets that arrive after their successor.
    let overtaken = times.windows(2).filter(|w| w[0] > w[1]).count() as u64;
    assert_binomial(overtaken, n, 0.02 * 0.98, "overtaken");
    for (i, t) in times.iter().enumerate() {
        let base = Instant::from_micros(i as u64 * 100) + Duration::from_millis(10);
        assert!(*t == base || *t == base + Duration::from_millis(3));
    }
}

#[test]
fn dup_delivers_the_configured_fraction_twice() {
    let mut l = link("delay=1ms,dup=5%", 15);
    let n = 100_000u64;
    let mut dups = 0;
    for i in 0..n {
        match l.offer(Instant::from_micros(i), 100) {
            Verdict::Deliver {
                at,
                duplicate_at: Some(d),
            } => {
                assert!(d >= at);
                dups += 1;
            }
            Verdict::Deliver { .. } => {}
            Verdict::Dropped(r) => panic!("dropped: {r}"),
            Verdict::Queued(id) => panic!("{id:?} queued: drop-tail decides at once"),
        }
    }
    assert_eq!(l.stats().duplicated, dups);
    assert_binomial(dups, n, 0.05, "duplicated");
}

#[test]
fn mtu_drops_are_counted() {
    let mut l = link("mtu=1500", 16);
    assert!(at(l.offer(Instant::ZERO, 1500)).is_some());
    assert_eq!(
        l.offer(Instant::ZERO, 1501),
        Verdict::Dropped(DropReason::Mtu)
    );
    assert_eq!(l.stats().dropped_mtu, 1);
}

#[test]
fn set_params_affects_only_later_packets() {
    let mut l = link("delay=100ms,rate=8mbit", 17); // 1000 B = 1 ms
    let first = at(l.offer(Instant::ZERO, 1000)).unwrap();
    assert_eq!(first, Instant::ZERO + Duration::from_millis(101));
    l.set_params(params("delay=10ms,rate=80mbit"));
    // Serialized after the first (finishes at 1.1 ms), 10 ms of delay, but
    // clamped behind the first packet: no reordering by the change.
    let second = at(l.offer(Instant::ZERO, 1000)).unwrap();
    assert_eq!(second, first);
    let later = at(l.offer(Instant::from_micros(200_000), 1000)).unwrap();
    assert_eq!(later, Instant::from_micros(200_000 + 100 + 10_000));
    assert_eq!(l.stats().dropped(), 0);
}

#[test]
fn same_seed_same_fate_other_seed_differs() {
    let spec = "rtt=30ms,jitter=2ms,rate=20mbit,queue=20kb,loss=3%,ge=1%/30%,reorder=2%,dup=1%";
    let run = |seed| {
        let mut l = link(spec, seed);
        (0..5_000u64)
            .map(|i| l.offer(Instant::from_micros(i * 300), 1200))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}
