//! Independent pieces of work spread over OS threads, their results in order, and split into
//! shards for several machines: what lets explorations and fuzzers use every core and every
//! machine and still print the same bytes.

use std::fmt;
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

/// One share of a piece of work split across machines: of the items `0, 1, 2, …`, shard `I/N`
/// takes those whose index leaves `I - 1` when divided by `N` (written `I/N`, counting from 1).
/// Every item falls in exactly one of the `N` shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which share, from 0.
    index: u64,
    /// How many shares.
    count: u64,
}

impl Shard {
    /// All of the work: `1/1`.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Share `number` (counting from 1) of `count`; `None` unless `1 <= number <= count`.
    pub fn new(number: u64, count: u64) -> Option<Shard> {
        (number >= 1 && number <= count).then(|| Shard {
            index: number - 1,
            count,
        })
    }

    /// Whether item `n` is this shard's.
    pub fn holds(self, n: u64) -> bool {
        n % self.count == self.index
    }

    /// How many of the items `0..total` are this shard's.
    pub fn count_of(self, total: u64) -> u64 {
        total.saturating_sub(self.index).div_ceil(self.count)
    }

    /// The index among all items of this shard's `k`th item (from 0).
    pub fn index_of(self, k: u64) -> u64 {
        self.index + k * self.count
    }

    /// How many shares the work is split into.
    pub fn count(self) -> u64 {
        self.count
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N`, with `1 <= I <= N`.
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not a shard: write I/N (shard I of N, from 1/N to N/N)"))?;
        let number = |t: &str| t.trim().parse::<u64>().ok();
        match (number(i), number(n)) {
            (Some(i), Some(n)) => {
                Shard::new(i, n).ok_or_else(|| format!("shard {i}/{n}: I must be between 1 and N"))
            }
            _ => Err(format!("`{s}` is not a shard: write I/N with two whole numbers")),
        }
    }
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

    #[test]
    fn shards_split_the_items_exactly_once() {
        for total in [0u64, 1, 2, 7, 100] {
            for count in 1..=5 {
                let mut seen = vec![0; total as usize];
                for number in 1..=count {
                    let shard: Shard = format!("{number}/{count}").parse().unwrap();
                    let mine: Vec<u64> = (0..shard.count_of(total)).map(|k| shard.index_of(k)).collect();
                    assert_eq!(mine, (0..total).filter(|&n| shard.holds(n)).collect::<Vec<_>>());
                    mine.iter().for_each(|&n| seen[n as usize] += 1);
                }
                assert!(seen.iter().all(|&n| n == 1), "{total} items in {count} shards");
            }
        }
        for bad in ["0/2", "3/2", "1/0", "1", "a/b", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
