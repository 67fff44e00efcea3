//! The runtime versions simclr answers as, and every behaviour of a stack sampler's world that
//! differs between them, each with its evidence.
//!
//! The rules of `DoStackSnapshot` itself (R1–R18) read the same in every version; what changed
//! from CoreCLR 3.1 to .NET 8 is what the stacks look like and what a callback receives. Each
//! method below is one such difference, with the versions it holds for and where it was seen:
//! *observed* means a record of the real-runtime lane (`conformance/run.sh`, case named), on
//! CoreCLR 3.1.23 or .NET 8.0.4 for linux-x64.
//!
//! .NET 9 and 10 are not run here: what differs there is *read from source* (the
//! `dotnet/runtime` repository; the file and function are named with each method) or reported
//! by a user on a named release in a `dotnet/runtime` issue. The repository's tags `v9.0.0` and
//! `v10.0.0` could not be read themselves; the versions read bracket them, and a change is
//! placed in a release by the date its pull request was merged. Where a version's behaviour is
//! not known, it answers as the version before it: the behaviour a sampler meets when nothing
//! changed, so that no failure is modelled without evidence.

use super::Platform;
use corprof::Context;

/// A runtime version the simulator answers as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuntimeVersion {
    /// CoreCLR 3.1 (observed: 3.1.23).
    Core31,
    /// .NET 8 (observed: 8.0.4). The default: the newest version observed on a real runtime.
    #[default]
    Net8,
    /// .NET 9 (read from source; not observed).
    Net9,
    /// .NET 10 (read from source; not observed).
    Net10,
}

impl RuntimeVersion {
    /// Every version, oldest first.
    pub const ALL: [RuntimeVersion; 4] = [
        RuntimeVersion::Core31,
        RuntimeVersion::Net8,
        RuntimeVersion::Net9,
        RuntimeVersion::Net10,
    ];

    /// The name scenario files use: `"3.1"`, `"8.0"`, `"9.0"`, `"10.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeVersion::Core31 => "3.1",
            RuntimeVersion::Net8 => "8.0",
            RuntimeVersion::Net9 => "9.0",
            RuntimeVersion::Net10 => "10.0",
        }
    }

    /// The real runtime the version's answers were observed on by the conformance lane
    /// (`"3.1.23"`, `"8.0.4"`); `None` for a version read from source only.
    pub fn observed_on(self) -> Option<&'static str> {
        match self {
            RuntimeVersion::Core31 => Some("3.1.23"),
            RuntimeVersion::Net8 => Some("8.0.4"),
            RuntimeVersion::Net9 | RuntimeVersion::Net10 => None,
        }
    }

    /// The version named `text` (`"3.1"`, `"8.0"`, `"9.0"`, `"10.0"`).
    pub fn parse(text: &str) -> Option<RuntimeVersion> {
        RuntimeVersion::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// `sizeof(CONTEXT)` a `COR_PRF_SNAPSHOT_REGISTER_CONTEXT` callback receives (R25, R44).
    /// 1232 on CoreCLR 3.1 (observed: every `_regctx` case). 3104 on .NET 8 for Unix
    /// (observed: every `_regctx` case, `sandwich`): the runtime's own x64 `CONTEXT` gained
    /// the extended (AVX-512) register state. Windows' `CONTEXT` is the operating system's,
    /// 1232 bytes in every version (not observed on .NET 8).
    pub fn context_size(self, platform: Platform) -> u32 {
        match (self, platform) {
            (RuntimeVersion::Net8, Platform::Unix) => 3104,
            _ => Context::SIZE as u32,
        }
    }

    /// Whether an activation spinning in a loop runs on-stack-replacement code: on .NET 8 a
    /// method with a loop is first compiled at tier 0 and a loop that runs long moves to an
    /// OSR body of the same method (same `FunctionID`, its own code, outside the regions
    /// `GetCodeInfo2` reports; observed: `x_susp/target`, `t_in_catch/target`). CoreCLR 3.1
    /// compiles a method with a loop fully optimized at once and has no OSR (observed: the
    /// same cases report the IP inside the method's code). On from .NET 7 on x64
    /// (`dotnet/runtime` pull request #65675 made `TC_QuickJitForLoops` and
    /// `TC_OnStackReplacement` default to 1), so on in 9 and 10 as well.
    pub fn replaces_loops_on_stack(self) -> bool {
        self != RuntimeVersion::Core31
    }

    /// Whether a hot JIT-compiled method passes through an instrumented tier (dynamic PGO)
    /// before tier 1: .NET 8 compiles a method without ReadyToRun code at tier 0, then, once
    /// it is called often, at an instrumented tier that gathers the profile, and only then at
    /// tier 1, so such a method has three native code bodies (observed: the `osr` probe's hot
    /// method, three bodies listed by `GetNativeCodeStartAddresses` on 8.0.4, two on 3.1.23,
    /// which has no dynamic PGO; the tiers as dotnet/runtime's
    /// `docs/design/features/DynamicPgo-InstrumentedTiers.md` draws them). ReadyToRun code
    /// promoted to tier 1 is not observed and keeps its two bodies. On in 9 and 10 (dynamic
    /// PGO is the default since .NET 8; not observed).
    pub fn instruments_hot_code(self) -> bool {
        self != RuntimeVersion::Core31
    }

    /// Whether exception dispatch is managed code: the first and second passes run in
    /// CoreLib's `System.Runtime.EH` (`RhThrowEx`, `DispatchEx`, `FindFirstPassHandler`), which
    /// calls funclets through QCalls (`InternalCalls.RhpCallFilterFunclet`,
    /// `RhpCallCatchFunclet`, `RhpCallFinallyFunclet`), so those managed frames lie between
    /// a running funclet and the method that threw. Read from source: `dotnet/runtime`
    /// `src/coreclr/vm/exceptionhandling.cpp`, `DispatchManagedException` (calls
    /// `METHOD__EH__RH_THROW_EX`), `src/coreclr/nativeaot/Runtime.Base/src/System/Runtime/ExceptionHandling.cs`
    /// (`FindFirstPassHandler` calls `InternalCalls.RhpCallFilterFunclet`),
    /// `src/coreclr/vm/exceptionhandlingqcalls.h` (`CallFilterFunclet` and the other QCalls).
    /// The default from .NET 9 (issue #101729: "caused by the new EH in .NET 9", turned off by
    /// `DOTNET_LegacyExceptionHandling=1`), the only one in 10. 3.1 and 8 dispatch in native
    /// code (`ProcessCLRException`; observed: `t_in_filter`, `catch`, `finally`, `filter`).
    pub fn dispatches_exceptions_in_managed_code(self) -> bool {
        self >= RuntimeVersion::Net9
    }

    /// Whether `DoStackSnapshot` leaves the managed exception-dispatch frames out: .NET 10's
    /// `ProfilerStackWalkCallback` (`dotnet/runtime` `src/coreclr/vm/proftoeeinterfaceimpl.cpp`,
    /// read at a commit of the .NET 10 code line) skips frames of the classes `System.Runtime.EH`,
    /// `System.Runtime.ExceptionServices.InternalCalls` and `System.Runtime.StackFrameIterator`,
    /// and the `InlinedCallFrame` of a QCall those classes made (marked
    /// `InlinedCallFrameMarker::ExceptionHandlingHelper`), whose native run then has no
    /// `funcId == 0` callback. The .NET 6–8 code line has no such skip; whether 9.0 has it was not
    /// found, so 9.0 reports the frames (what a walk meets when nothing hides them).
    pub fn hides_exception_dispatch(self) -> bool {
        self >= RuntimeVersion::Net10
    }

    /// Whether the slow-path enter/leave/tailcall hooks push a helper-method Frame, from which
    /// an unseeded walk of the hook's own thread begins (R35). They do up to .NET 9 (CoreCLR
    /// v3.1.23 `src/vm/proftoeeinterfaceimpl.cpp`, `ProfileEnter`: `HELPER_METHOD_FRAME_BEGIN`).
    /// `dotnet/runtime` pull request #107152 ("Remove helper method frame from Profiler hooks",
    /// merged for .NET 10) removed it: the walk then starts at the next Frame down, and with none
    /// left it stops nowhere, `E_FAIL`, which issue #130220 reports for a synchronous
    /// `DoStackSnapshot` from an ELT hook on .NET 10.0.109, linux-x64 ("works … for .NET 8 and
    /// .NET 9").
    pub fn hooks_push_a_frame(self) -> bool {
        self <= RuntimeVersion::Net9
    }

    /// Whether a code lookup (`DoStackSnapshot`'s seed check, `GetFunctionFromIP`,
    /// `GetCodeInfo*`) takes the code manager's reader lock, refusing an asynchronous caller
    /// with `CORPROF_E_ASYNCHRONOUS_UNSAFE` while a writer holds it (R13.2, R14, R42). Up to
    /// .NET 9 it does (CoreCLR v3.1.23 `proftoeeinterfaceimpl.cpp`, `IsContextInManagedCode`
    /// with a `HostCallPreference`; the same in the .NET 6–8 code line). In the .NET 10 code line
    /// `IsContextInManagedCode(const CONTEXT*)` calls `ExecutionManager::IsManagedCode` and
    /// cannot fail, and `GetFunctionInfoInternal` takes no reader lock (`dotnet/runtime`
    /// `src/coreclr/vm/proftoeeinterfaceimpl.cpp`): no lookup waits or is refused.
    pub fn code_lookups_take_the_reader_lock(self) -> bool {
        self <= RuntimeVersion::Net9
    }

    /// Whether `GetFunctionFromIP2` and `GetCodeInfo3` may trigger a GC, so that a managed
    /// thread may call them only from a callback with `IN_TRIGGERS_SCOPE` (R38). Up to .NET 9
    /// they are `PROFILER_TO_CLR_ENTRYPOINT_SYNC_EX(kP2EEAllowableAfterAttach | kP2EETriggers)`
    /// (CoreCLR v3.1.23 and the .NET 6–8 code line, `proftoeeinterfaceimpl.cpp`); in the .NET 10
    /// code line without `kP2EETriggers` (`GC_NOTRIGGER`; `GetCodeInfo3` walks code versions
    /// without the code-versioning lock): any callback will do.
    pub fn code_version_lookups_trigger(self) -> bool {
        self <= RuntimeVersion::Net9
    }

    /// Whether `EnumThreads`, called from `RuntimeSuspendFinished` of a suspension the
    /// profiler did not request, stalls the process: .NET 9 only. The enumerator takes the
    /// thread-store lock the suspending thread already holds, and releasing it releases the
    /// suspension's hold, which must last until the runtime restarts (`dotnet/runtime` issue
    /// #110062, reported on .NET 9 with a profiler calling `EnumThreads` from
    /// `RuntimeSuspendFinished`; pull request #110548, merged for .NET 10, skips the lock
    /// whenever the runtime is already suspended). CoreCLR 3.1 and .NET 8 took the lock
    /// recursively and were not reported to stall. Only `RuntimeSuspendFinished` is modelled,
    /// the callback the report names; the pull request's wording suggests every callback raised
    /// while the runtime is suspended, which was not observed.
    pub fn enum_threads_stalls_a_suspension(self) -> bool {
        self == RuntimeVersion::Net9
    }
}

impl std::str::FromStr for RuntimeVersion {
    type Err = String;

    /// [`RuntimeVersion::parse`], or an error that lists the versions there are.
    fn from_str(text: &str) -> Result<RuntimeVersion, String> {
        RuntimeVersion::parse(text).ok_or_else(|| {
            let known: Vec<String> = RuntimeVersion::ALL.iter().map(|v| format!("`{v}`")).collect();
            format!(
                "`{text}` is not a runtime version simclr answers as ({})",
                known.join(", ")
            )
        })
    }
}

impl std::fmt::Display for RuntimeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
