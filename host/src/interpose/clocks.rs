//! Sleeps and clocks in virtual time: on a simulated thread a sleep is a scheduling point
//! that lets the simulation's clock pass, and every clock but the CPU-time ones reads it (the
//! monotonic clocks from 1,000 s, as after a boot, the wall clock from
//! 2026-01-01T00:00:00Z), also while the run is set up (the library's `Initialize` reads the
//! run's start), so a clock never goes back. `poll` with a timeout waits in virtual time too, looking at its
//! descriptors without blocking.

use super::{original, CLOCK_GETTIME, CLOCK_NANOSLEEP, GETTIMEOFDAY, NANOSLEEP, POLL, SLEEP, TIME, USLEEP};
use corprof::os::Sync as _;
use sim_clr::process::{fiber, SimOs};
use std::ffi::{c_int, c_uint, c_void};
use std::time::Duration;

/// `struct timespec`.
#[repr(C)]
pub(super) struct Timespec {
    seconds: i64,
    nanoseconds: i64,
}

pub(super) unsafe extern "C-unwind" fn nanosleep(
    request: *const Timespec,
    remaining: *mut Timespec,
) -> c_int {
    if !fiber::on_fiber() || request.is_null() {
        type F = unsafe extern "C" fn(*const Timespec, *mut Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments (it reports
        // EFAULT for a NULL request itself).
        return unsafe { original::<F>(&NANOSLEEP)(request, remaining) };
    }
    // SAFETY: a non-NULL request points at a timespec the caller owns.
    SimOs::new().sleep(duration_of(unsafe { &*request }));
    if !remaining.is_null() {
        // SAFETY: a non-NULL `remaining` points at a timespec the caller owns.
        unsafe {
            *remaining = Timespec {
                seconds: 0,
                nanoseconds: 0,
            }
        };
    }
    0
}

/// Where the simulated clocks start: the monotonic clocks at 1,000 s (as after a boot), the
/// wall clock at 2026-01-01T00:00:00Z.
const MONOTONIC_START: Duration = Duration::from_secs(1_000);
pub(super) const REALTIME_START: Duration = Duration::from_secs(1_767_225_600);
/// `CLOCK_PROCESS_CPUTIME_ID` and `CLOCK_THREAD_CPUTIME_ID`: CPU time, not simulated.
const CPU_CLOCKS: [c_int; 2] = [2, 3];
/// `CLOCK_REALTIME` and its variants (`_COARSE`, `_ALARM`, `TAI`).
const REALTIME_CLOCKS: [c_int; 4] = [0, 5, 8, 11];

/// What simulated clock `clock` reads now: on a simulated thread, the run's virtual time;
/// while a run is set up (the library's `Initialize`), its start.
pub(super) fn simulated_clock(clock: c_int) -> Duration {
    let start = if REALTIME_CLOCKS.contains(&clock) {
        REALTIME_START
    } else {
        MONOTONIC_START
    };
    start
        + if fiber::on_fiber() {
            SimOs::new().now()
        } else {
            Duration::ZERO
        }
}

pub(super) unsafe extern "C-unwind" fn clock_gettime(clock: c_int, now: *mut Timespec) -> c_int {
    if !fiber::in_process() || now.is_null() || CPU_CLOCKS.contains(&clock) {
        type F = unsafe extern "C" fn(c_int, *mut Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&CLOCK_GETTIME)(clock, now) };
    }
    let t = simulated_clock(clock);
    // SAFETY: a non-NULL `now` points at the caller's timespec.
    unsafe {
        now.write(Timespec {
            seconds: t.as_secs() as i64,
            nanoseconds: t.subsec_nanos().into(),
        })
    };
    0
}

/// A `timespec` as a duration (negative fields count as zero).
pub(super) fn duration_of(t: &Timespec) -> Duration {
    Duration::from_secs(t.seconds.max(0) as u64) + Duration::from_nanos(t.nanoseconds.max(0) as u64)
}

pub(super) unsafe extern "C-unwind" fn usleep(microseconds: c_uint) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<unsafe extern "C" fn(c_uint) -> c_int>(&USLEEP)(microseconds) };
    }
    SimOs::new().sleep(Duration::from_micros(microseconds.into()));
    0
}

pub(super) unsafe extern "C-unwind" fn sleep(seconds: c_uint) -> c_uint {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<unsafe extern "C" fn(c_uint) -> c_uint>(&SLEEP)(seconds) };
    }
    SimOs::new().sleep(Duration::from_secs(seconds.into()));
    0
}

/// `TIMER_ABSTIME`: `clock_nanosleep`'s request is a deadline.
const TIMER_ABSTIME: c_int = 1;

pub(super) unsafe extern "C-unwind" fn clock_nanosleep(
    clock: c_int,
    flags: c_int,
    request: *const Timespec,
    remaining: *mut Timespec,
) -> c_int {
    if !fiber::on_fiber() || request.is_null() || CPU_CLOCKS.contains(&clock) {
        type F = unsafe extern "C" fn(c_int, c_int, *const Timespec, *mut Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&CLOCK_NANOSLEEP)(clock, flags, request, remaining) };
    }
    // SAFETY: a non-NULL request points at a timespec the caller owns.
    let request = duration_of(unsafe { &*request });
    let duration = if flags & TIMER_ABSTIME != 0 {
        request.saturating_sub(simulated_clock(clock))
    } else {
        request
    };
    SimOs::new().sleep(duration);
    0
}

/// `struct timeval`.
#[repr(C)]
pub(super) struct Timeval {
    seconds: i64,
    microseconds: i64,
}

pub(super) unsafe extern "C-unwind" fn gettimeofday(now: *mut Timeval, zone: *mut c_void) -> c_int {
    if !fiber::in_process() || now.is_null() {
        type F = unsafe extern "C" fn(*mut Timeval, *mut c_void) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&GETTIMEOFDAY)(now, zone) };
    }
    let t = simulated_clock(0);
    // SAFETY: a non-NULL `now` points at the caller's timeval.
    unsafe {
        now.write(Timeval {
            seconds: t.as_secs() as i64,
            microseconds: t.subsec_micros().into(),
        })
    };
    0
}

pub(super) unsafe extern "C-unwind" fn time(out: *mut i64) -> i64 {
    if !fiber::in_process() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<unsafe extern "C" fn(*mut i64) -> i64>(&TIME)(out) };
    }
    let seconds = simulated_clock(0).as_secs() as i64;
    if !out.is_null() {
        // SAFETY: a non-NULL `out` points at the caller's time_t.
        unsafe { out.write(seconds) };
    }
    seconds
}

/// How often a `poll` with a timeout looks at its descriptors again, in virtual time.
const POLL_STEP: Duration = Duration::from_millis(1);

pub(super) unsafe extern "C-unwind" fn poll(fds: *mut c_void, count: u64, timeout_ms: c_int) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void, u64, c_int) -> c_int;
    // SAFETY: the C library's own function.
    let real = unsafe { original::<F>(&POLL) };
    if !fiber::on_fiber() || timeout_ms == 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real(fds, count, timeout_ms) };
    }
    let os = SimOs::new();
    let deadline = (timeout_ms > 0).then(|| os.now() + Duration::from_millis(timeout_ms as u64));
    loop {
        if count > 0 {
            // SAFETY: the caller's descriptors, looked at without blocking.
            let ready = unsafe { real(fds, count, 0) };
            if ready != 0 {
                return ready;
            }
        }
        let step = match deadline {
            Some(at) => at
                .saturating_sub(os.now())
                .min(if count > 0 { POLL_STEP } else { Duration::MAX }),
            None => POLL_STEP,
        };
        if step.is_zero() {
            return 0;
        }
        os.sleep(step);
    }
}
