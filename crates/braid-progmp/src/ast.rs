//! The syntax tree the parser builds and the type checker consumes.

use crate::diag::Span;
use crate::lexer::Kw;

#[derive(Clone, Debug)]
pub(crate) struct Ident {
    pub name: String,
    pub span: Span,
}

/// A whole scheduler: the optional `SCHEDULER name;` header and its body.
#[derive(Debug)]
pub(crate) struct Script {
    pub name: Option<Ident>,
    pub body: Vec<Stmt>,
}

#[derive(Debug)]
pub(crate) struct Block {
    pub stmts: Vec<Stmt>,
}

#[derive(Debug)]
pub(crate) struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug)]
pub(crate) enum StmtKind {
    Var {
        name: Ident,
        init: Expr,
    },
    If {
        branches: Vec<(Expr, Block)>,
        otherwise: Option<Block>,
    },
    Foreach {
        var: Ident,
        list: Expr,
        body: Block,
    },
    Drop(Expr),
    Print {
        format: String,
        format_span: Span,
        args: Vec<Expr>,
    },
    Set {
        reg: u8,
        value: Expr,
    },
    Return,
    Push {
        target: Expr,
        packet: Expr,
    },
    SetUser {
        target: Expr,
        value: Expr,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "OR",
            BinOp::And => "AND",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::Le => "<=",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub span: Span,
    /// Height of this node's subtree; the parser bounds it so that every
    /// later recursive pass has a bounded stack.
    pub depth: u32,
}

#[derive(Debug)]
pub(crate) enum ExprKind {
    Int(i64),
    Bool(bool),
    Null,
    Var(String),
    /// `Q`, `QU`, `RQ`, `SUBFLOWS`, `R1`..`R6`, `CURRENT_TIME_MS`, `RANDOM`.
    Entity(Kw),
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `recv.NAME` or `recv.NAME(args)`; `args` is `None` without parentheses.
    Member {
        recv: Box<Expr>,
        member: Kw,
        member_span: Span,
        args: Option<Vec<Arg>>,
    },
}

#[derive(Debug)]
pub(crate) enum Arg {
    Expr(Expr),
    Lambda {
        param: Ident,
        body: Expr,
        span: Span,
    },
}

impl Arg {
    pub(crate) fn span(&self) -> Span {
        match self {
            Arg::Expr(e) => e.span,
            Arg::Lambda { span, .. } => *span,
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        match self {
            Arg::Expr(e) => e.depth,
            Arg::Lambda { body, .. } => body.depth + 1,
        }
    }
}
