//! Recursive-descent parser for the grammar of thesis appendix A.5.
//!
//! A.5 is an ANTLR grammar whose expression rules are right-recursive and
//! typed (`boolExpression`, `intExpression`, ...). We parse one untyped
//! expression grammar with conventional precedence, lowest first:
//!
//! | level | operators | associativity |
//! |---|---|---|
//! | 1 | `OR` | left |
//! | 2 | `AND` | left |
//! | 3 | `==` `!=` | left |
//! | 4 | `<` `>` `<=` `>=` | left |
//! | 5 | `+` `-` | left |
//! | 6 | `*` `/` `%` | left |
//! | 7 | `!` (prefix) | right |
//! | 8 | `.MEMBER`, `.MEMBER(args)` (postfix) | left |
//!
//! so `!a AND b` is `(!a) AND b` and `x * 3 / 2` is `(x * 3) / 2`; the type
//! checker then enforces A.5's typing. Deviations from A.5, all additive:
//! the `SCHEDULER name;` header is optional, blocks may be empty (the
//! thesis's Listing 3.3 has comment-only blocks), `RETURN` may appear at
//! top level, and `PRINT` takes any number of arguments matching its
//! format.

use crate::ast::*;
use crate::diag::{Diagnostic, Span};
use crate::lexer::{Kw, Tok, Token};

/// Bound on parser recursion (parentheses, `!`, nested blocks, lambdas).
const MAX_NESTING: u32 = 64;
/// Bound on the height of any expression tree (long operator chains
/// build deep trees without recursing in the parser).
pub(crate) const MAX_DEPTH: u32 = 128;

pub(crate) fn parse(src: &str, tokens: &[Token]) -> Result<Script, Diagnostic> {
    let mut p = Parser {
        src,
        toks: tokens,
        pos: 0,
        nesting: 0,
    };
    let name = if p.eat_kw(Kw::Scheduler) {
        let id = p.ident("a scheduler name after SCHEDULER")?;
        p.expect(Tok::Semi, "`;` after the scheduler name")?;
        Some(id)
    } else {
        None
    };
    let mut body = Vec::new();
    while p.peek() != &Tok::Eof {
        if p.peek() == &Tok::RBrace {
            return Err(Diagnostic::new(p.span(), "unexpected `}`").hint("this closes no block"));
        }
        body.push(p.statement()?);
    }
    Ok(Script { name, body })
}

struct Parser<'a> {
    src: &'a str,
    toks: &'a [Token],
    pos: usize,
    nesting: u32,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        let i = (self.pos + n).min(self.toks.len() - 1);
        &self.toks[i].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    fn advance(&mut self) -> &Token {
        let t = &self.toks[self.pos];
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.advance();
            true
        } else {
            false
        }
    }

    fn eat_kw(&mut self, k: Kw) -> bool {
        self.eat(&Tok::Kw(k))
    }

    fn expect(&mut self, t: Tok, what: &str) -> Result<Span, Diagnostic> {
        if self.peek() == &t {
            return Ok(self.advance().span);
        }
        let mut d = self.unexpected(what);
        if t == Tok::Semi && self.pos > 0 {
            // Point just past the statement, where the `;` belongs, not at
            // whatever starts the next line.
            let prev = self.prev_span();
            let width = self
                .src
                .get(prev.start..prev.end)
                .map_or(0, |s| s.chars().count()) as u32;
            d.span = Span {
                start: prev.end,
                end: prev.end,
                line: prev.line,
                column: prev.column + width,
            };
        }
        Err(d)
    }

    fn unexpected(&self, what: &str) -> Diagnostic {
        let found = self.peek();
        let d = Diagnostic::new(
            self.span(),
            format!("expected {what}, found {}", found.describe()),
        );
        match (what, found) {
            (w, _) if w.starts_with("`;`") => d.hint("every statement ends with `;`"),
            (_, Tok::Assign) => d.hint("compare with `==`"),
            _ => d,
        }
    }

    fn ident(&mut self, what: &str) -> Result<Ident, Diagnostic> {
        match self.peek().clone() {
            Tok::Ident(name) => {
                let span = self.advance().span;
                Ok(Ident { name, span })
            }
            Tok::Kw(k) => Err(Diagnostic::new(
                self.span(),
                format!("expected {what}, found the keyword {}", k.name()),
            )
            .hint("names start with a lower-case letter and must not be keywords")),
            _ => Err(self.unexpected(what)),
        }
    }

    fn enter(&mut self) -> Result<(), Diagnostic> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(
                Diagnostic::new(self.span(), "scheduler is nested too deeply").hint(format!(
                    "at most {MAX_NESTING} levels of parentheses, blocks and `!`"
                )),
            );
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    fn block(&mut self) -> Result<Block, Diagnostic> {
        self.expect(Tok::LBrace, "`{`")?;
        self.enter()?;
        let mut stmts = Vec::new();
        loop {
            match self.peek() {
                Tok::RBrace => {
                    self.advance();
                    break;
                }
                Tok::Eof => {
                    return Err(self
                        .unexpected("`}`")
                        .hint("a block opened with `{` is never closed"))
                }
                _ => stmts.push(self.statement()?),
            }
        }
        self.leave();
        Ok(Block { stmts })
    }

    fn statement(&mut self) -> Result<Stmt, Diagnostic> {
        let start = self.span();
        let kind = match self.peek().clone() {
            Tok::Kw(Kw::Var) => {
                self.advance();
                let name = self.ident("a variable name after VAR")?;
                if self.peek() != &Tok::Assign {
                    return Err(self
                        .unexpected("`=`")
                        .hint("a variable is declared with its value: VAR x = ...;"));
                }
                self.advance();
                let init = self.expr()?;
                self.expect(Tok::Semi, "`;` after the variable's value")?;
                StmtKind::Var { name, init }
            }
            Tok::Kw(Kw::If) => self.if_statement()?,
            Tok::Kw(Kw::Foreach) => {
                self.advance();
                self.expect(Tok::LParen, "`(` after FOREACH")?;
                if !self.eat_kw(Kw::Var) {
                    return Err(self
                        .unexpected("VAR")
                        .hint("write FOREACH(VAR sbf IN SUBFLOWS) { ... }"));
                }
                let var = self.ident("a loop variable name")?;
                if !self.eat_kw(Kw::In) {
                    return Err(self
                        .unexpected("IN")
                        .hint("write FOREACH(VAR sbf IN SUBFLOWS) { ... }"));
                }
                let list = self.expr()?;
                self.expect(Tok::RParen, "`)` to close FOREACH(...)")?;
                let body = self.block()?;
                StmtKind::Foreach { var, list, body }
            }
            Tok::Kw(Kw::Drop) => {
                self.advance();
                self.expect(Tok::LParen, "`(` after DROP")?;
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)` to close DROP(...)")?;
                self.expect(Tok::Semi, "`;` after DROP(...)")?;
                StmtKind::Drop(e)
            }
            Tok::Kw(Kw::Print) => {
                self.advance();
                self.expect(Tok::LParen, "`(` after PRINT")?;
                let format_span = self.span();
                let format = match self.peek().clone() {
                    Tok::Str(s) => {
                        self.advance();
                        s
                    }
                    _ => {
                        return Err(self
                            .unexpected("a format string")
                            .hint("PRINT(\"rtt %d\", sbf.RTT_MS); the first argument is a string"))
                    }
                };
                let mut args = Vec::new();
                while self.eat(&Tok::Comma) {
                    args.push(self.expr()?);
                }
                self.expect(Tok::RParen, "`)` to close PRINT(...)")?;
                self.expect(Tok::Semi, "`;` after PRINT(...)")?;
                StmtKind::Print {
                    format,
                    format_span,
                    args,
                }
            }
            Tok::Kw(Kw::Set) => {
                self.advance();
                self.expect(Tok::LParen, "`(` after SET")?;
                let reg = match self.peek() {
                    Tok::Kw(Kw::Reg(r)) => {
                        let r = *r;
                        self.advance();
                        r
                    }
                    _ => {
                        return Err(self
                            .unexpected("a register R1 to R6")
                            .hint("SET(R1, value); SET writes a register"))
                    }
                };
                self.expect(Tok::Comma, "`,` after the register")?;
                let value = self.expr()?;
                self.expect(Tok::RParen, "`)` to close SET(...)")?;
                self.expect(Tok::Semi, "`;` after SET(...)")?;
                StmtKind::Set { reg, value }
            }
            Tok::Kw(Kw::Return) => {
                self.advance();
                self.expect(Tok::Semi, "`;` after RETURN")?;
                StmtKind::Return
            }
            Tok::Kw(Kw::Scheduler) => {
                return Err(
                    Diagnostic::new(start, "SCHEDULER may only open the scheduler")
                        .hint("the header `SCHEDULER name;` is the first statement, if present"),
                )
            }
            Tok::Kw(Kw::Else) => {
                return Err(Diagnostic::new(start, "ELSE without IF")
                    .hint("ELSE directly follows the `}` of an IF block"))
            }
            _ => self.expression_statement()?,
        };
        Ok(Stmt {
            kind,
            span: start.to(self.prev_span()),
        })
    }

    fn if_statement(&mut self) -> Result<StmtKind, Diagnostic> {
        let mut branches = Vec::new();
        let mut otherwise = None;
        self.advance(); // IF
        loop {
            self.expect(Tok::LParen, "`(` after IF")?;
            let cond = self.expr()?;
            self.expect(Tok::RParen, "`)` to close the IF condition")?;
            let block = self.block()?;
            branches.push((cond, block));
            if !self.eat_kw(Kw::Else) {
                break;
            }
            if self.eat_kw(Kw::If) {
                continue;
            }
            otherwise = Some(self.block()?);
            break;
        }
        Ok(StmtKind::If {
            branches,
            otherwise,
        })
    }

    /// `target.PUSH(packet);` or `target.SET_USER(value);`.
    fn expression_statement(&mut self) -> Result<StmtKind, Diagnostic> {
        let start = self.span();
        let e = self.expr()?;
        if matches!(e.kind, ExprKind::Var(_)) && self.peek() == &Tok::Assign {
            return Err(Diagnostic::new(self.span(), "variables cannot be reassigned").hint(
                "ProgMP variables are single-assignment: declare a new one with VAR, or keep state across runs in a register with SET(R1, ...)",
            ));
        }
        let kind = match e.kind {
            ExprKind::Member { recv, member: Kw::Push, member_span, args } => {
                let packet = single_arg(args, member_span, "PUSH", "a packet, e.g. sbf.PUSH(Q.POP())")?;
                StmtKind::Push { target: *recv, packet }
            }
            ExprKind::Member { recv, member: Kw::SetUser, member_span, args } => {
                let value = single_arg(args, member_span, "SET_USER", "an integer, e.g. sbf.SET_USER(1)")?;
                StmtKind::SetUser { target: *recv, value }
            }
            _ => {
                return Err(Diagnostic::new(start.to(e.span), "this expression does nothing on its own").hint(
                    "statements are VAR, IF, FOREACH, DROP, PRINT, SET, RETURN, or a subflow's PUSH(...) or SET_USER(...)",
                ))
            }
        };
        self.expect(Tok::Semi, "`;` after the statement")?;
        Ok(kind)
    }

    fn expr(&mut self) -> Result<Expr, Diagnostic> {
        self.enter()?;
        let e = self.binary(0);
        self.leave();
        e
    }

    /// Precedence climbing over the table in the module documentation.
    fn binary(&mut self, level: usize) -> Result<Expr, Diagnostic> {
        const LEVELS: &[&[(Tok, BinOp)]] = &[
            &[(Tok::Kw(Kw::Or), BinOp::Or)],
            &[(Tok::Kw(Kw::And), BinOp::And)],
            &[(Tok::EqEq, BinOp::Eq), (Tok::NotEq, BinOp::Ne)],
            &[
                (Tok::Lt, BinOp::Lt),
                (Tok::Gt, BinOp::Gt),
                (Tok::Le, BinOp::Le),
                (Tok::Ge, BinOp::Ge),
            ],
            &[(Tok::Plus, BinOp::Add), (Tok::Minus, BinOp::Sub)],
            &[
                (Tok::Star, BinOp::Mul),
                (Tok::Slash, BinOp::Div),
                (Tok::Percent, BinOp::Rem),
            ],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary(level + 1)?;
        loop {
            let Some(&(_, op)) = LEVELS[level].iter().find(|(t, _)| t == self.peek()) else {
                return Ok(lhs);
            };
            self.advance();
            let rhs = self.binary(level + 1)?;
            let span = lhs.span.to(rhs.span);
            let depth = lhs.depth.max(rhs.depth) + 1;
            lhs = self.node(
                ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
                depth,
            )?;
        }
    }

    fn node(&self, kind: ExprKind, span: Span, depth: u32) -> Result<Expr, Diagnostic> {
        if depth > MAX_DEPTH {
            return Err(Diagnostic::new(span, "expression is too deeply nested")
                .hint(format!("split it with VAR; at most {MAX_DEPTH} levels")));
        }
        Ok(Expr { kind, span, depth })
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        if self.peek() == &Tok::Bang {
            let start = self.advance().span;
            self.enter()?;
            let inner = self.unary()?;
            self.leave();
            let span = start.to(inner.span);
            let depth = inner.depth + 1;
            return self.node(ExprKind::Not(Box::new(inner)), span, depth);
        }
        if self.peek() == &Tok::Minus {
            return Err(
                Diagnostic::new(self.span(), "ProgMP has no unary minus").hint("write 0 - x")
            );
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, Diagnostic> {
        let mut e = self.primary()?;
        while self.peek() == &Tok::Dot {
            self.advance();
            let member_span = self.span();
            let member = match self.peek() {
                Tok::Kw(k) => *k,
                Tok::Ident(name) => {
                    return Err(Diagnostic::new(
                        member_span,
                        format!("expected a property after `.`, found `{name}`"),
                    )
                    .hint("properties and operations are upper case, e.g. sbf.RTT or Q.TOP"))
                }
                _ => return Err(self.unexpected("a property after `.`")),
            };
            self.advance();
            let args = if self.peek() == &Tok::LParen {
                Some(self.args()?)
            } else {
                None
            };
            let span = e.span.to(self.prev_span());
            let depth = args
                .iter()
                .flatten()
                .map(Arg::depth)
                .fold(e.depth, u32::max)
                + 1;
            e = self.node(
                ExprKind::Member {
                    recv: Box::new(e),
                    member,
                    member_span,
                    args,
                },
                span,
                depth,
            )?;
        }
        Ok(e)
    }

    fn args(&mut self) -> Result<Vec<Arg>, Diagnostic> {
        self.advance(); // (
        self.enter()?;
        let mut args = Vec::new();
        if !self.eat(&Tok::RParen) {
            loop {
                let is_lambda =
                    matches!(self.peek(), Tok::Ident(_)) && self.peek_at(1) == &Tok::Arrow;
                if is_lambda {
                    let param = self.ident("a lambda parameter")?;
                    self.advance(); // =>
                    let body = self.expr()?;
                    let span = param.span.to(body.span);
                    args.push(Arg::Lambda { param, body, span });
                } else {
                    args.push(Arg::Expr(self.expr()?));
                }
                if self.eat(&Tok::RParen) {
                    break;
                }
                self.expect(Tok::Comma, "`,` or `)`")?;
            }
        }
        self.leave();
        Ok(args)
    }

    fn primary(&mut self) -> Result<Expr, Diagnostic> {
        let span = self.span();
        let kind = match self.peek().clone() {
            Tok::Int(v) => ExprKind::Int(v),
            Tok::Kw(Kw::True) => ExprKind::Bool(true),
            Tok::Kw(Kw::False) => ExprKind::Bool(false),
            Tok::Kw(Kw::Null) => ExprKind::Null,
            Tok::Ident(name) => ExprKind::Var(name),
            Tok::Kw(
                k @ (Kw::Q | Kw::Qu | Kw::Rq | Kw::Subflows | Kw::Reg(_) | Kw::CurrentTimeMs | Kw::Random),
            ) => ExprKind::Entity(k),
            Tok::LParen => {
                self.advance();
                let inner = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                return Ok(Expr { span: span.to(self.prev_span()), ..inner });
            }
            Tok::Str(_) => {
                return Err(Diagnostic::new(span, "a string can only be PRINT's format")
                    .hint("ProgMP values are integers, booleans, subflows, packets and their lists"))
            }
            Tok::Kw(k) => {
                return Err(Diagnostic::new(span, format!("expected a value, found {}", k.name())).hint(format!(
                    "{} is a property or keyword; values start with a variable, a number, Q, QU, RQ, SUBFLOWS, a register or CURRENT_TIME_MS",
                    k.name()
                )))
            }
            _ => return Err(self.unexpected("a value")),
        };
        self.advance();
        Ok(Expr {
            kind,
            span,
            depth: 1,
        })
    }
}

fn single_arg(
    args: Option<Vec<Arg>>,
    span: Span,
    name: &str,
    what: &str,
) -> Result<Expr, Diagnostic> {
    let mut args = args.ok_or_else(|| {
        Diagnostic::new(span, format!("{name} needs an argument")).hint(format!("pass {what}"))
    })?;
    if args.len() != 1 {
        return Err(Diagnostic::new(
            span,
            format!("{name} takes one argument, found {}", args.len()),
        )
        .hint(format!("pass {what}")));
    }
    match args.pop() {
        Some(Arg::Expr(e)) => Ok(e),
        Some(Arg::Lambda { span, .. }) => Err(Diagnostic::new(
            span,
            format!("{name} takes a value, not a lambda"),
        )
        .hint(format!("pass {what}"))),
        None => unreachable!("length checked above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::tokenize;

    fn parse_src(s: &str) -> Result<Script, Diagnostic> {
        parse(s, &tokenize(s)?)
    }

    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Int(v) => v.to_string(),
            ExprKind::Bool(b) => b.to_string(),
            ExprKind::Null => "NULL".into(),
            ExprKind::Var(v) => v.clone(),
            ExprKind::Entity(k) => k.name().into(),
            ExprKind::Not(i) => format!("(!{})", show(i)),
            ExprKind::Binary(op, a, b) => format!("({} {} {})", show(a), op.symbol(), show(b)),
            ExprKind::Member {
                recv, member, args, ..
            } => {
                let a = args
                    .as_ref()
                    .map(|a| format!("({})", a.len()))
                    .unwrap_or_default();
                format!("{}.{}{a}", show(recv), member.name())
            }
        }
    }

    fn expr_of(src: &str) -> String {
        let s = parse_src(&format!("VAR v = {src};")).unwrap();
        match &s.body[0].kind {
            StmtKind::Var { init, .. } => show(init),
            _ => unreachable!(),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(expr_of("x * 3 / 2"), "((x * 3) / 2)");
        assert_eq!(expr_of("a - b - c"), "((a - b) - c)");
        assert_eq!(expr_of("!a AND b"), "((!a) AND b)");
        assert_eq!(expr_of("a OR b AND c"), "(a OR (b AND c))");
        assert_eq!(expr_of("a + b * c < d == e"), "(((a + (b * c)) < d) == e)");
        assert_eq!(
            expr_of("!s.IS_THROTTLED AND s.CWND > s.QUEUED + 1"),
            "((!s.THROTTLED) AND (s.CWND > (s.QUEUED + 1)))"
        );
        assert_eq!(expr_of("(a OR b) AND c"), "((a OR b) AND c)");
    }

    #[test]
    fn statements_and_header() {
        let s = parse_src(
            "SCHEDULER two_in_q; PRINT(\"Q.COUNT %u\", Q.COUNT); IF(Q.COUNT > 1) { SUBFLOWS.GET(0).PUSH(Q.POP()); SUBFLOWS.GET(0).PUSH(Q.POP()); }",
        )
        .unwrap();
        assert_eq!(s.name.unwrap().name, "two_in_q");
        assert_eq!(s.body.len(), 2);
        let s = parse_src("IF (a) { } ELSE IF (b) { RETURN; } ELSE { SET(R2, 1); }").unwrap();
        match &s.body[0].kind {
            StmtKind::If {
                branches,
                otherwise,
            } => {
                assert_eq!(branches.len(), 2);
                assert!(otherwise.is_some());
            }
            _ => panic!(),
        }
    }

    #[test]
    fn syntax_errors_have_positions_and_hints() {
        let e = parse_src("VAR x = 1\nVAR y = 2;").unwrap_err();
        assert_eq!((e.span.line, e.span.column), (1, 10), "just after `1`");
        assert!(e.hint.unwrap().contains(";"));
        let e = parse_src("VAR x = 1; x = 2;").unwrap_err();
        assert!(e.message.contains("reassigned"));
        let e = parse_src("Q.TOP;").unwrap_err();
        assert!(e.message.contains("does nothing"));
        let e = parse_src("IF (a) { VAR b = 1;").unwrap_err();
        assert!(e.hint.unwrap().contains("never closed"));
        let e = parse_src("VAR x = -1;").unwrap_err();
        assert!(e.message.contains("unary minus"));
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("VAR x = {}1{};", "(".repeat(500), ")".repeat(500));
        assert!(parse_src(&deep)
            .unwrap_err()
            .message
            .contains("nested too deeply"));
        let bangs = format!("VAR x = {}TRUE;", "!".repeat(10_000));
        assert!(parse_src(&bangs).is_err());
        let chain = format!("VAR x = 1{};", " + 1".repeat(1000));
        assert!(parse_src(&chain)
            .unwrap_err()
            .message
            .contains("too deeply"));
    }
}
