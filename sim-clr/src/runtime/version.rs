//! The runtime versions simclr answers as, and every behaviour of a stack sampler's world that
//! differs between them, each with its evidence.
//!
//! The rules of `DoStackSnapshot` itself (R1–R18) read the same in every version; what changed
//! from CoreCLR 3.1 to .NET 8 is what the stacks look like and what a callback receives. Each
//! method below is one such difference, with the versions it holds for and where it was seen:
//! *observed* means a record of the real-runtime lane (`conformance/run.sh`, case named), on
//! CoreCLR 3.1.23 or .NET 8.0.4 for linux-x64.

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
}

impl RuntimeVersion {
    /// Every version, oldest first.
    pub const ALL: [RuntimeVersion; 2] = [RuntimeVersion::Core31, RuntimeVersion::Net8];

    /// The name scenario files use: `"3.1"`, `"8.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeVersion::Core31 => "3.1",
            RuntimeVersion::Net8 => "8.0",
        }
    }

    /// The version named `text` (`"3.1"`, `"8.0"`).
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

    /// Whether a run of native frames that native code left through a reverse P/Invoke (a
    /// delegate called from native code) gets its `funcId == 0` callback (R21). It does on
    /// CoreCLR 3.1, where the reverse transition is `UMThunkStub` and its `UMThkCallFrame`
    /// (observed: `sandwich`). It does not on .NET 8 (observed: `sandwich`): the walk goes
    /// from the managed method the delegate entered straight to the managed caller of the
    /// native run, with no callback for the native frames between. Why: .NET 8 enters the
    /// delegate through the reverse P/Invoke IL stub alone, without 3.1's stub and Frame;
    /// which part of the iterator then skips the marker was not read from source.
    pub fn reports_reverse_pinvoke_runs(self) -> bool {
        self == RuntimeVersion::Core31
    }

    /// Whether an activation spinning in a loop runs on-stack-replacement code: on .NET 8 a
    /// method with a loop is first compiled at tier 0 and a loop that runs long moves to an
    /// OSR body of the same method (same `FunctionID`, its own code, outside the regions
    /// `GetCodeInfo2` reports; observed: `x_susp/target`, `t_in_catch/target`). CoreCLR 3.1
    /// compiles a method with a loop fully optimized at once and has no OSR (observed: the
    /// same cases report the IP inside the method's code).
    pub fn replaces_loops_on_stack(self) -> bool {
        self == RuntimeVersion::Net8
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
