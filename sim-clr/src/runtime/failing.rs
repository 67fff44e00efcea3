//! Calls made to fail on demand: a scenario's `[[fail]]` rules, applied to the
//! `ICorProfilerInfo` calls of profiler code and to its OS thread calls.
//!
//! A sampler's error paths are where its worst bugs hide (a runtime suspension never resumed
//! when `EnumThreads` fails, a lock kept when a walk returns early), and a simulated runtime
//! that answers every call as the model says never takes them. A rule names an API, which of
//! its calls fail (counted from 1 in each run, over the calls the rule watches), optionally
//! the only thread whose calls it watches, and the `HRESULT` they return. In a run that
//! injects failures (`--inject`), every other call of a method a real runtime can fail for a
//! reason outside the profiler's code ([`INJECTED`]) asks the run's chooser whether it fails,
//! a choice kept in the schedule. A failed call does nothing else: it is a scheduling point
//! and a trace line (marked `injected`), as any call.

use corprof::HResult;

/// The calls a rule may name: every `ICorProfilerInfo` method the simulated runtime answers,
/// and the OS's thread calls a sampler stops threads with (`SuspendThread`, `ResumeThread`,
/// `GetThreadContext`: the process's OS layer, for Rust and hosted code alike).
pub const FAILABLE_APIS: [&str; 30] = [
    "DoStackSnapshot",
    "GetFunctionFromIP",
    "GetFunctionFromIP2",
    "GetFunctionFromIP3",
    "GetCodeInfo2",
    "GetCodeInfo3",
    "GetReJITIDs",
    "GetNativeCodeStartAddresses",
    "GetCodeInfo4",
    "GetFunctionInfo",
    "GetFunctionInfo2",
    "GetCurrentThreadID",
    "SetEventMask",
    "GetEventMask",
    "InitializeCurrentThread",
    "SuspendRuntime",
    "ResumeRuntime",
    "EnumThreads",
    "GetThreadInfo",
    "GetClassIDInfo2",
    "GetModuleInfo2",
    "GetModuleMetaData",
    "GetTokenAndMetaDataFromFunction",
    "GetAppDomainInfo",
    "GetAssemblyInfo",
    "SetEventMask2",
    "RequestProfilerDetach",
    "SuspendThread",
    "ResumeThread",
    "GetThreadContext",
];

/// A failure `--inject` may choose: a call a real runtime (or OS) can fail at any moment for
/// a reason the calling profiler code does not control, what it fails with, and the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The API (one of [`FAILABLE_APIS`]).
    pub api: &'static str,
    /// What the failed call returns (for an OS call: its failure).
    pub hresult: HResult,
    /// Why the call can fail so, and where that is seen.
    pub evidence: &'static str,
}

/// Every failure `--inject` chooses from. The other calls fail only for what the simulator
/// models already (a call out of sequence, an argument, the runtime's state: native code for
/// `GetFunctionFromIP`, no suspension for `ResumeRuntime`), or for no reason ever seen
/// (`InitializeCurrentThread` always answers `S_OK`; `ResumeThread` of a thread one
/// suspended): `[[fail]]` rules still fail them on demand.
pub const INJECTED: [Injected; 5] = [
    Injected {
        api: "DoStackSnapshot",
        hresult: HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE,
        evidence: "another party holds the target's hijack lock, or the runtime cannot get a safe context for it (R8; ProfToEEInterfaceImpl::DoStackSnapshot, GetSafelyRedirectableThreadContext failing)",
    },
    Injected {
        api: "EnumThreads",
        hresult: HResult::E_OUTOFMEMORY,
        evidence: "the enumerator or its list cannot be allocated (ProfToEEInterfaceImpl::EnumThreads: `new (nothrow) ProfilerThreadEnum`, then ProfilerThreadEnum::Init)",
    },
    Injected {
        api: "SuspendRuntime",
        hresult: HResult::CORPROF_E_SUSPENSION_IN_PROGRESS,
        evidence: "another suspension (a GC's) is in progress when the call checks (R41; ProfToEEInterfaceImpl::SuspendRuntime)",
    },
    Injected {
        api: "SuspendThread",
        hresult: HResult::E_FAIL,
        evidence: "the OS refuses to suspend the thread, as the runtime's own walks allow for (R11.2: Thread::SuspendThread answering STR_Failure)",
    },
    Injected {
        api: "GetThreadContext",
        hresult: HResult::E_FAIL,
        evidence: "the OS cannot give the suspended thread's registers, as the runtime's own walks allow for (R13.1)",
    },
];

/// The failure `--inject` may choose for a call of `api`, if there is one.
pub fn injected(api: &str) -> Option<&'static Injected> {
    INJECTED.iter().find(|i| i.api == api)
}

/// One rule: calls of `api` that fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailRule {
    /// The API (one of [`FAILABLE_APIS`]).
    pub api: &'static str,
    /// Which of the calls it watches fail, counted from 1 (`None`: every one).
    pub calls: Option<Vec<u32>>,
    /// The only thread (by index) whose calls it watches (`None`: any caller, a thread the
    /// runtime does not know included).
    pub thread: Option<usize>,
    /// What a failed call returns (a failure code).
    pub hresult: HResult,
}

/// A run's rules and how many calls each has watched.
#[derive(Clone, Debug, Default)]
pub(crate) struct Failing {
    rules: Vec<(FailRule, u32)>,
    /// Every call no rule fails asks the run's chooser whether it fails (`--inject`).
    pub injecting: bool,
}

impl Failing {
    /// Rules `rules`, no call watched yet.
    pub(crate) fn new(rules: &[FailRule]) -> Failing {
        Failing {
            rules: rules.iter().map(|r| (r.clone(), 0)).collect(),
            injecting: false,
        }
    }

    /// A call of `api` by thread `caller` (`None`: a thread the runtime does not know) is
    /// made: the `HRESULT` it must fail with, if a rule says so. Every rule that watches the
    /// call counts it.
    pub(crate) fn call(&mut self, api: &str, caller: Option<usize>) -> Option<HResult> {
        let mut failed = None;
        for (rule, seen) in &mut self.rules {
            if rule.api != api || rule.thread.is_some_and(|t| Some(t) != caller) {
                continue;
            }
            *seen += 1;
            let fails = rule.calls.as_ref().is_none_or(|calls| calls.contains(seen));
            if fails && failed.is_none() {
                failed = Some(rule.hresult);
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(api: &'static str, calls: Option<Vec<u32>>, thread: Option<usize>) -> FailRule {
        FailRule {
            api,
            calls,
            thread,
            hresult: HResult::E_FAIL,
        }
    }

    #[test]
    fn a_rule_fails_the_calls_it_names_counting_only_those_it_watches() {
        let mut f = Failing::new(&[rule("EnumThreads", Some(vec![2, 4]), Some(1))]);
        let answers: Vec<_> = [Some(1), Some(0), Some(1), None, Some(1), Some(1)]
            .into_iter()
            .map(|caller| f.call("EnumThreads", caller))
            .collect();
        let fail = Some(HResult::E_FAIL);
        assert_eq!(answers, [None, None, fail, None, None, fail]);
        assert_eq!(f.call("SuspendRuntime", Some(1)), None);
    }

    #[test]
    fn without_calls_every_watched_call_fails_and_the_first_rule_says_how() {
        let mut other = rule("SuspendRuntime", None, None);
        other.hresult = HResult(0x8013_1363);
        let mut f = Failing::new(&[other, rule("SuspendRuntime", Some(vec![1]), None)]);
        assert_eq!(f.call("SuspendRuntime", None), Some(HResult(0x8013_1363)));
        assert_eq!(f.call("SuspendRuntime", Some(3)), Some(HResult(0x8013_1363)));
    }
}
