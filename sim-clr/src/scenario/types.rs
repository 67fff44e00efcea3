//! The validated form of a scenario: what [`Scenario::parse`] produces and
//! [`Scenario::run`](crate::scenario::Scenario::run) performs — the calls, their arguments and
//! expectations — and the limits every file is held to.

use crate::code::CodeMap;
use crate::runtime::{CallContext, RuntimeConfig};
use crate::thread::Thread;
use crate::trace::FaultKind;
use corprof::{HResult, Register};

/// A validated scenario, ready to run any number of times.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name (the `name` field, or the file stem).
    pub name: String,
    /// Its description.
    pub description: String,
    /// The runtime's global state.
    pub config: RuntimeConfig,
    /// Declared functions followed by the runtime's built-in ones, laid out and assembled.
    pub code: CodeMap,
    /// Threads in their initial state.
    pub threads: Vec<Thread>,
    /// Number of calls each thread declares (its stack without runtime-pushed frames).
    pub declared_calls: Vec<usize>,
    /// The calls, in order.
    pub calls: Vec<Call>,
    /// Thread programs, profiler handlers, locks and limits (empty when nothing moves).
    pub process: crate::spec::ProcessSpec,
    /// How the program drives a hosted native profiler library (`[host]`).
    pub host: super::host::HostSpec,
    /// Calls made to fail on demand (`[[fail]]`).
    pub fails: Vec<crate::runtime::FailRule>,
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub struct Call {
    /// Line of the `[[calls]]` table.
    pub line: usize,
    /// The calling thread (for events: the thread the event happens to).
    pub caller: String,
    /// How the caller reached the API.
    pub context: CallContext,
    /// What is done.
    pub action: Action,
    /// Expected HRESULT, if the file states one.
    pub expect: Option<HResult>,
    /// Expected number of snapshot callbacks, if the file states one.
    pub expect_frames: Option<usize>,
    /// Expected callbacks, leaf first: each method's name, [`NATIVE_RUN`] for a
    /// `funcId == 0` callback.
    pub expect_stack: Option<Vec<String>>,
    /// The kind of fault expected during the call, if the file states one.
    pub expect_fault: Option<FaultKind>,
    /// Free text shown in reports.
    pub note: Option<String>,
    /// A label matching this call with a record of a real runtime (conformance).
    pub case: Option<String>,
}

/// A profiler API call or a runtime event.
#[derive(Clone, Debug)]
pub enum Action {
    /// A call through [`corprof::ProfilerInfo`].
    Api(ApiCall),
    /// The thread exits: `ThreadDestroyed` is raised on it, then it is dead.
    ThreadExit,
    /// The thread's `Thread` object is freed and its stack unmapped.
    ThreadDelete,
    /// An induced garbage collection on the thread.
    Gc,
    /// Code is unloaded on the thread: a collected dynamic method, or a collectible assembly.
    Unload(crate::runtime::Unload),
}

/// The callbacks at which a `DoStackSnapshot`'s nested call is made (`nested_at`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NestedAt {
    /// At these callbacks (0-based, ascending): `nested_at = N` or `nested_at = [N, M, …]`.
    Frames(Vec<usize>),
    /// At every callback: `nested_at = "every"`.
    Every,
}

impl NestedAt {
    /// Whether the nested call is made at callback `index`.
    pub fn includes(&self, index: usize) -> bool {
        match self {
            NestedAt::Frames(at) => at.binary_search(&index).is_ok(),
            NestedAt::Every => true,
        }
    }
}

/// A profiler API call with its arguments.
#[derive(Clone, Debug)]
pub enum ApiCall {
    /// `DoStackSnapshot`.
    DoStackSnapshot {
        /// The `thread` argument.
        target: Target,
        /// `infoFlags`.
        flags: u32,
        /// The seed context.
        seed: Seed,
        /// `contextSize`.
        context_size: u32,
        /// What the callback does.
        callback: CallbackBehavior,
        /// Calls made from inside the callback, each at its callbacks, in the order they
        /// are made at one callback.
        nested: Vec<(NestedAt, Call)>,
    },
    /// `GetFunctionFromIP` (version 1), `GetFunctionFromIP2` or `GetFunctionFromIP3`.
    GetFunctionFromIp {
        /// 1, 2 or 3.
        version: u8,
        /// The IP.
        ip: IpRef,
    },
    /// `GetCodeInfo2`.
    GetCodeInfo2 {
        /// The function.
        function: FunctionRef,
        /// `cCodeInfos`.
        requested: u32,
        /// Pass NULL as the buffer.
        null_buffer: bool,
    },
    /// `GetFunctionInfo`.
    GetFunctionInfo {
        /// The function.
        function: FunctionRef,
    },
    /// `GetFunctionInfo2`.
    GetFunctionInfo2 {
        /// The function.
        function: FunctionRef,
        /// Which frame info to pass.
        frame_info: FrameInfoArg,
    },
    /// `GetCurrentThreadID`.
    GetCurrentThreadId,
    /// `SetEventMask`.
    SetEventMask {
        /// The new mask.
        mask: u32,
    },
    /// `GetEventMask`.
    GetEventMask,
    /// `InitializeCurrentThread`.
    InitializeCurrentThread,
    /// `SuspendRuntime`.
    SuspendRuntime,
    /// `ResumeRuntime`.
    ResumeRuntime,
    /// `EnumThreads`.
    EnumThreads,
}

/// `DoStackSnapshot`'s `thread` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// 0: the caller.
    Zero,
    /// The `ThreadID` of a named thread (its own id for `"self"`).
    Thread(String),
    /// A raw value (`"bogus"` is 0x1).
    Raw(u64),
}

/// A value for a seed register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedValue {
    /// A number.
    Raw(u64),
    /// An address inside a function.
    Function(String, u64),
}

/// The seed context passed to `DoStackSnapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seed {
    /// NULL.
    None,
    /// A CONTEXT from its [`SeedBase`], then with some registers overridden (`rip` is
    /// included as `None`).
    Context {
        /// What the CONTEXT starts from before the overrides.
        base: SeedBase,
        /// Register overrides; `None` stands for RIP.
        overrides: Vec<(Option<Register>, SeedValue)>,
    },
}

/// What a seed CONTEXT starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedBase {
    /// All zeros.
    Zero,
    /// The registers of a thread's declared call (`thread`, 0 = the leaf declared call), as
    /// laid out when the call is made.
    Frame(String, usize),
    /// The CONTEXT callback `callback` (0-based) of an earlier `DoStackSnapshot` call `call`
    /// (1-based, as reports number calls) received.
    Callback {
        /// The earlier call.
        call: usize,
        /// Its callback.
        callback: usize,
    },
}

/// The behaviour of the snapshot callback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallbackBehavior {
    /// Return `S_OK` every time.
    Ok,
    /// Pass a NULL callback.
    Null,
    /// Return `value` at callback index `at` (0-based), `S_OK` before.
    Return {
        /// Callback index.
        at: usize,
        /// The value returned there.
        value: HResult,
    },
}

/// An IP argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpRef {
    /// A number.
    Raw(u64),
    /// An offset inside a named function.
    Function(String, u64),
    /// The IP of the snapshot frame being reported (nested calls only).
    CurrentFrame,
}

/// A `FunctionID` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FunctionRef {
    /// The id of a named function.
    Name(String),
    /// A raw value.
    Raw(u64),
    /// The `funcId` of the snapshot frame being reported (nested calls only).
    CurrentFrame,
}

/// `GetFunctionInfo2`'s frame info argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameInfoArg {
    /// NULL.
    None,
    /// The snapshot frame's own frame info (nested calls only).
    CurrentFrame,
    /// A frame info whose `funcID` differs from the function passed.
    Mismatched,
    /// The frame info callback `callback` (0-based) of the earlier walk `call` (1-based)
    /// received, kept after that walk ended: a dead stack slot by now (R24).
    Kept {
        /// The walk's call number.
        call: usize,
        /// The callback's index.
        callback: usize,
    },
}

/// The largest scenario file [`Scenario::load`] reads, in bytes.
pub const MAX_FILE_BYTES: u64 = 8 << 20;
/// The most functions (`[[code]]` tables) a scenario declares.
pub const MAX_FUNCTIONS: usize = 65_536;
/// The most threads a scenario declares.
pub const MAX_THREADS: usize = 4_096;

/// The most locks, and the most events, a file may declare (`locks`, `events`).
pub const MAX_NAMES: usize = 4_096;
/// The most calls a scenario makes.
pub const MAX_CALLS: usize = 50_000;
/// The most nested calls one `DoStackSnapshot` makes (each at one or more callbacks).
pub const MAX_NESTED_CALLS: usize = 256;
/// The most frames (calls and explicit Frames) all threads' stacks hold together; one thread's
/// stack is also limited by its size.
pub const MAX_FRAMES: usize = 262_144;
/// The most frames a file's walks may cover in all: each `DoStackSnapshot` counts the frames
/// of the thread it walks, and a nested walk counts once per callback it is made at. (Without
/// it, a 13 KB file of 200 walks of a 32,760-frame stack took 8 s and 2.4 GB.)
pub const MAX_WALKED_FRAMES: usize = 1 << 19;

/// How `expect_stack` writes a `funcId == 0` callback (a run of native frames).
pub const NATIVE_RUN: &str = "0";
