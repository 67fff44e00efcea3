//! The watchdog: a second profiler thread that rescues a target the sampler has kept
//! suspended too long.
//!
//! A sampler can block while its target is suspended, on a lock the target holds: the OS's
//! function-table lock, the runtime's code-manager lock, the heap lock. Nothing the sampler
//! does can end that wait. The watchdog ticks on the clock; when one suspension has lasted
//! longer than the threshold (500 ms), it resumes the target itself. The sampler then
//! discards the sample and does not resume the target a second time: a hand-off through one
//! atomic state decides which of the two resumes it, so suspend counts always balance.
//!
//! Budgets, within each period (30 s): a thread rescued 5 times is skipped, and after 12
//! rescues in all, every thread is.

use super::registry::Tracked;
use corprof::os::OsThread;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// The watchdog's thresholds and budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchdogConfig {
    /// A suspension longer than this is rescued.
    pub threshold: Duration,
    /// How often the watchdog looks.
    pub tick: Duration,
    /// Rescues of one thread, per period, after which it is skipped.
    pub per_thread: u32,
    /// Rescues in all, per period, after which every thread is skipped.
    pub total: u32,
    /// The budget period.
    pub period: Duration,
}

impl Default for WatchdogConfig {
    fn default() -> WatchdogConfig {
        WatchdogConfig {
            threshold: Duration::from_millis(500),
            tick: Duration::from_millis(100),
            per_thread: 5,
            total: 12,
            period: Duration::from_secs(30),
        }
    }
}

const IDLE: u8 = 0;
const ACTIVE: u8 = 1;
const RESCUED: u8 = 2;

/// The suspension in progress, shared by the sampler and the watchdog.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    state: AtomicU8,
    target: AtomicU32,
    since_us: AtomicU64,
    /// Rescues in period `period`.
    total: AtomicU32,
    period: AtomicU64,
    /// The watchdog's own thread (0 until it starts).
    pub(crate) thread: AtomicU32,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Watch {
    /// The budget period `now` falls in.
    fn period_of(config: &WatchdogConfig, now: Duration) -> u64 {
        micros(now) / micros(config.period).max(1)
    }

    /// Whether the budgets allow sampling `target` now.
    pub(crate) fn allows(&self, config: &WatchdogConfig, target: &Tracked, now: Duration) -> bool {
        let period = Watch::period_of(config, now);
        let total = if self.period.load(Ordering::Acquire) == period {
            self.total.load(Ordering::Acquire)
        } else {
            0
        };
        total < config.total && target.interventions(period) < config.per_thread
    }

    /// The sampler is about to suspend `target`.
    pub(crate) fn begin(&self, target: OsThread, now: Duration) {
        self.target.store(target.0, Ordering::Release);
        self.since_us.store(micros(now), Ordering::Release);
        self.state.store(ACTIVE, Ordering::Release);
    }

    /// Whether the watchdog has resumed the target of the suspension in progress.
    pub(crate) fn rescued(&self) -> bool {
        self.state.load(Ordering::Acquire) == RESCUED
    }

    /// The sampler is done with the target: true if the sampler must resume it itself (the
    /// watchdog has not). A rescue is counted against `target`'s budget.
    pub(crate) fn end(&self, config: Option<&WatchdogConfig>, target: &Tracked, now: Duration) -> bool {
        if self
            .state
            .compare_exchange(ACTIVE, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return true;
        }
        self.state.store(IDLE, Ordering::Release);
        if let Some(config) = config {
            target.intervened(Watch::period_of(config, now));
        }
        false
    }

    /// One watchdog tick at `now`: the target to resume, if the suspension in progress has
    /// lasted past the threshold (the hand-off is taken: the sampler will not resume it).
    pub(crate) fn check(&self, config: &WatchdogConfig, now: Duration) -> Option<OsThread> {
        if self.state.load(Ordering::Acquire) != ACTIVE
            || micros(now).saturating_sub(self.since_us.load(Ordering::Acquire)) < micros(config.threshold)
        {
            return None;
        }
        self.state
            .compare_exchange(ACTIVE, RESCUED, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let period = Watch::period_of(config, now);
        if self.period.swap(period, Ordering::AcqRel) != period {
            self.total.store(0, Ordering::Release);
        }
        self.total.fetch_add(1, Ordering::AcqRel);
        Some(OsThread(self.target.load(Ordering::Acquire)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corprof::ThreadId;

    fn tracked() -> std::sync::Arc<Tracked> {
        let registry = super::super::Registry::default();
        let os = corprof::os::StdSync::default();
        registry.add(&os, ThreadId(1), Some(OsThread(5)), true);
        registry.get(&os, ThreadId(1)).expect("just added")
    }

    #[test]
    fn exactly_one_side_resumes() {
        let config = WatchdogConfig::default();
        let watch = Watch::default();
        let t = tracked();
        let ms = Duration::from_millis;
        // The sampler finishes in time: it resumes, the watchdog has nothing to do.
        watch.begin(OsThread(5), ms(0));
        assert_eq!(watch.check(&config, ms(499)), None);
        assert!(watch.end(Some(&config), &t, ms(499)));
        assert_eq!(watch.check(&config, ms(10_000)), None);
        // The sampler is stuck: the watchdog resumes once, the sampler must not.
        watch.begin(OsThread(5), ms(1000));
        assert_eq!(watch.check(&config, ms(1500)), Some(OsThread(5)));
        assert_eq!(watch.check(&config, ms(1600)), None, "only once");
        assert!(watch.rescued());
        assert!(!watch.end(Some(&config), &t, ms(1700)));
        assert_eq!(t.interventions(0), 1);
    }

    #[test]
    fn budgets_skip_a_thread_then_everyone() {
        let config = WatchdogConfig {
            per_thread: 2,
            total: 3,
            ..WatchdogConfig::default()
        };
        let watch = Watch::default();
        let t = tracked();
        let ms = Duration::from_millis;
        for i in 0..2 {
            assert!(watch.allows(&config, &t, ms(i * 1000)));
            watch.begin(OsThread(5), ms(i * 1000));
            watch.check(&config, ms(i * 1000 + 600)).unwrap();
            watch.end(Some(&config), &t, ms(i * 1000 + 700));
        }
        assert!(!watch.allows(&config, &t, ms(5000)), "two rescues of this thread");
        assert!(watch.allows(&config, &t, ms(31_000)), "a new period");
    }
}
