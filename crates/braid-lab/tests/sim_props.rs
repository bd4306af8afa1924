//! Property test: over random link specs (loss up to 20%, with random
//! duplication, reordering, jitter, rate and queue), sizes, message sizes,
//! controllers and seeds, every simulated transfer arrives byte-exact and
//! finishes within a time bound derived from the link.
//!
//! # The bound
//!
//! Round trips follow the classic models of a window-based transport (slow
//! start, then the loss-limited window), and every loss is charged a
//! retransmission timeout as if fast retransmit never worked; the handshake
//! and one packet may suffer a long run of back-offs. With `p` the loss probability per
//! direction, a packet or its acknowledgement is lost with
//! `q = 1 − (1 − p)²`. Let `B(R, k) = Σ_{i<k} min(R·2^i, 60 s)` be the time
//! spent by `k` consecutive timeouts backing off from `R` (capped at the
//! transport's `max_rto`), and `k` the smallest count with `q^k ≤ 10⁻³`
//! (a longer run of losses of one packet has odds below 1 in 1000). Then
//!
//! ```text
//! bound = 2·B(1 s, k)                  handshake: two exchanges, initial RTO 1 s
//!       + wire_bytes·8 / rate          serialization, wire_bytes = 1.1·bytes + 16·messages
//!       + 2·rounds·rtt_max             round trips, twice the model below
//!       + ⌈q·n⌉·rto + B(rto, k)        each loss: a timeout; one packet: a run of back-offs
//! rounds = log₂(1 + n/10) + 1          slow start from 10 packets (n = wire_bytes / 1200)
//!        + n·√(2q/3)                   at the loss-limited window √(3/(2q)) (Mathis et al.)
//! ```
//!
//! where `rtt_max = rtt + 6·jitter + 2·queue/rate + reorder_delay + 2·max_ack_delay`
//! is the slowest round trip the link produces and `rto = max(200 ms,
//! 2·rtt_max)`. A transfer that stalls (a lost retransmission never
//! repaired, a window that never reopens) blows through it.
//!
//! The cases come from a fixed proptest seed so CI is reproducible; set
//! `PROPTEST_RNG_SEED` to explore others. (Other seeds once found the two
//! transport failures now pinned in `sim_regressions.rs`; after their fix,
//! 3,000 cases over 15 further seeds all passed.)

use std::time::Duration;

use braid_lab::harness::sim_transfer::{run, SimTransferConfig};
use braid_link::{Direction, LinkSpec, ResolvedQueue};
use braid_proto::CcAlgorithm;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

const MAX_RTO: f64 = 60.0;
const MIN_RTO: f64 = 0.2;
const INITIAL_RTO: f64 = 1.0;
const MAX_ACK_DELAY: f64 = 0.005;

/// Time spent by `k` consecutive timeouts backing off from `r` seconds.
fn backoff(r: f64, k: u32) -> f64 {
    (0..k).map(|i| (r * 2f64.powi(i as i32)).min(MAX_RTO)).sum()
}

/// Round trips to move `n` packets: slow start from 10 packets, then the
/// loss-limited window √(3/(2q)).
fn rounds(n: f64, q: f64) -> f64 {
    (1.0 + n / 10.0).log2() + 1.0 + n * (2.0 * q / 3.0).sqrt()
}

/// The documented bound, in seconds.
fn bound(spec: &LinkSpec, bytes: u64, message_size: usize) -> f64 {
    let p = spec.params(Direction::AToB);
    let loss = p.loss.as_f64();
    let q = 1.0 - (1.0 - loss).powi(2);
    let k = if q > 0.0 {
        (1e-3f64.ln() / q.ln()).ceil().max(1.0) as u32
    } else {
        1
    };
    let messages = bytes.div_ceil(message_size as u64) + 1;
    let wire_bytes = 1.1 * bytes as f64 + 16.0 * messages as f64;
    let n = (wire_bytes / 1200.0).ceil();
    let (serialization, queue_delay) = match (p.rate, p.effective_queue()) {
        (Some(rate), Some(queue)) => {
            let bytes_per_sec = rate.bytes_per_sec_f64();
            let queue_bytes = match queue {
                ResolvedQueue::Bytes(b) => b as f64,
                ResolvedQueue::Packets(n) => n as f64 * p.full_packet() as f64,
            };
            (wire_bytes / bytes_per_sec, queue_bytes / bytes_per_sec)
        }
        _ => (0.0, 0.0),
    };
    let reorder = if p.reorder.is_zero() {
        0.0
    } else {
        p.effective_reorder_delay().as_secs_f64()
    };
    let rtt_max = spec.rtt().as_secs_f64()
        + 6.0 * p.jitter.as_secs_f64()
        + 2.0 * queue_delay
        + reorder
        + 2.0 * MAX_ACK_DELAY;
    let rto = (2.0 * rtt_max).max(MIN_RTO);
    2.0 * backoff(INITIAL_RTO, k)
        + serialization
        + 2.0 * rounds(n, q) * rtt_max
        + (q * n).ceil() * rto
        + backoff(rto, k)
}

/// A random link: rtt 1–200 ms, loss 0–20%, dup and reorder 0–5%, jitter
/// up to a quarter of the rtt, maybe a rate of 1–200 Mbit/s with maybe a
/// queue in packets or BDPs.
fn link() -> impl Strategy<Value = String> {
    let queue = prop_oneof![
        (4u32..200).prop_map(|p| format!("{p}p")),
        (1u32..=40).prop_map(|q| format!("{}bdp", f64::from(q) / 10.0))
    ];
    (
        1u32..=200,
        0u32..=200,
        0u32..=20,
        0u32..=20,
        0u32..=50,
        prop::option::of((1u32..=200, prop::option::of(queue))),
    )
        .prop_map(|(rtt, loss, dup, reorder, jitter, rate)| {
            let mut s = format!(
                "rtt={rtt}ms,loss={}%,dup={}%,reorder={}%,jitter={}us",
                f64::from(loss) / 10.0,
                f64::from(dup) / 4.0,
                f64::from(reorder) / 4.0,
                jitter * rtt * 5,
            );
            if let Some((rate, queue)) = rate {
                s += &format!(",rate={rate}mbit");
                if let Some(q) = queue {
                    s += &format!(",queue={q}");
                }
            }
            s
        })
}

#[test]
fn random_links_deliver_byte_exact_within_the_bound() {
    let config = Config {
        cases: 200,
        rng_seed: match std::env::var("PROPTEST_RNG_SEED") {
            Ok(_) => Config::default().rng_seed,
            Err(_) => RngSeed::Fixed(0x00B4_A1D5),
        },
        failure_persistence: None,
        ..Config::default()
    };
    let cases = (
        link(),
        0u64..=300_000,
        // Message sizes spread over 16 B .. 128 KiB.
        (4u32..=17, 0.0f64..1.0).prop_map(|(e, f)| (2f64.powf(f64::from(e) + f)) as usize),
        prop_oneof![Just(CcAlgorithm::NewReno), Just(CcAlgorithm::Cubic)],
        any::<u64>(),
    );
    let worst = std::cell::Cell::new(0.0f64);
    TestRunner::new(config)
        .run(&cases, |(link, bytes, message_size, cc, seed)| {
            let spec: LinkSpec = link.parse().unwrap();
            let limit = bound(&spec, bytes, message_size);
            let cfg = SimTransferConfig {
                link: spec,
                bytes,
                message_size,
                cc,
                seed,
                // Run past the bound so an overrun is measured, not cut off.
                time_limit: Duration::from_secs_f64(2.0 * limit),
                ..SimTransferConfig::default()
            };
            let r = run(&cfg).unwrap();
            let detail = || {
                format!(
                    "{link} bytes={bytes} message_size={message_size} cc={cc} seed={seed}: {r:?}"
                )
            };
            prop_assert!(r.ok, "not delivered: {}", detail());
            prop_assert_eq!(r.bytes, bytes, "{}", detail());
            prop_assert!(
                r.virtual_secs <= limit,
                "took {:.2} s, bound {limit:.2} s: {}",
                r.virtual_secs,
                detail()
            );
            worst.set(worst.get().max(r.virtual_secs / limit));
            Ok(())
        })
        .unwrap();
    println!("largest time / bound over all cases: {:.3}", worst.get());
}

#[test]
fn the_bound_is_tight_enough_to_mean_something() {
    // A clean 100 Mbit/s, 20 ms link: 300 kB should take well under a
    // second, and the bound allows about three (two of them for the handshake).
    let spec: LinkSpec = "rtt=20ms,rate=100mbit".parse().unwrap();
    let b = bound(&spec, 300_000, 65_536);
    assert!(b < 5.0, "{b}");
    // Back-off arithmetic: 1 + 2 + 4 s, and a cap at 60 s.
    assert_eq!(backoff(1.0, 3), 7.0);
    assert_eq!(backoff(40.0, 2), 100.0);
}
