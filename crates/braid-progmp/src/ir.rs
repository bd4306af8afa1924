//! The typed intermediate form: what the type checker produces and the
//! compiler turns into closures. Every expression is split by its static
//! type, so evaluation never inspects a runtime type tag, and every
//! variable is resolved to a numbered slot of its type.

use crate::env::Queue;

/// Slot number in one of the run's typed slot arrays.
pub(crate) type Slot = u16;

#[derive(Clone, Copy, Debug)]
pub(crate) enum IntOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum CmpOp {
    Lt,
    Gt,
    Le,
    Ge,
    Eq,
    Ne,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum SbfInt {
    Id,
    Rtt,
    RttMs,
    RttVar,
    Cwnd,
    Ssthresh,
    InFlight,
    Queued,
    Lost,
    DelayIn,
    DelayOut,
    DelayOutSample,
    User,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum SbfBool {
    Backup,
    Throttled,
    Lossy,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum PktInt {
    Length,
    Seq,
    User,
}

/// `param => body`, the parameter living in `slot` (a subflow or packet
/// slot, by the list it applies to).
#[derive(Clone, Debug)]
pub(crate) struct Lambda<T> {
    pub slot: Slot,
    pub body: T,
}

#[derive(Clone, Debug)]
pub(crate) enum IntE {
    Const(i64),
    Slot(Slot),
    Reg(u8),
    NowMs,
    Random,
    Bin(IntOp, Box<IntE>, Box<IntE>),
    SbfProp(Box<SbfE>, SbfInt),
    PktProp(Box<PktE>, PktInt),
    SbfCount(Box<SbfListE>),
    PktCount(Box<PktListE>),
    SbfSum(Box<SbfListE>, Box<Lambda<IntE>>),
    PktSum(Box<PktListE>, Box<Lambda<IntE>>),
}

#[derive(Clone, Debug)]
pub(crate) enum BoolE {
    Const(bool),
    Slot(Slot),
    Not(Box<BoolE>),
    And(Box<BoolE>, Box<BoolE>),
    Or(Box<BoolE>, Box<BoolE>),
    Cmp(CmpOp, Box<IntE>, Box<IntE>),
    /// `==` (true) or `!=` (false) between booleans.
    BoolEq(bool, Box<BoolE>, Box<BoolE>),
    SbfEq(bool, Box<SbfE>, Box<SbfE>),
    PktEq(bool, Box<PktE>, Box<PktE>),
    /// `x == NULL` (true) or `x != NULL` (false).
    SbfIsNull(bool, Box<SbfE>),
    PktIsNull(bool, Box<PktE>),
    SbfFlag(Box<SbfE>, SbfBool),
    Psh(Box<PktE>),
    SentOn(Box<PktE>, Box<SbfE>),
    HasWindowFor(Box<SbfE>, Box<PktE>),
    SbfEmpty(Box<SbfListE>),
    PktEmpty(Box<PktListE>),
}

#[derive(Clone, Debug)]
pub(crate) enum SbfE {
    Slot(Slot),
    Get(Box<SbfListE>, Box<IntE>),
    MinMax {
        list: Box<SbfListE>,
        key: Box<Lambda<IntE>>,
        max: bool,
    },
}

#[derive(Clone, Debug)]
pub(crate) enum PktE {
    Slot(Slot),
    Top(Box<PktListE>),
    Get(Box<PktListE>, Box<IntE>),
    Pop(Box<PktListE>),
    MinMax {
        list: Box<PktListE>,
        key: Box<Lambda<IntE>>,
        max: bool,
    },
}

/// A subflow list is a value: a set of subflow positions.
#[derive(Clone, Debug)]
pub(crate) enum SbfListE {
    All,
    Slot(Slot),
    Filter(Box<SbfListE>, Box<Lambda<BoolE>>),
}

/// A packet list is a view of one queue through a chain of filters,
/// evaluated where it is used.
#[derive(Clone, Debug)]
pub(crate) struct PktListE {
    pub queue: Queue,
    pub filters: Vec<Lambda<BoolE>>,
}

#[derive(Debug)]
pub(crate) enum PrintArg {
    Int(IntE),
    Bool(BoolE),
}

#[derive(Debug)]
pub(crate) enum Stmt {
    Int(Slot, IntE),
    Bool(Slot, BoolE),
    Sbf(Slot, SbfE),
    Pkt(Slot, PktE),
    SbfList(Slot, SbfListE),
    If(Vec<(BoolE, Vec<Stmt>)>, Vec<Stmt>),
    ForeachSbf {
        slot: Slot,
        list: SbfListE,
        body: Vec<Stmt>,
    },
    ForeachPkt {
        slot: Slot,
        list: PktListE,
        buffer: Slot,
        body: Vec<Stmt>,
    },
    Drop(PktE),
    /// `pieces` alternate with the arguments: piece 0, arg 0, piece 1, ...
    Print {
        pieces: Vec<String>,
        args: Vec<PrintArg>,
    },
    SetReg(u8, IntE),
    Return,
    Push(SbfE, PktE),
    SetUser(SbfE, IntE),
}

/// How many slots of each kind a program needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Layout {
    pub ints: Slot,
    pub bools: Slot,
    pub sbfs: Slot,
    pub pkts: Slot,
    pub masks: Slot,
    pub loops: Slot,
}
