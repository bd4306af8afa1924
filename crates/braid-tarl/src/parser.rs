//! The TARL parser: a recursive-descent parser from tokens to the [`ast`](crate::ast).
//!
//! Grammar (syntax of Frömmgen 2018, §7.2, Listing 7.1, with a preamble of
//! `const` and `select` declarations):
//!
//! ```text
//! rule    := decl* set 'execute' 'every' 'match' ':' action+
//! decl    := 'const' IDENT '=' expr ';' | 'select' IDENT '=' set ';'
//! set     := 'match' '(' IDENT ',' IDENT ',' edge (',' edge)* ')'
//!          | ('filter' | 'min' | 'max') '(' set ',' expr ')'
//!          | 'join' '(' set ',' set ')' | IDENT
//! edge    := IDENT ('-' IDENT '->' | '<-' IDENT '->') IDENT
//! action  := 'at' '(' IDENT ',' IDENT ',' IDENT ')' ACTION '(' IDENT (',' IDENT)* ')'
//! expr    := precedence climbing over || && (== != < <= > >=) (+ -) (* /),
//!            unary - !, primaries: number, true, false, count(set),
//!            f(expr, ...), x, x.attr, (expr)
//! ```

use crate::ast::{Action, ActionKind, BinOp, Decl, Expr, Ident, PatEdge, Rule, SetExpr, UnOp};
use crate::error::{Span, TarlError};
use crate::lexer::{lex, Tok, Token};

/// Words that cannot name variables, selectors or constants.
pub const KEYWORDS: &[&str] = &[
    "match",
    "filter",
    "join",
    "min",
    "max",
    "count",
    "const",
    "select",
    "execute",
    "every",
    "at",
    "true",
    "false",
    "add_neighbor",
    "remove_neighbor",
    "move_neighbor",
];

/// Parses one rule.
///
/// # Errors
/// A [`TarlError`] of kind `Syntax` naming the line, column and what was expected.
pub fn parse(src: &str) -> Result<Rule, TarlError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    p.rule()
}

/// Nesting limit: deeper input is rejected instead of overflowing the stack.
const MAX_DEPTH: u32 = 200;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    depth: u32,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn err<T>(&self, expected: &str) -> Result<T, TarlError> {
        Err(TarlError::syntax(
            self.span(),
            format!("expected {expected}, found {}", self.peek().describe()),
        ))
    }

    fn expect(&mut self, tok: Tok, what: &str) -> Result<Span, TarlError> {
        if *self.peek() == tok {
            Ok(self.bump().span)
        } else {
            self.err(what)
        }
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == w)
    }

    fn expect_word(&mut self, w: &str) -> Result<Span, TarlError> {
        if self.is_word(w) {
            Ok(self.bump().span)
        } else {
            self.err(&format!("`{w}`"))
        }
    }

    /// Any identifier (keywords included): provider, topology, attribute names.
    fn name(&mut self, what: &str) -> Result<Ident, TarlError> {
        match self.peek().clone() {
            Tok::Ident(name) => {
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            _ => self.err(what),
        }
    }

    /// An identifier that is not a keyword: variables, selectors, constants.
    fn var(&mut self, what: &str) -> Result<Ident, TarlError> {
        if let Tok::Ident(s) = self.peek() {
            if KEYWORDS.contains(&s.as_str()) {
                return Err(TarlError::syntax(
                    self.span(),
                    format!(
                        "expected {what}, found keyword `{s}` (keywords cannot name variables)"
                    ),
                ));
            }
        }
        self.name(what)
    }

    fn enter(&mut self) -> Result<(), TarlError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(TarlError::syntax(
                self.span(),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn rule(&mut self) -> Result<Rule, TarlError> {
        let mut preamble = Vec::new();
        loop {
            if self.is_word("const") {
                self.bump();
                let name = self.var("a constant name")?;
                self.expect(Tok::Assign, "`=`")?;
                let e = self.expr()?;
                self.expect(Tok::Semi, "`;` after the constant")?;
                preamble.push(Decl::Const(name, e));
            } else if self.is_word("select") {
                self.bump();
                let name = self.var("a selector name")?;
                self.expect(Tok::Assign, "`=`")?;
                let s = self.set()?;
                self.expect(Tok::Semi, "`;` after the selector")?;
                preamble.push(Decl::Select(name, s));
            } else {
                break;
            }
        }
        let condition = self.set()?;
        self.expect_word("execute")?;
        self.expect_word("every")?;
        self.expect_word("match")?;
        self.expect(Tok::Colon, "`:` after `execute every match`")?;
        let mut actions = vec![self.action()?];
        while *self.peek() != Tok::Eof {
            actions.push(self.action()?);
        }
        Ok(Rule {
            preamble,
            condition,
            actions,
        })
    }

    fn action(&mut self) -> Result<Action, TarlError> {
        self.expect_word("at")?;
        self.expect(Tok::LParen, "`(` after `at`")?;
        let at = self.var("the node the action runs at")?;
        self.expect(Tok::Comma, "`,`")?;
        let provider = self.name("a topology provider name")?;
        self.expect(Tok::Comma, "`,`")?;
        let topology = self.name("a topology name")?;
        self.expect(Tok::RParen, "`)`")?;
        let kind = match self.peek() {
            Tok::Ident(s) if s == "add_neighbor" => ActionKind::Add,
            Tok::Ident(s) if s == "remove_neighbor" => ActionKind::Remove,
            Tok::Ident(s) if s == "move_neighbor" => ActionKind::Move,
            _ => return self.err("`add_neighbor`, `remove_neighbor` or `move_neighbor`"),
        };
        self.bump();
        self.expect(Tok::LParen, "`(`")?;
        let mut args = vec![self.var("a node variable")?];
        while *self.peek() == Tok::Comma {
            self.bump();
            args.push(self.var("a node variable")?);
        }
        self.expect(Tok::RParen, "`)`")?;
        Ok(Action {
            at,
            provider,
            topology,
            kind,
            args,
        })
    }

    fn set(&mut self) -> Result<SetExpr, TarlError> {
        self.enter()?;
        let r = self.set_inner();
        self.depth -= 1;
        r
    }

    fn set_inner(&mut self) -> Result<SetExpr, TarlError> {
        let word = match self.peek() {
            Tok::Ident(s) => s.clone(),
            _ => {
                return self
                    .err("a match set (`match`, `filter`, `join`, `min`, `max` or a selector)")
            }
        };
        match word.as_str() {
            "match" => {
                self.bump();
                self.expect(Tok::LParen, "`(` after `match`")?;
                let provider = self.name("a topology provider name")?;
                self.expect(Tok::Comma, "`,`")?;
                let topology = self.name("a topology name")?;
                self.expect(Tok::Comma, "`,` before the pattern")?;
                let mut pattern = vec![self.pat_edge()?];
                while *self.peek() == Tok::Comma {
                    self.bump();
                    pattern.push(self.pat_edge()?);
                }
                self.expect(Tok::RParen, "`)` closing `match`")?;
                Ok(SetExpr::Match {
                    provider,
                    topology,
                    pattern,
                })
            }
            "filter" | "min" | "max" => {
                self.bump();
                self.expect(Tok::LParen, &format!("`(` after `{word}`"))?;
                let m = self.set()?;
                self.expect(Tok::Comma, "`,`")?;
                let e = self.expr()?;
                self.expect(Tok::RParen, &format!("`)` closing `{word}`"))?;
                Ok(match word.as_str() {
                    "filter" => SetExpr::Filter(Box::new(m), e),
                    "min" => SetExpr::Min(Box::new(m), e),
                    _ => SetExpr::Max(Box::new(m), e),
                })
            }
            "join" => {
                self.bump();
                self.expect(Tok::LParen, "`(` after `join`")?;
                let a = self.set()?;
                self.expect(Tok::Comma, "`,`")?;
                let b = self.set()?;
                self.expect(Tok::RParen, "`)` closing `join`")?;
                Ok(SetExpr::Join(Box::new(a), Box::new(b)))
            }
            _ => Ok(SetExpr::Ref(self.var("a selector name")?)),
        }
    }

    fn pat_edge(&mut self) -> Result<PatEdge, TarlError> {
        let from = self.var("a pattern node")?;
        let undirected = match self.peek() {
            Tok::Minus => false,
            Tok::LArrow => true,
            _ => return self.err("`- e ->` (directed edge) or `<- e ->` (undirected edge)"),
        };
        self.bump();
        let edge = self.var("an edge variable")?;
        self.expect(Tok::Arrow, "`->`")?;
        let to = self.var("a pattern node")?;
        Ok(PatEdge {
            from,
            edge,
            to,
            undirected,
        })
    }

    fn expr(&mut self) -> Result<Expr, TarlError> {
        self.enter()?;
        let r = self.binary(1);
        self.depth -= 1;
        r
    }

    fn binop(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::OrOr => BinOp::Or,
            Tok::AndAnd => BinOp::And,
            Tok::EqEq => BinOp::Eq,
            Tok::NotEq => BinOp::Ne,
            // `x<-1` lexes as `x <- 1`: it can only mean `x < -1` here.
            Tok::Lt | Tok::LArrow => BinOp::Lt,
            Tok::Le => BinOp::Le,
            Tok::Gt => BinOp::Gt,
            Tok::Ge => BinOp::Ge,
            Tok::Plus => BinOp::Add,
            Tok::Minus => BinOp::Sub,
            Tok::Star => BinOp::Mul,
            Tok::Slash => BinOp::Div,
            _ => return None,
        })
    }

    fn binary(&mut self, min_prec: u8) -> Result<Expr, TarlError> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.binop() {
            let prec = op.precedence();
            if prec < min_prec {
                break;
            }
            let larrow = *self.peek() == Tok::LArrow;
            let op_span = self.bump().span;
            let rhs = if larrow {
                self.enter()?;
                let inner = self.binary(prec + 1);
                self.depth -= 1;
                Expr::Unary(UnOp::Neg, Box::new(inner?), op_span)
            } else {
                self.enter()?;
                let r = self.binary(prec + 1);
                self.depth -= 1;
                r?
            };
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, TarlError> {
        let op = match self.peek() {
            Tok::Minus => UnOp::Neg,
            Tok::Bang => UnOp::Not,
            _ => return self.primary(),
        };
        let span = self.bump().span;
        self.enter()?;
        let e = self.unary();
        self.depth -= 1;
        Ok(Expr::Unary(op, Box::new(e?), span))
    }

    fn primary(&mut self) -> Result<Expr, TarlError> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Num(v) => {
                self.bump();
                Ok(Expr::Num(v, span))
            }
            Tok::LParen => {
                self.bump();
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                Ok(e)
            }
            Tok::Ident(w) if w == "true" || w == "false" => {
                self.bump();
                Ok(Expr::Bool(w == "true", span))
            }
            Tok::Ident(w) if w == "count" => {
                self.bump();
                self.expect(Tok::LParen, "`(` after `count`")?;
                let m = self.set()?;
                self.expect(Tok::RParen, "`)` closing `count`")?;
                Ok(Expr::Count(Box::new(m), span))
            }
            Tok::Ident(w) if (w == "min" || w == "max") && *self.peek_at(1) == Tok::LParen => {
                let f = self.name("a function")?;
                self.call(f)
            }
            Tok::Ident(_) => {
                let id = self.var("a variable, constant or function")?;
                match self.peek() {
                    Tok::LParen => self.call(id),
                    Tok::Dot => {
                        self.bump();
                        let attr = self.name("an attribute name after `.`")?;
                        Ok(Expr::Attr(id, attr))
                    }
                    _ => Ok(Expr::Var(id)),
                }
            }
            _ => self.err("an expression"),
        }
    }

    fn call(&mut self, f: Ident) -> Result<Expr, TarlError> {
        self.expect(Tok::LParen, "`(`")?;
        let mut args = Vec::new();
        if *self.peek() != Tok::RParen {
            args.push(self.expr()?);
            while *self.peek() == Tok::Comma {
                self.bump();
                args.push(self.expr()?);
            }
        }
        self.expect(Tok::RParen, "`)` closing the call")?;
        Ok(Expr::Call(f, args))
    }
}
