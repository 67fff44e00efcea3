//! The runtime→profiler direction: a profiler attached with `Runtime::set_profiler` receives
//! the runtime's callbacks on the right thread, in the right state, and can walk from them.

use corprof::flags::GcReason;
use corprof::{ClassId, FunctionId, HResult, ObjectId, ProfilerCallback, ProfilerInfo, ThreadId};
use sim_clr::scenario::Scenario;
use sim_clr::{CallbackKind, Runtime, Unload};
use std::sync::{Arc, Mutex, Weak};
use walker::{snapshot, Contexts, Frame, StackBuffer, WalkOutcome};

/// One walk: its outcome and the frames collected.
type Walk = (Result<WalkOutcome, HResult>, Vec<Frame>);

/// A profiler that walks its own thread in `ObjectAllocated` and logs every callback.
struct Recorder {
    runtime: Weak<Runtime>,
    log: Mutex<Vec<String>>,
    walks: Mutex<Vec<Walk>>,
}

impl Recorder {
    fn note(&self, what: String) -> HResult {
        self.log.lock().unwrap().push(what);
        HResult::S_OK
    }
}

impl ProfilerCallback for Recorder {
    fn thread_created(&self, thread: ThreadId) -> HResult {
        let rt = self.runtime.upgrade().unwrap();
        let me = rt.get_current_thread_id();
        self.note(format!("ThreadCreated {thread} (current {me:?})"))
    }

    fn thread_assigned_to_os_thread(&self, thread: ThreadId, os_thread: u32) -> HResult {
        self.note(format!("ThreadAssignedToOSThread {thread} {os_thread}"))
    }

    fn object_allocated(&self, _object: ObjectId, _class: ClassId) -> HResult {
        let rt = self.runtime.upgrade().unwrap();
        let mut buffer = StackBuffer::with_capacity(32);
        let outcome = snapshot(&*rt, ThreadId::NULL, None, Contexts::None, &mut buffer);
        self.walks
            .lock()
            .unwrap()
            .push((outcome, buffer.frames().to_vec()));
        self.note("ObjectAllocated".into())
    }

    fn garbage_collection_started(&self, generations: &[bool], reason: GcReason) -> HResult {
        self.note(format!("GarbageCollectionStarted {generations:?} {reason:?}"))
    }

    fn garbage_collection_finished(&self) -> HResult {
        self.note("GarbageCollectionFinished".into())
    }

    fn thread_destroyed(&self, thread: ThreadId) -> HResult {
        self.note(format!("ThreadDestroyed {thread}"))
    }

    fn dynamic_method_unloaded(&self, function: FunctionId) -> HResult {
        let rt = self.runtime.upgrade().unwrap();
        let info = rt.get_function_info(function).map(|_| ());
        self.note(format!(
            "DynamicMethodUnloaded {function:?}: GetFunctionInfo {info:?}"
        ))
    }
}

const SCENARIO: &str = r#"
platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT", "ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED", "MONITOR_THREADS"]
[[code]]
name = "App::Alloc"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Alloc", repeat = 2 }, { fn = "App::Main" }, { fn = "host!main" }]
"#;

fn setup() -> (Arc<Runtime>, Arc<Recorder>) {
    attach(Scenario::parse("callbacks.toml", SCENARIO).unwrap())
}

fn attach(scenario: Scenario) -> (Arc<Runtime>, Arc<Recorder>) {
    let runtime = Arc::new(scenario.runtime());
    let recorder = Arc::new(Recorder {
        runtime: Arc::downgrade(&runtime),
        log: Mutex::new(Vec::new()),
        walks: Mutex::new(Vec::new()),
    });
    runtime.set_profiler(recorder.clone());
    (runtime, recorder)
}

#[test]
fn object_allocated_is_raised_on_its_thread_and_the_profiler_can_walk_from_it() {
    let (runtime, recorder) = setup();
    assert_eq!(
        runtime.raise("main", CallbackKind::ObjectAllocated),
        Some(HResult::S_OK)
    );
    let walks = recorder.walks.lock().unwrap();
    let (outcome, frames) = &walks[0];
    assert_eq!(*outcome, Ok(WalkOutcome::Complete));
    let id = |n: &str| runtime.with_code(|c| c.function(c.by_name(n).unwrap()).function_id);
    let functions: Vec<_> = frames
        .iter()
        .map(|f| match f {
            Frame::Managed { function, .. } => Some(*function),
            Frame::NativeRun { .. } => None,
        })
        .collect();
    assert_eq!(
        functions,
        [
            Some(id("App::Alloc")),
            Some(id("App::Alloc")),
            Some(id("App::Main")),
            None
        ]
    );
}

#[test]
fn callbacks_the_event_mask_does_not_enable_are_not_raised() {
    let (runtime, recorder) = setup();
    assert_eq!(
        runtime.raise("main", CallbackKind::GarbageCollectionStarted),
        None
    );
    assert!(recorder.log.lock().unwrap().is_empty());
}

#[test]
fn thread_callbacks_arrive_on_the_thread_and_destruction_kills_it() {
    let (runtime, recorder) = setup();
    runtime.announce_threads();
    let main = runtime.thread("main").unwrap().id;
    assert_eq!(
        runtime.raise("main", CallbackKind::ThreadDestroyed),
        Some(HResult::S_OK)
    );
    let log = recorder.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            format!("ThreadCreated {main} (current Ok({main:?}))"),
            format!("ThreadAssignedToOSThread {main} 1000"),
            format!("ThreadDestroyed {main}"),
        ]
    );
    assert_eq!(
        runtime.thread("main").unwrap().lifecycle,
        sim_clr::thread::Lifecycle::Dead
    );
}

#[test]
fn a_collection_raises_started_then_finished_on_the_collecting_thread() {
    let (runtime, recorder) = setup();
    let mask = runtime.get_event_mask().unwrap();
    assert_eq!(
        runtime.set_event_mask(mask | corprof::flags::event::MONITOR_GC),
        HResult::S_OK
    );
    assert_eq!(
        runtime.raise("main", CallbackKind::GarbageCollectionStarted),
        Some(HResult::S_OK)
    );
    assert_eq!(
        *recorder.log.lock().unwrap(),
        [
            "GarbageCollectionStarted [true, false, false] Induced",
            "GarbageCollectionFinished"
        ]
    );
}

#[test]
fn an_attached_profiler_is_told_of_no_thread_started_before_it_and_enumerates_them() {
    let text = SCENARIO.replace(
        "event_mask = [\"ENABLE_STACK_SNAPSHOT\", \"ENABLE_OBJECT_ALLOCATED\", \"MONITOR_OBJECT_ALLOCATED\", \"MONITOR_THREADS\"]",
        "attached = true\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_THREADS\"]",
    );
    let (runtime, recorder) = attach(Scenario::parse("attached.toml", &text).unwrap());
    runtime.announce_threads();
    runtime.announce_modules();
    assert!(recorder.log.lock().unwrap().is_empty());
    let main = runtime.thread("main").unwrap().id;
    assert_eq!(runtime.enum_threads(), Ok(vec![main]));
    let enter_leave = corprof::flags::event::MONITOR_ENTERLEAVE;
    assert_eq!(
        runtime.set_event_mask(enter_leave),
        HResult::CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER
    );
}

#[test]
fn a_dynamic_method_id_is_valid_in_its_unload_callback_and_freed_after() {
    let text = format!("{SCENARIO}[[code]]\nname = \"Dyn\"\nkind = \"lcg\"\n").replace(
        "[runtime]\n",
        "[runtime]\nevent_mask_high = [\"MONITOR_DYNAMIC_FUNCTION_UNLOADS\"]\n",
    );
    let scenario = Scenario::parse("unload.toml", &text).unwrap();
    let dynamic = scenario.code.by_name("Dyn").unwrap();
    let (id, ip) = {
        let f = scenario.code.function(dynamic);
        (f.function_id, f.start + 0x10)
    };
    let (runtime, recorder) = attach(scenario);
    assert_eq!(runtime.get_function_from_ip3(ip).map(|(f, _)| f), Ok(id));
    assert!(runtime.unload("main", &Unload::DynamicMethod(dynamic)));
    assert_eq!(
        *recorder.log.lock().unwrap(),
        [format!("DynamicMethodUnloaded {id:?}: GetFunctionInfo Ok(())")]
    );
    assert_eq!(runtime.get_function_from_ip3(ip), Err(HResult::E_FAIL));
    assert!(runtime.take_faults().is_empty());
    assert_eq!(
        runtime.get_function_info(id).map(|_| ()),
        Err(HResult::E_UNEXPECTED)
    );
    let faults = runtime.take_faults();
    assert_eq!(faults[0].kind, sim_clr::trace::FaultKind::FunctionUseAfterUnload);
}
