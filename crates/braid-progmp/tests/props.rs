//! Property tests of the front end and the runtime:
//! - random token streams (and arbitrary text) never panic the lexer,
//!   parser, checker or error renderer;
//! - random well-typed programs compile, and running them never panics and
//!   never loses a packet;
//! - expressions printed with the fewest parentheses the precedence table
//!   allows evaluate like a reference evaluator (precedence and left
//!   associativity).

use std::collections::BTreeSet;
use std::sync::Arc;

use braid_core::{Instant, Rng, RngExt, SeedableRng};
use braid_progmp::*;
use proptest::prelude::*;

const WORDS: &[&str] = &[
    "SCHEDULER",
    "VAR",
    "IF",
    "ELSE",
    "FOREACH",
    "IN",
    "RETURN",
    "DROP",
    "PRINT",
    "SET",
    "TRUE",
    "FALSE",
    "NULL",
    "AND",
    "OR",
    "Q",
    "QU",
    "RQ",
    "SUBFLOWS",
    "R1",
    "R6",
    "R7",
    "CURRENT_TIME_MS",
    "RANDOM",
    "FILTER",
    "MIN",
    "MAX",
    "SUM",
    "GET",
    "TOP",
    "POP",
    "EMPTY",
    "IS_EMPTY",
    "COUNT",
    "PUSH",
    "SET_USER",
    "LENGTH",
    "SEQ",
    "USER",
    "PSH",
    "SENT_ON",
    "ID",
    "RTT",
    "RTT_MS",
    "RTT_VAR",
    "CWND",
    "SSTHRESH",
    "SKBS_IN_FLIGHT",
    "PACKETS_IN_FLIGHT",
    "QUEUED",
    "LOST_SKBS",
    "DELAY_IN",
    "DELAY_OUT",
    "DELAY_OUT_ESTIMATOR",
    "IS_BACKUP",
    "THROTTLED",
    "IS_THROTTLED",
    "LOSSY",
    "IS_LOSSY",
    "HAS_WINDOW_FOR",
    "sbf",
    "skb",
    "x",
    "s",
    "p",
    "Foo",
    "_x",
    "0",
    "1",
    "3",
    "-1",
    "99999999999999999999",
    "\"q %d\"",
    "\"%\"",
    "\"%s\"",
    "\"open",
    "(",
    ")",
    "{",
    "}",
    ".",
    ",",
    ";",
    "=",
    "=>",
    "==",
    "!=",
    "<",
    ">",
    "<=",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "!",
    "&&",
    "|",
    "/*",
    "*/",
    "//",
    "\n",
    "\t",
    "é",
    "@",
    "'",
];

fn token_stream() -> impl Strategy<Value = String> {
    prop::collection::vec((0..WORDS.len(), any::<bool>()), 0..120).prop_map(|toks| {
        let mut s = String::new();
        for (i, glue) in toks {
            s.push_str(WORDS[i]);
            if !glue {
                s.push(' ');
            }
        }
        s
    })
}

/// Compiles `src`; a failure must render, and positions must lie in the
/// source. A success runs on a small environment without losing packets.
fn front_end_survives(src: &str) {
    match Program::compile(src) {
        Err(e) => {
            assert!(!e.diagnostics.is_empty());
            let lines = src.split('\n').count() as u32;
            for d in &e.diagnostics {
                assert!(
                    d.line() >= 1 && d.line() <= lines,
                    "{d} outside {lines} lines"
                );
                assert!(d.column() >= 1);
                assert!(
                    d.span.start <= src.len()
                        && d.span.end <= src.len()
                        && d.span.start <= d.span.end
                );
            }
            let rendered = e.render("fuzz", src);
            assert!(rendered.starts_with("error: "));
            let _ = e.to_string();
        }
        Ok(p) => exercise(Arc::new(p), 3),
    }
}

/// Runs a program through a few events and checks that every written
/// packet is still in Q or QU until acknowledged.
fn exercise(program: Arc<Program>, seed: u64) {
    let mut rng = Rng::seed_from_u64(seed);
    let mut s = Scheduler::new(program, seed);
    let mut env = MemoryEnv::new();
    for id in 1..=3u32 {
        env.add_subflow(SubflowInfo {
            id,
            rtt_us: rng.random_range(0..100_000),
            cwnd: rng.random_range(0..6),
            is_backup: id == 3,
            lossy: rng.random_bool(0.2),
            ..Default::default()
        });
    }
    env.registers = [1, 0, -3, i64::MAX, 2, 0];
    let mut live = BTreeSet::new();
    let mut now = Instant::ZERO;
    for step in 0..12 {
        now += std::time::Duration::from_millis(rng.random_range(0..300));
        match rng.random_range(0..5) {
            0 | 1 => {
                for _ in 0..rng.random_range(1..4) {
                    live.insert(env.write(
                        rng.random_range(1..1500),
                        rng.random_range(0..3),
                        rng.random_bool(0.5),
                    ));
                }
            }
            2 => {
                if let Some(p) = env.queue(Queue::Unacked).first() {
                    let id = p.info.id;
                    env.ack(id);
                    live.remove(&id);
                }
            }
            3 => {
                if let Some(p) = env.queue(Queue::Unacked).last() {
                    let id = p.info.id;
                    env.lose(id);
                }
            }
            _ => {
                let id = 1 + (step % 3) as u32;
                if let Some(sbf) = env.subflow_mut(id) {
                    sbf.in_flight = 0;
                    sbf.cwnd = 4;
                }
            }
        }
        s.run_until_idle(&mut env, now, 32);
        for a in s.actions() {
            if let Action::Remove { packet } = a {
                assert_ne!(
                    packet.queue,
                    Queue::Unacked,
                    "QU loses packets only to acknowledgements"
                );
            }
        }
        let held: BTreeSet<PacketId> = env
            .queue(Queue::Send)
            .iter()
            .chain(env.queue(Queue::Unacked))
            .map(|p| p.info.id)
            .collect();
        assert_eq!(held, live, "a packet went missing");
        let rq_ok = env
            .queue(Queue::Reinject)
            .iter()
            .all(|p| live.contains(&p.info.id));
        assert!(rq_ok);
    }
}

/// Builds random well-typed programs.
struct Gen {
    rng: Rng,
    fresh: u32,
    scopes: Vec<Vec<(String, Kind)>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Bool,
    Sbf,
    Pkt,
}

impl Gen {
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.rng.random_range(0..xs.len())]
    }

    fn var_of(&mut self, k: Kind) -> Option<String> {
        let vars: Vec<String> = self
            .scopes
            .iter()
            .flatten()
            .filter(|(_, kk)| *kk == k)
            .map(|(n, _)| n.clone())
            .collect();
        (!vars.is_empty()).then(|| vars[self.rng.random_range(0..vars.len())].clone())
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    fn lambda(&mut self, k: Kind, body: impl FnOnce(&mut Gen) -> String) -> String {
        let p = self.name(if k == Kind::Sbf { "s" } else { "p" });
        self.scopes.push(vec![(p.clone(), k)]);
        let b = body(self);
        self.scopes.pop();
        format!("{p} => {b}")
    }

    fn int(&mut self, d: u32) -> String {
        if d == 0 || self.rng.random_bool(0.3) {
            if let Some(v) = self
                .rng
                .random_bool(0.3)
                .then(|| self.var_of(Kind::Int))
                .flatten()
            {
                return v;
            }
            return match self.rng.random_range(0..6) {
                0 => self.rng.random_range(0..50).to_string(),
                1 => self.pick(&["R1", "R2", "R3", "R4", "R5", "R6"]).into(),
                2 => self
                    .pick(&[
                        "CURRENT_TIME_MS",
                        "RANDOM",
                        "SUBFLOWS.COUNT",
                        "Q.COUNT",
                        "QU.COUNT",
                        "RQ.COUNT",
                    ])
                    .into(),
                _ => "7".into(),
            };
        }
        match self.rng.random_range(0..6) {
            0 => {
                let s = self.sbf(d - 1);
                let p = self.pick(&[
                    "RTT",
                    "RTT_MS",
                    "CWND",
                    "QUEUED",
                    "PACKETS_IN_FLIGHT",
                    "USER",
                    "ID",
                    "DELAY_OUT",
                    "LOST_SKBS",
                ]);
                format!("{s}.{p}")
            }
            1 => {
                let pk = self.pkt(d - 1, false);
                let p = self.pick(&["LENGTH", "SEQ", "USER"]);
                format!("{pk}.{p}")
            }
            2 => {
                let l = self.lambda(Kind::Sbf, |g| g.int(d - 1));
                format!("SUBFLOWS.SUM({l})")
            }
            _ => {
                let op = self.pick(&["+", "-", "*", "/", "%"]);
                format!("({} {op} {})", self.int(d - 1), self.int(d - 1))
            }
        }
    }

    fn boolean(&mut self, d: u32) -> String {
        if d == 0 {
            return self
                .pick(&["TRUE", "FALSE", "Q.EMPTY", "RQ.IS_EMPTY"])
                .into();
        }
        match self.rng.random_range(0..9) {
            0 => format!("!{}", self.boolean(d - 1)),
            1 => format!("({} AND {})", self.boolean(d - 1), self.boolean(d - 1)),
            2 => format!("({} OR {})", self.boolean(d - 1), self.boolean(d - 1)),
            3 => {
                let op = self.pick(&["<", ">", "<=", ">=", "==", "!="]);
                format!("({} {op} {})", self.int(d - 1), self.int(d - 1))
            }
            4 => format!("({} != NULL)", self.sbf(d - 1)),
            5 => format!("{}.SENT_ON({})", self.pkt(d - 1, false), self.sbf(d - 1)),
            6 => format!(
                "{}.HAS_WINDOW_FOR({})",
                self.sbf(d - 1),
                self.pkt(d - 1, false)
            ),
            7 => format!(
                "{}.{}",
                self.sbf(d - 1),
                self.pick(&["IS_BACKUP", "IS_THROTTLED", "LOSSY"])
            ),
            _ => self.var_of(Kind::Bool).unwrap_or_else(|| "TRUE".into()),
        }
    }

    fn sbf_list(&mut self, d: u32) -> String {
        if d == 0 || self.rng.random_bool(0.4) {
            return "SUBFLOWS".into();
        }
        let l = self.lambda(Kind::Sbf, |g| g.boolean(d - 1));
        format!("{}.FILTER({l})", self.sbf_list(d - 1))
    }

    fn sbf(&mut self, d: u32) -> String {
        if let Some(v) = self
            .rng
            .random_bool(0.4)
            .then(|| self.var_of(Kind::Sbf))
            .flatten()
        {
            return v;
        }
        let list = self.sbf_list(d.saturating_sub(1));
        match self.rng.random_range(0..3) {
            0 => format!("{list}.GET({})", self.rng.random_range(0..4)),
            1 => format!(
                "{list}.MIN({})",
                self.lambda(Kind::Sbf, |g| g.int(d.saturating_sub(1)))
            ),
            _ => format!(
                "{list}.MAX({})",
                self.lambda(Kind::Sbf, |g| g.int(d.saturating_sub(1)))
            ),
        }
    }

    fn pkt_list(&mut self, d: u32, poppable: bool) -> String {
        let q = if poppable {
            self.pick(&["Q", "RQ"])
        } else {
            self.pick(&["Q", "QU", "RQ"])
        };
        if d == 0 || self.rng.random_bool(0.5) {
            return q.into();
        }
        let l = self.lambda(Kind::Pkt, |g| g.boolean(d - 1));
        format!("{q}.FILTER({l})")
    }

    fn pkt(&mut self, d: u32, may_pop: bool) -> String {
        if let Some(v) = self
            .rng
            .random_bool(0.4)
            .then(|| self.var_of(Kind::Pkt))
            .flatten()
        {
            return v;
        }
        if may_pop && self.rng.random_bool(0.5) {
            return format!("{}.POP()", self.pkt_list(d.saturating_sub(1), true));
        }
        let list = self.pkt_list(d.saturating_sub(1), false);
        match self.rng.random_range(0..3) {
            0 => format!("{list}.TOP"),
            1 => format!("{list}.GET({})", self.rng.random_range(0..3)),
            _ => format!(
                "{list}.MIN({})",
                self.lambda(Kind::Pkt, |g| g.int(d.saturating_sub(1)))
            ),
        }
    }

    fn block(&mut self, d: u32, out: &mut String) {
        self.scopes.push(Vec::new());
        let n = self.rng.random_range(0..4);
        for _ in 0..n {
            self.stmt(d, out);
        }
        if self.rng.random_bool(0.1) {
            out.push_str("RETURN;\n");
        }
        self.scopes.pop();
    }

    fn stmt(&mut self, d: u32, out: &mut String) {
        let s = match self.rng.random_range(0..10) {
            0 | 1 => format!("{}.PUSH({});\n", self.sbf(d), self.pkt(d, true)),
            2 => format!("{}.SET_USER({});\n", self.sbf(d), self.int(d)),
            3 => format!(
                "SET({}, {});\n",
                self.pick(&["R1", "R2", "R3", "R4", "R5", "R6"]),
                self.int(d)
            ),
            4 => format!("DROP({});\n", self.pkt(d, true)),
            5 if d > 0 => {
                let c = self.boolean(d - 1);
                let mut a = String::new();
                let mut b = String::new();
                self.block(d - 1, &mut a);
                self.block(d - 1, &mut b);
                format!("IF ({c}) {{\n{a}}} ELSE {{\n{b}}}\n")
            }
            6 if d > 0 => {
                let sbf = self.rng.random_bool(0.5);
                let list = if sbf {
                    self.sbf_list(d - 1)
                } else {
                    self.pkt_list(d - 1, false)
                };
                let v = self.name("v");
                self.scopes
                    .push(vec![(v.clone(), if sbf { Kind::Sbf } else { Kind::Pkt })]);
                let mut body = String::new();
                self.block(d - 1, &mut body);
                self.scopes.pop();
                format!("FOREACH (VAR {v} IN {list}) {{\n{body}}}\n")
            }
            7 => {
                let k = [Kind::Int, Kind::Bool, Kind::Sbf, Kind::Pkt][self.rng.random_range(0..4)];
                let e = match k {
                    Kind::Int => self.int(d),
                    Kind::Bool => self.boolean(d),
                    Kind::Sbf => self.sbf(d),
                    Kind::Pkt => self.pkt(d, true),
                };
                let v = self.name("v");
                self.scopes.last_mut().unwrap().push((v.clone(), k));
                format!("VAR {v} = {e};\n")
            }
            _ => format!("PRINT(\"v %d\", {});\n", self.int(d)),
        };
        out.push_str(&s);
    }
}

fn random_program(seed: u64) -> String {
    let mut g = Gen {
        rng: Rng::seed_from_u64(seed),
        fresh: 0,
        scopes: Vec::new(),
    };
    let mut out = String::from("SCHEDULER random;\n");
    g.block(3, &mut out);
    out
}

/// An integer expression tree and its printing with minimal parentheses.
#[derive(Debug, Clone)]
enum IntTree {
    Leaf(i64),
    Op(char, Box<IntTree>, Box<IntTree>),
}

fn prec(op: char) -> u8 {
    if matches!(op, '+' | '-') {
        1
    } else {
        2
    }
}

impl IntTree {
    fn eval(&self) -> i64 {
        match self {
            IntTree::Leaf(v) => *v,
            IntTree::Op(op, a, b) => {
                let (x, y) = (a.eval(), b.eval());
                match op {
                    '+' => x.wrapping_add(y),
                    '-' => x.wrapping_sub(y),
                    '*' => x.wrapping_mul(y),
                    '/' if y == 0 => 0,
                    '/' => x.wrapping_div(y),
                    _ if y == 0 => 0,
                    _ => x.wrapping_rem(y),
                }
            }
        }
    }

    /// Prints with parentheses only where precedence or left
    /// associativity require them.
    fn print(&self) -> String {
        match self {
            IntTree::Leaf(v) => v.to_string(),
            IntTree::Op(op, a, b) => {
                let l = match &**a {
                    IntTree::Op(o, ..) if prec(*o) < prec(*op) => format!("({})", a.print()),
                    _ => a.print(),
                };
                let r = match &**b {
                    IntTree::Op(o, ..) if prec(*o) <= prec(*op) => format!("({})", b.print()),
                    _ => b.print(),
                };
                format!("{l} {op} {r}")
            }
        }
    }
}

fn int_tree() -> impl Strategy<Value = IntTree> {
    let leaf = (0i64..1000).prop_map(IntTree::Leaf);
    leaf.prop_recursive(6, 64, 2, |inner| {
        (
            prop::sample::select(vec!['+', '-', '*', '/', '%']),
            inner.clone(),
            inner,
        )
            .prop_map(|(op, a, b)| IntTree::Op(op, Box::new(a), Box::new(b)))
    })
}

#[derive(Debug, Clone)]
enum BoolTree {
    Leaf(bool),
    Not(Box<BoolTree>),
    And(Box<BoolTree>, Box<BoolTree>),
    Or(Box<BoolTree>, Box<BoolTree>),
}

impl BoolTree {
    fn eval(&self) -> bool {
        match self {
            BoolTree::Leaf(b) => *b,
            BoolTree::Not(a) => !a.eval(),
            BoolTree::And(a, b) => a.eval() && b.eval(),
            BoolTree::Or(a, b) => a.eval() || b.eval(),
        }
    }

    /// Level: OR 1, AND 2, `!` and leaves 3.
    fn level(&self) -> u8 {
        match self {
            BoolTree::Or(..) => 1,
            BoolTree::And(..) => 2,
            _ => 3,
        }
    }

    fn print(&self) -> String {
        let wrap = |t: &BoolTree, min: u8| {
            if t.level() < min {
                format!("({})", t.print())
            } else {
                t.print()
            }
        };
        match self {
            BoolTree::Leaf(b) => if *b { "TRUE" } else { "FALSE" }.into(),
            BoolTree::Not(a) => format!("!{}", wrap(a, 3)),
            BoolTree::And(a, b) => format!("{} AND {}", wrap(a, 2), wrap(b, 3)),
            BoolTree::Or(a, b) => format!("{} OR {}", wrap(a, 1), wrap(b, 2)),
        }
    }
}

fn bool_tree() -> impl Strategy<Value = BoolTree> {
    any::<bool>()
        .prop_map(BoolTree::Leaf)
        .prop_recursive(6, 64, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|a| BoolTree::Not(Box::new(a))),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| BoolTree::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner).prop_map(|(a, b)| BoolTree::Or(Box::new(a), Box::new(b))),
            ]
        })
}

fn eval_in_r1(expr: &str) -> i64 {
    r1_after(&format!("SET(R1, {expr});"))
}

fn r1_after(src: &str) -> i64 {
    let p = Program::compile(src).unwrap_or_else(|e| panic!("{}", e.render("expr", src)));
    let mut env = MemoryEnv::new();
    Scheduler::new(Arc::new(p), 0).run(&mut env, Instant::ZERO);
    env.registers[0]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_token_streams_never_panic(src in token_stream()) {
        front_end_survives(&src);
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,200}") {
        front_end_survives(&src);
    }

    #[test]
    fn random_programs_compile_run_and_lose_nothing(seed in any::<u64>()) {
        let src = random_program(seed);
        let p = Program::compile(&src).unwrap_or_else(|e| panic!("{}\n{src}", e.render("random", &src)));
        exercise(Arc::new(p), seed);
    }

    #[test]
    fn integer_precedence_and_associativity(t in int_tree()) {
        prop_assert_eq!(eval_in_r1(&t.print()), t.eval(), "{}", t.print());
    }

    #[test]
    fn boolean_precedence(t in bool_tree()) {
        let got = r1_after(&format!("IF ({}) {{ SET(R1, 1); }}", t.print()));
        prop_assert_eq!(got == 1, t.eval(), "{}", t.print());
    }
}
