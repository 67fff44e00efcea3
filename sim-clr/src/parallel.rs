//! Independent pieces of work spread over OS threads, their results in order, and split into
//! shards for several machines: what lets explorations and fuzzers use every core and every
//! machine and still print the same bytes.

use std::fmt;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Condvar, Mutex, MutexGuard};

/// `f(0)`, `f(1)`, …, `f(count - 1)`, computed on up to `jobs` OS threads (each taking the
/// next index when it is free), returned in index order. With one job, or one piece, on the
/// calling thread. A panic in `f` is resumed on the calling thread.
pub fn in_order<R: Send>(jobs: usize, count: u64, f: impl Fn(u64) -> R + Sync) -> Vec<R> {
    batches(jobs.min(count as usize), |k, ()| f(k), |b| b.run(0, count, ()))
}

/// Runs `work` with `jobs` OS threads kept for all of it, which compute the batches it asks
/// for ([`Batches::run`]): `f(k, with)` for each `k` of a batch, `with` being the batch's
/// parameter. Threads are started once, not per batch: a thread's start and its cold caches
/// (the allocator's among them) cost as much as a short run. With one job, every batch runs
/// on the calling thread.
pub fn batches<P: Copy + Send, R: Send, T>(
    jobs: usize,
    f: impl Fn(u64, P) -> R + Sync,
    work: impl FnOnce(&mut Batches<'_, P, R>) -> T,
) -> T {
    if jobs <= 1 {
        return work(&mut Batches::Here(&f));
    }
    let queue = Queue {
        batch: Mutex::new(Batch {
            next: 0,
            end: 0,
            with: None,
            stop: false,
        }),
        ready: Condvar::new(),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let (tx, queue, f) = (tx.clone(), &queue, &f);
            s.spawn(move || {
                while let Some((k, with)) = queue.take() {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(k, with)));
                    if tx.send((k, r)).is_err() {
                        return;
                    }
                }
            });
        }
        // However `work` ends (a panic it resumes included), the threads stop.
        let _stop = Stop(&queue);
        work(&mut Batches::Threads {
            queue: &queue,
            results: rx,
        })
    })
}

/// Where a batch of [`batches`] runs.
pub enum Batches<'a, P, R> {
    /// On the calling thread.
    Here(&'a (dyn Fn(u64, P) -> R + Sync)),
    /// On the kept threads, which send back each result with its index.
    Threads {
        /// The batch the threads take indices from.
        queue: &'a Queue<P>,
        /// Results as they are done, with their index.
        results: Receiver<(u64, std::thread::Result<R>)>,
    },
}

impl<P: Copy + Send, R: Send> Batches<'_, P, R> {
    /// `f(first, with)`, …, `f(first + count - 1, with)`, in index order; a panic in `f` is
    /// resumed here.
    pub fn run(&mut self, first: u64, count: u64, with: P) -> Vec<R> {
        match self {
            Batches::Here(f) => (first..first + count).map(|k| f(k, with)).collect(),
            Batches::Threads { queue, results } => {
                {
                    let mut b = queue.lock();
                    (b.next, b.end, b.with) = (first, first + count, Some(with));
                }
                queue.ready.notify_all();
                let mut done: Vec<(u64, std::thread::Result<R>)> = (0..count)
                    .map(|_| results.recv().expect("the threads live as long as the batches"))
                    .collect();
                done.sort_unstable_by_key(|(k, _)| *k);
                done.into_iter()
                    .map(|(_, r)| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                    .collect()
            }
        }
    }
}

/// The batch the kept threads of [`batches`] take their indices from.
pub struct Queue<P> {
    batch: Mutex<Batch<P>>,
    /// Signalled when a batch is set or the threads are to stop.
    ready: Condvar,
}

/// The indices of a batch not yet taken, and its parameter.
struct Batch<P> {
    next: u64,
    end: u64,
    with: Option<P>,
    stop: bool,
}

impl<P> Queue<P> {
    fn lock(&self) -> MutexGuard<'_, Batch<P>> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<P: Copy> Queue<P> {
    /// The next index to compute and its parameter, waiting for a batch; `None` when the
    /// threads are to stop.
    fn take(&self) -> Option<(u64, P)> {
        let mut b = self.lock();
        loop {
            if b.stop {
                return None;
            }
            if b.next < b.end {
                b.next += 1;
                return Some((b.next - 1, b.with.expect("a batch has its parameter")));
            }
            b = self.ready.wait(b).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Stops the kept threads of [`batches`] when dropped.
struct Stop<'a, P>(&'a Queue<P>);

impl<P> Drop for Stop<'_, P> {
    fn drop(&mut self) {
        self.0.lock().stop = true;
        self.0.ready.notify_all();
    }
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
    fn kept_threads_run_batch_after_batch_and_pass_on_a_panic() {
        let sums = batches(
            3,
            |k, add: u64| k + add,
            |b| {
                (0..50)
                    .map(|i| b.run(i * 10, 10, i).into_iter().sum::<u64>())
                    .collect::<Vec<_>>()
            },
        );
        let expected: Vec<u64> = (0..50)
            .map(|i| (i * 10..i * 10 + 10).map(|k| k + i).sum())
            .collect();
        assert_eq!(sums, expected);
        let panicked =
            std::panic::catch_unwind(|| batches(2, |k, ()| assert_ne!(k, 7, "seven"), |b| b.run(0, 20, ())));
        assert!(panicked.is_err());
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
