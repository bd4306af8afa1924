//! Property tests of the spec syntax and of the model's invariants.

use std::time::Duration;

use braid_core::Instant;
use braid_link::{
    Direction, GilbertElliott, Link, LinkParams, LinkSpec, Probability, QueueLimit, Rate, Ratio,
    Verdict,
};
use proptest::prelude::*;

fn probability() -> impl Strategy<Value = Probability> {
    prop_oneof![
        Just(Probability::ZERO),
        Just(Probability::ONE),
        (0u32..=1_000_000_000).prop_map(|n| Probability::from_billionths(n).unwrap()),
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000).prop_map(Duration::from_millis),
        (0u64..100_000_000_000).prop_map(Duration::from_nanos),
    ]
}

fn params() -> impl Strategy<Value = LinkParams> {
    let rate = proptest::option::of(
        (1u64..100_000_000_000).prop_map(|b| Rate::from_bits_per_sec(b).unwrap()),
    );
    let queue = prop_oneof![
        (0u64..1 << 40).prop_map(QueueLimit::Bytes),
        (0u64..1 << 20).prop_map(QueueLimit::Packets),
        (0u64..10_000_000_000).prop_map(|n| QueueLimit::Bdp(Ratio::from_billionths(n))),
    ];
    let ge = (
        probability(),
        1u32..=1_000_000_000,
        probability(),
        probability(),
    )
        .prop_map(|(p, r, b, g)| GilbertElliott {
            good_to_bad: p,
            bad_to_good: Probability::from_billionths(r).unwrap(),
            loss_in_bad: b,
            loss_in_good: g,
        });
    (
        (duration(), duration(), rate, proptest::option::of(queue)),
        (
            probability(),
            proptest::option::of(ge),
            probability(),
            proptest::option::of(duration()),
        ),
        (probability(), proptest::option::of(1u32..100_000)),
    )
        .prop_map(
            |((delay, jitter, rate, queue), (loss, ge, reorder, reorder_delay), (dup, mtu))| {
                let mut p = LinkParams::default();
                // Display prints rtt = 2 × delay, so delay round-trips exactly.
                p.delay = delay;
                p.jitter = jitter;
                p.rate = rate;
                p.queue = if rate.is_some() { queue } else { None };
                p.loss = loss;
                p.burst_loss = ge;
                p.reorder = reorder;
                p.reorder_delay = if reorder.is_zero() {
                    None
                } else {
                    reorder_delay
                };
                p.dup = dup;
                p.mtu = mtu;
                p
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn display_parses_back_to_the_same_spec(p in params()) {
        let spec = LinkSpec::symmetric(p).unwrap();
        let text = spec.to_string();
        let back: LinkSpec = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&back, &spec, "{}", text);
        prop_assert_eq!(back.to_string(), text);
        let json = serde_json::to_string(&spec).unwrap();
        prop_assert_eq!(serde_json::from_str::<LinkSpec>(&json).unwrap(), spec);
    }

    #[test]
    fn parsing_arbitrary_text_never_panics(text in "[a-z_=,.%/0-9 ]{0,60}") {
        let _ = text.parse::<LinkSpec>();
    }

    #[test]
    fn parsing_key_value_noise_never_panics(
        key in prop::sample::select(braid_link::KEYS),
        value in "[0-9.]{0,25}(ns|us|ms|s|%|mbit|kb|kib|p|pkt|bdp|/|)[0-9./%]{0,8}",
    ) {
        let _ = format!("{key}={value}").parse::<LinkSpec>();
    }

    /// Whatever the parameters, the model answers without panicking, never
    /// delivers before the offer, never delivers a duplicate before the
    /// original, and its counters add up.
    #[test]
    fn model_invariants(p in params(), seed in any::<u64>(), gaps in prop::collection::vec((0u64..5_000_000, 1usize..3000), 1..200)) {
        let mut link = Link::new(LinkSpec::symmetric(p).unwrap().params(Direction::AToB), seed);
        let mut now = Instant::ZERO;
        for (gap, len) in gaps.iter().copied() {
            now += Duration::from_nanos(gap);
            if let Verdict::Deliver { at, duplicate_at } = link.offer(now, len) {
                prop_assert!(at >= now);
                prop_assert!(duplicate_at.is_none_or(|d| d >= at));
            }
        }
        let s = link.stats();
        prop_assert_eq!(s.offered, gaps.len() as u64);
        prop_assert_eq!(s.delivered + s.dropped(), s.offered);
        prop_assert!(s.duplicated <= s.delivered && s.reordered <= s.delivered);
    }
}
