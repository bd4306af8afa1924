//! Property tests of the spec syntax and of the model's invariants.

use std::time::Duration;

use braid_core::Instant;
use braid_link::{
    Aqm, Direction, GilbertElliott, Link, LinkParams, LinkSpec, Outcome, Probability, QueueLimit,
    Rate, Ratio, Verdict,
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
        (
            prop::sample::select(Aqm::ALL.to_vec()),
            proptest::option::of((1u64..10_000_000_000).prop_map(Duration::from_nanos)),
            proptest::option::of((1u64..10_000_000_000).prop_map(Duration::from_nanos)),
        ),
    )
        .prop_map(
            |(
                (delay, jitter, rate, queue),
                (loss, ge, reorder, reorder_delay),
                (dup, mtu),
                (aqm, target, interval),
            )| {
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
                // A discipline needs a rate; its tuning keys, one that
                // has them.
                p.aqm = if rate.is_some() { aqm } else { Aqm::DropTail };
                p.aqm_target = target.filter(|_| p.aqm.default_target().is_some());
                p.aqm_interval = interval.filter(|_| p.aqm.default_interval().is_some());
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
        // CoDel and FQ-CoDel decide queued packets later.
        while let Some(o) = link.poll(Instant::MAX) {
            if let Outcome::Delivered { at, duplicate_at, .. } = o {
                prop_assert!(duplicate_at.is_none_or(|d| d >= at));
            }
        }
        let s = link.stats();
        prop_assert_eq!(s.offered, gaps.len() as u64);
        prop_assert_eq!(s.delivered + s.dropped(), s.offered);
        prop_assert!(s.duplicated <= s.delivered && s.reordered <= s.delivered);
    }
}

/// Two directions and up to three scheduled changes at increasing times.
fn asymmetric_spec() -> impl Strategy<Value = LinkSpec> {
    (
        (params(), params()),
        prop::collection::vec((1u64..5_000_000_000, (params(), params())), 0..3),
    )
        .prop_map(|((a, b), changes)| {
            let (mut a, mut b) = (a, b);
            let mut at = Duration::ZERO;
            for (gap, (ca, cb)) in changes {
                at += Duration::from_nanos(gap);
                a.schedule.push(braid_link::Change { at, params: ca });
                b.schedule.push(braid_link::Change { at, params: cb });
            }
            LinkSpec::asymmetric(a, b).unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn per_direction_and_scheduled_specs_round_trip(spec in asymmetric_spec()) {
        let text = spec.to_string();
        let back: LinkSpec = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&back, &spec, "{}", text);
        prop_assert_eq!(back.to_string(), text);
    }

    /// A scheduled link behaves, after each change, exactly like a link
    /// given the new parameters by `set_params_at` at the change's time.
    #[test]
    fn schedule_equals_manual_changes(spec in asymmetric_spec(), seed in any::<u64>(), gaps in prop::collection::vec((0u64..50_000_000, 1usize..3000), 1..100)) {
        let p = spec.params(Direction::AToB);
        let mut scheduled = Link::new(p.clone(), seed);
        let mut initial = p.clone();
        initial.schedule.clear();
        let mut manual = Link::new(initial, seed);
        let mut next = 0;
        let mut now = Instant::ZERO;
        for (gap, len) in gaps {
            now += Duration::from_nanos(gap);
            while let Some(c) = p.schedule.get(next) {
                if Instant::ZERO + c.at > now {
                    break;
                }
                manual.set_params_at(Instant::ZERO + c.at, c.params.clone());
                next += 1;
            }
            prop_assert_eq!(scheduled.offer(now, len), manual.offer(now, len));
        }
    }
}

#[test]
fn per_direction_items_override_shared_ones() {
    let spec: LinkSpec = "rtt=40ms,rate=50mbit,b2a:rate=5mbit,a2b:loss=1%"
        .parse()
        .unwrap();
    let (a, b) = (spec.params(Direction::AToB), spec.params(Direction::BToA));
    assert_eq!(a.rate, Some(Rate::from_mbit(50)));
    assert_eq!(b.rate, Some(Rate::from_mbit(5)));
    assert_eq!(a.loss.billionths(), 10_000_000);
    assert!(b.loss.is_zero());
    assert_eq!(spec.rtt(), Duration::from_millis(40));
    assert!(!spec.is_symmetric());
    let asym: LinkSpec = "a2b:delay=5ms,b2a:delay=35ms".parse().unwrap();
    assert_eq!(asym.rtt(), Duration::from_millis(40));
    assert_eq!(asym.to_string(), "a2b:delay=5ms,b2a:delay=35ms");
    let msg = |s: &str| s.parse::<LinkSpec>().unwrap_err().to_string();
    assert_eq!(
        msg("a2b:loss=1%,a2b:loss=2%"),
        "link spec key `loss` given more than once"
    );
    assert!(msg("a2b:rtt=10ms,a2b:delay=5ms").contains("cannot both be given"));
    assert!(msg("x:rate=1mbit").starts_with("unknown direction `x:`"));
    assert!(msg("a2b:queue=10p").contains("`queue` has no effect without `rate`"));
}

#[test]
fn schedules_parse_and_check_their_times() {
    let spec: LinkSpec = "rtt=20ms;at=10s:rtt=100ms;at=20s:rtt=20ms,loss=1%"
        .parse()
        .unwrap();
    assert_eq!(spec.changes(), 2);
    let p = spec.params(Direction::BToA);
    assert_eq!(p.schedule[1].at, Duration::from_secs(20));
    assert_eq!(p.schedule[1].params.loss.billionths(), 10_000_000);
    // No initial spec: ideal until the first change.
    let spec: LinkSpec = "at=5s:rtt=50ms".parse().unwrap();
    assert_eq!(spec.rtt(), Duration::ZERO);
    assert_eq!(spec.to_string(), "rtt=0ms;at=5s:rtt=50ms");
    assert_eq!(
        "at=0s:rtt=50ms".parse::<LinkSpec>().unwrap().to_string(),
        "rtt=50ms"
    );
    let msg = |s: &str| s.parse::<LinkSpec>().unwrap_err().to_string();
    assert!(msg("rtt=1ms;at=2s:rtt=2ms;at=1s:rtt=3ms").contains("times must increase"));
    assert!(msg("rtt=1ms;rtt=2ms").contains("must start with at=TIME:"));
    assert!(msg("rtt=1ms;at=soon:rtt=2ms").starts_with("invalid `at` value `soon`"));
    assert!(msg("rtt=1ms;at=1s").contains("expected at=TIME:SPEC"));
    assert!(msg("trace=/nonexistent/x.trace")
        .starts_with("invalid `trace` value `/nonexistent/x.trace`: cannot read"));
}

#[test]
fn trace_in_a_spec_is_read_from_its_file() {
    let dir = std::env::temp_dir().join(format!("braid-link-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.trace");
    std::fs::write(&file, "1\n2\n3\n4\n").unwrap();
    let text = format!("rtt=10ms,queue=200p,trace={}", file.display());
    let spec: LinkSpec = text.parse().unwrap();
    assert_eq!(spec.to_string(), text);
    let p = spec.params(Direction::AToB);
    assert_eq!(p.trace.as_ref().unwrap().mean_rate(), Rate::from_mbit(12));
    // 100 packets of 1500 bytes at one per ms: the last leaves at 100 ms.
    let mut link = Link::new(p, 1);
    let mut last = Instant::ZERO;
    for _ in 0..100 {
        if let Verdict::Deliver { at, .. } = link.offer(Instant::ZERO, 1500) {
            last = at;
        }
    }
    assert_eq!(link.stats().delivered, 100);
    assert_eq!(last, Instant::ZERO + Duration::from_millis(105));
    let err = format!("rate=1mbit,trace={}", file.display())
        .parse::<LinkSpec>()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("`rate` and `trace` cannot both be given"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each packet given: when, and its id or why it was refused.
type Given = Vec<(
    Instant,
    Result<braid_link::PacketId, braid_link::DropReason>,
)>;

/// A link driven through `enqueue`/`poll` as the simulator and the
/// emulator drive it: arrivals of several flows, polled at each arrival
/// and at every `next_event`. Returns (arrival time, id or refusal) per
/// packet and the outcomes in the order they came.
fn drive(link: &mut Link, arrivals: &[(u64, usize, u64)]) -> (Given, Vec<(Instant, Outcome)>) {
    let mut now = Instant::ZERO;
    let mut given = Vec::new();
    let mut outcomes = Vec::new();
    let mut pending = arrivals.iter().copied().peekable();
    loop {
        let next_arrival = pending
            .peek()
            .map(|&(gap, _, _)| now + Duration::from_nanos(gap));
        let next_link = link.next_event();
        match (next_arrival, next_link) {
            (Some(a), l) => {
                if l.is_some_and(|l| l < a) {
                    now = now.max(l.unwrap_or(a));
                } else {
                    let (_, len, flow) = pending.next().unwrap();
                    now = a;
                    given.push((now, link.enqueue(now, len, flow)));
                }
            }
            (None, Some(l)) => now = now.max(l),
            (None, None) => break,
        }
        while let Some(o) = link.poll(now) {
            outcomes.push((now, o));
        }
    }
    (given, outcomes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Under every discipline no packet is lost silently: each accepted
    /// packet gets exactly one outcome, never decided before it arrived,
    /// and the counters add up (offered = delivered + dropped by reason).
    /// Disciplines that keep one FIFO deliver in arrival order.
    #[test]
    fn every_packet_has_one_fate_and_fifo_disciplines_keep_order(
        p in params(),
        seed in any::<u64>(),
        arrivals in prop::collection::vec((0u64..3_000_000, 40usize..1600, 0u64..4), 1..300),
    ) {
        let aqm = p.aqm;
        let reorders = !p.reorder.is_zero();
        let mut link = Link::new(LinkSpec::symmetric(p).unwrap().params(Direction::AToB), seed);
        let (given, outcomes) = drive(&mut link, &arrivals);
        let mut fate = std::collections::HashMap::new();
        for (t, o) in &outcomes {
            prop_assert!(fate.insert(o.id(), (*t, *o)).is_none(), "two outcomes for {:?}", o.id());
        }
        let accepted: Vec<_> = given.iter().filter_map(|(t, r)| r.ok().map(|id| (*t, id))).collect();
        prop_assert_eq!(fate.len(), accepted.len());
        for (t, id) in &accepted {
            let (decided, o) = fate.get(id).copied().ok_or_else(|| TestCaseError::fail(format!("{id:?} has no outcome")))?;
            prop_assert!(decided >= *t);
            if let Outcome::Delivered { at, duplicate_at, .. } = o {
                prop_assert!(at >= *t && duplicate_at.is_none_or(|d| d >= at));
            }
        }
        let s = link.stats();
        prop_assert_eq!(s.offered, given.len() as u64);
        prop_assert_eq!(s.delivered + s.dropped(), s.offered);
        let refused = given.iter().filter(|(_, r)| r.is_err()).count() as u64;
        let dropped_later = outcomes.iter().filter(|(_, o)| matches!(o, Outcome::Dropped { .. })).count() as u64;
        prop_assert_eq!(s.dropped(), refused + dropped_later);
        if aqm != Aqm::FqCodel && !reorders {
            let delivered: Vec<_> = accepted
                .iter()
                .filter_map(|(_, id)| match fate[id].1 {
                    Outcome::Delivered { at, .. } => Some(at),
                    Outcome::Dropped { .. } => None,
                })
                .collect();
            prop_assert!(delivered.windows(2).all(|w| w[0] <= w[1]), "{aqm}: out of order");
        }
    }
}
