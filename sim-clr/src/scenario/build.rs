//! Validation: turns a deserialized file into a [`Scenario`], or an error with file, line and
//! field.

use super::error::{ScenarioError, Source};
use super::model::{CallModel, CodeModel, FileModel, FrameModel, ThreadModel};
use crate::code::{CodeKind, CodeMap, FunctionSpec};
use crate::runtime::{builtin, CallContext, CallbackKind, Platform, Runtime, RuntimeConfig};
use crate::synth::{Epilogue, FunctionShape, PrologStep};
use crate::thread::{
    ExceptionState, FrameKind, Funclet, Lifecycle, Mode, OsContext, StackEntry, Thread, ThreadKind,
    STACK_SIZE,
};
use crate::trace::FaultKind;
use corprof::flags::{event, snapshot};
use corprof::{Context, HResult, Register};
use std::ops::Range;
use toml::{Spanned, Value};

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
    pub process: crate::process::ProcessSpec,
    /// How the program drives a hosted native profiler library (`[host]`).
    pub host: super::host::HostSpec,
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
        /// A call made from inside the callback at the given frames.
        nested: Option<(NestedAt, Box<Call>)>,
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
}

impl Scenario {
    /// Parses and validates scenario text; `file` is used in error messages only.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let src = Source::new(file, text);
        let model: FileModel = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
        Builder { src: &src }.scenario(model, file)
    }

    /// Reads, parses and validates a scenario file.
    /// Only regular files of at most [`MAX_FILE_BYTES`] are read: a FIFO or a device is
    /// refused before it is opened (opening a FIFO would block).
    pub fn load(path: &std::path::Path) -> Result<Scenario, ScenarioError> {
        use std::io::Read;
        let file = path.display().to_string();
        let fail = |message: String| ScenarioError {
            file: file.clone(),
            line: 0,
            field: "<file>".into(),
            message,
        };
        let metadata = std::fs::metadata(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        if !metadata.is_file() {
            return Err(fail("cannot read: not a regular file".into()));
        }
        let too_big = || {
            fail(format!(
                "the file is larger than the limit of {MAX_FILE_BYTES} bytes"
            ))
        };
        if metadata.len() > MAX_FILE_BYTES {
            return Err(too_big());
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| fail(format!("cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(too_big());
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            // Where the bad byte is, as an editor shows it, and the key being written there.
            let bytes = e.as_bytes();
            let valid = e.utf8_error().valid_up_to();
            let lossy = String::from_utf8_lossy(&bytes[..valid]);
            let source = Source::new(&file, &lossy);
            let line_start = lossy.rfind('\n').map_or(0, |i| i + 1);
            let column = lossy[line_start..].chars().count() + 1;
            ScenarioError {
                file: file.clone(),
                line: source.line(lossy.len()),
                field: source.key_at(lossy.len()),
                message: format!("invalid UTF-8 at column {column}"),
            }
        })?;
        Scenario::parse(&file, &text)
    }

    /// A fresh runtime in the scenario's initial state.
    pub fn runtime(&self) -> Runtime {
        Runtime::new(self.config.clone(), self.code.clone(), self.threads.clone())
    }
}

struct Builder<'a> {
    src: &'a Source<'a>,
}

type Res<T> = Result<T, ScenarioError>;

fn one_of<T: Clone>(text: &str, options: &[(&str, T)]) -> Option<T> {
    options.iter().find(|(n, _)| *n == text).map(|(_, v)| v.clone())
}

fn names<T>(options: &[(&str, T)]) -> String {
    options
        .iter()
        .map(|(n, _)| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How `expect_stack` writes a `funcId == 0` callback (a run of native frames).
pub const NATIVE_RUN: &str = "0";

impl Builder<'_> {
    /// `expect_stack`: method names of the code map, or [`NATIVE_RUN`].
    fn expect_stack(&self, m: &CallModel, code: &CodeMap) -> Res<Option<Vec<String>>> {
        let Some(stack) = &m.expect_stack else {
            return Ok(None);
        };
        if let Some(bad) = stack.get_ref().iter().find(|n| {
            *n != NATIVE_RUN
                && code
                    .by_name(n)
                    .is_none_or(|i| !code.function(i).kind.is_managed())
        }) {
            return Err(self.err(
                stack.span(),
                "expect_stack",
                format!(
                    "`{bad}` is neither a managed method of the scenario nor \"{NATIVE_RUN}\" (a native run)"
                ),
            ));
        }
        Ok(Some(stack.get_ref().clone()))
    }

    /// `nested_at`: a callback index, an ascending array of them, or `"every"`.
    fn nested_at(&self, value: &Spanned<Value>) -> Res<NestedAt> {
        let bad = || {
            self.err(
                value.span(),
                "nested_at",
                "expected a callback index (0-based), an array of ascending indices, or \"every\"",
            )
        };
        let index = |v: &Value| match v {
            Value::Integer(n) => usize::try_from(*n).ok(),
            _ => None,
        };
        match value.get_ref() {
            Value::String(s) if s == "every" => Ok(NestedAt::Every),
            Value::Array(items) => {
                let at: Vec<usize> = items.iter().map(index).collect::<Option<_>>().ok_or_else(bad)?;
                if at.is_empty() || !at.windows(2).all(|w| w[0] < w[1]) {
                    return Err(bad());
                }
                Ok(NestedAt::Frames(at))
            }
            v => index(v).map(|n| NestedAt::Frames(vec![n])).ok_or_else(bad),
        }
    }

    fn err(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> ScenarioError {
        self.src.error(span, field, message)
    }

    fn choice<T: Clone>(&self, value: &Spanned<String>, field: &str, options: &[(&str, T)]) -> Res<T> {
        one_of(value.get_ref(), options).ok_or_else(|| {
            self.err(
                value.span(),
                field,
                format!("`{}` is not one of {}", value.get_ref(), names(options)),
            )
        })
    }

    fn scenario(&self, m: FileModel, file: &str) -> Res<Scenario> {
        // The limits, before anything is built from the counts.
        for (field, items, limit) in [
            (
                "code",
                m.code.iter().map(|c| c.span()).nth(MAX_FUNCTIONS),
                MAX_FUNCTIONS,
            ),
            (
                "threads",
                m.threads.iter().map(|t| t.span()).nth(MAX_THREADS),
                MAX_THREADS,
            ),
            (
                "calls",
                m.calls.iter().map(|c| c.span()).nth(MAX_CALLS),
                MAX_CALLS,
            ),
        ] {
            if let Some(span) = items {
                return Err(self.err(
                    span,
                    field,
                    format!("more than the limit of {limit} [[{field}]] tables"),
                ));
            }
        }
        let platform = self.choice(
            &m.platform,
            "platform",
            &[("windows", Platform::Windows), ("unix", Platform::Unix)],
        )?;
        let mut config = RuntimeConfig {
            platform,
            ..RuntimeConfig::default()
        };
        let r = &m.runtime;
        config.started = r.started.unwrap_or(true);
        config.gc_initialized = r.gc_initialized.unwrap_or(true);
        config.detaching = r.detaching.unwrap_or(false);
        config.suspend_in_progress = r.suspend_in_progress.unwrap_or(false);
        if let Some(mask) = &r.event_mask {
            config.event_mask = self.bits(mask, "event_mask", event::from_name)?;
        }
        if let Some(size) = &r.context_size {
            if (*size.get_ref() as usize) < Context::SIZE {
                return Err(self.err(
                    size.span(),
                    "context_size",
                    format!("must be at least {}", Context::SIZE),
                ));
            }
            config.context_size = *size.get_ref();
        }
        let functions = self.functions(&m.code)?;
        let code = CodeMap::build(&functions, platform).map_err(|e| match m.code.get(e.function) {
            Some(c) => self.err(c.span(), "shape", e.message),
            None => self.err(0..0, "code", e.message),
        })?;
        let mut threads = Vec::new();
        let mut declared_calls = Vec::new();
        let mut thread_names = std::collections::BTreeSet::new();
        let mut total_frames = 0;
        for (i, t) in m.threads.iter().enumerate() {
            if !thread_names.insert(t.get_ref().name.get_ref().as_str()) {
                let name = &t.get_ref().name;
                return Err(self.err(
                    name.span(),
                    "name",
                    format!("thread `{}` is declared twice", name.get_ref()),
                ));
            }
            let thread = self.thread(t.get_ref(), i, &code)?;
            total_frames += thread.stack.len();
            if total_frames > MAX_FRAMES {
                return Err(self.err(
                    t.span(),
                    "frames",
                    format!("the threads have more than the limit of {MAX_FRAMES} frames in all"),
                ));
            }
            declared_calls.push(
                thread
                    .stack
                    .iter()
                    .filter(|e| matches!(e, StackEntry::Call { .. }))
                    .count(),
            );
            threads.push(thread);
        }
        let mut calls = Vec::with_capacity(m.calls.len());
        for c in &m.calls {
            let ctx = CallCtx {
                threads: &threads,
                declared_calls: &declared_calls,
                code: &code,
                earlier: &calls,
            };
            let call = self.call(c, &ctx, None)?;
            calls.push(call);
        }
        let stem = std::path::Path::new(file)
            .file_stem()
            .map_or(file.to_string(), |s| s.to_string_lossy().into_owned());
        let process = super::process::process_spec(self.src, &m, &threads, &declared_calls, &code)?;
        let host = super::host::host_spec(self.src, m.host.as_ref(), &threads, &code)?;
        Ok(Scenario {
            name: m.name.unwrap_or(stem),
            description: m.description.unwrap_or_default(),
            config,
            code,
            threads,
            declared_calls,
            calls,
            process,
            host,
        })
    }

    /// A flag word given as a number, a name, or a list of names.
    fn bits(&self, value: &Spanned<Value>, field: &str, lookup: impl Fn(&str) -> Option<u32>) -> Res<u32> {
        let name_bits = |v: &Value| -> Res<u32> {
            let s = v
                .as_str()
                .ok_or_else(|| self.err(value.span(), field, "expected a flag name"))?;
            lookup(s).ok_or_else(|| self.err(value.span(), field, format!("unknown flag `{s}`")))
        };
        match value.get_ref() {
            Value::Integer(n) => u32::try_from(*n)
                .map_err(|_| self.err(value.span(), field, format!("{n} does not fit in 32 bits"))),
            Value::String(_) => name_bits(value.get_ref()),
            Value::Array(items) => items.iter().try_fold(0, |acc, v| Ok(acc | name_bits(v)?)),
            _ => Err(self.err(
                value.span(),
                field,
                "expected a number, a flag name or a list of flag names",
            )),
        }
    }

    fn functions(&self, code: &[Spanned<CodeModel>]) -> Res<Vec<FunctionSpec>> {
        let mut out: Vec<FunctionSpec> = Vec::new();
        let builtins = builtins();
        let mut names: std::collections::BTreeSet<&str> = builtins.iter().map(|f| f.name.as_str()).collect();
        for c in code {
            let c = c.get_ref();
            let name = c.name.get_ref();
            if name.trim().is_empty() {
                return Err(self.err(c.name.span(), "name", "a function needs a name"));
            }
            if !names.insert(name.as_str()) {
                return Err(self.err(
                    c.name.span(),
                    "name",
                    format!("function `{name}` is declared twice (or is a built-in)"),
                ));
            }
            let kind = self.choice(&c.kind, "kind", &KINDS)?;
            let mut spec = FunctionSpec::new(name, kind);
            spec.module = c.module.clone();
            if let Some(size) = &c.size {
                if !(16..=0x10_0000).contains(size.get_ref()) {
                    return Err(self.err(size.span(), "size", "must be between 16 and 0x100000 bytes"));
                }
                spec.size = *size.get_ref();
            }
            if let Some(fs) = &c.frame_size {
                let v = *fs.get_ref();
                if v < 16 || v % 16 != 0 || v > 0x1_0000 {
                    return Err(self.err(
                        fs.span(),
                        "frame_size",
                        "must be a multiple of 16 between 16 and 0x10000 (the x64 ABI keeps RSP 16-aligned at calls)",
                    ));
                }
                spec.frame_size = v;
            }
            if let Some(shape) = &c.shape {
                spec.shape = Some(self.shape(shape)?);
            }
            spec.split = c.split;
            spec.compiled = c.compiled.unwrap_or(true);
            spec.generic_definition = c.generic_definition;
            if let Some(method) = &c.method {
                if !kind.has_metadata() {
                    return Err(self.err(
                        method.span(),
                        "method",
                        "only a method with metadata has a metadata name",
                    ));
                }
                spec.method = Some(method.get_ref().clone());
            }
            if let Some(args) = &c.type_args {
                if !kind.has_metadata() || args.is_empty() || args.iter().any(|a| a.trim().is_empty()) {
                    return Err(self.err(
                        c.name.span(),
                        "type_args",
                        "type arguments are a non-empty list of type names, on a method with metadata",
                    ));
                }
                spec.type_args = args.clone();
            }
            spec.version_of = c.version_of.clone();
            spec.rejit = c.rejit.unwrap_or(0);
            if spec.rejit != 0 && spec.version_of.is_none() {
                return Err(self.err(
                    c.name.span(),
                    "rejit",
                    "a ReJIT id belongs to a code version (`version_of`)",
                ));
            }
            out.push(spec);
        }
        out.extend(builtins);
        Ok(out)
    }

    /// A frame's IP offset: an integer that is an instruction boundary of the function, or
    /// `"entry"`, `"prologue:K"` (after K prologue instructions), `"epilogue:K"` (the K-th
    /// instruction of the first epilogue proper, from 0).
    fn frame_offset(&self, value: &Spanned<Value>, func: &crate::code::Function) -> Res<u64> {
        let machine = &func.machine;
        let err = |m: String| self.err(value.span(), "offset", m);
        let offset = match value.get_ref() {
            Value::Integer(n) => u64::try_from(*n).map_err(|_| err(format!("{n} is negative")))?,
            Value::String(s) => {
                let (place, k) = s.split_once(':').unwrap_or((s, "0"));
                let k: usize = k.parse().map_err(|_| {
                    err(format!(
                        "`{s}`: expected \"entry\", \"prologue:K\" or \"epilogue:K\""
                    ))
                })?;
                let found = match place {
                    "entry" => Some(0),
                    "prologue" if k == 0 => Some(0),
                    "prologue" => machine.code.prolog_ends.get(k - 1).copied(),
                    "epilogue" => {
                        let proper = machine.code.epilogues.first().map(|e| e.1);
                        let at = proper.and_then(|p| machine.boundaries.iter().position(|&b| b == p));
                        at.and_then(|i| machine.boundaries.get(i + k)).copied()
                    }
                    _ => None,
                };
                found.ok_or_else(|| {
                    err(format!(
                        "`{s}` is not a place in `{}` (entry, prologue:0–{}, epilogue:K)",
                        func.name,
                        machine.code.prolog_ends.len()
                    ))
                })?
            }
            _ => {
                return Err(err(
                    "expected an integer or \"entry\", \"prologue:K\", \"epilogue:K\"".into(),
                ))
            }
        };
        if machine.state(offset).is_none() {
            let sites: Vec<String> = machine.return_sites().iter().map(|s| format!("{s:#x}")).collect();
            return Err(err(format!(
                "{offset:#x} is not an instruction boundary of `{}` ({:#x} bytes of code; its return sites are {})",
                func.name,
                machine.code.code_len,
                sites.join(", ")
            )));
        }
        Ok(offset)
    }

    /// A function shape: `"leaf"` (frameless, no calls) or a table `{ prologue = [..],
    /// calls = N, loop = bool, epilogues = [..] }` of assembly lines.
    fn shape(&self, value: &Spanned<Value>) -> Res<FunctionShape> {
        let err = |m: String| self.err(value.span(), "shape", m);
        let table = match value.get_ref() {
            Value::String(s) if s == "leaf" => return Ok(FunctionShape::leaf()),
            Value::Table(t) => t,
            _ => {
                return Err(err(
                    "expected \"leaf\" or { prologue = [..], calls = N, loop = bool, epilogues = [..] }"
                        .into(),
                ))
            }
        };
        if let Some(key) = table
            .keys()
            .find(|k| !["prologue", "calls", "loop", "epilogues"].contains(&k.as_str()))
        {
            return Err(err(format!(
                "unknown key `{key}` (prologue, calls, loop, epilogues)"
            )));
        }
        let lines = |key: &str| -> Res<Vec<String>> {
            match table.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| err(format!("`{key}` lists strings")))
                    })
                    .collect(),
                Some(_) => Err(err(format!("`{key}` must be a list of strings"))),
            }
        };
        let prologue = lines("prologue")?
            .iter()
            .map(|l| PrologStep::parse(l).ok_or_else(|| err(format!("`{l}` is not a prologue instruction (push REG, sub rsp, N, mov rbp, rsp, lea rbp, [rsp+N], mov [rsp+N], REG, movaps [rsp+N], xmmN)"))))
            .collect::<Res<Vec<_>>>()?;
        let mut epilogues = lines("epilogues")?
            .iter()
            .map(|l| {
                Epilogue::parse(l).ok_or_else(|| {
                    err(format!(
                        "`{l}` is not an epilogue (ret, ret N, rep ret, jmp, jmp [rip], jmp rax)"
                    ))
                })
            })
            .collect::<Res<Vec<_>>>()?;
        if epilogues.is_empty() {
            epilogues.push(Epilogue::Ret);
        }
        let calls = match table.get("calls") {
            None => 1,
            Some(Value::Integer(n)) if (0..=16).contains(n) => *n as u8,
            Some(_) => return Err(err("`calls` is an integer from 0 to 16".into())),
        };
        let back_edges = match table.get("loop") {
            None => false,
            Some(Value::Boolean(b)) => *b,
            Some(_) => return Err(err("`loop` is a boolean".into())),
        };
        let shape = FunctionShape {
            prologue,
            calls,
            back_edges,
            epilogues,
            machine_frame: false,
        };
        shape.validate().map_err(|e| err(e.to_string()))?;
        Ok(shape)
    }

    fn thread(&self, m: &ThreadModel, index: usize, code: &CodeMap) -> Res<Thread> {
        let kind = match &m.kind {
            Some(k) => self.choice(
                k,
                "kind",
                &[("managed", ThreadKind::Managed), ("native", ThreadKind::Native)],
            )?,
            None => ThreadKind::Managed,
        };
        let mut t = Thread::new(m.name.get_ref(), kind, index);
        for f in &m.frames {
            self.frame(f, &mut t, code)?;
        }
        if let Some(last) = m.frames.last() {
            if matches!(t.stack.last(), Some(StackEntry::Frame(_))) {
                return Err(self.err(
                    last.span(),
                    "frame",
                    "an explicit Frame lives in the call below it: the last entry must be a call",
                ));
            }
        }
        let depth = t.stack_bytes(code);
        if depth > STACK_SIZE / 2 {
            return Err(self.err(
                m.name.span(),
                "frames",
                format!(
                    "the frames need {depth:#x} bytes of stack; at most {:#x} fit",
                    STACK_SIZE / 2
                ),
            ));
        }
        let leaf_managed = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { function, .. } => Some(code.function(*function).kind.is_managed()),
            StackEntry::Frame(_) => None,
        });
        t.mode = match &m.mode {
            Some(mode) => self.choice(
                mode,
                "mode",
                &[
                    ("cooperative", Mode::Cooperative),
                    ("preemptive", Mode::Preemptive),
                ],
            )?,
            None if leaf_managed == Some(true) => Mode::Cooperative,
            None => Mode::Preemptive,
        };
        if let Some(state) = &m.state {
            t.lifecycle = self.choice(
                state,
                "state",
                &[
                    ("alive", Lifecycle::Alive),
                    ("destroying", Lifecycle::Destroying),
                    ("dead", Lifecycle::Dead),
                    ("deleted", Lifecycle::Deleted),
                ],
            )?;
        }
        // The leaf-most handler on the stack says which pass the exception is in.
        let handler = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { funclet: Some(f), .. } => Some(*f),
            _ => None,
        });
        t.exception = match handler {
            Some(Funclet::Filter) => ExceptionState::FirstPass,
            Some(Funclet::Catch | Funclet::Finally) => ExceptionState::UnwindingInManaged,
            None => ExceptionState::None,
        };
        if let Some(e) = &m.exception {
            t.exception = self.choice(
                e,
                "exception",
                &[
                    ("none", ExceptionState::None),
                    ("first_pass", ExceptionState::FirstPass),
                    ("unwinding", ExceptionState::Unwinding),
                    ("unwinding_in_managed", ExceptionState::UnwindingInManaged),
                    ("inconsistent", ExceptionState::Inconsistent),
                ],
            )?;
            let possible = match (handler, t.exception) {
                (_, ExceptionState::Inconsistent) | (None, _) => true,
                (Some(Funclet::Filter), state) => state == ExceptionState::FirstPass,
                (Some(_), state) => state == ExceptionState::UnwindingInManaged,
            };
            if !possible {
                let (funclet, state) = match handler {
                    Some(Funclet::Filter) => ("filter", "first_pass"),
                    _ => ("catch or finally", "unwinding_in_managed"),
                };
                return Err(self.err(
                    e.span(),
                    "exception",
                    format!(
                        "the leaf-most funclet on the stack is a {funclet} handler, so the exception is in state `{state}` (or `inconsistent`); omit `exception` to have it derived"
                    ),
                ));
            }
        }
        if let Some(o) = &m.os_context {
            t.os_context = self.choice(
                o,
                "os_context",
                &[
                    ("ok", OsContext::Ok),
                    ("debugger_filter", OsContext::DebuggerFilter),
                    ("get_context_fails", OsContext::GetContextFails),
                    ("in_kernel", OsContext::InKernel),
                    ("exception_active", OsContext::ExceptionActive),
                    ("no_exception_reporting", OsContext::NoExceptionReporting),
                    ("stale", OsContext::Stale),
                ],
            )?;
        }
        t.gc_special = m.gc_special;
        t.forbid_suspend = m.forbid_suspend;
        t.hijack_lock_held = m.hijack_lock_held;
        t.hijacked = m.hijacked;
        t.mode_race = m.mode_race;
        t.suspend_fails = m.suspend_fails;
        t.holds_writer_lock = m.holds_code_manager_lock;
        if kind == ThreadKind::Native {
            let managed = t.stack.iter().any(|e| match e {
                StackEntry::Call { function, .. } => code.function(*function).kind.is_managed(),
                StackEntry::Frame(_) => true,
            });
            if managed || m.mode.is_some() || m.hijacked {
                return Err(self.err(m.name.span(), "kind", format!(
                    "native thread `{}` never ran managed code: it can have no managed frames, explicit Frames, GC mode or hijack",
                    m.name.get_ref()
                )));
            }
        }
        Ok(t)
    }

    fn frame(&self, f: &Spanned<FrameModel>, t: &mut Thread, code: &CodeMap) -> Res<()> {
        let m = f.get_ref();
        let repeat = match &m.repeat {
            Some(r) if !(1..=10_000).contains(r.get_ref()) => {
                return Err(self.err(r.span(), "repeat", "must be between 1 and 10000"))
            }
            Some(r) => *r.get_ref() as usize,
            None => 1,
        };
        let entry = match (&m.function, &m.frame) {
            (Some(name), None) => {
                let function = code.by_name(name.get_ref()).ok_or_else(|| {
                    self.err(
                        name.span(),
                        "fn",
                        format!("no function named `{}` in [[code]]", name.get_ref()),
                    )
                })?;
                let func = code.function(function);
                if !func.compiled {
                    return Err(self.err(
                        name.span(),
                        "fn",
                        format!(
                            "`{}` has no native code (compiled = false), so it cannot be on a stack",
                            func.name
                        ),
                    ));
                }
                let offset = match &m.offset {
                    Some(o) => Some(self.frame_offset(o, func)?),
                    None => None,
                };
                let funclet = match &m.funclet {
                    None => None,
                    Some(f) if func.kind.is_managed() => Some(self.choice(
                        f,
                        "funclet",
                        &[
                            ("catch", Funclet::Catch),
                            ("finally", Funclet::Finally),
                            ("filter", Funclet::Filter),
                        ],
                    )?),
                    Some(f) => return Err(self.err(f.span(), "funclet", "only managed code has funclets")),
                };
                StackEntry::Call {
                    function,
                    offset,
                    funclet,
                }
            }
            (None, Some(kind)) => {
                if m.offset.is_some() || m.funclet.is_some() {
                    return Err(self.err(f.span(), "offset", "an explicit Frame has no offset or funclet"));
                }
                let known: Vec<(&str, FrameKind)> = FrameKind::ALL.iter().map(|k| (k.as_str(), *k)).collect();
                StackEntry::Frame(self.choice(kind, "frame", &known)?)
            }
            _ => {
                return Err(self.err(
                    f.span(),
                    "fn",
                    "each frame needs exactly one of `fn` (a call) or `frame` (an explicit Frame)",
                ))
            }
        };
        t.stack.extend(std::iter::repeat_n(entry, repeat));
        Ok(())
    }
}

/// What a call may refer to while being validated.
struct CallCtx<'a> {
    threads: &'a [Thread],
    declared_calls: &'a [usize],
    code: &'a CodeMap,
    /// The top-level calls before this one.
    earlier: &'a [Call],
}

/// The largest scenario file [`Scenario::load`] reads, in bytes.
pub const MAX_FILE_BYTES: u64 = 8 << 20;
/// The most functions (`[[code]]` tables) a scenario declares.
pub const MAX_FUNCTIONS: usize = 65_536;
/// The most threads a scenario declares.
pub const MAX_THREADS: usize = 4_096;
/// The most calls a scenario makes.
pub const MAX_CALLS: usize = 100_000;
/// The most frames (calls and explicit Frames) all threads' stacks hold together; one thread's
/// stack is also limited by its size.
pub const MAX_FRAMES: usize = 262_144;

const KINDS: [(&str, CodeKind); 7] = [
    ("jit", CodeKind::Jit),
    ("r2r", CodeKind::ReadyToRun),
    ("il_stub", CodeKind::IlStub),
    ("lcg", CodeKind::Lcg),
    ("helper", CodeKind::Helper),
    ("stub", CodeKind::Stub),
    ("native", CodeKind::Native),
];

const APIS: [&str; 14] = [
    "DoStackSnapshot",
    "GetFunctionFromIP",
    "GetFunctionFromIP2",
    "GetFunctionFromIP3",
    "GetCodeInfo2",
    "GetFunctionInfo",
    "GetFunctionInfo2",
    "GetCurrentThreadID",
    "SetEventMask",
    "GetEventMask",
    "InitializeCurrentThread",
    "SuspendRuntime",
    "ResumeRuntime",
    "EnumThreads",
];

/// The functions the runtime itself contributes to every code map.
fn builtins() -> Vec<FunctionSpec> {
    let mut out = Vec::new();
    for name in [builtin::PINVOKE_ENTRY, builtin::PROFILER_CALLBACK] {
        let mut f = FunctionSpec::new(name, CodeKind::Native);
        f.module = Some("libprofiler.so".into());
        out.push(f);
    }
    for cb in CallbackKind::ALL {
        out.push(FunctionSpec::new(cb.raiser(), CodeKind::Helper));
    }
    out.push(FunctionSpec::new(builtin::WAIT, CodeKind::Helper));
    out.push(FunctionSpec::new(builtin::HIJACK_STUB, CodeKind::Stub));
    out
}

impl Builder<'_> {
    /// Validates one call; `parent` is the (thread, context) of the call a nested call is made
    /// from.
    fn call(&self, c: &Spanned<CallModel>, ctx: &CallCtx, parent: Option<(&str, CallContext)>) -> Res<Call> {
        let span = c.span();
        let m = c.get_ref();
        let line = self.src.line(span.start);
        let thread_named = |name: &Spanned<String>, field: &str| -> Res<usize> {
            ctx.threads
                .iter()
                .position(|t| &t.name == name.get_ref())
                .ok_or_else(|| {
                    self.err(
                        name.span(),
                        field,
                        format!("no thread named `{}`", name.get_ref()),
                    )
                })
        };
        let (caller, context) = match parent {
            Some((thread, context)) => {
                if let Some(x) = m
                    .caller
                    .as_ref()
                    .map(|x| x.span())
                    .or(m.from.as_ref().map(|x| x.span()))
                {
                    return Err(self.err(
                        x,
                        "caller",
                        "a nested call runs on its parent's thread and context",
                    ));
                }
                (thread.to_string(), context)
            }
            None if m.event.is_some() => {
                let t = m
                    .thread
                    .as_ref()
                    .ok_or_else(|| self.err(span.clone(), "thread", "an event needs `thread`"))?;
                (
                    ctx.threads[thread_named(t, "thread")?].name.clone(),
                    CallContext::Thread,
                )
            }
            None => {
                let c = m.caller.as_ref().ok_or_else(|| {
                    self.err(span.clone(), "caller", "a call needs `caller` (a thread name)")
                })?;
                let index = thread_named(c, "caller")?;
                let context = match &m.from {
                    None => CallContext::Thread,
                    Some(f) => match f.get_ref().as_str() {
                        "thread" => CallContext::Thread,
                        "pinvoke" => CallContext::PInvoke,
                        other => CallContext::Callback(CallbackKind::parse(other).ok_or_else(|| {
                            let all: Vec<&str> = CallbackKind::ALL.iter().map(|k| k.as_str()).collect();
                            self.err(
                                f.span(),
                                "from",
                                format!(
                                    "`{other}` is not `thread`, `pinvoke` or one of {}",
                                    all.join(", ")
                                ),
                            )
                        })?),
                    },
                };
                if context != CallContext::Thread && !ctx.threads[index].is_managed() {
                    let f = m.from.as_ref().unwrap();
                    return Err(self.err(
                        f.span(),
                        "from",
                        "only a managed thread can be in a P/Invoke or a profiler callback",
                    ));
                }
                (ctx.threads[index].name.clone(), context)
            }
        };
        let action = match (&m.api, &m.event) {
            (Some(api), None) => Action::Api(self.api(api, m, ctx, &caller)?),
            (None, Some(ev)) => {
                if let Some(x) = m.caller.as_ref().or(m.from.as_ref()) {
                    return Err(self.err(
                        x.span(),
                        "caller",
                        "an event names its `thread`; `caller` and `from` do not apply",
                    ));
                }
                self.only(m, &["thread"], ev.get_ref())?;
                self.choice(
                    ev,
                    "event",
                    &[
                        ("thread_exit", Action::ThreadExit),
                        ("thread_delete", Action::ThreadDelete),
                        ("gc", Action::Gc),
                    ],
                )?
            }
            _ => return Err(self.err(span, "api", "each call needs exactly one of `api` or `event`")),
        };
        let expect = match &m.expect {
            Some(e) => Some(HResult::parse(e.get_ref()).ok_or_else(|| {
                self.err(e.span(), "expect", format!("`{}` is not an HRESULT", e.get_ref()))
            })?),
            None => None,
        };
        let expect_fault = match &m.expect_fault {
            Some(f) => {
                let kinds: Vec<(&str, FaultKind)> = FaultKind::ALL.iter().map(|k| (k.as_str(), *k)).collect();
                Some(self.choice(f, "expect_fault", &kinds)?)
            }
            None => None,
        };
        let mut call = Call {
            line,
            caller,
            context,
            action,
            expect,
            expect_frames: m.expect_frames.as_ref().map(|v| *v.get_ref()),
            expect_stack: self.expect_stack(m, ctx.code)?,
            expect_fault,
            note: m.note.clone(),
            case: m.case.clone(),
        };
        let parent = (call.caller.clone(), call.context);
        if let (Some(nested), Action::Api(ApiCall::DoStackSnapshot { nested: slot, .. })) =
            (&m.nested, &mut call.action)
        {
            if let Some(event) = &nested.get_ref().event {
                return Err(self.err(
                    event.span(),
                    "event",
                    "a nested call is an API call made from the snapshot callback; events cannot be nested",
                ));
            }
            let at = match &m.nested_at {
                None => NestedAt::Frames(vec![0]),
                Some(v) => self.nested_at(v)?,
            };
            *slot = Some((at, Box::new(self.call(nested, ctx, Some((&parent.0, parent.1)))?)));
        } else if m.nested.is_some() || m.nested_at.is_some() {
            return Err(self.err(
                span,
                "nested",
                "only DoStackSnapshot can make a nested call (from its callback)",
            ));
        }
        Ok(call)
    }

    /// Rejects fields that do not apply to this kind of call.
    fn only(&self, m: &CallModel, allowed: &[&str], what: &str) -> Res<()> {
        let given: [(&str, Option<Range<usize>>); 13] = [
            ("target", m.target.as_ref().map(|v| v.span())),
            ("flags", m.flags.as_ref().map(|v| v.span())),
            ("seed", m.seed.as_ref().map(|v| v.span())),
            ("callback", m.callback.as_ref().map(|v| v.span())),
            ("ip", m.ip.as_ref().map(|v| v.span())),
            ("function", m.function.as_ref().map(|v| v.span())),
            ("frame_info", m.frame_info.as_ref().map(|v| v.span())),
            ("mask", m.mask.as_ref().map(|v| v.span())),
            ("thread", m.thread.as_ref().map(|v| v.span())),
            ("context_size", m.context_size.as_ref().map(|v| v.span())),
            ("requested", m.requested.as_ref().map(|v| v.span())),
            ("expect_frames", m.expect_frames.as_ref().map(|v| v.span())),
            ("expect_stack", m.expect_stack.as_ref().map(|v| v.span())),
        ];
        match given
            .into_iter()
            .find(|(name, span)| span.is_some() && !allowed.contains(name))
        {
            Some((name, Some(span))) => Err(self.err(span, name, format!("does not apply to {what}"))),
            _ => Ok(()),
        }
    }

    fn api(&self, api: &Spanned<String>, m: &CallModel, ctx: &CallCtx, caller: &str) -> Res<ApiCall> {
        let name = api.get_ref().as_str();
        if !APIS.contains(&name) {
            return Err(self.err(
                api.span(),
                "api",
                format!("unknown API `{name}`; known: {}", APIS.join(", ")),
            ));
        }
        let allowed: &[&str] = match name {
            "DoStackSnapshot" => &[
                "target",
                "flags",
                "seed",
                "callback",
                "context_size",
                "expect_frames",
                "expect_stack",
            ],
            "GetFunctionFromIP" | "GetFunctionFromIP2" | "GetFunctionFromIP3" => &["ip"],
            "GetCodeInfo2" => &["function", "requested"],
            "GetFunctionInfo" => &["function"],
            "GetFunctionInfo2" => &["function", "frame_info"],
            "SetEventMask" => &["mask"],
            _ => &[],
        };
        self.only(m, allowed, name)?;
        Ok(match name {
            "DoStackSnapshot" => ApiCall::DoStackSnapshot {
                target: self.target(m.target.as_ref(), ctx, caller)?,
                flags: match &m.flags {
                    Some(f) => self.bits(f, "flags", |n| {
                        one_of(
                            n.strip_prefix("COR_PRF_SNAPSHOT_").unwrap_or(n),
                            &[
                                ("DEFAULT", snapshot::DEFAULT),
                                ("REGISTER_CONTEXT", snapshot::REGISTER_CONTEXT),
                                ("X86_OPTIMIZED", snapshot::X86_OPTIMIZED),
                            ],
                        )
                    })?,
                    None => 0,
                },
                seed: self.seed(m.seed.as_ref(), ctx)?,
                context_size: m.context_size.as_ref().map(|v| *v.get_ref()).unwrap_or(
                    if m.seed
                        .as_ref()
                        .is_some_and(|s| s.get_ref().as_str() != Some("none"))
                    {
                        Context::SIZE as u32
                    } else {
                        0
                    },
                ),
                callback: self.callback(m.callback.as_ref())?,
                nested: None,
            },
            "GetFunctionFromIP" | "GetFunctionFromIP2" | "GetFunctionFromIP3" => ApiCall::GetFunctionFromIp {
                version: match name {
                    "GetFunctionFromIP" => 1,
                    "GetFunctionFromIP2" => 2,
                    _ => 3,
                },
                ip: self.ip(
                    m.ip.as_ref()
                        .ok_or_else(|| self.err(api.span(), "ip", format!("{name} needs `ip`")))?,
                    ctx,
                )?,
            },
            "GetCodeInfo2" => ApiCall::GetCodeInfo2 {
                function: self.function(m.function.as_ref(), api, ctx)?,
                requested: m.requested.as_ref().map_or(2, |v| *v.get_ref()),
                null_buffer: m.null_buffer,
            },
            "GetFunctionInfo" => ApiCall::GetFunctionInfo {
                function: self.function(m.function.as_ref(), api, ctx)?,
            },
            "GetFunctionInfo2" => ApiCall::GetFunctionInfo2 {
                function: self.function(m.function.as_ref(), api, ctx)?,
                frame_info: match &m.frame_info {
                    None => FrameInfoArg::None,
                    Some(f) => self.choice(
                        f,
                        "frame_info",
                        &[
                            ("none", FrameInfoArg::None),
                            ("frame", FrameInfoArg::CurrentFrame),
                            ("mismatched", FrameInfoArg::Mismatched),
                        ],
                    )?,
                },
            },
            "GetCurrentThreadID" => ApiCall::GetCurrentThreadId,
            "SetEventMask" => ApiCall::SetEventMask {
                mask: self.bits(
                    m.mask
                        .as_ref()
                        .ok_or_else(|| self.err(api.span(), "mask", "SetEventMask needs `mask`"))?,
                    "mask",
                    event::from_name,
                )?,
            },
            "GetEventMask" => ApiCall::GetEventMask,
            "InitializeCurrentThread" => ApiCall::InitializeCurrentThread,
            "SuspendRuntime" => ApiCall::SuspendRuntime,
            "ResumeRuntime" => ApiCall::ResumeRuntime,
            _ => ApiCall::EnumThreads,
        })
    }

    fn target(&self, v: Option<&Spanned<Value>>, ctx: &CallCtx, caller: &str) -> Res<Target> {
        let Some(v) = v else { return Ok(Target::Zero) };
        match v.get_ref() {
            Value::Integer(0) => Ok(Target::Zero),
            Value::Integer(n) => Ok(Target::Raw(*n as u64)),
            Value::String(s) => match s.as_str() {
                "0" => Ok(Target::Zero),
                "self" => Ok(Target::Thread(caller.to_string())),
                "bogus" => Ok(Target::Raw(1)),
                name if ctx.threads.iter().any(|t| t.name == name) => {
                    let t = ctx.threads.iter().find(|t| t.name == name).unwrap();
                    if !t.is_managed() {
                        return Err(self.err(
                            v.span(),
                            "target",
                            format!("`{name}` is a native thread: it has no ThreadID"),
                        ));
                    }
                    Ok(Target::Thread(name.to_string()))
                }
                other => Err(self.err(
                    v.span(),
                    "target",
                    format!("`{other}` is not 0, `self`, `bogus`, a number or a thread name"),
                )),
            },
            _ => Err(self.err(
                v.span(),
                "target",
                "expected 0, `self`, `bogus`, a number or a thread name",
            )),
        }
    }

    fn seed(&self, v: Option<&Spanned<Value>>, ctx: &CallCtx) -> Res<Seed> {
        let Some(v) = v else { return Ok(Seed::None) };
        let span = v.span();
        match v.get_ref() {
            Value::String(s) if s == "none" => Ok(Seed::None),
            Value::String(s) if s == "zero" => Ok(Seed::Context {
                base: SeedBase::Zero,
                overrides: Vec::new(),
            }),
            Value::Table(table) => {
                let mut base_thread = None;
                let mut frame = None;
                let mut earlier = None;
                let mut callback = None;
                let mut overrides = Vec::new();
                let index = |value: &Value, field: &str, what: &str| {
                    value
                        .as_integer()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| self.err(span.clone(), field, format!("expected {what}")))
                };
                for (key, value) in table {
                    match key.as_str() {
                        "call" => earlier = Some(index(value, "seed.call", "an earlier call's number (1-based)")?),
                        "callback" => callback = Some(index(value, "seed.callback", "a callback index (0-based)")?),
                        "thread" => {
                            base_thread = Some(
                                value
                                    .as_str()
                                    .ok_or_else(|| {
                                        self.err(span.clone(), "seed.thread", "expected a thread name")
                                    })?
                                    .to_string(),
                            )
                        }
                        "frame" => {
                            frame = Some(index(value, "seed.frame", "a call index (0 = the leaf declared call)")?)
                        }
                        reg => {
                            let register = if reg == "rip" {
                                None
                            } else {
                                Some(Register::from_name(reg).ok_or_else(|| {
                                    self.err(
                                        span.clone(),
                                        &format!("seed.{reg}"),
                                        "not `thread`, `frame`, `call`, `callback` or a register name (rip, rsp, rbp, rax, …)",
                                    )
                                })?)
                            };
                            overrides.push((register, self.seed_value(value, span.clone(), reg, ctx)?));
                        }
                    }
                }
                let base = match (base_thread, frame, earlier, callback) {
                    (None, None, None, None) => SeedBase::Zero,
                    (None, None, Some(call), Some(callback)) => {
                        let walked = call
                            .checked_sub(1)
                            .and_then(|i| ctx.earlier.get(i))
                            .is_some_and(|c| {
                                matches!(&c.action, Action::Api(ApiCall::DoStackSnapshot { flags, .. })
                                    if flags & snapshot::REGISTER_CONTEXT != 0)
                            });
                        if !walked {
                            return Err(self.err(
                                span,
                                "seed.call",
                                format!("call #{call} is not an earlier DoStackSnapshot with flags = [\"REGISTER_CONTEXT\"]: its callbacks get no CONTEXT"),
                            ));
                        }
                        SeedBase::Callback { call, callback }
                    }
                    (Some(t), Some(k), None, None) => {
                        let i = ctx.threads.iter().position(|x| x.name == t).ok_or_else(|| {
                            self.err(span.clone(), "seed.thread", format!("no thread named `{t}`"))
                        })?;
                        if k >= ctx.declared_calls[i] {
                            return Err(self.err(
                                span,
                                "seed.frame",
                                format!(
                                    "thread `{t}` declares {} calls; frame {k} does not exist",
                                    ctx.declared_calls[i]
                                ),
                            ));
                        }
                        SeedBase::Frame(t, k)
                    }
                    _ => {
                        return Err(self.err(
                            span,
                            "seed",
                            "`thread` and `frame` go together, as do `call` and `callback`, and the two pairs exclude each other",
                        ))
                    }
                };
                Ok(Seed::Context { base, overrides })
            }
            _ => Err(self.err(
                span,
                "seed",
                "expected \"none\", \"zero\" or a table { thread, frame | call, callback, <register> = value }",
            )),
        }
    }

    fn seed_value(&self, v: &Value, span: Range<usize>, reg: &str, ctx: &CallCtx) -> Res<SeedValue> {
        match v {
            Value::Integer(n) => Ok(SeedValue::Raw(*n as u64)),
            Value::Table(t) => {
                let name = t.get("fn").and_then(Value::as_str).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        &format!("seed.{reg}"),
                        "expected { fn = \"name\", offset = n }",
                    )
                })?;
                let field = format!("seed.{reg}");
                self.known_function(name, span.clone(), &field, ctx)?;
                Ok(SeedValue::Function(
                    name.to_string(),
                    self.offset_in(t, span, &field)?,
                ))
            }
            _ => Err(self.err(
                span,
                &format!("seed.{reg}"),
                "expected a number or { fn = \"name\", offset = n }",
            )),
        }
    }

    /// The `offset` of a `{ fn = "name", offset = n }` table: 0 when absent, never negative.
    fn offset_in(&self, t: &toml::Table, span: Range<usize>, field: &str) -> Res<u64> {
        match t.get("offset") {
            None => Ok(0),
            Some(Value::Integer(n)) => u64::try_from(*n).map_err(|_| {
                self.err(
                    span,
                    field,
                    format!("offset {n} is negative; offsets count bytes from the function's start"),
                )
            }),
            Some(_) => Err(self.err(span, field, "offset must be an integer")),
        }
    }

    fn known_function(&self, name: &str, span: Range<usize>, field: &str, ctx: &CallCtx) -> Res<()> {
        match ctx.code.by_name(name) {
            Some(_) => Ok(()),
            None => Err(self.err(span, field, format!("no function named `{name}` in [[code]]"))),
        }
    }

    fn callback(&self, v: Option<&Spanned<Value>>) -> Res<CallbackBehavior> {
        let Some(v) = v else {
            return Ok(CallbackBehavior::Ok);
        };
        let span = v.span();
        match v.get_ref() {
            Value::String(s) if s == "ok" => Ok(CallbackBehavior::Ok),
            Value::String(s) if s == "null" => Ok(CallbackBehavior::Null),
            Value::Table(t) => {
                for key in t.keys() {
                    if key != "return" && key != "at" {
                        return Err(self.err(span, &format!("callback.{key}"), "expected `return` and `at`"));
                    }
                }
                let text = t.get("return").and_then(Value::as_str).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        "callback.return",
                        "expected an HRESULT such as \"S_FALSE\" or \"0x80004005\"",
                    )
                })?;
                let value = HResult::parse(text).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        "callback.return",
                        format!("`{text}` is not an HRESULT"),
                    )
                })?;
                let at = t
                    .get("at")
                    .map_or(Some(0), Value::as_integer)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| self.err(span, "callback.at", "expected a callback index (0-based)"))?;
                Ok(CallbackBehavior::Return {
                    at: at as usize,
                    value,
                })
            }
            _ => Err(self.err(
                span,
                "callback",
                "expected \"ok\", \"null\" or { return = \"S_FALSE\", at = n }",
            )),
        }
    }

    fn ip(&self, v: &Spanned<Value>, ctx: &CallCtx) -> Res<IpRef> {
        match v.get_ref() {
            Value::Integer(n) => Ok(IpRef::Raw(*n as u64)),
            Value::String(s) if s == "frame" => Ok(IpRef::CurrentFrame),
            Value::Table(t) => {
                let name = t
                    .get("fn")
                    .and_then(Value::as_str)
                    .ok_or_else(|| self.err(v.span(), "ip", "expected { fn = \"name\", offset = n }"))?;
                self.known_function(name, v.span(), "ip", ctx)?;
                Ok(IpRef::Function(name.into(), self.offset_in(t, v.span(), "ip")?))
            }
            _ => Err(self.err(
                v.span(),
                "ip",
                "expected a number, \"frame\" or { fn = \"name\", offset = n }",
            )),
        }
    }

    fn function(&self, v: Option<&Spanned<Value>>, api: &Spanned<String>, ctx: &CallCtx) -> Res<FunctionRef> {
        let v = v.ok_or_else(|| {
            self.err(
                api.span(),
                "function",
                format!("{} needs `function`", api.get_ref()),
            )
        })?;
        match v.get_ref() {
            Value::Integer(n) => Ok(FunctionRef::Raw(*n as u64)),
            Value::String(s) if s == "frame" => Ok(FunctionRef::CurrentFrame),
            Value::String(s) => {
                self.known_function(s, v.span(), "function", ctx)?;
                Ok(FunctionRef::Name(s.clone()))
            }
            _ => Err(self.err(
                v.span(),
                "function",
                "expected a function name, a number or \"frame\"",
            )),
        }
    }
}
