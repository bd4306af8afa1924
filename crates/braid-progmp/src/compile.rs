//! Compiles the typed form into a tree of closures, once per scheduler.
//!
//! Each closure evaluates one node against a [`Ctx`]; evaluation only
//! reads and writes the run's preallocated state, so a run allocates
//! nothing (thesis §3.3.2 and §3.4.3: the runtime "can allocate the
//! required memory at the initialization of the scheduler and reuse the
//! allocated memory per scheduler execution"). Closures are `Send + Sync`:
//! one compiled program serves every connection that uses it.
//!
//! NULL never fails a run (§3.3.2, "Null handling"): an integer property of
//! a NULL subflow or packet is 0, a boolean one is false, `PUSH` or
//! `SET_USER` on a NULL subflow does nothing and does not evaluate its
//! argument, and `PUSH` or `DROP` of a NULL packet does nothing. Integer
//! arithmetic wraps and `x / 0 == x % 0 == 0`, so no input can make a run
//! panic.

use std::fmt::Write as _;

use braid_core::RngCore;

use crate::env::{Action, PacketInfo, Queue, SubflowInfo};
use crate::ir::*;
use crate::state::{Ctx, PktLoc};

pub(crate) type IntFn = Box<dyn Fn(&mut Ctx<'_>) -> i64 + Send + Sync>;
pub(crate) type BoolFn = Box<dyn Fn(&mut Ctx<'_>) -> bool + Send + Sync>;
pub(crate) type SbfFn = Box<dyn Fn(&mut Ctx<'_>) -> Option<u8> + Send + Sync>;
pub(crate) type PktFn = Box<dyn Fn(&mut Ctx<'_>) -> Option<PktLoc> + Send + Sync>;
pub(crate) type MaskFn = Box<dyn Fn(&mut Ctx<'_>) -> u64 + Send + Sync>;
pub(crate) type StmtFn = Box<dyn Fn(&mut Ctx<'_>) -> Flow + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Next,
    Return,
}

pub(crate) fn block(stmts: Vec<Stmt>) -> Vec<StmtFn> {
    stmts.into_iter().map(stmt).collect()
}

pub(crate) fn run_block(b: &[StmtFn], cx: &mut Ctx<'_>) -> Flow {
    for s in b {
        if s(cx) == Flow::Return {
            return Flow::Return;
        }
    }
    Flow::Next
}

fn stmt(s: Stmt) -> StmtFn {
    match s {
        Stmt::Int(slot, e) => {
            let f = int(e);
            Box::new(move |cx| {
                let v = f(cx);
                cx.st.ints[slot as usize] = v;
                Flow::Next
            })
        }
        Stmt::Bool(slot, e) => {
            let f = boolean(e);
            Box::new(move |cx| {
                let v = f(cx);
                cx.st.bools[slot as usize] = v;
                Flow::Next
            })
        }
        Stmt::Sbf(slot, e) => {
            let f = sbf(e);
            Box::new(move |cx| {
                let v = f(cx);
                cx.st.sbf_slots[slot as usize] = v;
                Flow::Next
            })
        }
        Stmt::Pkt(slot, e) => {
            let f = pkt(e);
            Box::new(move |cx| {
                let v = f(cx);
                cx.st.pkt_slots[slot as usize] = v;
                Flow::Next
            })
        }
        Stmt::SbfList(slot, e) => {
            let f = mask(e);
            Box::new(move |cx| {
                let v = f(cx);
                cx.st.masks[slot as usize] = v;
                Flow::Next
            })
        }
        Stmt::If(arms, otherwise) => {
            let arms: Vec<(BoolFn, Vec<StmtFn>)> = arms
                .into_iter()
                .map(|(c, b)| (boolean(c), block(b)))
                .collect();
            let otherwise = block(otherwise);
            Box::new(move |cx| {
                for (cond, body) in &arms {
                    if cond(cx) {
                        return run_block(body, cx);
                    }
                }
                run_block(&otherwise, cx)
            })
        }
        Stmt::ForeachSbf { slot, list, body } => {
            let list = mask(list);
            let body = block(body);
            Box::new(move |cx| {
                let mut m = list(cx);
                while m != 0 {
                    let i = m.trailing_zeros() as u8;
                    m &= m - 1;
                    cx.st.sbf_slots[slot as usize] = Some(i);
                    if run_block(&body, cx) == Flow::Return {
                        return Flow::Return;
                    }
                }
                Flow::Next
            })
        }
        Stmt::ForeachPkt {
            slot,
            list,
            buffer,
            body,
        } => {
            let view = View::new(list);
            let body = block(body);
            Box::new(move |cx| {
                // The loop runs over the list as it was when the loop began.
                let mut items = std::mem::take(&mut cx.st.loop_bufs[buffer as usize]);
                items.clear();
                view.scan(cx, |_, loc| {
                    items.push(loc);
                    false
                });
                let mut flow = Flow::Next;
                for &loc in &items {
                    cx.st.pkt_slots[slot as usize] = Some(loc);
                    if run_block(&body, cx) == Flow::Return {
                        flow = Flow::Return;
                        break;
                    }
                }
                cx.st.loop_bufs[buffer as usize] = items;
                flow
            })
        }
        Stmt::Drop(p) => {
            let p = pkt(p);
            Box::new(move |cx| {
                if let Some(loc) = p(cx) {
                    cx.remove(loc, true);
                }
                Flow::Next
            })
        }
        Stmt::Print { pieces, args } => {
            let args: Vec<IntFn> = args
                .into_iter()
                .map(|a| match a {
                    PrintArg::Int(e) => int(e),
                    PrintArg::Bool(e) => {
                        let b = boolean(e);
                        Box::new(move |cx: &mut Ctx<'_>| i64::from(b(cx))) as IntFn
                    }
                })
                .collect();
            // Each PRINT is one line: the lexer keeps line breaks out of
            // strings, and numbers have none.
            Box::new(move |cx| {
                cx.st.print_buf.push_str(&pieces[0]);
                for (a, piece) in args.iter().zip(&pieces[1..]) {
                    let v = a(cx);
                    let _ = write!(cx.st.print_buf, "{v}");
                    cx.st.print_buf.push_str(piece);
                }
                let end = cx.st.print_buf.len();
                cx.st.print_ends.push(end);
                Flow::Next
            })
        }
        Stmt::SetReg(r, v) => {
            let v = int(v);
            Box::new(move |cx| {
                let value = v(cx);
                cx.st.regs[r as usize] = value;
                cx.st.actions.push(Action::SetRegister {
                    register: crate::env::Register::from_index(r),
                    value,
                });
                Flow::Next
            })
        }
        Stmt::Return => Box::new(|_| Flow::Return),
        Stmt::Push(target, packet) => {
            let target = sbf(target);
            let packet = pkt(packet);
            Box::new(move |cx| {
                // PUSH on NULL does not evaluate its argument (§3.3.2), so
                // `NULL.PUSH(Q.POP())` leaves Q untouched.
                let Some(s) = target(cx) else {
                    return Flow::Next;
                };
                let Some(loc) = packet(cx) else {
                    return Flow::Next;
                };
                let Some(info) = cx.st.sbfs.get_mut(s as usize) else {
                    return Flow::Next;
                };
                info.queued = info.queued.saturating_add(1);
                let subflow_id = info.id;
                let packet = cx.packet_ref(loc);
                cx.st.actions.push(Action::Push {
                    subflow: s as usize,
                    subflow_id,
                    packet,
                });
                Flow::Next
            })
        }
        Stmt::SetUser(target, value) => {
            let target = sbf(target);
            let value = int(value);
            Box::new(move |cx| {
                let Some(s) = target(cx) else {
                    return Flow::Next;
                };
                let v = value(cx);
                let Some(info) = cx.st.sbfs.get_mut(s as usize) else {
                    return Flow::Next;
                };
                info.user = v;
                let subflow_id = info.id;
                cx.st.actions.push(Action::SetSubflowUser {
                    subflow: s as usize,
                    subflow_id,
                    value: v,
                });
                Flow::Next
            })
        }
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn sbf_int_getter(p: SbfInt) -> fn(&SubflowInfo) -> i64 {
    match p {
        SbfInt::Id => |s| i64::from(s.id),
        SbfInt::Rtt => |s| to_i64(s.rtt_us),
        SbfInt::RttMs => |s| to_i64(s.rtt_us / 1000),
        SbfInt::RttVar => |s| to_i64(s.rtt_var_us),
        SbfInt::Cwnd => |s| i64::from(s.cwnd),
        SbfInt::Ssthresh => |s| i64::from(s.ssthresh),
        SbfInt::InFlight => |s| i64::from(s.in_flight),
        SbfInt::Queued => |s| i64::from(s.queued),
        SbfInt::Lost => |s| i64::from(s.lost),
        SbfInt::DelayIn => |s| s.delay_in_us,
        SbfInt::DelayOut => |s| s.delay_out_us,
        SbfInt::DelayOutSample => |s| s.delay_out_sample_us,
        SbfInt::User => |s| s.user,
    }
}

fn sbf_bool_getter(p: SbfBool) -> fn(&SubflowInfo) -> bool {
    match p {
        SbfBool::Backup => |s| s.is_backup,
        SbfBool::Throttled => |s| s.throttled,
        SbfBool::Lossy => |s| s.lossy,
    }
}

fn pkt_int_getter(p: PktInt) -> fn(&PacketInfo) -> i64 {
    match p {
        PktInt::Length => |p| i64::from(p.length),
        PktInt::Seq => |p| to_i64(p.seq),
        PktInt::User => |p| p.user,
    }
}

fn int(e: IntE) -> IntFn {
    match e {
        IntE::Const(v) => Box::new(move |_| v),
        IntE::Slot(s) => Box::new(move |cx| cx.st.ints[s as usize]),
        IntE::Reg(r) => Box::new(move |cx| cx.st.regs[r as usize]),
        IntE::NowMs => Box::new(|cx| cx.st.now_ms),
        // Uniform in 0..2^31, fresh at each evaluation.
        IntE::Random => Box::new(|cx| i64::from(cx.st.rng.next_u32() >> 1)),
        IntE::Bin(op, a, b) => {
            let (a, b) = (IntLeaf::new(*a), IntLeaf::new(*b));
            match op {
                IntOp::Add => Box::new(move |cx| a.eval(cx).wrapping_add(b.eval(cx))),
                IntOp::Sub => Box::new(move |cx| a.eval(cx).wrapping_sub(b.eval(cx))),
                IntOp::Mul => Box::new(move |cx| a.eval(cx).wrapping_mul(b.eval(cx))),
                IntOp::Div => Box::new(move |cx| {
                    let (x, y) = (a.eval(cx), b.eval(cx));
                    if y == 0 {
                        0
                    } else {
                        x.wrapping_div(y)
                    }
                }),
                IntOp::Rem => Box::new(move |cx| {
                    let (x, y) = (a.eval(cx), b.eval(cx));
                    if y == 0 {
                        0
                    } else {
                        x.wrapping_rem(y)
                    }
                }),
            }
        }
        IntE::SbfProp(s, p) => {
            let get = sbf_int_getter(p);
            if let SbfE::Slot(k) = *s {
                // The common case (a lambda parameter or variable): read
                // the slot directly.
                Box::new(move |cx| match cx.st.sbf_slots[k as usize] {
                    Some(i) => cx.st.sbfs.get(i as usize).map_or(0, get),
                    None => 0,
                })
            } else {
                let s = sbf(*s);
                Box::new(move |cx| match s(cx) {
                    Some(i) => cx.st.sbfs.get(i as usize).map_or(0, get),
                    None => 0,
                })
            }
        }
        IntE::PktProp(p, prop) => {
            let get = pkt_int_getter(prop);
            let p = pkt(*p);
            Box::new(move |cx| match p(cx) {
                Some(loc) => get(&cx.env.packet(loc.queue, loc.index as usize)),
                None => 0,
            })
        }
        IntE::SbfCount(l) => {
            let l = mask(*l);
            Box::new(move |cx| i64::from(l(cx).count_ones()))
        }
        IntE::PktCount(l) => {
            let view = View::new(*l);
            Box::new(move |cx| {
                let mut n = 0i64;
                view.scan(cx, |_, _| {
                    n += 1;
                    false
                });
                n
            })
        }
        IntE::SbfSum(l, key) => {
            let l = mask(*l);
            let Lambda { slot, body } = *key;
            let body = int(body);
            Box::new(move |cx| {
                let mut m = l(cx);
                let mut sum = 0i64;
                while m != 0 {
                    let i = m.trailing_zeros() as u8;
                    m &= m - 1;
                    cx.st.sbf_slots[slot as usize] = Some(i);
                    sum = sum.wrapping_add(body(cx));
                }
                sum
            })
        }
        IntE::PktSum(l, key) => {
            let view = View::new(*l);
            let Lambda { slot, body } = *key;
            let body = int(body);
            Box::new(move |cx| {
                let mut sum = 0i64;
                view.scan(cx, |cx, loc| {
                    cx.st.pkt_slots[slot as usize] = Some(loc);
                    sum = sum.wrapping_add(body(cx));
                    false
                });
                sum
            })
        }
    }
}

fn boolean(e: BoolE) -> BoolFn {
    match e {
        BoolE::Const(v) => Box::new(move |_| v),
        BoolE::Slot(s) => Box::new(move |cx| cx.st.bools[s as usize]),
        BoolE::Not(a) => {
            let a = BoolLeaf::new(*a).negate();
            Box::new(move |cx| a.eval(cx))
        }
        BoolE::And(a, b) => {
            let (a, b) = (BoolLeaf::new(*a), BoolLeaf::new(*b));
            Box::new(move |cx| a.eval(cx) && b.eval(cx))
        }
        BoolE::Or(a, b) => {
            let (a, b) = (BoolLeaf::new(*a), BoolLeaf::new(*b));
            Box::new(move |cx| a.eval(cx) || b.eval(cx))
        }
        BoolE::Cmp(op, a, b) => {
            let (a, b) = (IntLeaf::new(*a), IntLeaf::new(*b));
            match op {
                CmpOp::Lt => Box::new(move |cx| a.eval(cx) < b.eval(cx)),
                CmpOp::Gt => Box::new(move |cx| a.eval(cx) > b.eval(cx)),
                CmpOp::Le => Box::new(move |cx| a.eval(cx) <= b.eval(cx)),
                CmpOp::Ge => Box::new(move |cx| a.eval(cx) >= b.eval(cx)),
                CmpOp::Eq => Box::new(move |cx| a.eval(cx) == b.eval(cx)),
                CmpOp::Ne => Box::new(move |cx| a.eval(cx) != b.eval(cx)),
            }
        }
        BoolE::BoolEq(eq, a, b) => {
            let (a, b) = (boolean(*a), boolean(*b));
            Box::new(move |cx| (a(cx) == b(cx)) == eq)
        }
        BoolE::SbfEq(eq, a, b) => {
            let (a, b) = (sbf(*a), sbf(*b));
            Box::new(move |cx| (a(cx) == b(cx)) == eq)
        }
        BoolE::PktEq(eq, a, b) => {
            let (a, b) = (pkt(*a), pkt(*b));
            Box::new(move |cx| {
                let x = a(cx).map(|l| cx.env.packet(l.queue, l.index as usize).id);
                let y = b(cx).map(|l| cx.env.packet(l.queue, l.index as usize).id);
                (x == y) == eq
            })
        }
        BoolE::SbfIsNull(eq, a) => {
            let a = sbf(*a);
            Box::new(move |cx| a(cx).is_none() == eq)
        }
        BoolE::PktIsNull(eq, a) => {
            let a = pkt(*a);
            Box::new(move |cx| a(cx).is_none() == eq)
        }
        BoolE::SbfFlag(s, f) => {
            let get = sbf_bool_getter(f);
            if let SbfE::Slot(k) = *s {
                Box::new(move |cx| match cx.st.sbf_slots[k as usize] {
                    Some(i) => cx.st.sbfs.get(i as usize).is_some_and(get),
                    None => false,
                })
            } else {
                let s = sbf(*s);
                Box::new(move |cx| match s(cx) {
                    Some(i) => cx.st.sbfs.get(i as usize).is_some_and(get),
                    None => false,
                })
            }
        }
        BoolE::Psh(p) => {
            let p = pkt(*p);
            Box::new(move |cx| p(cx).is_some_and(|l| cx.env.packet(l.queue, l.index as usize).psh))
        }
        BoolE::SentOn(p, s) => {
            let (p, s) = (pkt(*p), sbf(*s));
            Box::new(move |cx| match (p(cx), s(cx)) {
                (Some(l), Some(i)) => cx.sent_on(l, i),
                _ => false,
            })
        }
        BoolE::HasWindowFor(s, p) => {
            let (s, p) = (sbf(*s), pkt(*p));
            Box::new(move |cx| match (s(cx), p(cx)) {
                (Some(i), Some(l)) => cx.env.has_window_for(i as usize, l.queue, l.index as usize),
                _ => false,
            })
        }
        BoolE::SbfEmpty(l) => {
            let l = mask(*l);
            Box::new(move |cx| l(cx) == 0)
        }
        BoolE::PktEmpty(l) => {
            let view = View::new(*l);
            Box::new(move |cx| view.first(cx).is_none())
        }
    }
}

fn sbf(e: SbfE) -> SbfFn {
    match e {
        SbfE::Slot(s) => Box::new(move |cx| cx.st.sbf_slots[s as usize]),
        SbfE::Get(l, i) => {
            let (l, i) = (mask(*l), int(*i));
            Box::new(move |cx| {
                let mut m = l(cx);
                let i = i(cx);
                if !(0..64).contains(&i) {
                    return None;
                }
                for _ in 0..i {
                    m &= m.wrapping_sub(1);
                }
                (m != 0).then(|| m.trailing_zeros() as u8)
            })
        }
        SbfE::MinMax { list, key, max } => {
            let l = mask(*list);
            let Lambda { slot, body } = *key;
            let body = int(body);
            Box::new(move |cx| {
                let mut m = l(cx);
                let mut best: Option<(u8, i64)> = None;
                while m != 0 {
                    let i = m.trailing_zeros() as u8;
                    m &= m - 1;
                    cx.st.sbf_slots[slot as usize] = Some(i);
                    let k = body(cx);
                    // Ties go to the first subflow in SUBFLOWS order.
                    let better = match best {
                        None => true,
                        Some((_, b)) => (max && k > b) || (!max && k < b),
                    };
                    if better {
                        best = Some((i, k));
                    }
                }
                best.map(|(i, _)| i)
            })
        }
    }
}

fn pkt(e: PktE) -> PktFn {
    match e {
        PktE::Slot(s) => Box::new(move |cx| cx.st.pkt_slots[s as usize]),
        PktE::Top(l) => {
            let view = View::new(*l);
            Box::new(move |cx| view.first(cx))
        }
        PktE::Get(l, i) => {
            let view = View::new(*l);
            let i = int(*i);
            Box::new(move |cx| {
                let i = i(cx);
                if i < 0 {
                    return None;
                }
                let mut left = i;
                let mut found = None;
                view.scan(cx, |_, loc| {
                    if left == 0 {
                        found = Some(loc);
                        return true;
                    }
                    left -= 1;
                    false
                });
                found
            })
        }
        PktE::Pop(l) => {
            let view = View::new(*l);
            Box::new(move |cx| {
                let loc = view.first(cx)?;
                cx.remove(loc, false);
                Some(loc)
            })
        }
        PktE::MinMax { list, key, max } => {
            let view = View::new(*list);
            let Lambda { slot, body } = *key;
            let body = int(body);
            Box::new(move |cx| {
                let mut best: Option<(PktLoc, i64)> = None;
                view.scan(cx, |cx, loc| {
                    cx.st.pkt_slots[slot as usize] = Some(loc);
                    let k = body(cx);
                    let better = match best {
                        None => true,
                        Some((_, b)) => (max && k > b) || (!max && k < b),
                    };
                    if better {
                        best = Some((loc, k));
                    }
                    false
                });
                best.map(|(l, _)| l)
            })
        }
    }
}

fn mask(e: SbfListE) -> MaskFn {
    match e {
        SbfListE::All => Box::new(|cx| cx.st.all_mask),
        SbfListE::Slot(s) => Box::new(move |cx| cx.st.masks[s as usize]),
        SbfListE::Filter(l, f) => {
            let l = mask(*l);
            let Lambda { slot, body } = *f;
            let body = boolean(body);
            Box::new(move |cx| {
                let mut m = l(cx);
                let mut out = 0u64;
                while m != 0 {
                    let i = m.trailing_zeros();
                    m &= m - 1;
                    cx.st.sbf_slots[slot as usize] = Some(i as u8);
                    if body(cx) {
                        out |= 1 << i;
                    }
                }
                out
            })
        }
    }
}

/// A packet list: one queue seen through a chain of filters.
struct View {
    queue: Queue,
    filters: Vec<(Slot, BoolFn)>,
}

impl View {
    fn new(l: PktListE) -> View {
        View {
            queue: l.queue,
            filters: l
                .filters
                .into_iter()
                .map(|f| (f.slot, boolean(f.body)))
                .collect(),
        }
    }

    fn accepts(&self, cx: &mut Ctx<'_>, loc: PktLoc) -> bool {
        self.filters.iter().all(|(slot, f)| {
            cx.st.pkt_slots[*slot as usize] = Some(loc);
            f(cx)
        })
    }

    /// Visits the list's packets in queue order until `visit` says stop.
    fn scan(&self, cx: &mut Ctx<'_>, mut visit: impl FnMut(&mut Ctx<'_>, PktLoc) -> bool) {
        cx.scan_queue(self.queue, |cx, loc| {
            self.accepts(cx, loc) && visit(cx, loc)
        });
    }

    fn first(&self, cx: &mut Ctx<'_>) -> Option<PktLoc> {
        if self.filters.is_empty() && cx.st.removed.is_empty() {
            // The common `Q.TOP`: nothing hides the head of the queue.
            return (cx.env.queue_len(self.queue) > 0).then_some(PktLoc {
                queue: self.queue,
                index: 0,
            });
        }
        let mut found = None;
        self.scan(cx, |_, loc| {
            found = Some(loc);
            true
        });
        found
    }
}

/// An operand of arithmetic or a comparison, evaluated in place when it
/// is a constant, a variable or a subflow variable's property (the bulk of
/// every lambda), saving an indirect call per operand.
enum IntLeaf {
    Const(i64),
    Slot(Slot),
    SbfProp(Slot, fn(&SubflowInfo) -> i64),
    Other(IntFn),
}

impl IntLeaf {
    fn new(e: IntE) -> IntLeaf {
        match e {
            IntE::Const(v) => IntLeaf::Const(v),
            IntE::Slot(s) => IntLeaf::Slot(s),
            IntE::SbfProp(s, p) => match *s {
                SbfE::Slot(k) => IntLeaf::SbfProp(k, sbf_int_getter(p)),
                other => IntLeaf::Other(int(IntE::SbfProp(Box::new(other), p))),
            },
            e => IntLeaf::Other(int(e)),
        }
    }

    #[inline(always)]
    fn eval(&self, cx: &mut Ctx<'_>) -> i64 {
        match self {
            IntLeaf::Const(v) => *v,
            IntLeaf::Slot(s) => cx.st.ints[*s as usize],
            IntLeaf::SbfProp(k, get) => match cx.st.sbf_slots[*k as usize] {
                Some(i) => cx.st.sbfs.get(i as usize).map_or(0, get),
                None => 0,
            },
            IntLeaf::Other(f) => f(cx),
        }
    }
}

/// An operand of `!`, `AND` or `OR`, evaluated in place when it is a
/// constant, a variable or a subflow variable's flag; `negated` folds a
/// `!` into it.
enum BoolLeaf {
    Const(bool),
    Slot(Slot, bool),
    SbfFlag(Slot, fn(&SubflowInfo) -> bool, bool),
    Other(BoolFn, bool),
}

impl BoolLeaf {
    fn new(e: BoolE) -> BoolLeaf {
        match e {
            BoolE::Const(v) => BoolLeaf::Const(v),
            BoolE::Slot(s) => BoolLeaf::Slot(s, false),
            BoolE::SbfFlag(s, f) => match *s {
                SbfE::Slot(k) => BoolLeaf::SbfFlag(k, sbf_bool_getter(f), false),
                other => BoolLeaf::Other(boolean(BoolE::SbfFlag(Box::new(other), f)), false),
            },
            BoolE::Not(inner) => BoolLeaf::new(*inner).negate(),
            e => BoolLeaf::Other(boolean(e), false),
        }
    }

    fn negate(self) -> BoolLeaf {
        match self {
            BoolLeaf::Const(v) => BoolLeaf::Const(!v),
            BoolLeaf::Slot(s, n) => BoolLeaf::Slot(s, !n),
            BoolLeaf::SbfFlag(k, g, n) => BoolLeaf::SbfFlag(k, g, !n),
            BoolLeaf::Other(f, n) => BoolLeaf::Other(f, !n),
        }
    }

    #[inline(always)]
    fn eval(&self, cx: &mut Ctx<'_>) -> bool {
        match self {
            BoolLeaf::Const(v) => *v,
            BoolLeaf::Slot(s, n) => cx.st.bools[*s as usize] != *n,
            // A NULL subflow's flags are false, so `!flag` is true.
            BoolLeaf::SbfFlag(k, get, n) => {
                let v = match cx.st.sbf_slots[*k as usize] {
                    Some(i) => cx.st.sbfs.get(i as usize).is_some_and(get),
                    None => false,
                };
                v != *n
            }
            BoolLeaf::Other(f, n) => f(cx) != *n,
        }
    }
}
