//! Independent pieces of work spread over OS threads, their results in order: what lets
//! explorations and fuzzers use every core and still print the same bytes.

use std::sync::atomic::{AtomicU64, Ordering};

/// `f(0)`, `f(1)`, …, `f(count - 1)`, computed on up to `jobs` OS threads (each taking the
/// next index when it is free), returned in index order. With one job, or one piece, on the
/// calling thread. A panic in `f` is resumed on the calling thread.
pub fn in_order<R: Send>(jobs: usize, count: u64, f: impl Fn(u64) -> R + Sync) -> Vec<R> {
    if jobs <= 1 || count <= 1 {
        return (0..count).map(f).collect();
    }
    let taken = AtomicU64::new(0);
    let mut done: Vec<(u64, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.min(count as usize))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = taken.fetch_add(1, Ordering::Relaxed);
                        if k >= count {
                            return mine;
                        }
                        mine.push((k, f(k)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    done.sort_unstable_by_key(|(k, _)| *k);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_the_jobs() {
        let squares: Vec<u64> = (0..100).map(|k| k * k).collect();
        for jobs in [1, 2, 3, 16] {
            assert_eq!(in_order(jobs, 100, |k| k * k), squares, "{jobs} jobs");
        }
        assert!(in_order(4, 0, |k| k).is_empty());
    }
}
