//! Shrinking a failing schedule to a shorter one with the same outcome.
//!
//! A schedule is a list of runs of one thread (`0x5.1x2.0x9`). Each attempt drops one run,
//! or halves it, and replays the result leniently: a choice that names a thread that cannot
//! run then falls back to the thread that ran last, and after the end of the list the
//! current thread keeps running. An attempt is kept when the run ends with the same outcome
//! and the schedule it actually took has fewer runs (fewer thread switches) or, with as many
//! runs, fewer choices. The result is that actual schedule: it replays strictly.

use super::schedule::{Replay, Schedule};
use super::{Process, RunReport};

/// The shortest schedule found within `budget` replays that ends `outcome` like `schedule`
/// does, with its run; `None` if `schedule` itself does not end that way.
pub fn shrink(
    process: &Process,
    schedule: &Schedule,
    outcome: &str,
    budget: usize,
) -> Option<(Schedule, RunReport)> {
    let replay = |s: &Schedule| process.run_untraced(&mut Replay::new(s, false)).ok();
    let first = replay(schedule).filter(|r| r.outcome == outcome)?;
    let mut best = (actual(&first), first);
    let mut tries = 0;
    let mut improved = true;
    while improved && tries < budget {
        improved = false;
        let runs = runs(&best.0);
        for k in (0..runs.len()).rev() {
            for candidate in [Some(drop_run(&runs, k)), halve_run(&runs, k)]
                .into_iter()
                .flatten()
            {
                if tries >= budget {
                    break;
                }
                tries += 1;
                let Some(run) = replay(&candidate).filter(|r| r.outcome == outcome) else {
                    continue;
                };
                let taken = actual(&run);
                if size(&taken) < size(&best.0) {
                    best = (taken, run);
                    improved = true;
                    break;
                }
            }
            if improved {
                break;
            }
        }
    }
    Some(best)
}

/// The schedule a run took.
fn actual(run: &RunReport) -> Schedule {
    run.schedule.parse().unwrap_or_default()
}

/// (thread switches, choices): what shrinking makes smaller.
fn size(s: &Schedule) -> (usize, usize) {
    (s.0.chunk_by(|a, b| a == b).count(), s.0.len())
}

/// The schedule as runs of one thread: (thread, length).
fn runs(s: &Schedule) -> Vec<(u16, usize)> {
    s.0.chunk_by(|a, b| a == b).map(|r| (r[0], r.len())).collect()
}

fn join(runs: impl IntoIterator<Item = (u16, usize)>) -> Schedule {
    Schedule(
        runs.into_iter()
            .flat_map(|(t, n)| std::iter::repeat_n(t, n))
            .collect(),
    )
}

/// Without run `k`.
fn drop_run(runs: &[(u16, usize)], k: usize) -> Schedule {
    join(runs.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, &r)| r))
}

/// With run `k` half as long (none for a run of one).
fn halve_run(runs: &[(u16, usize)], k: usize) -> Option<Schedule> {
    (runs[k].1 > 1).then(|| {
        join(
            runs.iter()
                .enumerate()
                .map(|(i, &(t, n))| (t, if i == k { n / 2 } else { n })),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_drop_and_halve() {
        let s: Schedule = "0x4.1.0x2".parse().unwrap();
        let r = runs(&s);
        assert_eq!(r, [(0, 4), (1, 1), (0, 2)]);
        assert_eq!(drop_run(&r, 1).to_string(), "0x6");
        assert_eq!(halve_run(&r, 0).unwrap().to_string(), "0x2.1.0x2");
        assert!(halve_run(&r, 1).is_none());
        assert_eq!(size(&s), (3, 7));
    }
}
