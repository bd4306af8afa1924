//! Front end: positioned syntax and type errors, pretty-printer round trip
//! (property-tested), and the shipped rules' sizes against Table 7.3.

use braid_tarl::algorithms::SHIPPED;
use braid_tarl::ast::{Action, ActionKind, BinOp, Decl, Expr, Ident, PatEdge, Rule, SetExpr, UnOp};
use braid_tarl::{compile, geometric_schema, parse, pretty, tree_schema, ErrorKind, Span};
use proptest::prelude::*;

fn err(src: &str) -> braid_tarl::TarlError {
    compile("r.tarl", src, &geometric_schema(false)).expect_err("must be rejected")
}

const OK: &str = "filter(match(TP, Phys, self <- e -> v), e.weight > 0.5)\nexecute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)\n";

#[test]
fn valid_rule_compiles() {
    compile("r.tarl", OK, &geometric_schema(false)).expect("compiles");
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let e = err("filter(match(TP, Phys, self <- e -> v) e.weight > 0.5)\nexecute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)");
    assert_eq!((e.kind, e.line, e.col), (ErrorKind::Syntax, 1, 40));
    assert!(
        e.to_string()
            .starts_with("r.tarl:1:40: syntax error: expected `,`"),
        "{e}"
    );
    let e = err(
        "match(TP, Phys, self <- e v)\nexecute every match:\n at (self, TP, Ctrl) add_neighbor(v)",
    );
    assert_eq!((e.line, e.col), (1, 27));
    assert!(e.message.contains("`->`"), "{e}");
    let e =
        err("match(TP, Phys, self <- e -> v)\nexecute every match:\n  at (self, TP, Ctrl) jump(v)");
    assert_eq!((e.line, e.col), (3, 23));
    assert!(e.message.contains("move_neighbor"), "{e}");
    let e = err("match(TP, Phys, self <- e -> v) $");
    assert!(e.message.contains("unexpected character `$`"), "{e}");
    let e = err("match(TP, Phys, self <- match -> v)\nexecute every match:\n  at (self, TP, Ctrl) add_neighbor(v)");
    assert!(e.message.contains("keyword `match`"), "{e}");
}

#[test]
fn type_errors_name_the_thing_and_position() {
    let e = err(&OK.replace("e.weight", "e.colour"));
    assert_eq!((e.kind, e.line, e.col), (ErrorKind::Type, 1, 43));
    assert!(
        e.message.contains("unknown edge attribute `colour`") && e.message.contains("weight"),
        "{e}"
    );
    let e = err(&OK.replace("TP, Ctrl)", "TP, Overlay)"));
    assert_eq!((e.line, e.col), (3, 17));
    assert!(
        e.message.contains("unknown topology `Overlay`") && e.message.contains("Phys, Ctrl"),
        "{e}"
    );
    let e = err(&OK.replace("(TP, Phys,", "(XP, Phys,"));
    assert!(e.message.contains("unknown topology provider `XP`"), "{e}");
    let e = err(&OK.replace("e.weight > 0.5", "e.weight"));
    assert!(
        e.message.contains("predicate must be a bool, found number"),
        "{e}"
    );
    let e = err(&OK.replace("e.weight > 0.5", "e.weight > v.pos"));
    assert!(
        e.message
            .contains("`>` needs two numbers, found number and position"),
        "{e}"
    );
    let e = err(&OK.replace("remove_neighbor(v)", "remove_neighbor(u)"));
    assert!(
        e.message.contains("unknown variable or constant `u`"),
        "{e}"
    );
    let e = err(&OK.replace("e.weight > 0.5", "w.id > 0"));
    assert!(e.message.contains("`w`"), "{e}");
    let e = err("filter(match(TP, Phys, self <- e -> v), count(match(TP, Phys, v <- f -> w)) > 0 && w.id > 1)\nexecute every match:\n  at (self, TP, Ctrl) add_neighbor(w)");
    assert!(e.message.contains("variable `w` is not bound here"), "{e}");
    let e = err(&OK.replace("e.weight > 0.5", "e > 0.5"));
    assert!(e.message.contains("edge variable `e`"), "{e}");
    let e = err(&OK.replace("e.weight > 0.5", "dist(v.pos) > 0.5"));
    assert!(e.message.contains("`dist` takes 2 argument(s)"), "{e}");
    let e = err("const K = self;\nmatch(TP, Phys, self <- e -> v)\nexecute every match:\n  at (self, TP, Ctrl) add_neighbor(v)");
    assert!(
        e.message.contains("constant cannot refer to variables"),
        "{e}"
    );
    let e = err("match(TP, Phys, self <- e -> v, v <- e -> w)\nexecute every match:\n  at (self, TP, Ctrl) add_neighbor(v)");
    assert!(
        e.message.contains("edge variable `e` is bound twice"),
        "{e}"
    );
    let e = err("nope\nexecute every match:\n  at (self, TP, Ctrl) add_neighbor(self)");
    assert!(e.message.contains("unknown selector `nope`"), "{e}");
}

#[test]
fn shipped_rules_compile_and_round_trip() {
    println!("{:<16} {:>4} {:>7}", "rule", "LoC", "thesis");
    for s in SHIPPED {
        let rule = s.compile().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rule.name, s.name);
        let ast = parse(s.source).expect("parses");
        assert_eq!(
            parse(&pretty(&ast)).expect("pretty parses"),
            ast,
            "{}",
            s.name
        );
        println!("{:<16} {:>4} {:>7}", s.name, s.loc(), s.thesis_loc);
        assert!(
            s.loc() <= 2 * s.thesis_loc as usize,
            "{} is much longer than the thesis's",
            s.name
        );
    }
    let _ = tree_schema();
}

// ---- property test: parse(pretty(ast)) == ast ----

const NAMES: &[&str] = &["self", "a", "b", "v", "w", "parentCandidate", "x1"];

fn ident() -> impl Strategy<Value = Ident> {
    prop::sample::select(NAMES).prop_map(Ident::new)
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        (0u32..1000, 0u32..4)
            .prop_map(|(m, e)| Expr::Num(f64::from(m) / 10f64.powi(e as i32), Span::default())),
        any::<bool>().prop_map(|b| Expr::Bool(b, Span::default())),
        ident().prop_map(Expr::Var),
        (ident(), prop::sample::select(&["pos", "id", "weight"][..]))
            .prop_map(|(v, a)| Expr::Attr(v, Ident::new(a))),
    ];
    leaf.prop_recursive(4, 32, 3, |inner| {
        let ops = prop::sample::select(
            &[
                BinOp::Add,
                BinOp::Sub,
                BinOp::Mul,
                BinOp::Div,
                BinOp::Eq,
                BinOp::Ne,
                BinOp::Lt,
                BinOp::Le,
                BinOp::Gt,
                BinOp::Ge,
                BinOp::And,
                BinOp::Or,
            ][..],
        );
        prop_oneof![
            (ops, inner.clone(), inner.clone()).prop_map(|(o, a, b)| Expr::Binary(
                o,
                Box::new(a),
                Box::new(b)
            )),
            (
                prop::sample::select(&[UnOp::Neg, UnOp::Not][..]),
                inner.clone()
            )
                .prop_map(|(o, a)| Expr::Unary(o, Box::new(a), Span::default())),
            (
                prop::sample::select(&["dist", "min", "floor"][..]),
                prop::collection::vec(inner.clone(), 0..3)
            )
                .prop_map(|(f, a)| Expr::Call(Ident::new(f), a)),
            set_leaf().prop_map(|s| Expr::Count(Box::new(s), Span::default())),
        ]
    })
}

fn pat_edge() -> impl Strategy<Value = PatEdge> {
    (ident(), ident(), ident(), any::<bool>()).prop_map(|(from, edge, to, undirected)| PatEdge {
        from,
        edge,
        to,
        undirected,
    })
}

fn set_leaf() -> impl Strategy<Value = SetExpr> {
    prop_oneof![
        (
            prop::sample::select(&["Phys", "Ctrl"][..]),
            prop::collection::vec(pat_edge(), 1..4)
        )
            .prop_map(|(t, pattern)| SetExpr::Match {
                provider: Ident::new("TP"),
                topology: Ident::new(t),
                pattern
            }),
        ident().prop_map(SetExpr::Ref),
    ]
}

fn set() -> impl Strategy<Value = SetExpr> {
    set_leaf().prop_recursive(3, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), expr()).prop_map(|(m, e)| SetExpr::Filter(Box::new(m), e)),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| SetExpr::Join(Box::new(a), Box::new(b))),
            (inner.clone(), expr()).prop_map(|(m, e)| SetExpr::Min(Box::new(m), e)),
            (inner.clone(), expr()).prop_map(|(m, e)| SetExpr::Max(Box::new(m), e)),
        ]
    })
}

fn action() -> impl Strategy<Value = Action> {
    (
        ident(),
        prop::sample::select(&[ActionKind::Add, ActionKind::Remove, ActionKind::Move][..]),
        prop::collection::vec(ident(), 1..3),
    )
        .prop_map(|(at, kind, args)| Action {
            at,
            provider: Ident::new("TP"),
            topology: Ident::new("Ctrl"),
            kind,
            args,
        })
}

fn rule() -> impl Strategy<Value = Rule> {
    let decl = prop_oneof![
        (ident(), expr()).prop_map(|(n, e)| Decl::Const(n, e)),
        (ident(), set()).prop_map(|(n, s)| Decl::Select(n, s)),
    ];
    (
        prop::collection::vec(decl, 0..3),
        set(),
        prop::collection::vec(action(), 1..3),
    )
        .prop_map(|(preamble, condition, actions)| Rule {
            preamble,
            condition,
            actions,
        })
}

proptest! {
    #[test]
    fn pretty_then_parse_is_identity(r in rule()) {
        let text = pretty(&r);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, r, "{}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(s in ".{0,200}") {
        let _ = compile("fuzz", &s, &geometric_schema(false));
    }
}

#[test]
fn selector_expansion_is_bounded() {
    let mut src = String::from("select s0 = match(TP, Phys, self <- e -> v);\n");
    for i in 1..40 {
        src.push_str(&format!("select s{i} = join(s{}, s{});\n", i - 1, i - 1));
    }
    src.push_str("s39\nexecute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)");
    let e = compile("big", &src, &geometric_schema(false)).expect_err("too large");
    assert!(e.message.contains("more than 10000 set operators"), "{e}");
}
