//! The type checker (thesis §3.3.2, "Variables, type system, and state";
//! "Side effects"): static, implicit types taken from each variable's
//! initial value; single assignment (no name is declared twice where both
//! are visible); `POP`, the only side effect an expression can have, is
//! banned from conditions, lambdas, `FOREACH` lists and `PRINT` arguments.
//! It lowers the syntax tree to the typed form of [`crate::ir`].

use crate::ast::{Arg, BinOp, Block, Expr, ExprKind, Ident, Script, StmtKind};
use crate::diag::{suggest, Diagnostic, Span};
use crate::env::Queue;
use crate::ir::*;
use crate::lexer::Kw;

/// A checked program.
pub(crate) struct Checked {
    pub name: Option<String>,
    pub body: Vec<Stmt>,
    pub layout: Layout,
}

pub(crate) fn check(script: &Script) -> Result<Checked, Vec<Diagnostic>> {
    let mut c = Checker {
        scopes: vec![Vec::new()],
        errors: Vec::new(),
        layout: Layout::default(),
        pure: None,
    };
    let body = c.block(&script.body);
    if c.errors.is_empty() {
        Ok(Checked {
            name: script.name.as_ref().map(|i| i.name.clone()),
            body,
            layout: c.layout,
        })
    } else {
        Err(c.errors)
    }
}

/// A typed expression.
enum T {
    Int(IntE),
    Bool(BoolE),
    Sbf(SbfE),
    Pkt(PktE),
    SbfList(SbfListE),
    PktList(PktListE),
    Null,
}

impl T {
    fn describe(&self) -> String {
        match self {
            T::Int(_) => "an integer".into(),
            T::Bool(_) => "a boolean".into(),
            T::Sbf(_) => "a subflow".into(),
            T::Pkt(_) => "a packet".into(),
            T::SbfList(_) => "a subflow list".into(),
            T::PktList(l) => format!("a packet list (of {})", l.queue.name()),
            T::Null => "NULL".into(),
        }
    }
}

enum Binding {
    Int(Slot),
    Bool(Slot),
    Sbf(Slot),
    Pkt(Slot),
    SbfList(Slot),
    /// Packet lists are views: the variable stands for its definition.
    PktList(PktListE),
    /// The declaration did not type-check; uses stay silent.
    Poisoned,
}

struct Var {
    name: String,
    span: Span,
    binding: Binding,
}

struct Checker {
    scopes: Vec<Vec<Var>>,
    errors: Vec<Diagnostic>,
    layout: Layout,
    /// Set while checking an expression that must not have side effects,
    /// naming it for messages.
    pure: Option<&'static str>,
}

const SUBFLOW_PROPS: &str = "ID, RTT, RTT_MS, RTT_VAR, CWND, SSTHRESH, SKBS_IN_FLIGHT (PACKETS_IN_FLIGHT), QUEUED, LOST_SKBS, DELAY_IN, DELAY_OUT, DELAY_OUT_ESTIMATOR, USER, IS_BACKUP, THROTTLED (IS_THROTTLED), LOSSY (IS_LOSSY), HAS_WINDOW_FOR(packet), and the statements PUSH(packet), SET_USER(int)";
const PACKET_PROPS: &str = "LENGTH, SEQ, USER, PSH, SENT_ON(subflow)";
const SBF_LIST_OPS: &str =
    "EMPTY, COUNT, FILTER(s => ...), MIN(s => ...), MAX(s => ...), SUM(s => ...), GET(i)";
const PKT_LIST_OPS: &str =
    "EMPTY, COUNT, TOP, POP(), GET(i), FILTER(p => ...), MIN(p => ...), MAX(p => ...), SUM(p => ...)";

fn next(counter: &mut Slot, span: Span, errors: &mut Vec<Diagnostic>) -> Slot {
    let s = *counter;
    match counter.checked_add(1) {
        Some(n) => *counter = n,
        None => errors.push(
            Diagnostic::new(span, "too many variables")
                .hint("a scheduler has at most 65535 of each type"),
        ),
    }
    s
}

impl Checker {
    fn err(&mut self, d: Diagnostic) {
        self.errors.push(d);
    }

    fn lookup(&self, name: &str) -> Option<&Var> {
        self.scopes
            .iter()
            .rev()
            .flat_map(|s| s.iter())
            .find(|v| v.name == name)
    }

    /// Single assignment: a name may not be declared while another
    /// declaration of it is visible.
    fn declare(&mut self, id: &Ident, binding: Binding) {
        if let Some(prev) = self.lookup(&id.name) {
            let (line, col) = (prev.span.line, prev.span.column);
            self.err(
                Diagnostic::new(
                    id.span,
                    format!("`{}` is already declared (at {line}:{col})", id.name),
                )
                .hint("variables are single-assignment; choose another name"),
            );
        }
        let scope = self
            .scopes
            .last_mut()
            .expect("the checker always has a scope");
        scope.push(Var {
            name: id.name.clone(),
            span: id.span,
            binding,
        });
    }

    fn with_scope<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.scopes.push(Vec::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    fn pure<R>(&mut self, ctx: &'static str, f: impl FnOnce(&mut Self) -> R) -> R {
        let saved = self.pure.replace(self.pure.unwrap_or(ctx));
        let r = f(self);
        self.pure = saved;
        r
    }

    fn block(&mut self, stmts: &[crate::ast::Stmt]) -> Vec<Stmt> {
        let mut out = Vec::new();
        let mut returned = false;
        for s in stmts {
            if returned {
                self.err(
                    Diagnostic::new(s.span, "statement after RETURN is never run")
                        .hint("RETURN ends the run; it must be the last statement of its block"),
                );
                break;
            }
            returned = matches!(s.kind, StmtKind::Return);
            self.stmt(s, &mut out);
        }
        out
    }

    fn scoped_block(&mut self, b: &Block) -> Vec<Stmt> {
        self.with_scope(|c| c.block(&b.stmts))
    }

    fn stmt(&mut self, s: &crate::ast::Stmt, out: &mut Vec<Stmt>) {
        match &s.kind {
            StmtKind::Var { name, init } => {
                let binding = match self.expr(init) {
                    None => Binding::Poisoned,
                    Some(T::Null) => {
                        self.err(
                            Diagnostic::new(init.span, "a variable cannot start as NULL").hint(
                                "NULL has no type; variables take the type of their initial value",
                            ),
                        );
                        Binding::Poisoned
                    }
                    Some(T::Int(e)) => {
                        let slot = next(&mut self.layout.ints, name.span, &mut self.errors);
                        out.push(Stmt::Int(slot, e));
                        Binding::Int(slot)
                    }
                    Some(T::Bool(e)) => {
                        let slot = next(&mut self.layout.bools, name.span, &mut self.errors);
                        out.push(Stmt::Bool(slot, e));
                        Binding::Bool(slot)
                    }
                    Some(T::Sbf(e)) => {
                        let slot = next(&mut self.layout.sbfs, name.span, &mut self.errors);
                        out.push(Stmt::Sbf(slot, e));
                        Binding::Sbf(slot)
                    }
                    Some(T::Pkt(e)) => {
                        let slot = next(&mut self.layout.pkts, name.span, &mut self.errors);
                        out.push(Stmt::Pkt(slot, e));
                        Binding::Pkt(slot)
                    }
                    Some(T::SbfList(e)) => {
                        let slot = next(&mut self.layout.masks, name.span, &mut self.errors);
                        out.push(Stmt::SbfList(slot, e));
                        Binding::SbfList(slot)
                    }
                    Some(T::PktList(l)) => Binding::PktList(l),
                };
                self.declare(name, binding);
            }
            StmtKind::If {
                branches,
                otherwise,
            } => {
                let mut arms = Vec::new();
                for (cond, block) in branches {
                    let c = self.pure("an IF condition", |c| c.bool_expr(cond, "an IF condition"));
                    let body = self.scoped_block(block);
                    if let Some(c) = c {
                        arms.push((c, body));
                    }
                }
                let other = otherwise
                    .as_ref()
                    .map(|b| self.scoped_block(b))
                    .unwrap_or_default();
                out.push(Stmt::If(arms, other));
            }
            StmtKind::Foreach { var, list, body } => {
                let list_t = self.pure("a FOREACH list", |c| c.expr(list));
                self.with_scope(|c| match list_t {
                    Some(T::SbfList(l)) => {
                        let slot = next(&mut c.layout.sbfs, var.span, &mut c.errors);
                        c.declare(var, Binding::Sbf(slot));
                        let body = c.block(&body.stmts);
                        out.push(Stmt::ForeachSbf {
                            slot,
                            list: l,
                            body,
                        });
                    }
                    Some(T::PktList(l)) => {
                        let slot = next(&mut c.layout.pkts, var.span, &mut c.errors);
                        let buffer = next(&mut c.layout.loops, var.span, &mut c.errors);
                        c.declare(var, Binding::Pkt(slot));
                        let body = c.block(&body.stmts);
                        out.push(Stmt::ForeachPkt {
                            slot,
                            list: l,
                            buffer,
                            body,
                        });
                    }
                    other => {
                        if let Some(t) = other {
                            c.err(
                                Diagnostic::new(
                                    list.span,
                                    format!("FOREACH needs a list, found {}", t.describe()),
                                )
                                .hint("iterate over SUBFLOWS, Q, QU, RQ or a FILTER of them"),
                            );
                        }
                        c.declare(var, Binding::Poisoned);
                        c.block(&body.stmts);
                    }
                });
            }
            StmtKind::Drop(e) => {
                if let Some(p) = self.pkt_expr(e, "DROP") {
                    out.push(Stmt::Drop(p));
                }
            }
            StmtKind::Print {
                format,
                format_span,
                args,
            } => {
                let pieces =
                    match split_format(format) {
                        Ok(p) => p,
                        Err(msg) => {
                            self.err(Diagnostic::new(*format_span, msg).hint(
                                "use %d (or %i, %u) for each value and %% for a percent sign",
                            ));
                            return;
                        }
                    };
                if pieces.len() != args.len() + 1 {
                    self.err(
                        Diagnostic::new(
                            *format_span,
                            format!(
                                "the format has {} placeholders but PRINT has {} values",
                                pieces.len() - 1,
                                args.len()
                            ),
                        )
                        .hint("one %d per value"),
                    );
                    return;
                }
                let mut typed = Vec::new();
                for a in args {
                    match self.pure("a PRINT argument", |c| c.expr(a)) {
                        Some(T::Int(e)) => typed.push(PrintArg::Int(e)),
                        Some(T::Bool(e)) => typed.push(PrintArg::Bool(e)),
                        Some(t) => self.err(
                            Diagnostic::new(
                                a.span,
                                format!(
                                    "PRINT shows integers and booleans, found {}",
                                    t.describe()
                                ),
                            )
                            .hint("print a property instead, e.g. sbf.ID or skb.SEQ"),
                        ),
                        None => {}
                    }
                }
                if typed.len() == args.len() {
                    out.push(Stmt::Print {
                        pieces,
                        args: typed,
                    });
                }
            }
            StmtKind::Set { reg, value } => {
                if let Some(v) = self.int_expr(value, "SET's value") {
                    out.push(Stmt::SetReg(*reg, v));
                }
            }
            StmtKind::Return => out.push(Stmt::Return),
            StmtKind::Push { target, packet } => {
                let t = self.sbf_expr(target, "PUSH's subflow");
                let p = self.pkt_expr(packet, "PUSH");
                if let (Some(t), Some(p)) = (t, p) {
                    out.push(Stmt::Push(t, p));
                }
            }
            StmtKind::SetUser { target, value } => {
                let t = self.sbf_expr(target, "SET_USER's subflow");
                let v = self.int_expr(value, "SET_USER's value");
                if let (Some(t), Some(v)) = (t, v) {
                    out.push(Stmt::SetUser(t, v));
                }
            }
        }
    }

    fn mismatch(&mut self, e: &Expr, want: &str, what: &str, found: &T) {
        let hint = match (want, found) {
            ("a boolean", T::Int(_)) => "compare it, e.g. x > 0",
            ("an integer", T::Bool(_)) => "booleans are not numbers here",
            ("a packet", T::PktList(_)) => "take one packet with TOP, POP() or GET(i)",
            ("a subflow", T::SbfList(_)) => "pick one with MIN(s => s.RTT), MAX(...) or GET(i)",
            _ => "",
        };
        let d = Diagnostic::new(
            e.span,
            format!("{what} must be {want}, found {}", found.describe()),
        );
        self.err(if hint.is_empty() { d } else { d.hint(hint) });
    }

    fn int_expr(&mut self, e: &Expr, what: &str) -> Option<IntE> {
        match self.expr(e)? {
            T::Int(i) => Some(i),
            t => {
                self.mismatch(e, "an integer", what, &t);
                None
            }
        }
    }

    fn bool_expr(&mut self, e: &Expr, what: &str) -> Option<BoolE> {
        match self.expr(e)? {
            T::Bool(b) => Some(b),
            t => {
                self.mismatch(e, "a boolean", what, &t);
                None
            }
        }
    }

    fn sbf_expr(&mut self, e: &Expr, what: &str) -> Option<SbfE> {
        match self.expr(e)? {
            T::Sbf(s) => Some(s),
            t => {
                self.mismatch(e, "a subflow", what, &t);
                None
            }
        }
    }

    fn pkt_expr(&mut self, e: &Expr, what: &str) -> Option<PktE> {
        match self.expr(e)? {
            T::Pkt(p) => Some(p),
            t => {
                self.mismatch(e, "a packet", &format!("{what}'s argument"), &t);
                None
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> Option<T> {
        match &e.kind {
            ExprKind::Int(v) => Some(T::Int(IntE::Const(*v))),
            ExprKind::Bool(b) => Some(T::Bool(BoolE::Const(*b))),
            ExprKind::Null => Some(T::Null),
            ExprKind::Var(name) => self.var(name, e.span),
            ExprKind::Entity(k) => Some(match k {
                Kw::Q => T::PktList(PktListE {
                    queue: Queue::Send,
                    filters: Vec::new(),
                }),
                Kw::Qu => T::PktList(PktListE {
                    queue: Queue::Unacked,
                    filters: Vec::new(),
                }),
                Kw::Rq => T::PktList(PktListE {
                    queue: Queue::Reinject,
                    filters: Vec::new(),
                }),
                Kw::Subflows => T::SbfList(SbfListE::All),
                Kw::Reg(r) => T::Int(IntE::Reg(*r)),
                Kw::CurrentTimeMs => T::Int(IntE::NowMs),
                _ => T::Int(IntE::Random),
            }),
            ExprKind::Not(inner) => Some(T::Bool(BoolE::Not(Box::new(
                self.bool_expr(inner, "the operand of `!`")?,
            )))),
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, e.span),
            ExprKind::Member {
                recv,
                member,
                member_span,
                args,
            } => {
                let r = self.expr(recv)?;
                self.member(r, *member, *member_span, args.as_deref(), e.span)
            }
        }
    }

    fn var(&mut self, name: &str, span: Span) -> Option<T> {
        let Some(v) = self.lookup(name) else {
            let visible: Vec<&str> = self
                .scopes
                .iter()
                .flat_map(|s| s.iter())
                .map(|v| v.name.as_str())
                .collect();
            let d = Diagnostic::new(span, format!("unknown variable `{name}`"));
            let d = match suggest(name, visible) {
                Some(s) => d.hint(format!("did you mean `{s}`?")),
                None => d.hint("declare it first with VAR; a variable is visible in its block after its declaration"),
            };
            self.err(d);
            return None;
        };
        Some(match &v.binding {
            Binding::Int(s) => T::Int(IntE::Slot(*s)),
            Binding::Bool(s) => T::Bool(BoolE::Slot(*s)),
            Binding::Sbf(s) => T::Sbf(SbfE::Slot(*s)),
            Binding::Pkt(s) => T::Pkt(PktE::Slot(*s)),
            Binding::SbfList(s) => T::SbfList(SbfListE::Slot(*s)),
            Binding::PktList(l) => T::PktList(l.clone()),
            Binding::Poisoned => return None,
        })
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, span: Span) -> Option<T> {
        let ta = self.expr(a);
        let tb = self.expr(b);
        let (ta, tb) = (ta?, tb?);
        let sym = op.symbol();
        match op {
            BinOp::Or | BinOp::And => match (ta, tb) {
                (T::Bool(x), T::Bool(y)) => Some(T::Bool(if op == BinOp::Or {
                    BoolE::Or(Box::new(x), Box::new(y))
                } else {
                    BoolE::And(Box::new(x), Box::new(y))
                })),
                (x, y) => {
                    let bad = if matches!(x, T::Bool(_)) {
                        (b, y)
                    } else {
                        (a, x)
                    };
                    self.mismatch(bad.0, "a boolean", &format!("an operand of {sym}"), &bad.1);
                    None
                }
            },
            BinOp::Eq | BinOp::Ne => {
                let eq = op == BinOp::Eq;
                match (ta, tb) {
                    (T::Int(x), T::Int(y)) => Some(T::Bool(BoolE::Cmp(
                        if eq { CmpOp::Eq } else { CmpOp::Ne },
                        Box::new(x),
                        Box::new(y),
                    ))),
                    (T::Bool(x), T::Bool(y)) => {
                        Some(T::Bool(BoolE::BoolEq(eq, Box::new(x), Box::new(y))))
                    }
                    (T::Sbf(x), T::Sbf(y)) => {
                        Some(T::Bool(BoolE::SbfEq(eq, Box::new(x), Box::new(y))))
                    }
                    (T::Pkt(x), T::Pkt(y)) => {
                        Some(T::Bool(BoolE::PktEq(eq, Box::new(x), Box::new(y))))
                    }
                    (T::Sbf(x), T::Null) | (T::Null, T::Sbf(x)) => {
                        Some(T::Bool(BoolE::SbfIsNull(eq, Box::new(x))))
                    }
                    (T::Pkt(x), T::Null) | (T::Null, T::Pkt(x)) => {
                        Some(T::Bool(BoolE::PktIsNull(eq, Box::new(x))))
                    }
                    (x, y) => {
                        let hint = if matches!((&x, &y), (T::Null, _) | (_, T::Null)) {
                            "only subflows and packets can be NULL; for a list, test EMPTY"
                        } else {
                            "both sides of == and != must have the same type"
                        };
                        self.err(
                            Diagnostic::new(
                                span,
                                format!("cannot compare {} with {}", x.describe(), y.describe()),
                            )
                            .hint(hint),
                        );
                        None
                    }
                }
            }
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => match (ta, tb) {
                (T::Int(x), T::Int(y)) => {
                    let c = match op {
                        BinOp::Lt => CmpOp::Lt,
                        BinOp::Gt => CmpOp::Gt,
                        BinOp::Le => CmpOp::Le,
                        _ => CmpOp::Ge,
                    };
                    Some(T::Bool(BoolE::Cmp(c, Box::new(x), Box::new(y))))
                }
                (x, y) => {
                    let bad = if matches!(x, T::Int(_)) {
                        (b, y)
                    } else {
                        (a, x)
                    };
                    self.mismatch(bad.0, "an integer", &format!("an operand of {sym}"), &bad.1);
                    None
                }
            },
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => match (ta, tb) {
                (T::Int(x), T::Int(y)) => {
                    let o = match op {
                        BinOp::Add => IntOp::Add,
                        BinOp::Sub => IntOp::Sub,
                        BinOp::Mul => IntOp::Mul,
                        BinOp::Div => IntOp::Div,
                        _ => IntOp::Rem,
                    };
                    Some(T::Int(IntE::Bin(o, Box::new(x), Box::new(y))))
                }
                (x, y) => {
                    let bad = if matches!(x, T::Int(_)) {
                        (b, y)
                    } else {
                        (a, x)
                    };
                    self.mismatch(bad.0, "an integer", &format!("an operand of {sym}"), &bad.1);
                    None
                }
            },
        }
    }

    /// `recv.MEMBER` or `recv.MEMBER(args)`.
    fn member(
        &mut self,
        recv: T,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
        span: Span,
    ) -> Option<T> {
        if matches!(m, Kw::Push | Kw::SetUser) {
            self.err(
                Diagnostic::new(
                    mspan,
                    format!("{} is a statement and has no value", m.name()),
                )
                .hint(format!("write it on its own: sbf.{}(...);", m.name())),
            );
            return None;
        }
        match recv {
            T::Sbf(s) => self.subflow_member(s, m, mspan, args),
            T::Pkt(p) => self.packet_member(p, m, mspan, args),
            T::SbfList(l) => self.sbf_list_member(l, m, mspan, args),
            T::PktList(l) => self.pkt_list_member(l, m, mspan, args, span),
            other => {
                self.err(
                    Diagnostic::new(
                        mspan,
                        format!(
                            "{} has no properties; found .{}",
                            other.describe(),
                            m.name()
                        ),
                    )
                    .hint("properties belong to subflows, packets and lists"),
                );
                None
            }
        }
    }

    fn unknown_member(&mut self, m: Kw, mspan: Span, of: &str, known: &str) -> Option<T> {
        let names: Vec<&str> = known
            .split([',', ' ', '(', ')'])
            .filter(|s| !s.is_empty())
            .collect();
        let hint = match suggest(m.name(), names.iter().copied()).filter(|s| *s != m.name()) {
            Some(s) => format!("did you mean {s}? {of} has: {known}"),
            None => format!("{of} has: {known}"),
        };
        self.err(
            Diagnostic::new(mspan, format!("{} is not a property of {of}", m.name())).hint(hint),
        );
        None
    }

    /// A property: no parentheses allowed.
    fn no_args(&mut self, m: Kw, mspan: Span, args: Option<&[Arg]>) -> Option<()> {
        if args.is_some() {
            self.err(
                Diagnostic::new(mspan, format!("{} takes no arguments", m.name()))
                    .hint(format!("write .{} without parentheses", m.name())),
            );
            return None;
        }
        Some(())
    }

    /// An operation with exactly one plain argument.
    fn one_arg<'a>(
        &mut self,
        m: Kw,
        mspan: Span,
        args: Option<&'a [Arg]>,
        what: &str,
    ) -> Option<&'a Expr> {
        match args {
            Some([Arg::Expr(e)]) => Some(e),
            Some([Arg::Lambda { span, .. }]) => {
                self.err(
                    Diagnostic::new(*span, format!("{} takes {what}, not a lambda", m.name()))
                        .hint("lambdas are for FILTER, MIN, MAX and SUM"),
                );
                None
            }
            _ => {
                self.err(
                    Diagnostic::new(mspan, format!("{} takes one argument: {what}", m.name()))
                        .hint(format!("write .{}(...)", m.name())),
                );
                None
            }
        }
    }

    /// The lambda of FILTER, MIN, MAX or SUM; its parameter is a subflow
    /// (`subflow == true`) or a packet. Returns the parameter slot, the
    /// body's typed expression and the body's span.
    fn lambda_body(
        &mut self,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
        subflow: bool,
    ) -> Option<(Slot, T, Span)> {
        let elem = if subflow { "s => s.RTT" } else { "p => p.SEQ" };
        let (param, body) = match args {
            Some([Arg::Lambda { param, body, .. }]) => (param, body),
            Some([a]) => {
                self.err(
                    Diagnostic::new(a.span(), format!("{} takes a lambda", m.name()))
                        .hint(format!("write .{}({elem})", m.name())),
                );
                return None;
            }
            _ => {
                self.err(
                    Diagnostic::new(mspan, format!("{} takes one lambda argument", m.name()))
                        .hint(format!("write .{}({elem})", m.name())),
                );
                return None;
            }
        };
        let ctx: &'static str = match m {
            Kw::Filter => "a FILTER lambda",
            Kw::Min => "a MIN lambda",
            Kw::Max => "a MAX lambda",
            _ => "a SUM lambda",
        };
        let slot = if subflow {
            next(&mut self.layout.sbfs, param.span, &mut self.errors)
        } else {
            next(&mut self.layout.pkts, param.span, &mut self.errors)
        };
        let binding = if subflow {
            Binding::Sbf(slot)
        } else {
            Binding::Pkt(slot)
        };
        let t = self.with_scope(|c| {
            c.declare(param, binding);
            c.pure(ctx, |c| c.expr(body))
        })?;
        Some((slot, t, body.span))
    }

    fn lambda_bool(
        &mut self,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
        subflow: bool,
    ) -> Option<Lambda<BoolE>> {
        let (slot, t, span) = self.lambda_body(m, mspan, args, subflow)?;
        match t {
            T::Bool(body) => Some(Lambda { slot, body }),
            t => {
                self.err(
                    Diagnostic::new(
                        span,
                        format!(
                            "FILTER's lambda must give a boolean, found {}",
                            t.describe()
                        ),
                    )
                    .hint("e.g. FILTER(s => s.RTT_MS < 100)"),
                );
                None
            }
        }
    }

    fn lambda_int(
        &mut self,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
        subflow: bool,
    ) -> Option<Lambda<IntE>> {
        let (slot, t, span) = self.lambda_body(m, mspan, args, subflow)?;
        match t {
            T::Int(body) => Some(Lambda { slot, body }),
            t => {
                self.err(
                    Diagnostic::new(
                        span,
                        format!(
                            "{}'s lambda must give an integer, found {}",
                            m.name(),
                            t.describe()
                        ),
                    )
                    .hint(format!("e.g. {}(s => s.RTT)", m.name())),
                );
                None
            }
        }
    }

    fn subflow_member(&mut self, s: SbfE, m: Kw, mspan: Span, args: Option<&[Arg]>) -> Option<T> {
        let int = |p| Some(T::Int(IntE::SbfProp(Box::new(s.clone()), p)));
        let flag = |f| Some(T::Bool(BoolE::SbfFlag(Box::new(s.clone()), f)));
        let prop = match m {
            Kw::Id => int(SbfInt::Id),
            Kw::Rtt => int(SbfInt::Rtt),
            Kw::RttMs => int(SbfInt::RttMs),
            Kw::RttVar => int(SbfInt::RttVar),
            Kw::Cwnd => int(SbfInt::Cwnd),
            Kw::Ssthresh => int(SbfInt::Ssthresh),
            Kw::SkbsInFlight => int(SbfInt::InFlight),
            Kw::Queued => int(SbfInt::Queued),
            Kw::LostSkbs => int(SbfInt::Lost),
            Kw::DelayIn => int(SbfInt::DelayIn),
            Kw::DelayOut => int(SbfInt::DelayOut),
            Kw::DelayOutEstimator => int(SbfInt::DelayOutSample),
            Kw::User => int(SbfInt::User),
            Kw::IsBackup => flag(SbfBool::Backup),
            Kw::Throttled => flag(SbfBool::Throttled),
            Kw::Lossy => flag(SbfBool::Lossy),
            Kw::HasWindowFor => {
                let a = self.one_arg(m, mspan, args, "a packet")?;
                let p = self.pkt_expr(a, "HAS_WINDOW_FOR")?;
                return Some(T::Bool(BoolE::HasWindowFor(Box::new(s), Box::new(p))));
            }
            _ => return self.unknown_member(m, mspan, "a subflow", SUBFLOW_PROPS),
        };
        self.no_args(m, mspan, args)?;
        prop
    }

    fn packet_member(&mut self, p: PktE, m: Kw, mspan: Span, args: Option<&[Arg]>) -> Option<T> {
        let prop = match m {
            Kw::Length => T::Int(IntE::PktProp(Box::new(p), PktInt::Length)),
            Kw::Seq => T::Int(IntE::PktProp(Box::new(p), PktInt::Seq)),
            Kw::User => T::Int(IntE::PktProp(Box::new(p), PktInt::User)),
            Kw::Psh => T::Bool(BoolE::Psh(Box::new(p))),
            Kw::SentOn => {
                let a = self.one_arg(m, mspan, args, "a subflow")?;
                let s = self.sbf_expr(a, "SENT_ON's argument")?;
                return Some(T::Bool(BoolE::SentOn(Box::new(p), Box::new(s))));
            }
            _ => return self.unknown_member(m, mspan, "a packet", PACKET_PROPS),
        };
        self.no_args(m, mspan, args)?;
        Some(prop)
    }

    fn sbf_list_member(
        &mut self,
        l: SbfListE,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
    ) -> Option<T> {
        match m {
            Kw::Empty => {
                self.no_args(m, mspan, args)?;
                Some(T::Bool(BoolE::SbfEmpty(Box::new(l))))
            }
            Kw::Count => {
                self.no_args(m, mspan, args)?;
                Some(T::Int(IntE::SbfCount(Box::new(l))))
            }
            Kw::Filter => {
                let f = self.lambda_bool(m, mspan, args, true)?;
                Some(T::SbfList(SbfListE::Filter(Box::new(l), Box::new(f))))
            }
            Kw::Min | Kw::Max => {
                let key = self.lambda_int(m, mspan, args, true)?;
                Some(T::Sbf(SbfE::MinMax {
                    list: Box::new(l),
                    key: Box::new(key),
                    max: m == Kw::Max,
                }))
            }
            Kw::Sum => {
                let key = self.lambda_int(m, mspan, args, true)?;
                Some(T::Int(IntE::SbfSum(Box::new(l), Box::new(key))))
            }
            Kw::Get => {
                let a = self.one_arg(m, mspan, args, "an index")?;
                let i = self.int_expr(a, "GET's index")?;
                Some(T::Sbf(SbfE::Get(Box::new(l), Box::new(i))))
            }
            Kw::Top | Kw::Pop => {
                self.err(
                    Diagnostic::new(
                        mspan,
                        format!("{} is for packet queues, not subflow lists", m.name()),
                    )
                    .hint("pick a subflow with GET(0), MIN(s => ...) or MAX(s => ...)"),
                );
                None
            }
            _ => self.unknown_member(m, mspan, "a subflow list", SBF_LIST_OPS),
        }
    }

    fn pkt_list_member(
        &mut self,
        mut l: PktListE,
        m: Kw,
        mspan: Span,
        args: Option<&[Arg]>,
        span: Span,
    ) -> Option<T> {
        match m {
            Kw::Empty => {
                self.no_args(m, mspan, args)?;
                Some(T::Bool(BoolE::PktEmpty(Box::new(l))))
            }
            Kw::Count => {
                self.no_args(m, mspan, args)?;
                Some(T::Int(IntE::PktCount(Box::new(l))))
            }
            Kw::Top => {
                self.no_args(m, mspan, args)?;
                Some(T::Pkt(PktE::Top(Box::new(l))))
            }
            Kw::Pop => {
                match args {
                    Some([]) => {}
                    None => {
                        self.err(
                            Diagnostic::new(mspan, "POP needs parentheses").hint("write POP()"),
                        );
                        return None;
                    }
                    Some(_) => {
                        self.err(
                            Diagnostic::new(mspan, "POP takes no arguments").hint("write POP()"),
                        );
                        return None;
                    }
                }
                if let Some(ctx) = self.pure {
                    self.err(Diagnostic::new(span, format!("POP removes a packet and is not allowed in {ctx}")).hint(
                        "conditions, lambdas, FOREACH lists and PRINT must not change the queues; look with TOP here and POP in a PUSH, DROP or VAR",
                    ));
                    return None;
                }
                if l.queue == Queue::Unacked {
                    self.err(
                        Diagnostic::new(mspan, "POP takes packets from Q or RQ, not QU")
                            .hint("QU holds packets in flight, which only acknowledgements remove; use TOP or GET(i) to resend one"),
                    );
                    return None;
                }
                Some(T::Pkt(PktE::Pop(Box::new(l))))
            }
            Kw::Get => {
                let a = self.one_arg(m, mspan, args, "an index")?;
                let i = self.int_expr(a, "GET's index")?;
                Some(T::Pkt(PktE::Get(Box::new(l), Box::new(i))))
            }
            Kw::Filter => {
                let f = self.lambda_bool(m, mspan, args, false)?;
                l.filters.push(f);
                Some(T::PktList(l))
            }
            Kw::Min | Kw::Max => {
                let key = self.lambda_int(m, mspan, args, false)?;
                Some(T::Pkt(PktE::MinMax {
                    list: Box::new(l),
                    key: Box::new(key),
                    max: m == Kw::Max,
                }))
            }
            Kw::Sum => {
                let key = self.lambda_int(m, mspan, args, false)?;
                Some(T::Int(IntE::PktSum(Box::new(l), Box::new(key))))
            }
            _ => self.unknown_member(m, mspan, "a packet list", PKT_LIST_OPS),
        }
    }
}

/// Splits a PRINT format at its placeholders (`%d`, `%i`, `%u`); `%%` is a
/// literal percent sign.
fn split_format(f: &str) -> Result<Vec<String>, String> {
    let mut pieces = vec![String::new()];
    let mut chars = f.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            pieces.last_mut().expect("never empty").push(c);
            continue;
        }
        match chars.next() {
            Some('%') => pieces.last_mut().expect("never empty").push('%'),
            Some('d' | 'i' | 'u') => pieces.push(String::new()),
            Some(o) => return Err(format!("unsupported placeholder %{o} in PRINT's format")),
            None => return Err("PRINT's format ends with a lone %".into()),
        }
    }
    Ok(pieces)
}
