//! The rule language: parsing Listing 6.1 and its kin, every class of
//! error with its position and message, units, the normal form's
//! equivalences, and the engine's windows, firing semantics and rejections.

use std::time::Duration;

use braid_core::Instant;
use braid_rules::*;

fn vocab() -> Vocabulary {
    Vocabulary::new()
        .metric("rtt", Dimension::Time, 0.0, 2.0)
        .metric("loss", Dimension::Ratio, 0.0, 0.5)
        .metric("hops", Dimension::Count, 0.0, 64.0)
        .metric("throughput", Dimension::Bitrate, 0.0, 1e10)
        .event("MsgRcvEvent")
        .event("timeout")
        .choice(ActionKind::Set, "transport", &["tcp", "braid", "exon", "data"])
        .choice(ActionKind::Set, "cc", &["cubic", "bbr", "ledbat"])
        .choice(ActionKind::Set, "scheduler", &["minrtt", "redundant"])
        .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true)
        .number(ActionKind::Register, "R1", Dimension::Count, 0.0, 1e6, true)
        .number(ActionKind::Transition, "MyParaTrans", Dimension::Count, 0.0, 100.0, true)
}

fn err(src: &str) -> RuleError {
    match compile(src, &vocab()) {
        Ok(_) => panic!("expected an error for {src:?}"),
        Err(e) => e,
    }
}

#[test]
fn listing_6_1_parses_checks_and_prints() {
    let src = "on first match\n  (count(MsgRcvEvent, 30s) > 5) and (hops < 10):\n  execute parameter transition MyParaTrans at self set value (10);\n";
    let rules = compile(src, &vocab()).unwrap();
    assert_eq!(rules.len(), 1);
    let printed = rules.to_string();
    assert_eq!(
        printed,
        "on first match\n  count(MsgRcvEvent, 30s) > 5 and hops < 10: execute parameter transition MyParaTrans at self set value (10);\n"
    );
    assert_eq!(parse(&printed).unwrap(), rules);
}

#[test]
fn every_action_form_and_unit() {
    let src = "on every match
  avg(rtt, 5s) > 80ms: set transport = braid;
  avg(loss, 5s) >= 1% or rate(timeout, 10s) > 2/s: set cc = bbr, set scheduler = redundant;
  min(throughput, 2s) < 10mbit and max(rtt, 500ms) - min(rtt, 500ms) < 20ms: set priority = 2;
  true: set register R1 = 500;
  not hops != 3: set register R1 = (hops), set register R1 = hops * 2 + 1;
";
    let rules = compile(src, &vocab()).unwrap();
    assert_eq!(rules.len(), 5);
    assert_eq!(parse(&rules.to_string()).unwrap(), rules);
}

#[test]
fn syntax_errors_have_positions() {
    let e = parse("on first match\n  rtt > 80ms set transport = tcp;").unwrap_err();
    assert_eq!(e.stage, Stage::Syntax);
    let d = e.first().unwrap();
    assert_eq!((d.span.line, d.span.column), (2, 14));
    assert!(d.message.contains("expected `:`"), "{d}");

    let e = parse("rtt > 80ms: set transport = tcp;").unwrap_err();
    assert!(e.first().unwrap().hint.as_deref().unwrap().contains("on first match"));

    let e = parse("on first match rtt > 80furlong: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("unknown unit `furlong`"), "{e}");

    let e = parse("on first match 1 < rtt < 3: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("do not chain"), "{e}");

    let e = parse("on first match rtt + 1: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("expected a condition, found a number"), "{e}");

    let e = parse("on first match avg(rtt, x) > 1s: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("window"), "{e}");

    let e = parse("on first match rtt = 1s: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("=="), "{e}");

    let e = parse("on first match avgg(rtt, 1s) > 1s: set transport = tcp;").unwrap_err();
    assert!(e.to_string().contains("unknown function `avgg`"), "{e}");
}

#[test]
fn type_errors_are_clear_and_all_reported() {
    let e = err("on first match\n  rttt > 80ms: set transport = braid;\n  avg(rtt, 5s) > 80: set transport = tcp;\n");
    assert_eq!(e.stage, Stage::Type);
    assert_eq!(e.diagnostics.len(), 2);
    assert!(e.diagnostics[0].message.contains("unknown metric `rttt`"));
    assert_eq!(e.diagnostics[0].hint.as_deref(), Some("did you mean `rtt`?"));
    assert_eq!((e.diagnostics[0].span.line, e.diagnostics[0].span.column), (2, 3));
    assert!(e.diagnostics[1].message.contains("cannot compare `avg(rtt, 5s)` (a duration) with `80` (a plain number)"));
    let rendered = e.render("rules.eca", "on first match\n  rttt > 80ms: set transport = braid;\n  avg(rtt, 5s) > 80: set transport = tcp;\n");
    assert!(rendered.contains("--> rules.eca:2:3"), "{rendered}");
    assert!(rendered.contains("^^^^"), "{rendered}");

    // Missing capability.
    let e = err("on first match true: set congestion = bbr;");
    assert!(e.to_string().contains("offers no setting `congestion` (missing capability)"), "{e}");
    let v = Vocabulary::new().metric("rtt", Dimension::Time, 0.0, 1.0);
    let e = check(&parse("on first match true: set cc = bbr;").unwrap(), &v).unwrap_err();
    assert!(e.diagnostics[0].hint.as_deref().unwrap().contains("no setting is offered"));

    // Values.
    assert!(err("on first match true: set transport = quic;").to_string().contains("`quic` is not a value of `transport`"));
    assert!(err("on first match true: set priority = 9;").to_string().contains("whole number in [0, 8], got 9"));
    assert!(err("on first match true: set priority = 1.5;").to_string().contains("whole number"));
    assert!(err("on first match true: set priority = 2ms;").to_string().contains("takes a plain number"));
    assert!(err("on first match true: set transport = 2;").to_string().contains("takes a name"));
    let e = err("on first match true: set register R1 = hops;");
    assert!(e.diagnostics[0].hint.as_deref().unwrap().contains("write `(hops)`"));
    // Kinds of source.
    assert!(err("on first match count(rtt, 5s) > 1: set transport = tcp;").to_string().contains("`rtt` is a metric, not an event"));
    assert!(err("on first match timeout > 1: set transport = tcp;").to_string().contains("`timeout` is an event, not a metric"));
    // Windows and units in arithmetic.
    assert!(err("on first match avg(rtt, 5) > 1s: set transport = tcp;").to_string().contains("must be a duration"));
    assert!(err("on first match avg(rtt, 2h) > 1s: set transport = tcp;").to_string().contains("longer than the longest"));
    assert!(err("on first match rtt + loss > 1s: set transport = tcp;").to_string().contains("cannot add a duration and a ratio"));
    // A register is not a setting.
    assert!(err("on first match true: set R1 = 3;").diagnostics[0].hint.as_deref().unwrap().contains("is a register, not a setting"));
}

#[test]
fn dimensions_of_products() {
    let v = vocab();
    compile("on first match rate(timeout, 10s) * 10s > 3 and count(timeout, 5s) / 5s < 2/s: set transport = tcp;", &v).unwrap();
    let e = err("on first match rtt * rtt > 1s: set transport = tcp;");
    assert!(e.to_string().contains("cannot multiply a duration and a duration"), "{e}");
    // A rule built by hand without an action is refused, not printed into
    // a file that would not parse.
    let mut r = parse("on first match true: set transport = tcp;").unwrap();
    r.blocks[0].rules[0].actions.clear();
    assert!(check(&r, &v).unwrap_err().to_string().contains("at least one action"));
}

fn norm(src: &str) -> String {
    normal_key(&parse(&format!("on first match {src}: set transport = tcp;")).unwrap())
}

#[test]
fn normal_form_equivalences() {
    assert_eq!(norm("5 < hops"), norm("hops > 3 + 2"));
    assert_eq!(norm("rtt > 80ms"), norm("rtt > 0.08s"));
    assert_eq!(norm("rtt > 40ms + 40ms"), norm("80ms < rtt"));
    assert_eq!(norm("not (rtt < 80ms)"), norm("rtt >= 80ms"));
    assert_eq!(norm("rtt > 1s and hops < 3"), norm("hops < 3 and rtt > 1s"));
    assert_eq!(norm("not (rtt > 1s or hops < 3)"), norm("rtt <= 1s and hops >= 3"));
    assert_eq!(norm("hops + 3 > 8"), norm("hops > 5"));
    assert_eq!(norm("2 * hops > 10"), norm("hops > 5"));
    assert_eq!(norm("-hops < -5"), norm("hops > 5"));
    assert_eq!(norm("hops - 2 > rtt / 1s"), norm("rtt / 1s < hops + -2"));
    assert_eq!(norm("hops > 3 and hops > 3"), norm("hops > 3"));
    assert_eq!(norm("hops > 3 and true"), norm("hops > 3"));
    assert_ne!(norm("hops > 3"), norm("hops >= 3"));
    assert_ne!(norm("avg(rtt, 5s) > 1s"), norm("avg(rtt, 6s) > 1s"));
    // Rules that cannot fire disappear; so do rules after an unconditional one.
    let a = parse("on first match 1 > 2: set transport = tcp; true: set transport = braid; rtt > 1s: set transport = tcp;").unwrap();
    let b = parse("on every match true: set transport = braid;").unwrap();
    assert_eq!(normalize(&a), normalize(&b));
    // The normal form is a fixed point and checks.
    let n = normalize(&parse("on first match 3 * (hops - 1) > 2 + 4 and not rtt < 80ms: set priority = 1 + 1;").unwrap());
    assert_eq!(normalize(&parse(&n.to_string()).unwrap()), n);
    check(&n, &vocab()).unwrap();
}

fn at(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

#[test]
fn engine_windows_first_and_every_match() {
    let v = vocab();
    let rules = compile(
        "on first match
  count(timeout, 10s) >= 3: set transport = braid;
  avg(rtt, 1s) > 100ms: set transport = exon;
  true: set transport = tcp;
on every match
  rtt > 50ms: set priority = 1;
  hops > 2: set register R1 = hops * 10;
",
        &v,
    )
    .unwrap();
    let mut e = Engine::new(&rules, &v, EngineConfig::default()).unwrap();
    let rtt = v.metric_id("rtt").unwrap();
    let hops = v.metric_id("hops").unwrap();
    let timeout = v.event_id("timeout").unwrap();
    let transport = v.target_id(ActionKind::Set, "transport").unwrap();
    let prio = v.target_id(ActionKind::Set, "priority").unwrap();
    let r1 = v.target_id(ActionKind::Register, "R1").unwrap();
    assert!(e.wants_event(timeout) && e.wants_metric(rtt) && e.wants_metric(hops));
    assert!(!e.wants_metric(v.metric_id("loss").unwrap()));
    assert_eq!(e.next_deadline(), None);

    // Nothing known: the unconditional rule fires only.
    let out = e.evaluate(at(0)).to_vec();
    assert_eq!(out, vec![Outcome::Apply { rule: 2, target: transport, value: Value::Choice(0) }]);
    // Same state: nothing new to apply.
    assert!(e.evaluate(at(1)).is_empty());

    e.sample(at(100), rtt, 0.2);
    e.sample(at(100), hops, 4.0);
    let out = e.evaluate(at(100)).to_vec();
    assert_eq!(
        out,
        vec![
            Outcome::Apply { rule: 1, target: transport, value: Value::Choice(2) },
            Outcome::Apply { rule: 3, target: prio, value: Value::Number(1.0) },
            Outcome::Apply { rule: 4, target: r1, value: Value::Number(40.0) },
        ]
    );
    // The rtt sample leaves the 1 s window (16 buckets of 62.5 ms) within
    // one bucket of 1.1 s; the deadline says when.
    let d = e.next_deadline().unwrap();
    assert!(d > at(1000) && d <= at(1100), "{d:?}");
    for t in [200, 300, 400] {
        e.event(at(t), timeout);
    }
    let out = e.evaluate(at(400)).to_vec();
    assert_eq!(out, vec![Outcome::Apply { rule: 0, target: transport, value: Value::Choice(1) }]);
    // After ten seconds the timeouts are forgotten, and so is the rtt average.
    let out = e.evaluate(at(10_500)).to_vec();
    assert_eq!(out, vec![Outcome::Apply { rule: 2, target: transport, value: Value::Choice(0) }]);
    // Evaluations at 0, 1, 100, 400, 10 500 ms; current values persist.
    assert_eq!(e.match_counts(), &[1, 1, 3, 3, 3]);
    assert_eq!(e.observed(rtt), Some((0.2, 0.2)));
}

#[test]
fn engine_rejects_out_of_range_values_once() {
    let v = vocab();
    let rules = compile("on first match true: set priority = hops;", &v);
    assert!(rules.is_err());
    let rules = compile("on first match true: set priority = (hops);", &v).unwrap();
    let mut e = Engine::new(&rules, &v, EngineConfig::default()).unwrap();
    let hops = v.metric_id("hops").unwrap();
    assert!(e.evaluate(at(0)).is_empty(), "unknown value: nothing to apply");
    e.sample(at(1), hops, 12.0);
    let out = e.evaluate(at(1)).to_vec();
    assert!(matches!(&out[..], [Outcome::Rejected { reason, .. }] if reason.contains("`priority` takes a value in [0, 8]")), "{out:?}");
    assert!(e.evaluate(at(2)).is_empty(), "reported once");
    e.sample(at(3), hops, 2.6);
    assert!(matches!(e.evaluate(at(3)), [Outcome::Apply { value: Value::Number(3.0), .. }]));
}

#[test]
fn engine_refuses_bad_rules_and_config() {
    let v = vocab();
    let bad = parse("on first match true: set cc = vegas;").unwrap();
    assert!(matches!(Engine::new(&bad, &v, EngineConfig::default()), Err(EngineError::Rules(_))));
    let ok = parse("on first match true: set cc = bbr;").unwrap();
    let e = Engine::new(&ok, &v, EngineConfig { buckets: 0 }).unwrap_err();
    assert!(e.to_string().contains("`buckets` must be 1..=1024"));
}

#[test]
fn engine_state_is_bounded_by_the_rules() {
    let v = vocab();
    let rules = compile("on first match avg(rtt, 30s) > 100ms and count(timeout, 30s) > 3: set transport = braid;", &v).unwrap();
    let mut e = Engine::new(&rules, &v, EngineConfig::default()).unwrap();
    let before = e.state_bytes();
    let rtt = v.metric_id("rtt").unwrap();
    let timeout = v.event_id("timeout").unwrap();
    let mut t = Instant::ZERO;
    for i in 0..200_000u64 {
        t += Duration::from_micros(500);
        e.sample(t, rtt, (i % 100) as f64 * 1e-3);
        if i % 10 == 0 {
            e.event(t, timeout);
        }
    }
    e.evaluate(t);
    assert_eq!(e.state_bytes(), before);
}

#[test]
fn vocabulary_validation() {
    assert!(Vocabulary::new().metric("and", Dimension::Count, 0.0, 1.0).validate().is_err());
    assert!(Vocabulary::new().metric("x", Dimension::Count, 2.0, 1.0).validate().is_err());
    assert!(Vocabulary::new().metric("x", Dimension::Count, 0.0, 1.0).event("x").validate().is_err());
    assert!(Vocabulary::new().choice(ActionKind::Set, "t", &[]).validate().is_err());
}
