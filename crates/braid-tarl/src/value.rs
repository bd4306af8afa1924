//! Runtime values of TARL expressions and the built-in functions over them.
//!
//! The geometric built-ins are shared with the brute-force checkers so that a
//! rule and its checker compute bit-identical floating-point results.

use serde::{Deserialize, Serialize};

/// A node's identity as the provider knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u64);

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A value an expression evaluates to, or an attribute holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Num(f64),
    /// A truth value.
    Bool(bool),
    /// A point `(x, y)`.
    Pos(f64, f64),
    /// A node.
    Node(NodeId),
}

/// Euclidean distance between two points.
pub fn dist(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    (dx * dx + dy * dy).sqrt()
}

/// Direction from `a` to `b` in radians, in `[0, 2π)` (counter-clockwise from +x).
pub fn angle(a: (f64, f64), b: (f64, f64)) -> f64 {
    let t = (b.1 - a.1).atan2(b.0 - a.0);
    if t < 0.0 {
        t + 2.0 * std::f64::consts::PI
    } else {
        t
    }
}
