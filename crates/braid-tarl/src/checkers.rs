//! Brute-force, centralised checkers for the shipped rules: each computes the
//! target topology from global knowledge, straight from the algorithm's
//! definition, so that the distributed rules can be compared against it.
//!
//! The geometric predicates use the same floating-point expressions (and the
//! same [`dist`]/[`angle`] functions) as the rule files, so agreement is exact.

use std::collections::{BTreeSet, VecDeque};

use crate::value::{angle, dist};

type Pos = (f64, f64);

fn adjacency(n: usize, edges: &BTreeSet<(u32, u32)>) -> Vec<BTreeSet<u32>> {
    let mut adj = vec![BTreeSet::new(); n];
    for &(a, b) in edges {
        adj[a as usize].insert(b);
        adj[b as usize].insert(a);
    }
    adj
}

/// Gabriel graph of the unit-disk graph `phys` (edges `a < b`): edge u-v is
/// kept iff no node w has |uw|² + |wv|² < |uv|².
pub fn gabriel(pos: &[Pos], phys: &BTreeSet<(u32, u32)>) -> BTreeSet<(u32, u32)> {
    phys.iter()
        .copied()
        .filter(|&(u, v)| {
            let (pu, pv) = (pos[u as usize], pos[v as usize]);
            !(0..pos.len() as u32).any(|w| {
                let pw = pos[w as usize];
                w != u
                    && w != v
                    && dist(pu, pw) * dist(pu, pw) + dist(pw, pv) * dist(pw, pv)
                        < dist(pu, pv) * dist(pu, pv)
            })
        })
        .collect()
}

/// Relative neighbourhood graph of `phys`: edge u-v is kept iff no node w has
/// max(|uw|, |wv|) < |uv|.
pub fn relative_neighborhood(pos: &[Pos], phys: &BTreeSet<(u32, u32)>) -> BTreeSet<(u32, u32)> {
    phys.iter()
        .copied()
        .filter(|&(u, v)| {
            let (pu, pv) = (pos[u as usize], pos[v as usize]);
            !(0..pos.len() as u32).any(|w| {
                let pw = pos[w as usize];
                w != u && w != v && dist(pu, pw).max(dist(pw, pv)) < dist(pu, pv)
            })
        })
        .collect()
}

/// Directed Yao graph with `k` cones: u -> v for the nearest `phys`-neighbour
/// v of u in each cone `floor(angle(u, v) / (2π / k))`.
pub fn yao(pos: &[Pos], phys: &BTreeSet<(u32, u32)>, k: f64) -> BTreeSet<(u32, u32)> {
    let adj = adjacency(pos.len(), phys);
    let width = 2.0 * std::f64::consts::PI / k;
    let mut out = BTreeSet::new();
    for (u, nb) in adj.iter().enumerate() {
        let pu = pos[u];
        let cone = |x: u32| (angle(pu, pos[x as usize]) / width).floor();
        for &v in nb {
            let closer = nb.iter().any(|&w| {
                cone(w) == cone(v) && dist(pu, pos[w as usize]) < dist(pu, pos[v as usize])
            });
            if !closer {
                out.insert((u as u32, v));
            }
        }
    }
    out
}

/// kTC on `phys`: edge u-v is dropped iff it is the strictly longest edge of
/// some triangle u-v-w of `phys` and longer than `k` times that triangle's
/// shortest edge.
pub fn ktc(pos: &[Pos], phys: &BTreeSet<(u32, u32)>, k: f64) -> BTreeSet<(u32, u32)> {
    let adj = adjacency(pos.len(), phys);
    phys.iter()
        .copied()
        .filter(|&(u, v)| {
            let d = |a: u32, b: u32| dist(pos[a as usize], pos[b as usize]);
            let e0 = d(u, v);
            !adj[u as usize].intersection(&adj[v as usize]).any(|&w| {
                let (e1, e2) = (d(u, w), d(w, v));
                e0 > e1 && e0 > e2 && e0 > k * e1.min(e2)
            })
        })
        .collect()
}

/// Hop distances from `root` in the undirected graph `edges` (`None`: unreachable).
pub fn bfs_depths(n: usize, edges: &BTreeSet<(u32, u32)>, root: u32) -> Vec<Option<u32>> {
    let adj = adjacency(n, edges);
    let mut depth = vec![None; n];
    depth[root as usize] = Some(0);
    let mut q = VecDeque::from([root]);
    while let Some(x) = q.pop_front() {
        let d = depth[x as usize].unwrap_or(0);
        for &y in &adj[x as usize] {
            if depth[y as usize].is_none() {
                depth[y as usize] = Some(d + 1);
                q.push_back(y);
            }
        }
    }
    depth
}

/// Checks the fixed point of the low-delay jump: `tree` (parent -> child
/// links) is a spanning tree of `neighborhood` rooted at `root` in which every
/// node's depth is its hop distance from the root (a BFS tree). Parents among
/// equally deep candidates may differ, so the check is on depths and links.
///
/// # Errors
/// A description of the first violation.
pub fn low_delay_tree(
    n: usize,
    neighborhood: &BTreeSet<(u32, u32)>,
    tree: &BTreeSet<(u32, u32)>,
    root: u32,
) -> Result<(), String> {
    let want = bfs_depths(n, neighborhood, root);
    let mut parent = vec![None; n];
    for &(p, c) in tree {
        if parent[c as usize].replace(p).is_some() {
            return Err(format!("n{c} has two parents"));
        }
        if !neighborhood.contains(&(p.min(c), p.max(c))) {
            return Err(format!(
                "tree link n{p} -> n{c} is not a neighbourhood link"
            ));
        }
    }
    for v in 0..n as u32 {
        let mut depth = 0u32;
        let mut cur = v;
        while cur != root {
            cur =
                parent[cur as usize].ok_or_else(|| format!("n{v} is not attached to the root"))?;
            depth += 1;
            if depth as usize > n {
                return Err(format!("cycle through n{v}"));
            }
        }
        if Some(depth) != want[v as usize] {
            return Err(format!(
                "n{v} has depth {depth}, shortest is {:?}",
                want[v as usize]
            ));
        }
    }
    Ok(())
}
