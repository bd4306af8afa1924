//! The TARL type checker: resolves names against a provider's [`Schema`],
//! checks types and variable binding, and produces a [`CompiledRule`].
//!
//! Scoping follows the operator semantics of Frömmgen 2018, Table 7.1: a
//! `match` binds its pattern's variables; `filter`, `min` and `max` see the
//! variables of their input set; `join` binds the union and joins on shared
//! names; a `count(...)` inside a predicate sees the enclosing match's
//! variables, which stay fixed in its pattern (a correlated sub-match).
//! Selectors are expanded where they are used. Every error names the
//! offending thing, its position and what is allowed.

use std::collections::HashMap;

use crate::ast::{Action, ActionKind, BinOp, Decl, Expr, Ident, Rule, SetExpr, UnOp};
use crate::error::TarlError;
use crate::ir::{Builtin, CAction, CEdge, CExpr, CPattern, CSet, CompiledRule, Slot, SlotKind};
use crate::parser::parse;
use crate::schema::{Schema, Type};
use crate::value::Value;

/// Parses and checks `src` against `schema`.
///
/// # Errors
/// A syntax or type error with `file:line:col`.
///
/// # Example
/// ```
/// use braid_tarl::{compile, sim::geometric_schema};
/// let rule = compile(
///     "gabriel",
///     "filter(match(TP, Phys, self <- e -> v), e.weight > 0.5)\n\
///      execute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)",
///     &geometric_schema(false),
/// ).unwrap();
/// assert_eq!(rule.actions.len(), 1);
/// ```
pub fn compile(name: &str, src: &str, schema: &Schema) -> Result<CompiledRule, TarlError> {
    let ast = parse(src).map_err(|e| e.in_file(name))?;
    check(name, &ast, schema).map_err(|e| e.in_file(name))
}

/// Checks a parsed rule against `schema`.
///
/// # Errors
/// A [`TarlError`] of kind `Type`.
pub fn check(name: &str, rule: &Rule, schema: &Schema) -> Result<CompiledRule, TarlError> {
    let mut c = Checker {
        schema,
        slots: vec![Slot {
            name: "self".into(),
            kind: SlotKind::Node,
        }],
        consts: HashMap::new(),
        selectors: HashMap::new(),
        expanding: 0,
        size: 0,
    };
    for d in &rule.preamble {
        match d {
            Decl::Const(n, e) => {
                c.fresh_name(n)?;
                let (ce, _) = c.expr(e, &Bound::Const)?;
                let v = fold(&ce).ok_or_else(|| {
                    TarlError::typ(
                        e.span(),
                        format!(
                            "constant `{}` must be a number or bool computed from literals",
                            n.name
                        ),
                    )
                })?;
                c.consts.insert(n.name.clone(), v);
            }
            Decl::Select(n, s) => {
                c.fresh_name(n)?;
                // Checked once here so errors point at the declaration.
                c.set(s, &Bound::Vars(vec![0]))?;
                c.selectors.insert(n.name.clone(), s.clone());
            }
        }
    }
    let (condition, bound) = c.set(&rule.condition, &Bound::Vars(vec![0]))?;
    let actions = rule
        .actions
        .iter()
        .map(|a| c.action(a, &bound))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CompiledRule {
        name: name.to_string(),
        slots: c.slots,
        condition,
        actions,
    })
}

/// The variables visible at a point of the rule.
enum Bound {
    /// Inside a constant: no variables at all.
    Const,
    /// These slots are bound.
    Vars(Vec<usize>),
}

impl Bound {
    fn has(&self, s: usize) -> bool {
        matches!(self, Bound::Vars(v) if v.contains(&s))
    }
    fn vars(&self) -> Vec<usize> {
        match self {
            Bound::Const => Vec::new(),
            Bound::Vars(v) => v.clone(),
        }
    }
}

struct Checker<'a> {
    schema: &'a Schema,
    slots: Vec<Slot>,
    consts: HashMap<String, Value>,
    selectors: HashMap<String, SetExpr>,
    expanding: u32,
    /// Set operators produced so far: selectors expand inline, and nested
    /// selectors could otherwise blow a short rule up exponentially.
    size: u32,
}

/// Largest number of set operators a rule may expand to.
const MAX_EXPANDED_SETS: u32 = 10_000;

fn known<'b>(names: impl Iterator<Item = &'b str>) -> String {
    let v: Vec<&str> = names.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

impl Checker<'_> {
    fn fresh_name(&self, n: &Ident) -> Result<(), TarlError> {
        if n.name == "self"
            || self.consts.contains_key(&n.name)
            || self.selectors.contains_key(&n.name)
        {
            return Err(TarlError::typ(
                n.span,
                format!("`{}` is already declared", n.name),
            ));
        }
        Ok(())
    }

    fn slot(&mut self, id: &Ident, kind: SlotKind) -> Result<usize, TarlError> {
        if self.consts.contains_key(&id.name) || self.selectors.contains_key(&id.name) {
            return Err(TarlError::typ(
                id.span,
                format!(
                    "`{}` is a constant or selector and cannot be a pattern variable",
                    id.name
                ),
            ));
        }
        if let Some(i) = self.slots.iter().position(|s| s.name == id.name) {
            let have = self.slots[i].kind;
            if have != kind {
                let what = |k: SlotKind| match k {
                    SlotKind::Node => "a node variable".to_string(),
                    SlotKind::Edge(t) => format!(
                        "an edge variable of topology `{}`",
                        self.schema.topologies[t.0].name
                    ),
                };
                return Err(TarlError::typ(
                    id.span,
                    format!(
                        "`{}` is used as {} here but as {} elsewhere",
                        id.name,
                        what(kind),
                        what(have)
                    ),
                ));
            }
            return Ok(i);
        }
        self.slots.push(Slot {
            name: id.name.clone(),
            kind,
        });
        Ok(self.slots.len() - 1)
    }

    fn topology(&self, provider: &Ident, topo: &Ident) -> Result<crate::schema::TopoId, TarlError> {
        if provider.name != self.schema.provider {
            return Err(TarlError::typ(
                provider.span,
                format!(
                    "unknown topology provider `{}` (this rule runs on provider `{}`)",
                    provider.name, self.schema.provider
                ),
            ));
        }
        self.schema.topology(&topo.name).ok_or_else(|| {
            TarlError::typ(
                topo.span,
                format!(
                    "unknown topology `{}` (provider `{}` has: {})",
                    topo.name,
                    self.schema.provider,
                    known(self.schema.topologies.iter().map(|t| t.name.as_str()))
                ),
            )
        })
    }

    fn set(&mut self, s: &SetExpr, outer: &Bound) -> Result<(CSet, Bound), TarlError> {
        self.size += 1;
        if self.size > MAX_EXPANDED_SETS {
            let span = match s {
                SetExpr::Match { provider, .. } => provider.span,
                SetExpr::Ref(id) => id.span,
                SetExpr::Filter(_, e) | SetExpr::Min(_, e) | SetExpr::Max(_, e) => e.span(),
                SetExpr::Join(..) => crate::error::Span::default(),
            };
            return Err(TarlError::typ(span, format!("rule expands to more than {MAX_EXPANDED_SETS} set operators (selectors are expanded where used)")));
        }
        match s {
            SetExpr::Match {
                provider,
                topology,
                pattern,
            } => {
                let topo = self.topology(provider, topology)?;
                let mut bound = outer.vars();
                let mut nodes = Vec::new();
                let mut edges: Vec<CEdge> = Vec::new();
                for pe in pattern {
                    let mut ends = [0usize; 2];
                    for (k, n) in [&pe.from, &pe.to].into_iter().enumerate() {
                        let sl = self.slot(n, SlotKind::Node)?;
                        if !nodes.contains(&sl) {
                            nodes.push(sl);
                        }
                        ends[k] = sl;
                    }
                    if ends[0] == ends[1] {
                        return Err(TarlError::typ(
                            pe.from.span,
                            format!(
                                "self-loop `{}` to itself: pattern edges join two distinct nodes",
                                pe.from.name
                            ),
                        ));
                    }
                    let es = self.slot(&pe.edge, SlotKind::Edge(topo))?;
                    if edges.iter().any(|e| e.slot == es) || outer.has(es) {
                        return Err(TarlError::typ(
                            pe.edge.span,
                            format!("edge variable `{}` is bound twice; give each pattern edge its own name", pe.edge.name),
                        ));
                    }
                    edges.push(CEdge {
                        from: ends[0],
                        to: ends[1],
                        slot: es,
                        undirected: pe.undirected,
                    });
                }
                for &n in &nodes {
                    if !bound.contains(&n) {
                        bound.push(n);
                    }
                }
                bound.extend(edges.iter().map(|e| e.slot));
                Ok((
                    CSet::Match(CPattern {
                        topo,
                        nodes,
                        edges,
                        filters: Vec::new(),
                    }),
                    Bound::Vars(bound),
                ))
            }
            SetExpr::Filter(m, e) => {
                let (cm, b) = self.set(m, outer)?;
                let ce = self.bool_expr(e, &b, "the `filter` predicate")?;
                Ok(match cm {
                    // Push the predicate into the search so candidates are pruned early.
                    CSet::Match(mut p) => {
                        p.filters.extend(ce.conjuncts());
                        (CSet::Match(p), b)
                    }
                    CSet::NestedJoin(a, mut p) => {
                        p.filters.extend(ce.conjuncts());
                        (CSet::NestedJoin(a, p), b)
                    }
                    other => (CSet::Filter(Box::new(other), ce), b),
                })
            }
            SetExpr::Min(m, e) | SetExpr::Max(m, e) => {
                let (cm, b) = self.set(m, outer)?;
                let (ce, t) = self.expr(e, &b)?;
                if t != Type::Num {
                    return Err(TarlError::typ(
                        e.span(),
                        format!("the key of `min`/`max` must be a number, found {t}"),
                    ));
                }
                let out = if matches!(s, SetExpr::Min(..)) {
                    CSet::Min(Box::new(cm), ce)
                } else {
                    CSet::Max(Box::new(cm), ce)
                };
                Ok((out, b))
            }
            SetExpr::Join(a, bb) => {
                let (ca, ba) = self.set(a, outer)?;
                let (cb, bbv) = self.set(bb, outer)?;
                let (va, vb) = (ba.vars(), bbv.vars());
                let shared: Vec<usize> = va
                    .iter()
                    .copied()
                    .filter(|s| vb.contains(s) && !outer.has(*s))
                    .collect();
                let mut all = va;
                for s in vb {
                    if !all.contains(&s) {
                        all.push(s);
                    }
                }
                let joined = match cb {
                    // The right side is a pattern sharing no edge variable: search it per left match.
                    CSet::Match(p) if !p.edges.iter().any(|e| shared.contains(&e.slot)) => {
                        CSet::NestedJoin(Box::new(ca), p)
                    }
                    cb => CSet::Join(Box::new(ca), Box::new(cb), shared),
                };
                Ok((joined, Bound::Vars(all)))
            }
            SetExpr::Ref(id) => {
                let Some(def) = self.selectors.get(&id.name).cloned() else {
                    return Err(TarlError::typ(
                        id.span,
                        format!(
                            "unknown selector `{}` (declare it before use with `select {} = ...;`)",
                            id.name, id.name
                        ),
                    ));
                };
                self.expanding += 1;
                if self.expanding > 64 {
                    return Err(TarlError::typ(
                        id.span,
                        "selectors nested more than 64 deep",
                    ));
                }
                let r = self.set(&def, outer);
                self.expanding -= 1;
                r
            }
        }
    }

    fn bool_expr(&mut self, e: &Expr, b: &Bound, what: &str) -> Result<CExpr, TarlError> {
        let (ce, t) = self.expr(e, b)?;
        if t != Type::Bool {
            return Err(TarlError::typ(
                e.span(),
                format!("{what} must be a bool, found {t}"),
            ));
        }
        Ok(ce)
    }

    fn var_slot(&self, id: &Ident, b: &Bound) -> Result<usize, TarlError> {
        if let Bound::Const = b {
            return Err(TarlError::typ(
                id.span,
                format!("`{}`: a constant cannot refer to variables", id.name),
            ));
        }
        match self.slots.iter().position(|s| s.name == id.name) {
            Some(i) if b.has(i) => Ok(i),
            Some(_) => Err(TarlError::typ(
                id.span,
                format!("variable `{}` is not bound here (only variables of the enclosing match set are)", id.name),
            )),
            None => Err(TarlError::typ(id.span, format!("unknown variable or constant `{}`", id.name))),
        }
    }

    fn expr(&mut self, e: &Expr, b: &Bound) -> Result<(CExpr, Type), TarlError> {
        Ok(match e {
            Expr::Num(v, _) => (CExpr::Num(*v), Type::Num),
            Expr::Bool(v, _) => (CExpr::Bool(*v), Type::Bool),
            Expr::Var(id) => {
                if let Some(v) = self.consts.get(&id.name) {
                    match *v {
                        Value::Num(x) => (CExpr::Num(x), Type::Num),
                        Value::Bool(x) => (CExpr::Bool(x), Type::Bool),
                        _ => return Err(TarlError::typ(id.span, "constants are numbers or bools")),
                    }
                } else {
                    let s = self.var_slot(id, b)?;
                    if let SlotKind::Edge(_) = self.slots[s].kind {
                        return Err(TarlError::typ(id.span, format!("edge variable `{}` has no value of its own; use one of its attributes, e.g. `{}.weight`", id.name, id.name)));
                    }
                    (CExpr::Node(s), Type::Node)
                }
            }
            Expr::Attr(v, a) => {
                let s = self.var_slot(v, b)?;
                match self.slots[s].kind {
                    SlotKind::Node => {
                        let (id, t) = self.schema.node_attr(&a.name).ok_or_else(|| {
                            TarlError::typ(
                                a.span,
                                format!(
                                    "unknown node attribute `{}` (provider `{}` has: {})",
                                    a.name,
                                    self.schema.provider,
                                    known(self.schema.node_attrs.iter().map(|x| x.0.as_str()))
                                ),
                            )
                        })?;
                        (CExpr::NodeAttr(s, id), t)
                    }
                    SlotKind::Edge(topo) => {
                        let (id, t) = self.schema.edge_attr(&a.name).ok_or_else(|| {
                            TarlError::typ(
                                a.span,
                                format!(
                                    "unknown edge attribute `{}` (provider `{}` has: {})",
                                    a.name,
                                    self.schema.provider,
                                    known(self.schema.edge_attrs.iter().map(|x| x.0.as_str()))
                                ),
                            )
                        })?;
                        (CExpr::EdgeAttr(s, topo, id), t)
                    }
                }
            }
            Expr::Unary(op, x, span) => {
                let (cx, t) = self.expr(x, b)?;
                match (op, t) {
                    (UnOp::Neg, Type::Num) => (CExpr::Neg(Box::new(cx)), Type::Num),
                    (UnOp::Not, Type::Bool) => (CExpr::Not(Box::new(cx)), Type::Bool),
                    (UnOp::Neg, t) => {
                        return Err(TarlError::typ(
                            *span,
                            format!("`-` needs a number, found {t}"),
                        ))
                    }
                    (UnOp::Not, t) => {
                        return Err(TarlError::typ(
                            *span,
                            format!("`!` needs a bool, found {t}"),
                        ))
                    }
                }
            }
            Expr::Binary(op, l, r) => {
                let (cl, tl) = self.expr(l, b)?;
                let (cr, tr) = self.expr(r, b)?;
                let want = |ok: bool, need: &str| -> Result<(), TarlError> {
                    if ok {
                        Ok(())
                    } else {
                        Err(TarlError::typ(
                            l.span(),
                            format!("`{}` needs {need}, found {tl} and {tr}", op.symbol()),
                        ))
                    }
                };
                let t = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                        want(tl == Type::Num && tr == Type::Num, "two numbers")?;
                        Type::Num
                    }
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        want(tl == Type::Num && tr == Type::Num, "two numbers")?;
                        Type::Bool
                    }
                    BinOp::Eq | BinOp::Ne => {
                        want(tl == tr, "two values of the same type")?;
                        Type::Bool
                    }
                    BinOp::And | BinOp::Or => {
                        want(tl == Type::Bool && tr == Type::Bool, "two bools")?;
                        Type::Bool
                    }
                };
                (CExpr::Bin(*op, Box::new(cl), Box::new(cr)), t)
            }
            Expr::Call(f, args) => {
                let (bi, params, ret): (Builtin, &[Type], Type) = match f.name.as_str() {
                    "dist" => (Builtin::Dist, &[Type::Pos, Type::Pos], Type::Num),
                    "angle" => (Builtin::Angle, &[Type::Pos, Type::Pos], Type::Num),
                    "floor" => (Builtin::Floor, &[Type::Num], Type::Num),
                    "abs" => (Builtin::Abs, &[Type::Num], Type::Num),
                    "sqrt" => (Builtin::Sqrt, &[Type::Num], Type::Num),
                    "min" => (Builtin::Min, &[Type::Num, Type::Num], Type::Num),
                    "max" => (Builtin::Max, &[Type::Num, Type::Num], Type::Num),
                    "pi" => (Builtin::Pi, &[], Type::Num),
                    other => {
                        return Err(TarlError::typ(
                            f.span,
                            format!("unknown function `{other}` (built-ins: dist, angle, floor, abs, sqrt, min, max, pi)"),
                        ))
                    }
                };
                if args.len() != params.len() {
                    return Err(TarlError::typ(
                        f.span,
                        format!(
                            "`{}` takes {} argument(s), found {}",
                            f.name,
                            params.len(),
                            args.len()
                        ),
                    ));
                }
                let mut cargs = Vec::new();
                for (a, want) in args.iter().zip(params) {
                    let (ca, t) = self.expr(a, b)?;
                    if t != *want {
                        return Err(TarlError::typ(
                            a.span(),
                            format!("argument of `{}` must be a {want}, found {t}", f.name),
                        ));
                    }
                    cargs.push(ca);
                }
                (CExpr::Call(bi, cargs), ret)
            }
            Expr::Count(m, span) => {
                if let Bound::Const = b {
                    return Err(TarlError::typ(*span, "a constant cannot count matches"));
                }
                let (cm, _) = self.set(m, b)?;
                (CExpr::Count(Box::new(cm)), Type::Num)
            }
        })
    }

    fn action(&mut self, a: &Action, bound: &Bound) -> Result<CAction, TarlError> {
        let topo = self.topology(&a.provider, &a.topology)?;
        if a.args.len() != a.kind.arity() {
            return Err(TarlError::typ(
                a.at.span,
                format!(
                    "`{}` takes {} node argument(s), found {}",
                    a.kind.keyword(),
                    a.kind.arity(),
                    a.args.len()
                ),
            ));
        }
        let node = |c: &Self, id: &Ident| -> Result<usize, TarlError> {
            let s = c.var_slot(id, bound)?;
            if c.slots[s].kind != SlotKind::Node {
                return Err(TarlError::typ(
                    id.span,
                    format!(
                        "`{}` is an edge variable; actions take node variables",
                        id.name
                    ),
                ));
            }
            Ok(s)
        };
        let at = node(self, &a.at)?;
        let args = a
            .args
            .iter()
            .map(|x| node(self, x))
            .collect::<Result<Vec<_>, _>>()?;
        if a.kind == ActionKind::Move && args[0] == args[1] {
            return Err(TarlError::typ(
                a.args[1].span,
                "`move_neighbor` needs two different nodes",
            ));
        }
        Ok(CAction {
            at,
            topo,
            kind: a.kind,
            args,
        })
    }
}

/// Evaluates a constant expression (literals, operators, pure built-ins).
fn fold(e: &CExpr) -> Option<Value> {
    Some(match e {
        CExpr::Num(x) => Value::Num(*x),
        CExpr::Bool(x) => Value::Bool(*x),
        CExpr::Neg(x) => match fold(x)? {
            Value::Num(v) => Value::Num(-v),
            _ => return None,
        },
        CExpr::Not(x) => match fold(x)? {
            Value::Bool(v) => Value::Bool(!v),
            _ => return None,
        },
        CExpr::Bin(op, a, b) => crate::engine::binary(*op, fold(a)?, fold(b)?)?,
        CExpr::Call(f, args) => {
            let vs = args.iter().map(fold).collect::<Option<Vec<_>>>()?;
            crate::engine::call(*f, &vs)?
        }
        _ => return None,
    })
}
