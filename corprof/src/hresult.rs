//! `HRESULT` values the profiling API returns, with their symbolic names.
//!
//! Values are those of `winerror.h` and CoreCLR's `corerror.xml` (spec §1.1).

use std::fmt;

/// A COM `HRESULT`: the 32-bit status every profiling API call returns.
///
/// Success codes have the top bit clear. `Display` shows the value and, when known, its
/// symbolic name: `0x80131360 CORPROF_E_STACKSNAPSHOT_UNSAFE`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HResult(pub u32);

macro_rules! hresults {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        impl HResult {
            $($(#[$doc])* pub const $name: HResult = HResult($value);)*

            /// Every named `HRESULT` this crate knows, in declaration order.
            pub const ALL: &'static [HResult] = &[$(HResult::$name),*];

            /// The symbolic name of a known value (`"S_OK"`, `"E_FAIL"`, …), or `None`.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $(HResult::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// The value named `name`, if it is one this crate knows.
            pub fn from_name(name: &str) -> Option<HResult> {
                match name {
                    $(stringify!($name) => Some(HResult::$name),)*
                    _ => None,
                }
            }
        }
    };
}

hresults! {
    /// Success.
    S_OK = 0x0000_0000;
    /// Success, "false"; as a snapshot-callback return value it aborts the walk (R26).
    S_FALSE = 0x0000_0001;
    /// Not implemented; cross-thread `DoStackSnapshot` on Unix without `SuspendRuntime` (R11).
    E_NOTIMPL = 0x8000_4001;
    /// The interface is not supported (`QueryInterface`).
    E_NOINTERFACE = 0x8000_4002;
    /// A required pointer argument is NULL.
    E_POINTER = 0x8000_4003;
    /// Unspecified failure; e.g. a walk that produced no frame (R17).
    E_FAIL = 0x8000_4005;
    /// An argument is invalid; e.g. unknown `infoFlags` bits (R5).
    E_INVALIDARG = 0x8007_0057;
    /// Out of memory; e.g. `EnumThreads` could not allocate its enumerator.
    E_OUTOFMEMORY = 0x8007_000E;
    /// Catastrophic failure; an access violation caught inside the walk (R17, Windows).
    E_UNEXPECTED = 0x8000_FFFF;
    /// `IClassFactory` cannot supply the requested class (`DllGetClassObject`).
    CLASS_E_CLASSNOTAVAILABLE = 0x8004_0111;
    /// `HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER)`: a name was cut to fit the buffer.
    ERROR_INSUFFICIENT_BUFFER = 0x8007_007A;
    /// Metadata success code: a name was cut to fit the buffer.
    CLDB_S_TRUNCATION = 0x0013_1106;
    /// Metadata: no record has that token.
    CLDB_E_RECORD_NOTFOUND = 0x8013_1130;
    /// The function has no native code yet.
    CORPROF_E_FUNCTION_NOT_COMPILED = 0x8013_1350;
    /// The requested data is not yet available (e.g. MethodTable not restored).
    CORPROF_E_DATAINCOMPLETE = 0x8013_1351;
    /// The calling thread has never run managed code.
    CORPROF_E_NOT_MANAGED_THREAD = 0x8013_1355;
    /// The runtime is not far enough along to answer (e.g. GC not initialized).
    CORPROF_E_NOT_YET_AVAILABLE = 0x8013_135B;
    /// Never returned by CoreCLR: it is the fatal-error code of R11.1.
    CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD = 0x8013_135E;
    /// The seed (or the self-captured context) is not in managed code (R14, R15).
    CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX = 0x8013_135F;
    /// A walk is not safe now (R2, R8–R11, R13, R16).
    CORPROF_E_STACKSNAPSHOT_UNSAFE = 0x8013_1360;
    /// The snapshot callback returned something other than `S_OK` (R26).
    CORPROF_E_STACKSNAPSHOT_ABORTED = 0x8013_1361;
    /// A SYNC-only API called from a context that is not synchronous (R27, R38).
    CORPROF_E_UNSUPPORTED_CALL_SEQUENCE = 0x8013_1363;
    /// A lock the call needs could not be taken without blocking (R42).
    CORPROF_E_ASYNCHRONOUS_UNSAFE = 0x8013_1364;
    /// The profiler is detaching (R1).
    CORPROF_E_PROFILER_DETACHING = 0x8013_1367;
    /// Not available to a profiler that attached after startup.
    CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER = 0x8013_136F;
    /// `RequestProfilerDetach`: the profiler does not implement `ICorProfilerCallback3`.
    CORPROF_E_CALLBACK3_REQUIRED = 0x8013_136E;
    /// `RequestProfilerDetach`: the event mask holds flags that can never be cleared.
    CORPROF_E_IMMUTABLE_FLAGS_SET = 0x8013_1372;
    /// The runtime has not started (`SuspendRuntime`, R41).
    CORPROF_E_RUNTIME_UNINITIALIZED = 0x8013_1371;
    /// The event mask lacks a flag the call needs (R3).
    CORPROF_E_INCONSISTENT_WITH_FLAGS = 0x8013_1374;
    /// A runtime suspension is already in progress (R41).
    CORPROF_E_SUSPENSION_IN_PROGRESS = 0x8013_1388;
}

impl HResult {
    /// True for success codes (top bit clear), like the `SUCCEEDED` macro.
    pub fn is_success(self) -> bool {
        self.0 & 0x8000_0000 == 0
    }

    /// Parses `"0x8013135F"`, `"2148734815"` or a symbolic name such as `"E_FAIL"`.
    pub fn parse(text: &str) -> Option<HResult> {
        let text = text.trim();
        if let Some(hr) = HResult::from_name(text) {
            return Some(hr);
        }
        let value = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => text.parse::<u32>().ok()?,
        };
        Some(HResult(value))
    }
}

impl fmt::Display for HResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "0x{:08X} {name}", self.0),
            None => write!(f, "0x{:08X}", self.0),
        }
    }
}

impl fmt::Debug for HResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::HResult;

    #[test]
    fn display_shows_value_and_name() {
        assert_eq!(
            HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE.to_string(),
            "0x80131360 CORPROF_E_STACKSNAPSHOT_UNSAFE"
        );
        assert_eq!(HResult(0x12345).to_string(), "0x00012345");
    }

    #[test]
    fn spec_values_are_exact() {
        let expected = [
            ("S_OK", 0x0000_0000),
            ("S_FALSE", 0x0000_0001),
            ("E_NOTIMPL", 0x8000_4001),
            ("E_NOINTERFACE", 0x8000_4002),
            ("E_POINTER", 0x8000_4003),
            ("E_FAIL", 0x8000_4005),
            ("E_INVALIDARG", 0x8007_0057),
            ("E_OUTOFMEMORY", 0x8007_000E),
            ("E_UNEXPECTED", 0x8000_FFFF),
            ("CLASS_E_CLASSNOTAVAILABLE", 0x8004_0111),
            ("ERROR_INSUFFICIENT_BUFFER", 0x8007_007A),
            ("CLDB_S_TRUNCATION", 0x0013_1106),
            ("CLDB_E_RECORD_NOTFOUND", 0x8013_1130),
            ("CORPROF_E_FUNCTION_NOT_COMPILED", 0x8013_1350),
            ("CORPROF_E_DATAINCOMPLETE", 0x8013_1351),
            ("CORPROF_E_NOT_MANAGED_THREAD", 0x8013_1355),
            ("CORPROF_E_NOT_YET_AVAILABLE", 0x8013_135B),
            ("CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD", 0x8013_135E),
            ("CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX", 0x8013_135F),
            ("CORPROF_E_STACKSNAPSHOT_UNSAFE", 0x8013_1360),
            ("CORPROF_E_STACKSNAPSHOT_ABORTED", 0x8013_1361),
            ("CORPROF_E_UNSUPPORTED_CALL_SEQUENCE", 0x8013_1363),
            ("CORPROF_E_ASYNCHRONOUS_UNSAFE", 0x8013_1364),
            ("CORPROF_E_PROFILER_DETACHING", 0x8013_1367),
            ("CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER", 0x8013_136F),
            ("CORPROF_E_CALLBACK3_REQUIRED", 0x8013_136E),
            ("CORPROF_E_IMMUTABLE_FLAGS_SET", 0x8013_1372),
            ("CORPROF_E_RUNTIME_UNINITIALIZED", 0x8013_1371),
            ("CORPROF_E_INCONSISTENT_WITH_FLAGS", 0x8013_1374),
            ("CORPROF_E_SUSPENSION_IN_PROGRESS", 0x8013_1388),
        ];
        assert_eq!(HResult::ALL.len(), expected.len());
        for (name, value) in expected {
            assert_eq!(HResult::from_name(name), Some(HResult(value)), "{name}");
            assert_eq!(HResult(value).name(), Some(name));
        }
    }

    #[test]
    fn parse_accepts_hex_decimal_and_names() {
        assert_eq!(
            HResult::parse("0x8013135F"),
            Some(HResult::CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX)
        );
        assert_eq!(HResult::parse("1"), Some(HResult::S_FALSE));
        assert_eq!(HResult::parse("E_FAIL"), Some(HResult::E_FAIL));
        assert_eq!(HResult::parse("nonsense"), None);
        assert!(HResult::S_FALSE.is_success() && !HResult::E_FAIL.is_success());
    }
}
