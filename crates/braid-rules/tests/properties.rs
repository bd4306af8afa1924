//! Properties of the rule language and the learner's operators:
//! - printing then parsing any rule set gives it back;
//! - generated, mutated and crossed-over rules always type-check;
//! - rewrites that preserve meaning leave the normal form unchanged;
//! - the normal form is a fixed point and behaves like the original in the
//!   engine on random inputs.

use std::time::Duration;

use braid_core::{Instant, Rng, RngExt, SeedableRng};
use braid_rules::learn::generate::{GenConfig, Generator, Model};
use braid_rules::learn::variation::{crossover_branch, crossover_union, mutate};
use braid_rules::*;
use proptest::prelude::*;

fn vocab() -> Vocabulary {
    Vocabulary::new()
        .metric("rtt", Dimension::Time, 0.0, 2.0)
        .metric("srtt", Dimension::Time, 0.0, 2.0)
        .metric("loss", Dimension::Ratio, 0.0, 0.5)
        .metric("hops", Dimension::Count, 0.0, 64.0)
        .metric("tput", Dimension::Bitrate, 0.0, 1e9)
        .event("timeout")
        .event("msg")
        .choice(ActionKind::Set, "transport", &["tcp", "braid", "exon"])
        .number(ActionKind::Set, "priority", Dimension::Count, 0.0, 8.0, true)
        .number(ActionKind::Register, "R1", Dimension::Time, 0.0, 1.0, false)
        .number(ActionKind::Transition, "Trans", Dimension::Count, 0.0, 100.0, true)
}

// ---- arbitrary ASTs (not necessarily well-typed) for the round trip ----

fn unit() -> impl Strategy<Value = Unit> {
    prop::sample::select(vec!["", "ms", "s", "%", "mbit", "kb", "/s", "us", "kib"]).prop_map(|s| Unit::parse(s).unwrap())
}

fn literal(allow_negative: bool) -> impl Strategy<Value = Literal> {
    (0u64..1_000_000, 0u32..4, unit(), any::<bool>()).prop_map(move |(n, d, unit, neg)| {
        let mantissa = n as f64 / 10f64.powi(d as i32);
        Literal {
            mantissa: if neg && allow_negative { -mantissa } else { mantissa },
            integer: d == 0,
            unit,
        }
    })
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["rtt", "loss", "hops", "timeout", "x_1", "Foo"]).prop_map(String::from)
}

fn num() -> impl Strategy<Value = Num> {
    let leaf = prop_oneof![
        literal(true).prop_map(|l| Num::Lit(l, Span::default())),
        name().prop_map(|n| Num::Metric(n, Span::default())),
        (prop::sample::select(AggFn::ALL.to_vec()), name(), literal(false)).prop_map(|(func, source, window)| Num::Agg {
            func,
            source,
            window,
            span: Span::default()
        }),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|n| Num::Neg(Box::new(n), Span::default())),
            (prop::sample::select(vec![ArithOp::Add, ArithOp::Sub, ArithOp::Mul, ArithOp::Div]), inner.clone(), inner).prop_map(|(op, a, b)| Num::Bin {
                op,
                lhs: Box::new(a),
                rhs: Box::new(b),
                span: Span::default()
            }),
        ]
    })
}

fn cond() -> impl Strategy<Value = Cond> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(|b| Cond::Bool(b, Span::default())),
        (prop::sample::select(CmpOp::ALL.to_vec()), num(), num()).prop_map(|(op, a, b)| Cond::Cmp {
            op,
            lhs: Box::new(a),
            rhs: Box::new(b),
            span: Span::default()
        }),
    ];
    leaf.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| Cond::Not(Box::new(c), Span::default())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::And(Box::new(a), Box::new(b), Span::default())),
            (inner.clone(), inner).prop_map(|(a, b)| Cond::Or(Box::new(a), Box::new(b), Span::default())),
        ]
    })
}

fn action() -> impl Strategy<Value = Action> {
    (
        prop::sample::select(vec![ActionKind::Set, ActionKind::Register, ActionKind::Transition]),
        name(),
        prop_oneof![name().prop_map(|n| ActionValue::Symbol(n, Span::default())), num().prop_map(ActionValue::Num)],
    )
        .prop_map(|(kind, target, value)| Action {
            kind,
            target,
            value,
            span: Span::default(),
        })
}

fn rule_set() -> impl Strategy<Value = RuleSet> {
    let rule = (cond(), prop::collection::vec(action(), 1..3)).prop_map(|(condition, actions)| Rule {
        condition,
        actions,
        span: Span::default(),
    });
    let block = (any::<bool>(), prop::collection::vec(rule, 0..3)).prop_map(|(first, rules)| Block {
        mode: if first { Mode::FirstMatch } else { Mode::EveryMatch },
        rules,
        span: Span::default(),
    });
    prop::collection::vec(block, 0..3).prop_map(|blocks| RuleSet { blocks })
}

// ---- meaning-preserving rewrites for the normal form ----

/// A random rewrite of `c` that keeps its meaning, driven by `rng`.
fn rewrite_cond(c: &Cond, rng: &mut Rng) -> Cond {
    let s = Span::default();
    let c = match c {
        Cond::Bool(..) => c.clone(),
        Cond::Not(x, _) => Cond::Not(Box::new(rewrite_cond(x, rng)), s),
        Cond::And(a, b, _) => {
            let (a, b) = (rewrite_cond(a, rng), rewrite_cond(b, rng));
            match rng.random_range(0..3) {
                0 => Cond::And(Box::new(b), Box::new(a), s),
                // De Morgan.
                1 => Cond::Not(
                    Box::new(Cond::Or(Box::new(Cond::Not(Box::new(a), s)), Box::new(Cond::Not(Box::new(b), s)), s)),
                    s,
                ),
                _ => Cond::And(Box::new(a), Box::new(b), s),
            }
        }
        Cond::Or(a, b, _) => {
            let (a, b) = (rewrite_cond(a, rng), rewrite_cond(b, rng));
            if rng.random_bool(0.5) {
                Cond::Or(Box::new(b), Box::new(a), s)
            } else {
                Cond::Or(Box::new(a), Box::new(b), s)
            }
        }
        Cond::Cmp { op, lhs, rhs, .. } => {
            let (l, r) = (rewrite_num(lhs, rng), rewrite_num(rhs, rng));
            match rng.random_range(0..3) {
                0 => Cond::Cmp { op: op.mirror(), lhs: Box::new(r), rhs: Box::new(l), span: s },
                1 => Cond::Not(Box::new(Cond::Cmp { op: op.negate(), lhs: Box::new(l), rhs: Box::new(r), span: s }), s),
                _ => Cond::Cmp { op: *op, lhs: Box::new(l), rhs: Box::new(r), span: s },
            }
        }
    };
    if rng.random_bool(0.1) {
        Cond::Not(Box::new(Cond::Not(Box::new(c), s)), s)
    } else {
        c
    }
}

fn rewrite_num(n: &Num, rng: &mut Rng) -> Num {
    let s = Span::default();
    match n {
        // Split a whole constant into a sum of two (exact in f64).
        Num::Lit(l, _) if l.integer && l.mantissa.abs() < 1e6 && rng.random_bool(0.5) => {
            let a = rng.random_range(-50i64..50) as f64;
            let lit = |m: f64| Num::Lit(Literal { mantissa: m, integer: true, unit: l.unit }, s);
            Num::Bin { op: ArithOp::Add, lhs: Box::new(lit(a)), rhs: Box::new(lit(l.mantissa - a)), span: s }
        }
        Num::Bin { op: ArithOp::Add, lhs, rhs, .. } => {
            let (a, b) = (rewrite_num(lhs, rng), rewrite_num(rhs, rng));
            let (a, b) = if rng.random_bool(0.5) { (b, a) } else { (a, b) };
            Num::Bin { op: ArithOp::Add, lhs: Box::new(a), rhs: Box::new(b), span: s }
        }
        Num::Bin { op: ArithOp::Mul, lhs, rhs, .. } => {
            let (a, b) = (rewrite_num(lhs, rng), rewrite_num(rhs, rng));
            let (a, b) = if rng.random_bool(0.5) { (b, a) } else { (a, b) };
            Num::Bin { op: ArithOp::Mul, lhs: Box::new(a), rhs: Box::new(b), span: s }
        }
        Num::Bin { op, lhs, rhs, .. } => Num::Bin {
            op: *op,
            lhs: Box::new(rewrite_num(lhs, rng)),
            rhs: Box::new(rewrite_num(rhs, rng)),
            span: s,
        },
        Num::Neg(x, _) => Num::Neg(Box::new(rewrite_num(x, rng)), s),
        other => other.clone(),
    }
}

fn one_rule(c: Cond) -> RuleSet {
    parse(&format!("on first match {c}: set transport = tcp;")).unwrap()
}

/// Integer-valued literals so that folding is exact whatever the order.
fn int_num() -> impl Strategy<Value = Num> {
    let leaf = prop_oneof![
        (-100i64..100).prop_map(|n| Num::Lit(Literal { mantissa: n as f64, integer: true, unit: Unit::NONE }, Span::default())),
        prop::sample::select(vec!["hops", "x", "y"]).prop_map(|n| Num::Metric(n.into(), Span::default())),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|n| Num::Neg(Box::new(n), Span::default())),
            (prop::sample::select(vec![ArithOp::Add, ArithOp::Sub, ArithOp::Mul]), inner.clone(), inner).prop_map(|(op, a, b)| Num::Bin {
                op,
                lhs: Box::new(a),
                rhs: Box::new(b),
                span: Span::default()
            }),
        ]
    })
}

fn int_cond() -> impl Strategy<Value = Cond> {
    let leaf = (prop::sample::select(CmpOp::ALL.to_vec()), int_num(), int_num()).prop_map(|(op, a, b)| Cond::Cmp {
        op,
        lhs: Box::new(a),
        rhs: Box::new(b),
        span: Span::default(),
    });
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| Cond::Not(Box::new(c), Span::default())),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::And(Box::new(a), Box::new(b), Span::default())),
            (inner.clone(), inner).prop_map(|(a, b)| Cond::Or(Box::new(a), Box::new(b), Span::default())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn print_then_parse_gives_the_rules_back(rs in rule_set()) {
        let text = rs.to_string();
        let back = parse(&text);
        prop_assert!(back.is_ok(), "{}\n{:?}", text, back);
        prop_assert_eq!(back.unwrap(), rs, "{}", text);
    }

    #[test]
    fn equivalent_rules_normalise_equal(c in int_cond(), seed in any::<u64>()) {
        let mut rng = Rng::seed_from_u64(seed);
        let r = rewrite_cond(&c, &mut rng);
        let (a, b) = (normal_key(&one_rule(c.clone())), normal_key(&one_rule(r.clone())));
        prop_assert_eq!(&a, &b, "\n{}\n{}", c, r);
    }

    #[test]
    fn normal_form_is_a_fixed_point(c in int_cond(), seed in any::<u64>()) {
        // Over well-typed rules: arithmetic conditions and generated sets.
        let v = vocab();
        let cfg = GenConfig::default();
        let mut g = Generator::new(&v, &cfg);
        let mut rng = Rng::seed_from_u64(seed);
        let model = Model::new(&v, false, (0.0, 20.0));
        for rs in [one_rule(c), g.rule_set(&mut rng, &model)] {
            let n = normalize(&rs);
            let again = normalize(&parse(&n.to_string()).unwrap());
            prop_assert_eq!(again.to_string(), n.to_string());
        }
    }

    #[test]
    fn generated_and_varied_rules_always_check(seed in any::<u64>()) {
        let v = vocab();
        let cfg = GenConfig::default();
        let mut g = Generator::new(&v, &cfg);
        let mut rng = Rng::seed_from_u64(seed);
        let mut model = Model::new(&v, seed % 2 == 0, (0.0, 20.0));
        model.observe(0, 0.01, 0.3);
        let mut a = g.rule_set(&mut rng, &model);
        let mut b = g.rule_set(&mut rng, &model);
        for step in 0..30 {
            prop_assert!(check(&a, &v).is_ok(), "step {}: {}\n{:?}", step, a, check(&a, &v));
            match rng.random_range(0..4) {
                0 => a = crossover_union(&a, &b, &mut rng, 8),
                1 => a = crossover_branch(&a, &b, &mut rng),
                _ => { mutate(&mut a, &mut g, &mut rng, &model); }
            }
            if step % 7 == 0 {
                b = g.rule_set(&mut rng, &model);
            }
            // Printing learned rules gives a file that reads back the same.
            prop_assert_eq!(parse(&a.to_string()).unwrap(), a.clone());
        }
    }

    #[test]
    fn normal_form_behaves_like_the_original(seed in any::<u64>()) {
        let v = vocab();
        let cfg = GenConfig::default();
        let mut g = Generator::new(&v, &cfg);
        let mut rng = Rng::seed_from_u64(seed);
        let model = Model::new(&v, false, (0.0, 20.0));
        let rs = g.rule_set(&mut rng, &model);
        let n = normalize(&rs);
        prop_assert!(check(&n, &v).is_ok(), "{}", n);
        let mut e1 = Engine::new(&rs, &v, EngineConfig::default()).unwrap();
        let mut e2 = Engine::new(&n, &v, EngineConfig::default()).unwrap();
        let mut t = Instant::ZERO;
        for _ in 0..300 {
            t += Duration::from_millis(rng.random_range(1..400));
            let m = rng.random_range(0..v.metrics().len());
            let (lo, hi) = v.metrics()[m].range;
            let x = lo + rng.random::<f64>() * (hi - lo);
            e1.sample(t, MetricId(m), x);
            e2.sample(t, MetricId(m), x);
            if rng.random_bool(0.3) {
                let ev = EventId(rng.random_range(0..v.events().len()));
                e1.event(t, ev);
                e2.event(t, ev);
            }
            let strip = |o: &[Outcome]| -> Vec<(TargetId, Value)> {
                o.iter().filter_map(|o| match o {
                    Outcome::Apply { target, value, .. } => Some((*target, *value)),
                    Outcome::Rejected { .. } => None,
                }).collect()
            };
            let a = strip(e1.evaluate(t));
            let b = strip(e2.evaluate(t));
            prop_assert_eq!(a, b, "\n{}\n{}", rs, n);
        }
    }

    /// The fuzz target's contract on cheap inputs: text near the grammar
    /// (a printed rule set with bytes changed) never panics; what parses
    /// prints back to itself; errors render.
    #[test]
    fn text_near_the_grammar_never_panics(rs in rule_set(), edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(vec!["", "(", ")", ";", ":", "-", "on", "not", "%", "5", ",", "\n", "/s", "é"])), 0..4)) {
        let mut text = rs.to_string();
        for (at, ins) in edits {
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) { i -= 1; }
            text.insert_str(i, ins);
        }
        match parse(&text) {
            Err(e) => { let _ = e.render("prop", &text); }
            Ok(r) => {
                prop_assert_eq!(parse(&r.to_string()).unwrap(), r.clone());
                if let Err(e) = check(&r, &vocab()) { let _ = e.render("prop", &text); }
            }
        }
    }
}
