//! Independent pieces of work spread over OS threads, their results in order, and split into
//! shards for several machines: what lets explorations and fuzzers use every core and every
//! machine and still print the same bytes.
//!
//! The threads form a [`Pool`]. Each piece of work ([`tasks`]) is done from start to end by
//! the thread that took it, its *driver*; a thread that finds no piece left to take helps the
//! drivers still at work, which hand it [batches](Pool::run) of theirs while it waits. So a
//! catalog of explorations keeps every core on a whole exploration of its own, and only its
//! last ones, with nothing else left to start, split into batches.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// `f(0)`, `f(1)`, …, `f(count - 1)`, computed on up to `jobs` OS threads (each taking the
/// next index when it is free), returned in index order. With one job, or one piece, on the
/// calling thread. A panic in `f` is resumed on the calling thread.
pub fn in_order<R: Send>(jobs: usize, count: u64, f: impl Fn(u64) -> R + Sync) -> Vec<R> {
    let mut done = Vec::with_capacity(count as usize);
    tasks(jobs, count, |k, _| f(k), |_, r| done.push(r));
    done
}

/// Does the pieces of work `0..count` on up to `jobs` OS threads of one [`Pool`] and gives
/// each result to `emit` on the calling thread, in index order, as soon as those before it are
/// given. A thread takes the next piece when it is free and drives it to its end
/// (`task(k, pool)`); once no piece is left to take, it helps the others' batches
/// ([`Pool::run`]) until every piece is done. With one job, every piece is done on the calling
/// thread. A panic in `task` is resumed on the calling thread.
pub fn tasks<'env, R: Send>(
    jobs: usize,
    count: u64,
    task: impl Fn(u64, &Pool<'env>) -> R + Sync,
    mut emit: impl FnMut(u64, R),
) {
    let jobs = jobs.min(usize::try_from(count).unwrap_or(usize::MAX));
    let pool = Pool::new(jobs);
    if jobs <= 1 {
        (0..count).for_each(|k| emit(k, task(k, &pool)));
        return;
    }
    let next = AtomicU64::new(0);
    let finished = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let (tx, pool, task, next, finished) = (tx.clone(), &pool, &task, &next, &finished);
            s.spawn(move || {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= count {
                        break;
                    }
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(k, pool)));
                    // The last piece's end stops the helpers, however it ended.
                    if finished.fetch_add(1, Ordering::AcqRel) + 1 == count {
                        pool.stop();
                    }
                    if tx.send((k, r)).is_err() {
                        pool.stop();
                        return;
                    }
                }
                pool.help();
            });
        }
        drop(tx);
        // However the emitting ends (a panic resumed included), the helpers stop.
        let _stop = StopOnDrop(&pool);
        let mut waiting = std::collections::BTreeMap::new();
        let mut due = 0;
        for (k, r) in rx {
            waiting.insert(k, r);
            while let Some(r) = waiting.remove(&due) {
                emit(due, r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
                due += 1;
            }
        }
    });
}

/// OS threads shared by the drivers of several pieces of work: a driver computes its items
/// itself, one after another, and while some of the pool's threads wait with nothing to do it
/// can hand them a batch ([`Pool::run`]). `'env` is what the batches' functions borrow.
pub struct Pool<'env> {
    /// How many threads the pool has, drivers included.
    threads: usize,
    /// Threads waiting for a batch: changed under `open`'s lock, read without it.
    idle: AtomicUsize,
    open: Mutex<Open<'env>>,
    /// Signalled when a batch is opened or the pool stops.
    ready: Condvar,
}

/// The batches with items left to take, oldest first, and whether the pool is stopping.
struct Open<'env> {
    batches: VecDeque<Arc<dyn Items + 'env>>,
    stop: bool,
}

impl<'env> Pool<'env> {
    /// A pool of `threads` threads (at least one); its helpers are the caller's to start
    /// ([`Pool::help`]).
    fn new(threads: usize) -> Pool<'env> {
        Pool {
            threads: threads.max(1),
            idle: AtomicUsize::new(0),
            open: Mutex::new(Open {
                batches: VecDeque::new(),
                stop: false,
            }),
            ready: Condvar::new(),
        }
    }

    /// Runs `work` as the one driver of a pool of `threads` threads (the calling one and
    /// `threads - 1` helpers, started for all of `work` and stopped after it).
    pub fn with<T>(threads: usize, work: impl FnOnce(&Pool<'env>) -> T) -> T {
        let pool = Pool::new(threads);
        if pool.threads == 1 {
            return work(&pool);
        }
        std::thread::scope(|s| {
            for _ in 1..pool.threads {
                s.spawn(|| pool.help());
            }
            let _stop = StopOnDrop(&pool);
            work(&pool)
        })
    }

    /// How many threads the pool has, drivers included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether a thread is waiting for a batch now (a hint: it may have taken one since).
    pub fn has_idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed) > 0
    }

    /// `f(first, with)`, …, `f(first + count - 1, with)`, in index order: computed by the
    /// calling driver and by any of the pool's threads that are free meanwhile. A panic in
    /// `f` is resumed here once the batch is done.
    pub fn run<P, R, F>(&self, f: &Arc<F>, first: u64, count: u64, with: P) -> Vec<R>
    where
        P: Copy + Send + Sync + 'env,
        R: Send + 'env,
        F: Fn(u64, P) -> R + Send + Sync + 'env,
    {
        let batch = Arc::new(Batch {
            f: Arc::clone(f),
            with,
            first,
            end: first + count,
            next: AtomicU64::new(first),
            done: Mutex::new(Done {
                results: (0..count).map(|_| None).collect(),
                missing: count,
            }),
            all_done: Condvar::new(),
        });
        let shared: Arc<dyn Items + 'env> = batch.clone();
        if count > 1 && self.threads > 1 {
            self.lock().batches.push_back(Arc::clone(&shared));
            self.ready.notify_all();
        }
        while batch.compute_next() {}
        self.lock().batches.retain(|b| !Arc::ptr_eq(b, &shared));
        batch.results()
    }

    /// Computes items of the open batches, oldest first, until the pool stops.
    fn help(&self) {
        let mut open = self.lock();
        loop {
            if open.stop {
                return;
            }
            match open.batches.front().cloned() {
                Some(batch) => {
                    drop(open);
                    while batch.compute_next() {}
                    open = self.lock();
                    open.batches.retain(|b| !Arc::ptr_eq(b, &batch));
                }
                None => {
                    self.idle.fetch_add(1, Ordering::Relaxed);
                    open = self.ready.wait(open).unwrap_or_else(|e| e.into_inner());
                    self.idle.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Makes the helpers return once they are done with the item they compute.
    fn stop(&self) {
        self.lock().stop = true;
        self.ready.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Open<'env>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Stops a pool's helpers when dropped.
struct StopOnDrop<'p, 'env>(&'p Pool<'env>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A batch as its helpers see it, whatever it computes.
trait Items: Send + Sync {
    /// Takes the next item and computes it; false when every item was taken.
    fn compute_next(&self) -> bool;
}

/// One batch of [`Pool::run`]: its items `first..end`, the next one to take, and the results.
struct Batch<F, P, R> {
    f: Arc<F>,
    with: P,
    first: u64,
    end: u64,
    next: AtomicU64,
    done: Mutex<Done<R>>,
    /// Signalled when the last result is in.
    all_done: Condvar,
}

/// A batch's results so far, by item, and how many are still being computed or not taken.
struct Done<R> {
    results: Vec<Option<std::thread::Result<R>>>,
    missing: u64,
}

impl<F, P, R> Items for Batch<F, P, R>
where
    F: Fn(u64, P) -> R + Send + Sync,
    P: Copy + Send + Sync,
    R: Send,
{
    fn compute_next(&self) -> bool {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        if k >= self.end {
            return false;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.f)(k, self.with)));
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.results[(k - self.first) as usize] = Some(r);
        done.missing -= 1;
        if done.missing == 0 {
            self.all_done.notify_all();
        }
        true
    }
}

impl<F, P, R> Batch<F, P, R> {
    /// Every result, in order, once the last is in; a panic of an item resumed.
    fn results(&self) -> Vec<R> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while done.missing > 0 {
            done = self.all_done.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        std::mem::take(&mut done.results)
            .into_iter()
            .map(|r| match r.expect("every item computed") {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
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
    fn tasks_come_back_in_order_with_their_batches_helped() {
        // Task k sums its items 0..10k + k, batch by batch of 10 while a thread is idle.
        let sum = |k: u64, pool: &Pool<'_>| {
            let f = Arc::new(move |i: u64, add: u64| i + add);
            (0..k)
                .map(|b| {
                    if pool.has_idle() {
                        pool.run(&f, b * 10, 10, k).into_iter().sum::<u64>()
                    } else {
                        (b * 10..b * 10 + 10).map(|i| i + k).sum()
                    }
                })
                .sum::<u64>()
        };
        let expected: Vec<(u64, u64)> = (0..40).map(|k| (k, (0..10 * k).map(|i| i + k).sum())).collect();
        for jobs in [1, 2, 3, 16] {
            let mut seen = Vec::new();
            tasks(jobs, 40, sum, |k, r| seen.push((k, r)));
            assert_eq!(seen, expected, "{jobs} jobs");
        }
    }

    #[test]
    fn an_idle_thread_computes_items_of_a_drivers_batch() {
        use std::collections::HashSet;
        let threads = Mutex::new(HashSet::new());
        let both = Condvar::new();
        // Each item waits (10 s at most) until two threads have computed items: only a
        // helper taking items of the one batch lets that happen.
        let item = |_, ()| {
            let mut seen = threads.lock().unwrap();
            seen.insert(std::thread::current().id());
            let (seen, _) = both
                .wait_timeout_while(seen, std::time::Duration::from_secs(10), |s| s.len() < 2)
                .unwrap();
            both.notify_all();
            seen.len()
        };
        let f = Arc::new(item);
        let counts = Pool::with(2, |pool| {
            while !pool.has_idle() {
                std::thread::yield_now();
            }
            pool.run(&f, 0, 8, ())
        });
        assert!(counts.iter().all(|&n| n == 2), "{counts:?}");
    }

    #[test]
    fn panics_are_resumed_by_the_driver_and_the_caller() {
        let f = Arc::new(|k: u64, ()| assert_ne!(k, 7, "seven"));
        let in_batch = std::panic::catch_unwind(|| Pool::with(2, |pool| pool.run(&f, 0, 20, ())));
        assert!(in_batch.is_err());
        let in_task = std::panic::catch_unwind(|| in_order(2, 20, |k| assert_ne!(k, 7, "seven")));
        assert!(in_task.is_err());
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
