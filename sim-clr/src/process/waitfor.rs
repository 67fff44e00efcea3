//! The wait-for graph and its cycles.
//!
//! Every blocked simulated thread has edges to the threads that must act before it can run:
//! a lock's owner, the thread that OS-suspended it (only its `ResumeThread` frees it), every
//! cooperative thread a GC waits for at a safe point, the thread whose runtime suspension a
//! parked thread waits out, a joined thread. A cycle is a deadlock no schedule can break.
//! The engine asks only from the thread that just stepped: every new cycle passes through it.

/// An edge of the wait-for graph: the waiting thread needs `to` to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The thread waited for.
    pub to: usize,
    /// What is waited for (`lock heap`, `ResumeThread`, `safe point`, …).
    pub what: String,
    /// Any thread may end the wait, not only `to` (a `ResumeThread`, a semaphore's post).
    pub anyone: bool,
}

/// The most threads a cycle search visits (the graph has one node per simulated thread).
const MAX_NODES: usize = 1 << 16;

/// A cycle reachable from `start`, as `(thread, edge)` pairs in order, or `None`. `edges`
/// gives a thread's out-edges (empty for a thread that can run).
pub fn find_cycle(start: usize, edges: impl Fn(usize) -> Vec<Edge>) -> Option<Vec<(usize, Edge)>> {
    // Iterative depth-first search; `path` is the current chain of (thread, edge taken).
    let mut path: Vec<(usize, Vec<Edge>, usize)> = vec![(start, edges(start), 0)];
    let mut done = std::collections::BTreeSet::new();
    while let Some((node, out, next)) = path.last_mut() {
        let node = *node;
        let Some(edge) = out.get(*next).cloned() else {
            done.insert(node);
            path.pop();
            continue;
        };
        *next += 1;
        if let Some(at) = path.iter().position(|(n, _, _)| *n == edge.to) {
            let cycle = path[at..]
                .iter()
                .map(|(n, out, next)| (*n, out[*next - 1].clone()))
                .collect();
            return Some(cycle);
        }
        if !done.contains(&edge.to) && done.len() + path.len() < MAX_NODES {
            let out = edges(edge.to);
            path.push((edge.to, out, 0));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph<'a>(adj: &'a [&'a [usize]]) -> impl Fn(usize) -> Vec<Edge> + 'a {
        move |n| {
            adj[n]
                .iter()
                .map(|&to| Edge {
                    to,
                    what: format!("{n}->{to}"),
                    anyone: false,
                })
                .collect()
        }
    }

    #[test]
    fn finds_the_cycle_and_only_a_cycle() {
        let cycle = find_cycle(0, graph(&[&[1], &[2], &[1]])).unwrap();
        let nodes: Vec<usize> = cycle.iter().map(|(n, _)| *n).collect();
        assert_eq!(nodes, [1, 2]);
        assert_eq!(cycle[1].1.to, 1);
        assert!(find_cycle(0, graph(&[&[1, 2], &[2], &[]])).is_none());
        let own = find_cycle(0, graph(&[&[0]])).unwrap();
        assert_eq!(own.len(), 1, "waiting for one's own lock");
        // A branch that dead-ends first, then a cycle through the second edge.
        let c = find_cycle(0, graph(&[&[1, 2], &[], &[0]])).unwrap();
        assert_eq!(c.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 2]);
    }
}
