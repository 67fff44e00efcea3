//! Validation: turns a deserialized file into a [`Scenario`], or an error with file, line and
//! field — the runtime, the code and the threads here; the calls in `calls`.

use super::calls::CallCtx;
use super::error::{ScenarioError, Source};
use super::model::{CodeModel, FileModel, FrameModel, ThreadModel};
use super::templates::{self, Entry, Template, TEMPLATES};
use super::types::*;
use crate::code::{CodeKind, CodeMap, FunctionSpec};
use crate::runtime::{builtin, CallbackKind, Platform, Runtime, RuntimeConfig};
use crate::synth::{Epilogue, FunctionShape, PrologStep};
use crate::thread::{
    ExceptionState, FrameKind, Funclet, Lifecycle, Mode, OsContext, StackEntry, Thread, ThreadKind,
    STACK_SIZE,
};
use corprof::flags::{event, high};
use corprof::Context;
use std::ops::Range;
use toml::{Spanned, Value};

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

/// Turns the model of one file into a [`Scenario`], every error located in the file.
pub(super) struct Builder<'a> {
    pub src: &'a Source<'a>,
}

/// A validation step's result.
pub(super) type Res<T> = Result<T, ScenarioError>;

/// The value named `text` among `options`.
pub(super) fn one_of<T: Clone>(text: &str, options: &[(&str, T)]) -> Option<T> {
    options.iter().find(|(n, _)| *n == text).map(|(_, v)| v.clone())
}

fn names<T>(options: &[(&str, T)]) -> String {
    options
        .iter()
        .map(|(n, _)| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Builder<'_> {
    pub(super) fn err(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> ScenarioError {
        self.src.error(span, field, message)
    }

    pub(super) fn choice<T: Clone>(
        &self,
        value: &Spanned<String>,
        field: &str,
        options: &[(&str, T)],
    ) -> Res<T> {
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
        config.attached = r.attached.unwrap_or(false);
        config.suspend_in_progress = r.suspend_in_progress.unwrap_or(false);
        if let Some(mask) = &r.event_mask {
            config.event_mask = self.bits(mask, "event_mask", event::from_name)?;
            let refused = config.event_mask & !event::ALLOWABLE_AFTER_ATTACH;
            if config.attached && refused != 0 {
                return Err(self.err(
                    mask.span(),
                    "event_mask",
                    format!(
                        "an attached profiler cannot have set 0x{refused:08x}: only the bits allowed after attach (0x{:08x})",
                        event::ALLOWABLE_AFTER_ATTACH
                    ),
                ));
            }
        }
        if let Some(mask) = &r.event_mask_high {
            config.event_mask_high = self.bits(mask, "event_mask_high", high::from_name)?;
            let refused = config.event_mask_high & !high::ALLOWABLE_AFTER_ATTACH;
            if config.attached && refused != 0 {
                return Err(self.err(
                    mask.span(),
                    "event_mask_high",
                    format!("an attached profiler cannot have set 0x{refused:08x}"),
                ));
            }
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
        let functions = self.functions(&m.code, &m.threads)?;
        let code = CodeMap::build(&functions, platform).map_err(|e| match m.code.get(e.function) {
            Some(c) => self.err(c.span(), e.field, e.message),
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
            let call = self.call(c.span(), c.get_ref(), &ctx, None)?;
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
    pub(super) fn bits(
        &self,
        value: &Spanned<Value>,
        field: &str,
        lookup: impl Fn(&str) -> Option<u32>,
    ) -> Res<u32> {
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

    /// The scenario's functions: those `code` declares, the runtime's built-ins, and those of
    /// the templates `threads` use (unless declared).
    fn functions(
        &self,
        code: &[Spanned<CodeModel>],
        threads: &[Spanned<ThreadModel>],
    ) -> Res<Vec<FunctionSpec>> {
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
        let used = threads
            .iter()
            .flat_map(|t| &t.get_ref().frames)
            .filter_map(|f| f.get_ref().template.as_ref())
            .map(|name| self.template(name))
            .collect::<Res<Vec<_>>>()?;
        let declared = out.iter().map(|f| f.name.as_str()).collect();
        let from_templates = templates::functions(used, &declared);
        out.extend(from_templates);
        Ok(out)
    }

    /// The template `name` names.
    fn template(&self, name: &Spanned<String>) -> Res<&'static Template> {
        Template::named(name.get_ref()).ok_or_else(|| {
            let known: Vec<&str> = TEMPLATES.iter().map(|t| t.name).collect();
            self.err(
                name.span(),
                "template",
                format!(
                    "no template named `{}` (expected one of: {})",
                    name.get_ref(),
                    known.join(", ")
                ),
            )
        })
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
                let field = if last.get_ref().template.is_some() {
                    "template"
                } else {
                    "frame"
                };
                return Err(self.err(
                    last.span(),
                    field,
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
        if let Some(name) = &m.template {
            if m.function.is_some()
                || m.frame.is_some()
                || m.repeat.is_some()
                || m.offset.is_some()
                || m.funclet.is_some()
            {
                return Err(self.err(
                    name.span(),
                    "template",
                    "a template entry stands alone: no `fn`, `frame`, `repeat`, `offset` or `funclet`",
                ));
            }
            for entry in self.template(name)?.entries() {
                t.stack.push(match entry {
                    Entry::Frame(kind) => StackEntry::Frame(kind),
                    Entry::CoreLib(function) | Entry::Runtime(function) => StackEntry::Call {
                        function: code.by_name(function).ok_or_else(|| {
                            self.err(
                                name.span(),
                                "template",
                                format!("`{function}` is not in the code map"),
                            )
                        })?,
                        offset: None,
                        funclet: None,
                    },
                });
            }
            return Ok(());
        }
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

const KINDS: [(&str, CodeKind); 7] = [
    ("jit", CodeKind::Jit),
    ("r2r", CodeKind::ReadyToRun),
    ("il_stub", CodeKind::IlStub),
    ("lcg", CodeKind::Lcg),
    ("helper", CodeKind::Helper),
    ("stub", CodeKind::Stub),
    ("native", CodeKind::Native),
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
