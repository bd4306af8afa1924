//! The TARL pretty-printer: a canonical text form of a rule.
//!
//! `parse(&pretty(&rule)) == rule` for every rule (property-tested): binary
//! operators get parentheses exactly where precedence or left associativity
//! needs them, numbers print in Rust's shortest round-trip form.

use std::fmt::Write;

use crate::ast::{Action, Decl, Expr, PatEdge, Rule, SetExpr, UnOp};

/// The canonical text of `rule`.
pub fn pretty(rule: &Rule) -> String {
    let mut out = String::new();
    for d in &rule.preamble {
        match d {
            Decl::Const(n, e) => {
                let _ = writeln!(out, "const {} = {};", n.name, expr(e));
            }
            Decl::Select(n, s) => {
                let _ = writeln!(out, "select {} = {};", n.name, set(s, 1));
            }
        }
    }
    out.push_str(&set(&rule.condition, 0));
    out.push_str("\nexecute every match:\n");
    for a in &rule.actions {
        let _ = writeln!(out, "  {}", action(a));
    }
    out
}

fn indent(level: usize) -> String {
    "  ".repeat(level)
}

/// A set expression; nested operators go on their own lines, indented.
pub fn set(s: &SetExpr, level: usize) -> String {
    let inner = indent(level + 1);
    match s {
        SetExpr::Match {
            provider,
            topology,
            pattern,
        } => {
            let edges: Vec<String> = pattern.iter().map(pat_edge).collect();
            format!(
                "match({}, {}, {})",
                provider.name,
                topology.name,
                edges.join(", ")
            )
        }
        SetExpr::Filter(m, e) => {
            format!(
                "filter(\n{inner}{},\n{inner}{})",
                set(m, level + 1),
                expr(e)
            )
        }
        SetExpr::Min(m, e) => format!("min(\n{inner}{},\n{inner}{})", set(m, level + 1), expr(e)),
        SetExpr::Max(m, e) => format!("max(\n{inner}{},\n{inner}{})", set(m, level + 1), expr(e)),
        SetExpr::Join(a, b) => {
            format!(
                "join(\n{inner}{},\n{inner}{})",
                set(a, level + 1),
                set(b, level + 1)
            )
        }
        SetExpr::Ref(n) => n.name.clone(),
    }
}

fn pat_edge(e: &PatEdge) -> String {
    if e.undirected {
        format!("{} <- {} -> {}", e.from.name, e.edge.name, e.to.name)
    } else {
        format!("{} - {} -> {}", e.from.name, e.edge.name, e.to.name)
    }
}

fn action(a: &Action) -> String {
    let args: Vec<&str> = a.args.iter().map(|i| i.name.as_str()).collect();
    format!(
        "at ({}, {}, {}) {}({})",
        a.at.name,
        a.provider.name,
        a.topology.name,
        a.kind.keyword(),
        args.join(", ")
    )
}

/// A value expression on one line.
pub fn expr(e: &Expr) -> String {
    match e {
        Expr::Num(v, _) => format!("{v:?}"),
        Expr::Bool(b, _) => b.to_string(),
        Expr::Var(i) => i.name.clone(),
        Expr::Attr(v, a) => format!("{}.{}", v.name, a.name),
        Expr::Unary(op, x, _) => {
            let sym = match op {
                UnOp::Neg => "-",
                UnOp::Not => "!",
            };
            match **x {
                Expr::Binary(..) => format!("{sym}({})", expr(x)),
                _ => format!("{sym}{}", expr(x)),
            }
        }
        Expr::Binary(op, l, r) => {
            let p = op.precedence();
            let ls = match &**l {
                Expr::Binary(lo, ..) if lo.precedence() < p => format!("({})", expr(l)),
                _ => expr(l),
            };
            let rs = match &**r {
                Expr::Binary(ro, ..) if ro.precedence() <= p => format!("({})", expr(r)),
                _ => expr(r),
            };
            format!("{ls} {} {rs}", op.symbol())
        }
        Expr::Call(f, args) => {
            let a: Vec<String> = args.iter().map(expr).collect();
            format!("{}({})", f.name, a.join(", "))
        }
        Expr::Count(m, _) => format!("count({})", set(m, 0).replace('\n', " ")),
    }
}
