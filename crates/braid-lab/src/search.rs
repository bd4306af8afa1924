//! Where configurations come from.
//!
//! A [`ParamSource`] hands out points of the parameter space to run
//! ([`ask`](ParamSource::ask)) and may hear how each one went
//! ([`tell`](ParamSource::tell)). [`Grid`], the Cartesian product of the
//! study's value lists, is one source: it ignores what it is told. An
//! ask/tell source (a Gaussian-process learner, NSGA-II, a tuner) is
//! another: it chooses the next points from the outcomes so far, and runs
//! through the same runner, store and analysis, so a learner never needs a
//! runner of its own. A point becomes an experiment through
//! [`crate::plan::experiment`].
//!
//! ```
//! use braid_lab::param::Value;
//! use braid_lab::search::{Axis, Grid, ParamSource};
//! let mut grid = Grid::new(vec![
//!     Axis { name: "rtt".into(), values: vec![Value::Int(10), Value::Int(50)] },
//!     Axis { name: "flows".into(), values: vec![Value::Int(1), Value::Int(2), Value::Int(4)] },
//! ]);
//! assert_eq!(grid.len(), 6);
//! let first = grid.ask(4);
//! assert_eq!(first.len(), 4);
//! assert_eq!(first[1].int("flows").unwrap(), 2, "the last axis varies fastest");
//! assert_eq!(grid.ask(4).len(), 2);
//! assert!(grid.ask(4).is_empty());
//! ```

use crate::param::{Params, Value};
use crate::record::Record;

/// How one asked-for point went.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// It ran; these are its records.
    Records(&'a [Record]),
    /// It failed or timed out; the reason.
    Failed(&'a str),
}

/// A source of points (every parameter's value) to run.
pub trait ParamSource {
    /// Up to `max` points to run next; empty when the source is done (a
    /// learner may also return fewer while it waits for outcomes).
    fn ask(&mut self, max: usize) -> Vec<Params>;

    /// How a point it handed out went. Sources that plan ahead (a grid)
    /// ignore it.
    fn tell(&mut self, _point: &Params, _outcome: Outcome<'_>) {}

    /// How many points are still to come, when known in advance.
    fn remaining(&self) -> Option<usize> {
        None
    }
}

/// One parameter's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The parameter.
    pub name: String,
    /// Its values, in order.
    pub values: Vec<Value>,
}

/// The Cartesian product of value lists. The first axis varies slowest,
/// the last fastest; point `i` is `i` written in the mixed radix of the
/// axes' lengths, so any point can be had without the ones before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    axes: Vec<Axis>,
    len: usize,
    next: usize,
}

impl Grid {
    /// The product of `axes`. An axis without values makes it empty; a
    /// product beyond `usize` is capped at `usize::MAX` (studies are
    /// bounded long before that).
    pub fn new(axes: Vec<Axis>) -> Grid {
        let len = axes.iter().fold(1usize, |n, a| n.saturating_mul(a.values.len()));
        Grid { axes, len, next: 0 }
    }

    /// The axes, slowest first.
    pub fn axes(&self) -> &[Axis] {
        &self.axes
    }

    /// How many points.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no points.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Point `index` (`None` past the end).
    pub fn point(&self, index: usize) -> Option<Params> {
        if index >= self.len {
            return None;
        }
        let mut params = Params::default();
        let mut rest = index;
        for axis in self.axes.iter().rev() {
            let n = axis.values.len();
            params.insert(&axis.name, axis.values[rest % n].clone());
            rest /= n;
        }
        Some(params)
    }

    /// Every point, in order (independent of what was asked).
    pub fn points(&self) -> impl Iterator<Item = Params> + '_ {
        (0..self.len).filter_map(|i| self.point(i))
    }
}

impl ParamSource for Grid {
    fn ask(&mut self, max: usize) -> Vec<Params> {
        let end = self.next.saturating_add(max).min(self.len);
        let points = (self.next..end).filter_map(|i| self.point(i)).collect();
        self.next = end;
        points
    }

    fn remaining(&self) -> Option<usize> {
        Some(self.len - self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn grid(sizes: &[usize]) -> Grid {
        Grid::new(
            sizes
                .iter()
                .enumerate()
                .map(|(a, &n)| Axis { name: format!("p{a}"), values: (0..n as i64).map(Value::Int).collect() })
                .collect(),
        )
    }

    #[test]
    fn no_axes_is_one_empty_point() {
        let g = grid(&[]);
        assert_eq!(g.len(), 1);
        assert_eq!(g.point(0), Some(Params::default()));
    }

    #[test]
    fn an_empty_axis_empties_the_grid() {
        let mut g = grid(&[3, 0, 2]);
        assert!(g.is_empty());
        assert!(g.ask(10).is_empty());
        assert_eq!(g.remaining(), Some(0));
    }

    #[test]
    fn last_axis_varies_fastest() {
        let g = grid(&[2, 3]);
        let order: Vec<(i64, i64)> = g.points().map(|p| (p.int("p0").unwrap(), p.int("p1").unwrap())).collect();
        assert_eq!(order, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
    }

    proptest! {
        #[test]
        fn product_points_are_distinct_and_complete(sizes in proptest::collection::vec(1usize..5, 0..5), batch in 1usize..7) {
            let mut g = grid(&sizes);
            prop_assert_eq!(g.len(), sizes.iter().product::<usize>());
            let mut asked = Vec::new();
            loop {
                let b = g.ask(batch);
                if b.is_empty() { break; }
                prop_assert!(b.len() <= batch);
                asked.extend(b);
            }
            prop_assert_eq!(asked.len(), g.len());
            prop_assert_eq!(g.remaining(), Some(0));
            let distinct: HashSet<String> = asked.iter().map(|p| format!("{:?}", p)).collect();
            prop_assert_eq!(distinct.len(), asked.len());
            for p in &asked {
                prop_assert_eq!(p.0.len(), sizes.len(), "every axis in every point");
            }
            prop_assert_eq!(asked, g.points().collect::<Vec<_>>());
        }
    }
}
