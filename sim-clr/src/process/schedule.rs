//! Schedules as data, and the strategies that choose them.
//!
//! At every step where more than one simulated thread can run, a [`Chooser`] picks one. The
//! picks, in order, are the [`Schedule`]: replaying them reproduces the run byte for byte, and
//! a shorter or edited schedule is still a valid one (once it runs out, the current thread
//! keeps running), which is what lets proptest shrink it.
//!
//! Strategies: [`Random`] (seeded), [`Pct`] (probabilistic concurrency testing with a depth
//! bound: random priorities and `depth − 1` priority-change points), [`Cover`] (random
//! choices steered towards the windows of [`crate::coverage`] earlier runs missed), and
//! [`Dfs`] (bounded exhaustive search with a preemption bound, for small programs), plus
//! [`Replay`].

use crate::coverage::Window;
use std::fmt;

/// A deterministic pseudo-random generator (SplitMix64): same seed, same sequence, on every
/// platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// The thread chosen at each step where several could run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule(pub Vec<u16>);

/// A schedule string that does not parse, or does not fit the scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad schedule: {}", self.0)
    }
}

impl std::error::Error for ScheduleError {}

impl fmt::Display for Schedule {
    /// Runs of one thread index, `.`-separated: `0x3.1.0x12` is thread 0 three times, thread 1
    /// once, thread 0 twelve times. The empty schedule is `-`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "-");
        }
        let mut first = true;
        for run in self.0.chunk_by(|a, b| a == b) {
            if !first {
                write!(f, ".")?;
            }
            first = false;
            match run.len() {
                1 => write!(f, "{}", run[0])?,
                n => write!(f, "{}x{n}", run[0])?,
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Schedule, ScheduleError> {
        let text = text.trim();
        if text == "-" {
            return Ok(Schedule::default());
        }
        let mut out = Vec::new();
        for part in text.split('.') {
            let (thread, count) = part.split_once('x').unwrap_or((part, "1"));
            let bad = || ScheduleError(format!("`{part}` is not `THREAD` or `THREADxCOUNT`"));
            let thread: u16 = thread.parse().map_err(|_| bad())?;
            let count: usize = count.parse().map_err(|_| bad())?;
            if count == 0 || out.len() + count > MAX_SCHEDULE {
                return Err(ScheduleError(format!(
                    "a schedule has 1 to {MAX_SCHEDULE} choices"
                )));
            }
            out.extend(std::iter::repeat_n(thread, count));
        }
        Ok(Schedule(out))
    }
}

/// The longest schedule accepted.
pub const MAX_SCHEDULE: usize = 1 << 24;

/// Picks the thread to run at a step where several can.
pub trait Chooser {
    /// Picks one of `runnable` (sorted, at least two). `current` is the thread that ran the
    /// previous step, if it is among them.
    fn choose(&mut self, runnable: &[usize], current: Option<usize>) -> Result<usize, ScheduleError>;

    /// Whether an `ICorProfilerInfo` call fails, in a run that injects failures
    /// ([`crate::process::Process::inject`]): a choice between 0 (it succeeds, as the
    /// current) and 1 (it fails), kept in the schedule as a thread pick is. By default
    /// [`Chooser::choose`] makes it, so DFS tries both (a failure spends a preemption) and a
    /// replay plays it back.
    fn fail(&mut self) -> Result<bool, ScheduleError> {
        Ok(self.choose(&[0, 1], Some(0))? == 1)
    }

    /// Whether the chooser wants to know, at each choice, where every thread stands
    /// ([`Hint`]); only then does the engine work it out.
    fn wants_hints(&self) -> bool {
        false
    }

    /// [`Chooser::choose`], told where every thread stands (`hints[t]` for thread `t`).
    fn choose_hinted(
        &mut self,
        runnable: &[usize],
        current: Option<usize>,
        _hints: &[Hint],
    ) -> Result<usize, ScheduleError> {
        self.choose(runnable, current)
    }
}

/// Where a thread stands at a choice, for a chooser that steers towards windows
/// ([`Chooser::wants_hints`], [`Cover`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hint {
    /// It runs profiler code that samples (a profiler thread).
    pub sampler: bool,
    /// A sampling round is under way on it: it suspended the runtime, stopped or walked a
    /// thread, and has not slept or waited with a deadline since.
    pub in_round: bool,
    /// A sampler in its round listed it (`EnumThreads`) and has not walked it since: should
    /// it end its life now, that sampler's next walk of it comes after its `ThreadDestroyed`.
    pub listed: bool,
    /// The windows a walk or stop of it would reach now (inside a callback, holding a lock).
    pub inside: Vec<String>,
    /// The windows its next step takes it into (an `exit`, a `lock`, a `spawn`, …).
    pub entering: Vec<String>,
}

/// Random choices steered towards windows ([`crate::coverage`]) earlier runs of the
/// exploration missed or rarely reached. While an application thread is inside such a window
/// (in its `ThreadDestroyed`, holding a lock), the profiler's threads are preferred, so that
/// one of them walks or stops it there; else, when an application thread is about to enter
/// one, it is held back until a profiler thread is in a sampling round, and then preferred
/// at half the choices (so that it enters the window at any point of the round, before or
/// after the sampler listed it), so that it enters the window when a sampler may catch it. A
/// thread that a sampler listed in its round and has not walked yet is hurried through its
/// exit and its `ThreadDestroyed` while walks after that callback are missed, so that the
/// sampler's walk of it comes after it (the walk a profiler must never make). Other choices are [`Biased`]'s.
/// A window steers until a sixteenth of the runs so far have reached it. Deterministic: the
/// same seed and the same earlier runs give the same choices.
#[derive(Debug)]
pub struct Cover {
    rng: Rng,
    base: Biased,
    /// How many earlier runs reached each window.
    reached: std::collections::BTreeMap<String, u64>,
    /// The runs a window must have been reached in to stop steering.
    enough: u64,
}

impl Cover {
    /// Choices from `rng` for a process whose profiler threads are `marked`, after `runs`
    /// earlier runs that reached each window of `reached` in that many runs.
    pub fn new(
        mut rng: Rng,
        marked: Vec<bool>,
        reached: std::collections::BTreeMap<String, u64>,
        runs: u64,
    ) -> Cover {
        let base = Biased::new(Rng::new(rng.next_u64()), marked);
        Cover {
            rng,
            base,
            reached,
            enough: (runs / 16).max(1),
        }
    }

    /// Whether one of `windows` still steers: reached in too few earlier runs.
    fn steers(&self, windows: &[String]) -> bool {
        (windows.iter()).any(|w| self.reached.get(w).is_none_or(|&n| n < self.enough))
    }

    /// True with odds `n` in 8.
    fn odds(&mut self, n: usize) -> bool {
        self.rng.below(8) < n
    }

    fn any_of(&mut self, threads: &[usize]) -> usize {
        threads[self.rng.below(threads.len())]
    }
}

impl Chooser for Cover {
    fn choose(&mut self, runnable: &[usize], current: Option<usize>) -> Result<usize, ScheduleError> {
        self.base.choose(runnable, current)
    }

    fn fail(&mut self) -> Result<bool, ScheduleError> {
        Ok(self.rng.below(FAIL_ODDS) == 0)
    }

    fn wants_hints(&self) -> bool {
        true
    }

    fn choose_hinted(
        &mut self,
        runnable: &[usize],
        current: Option<usize>,
        hints: &[Hint],
    ) -> Result<usize, ScheduleError> {
        let sampler = |t: usize| hints.get(t).is_some_and(|h| h.sampler);
        let samplers: Vec<usize> = runnable.iter().copied().filter(|&t| sampler(t)).collect();
        let open: Vec<usize> = (0..hints.len())
            .filter(|&t| !hints[t].sampler && self.steers(&hints[t].inside))
            .collect();
        let entering: Vec<usize> = (runnable.iter().copied())
            .filter(|&t| !sampler(t) && hints.get(t).is_some_and(|h| self.steers(&h.entering)))
            .collect();
        let after_destroyed = [Window::AfterThreadDestroyed.as_str().to_string()];
        if self.steers(&after_destroyed) {
            let destroyed = Window::InsideThreadDestroyed.as_str();
            let dying: Vec<usize> = (runnable.iter().copied())
                .filter(|&t| {
                    let h = &hints[t];
                    h.listed && !h.sampler && (h.inside.iter().chain(&h.entering)).any(|w| w == destroyed)
                })
                .collect();
            if !dying.is_empty() && self.odds(6) {
                return Ok(self.any_of(&dying));
            }
        }
        if !open.is_empty() {
            // Keep the thread inside its window while a sampler can reach it.
            let others: Vec<usize> = (runnable.iter().copied())
                .filter(|&t| !sampler(t) && !open.contains(&t))
                .collect();
            if !samplers.is_empty() && self.odds(7) {
                return Ok(self.any_of(&samplers));
            }
            if !others.is_empty() && self.odds(5) {
                return Ok(self.any_of(&others));
            }
        }
        if !entering.is_empty() {
            let round = hints.iter().any(|h| h.sampler && h.in_round);
            if round && self.odds(2) {
                return Ok(self.any_of(&entering));
            }
            let waiting: Vec<usize> = (runnable.iter().copied())
                .filter(|t| !entering.contains(t))
                .collect();
            if !round && !waiting.is_empty() && self.odds(6) {
                // No round is under way yet: let the others go first.
                return Ok(self.any_of(&waiting));
            }
        }
        self.base.choose(runnable, current)
    }
}

/// Random strategies fail one injectable call in this many.
pub const FAIL_ODDS: usize = 32;

/// Uniformly random choices from a seed.
#[derive(Debug)]
pub struct Random(pub Rng);

impl Chooser for Random {
    fn choose(&mut self, runnable: &[usize], _: Option<usize>) -> Result<usize, ScheduleError> {
        Ok(runnable[self.0.below(runnable.len())])
    }

    fn fail(&mut self) -> Result<bool, ScheduleError> {
        Ok(self.0.below(FAIL_ODDS) == 0)
    }
}

/// Random choices between two sides of the process with odds drawn once per run: at a step
/// where threads of both sides can run, the marked side runs with probability `p` (drawn
/// uniformly from `0..1` when the chooser is made), then one of that side's runnable threads
/// is picked uniformly. With the profiler's threads marked, some runs let the application race
/// ahead and others let a profiler whose start-up takes many steps sample applications whose
/// threads finish in few (under [`Random`], one thread among five runs a fifth of the steps
/// in every run).
#[derive(Debug)]
pub struct Biased {
    rng: Rng,
    marked: Vec<bool>,
    /// `p` in units of 2⁻³².
    odds: u64,
}

impl Biased {
    /// Choices from `rng`; `marked[t]` says whether thread `t` is on the marked side (a thread
    /// past its end is not).
    pub fn new(mut rng: Rng, marked: Vec<bool>) -> Biased {
        let odds = rng.next_u64() >> 32;
        Biased { rng, marked, odds }
    }
}

impl Chooser for Biased {
    fn choose(&mut self, runnable: &[usize], _: Option<usize>) -> Result<usize, ScheduleError> {
        let on = |t: &usize| self.marked.get(*t).copied().unwrap_or(false);
        let marked = runnable.iter().filter(|t| on(t)).count();
        let pick = if marked == 0 || marked == runnable.len() {
            runnable[self.rng.below(runnable.len())]
        } else {
            let want = (self.rng.next_u64() >> 32) < self.odds;
            let n = if want { marked } else { runnable.len() - marked };
            let k = self.rng.below(n);
            *runnable
                .iter()
                .filter(|t| on(t) == want)
                .nth(k)
                .expect("k is below the side's count")
        };
        Ok(pick)
    }

    fn fail(&mut self) -> Result<bool, ScheduleError> {
        Ok(self.rng.below(FAIL_ODDS) == 0)
    }
}

/// PCT: each thread gets a random distinct priority; the highest-priority runnable thread
/// runs; at `depth − 1` random choice points the running thread drops below all others. A bug
/// of depth `d` among `n` threads and `k` steps is found with probability at least
/// `1 / (n · k^(d−1))` per run.
#[derive(Debug)]
pub struct Pct {
    priority: Vec<u64>,
    changes: Vec<usize>,
    step: usize,
    /// Decides injected failures ([`Chooser::fail`]).
    rng: Rng,
}

impl Pct {
    /// A PCT run for `threads` threads, `depth` ≥ 1 and an expected `steps` choice points.
    pub fn new(rng: &mut Rng, threads: usize, depth: u32, steps: usize) -> Pct {
        let depth = depth.max(1) as usize;
        let mut priority: Vec<u64> = (0..threads as u64).map(|i| depth as u64 + i).collect();
        for i in (1..priority.len()).rev() {
            priority.swap(i, rng.below(i + 1));
        }
        let mut changes: Vec<usize> = (1..depth).map(|_| rng.below(steps.max(1))).collect();
        changes.sort_unstable();
        Pct {
            priority,
            changes,
            step: 0,
            rng: Rng::new(rng.next_u64()),
        }
    }
}

impl Chooser for Pct {
    fn choose(&mut self, runnable: &[usize], _: Option<usize>) -> Result<usize, ScheduleError> {
        let best = |p: &[u64]| {
            *runnable
                .iter()
                .max_by_key(|&&t| p.get(t).copied().unwrap_or(0))
                .expect("at least two runnable threads")
        };
        let mut pick = best(&self.priority);
        // A change point lowers the running thread below every initial priority (those are
        // at least `depth`; the lowered ones count down from `depth − 2`).
        while let Some(&at) = self.changes.first() {
            if at > self.step {
                break;
            }
            self.changes.remove(0);
            if let Some(p) = self.priority.get_mut(pick) {
                *p = self.changes.len() as u64;
            }
            pick = best(&self.priority);
        }
        self.step += 1;
        Ok(pick)
    }

    fn fail(&mut self) -> Result<bool, ScheduleError> {
        Ok(self.rng.below(FAIL_ODDS) == 0)
    }
}

/// Plays back a recorded schedule. Strict replay fails when a choice names a thread that
/// cannot run; lenient replay (for shrinking) picks the current or lowest runnable thread
/// instead. Once the schedule runs out, the current thread keeps running when it can.
#[derive(Debug)]
pub struct Replay {
    choices: Vec<u16>,
    at: usize,
    strict: bool,
}

impl Replay {
    /// Replays `schedule`.
    pub fn new(schedule: &Schedule, strict: bool) -> Replay {
        Replay {
            choices: schedule.0.clone(),
            at: 0,
            strict,
        }
    }
}

impl Chooser for Replay {
    fn choose(&mut self, runnable: &[usize], current: Option<usize>) -> Result<usize, ScheduleError> {
        let fallback = current.unwrap_or(runnable[0]);
        let Some(&want) = self.choices.get(self.at) else {
            if self.strict {
                return Err(ScheduleError(format!(
                    "the schedule ends after {} choices but the run goes on",
                    self.at
                )));
            }
            return Ok(fallback);
        };
        self.at += 1;
        if runnable.contains(&(want as usize)) {
            return Ok(want as usize);
        }
        if self.strict {
            return Err(ScheduleError(format!(
                "choice {} picks thread {want}, which cannot run then (runnable: {runnable:?})",
                self.at
            )));
        }
        Ok(fallback)
    }
}

/// Bounded exhaustive search: run after run, a depth-first walk of the tree of choices,
/// continuing the current thread first and allowing at most `preemptions` switches away from
/// a thread that could have continued.
#[derive(Debug)]
pub struct Dfs {
    nodes: Vec<Node>,
    depth: usize,
    preemptions: u32,
    used: u32,
    runs: u64,
}

#[derive(Debug)]
struct Node {
    options: Vec<usize>,
    index: usize,
    /// Preemptions spent before this choice.
    before: u32,
    /// The thread that ran the previous step, if it could continue.
    current: Option<usize>,
}

impl Dfs {
    /// A search allowing `preemptions` preemptions per run.
    pub fn new(preemptions: u32) -> Dfs {
        Dfs {
            nodes: Vec::new(),
            depth: 0,
            preemptions,
            used: 0,
            runs: 0,
        }
    }

    /// Prepares the next run; false once every schedule within the bound has run.
    pub fn next_run(&mut self) -> bool {
        if self.runs > 0 {
            // Backtrack: the deepest node with an untried option advances.
            self.nodes.truncate(self.depth);
            while let Some(node) = self.nodes.last_mut() {
                if node.index + 1 < node.options.len() {
                    node.index += 1;
                    break;
                }
                self.nodes.pop();
            }
            if self.nodes.is_empty() {
                return false;
            }
        }
        self.runs += 1;
        self.depth = 0;
        self.used = 0;
        true
    }
}

impl Chooser for Dfs {
    fn choose(&mut self, runnable: &[usize], current: Option<usize>) -> Result<usize, ScheduleError> {
        if self.depth == self.nodes.len() {
            let mut options: Vec<usize> = current.into_iter().collect();
            if current.is_none() || self.used < self.preemptions {
                options.extend(runnable.iter().copied().filter(|&t| Some(t) != current));
            }
            self.nodes.push(Node {
                options,
                index: 0,
                before: self.used,
                current,
            });
        }
        let node = &self.nodes[self.depth];
        let pick = node.options[node.index];
        self.used = node.before + u32::from(node.current.is_some_and(|c| c != pick));
        self.depth += 1;
        Ok(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_round_trip_through_their_string() {
        for s in [vec![], vec![0], vec![0, 0, 0, 1, 0, 2, 2], vec![7; 40]] {
            let schedule = Schedule(s);
            let text = schedule.to_string();
            assert_eq!(text.parse::<Schedule>().unwrap(), schedule, "{text}");
        }
        assert_eq!(Schedule(vec![0, 0, 0, 1]).to_string(), "0x3.1");
        for bad in ["", "x", "1x", "1x0", "a.b", "1..2", "0x99999999999"] {
            assert!(bad.parse::<Schedule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn biased_choices_give_the_marked_side_odds_drawn_per_run() {
        // One marked thread among five: uniform choices pick it a fifth of the time; biased
        // ones as often as the other side on average over runs, and rarely or mostly in one.
        let runnable = [0, 1, 2, 3, 4];
        let marked = vec![true, false, false, false, false];
        let mut first_picks = 0;
        let mut shares = Vec::new();
        for seed in 0..2000 {
            let mut chooser = Biased::new(Rng::new(seed), marked.clone());
            let picks: Vec<usize> = (0..100)
                .map(|_| chooser.choose(&runnable, None).unwrap())
                .collect();
            first_picks += usize::from(picks[0] == 0);
            shares.push(picks.iter().filter(|&&t| t == 0).count());
        }
        assert!((800..1200).contains(&first_picks), "{first_picks}");
        assert!(shares.iter().any(|&s| s < 10) && shares.iter().any(|&s| s > 90));
        // Without both sides runnable, the choice is uniform among the runnable.
        let mut chooser = Biased::new(Rng::new(1), marked);
        let picks: Vec<usize> = (0..400).map(|_| chooser.choose(&[1, 2], None).unwrap()).collect();
        assert!(picks.contains(&1) && picks.contains(&2));
    }

    /// Every run `dfs` makes of two threads of two steps each, as the order threads ran in.
    fn interleavings(mut dfs: Dfs) -> Vec<Vec<usize>> {
        let mut runs = Vec::new();
        while dfs.next_run() {
            let mut left = [2, 2];
            let mut order: Vec<usize> = Vec::new();
            while left.iter().any(|&n| n > 0) {
                let runnable: Vec<usize> = (0..2).filter(|&t| left[t] > 0).collect();
                let current = order.last().copied().filter(|c| runnable.contains(c));
                let pick = match runnable[..] {
                    [only] => only,
                    _ => dfs.choose(&runnable, current).unwrap(),
                };
                left[pick] -= 1;
                order.push(pick);
            }
            runs.push(order);
        }
        runs
    }

    #[test]
    fn dfs_enumerates_every_interleaving_of_two_two_step_threads() {
        // C(4,2) = 6 interleavings, all within 3 preemptions, each once.
        let runs = interleavings(Dfs::new(3));
        let distinct: std::collections::BTreeSet<_> = runs.iter().collect();
        assert_eq!((runs.len(), distinct.len()), (6, 6), "{runs:?}");
        // With no preemption allowed only the two serial orders remain.
        assert_eq!(interleavings(Dfs::new(0)), [vec![0, 0, 1, 1], vec![1, 1, 0, 0]]);
    }

    #[test]
    fn replay_follows_then_keeps_the_current_thread() {
        let mut r = Replay::new(&Schedule(vec![1, 0]), false);
        assert_eq!(r.choose(&[0, 1], None).unwrap(), 1);
        assert_eq!(r.choose(&[0, 1], Some(1)).unwrap(), 0);
        assert_eq!(r.choose(&[0, 1], Some(1)).unwrap(), 1);
        let mut strict = Replay::new(&Schedule(vec![5]), true);
        assert!(strict.choose(&[0, 1], None).is_err());
    }

    #[test]
    fn pct_is_deterministic_per_seed() {
        let picks = |seed| {
            let mut rng = Rng::new(seed);
            let mut pct = Pct::new(&mut rng, 3, 3, 20);
            (0..20)
                .map(|_| pct.choose(&[0, 1, 2], None).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(4), picks(4));
        assert!((0..20).any(|s| picks(s) != picks(0)));
    }
}
