//! Recursive-descent parser of rule files (seed 001 Listing 6.1):
//!
//! ```text
//! ruleset   := block*
//! block     := "on" ("first" | "every") "match" rule*
//! rule      := cond ":" action ("," action)* ";"
//! action    := "set" "register" NAME "=" value
//!            | "set" NAME "=" value
//!            | "execute" "parameter" "transition" NAME "at" "self" "set" "value" "(" value ")"
//! value     := NAME                      -- a choice, when alone
//!            | num
//! cond      := and ("or" and)*
//! and       := not ("and" not)*
//! not       := "not" not | cmp
//! cmp       := num (("<" | "<=" | ">" | ">=" | "==" | "!=") num)? | "true" | "false" | "(" cond ")"
//! num       := term (("+" | "-") term)*
//! term      := unary (("*" | "/") unary)*
//! unary     := "-" unary | atom          -- "-" before a number is part of it
//! atom      := NUMBER | NAME | FUNC "(" NAME "," NUMBER ")" | "(" num ")"
//! ```
//!
//! Parentheses may hold a condition or a number; the parser decides by what
//! it finds inside and reports a misplaced one ("expected a condition, found
//! a number") at its position. It stops at the first syntax error.

use crate::ast::*;
use crate::diag::{Diagnostic, RuleError};
use crate::lexer::{lex, Tok};

/// Parses a rule file. Names are not resolved here: see [`crate::check()`].
///
/// ```
/// let rules = braid_rules::parse("on first match\n  avg(rtt, 5s) > 80ms: set transport = braid;").unwrap();
/// assert_eq!(rules.len(), 1);
/// ```
pub fn parse(src: &str) -> Result<RuleSet, RuleError> {
    let toks = lex(src).map_err(RuleError::syntax)?;
    let mut p = Parser { toks, pos: 0 };
    p.ruleset().map_err(RuleError::syntax)
}

/// Parses one condition (for tests and tools).
pub fn parse_condition(src: &str) -> Result<Cond, RuleError> {
    let toks = lex(src).map_err(RuleError::syntax)?;
    let mut p = Parser { toks, pos: 0 };
    let c = p.cond().map_err(RuleError::syntax)?;
    p.expect_eof().map_err(RuleError::syntax)?;
    Ok(c)
}

/// A parsed sub-expression before we know which kind its context wants.
enum Item {
    C(Cond),
    N(Num),
}

struct Parser {
    toks: Vec<(Tok, Span)>,
    pos: usize,
}

type PResult<T> = Result<T, Diagnostic>;

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).map(|t| &t.0).unwrap_or(&Tok::Eof)
    }

    fn peek_at(&self, k: usize) -> &Tok {
        self.toks.get(self.pos + k).map(|t| &t.0).unwrap_or(&Tok::Eof)
    }

    fn span(&self) -> Span {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map(|t| t.1)
            .unwrap_or_default()
    }

    fn prev_span(&self) -> Span {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map(|t| t.1)
            .unwrap_or_default()
    }

    fn bump(&mut self) -> (Tok, Span) {
        let t = self.toks.get(self.pos).cloned().unwrap_or((Tok::Eof, self.span()));
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == w)
    }

    fn expect(&mut self, t: Tok, what: &str) -> PResult<Span> {
        if *self.peek() == t {
            Ok(self.bump().1)
        } else {
            Err(self.unexpected(what))
        }
    }

    fn expect_word(&mut self, w: &str) -> PResult<Span> {
        if self.is_word(w) {
            Ok(self.bump().1)
        } else {
            Err(self.unexpected(&format!("`{w}`")))
        }
    }

    fn expect_eof(&mut self) -> PResult<()> {
        match self.peek() {
            Tok::Eof => Ok(()),
            _ => Err(self.unexpected("the end of the input")),
        }
    }

    fn unexpected(&self, what: &str) -> Diagnostic {
        Diagnostic::new(self.span(), format!("expected {what}, found {}", self.peek().describe()))
    }

    fn name(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) if !crate::vocab::RESERVED.contains(&s.as_str()) => {
                let sp = self.bump().1;
                Ok((s, sp))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn ruleset(&mut self) -> PResult<RuleSet> {
        let mut blocks = Vec::new();
        loop {
            match self.peek() {
                Tok::Eof => return Ok(RuleSet { blocks }),
                _ if self.is_word("on") => blocks.push(self.block()?),
                _ => {
                    let d = self.unexpected("`on first match` or `on every match`");
                    return Err(if blocks.is_empty() {
                        d.hint("a rule file starts with `on first match` or `on every match`")
                    } else {
                        d
                    });
                }
            }
        }
    }

    fn block(&mut self) -> PResult<Block> {
        let start = self.expect_word("on")?;
        let mode = if self.is_word("first") {
            self.bump();
            Mode::FirstMatch
        } else if self.is_word("every") {
            self.bump();
            Mode::EveryMatch
        } else {
            return Err(self.unexpected("`first` or `every`"));
        };
        let end = self.expect_word("match")?;
        let mut rules = Vec::new();
        while !matches!(self.peek(), Tok::Eof) && !self.is_word("on") {
            rules.push(self.rule()?);
        }
        Ok(Block {
            mode,
            rules,
            span: start.to(end),
        })
    }

    fn rule(&mut self) -> PResult<Rule> {
        let start = self.span();
        let condition = self.cond()?;
        self.expect(Tok::Colon, "`:` between the condition and the action")?;
        let mut actions = vec![self.action()?];
        while *self.peek() == Tok::Comma {
            self.bump();
            actions.push(self.action()?);
        }
        let end = self.expect(Tok::Semi, "`;` (or `,` and another action) after the action")?;
        Ok(Rule {
            condition,
            actions,
            span: start.to(end),
        })
    }

    fn action(&mut self) -> PResult<Action> {
        let start = self.span();
        if self.is_word("set") {
            self.bump();
            let kind = if self.is_word("register") {
                self.bump();
                ActionKind::Register
            } else {
                ActionKind::Set
            };
            let (target, _) = self.name("the name of what to set")?;
            self.expect(Tok::Assign, "`=`")?;
            let value = self.value(&[Tok::Comma, Tok::Semi])?;
            Ok(Action {
                kind,
                target,
                value,
                span: start.to(self.prev_span()),
            })
        } else if self.is_word("execute") {
            self.bump();
            self.expect_word("parameter")?;
            self.expect_word("transition")?;
            let (target, _) = self.name("the transition's name")?;
            self.expect_word("at")?;
            self.expect_word("self")?;
            self.expect_word("set")?;
            self.expect_word("value")?;
            self.expect(Tok::LParen, "`(`")?;
            let value = self.value(&[Tok::RParen])?;
            self.expect(Tok::RParen, "`)`")?;
            Ok(Action {
                kind: ActionKind::Transition,
                target,
                value,
                span: start.to(self.prev_span()),
            })
        } else {
            Err(self
                .unexpected("an action")
                .hint("actions are `set NAME = VALUE`, `set register NAME = VALUE` or `execute parameter transition NAME at self set value (VALUE)`"))
        }
    }

    /// A lone name before one of `ends` is a choice; anything else a number.
    fn value(&mut self, ends: &[Tok]) -> PResult<ActionValue> {
        if let Tok::Ident(s) = self.peek().clone() {
            if ends.contains(self.peek_at(1)) && !crate::vocab::RESERVED.contains(&s.as_str()) {
                let sp = self.bump().1;
                return Ok(ActionValue::Symbol(s, sp));
            }
        }
        Ok(ActionValue::Num(self.num()?))
    }

    fn cond(&mut self) -> PResult<Cond> {
        let item = self.or()?;
        self.want_cond(item)
    }

    fn num(&mut self) -> PResult<Num> {
        let start = self.span();
        let item = self.add()?;
        want_num(item, start)
    }

    fn want_cond(&self, item: (Item, Span)) -> PResult<Cond> {
        match item {
            (Item::C(c), _) => Ok(c),
            (Item::N(_), sp) => Err(Diagnostic::new(sp, "expected a condition, found a number")
                .hint("compare it with something, e.g. `avg(rtt, 5s) > 80ms`")),
        }
    }

    fn or(&mut self) -> PResult<(Item, Span)> {
        let mut lhs = self.and()?;
        while self.is_word("or") {
            self.bump();
            let rhs = self.and()?;
            let sp = lhs.1.to(rhs.1);
            let a = self.want_cond(lhs)?;
            let b = self.want_cond(rhs)?;
            lhs = (Item::C(Cond::Or(Box::new(a), Box::new(b), sp)), sp);
        }
        Ok(lhs)
    }

    fn and(&mut self) -> PResult<(Item, Span)> {
        let mut lhs = self.not()?;
        while self.is_word("and") {
            self.bump();
            let rhs = self.not()?;
            let sp = lhs.1.to(rhs.1);
            let a = self.want_cond(lhs)?;
            let b = self.want_cond(rhs)?;
            lhs = (Item::C(Cond::And(Box::new(a), Box::new(b), sp)), sp);
        }
        Ok(lhs)
    }

    fn not(&mut self) -> PResult<(Item, Span)> {
        if self.is_word("not") {
            let start = self.bump().1;
            let inner = self.not()?;
            let sp = start.to(inner.1);
            let c = self.want_cond(inner)?;
            return Ok((Item::C(Cond::Not(Box::new(c), sp)), sp));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> PResult<(Item, Span)> {
        if self.is_word("true") || self.is_word("false") {
            let v = self.is_word("true");
            let sp = self.bump().1;
            return Ok((Item::C(Cond::Bool(v, sp)), sp));
        }
        let lhs = self.add()?;
        let op = match self.peek() {
            Tok::Lt => CmpOp::Lt,
            Tok::Le => CmpOp::Le,
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            Tok::EqEq => CmpOp::Eq,
            Tok::Ne => CmpOp::Ne,
            Tok::Assign => {
                return Err(Diagnostic::new(self.span(), "`=` assigns in actions; compare with `==`"));
            }
            _ => return Ok(lhs),
        };
        self.bump();
        let rhs_start = self.span();
        let rhs = self.add()?;
        let sp = lhs.1.to(rhs.1);
        let a = want_num(lhs, sp)?;
        let b = want_num(rhs, rhs_start)?;
        if matches!(self.peek(), Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge | Tok::EqEq | Tok::Ne) {
            return Err(Diagnostic::new(self.span(), "comparisons do not chain")
                .hint("write `a < b and b < c`"));
        }
        Ok((
            Item::C(Cond::Cmp {
                op,
                lhs: Box::new(a),
                rhs: Box::new(b),
                span: sp,
            }),
            sp,
        ))
    }

    fn add(&mut self) -> PResult<(Item, Span)> {
        let mut lhs = self.mul()?;
        loop {
            let op = match self.peek() {
                Tok::Plus => ArithOp::Add,
                Tok::Minus => ArithOp::Sub,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.mul()?;
            lhs = self.bin(op, lhs, rhs)?;
        }
    }

    fn mul(&mut self) -> PResult<(Item, Span)> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Star => ArithOp::Mul,
                Tok::Slash => ArithOp::Div,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.unary()?;
            lhs = self.bin(op, lhs, rhs)?;
        }
    }

    fn bin(&self, op: ArithOp, lhs: (Item, Span), rhs: (Item, Span)) -> PResult<(Item, Span)> {
        let sp = lhs.1.to(rhs.1);
        let l_sp = lhs.1;
        let a = want_num(lhs, l_sp)?;
        let r_sp = rhs.1;
        let b = want_num(rhs, r_sp)?;
        Ok((
            Item::N(Num::Bin {
                op,
                lhs: Box::new(a),
                rhs: Box::new(b),
                span: sp,
            }),
            sp,
        ))
    }

    fn unary(&mut self) -> PResult<(Item, Span)> {
        if *self.peek() == Tok::Minus {
            let start = self.bump().1;
            if let Tok::Number(lit) = self.peek().clone() {
                let sp = start.to(self.bump().1);
                return Ok((
                    Item::N(Num::Lit(
                        Literal {
                            mantissa: -lit.mantissa,
                            ..lit
                        },
                        sp,
                    )),
                    sp,
                ));
            }
            let inner = self.unary()?;
            let sp = start.to(inner.1);
            let n = want_num(inner, sp)?;
            return Ok((Item::N(Num::Neg(Box::new(n), sp)), sp));
        }
        self.atom()
    }

    fn atom(&mut self) -> PResult<(Item, Span)> {
        match self.peek().clone() {
            Tok::Number(lit) => {
                let sp = self.bump().1;
                Ok((Item::N(Num::Lit(lit, sp)), sp))
            }
            Tok::LParen => {
                let start = self.bump().1;
                let inner = self.or()?;
                let end = self.expect(Tok::RParen, "`)`")?;
                Ok((inner.0, start.to(end)))
            }
            Tok::Ident(name) if *self.peek_at(1) == Tok::LParen => {
                let start = self.span();
                let Some(func) = AggFn::parse(&name) else {
                    return Err(Diagnostic::new(start, format!("unknown function `{name}`"))
                        .hint_opt(crate::diag::suggest(&name, AggFn::ALL.iter().map(|f| f.name())).map(|s| format!("did you mean `{s}`?")))
                        .hint("the aggregates are count(EVENT, WINDOW), rate(EVENT, WINDOW), avg, min and max(METRIC, WINDOW)"));
                };
                self.bump();
                self.bump();
                let (source, _) = self.name("an event or metric name")?;
                self.expect(Tok::Comma, "`,` and a window length")?;
                let window = match self.peek().clone() {
                    Tok::Number(lit) => {
                        self.bump();
                        lit
                    }
                    _ => {
                        return Err(self
                            .unexpected("a window length")
                            .hint("windows are durations written as constants, e.g. `30s` or `500ms`"))
                    }
                };
                let end = self.expect(Tok::RParen, "`)`")?;
                let sp = start.to(end);
                Ok((
                    Item::N(Num::Agg {
                        func,
                        source,
                        window,
                        span: sp,
                    }),
                    sp,
                ))
            }
            Tok::Ident(name) if !crate::vocab::RESERVED.contains(&name.as_str()) => {
                let sp = self.bump().1;
                Ok((Item::N(Num::Metric(name, sp)), sp))
            }
            _ => Err(self.unexpected("a number, a metric or an aggregate")),
        }
    }
}

fn want_num(item: (Item, Span), at: Span) -> PResult<Num> {
    match item {
        (Item::N(n), _) => Ok(n),
        (Item::C(_), sp) => Err(Diagnostic::new(if sp.line == 0 { at } else { sp }, "expected a number, found a condition")),
    }
}
