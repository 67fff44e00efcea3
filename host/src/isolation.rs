//! Every run in a worker process of its own, so that nothing a hosted library does (a
//! segmentation fault, `std::terminate`, a C++ exception thrown through simclr's frames, a
//! call that blocks outside the simulation) ends anything but that run.
//!
//! For each run this process forks. The worker loads the library afresh (the first copy its
//! process ever maps, so a static libstdc++, its `STB_GNU_UNIQUE` symbols, its thread-local
//! storage and its constructors start as in a new process), runs the schedule, writes the
//! run's report down a pipe and exits without unwinding or destroying anything. Meanwhile it
//! records every scheduling choice (the threads that could run, the one chosen) in memory it
//! shares with this process, so that:
//!
//! - this process's chooser makes the same choices afterwards and ends as the worker's did
//!   (choosers are deterministic): PCT learns, DFS backtracks, as in one process;
//! - a worker that dies leaves the schedule it took up to its death: the run's report is
//!   `profiler_crash` (the signal, what the worker wrote to stderr, the library's frames at
//!   the fault) or, when no report arrives within the wall-clock timeout, `profiler_hang`,
//!   and its schedule replays the failure.

use sim_clr::process::schedule::{Chooser, Hint, Schedule, ScheduleError};
use sim_clr::process::{Isolation, RunFault, RunReport};
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The default wall-clock time a run may take before it is `profiler_hang`.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether workers send the library's standard output to their standard error
/// ([`library_stdout_to_stderr`]).
static STDOUT_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, what a hosted library writes to standard output in a worker goes to this
/// process's standard error instead (after its run), as its standard error always does: for
/// a caller whose own standard output is a document (`--json`) that the library's `printf`
/// must not break.
pub fn library_stdout_to_stderr() {
    STDOUT_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Runs in forked workers ([`Isolation`]).
#[derive(Debug)]
pub struct Forked {
    library: PathBuf,
    timeout: Duration,
    record: Record,
}

impl Forked {
    /// Workers for runs of `library` (whose frames a crash report names), each run given
    /// `timeout` of wall-clock time.
    pub fn new(library: &Path, timeout: Duration) -> Result<Forked, String> {
        Ok(Forked {
            library: library.to_path_buf(),
            timeout,
            record: Record::map()?,
        })
    }

    /// Runs `f` in a worker and returns what it returned, or how the worker died.
    pub fn call<T, F>(&self, f: F) -> Result<T, Death>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: FnOnce() -> T,
    {
        in_worker(self.timeout, f).map(|(result, _stderr)| result)
    }
}

impl Isolation for Forked {
    fn run(
        &self,
        run: &dyn Fn(&mut dyn Chooser) -> Result<RunReport, ScheduleError>,
        chooser: &mut dyn Chooser,
    ) -> Result<RunReport, ScheduleError> {
        self.record.clear();
        let ended = in_worker(self.timeout, || {
            sim_clr::process::fiber::abandon_at_end();
            IN_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
            let mut recording = Recording {
                inner: &mut *chooser,
                record: &self.record,
            };
            run(&mut recording).map_err(|e| e.0)
        });
        let choices = self.record.replay_into(chooser)?;
        match ended {
            Ok((report, stderr)) => {
                eprint!("{stderr}");
                report.map_err(ScheduleError)
            }
            Err(death) => Ok(died(&self.library, death, choices)),
        }
    }
}

/// How a worker ended without a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Killed by this signal.
    Signal(i32),
    /// Exited with this status (without writing a result).
    Exited(i32),
    /// Still running after the timeout (then killed).
    TimedOut(Duration),
}

/// A worker that gave no result: how it ended and what it wrote to stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// How.
    pub how: Ending,
    /// Its standard error.
    pub stderr: String,
}

/// The report of a run whose worker died: `profiler_crash` or `profiler_hang`, with the
/// schedule taken up to the death.
fn died(library: &Path, death: Death, choices: Vec<u16>) -> RunReport {
    let name = library.file_name().map_or_else(
        || library.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let frames = library_frames(&death.stderr, &name);
    let said: Vec<&str> = death
        .stderr
        .lines()
        .filter(|l| !l.is_empty() && !is_backtrace_line(l))
        .collect();
    let said = said[said.len().saturating_sub(4)..].join(" | ");
    let (kind, what) = match death.how {
        Ending::Signal(signal) => (
            "profiler_crash",
            format!("the run died of {} (signal {signal})", signal_name(signal)),
        ),
        Ending::Exited(status) => (
            "profiler_crash",
            format!("the run's process exited with status {status} before the run ended"),
        ),
        Ending::TimedOut(after) => (
            "profiler_hang",
            format!(
                "the run made no progress for {} s of wall-clock time: a call blocked outside the simulation",
                after.as_secs_f64()
            ),
        ),
    };
    let mut message = what;
    if !frames.is_empty() {
        message += &format!("; in {name}: {}", frames.join(" ← "));
    }
    if !said.is_empty() {
        message += &format!("; stderr: {said}");
    }
    RunReport {
        schedule: Schedule(choices.clone()).to_string(),
        outcome: kind.to_string(),
        fault: Some(RunFault {
            kind: kind.to_string(),
            message,
            cycle: Vec::new(),
        }),
        warnings: Vec::new(),
        choice_points: choices.len() as u64,
        steps: 0,
        time_us: 0,
        stops: 0,
        hazards: Default::default(),
        coverage: Default::default(),
        trace: Vec::new(),
        timeline: None,
    }
}

/// A line `backtrace_symbols_fd` wrote: `path(symbol+0x1f)[0x…]`.
fn is_backtrace_line(line: &str) -> bool {
    line.ends_with(']') && line.contains(")[0x")
}

/// The symbols of the frames in `library` (file name `name`) of the backtrace in `stderr`,
/// innermost first.
fn library_frames(stderr: &str, name: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| is_backtrace_line(l) && l.contains(name))
        .map(|l| {
            let symbol = l
                .split_once('(')
                .and_then(|(_, rest)| rest.split_once(')'))
                .map(|(inside, _)| inside.split('+').next().unwrap_or(""))
                .unwrap_or("");
            if symbol.is_empty() {
                "?".to_string()
            } else {
                symbol.to_string()
            }
        })
        .collect()
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTRAP => "SIGTRAP",
        _ => "a signal",
    }
}

/// A chooser whose every choice is also written to the shared record.
struct Recording<'a> {
    inner: &'a mut dyn Chooser,
    record: &'a Record,
}

impl Chooser for Recording<'_> {
    fn choose(&mut self, runnable: &[usize], current: Option<usize>) -> Result<usize, ScheduleError> {
        let choice = self.inner.choose(runnable, current)?;
        self.record.push(runnable, current, choice);
        Ok(choice)
    }

    fn fail(&mut self) -> Result<bool, ScheduleError> {
        let fails = self.inner.fail()?;
        self.record.push(&[], None, usize::from(fails));
        Ok(fails)
    }

    fn wants_hints(&self) -> bool {
        self.inner.wants_hints()
    }

    fn choose_hinted(
        &mut self,
        runnable: &[usize],
        current: Option<usize>,
        hints: &[Hint],
    ) -> Result<usize, ScheduleError> {
        let choice = self.inner.choose_hinted(runnable, current, hints)?;
        self.record.push(runnable, current, choice);
        Ok(choice)
    }
}

/// Memory shared with the workers: a count of `u16` words, then entries of the choices made,
/// each `n, runnable[n], current (NONE: none), choice`; an entry with no runnable thread is a
/// failure decision ([`Chooser::fail`]: 1, the call fails).
#[derive(Debug)]
struct Record {
    base: *mut u64,
}

// SAFETY: the mapping lives as long as the record; one worker writes it at a time, and this
// process reads it only once that worker has ended.
unsafe impl Send for Record {}
unsafe impl Sync for Record {}

/// Room for the choices of one run, in `u16` words (the pages are touched only as used).
const RECORD_WORDS: usize = 32 << 20;
const NONE: u16 = u16::MAX;
const OVERFLOW: u64 = u64::MAX;

impl Record {
    fn map() -> Result<Record, String> {
        let bytes = 8 + RECORD_WORDS * 2;
        // SAFETY: an anonymous shared mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map memory to share with the run's worker: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Record { base: base.cast() })
    }

    fn words(&self) -> *mut u16 {
        // SAFETY: the words follow the count, inside the mapping.
        unsafe { self.base.add(1).cast() }
    }

    fn len(&self) -> u64 {
        // SAFETY: inside the mapping; volatile, as another process wrote it.
        unsafe { self.base.read_volatile() }
    }

    fn clear(&self) {
        // SAFETY: inside the mapping.
        unsafe { self.base.write_volatile(0) }
    }

    /// Appends one choice (in the worker).
    fn push(&self, runnable: &[usize], current: Option<usize>, choice: usize) {
        let len = self.len();
        if len == OVERFLOW {
            return;
        }
        let entry = std::iter::once(runnable.len())
            .chain(runnable.iter().copied())
            .chain([current.map_or(NONE as usize, |c| c), choice]);
        let need = runnable.len() + 3;
        if len as usize + need > RECORD_WORDS {
            // SAFETY: inside the mapping.
            unsafe { self.base.write_volatile(OVERFLOW) };
            return;
        }
        for (i, word) in entry.enumerate() {
            // SAFETY: `len + need <= RECORD_WORDS` words fit.
            unsafe { self.words().add(len as usize + i).write_volatile(word as u16) };
        }
        // SAFETY: inside the mapping; the count last, so a dying worker leaves whole entries.
        unsafe { self.base.write_volatile(len + need as u64) };
    }

    /// Makes `chooser` take the recorded choices (after the worker ended); the choices. A
    /// chooser steered by where the threads stood ([`Chooser::wants_hints`]) cannot choose
    /// again without them here; it is made for one run and dropped after it, so it is only
    /// told nothing and the choices are returned.
    fn replay_into(&self, chooser: &mut dyn Chooser) -> Result<Vec<u16>, ScheduleError> {
        let len = self.len();
        if len == OVERFLOW {
            return Err(ScheduleError(format!(
                "the run made more scheduling choices than {RECORD_WORDS} words of record hold"
            )));
        }
        // SAFETY: the worker has ended; `len` words were written.
        let words = unsafe { std::slice::from_raw_parts(self.words(), len as usize) };
        let mut choices = Vec::new();
        let mut runnable = Vec::new();
        let mut at = 0;
        while at < words.len() {
            let n = usize::from(words[at]);
            runnable.clear();
            runnable.extend(words[at + 1..at + 1 + n].iter().map(|&w| usize::from(w)));
            let current = words[at + 1 + n];
            let choice = words[at + 2 + n];
            let current = (current != NONE).then_some(usize::from(current));
            let again = if chooser.wants_hints() {
                usize::from(choice)
            } else if n == 0 {
                usize::from(chooser.fail()?)
            } else {
                chooser.choose(&runnable, current)?
            };
            if again != usize::from(choice) {
                return Err(ScheduleError(format!(
                    "the chooser chose thread {again} where the run's worker chose {choice}: it is not deterministic"
                )));
            }
            choices.push(choice);
            at += n + 3;
        }
        Ok(choices)
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.base.cast(), 8 + RECORD_WORDS * 2) };
    }
}

/// Set in a worker process: it has no thread but the one that forked it, until a run starts
/// its own.
static IN_WORKER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True in a worker process a run was forked into.
pub(crate) fn is_worker() -> bool {
    IN_WORKER.load(std::sync::atomic::Ordering::Relaxed)
}

/// The exit status of a worker whose code panicked (the panic message is on its stderr).
const WORKER_PANICKED: c_int = 101;

/// Runs `f` in a forked worker; its result comes back as JSON down a pipe, with what the
/// worker wrote to stderr. A worker that leaves no result is a [`Death`].
fn in_worker<T, F>(timeout: Duration, f: F) -> Result<(T, String), Death>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: FnOnce() -> T,
{
    let (result_r, result_w) = pipe().map_err(os_death)?;
    let (err_r, err_w) = pipe().map_err(os_death)?;
    // No other thread of this process holds a lock the worker will take (the loader's, this
    // crate's, the simulator's) across the fork.
    let loads = crate::library::no_loads();
    let prepared = sim_clr::process::fork::prepare();
    // Output the C library holds for this process is written now, not once more by every
    // worker that inherits a copy of its buffers.
    // SAFETY: fflush(NULL) flushes every open stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    // SAFETY: the worker runs `f` and leaves with `_exit`: it never returns into the code
    // that forked it, and it never runs this process's other threads' code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        prepared.in_child();
        drop(loads);
        // SAFETY: the worker's own descriptors.
        unsafe {
            libc::close(result_r);
            libc::close(err_r);
            libc::dup2(err_w, 2);
            libc::close(err_w);
            if STDOUT_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
                libc::dup2(2, 1);
            }
        }
        crash_reports();
        // A panic must not unwind out of here: the worker would go on as a copy of this
        // process (its test harness, its caller) with only this thread.
        let status = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(result) => {
                write_all(result_w, &serde_json::to_vec(&result).unwrap_or_default());
                0
            }
            Err(payload) => {
                let message = sim_clr::process::fiber::panic_message(&payload);
                write_all(2, format!("the run's code panicked: {message}\n").as_bytes());
                WORKER_PANICKED
            }
        };
        // What the library printed reaches the user, as a real process's buffered output
        // does when it exits (a worker killed by a signal loses it, as a crashing process
        // does); then the worker leaves without unwinding, destructors or atexit handlers.
        // SAFETY: fflush(NULL) flushes every open stream; `_exit` ends the worker.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(status)
        }
    }
    prepared.in_parent();
    drop(loads);
    // SAFETY: this process's copies of the worker's ends.
    unsafe {
        libc::close(result_w);
        libc::close(err_w);
    }
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: our ends.
        unsafe {
            libc::close(result_r);
            libc::close(err_r);
        }
        return Err(os_death(e));
    }
    let (result, stderr, timed_out) = collect(result_r, err_r, timeout);
    // SAFETY: our ends.
    unsafe {
        libc::close(result_r);
        libc::close(err_r);
    }
    if timed_out {
        // SAFETY: our child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut status = 0;
    // SAFETY: our child; reaped once.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    if timed_out {
        return Err(Death {
            how: Ending::TimedOut(timeout),
            stderr,
        });
    }
    if libc::WIFSIGNALED(status) {
        return Err(Death {
            how: Ending::Signal(libc::WTERMSIG(status)),
            stderr,
        });
    }
    match serde_json::from_slice(&result) {
        Ok(result) => Ok((result, stderr)),
        Err(_) => Err(Death {
            how: Ending::Exited(libc::WEXITSTATUS(status)),
            stderr,
        }),
    }
}

fn os_death(e: std::io::Error) -> Death {
    Death {
        how: Ending::Exited(-1),
        stderr: format!("cannot start the run's worker: {e}"),
    }
}

fn pipe() -> std::io::Result<(c_int, c_int)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for both ends.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Reads both pipes until both are closed or `timeout` has passed: (result, stderr, timed
/// out).
fn collect(result_r: c_int, err_r: c_int, timeout: Duration) -> (Vec<u8>, Vec<u8>, bool) {
    let deadline = Instant::now() + timeout;
    let mut out = [Vec::new(), Vec::new()];
    let mut open = [true, true];
    let fds = [result_r, err_r];
    let mut buffer = vec![0u8; 64 * 1024];
    while open.iter().any(|&o| o) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (std::mem::take(&mut out[0]), std::mem::take(&mut out[1]), true);
        }
        let mut polled: Vec<libc::pollfd> = (0..2)
            .filter(|&i| open[i])
            .map(|i| libc::pollfd {
                fd: fds[i],
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = c_int::try_from(left.as_millis().max(1)).unwrap_or(c_int::MAX);
        // SAFETY: `polled` holds `len` entries.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
        for p in polled.iter().filter(|p| p.revents != 0) {
            let i = usize::from(p.fd == err_r);
            // SAFETY: `buffer` has room for its length.
            let got = unsafe { libc::read(p.fd, buffer.as_mut_ptr().cast::<c_void>(), buffer.len()) };
            if got <= 0 {
                open[i] = false;
            } else {
                out[i].extend_from_slice(&buffer[..got as usize]);
            }
        }
    }
    let [result, stderr] = out;
    (result, stderr, false)
}

extern "C" {
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
    fn backtrace_symbols_fd(buffer: *const *mut c_void, size: c_int, fd: c_int);
}

/// In the worker: a fatal signal writes the faulting thread's backtrace (with the symbols the
/// dynamic linker knows) to stderr, then kills the worker with that signal.
fn crash_reports() {
    let mut frames = [std::ptr::null_mut(); 4];
    // SAFETY: loads the unwinder now, not inside a signal handler.
    unsafe { backtrace(frames.as_mut_ptr(), frames.len() as c_int) };
    for signal in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        // SAFETY: a handler that only makes async-signal-safe calls; the action is reset
        // before it runs, so the signal raised again kills the worker.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as usize;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_fatal_signal(signal: c_int) {
    let mut frames = [std::ptr::null_mut(); 64];
    // SAFETY: `frames` holds 64 entries; stderr is the worker's pipe.
    unsafe {
        let n = backtrace(frames.as_mut_ptr(), frames.len() as c_int);
        backtrace_symbols_fd(frames.as_ptr(), n, 2);
        libc::raise(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_the_library_are_named_innermost_first() {
        let stderr = "\
/lib/libc.so.6(+0x3c050)[0x7f00]
/tmp/libcrash.so(crash_now+0x11)[0x7f11]
/tmp/libcrash.so(+0x1234)[0x7f12]
/tmp/libcrash.so(sampler_main+0x2a)[0x7f13]
terminate called without an active exception
";
        assert_eq!(
            library_frames(stderr, "libcrash.so"),
            ["crash_now", "?", "sampler_main"]
        );
        assert!(!is_backtrace_line("terminate called without an active exception"));
    }

    #[test]
    fn a_worker_that_dies_is_a_death_and_one_that_returns_a_result() {
        let forked = Forked::new(Path::new("libnone.so"), Duration::from_secs(5)).unwrap();
        assert_eq!(forked.call(|| 6 * 7), Ok(42));
        let death = forked.call(|| -> u8 { std::process::abort() }).unwrap_err();
        assert_eq!(death.how, Ending::Signal(libc::SIGABRT));
        // A panic ends the worker, never unwinds into a copy of this test.
        let death = forked.call(|| -> u8 { panic!("in the worker") }).unwrap_err();
        assert_eq!(death.how, Ending::Exited(WORKER_PANICKED));
        assert!(death.stderr.contains("in the worker"), "{}", death.stderr);
        let hang = Forked::new(Path::new("libnone.so"), Duration::from_millis(200)).unwrap();
        let death = hang
            .call(|| -> u8 {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
            .unwrap_err();
        assert_eq!(death.how, Ending::TimedOut(Duration::from_millis(200)));
    }

    #[test]
    fn the_choices_of_a_worker_are_made_again_here() {
        struct Cycle(usize);
        impl Chooser for Cycle {
            fn choose(&mut self, runnable: &[usize], _: Option<usize>) -> Result<usize, ScheduleError> {
                self.0 += 1;
                Ok(runnable[self.0 % runnable.len()])
            }
        }
        let forked = Forked::new(Path::new("libnone.so"), Duration::from_secs(5)).unwrap();
        let mut chooser = Cycle(0);
        let run = |c: &mut dyn Chooser| -> Result<RunReport, ScheduleError> {
            c.choose(&[0, 1], None)?;
            c.choose(&[0, 1, 2], Some(1))?;
            // The worker dies here: its two choices are still made here.
            std::process::abort()
        };
        let report = forked.run(&run, &mut chooser).unwrap();
        assert_eq!(report.outcome, "profiler_crash");
        assert_eq!(report.schedule, "1.2");
        assert_eq!(chooser.0, 2, "the chooser made both choices again");
        assert!(report.fault.unwrap().message.contains("SIGABRT"));
    }
}
