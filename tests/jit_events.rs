//! `JITCompilationStarted`/`Finished` and `ThreadNameChanged` in a running process: a managed
//! method's first call compiles it on the calling thread, before its frame exists, once per
//! run; a method already on a stack as the run starts is compiled already; `set_name` raises
//! `ThreadNameChanged` on the thread that sets the name; neither is raised without its
//! event-mask bit.

use corprof::os::ThreadControl;
use corprof::{FunctionId, HResult, ProfilerCallback, ThreadId};
use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::{Loaded, Process, SimOs};
use sim_clr::scenario::Scenario;
use sim_clr::Runtime;
use std::sync::{Arc, Mutex, Weak};
use walker::{snapshot, Contexts, Frame, StackBuffer};

/// What the profiler saw: each event with the simulated thread it ran on, and for the JIT's
/// start the leaf method of that thread's own walk at that moment.
#[derive(Default)]
struct Seen {
    runtime: Mutex<Weak<Runtime>>,
    log: Mutex<Vec<String>>,
}

impl Seen {
    fn note(&self, what: String) -> HResult {
        let on = SimOs::new().current_thread().0;
        self.log.lock().unwrap().push(format!("{what} on {on}"));
        HResult::S_OK
    }

    fn name(&self, function: FunctionId) -> String {
        let rt = self.runtime.lock().unwrap().upgrade().unwrap();
        let found = rt.with_code(|c| c.by_function_id(function).map(|f| c.function(f).name.clone()));
        found.unwrap_or_else(|| format!("{function:?}"))
    }
}

impl ProfilerCallback for Seen {
    fn jit_compilation_started(&self, function: FunctionId, safe_to_block: bool) -> HResult {
        let rt = self.runtime.lock().unwrap().upgrade().unwrap();
        let mut buffer = StackBuffer::with_capacity(16);
        let walked = snapshot(&*rt, ThreadId::NULL, None, Contexts::None, &mut buffer);
        let leaf = buffer.frames().iter().find_map(|f| match f {
            Frame::Managed { function, .. } => Some(self.name(*function)),
            Frame::NativeRun { .. } => None,
        });
        assert!(walked.is_ok(), "a walk of the compiling thread: {walked:?}");
        let name = self.name(function);
        self.note(format!("started {name} safe={safe_to_block} leaf={leaf:?}"))
    }

    fn jit_compilation_finished(&self, function: FunctionId, status: HResult, _: bool) -> HResult {
        let name = self.name(function);
        self.note(format!("finished {name} {status}"))
    }

    fn thread_name_changed(&self, thread: ThreadId, name: &str) -> HResult {
        let rt = self.runtime.lock().unwrap().upgrade().unwrap();
        let whose = rt.thread_name(thread);
        self.note(format!("named {whose:?} {name}"))
    }
}

fn process(mask: &str) -> (Process, Arc<Seen>) {
    let file = format!(
        r#"
platform = "unix"
[runtime]
event_mask = {mask}
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "App::Helper"
kind = "jit"
[[threads]]
name = "main"
frames = [{{ fn = "App::Main" }}]
program = ["set_name worker", "call App::Work", "call App::Helper", "return", "return", "call App::Main", "return"]
[[threads]]
name = "worker"
frames = [{{ fn = "App::Main" }}]
program = ["call App::Work", "return", "call App::Work", "return"]
"#
    );
    let mut p = Process::new(Scenario::parse("jit.toml", &file).unwrap());
    let seen = Arc::new(Seen::default());
    let profiler = seen.clone();
    p.load(Arc::new(move |rt| {
        *profiler.runtime.lock().unwrap() = Arc::downgrade(rt);
        profiler.log.lock().unwrap().clear();
        Loaded {
            profiler: Some(profiler.clone()),
            ..Loaded::default()
        }
    }));
    (p, seen)
}

#[test]
fn a_methods_first_call_compiles_it_on_the_caller_before_its_frame_exists_once_per_run() {
    let (p, seen) = process(r#"["ENABLE_STACK_SNAPSHOT", "MONITOR_JIT_COMPILATION", "MONITOR_THREADS"]"#);
    let (main, worker) = {
        let rt = p.scenario().runtime();
        (
            rt.thread("main").unwrap().os_id,
            rt.thread("worker").unwrap().os_id,
        )
    };
    let (mut by_main, mut by_worker) = (0, 0);
    for seed in 0..200 {
        let run = p.run(&mut Random(Rng::new(seed))).unwrap();
        assert_eq!(run.outcome, "ok", "{run:?}");
        let log = seen.log.lock().unwrap().clone();
        let work: Vec<&String> = log
            .iter()
            .filter(|l| l.starts_with("started App::Work") || l.starts_with("finished App::Work"))
            .collect();
        // Compiled once, by whichever thread called it first, while that thread's leaf is
        // still App::Main; the finish follows on the same thread.
        let [started, finished] = work[..] else {
            panic!("one start and one finish for App::Work: {log:?}")
        };
        let on_main = started.ends_with(&format!(" on {main}"));
        assert!(on_main || started.ends_with(&format!(" on {worker}")), "{log:?}");
        if on_main {
            by_main += 1;
        } else {
            by_worker += 1;
        }
        assert!(
            started.starts_with("started App::Work safe=true leaf=Some(\"App::Main\")"),
            "{log:?}"
        );
        let on = started.rsplit(' ').next().unwrap();
        assert_eq!(
            *finished,
            format!("finished App::Work 0x00000000 S_OK on {on}"),
            "{log:?}"
        );
        // App::Helper: by main, above App::Work. App::Main was on the stacks from the start.
        assert!(
            log.contains(&format!(
                "started App::Helper safe=true leaf=Some(\"App::Work\") on {main}"
            )),
            "{log:?}"
        );
        assert!(!log.iter().any(|l| l.contains("App::Main safe")), "{log:?}");
        assert!(
            log.contains(&format!("named Some(\"worker\") worker on {main}")),
            "{log:?}"
        );
        assert_eq!(log.len(), 5, "{log:?}");
    }
    // Either may come first (main names the worker first, so it is second more often).
    assert!(by_main > 3 && by_worker > 3, "{by_main} {by_worker}");
}

#[test]
fn without_their_mask_bits_neither_is_raised() {
    let (p, seen) = process(r#"["ENABLE_STACK_SNAPSHOT"]"#);
    for seed in 0..20 {
        let run = p.run(&mut Random(Rng::new(seed))).unwrap();
        assert_eq!(run.outcome, "ok", "{run:?}");
        assert_eq!(*seen.log.lock().unwrap(), Vec::<String>::new());
    }
}
