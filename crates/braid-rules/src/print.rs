//! The pretty-printer: rule sets back to text that parses to the same tree
//! (property-tested in `tests/properties.rs`). It adds only the parentheses
//! the tree needs: binary operators associate to the left, so a right
//! operand of equal precedence is parenthesised.

use std::fmt::{self, Display, Write};

use crate::ast::*;

const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const CMP: u8 = 4;
const ADD: u8 = 5;
const MUL: u8 = 6;
const UNARY: u8 = 7;
const ATOM: u8 = 8;

impl Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{}` on f64 never uses an exponent and gives the shortest text
        // that parses back to the same value.
        let mut s = format!("{}", self.mantissa);
        if !self.integer && !s.contains('.') && self.mantissa.is_finite() {
            s.push_str(".0");
        }
        write!(f, "{s}{}", self.unit.suffix())
    }
}

fn cond_prec(c: &Cond) -> u8 {
    match c {
        Cond::Or(..) => OR,
        Cond::And(..) => AND,
        Cond::Not(..) => NOT,
        Cond::Cmp { .. } => CMP,
        Cond::Bool(..) => ATOM,
    }
}

fn num_prec(n: &Num) -> u8 {
    match n {
        Num::Bin { op: ArithOp::Add | ArithOp::Sub, .. } => ADD,
        Num::Bin { .. } => MUL,
        Num::Neg(..) => UNARY,
        Num::Lit(l, _) if l.mantissa.is_sign_negative() => UNARY,
        _ => ATOM,
    }
}

fn write_cond(out: &mut String, c: &Cond, min: u8) {
    let p = cond_prec(c);
    let paren = p < min;
    if paren {
        out.push('(');
    }
    match c {
        Cond::Bool(b, _) => out.push_str(if *b { "true" } else { "false" }),
        Cond::Cmp { op, lhs, rhs, .. } => {
            write_num(out, lhs, ADD);
            let _ = write!(out, " {} ", op.symbol());
            write_num(out, rhs, ADD);
        }
        Cond::Not(inner, _) => {
            out.push_str("not ");
            write_cond(out, inner, NOT);
        }
        Cond::And(a, b, _) | Cond::Or(a, b, _) => {
            write_cond(out, a, p);
            out.push_str(if p == AND { " and " } else { " or " });
            write_cond(out, b, p + 1);
        }
    }
    if paren {
        out.push(')');
    }
}

fn write_num(out: &mut String, n: &Num, min: u8) {
    let p = num_prec(n);
    let paren = p < min;
    if paren {
        out.push('(');
    }
    match n {
        Num::Lit(l, _) => {
            let _ = write!(out, "{l}");
        }
        Num::Metric(m, _) => out.push_str(m),
        Num::Agg { func, source, window, .. } => {
            let _ = write!(out, "{}({source}, {window})", func.name());
        }
        Num::Neg(inner, _) => {
            out.push('-');
            // A literal right after `-` would be read as a negative literal.
            let need = if matches!(**inner, Num::Lit(..)) { ATOM + 1 } else { UNARY };
            write_num(out, inner, need);
        }
        Num::Bin { op, lhs, rhs, .. } => {
            write_num(out, lhs, p);
            let _ = write!(out, " {} ", op.symbol());
            write_num(out, rhs, p + 1);
        }
    }
    if paren {
        out.push(')');
    }
}

fn write_value(out: &mut String, v: &ActionValue) {
    match v {
        ActionValue::Symbol(s, _) => out.push_str(s),
        // A lone name would read back as a choice.
        ActionValue::Num(n @ Num::Metric(..)) => write_num(out, n, ATOM + 1),
        ActionValue::Num(n) => write_num(out, n, ADD),
    }
}

impl Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_cond(&mut s, self, OR);
        f.write_str(&s)
    }
}

impl Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_num(&mut s, self, ADD);
        f.write_str(&s)
    }
}

impl Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut v = String::new();
        write_value(&mut v, &self.value);
        match self.kind {
            ActionKind::Set => write!(f, "set {} = {v}", self.target),
            ActionKind::Register => write!(f, "set register {} = {v}", self.target),
            ActionKind::Transition => write!(f, "execute parameter transition {} at self set value ({v})", self.target),
        }
    }
}

impl Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.condition)?;
        for (i, a) in self.actions.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str(";")
    }
}

impl Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::FirstMatch => "on first match",
            Mode::EveryMatch => "on every match",
        })
    }
}

impl Display for RuleSet {
    /// One block header per line, each rule indented on its own line, a
    /// blank line between blocks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.blocks.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            writeln!(f, "{}", b.mode)?;
            for r in &b.rules {
                writeln!(f, "  {r}")?;
            }
        }
        Ok(())
    }
}
