//! Survivor selection: by fitness with the smaller rule set winning ties
//! (seed 001 §6.4.1: "Fossa prefers smaller ECA rule sets in case two
//! different sets lead to the same utility"), and for several objectives
//! NSGA-II (Deb et al., IEEE TEC 2002: fast non-dominated sorting, crowding
//! distance), which keeps the Pareto front in the pool (§6.6, Figure 6.6).
//! All objectives are maximised.

use std::cmp::Ordering;

/// `a` dominates `b`: no worse in every objective, better in one.
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    let mut better = false;
    for (x, y) in a.iter().zip(b) {
        if x < y {
            return false;
        }
        if x > y {
            better = true;
        }
    }
    better
}

/// The non-domination rank of each point (0 = the Pareto front).
pub fn ranks(points: &[Vec<f64>]) -> Vec<usize> {
    let n = points.len();
    let mut dominated_by = vec![0usize; n];
    let mut dominates_list: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for j in 0..n {
            if i != j && dominates(&points[i], &points[j]) {
                dominates_list[i].push(j);
            } else if i != j && dominates(&points[j], &points[i]) {
                dominated_by[i] += 1;
            }
        }
    }
    let mut rank = vec![usize::MAX; n];
    let mut front: Vec<usize> = (0..n).filter(|&i| dominated_by[i] == 0).collect();
    let mut r = 0;
    while !front.is_empty() {
        let mut next = Vec::new();
        for &i in &front {
            rank[i] = r;
            for &j in &dominates_list[i] {
                dominated_by[j] -= 1;
                if dominated_by[j] == 0 {
                    next.push(j);
                }
            }
        }
        front = next;
        r += 1;
    }
    rank
}

/// Crowding distance of each point within its rank (larger = lonelier;
/// the extremes of each objective are infinitely far).
pub fn crowding(points: &[Vec<f64>], rank: &[usize]) -> Vec<f64> {
    let n = points.len();
    let mut dist = vec![0.0; n];
    let m = points.first().map(Vec::len).unwrap_or(0);
    let max_rank = rank.iter().copied().filter(|&r| r != usize::MAX).max().unwrap_or(0);
    for r in 0..=max_rank {
        let members: Vec<usize> = (0..n).filter(|&i| rank[i] == r).collect();
        if members.len() <= 2 {
            for &i in &members {
                dist[i] = f64::INFINITY;
            }
            continue;
        }
        #[allow(clippy::needless_range_loop)] // k indexes the objectives of each point
        for k in 0..m {
            let mut sorted = members.clone();
            sorted.sort_by(|&a, &b| points[a][k].total_cmp(&points[b][k]));
            let lo = points[sorted[0]][k];
            let hi = points[sorted[sorted.len() - 1]][k];
            dist[sorted[0]] = f64::INFINITY;
            dist[sorted[sorted.len() - 1]] = f64::INFINITY;
            let span = hi - lo;
            if span <= 0.0 || !span.is_finite() {
                continue;
            }
            for w in 1..sorted.len() - 1 {
                dist[sorted[w]] += (points[sorted[w + 1]][k] - points[sorted[w - 1]][k]) / span;
            }
        }
    }
    dist
}

/// The order survivors are kept in: for one objective, fitness descending
/// then size ascending; for several, NSGA-II rank, then crowding distance
/// descending, then size ascending. Returns indices, best first.
pub fn order(fitness: &[Vec<f64>], sizes: &[usize]) -> Vec<usize> {
    let n = fitness.len();
    let mut idx: Vec<usize> = (0..n).collect();
    let multi = fitness.first().is_some_and(|f| f.len() > 1);
    if !multi {
        idx.sort_by(|&a, &b| {
            let fa = fitness[a].first().copied().unwrap_or(f64::NEG_INFINITY);
            let fb = fitness[b].first().copied().unwrap_or(f64::NEG_INFINITY);
            fb.total_cmp(&fa).then(sizes[a].cmp(&sizes[b])).then(a.cmp(&b))
        });
        return idx;
    }
    let rank = ranks(fitness);
    let crowd = crowding(fitness, &rank);
    idx.sort_by(|&a, &b| {
        rank[a]
            .cmp(&rank[b])
            .then(crowd[b].partial_cmp(&crowd[a]).unwrap_or(Ordering::Equal))
            .then(sizes[a].cmp(&sizes[b]))
            .then(a.cmp(&b))
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_and_ties() {
        let pts = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.5, 0.5], vec![0.4, 0.4], vec![1.0, 0.0]];
        let r = ranks(&pts);
        assert_eq!(r, vec![0, 0, 0, 1, 0]);
        let one = vec![vec![2.0], vec![3.0], vec![3.0]];
        assert_eq!(order(&one, &[1, 5, 2]), vec![2, 1, 0]);
    }
}
