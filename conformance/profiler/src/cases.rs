//! The call shapes. A case name is `label:shape`: the label is what the log records (and what
//! the matching scenario call is tagged with), the shape selects what is called. Shapes
//! starting with `nt_` run on a native thread the profiler starts (one that never ran managed
//! code); the others run on the calling thread, in whatever state the C# program put it.

use crate::info::{Info, RawFrame};
use crate::log::{name_frames, record, LoggedFrame};
use crate::names;
use corprof::com::{UintPtr, HRESULT};
use corprof::flags::snapshot::REGISTER_CONTEXT;
use corprof::Context;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const S_OK: HRESULT = 0;
const S_FALSE: HRESULT = 1;
const E_FAIL: HRESULT = 0x8000_4005_u32 as i32;

/// Where a case runs.
#[derive(Clone, Copy)]
pub enum Caller {
    /// Native code reached by P/Invoke from a managed thread.
    PInvoke,
    /// The profiler's `ObjectAllocated` callback.
    ObjectAllocated,
    /// The profiler's `GarbageCollectionStarted` callback.
    GarbageCollectionStarted,
    /// A native thread started by the profiler.
    Native,
}

impl Caller {
    fn label(self) -> &'static str {
        match self {
            Caller::PInvoke => "pinvoke",
            Caller::ObjectAllocated => "ObjectAllocated",
            Caller::GarbageCollectionStarted => "GarbageCollectionStarted",
            Caller::Native => "native",
        }
    }
}

static ARMED: Mutex<Option<String>> = Mutex::new(None);
static TARGET: AtomicUsize = AtomicUsize::new(0);
/// The IP a `saveK` case kept, for a later `fip_saved`.
static SAVED_IP: AtomicUsize = AtomicUsize::new(0);

/// Arms a case for the next `Marker` allocation (or GC for `gc…` labels).
pub fn arm(name: &str) {
    *ARMED.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_string());
}

/// Records the calling managed thread as the cross-thread target.
pub fn register_target() {
    TARGET.store(Info::get().get_current_thread_id().1, Ordering::SeqCst);
}

/// `ObjectAllocated`: runs the armed case if the object is a `Marker`.
pub fn object_allocated(class: UintPtr) {
    let armed = ARMED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(name) = armed.filter(|n| !n.starts_with("gc")) {
        if names::class_name(class).as_deref() == Some("Marker") {
            ARMED.lock().unwrap_or_else(|e| e.into_inner()).take();
            run(&name, Caller::ObjectAllocated);
        }
    }
}

/// `GarbageCollectionStarted`: runs an armed `gc…` case.
pub fn gc_started() {
    let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
    if armed.as_deref().is_some_and(|n| n.starts_with("gc")) {
        let name = armed.take().unwrap();
        drop(armed);
        run(&name, Caller::GarbageCollectionStarted);
    }
}

/// The callback's behaviour.
#[derive(Clone, Copy)]
enum Callback {
    Ok,
    Null,
    /// Return the value at the given callback index.
    Return(usize, HRESULT),
    /// Make a nested `DoStackSnapshot(0)` at the first callback.
    Nested,
}

/// The seed passed.
#[derive(Clone, Copy)]
enum Seed {
    None,
    Zero,
    /// The real context of callback `k` of a REGISTER_CONTEXT walk of the same target.
    Frame(usize),
}

/// One `DoStackSnapshot` call shape.
#[derive(Clone, Copy)]
struct Shape {
    thread: UintPtr,
    flags: u32,
    seed: Seed,
    size: u32,
    callback: Callback,
}

impl Shape {
    fn on(thread: UintPtr) -> Shape {
        Shape {
            thread,
            flags: 0,
            seed: Seed::None,
            size: 0,
            callback: Callback::Ok,
        }
    }
}

/// A walk's callbacks: (`FunctionID`, context size, IP) each.
type Callbacks = Vec<(usize, u32, usize)>;

/// Walks with `shape` (named `name`) and logs the call (and a nested call, if any) under
/// `label`; returns each callback's IP.
fn walk(label: &str, caller: Caller, name: &str, shape: Shape) -> Vec<UintPtr> {
    let info = Info::get();
    let mut seed = match shape.seed {
        Seed::None => None,
        Seed::Zero => Some(vec![0u8; Context::SIZE]),
        Seed::Frame(k) => {
            let mut contexts = Vec::new();
            let mut capture = |f: RawFrame| {
                contexts.push(f.context);
                S_OK
            };
            info.do_stack_snapshot(shape.thread, Some(&mut capture), REGISTER_CONTEXT, None, 0);
            Some(
                contexts
                    .get(k)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| vec![0u8; Context::SIZE]),
            )
        }
    };
    let mut frames: Callbacks = Vec::new();
    let mut nested: Option<(HRESULT, Callbacks)> = None;
    let mut callback = |f: RawFrame| {
        let index = frames.len();
        frames.push((f.func_id, f.context_size, f.ip));
        match shape.callback {
            Callback::Return(at, value) if at == index => value,
            Callback::Nested if index == 0 => {
                let mut inner = Vec::new();
                let mut cb = |g: RawFrame| {
                    inner.push((g.func_id, g.context_size, g.ip));
                    S_OK
                };
                let hr = info.do_stack_snapshot(0, Some(&mut cb), 0, None, 0);
                nested = Some((hr, inner));
                S_OK
            }
            _ => S_OK,
        }
    };
    let cb: Option<&mut dyn FnMut(RawFrame) -> HRESULT> = if matches!(shape.callback, Callback::Null) {
        None
    } else {
        Some(&mut callback)
    };
    let hr = info.do_stack_snapshot(shape.thread, cb, shape.flags, seed.as_deref_mut(), shape.size);
    let named = name_frames(&frames);
    record(label, caller.label(), "DoStackSnapshot", name, hr, Some(&named));
    if let Some((hr, inner)) = nested {
        let named: Vec<LoggedFrame> = name_frames(&inner);
        record(
            &format!("{label}/inner"),
            caller.label(),
            "DoStackSnapshot",
            "default",
            hr,
            Some(&named),
        );
    }
    frames.iter().map(|&(_, _, ip)| ip).collect()
}

/// The first frame's IP of a walk of the calling thread.
fn first_ip() -> UintPtr {
    let mut ip = 0;
    let mut cb = |f: RawFrame| {
        if ip == 0 {
            ip = f.ip;
        }
        S_OK
    };
    Info::get().do_stack_snapshot(0, Some(&mut cb), 0, None, 0);
    ip
}

/// The same-thread and cross-thread `DoStackSnapshot` shapes, by name.
fn snapshot_shape(shape: &str) -> Option<Shape> {
    let own = || Info::get().get_current_thread_id().1;
    let target = TARGET.load(Ordering::SeqCst);
    let base = |thread| Shape::on(thread);
    Some(match shape {
        "default" => base(0),
        "self" => base(own()),
        "regctx" => Shape {
            flags: REGISTER_CONTEXT,
            ..base(0)
        },
        "x86" => Shape { flags: 2, ..base(0) },
        "zero" => Shape {
            seed: Seed::Zero,
            size: Context::SIZE as u32,
            ..base(0)
        },
        "zero16" => Shape {
            seed: Seed::Zero,
            size: 16,
            ..base(0)
        },
        "null1232" => Shape {
            size: Context::SIZE as u32,
            ..base(0)
        },
        "flags4" => Shape { flags: 4, ..base(0) },
        "flagshi" => Shape {
            flags: 0x8000_0000,
            ..base(0)
        },
        "sfalse1" => Shape {
            callback: Callback::Return(1, S_FALSE),
            ..base(0)
        },
        "efail1" => Shape {
            callback: Callback::Return(1, E_FAIL),
            ..base(0)
        },
        "other0" => Shape {
            callback: Callback::Return(0, 0x12345),
            ..base(0)
        },
        "seed2" => Shape {
            seed: Seed::Frame(2),
            size: Context::SIZE as u32,
            ..base(0)
        },
        "seed2size0" => Shape {
            seed: Seed::Frame(2),
            ..base(0)
        },
        "nested" => Shape {
            callback: Callback::Nested,
            ..base(0)
        },
        "nullcb" => Shape {
            callback: Callback::Null,
            ..base(0)
        },
        "target" => base(target),
        "target_regctx" => Shape {
            flags: REGISTER_CONTEXT,
            ..base(target)
        },
        "target_zero" => Shape {
            seed: Seed::Zero,
            size: Context::SIZE as u32,
            ..base(target)
        },
        "target_zero16" => Shape {
            seed: Seed::Zero,
            size: 16,
            ..base(target)
        },
        "target_flags4" => Shape {
            flags: 4,
            ..base(target)
        },
        "target_sfalse1" => Shape {
            callback: Callback::Return(1, S_FALSE),
            ..base(target)
        },
        "target_efail1" => Shape {
            callback: Callback::Return(1, E_FAIL),
            ..base(target)
        },
        "target_null" => Shape {
            callback: Callback::Null,
            ..base(target)
        },
        "bogus" => base(1),
        _ => return None,
    })
}

/// Runs case `name` (`label:shape`) from `caller`; false for an unknown shape.
pub fn run(name: &str, caller: Caller) -> bool {
    let (label, shape) = name.rsplit_once(':').unwrap_or((name, "default"));
    if let Some(native) = shape.strip_prefix("nt_") {
        let (label, native) = (label.to_string(), native.to_string());
        return std::thread::spawn(move || run_here(&label, &native, Caller::Native))
            .join()
            .unwrap_or(false);
    }
    run_here(label, shape, caller)
}

fn run_here(label: &str, shape: &str, caller: Caller) -> bool {
    let info = Info::get();
    let step = |step: &str, api: &str, hr: HRESULT| {
        record(&format!("{label}/{step}"), caller.label(), api, step, hr, None)
    };
    let call = |api: &str, hr: HRESULT| record(label, caller.label(), api, shape, hr, None);
    let walk_as = |step: &str| {
        walk(
            &format!("{label}/{step}"),
            caller,
            step,
            snapshot_shape(step).unwrap(),
        )
    };
    match shape {
        "threadid" => call("GetCurrentThreadID", info.get_current_thread_id().0),
        "init" => call("InitializeCurrentThread", info.initialize_current_thread()),
        "resume" => call("ResumeRuntime", info.resume_runtime()),
        "fip_managed" => call("GetFunctionFromIP", info.get_function_from_ip(first_ip()).0),
        "fip_native" => call(
            "GetFunctionFromIP",
            info.get_function_from_ip(crate::RunCase as *const () as usize).0,
        ),
        "fip2_managed" => call("GetFunctionFromIP2", info.get_function_from_ip2(first_ip())),
        "fip_saved" => call(
            "GetFunctionFromIP",
            info.get_function_from_ip(SAVED_IP.load(Ordering::SeqCst)).0,
        ),
        "suspended" => {
            // The sampler protocol of dotnet/samples, step by step.
            step(
                "init",
                "InitializeCurrentThread",
                info.initialize_current_thread(),
            );
            step("suspend", "SuspendRuntime", info.suspend_runtime());
            for s in [
                "target",
                "target_regctx",
                "target_zero",
                "target_zero16",
                "target_flags4",
                "target_sfalse1",
                "target_efail1",
                "default",
            ] {
                walk_as(s);
            }
            step("resume", "ResumeRuntime", info.resume_runtime());
            step("resume_again", "ResumeRuntime", info.resume_runtime());
            walk(
                &format!("{label}/after_resume"),
                caller,
                "target",
                snapshot_shape("target").unwrap(),
            );
        }
        "suspended_walk" => {
            // One walk of the target, plain and with contexts, under SuspendRuntime.
            step(
                "init",
                "InitializeCurrentThread",
                info.initialize_current_thread(),
            );
            step("suspend", "SuspendRuntime", info.suspend_runtime());
            walk_as("target");
            walk_as("target_regctx");
            step("resume", "ResumeRuntime", info.resume_runtime());
        }
        "suspended_null" => {
            step("suspend", "SuspendRuntime", info.suspend_runtime());
            walk_as("target_null");
        }
        "double_suspend" => {
            step("suspend", "SuspendRuntime", info.suspend_runtime());
            step("suspend_again", "SuspendRuntime", info.suspend_runtime());
            step("resume", "ResumeRuntime", info.resume_runtime());
            step("resume_again", "ResumeRuntime", info.resume_runtime());
        }
        "gc" => {
            walk(
                &format!("{label}/self"),
                caller,
                "default",
                snapshot_shape("default").unwrap(),
            );
            walk_as("target");
        }
        other => {
            // `saveK`: a plain walk of this thread that keeps callback K's IP.
            let save = other.strip_prefix("save").and_then(|k| k.parse::<usize>().ok());
            let Some(s) = snapshot_shape(if save.is_some() { "default" } else { other }) else {
                return false;
            };
            let ips = walk(label, caller, other, s);
            if let Some(ip) = save.and_then(|k| ips.get(k)) {
                SAVED_IP.store(*ip, Ordering::SeqCst);
            }
        }
    }
    true
}
