//! Validation: turns a deserialized file into a [`Scenario`], or an error with file, line and
//! field — the limits and the runtime here; the code in `functions`, the threads in
//! `threads`, the calls in `calls`.

use super::calls::{CallCtx, History};
use super::error::{ScenarioError, Source};
use super::model::FileModel;
use super::names::PLATFORMS;
use super::types::*;
use crate::code::CodeMap;
use crate::platform::Platform;
use crate::runtime::{Runtime, RuntimeConfig, RuntimeVersion};
use crate::thread::{StackEntry, Thread};
use corprof::flags::{event, high};
use corprof::Context;
use std::collections::HashMap;
use std::ops::Range;
use toml::{Spanned, Value};

impl Scenario {
    /// Parses and validates scenario text; `file` is used in error messages only.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse_as(file, text, None)
    }

    /// [`Scenario::parse`], answering as `version` when it is given, whatever the file's
    /// `[runtime] version` says.
    pub fn parse_as(
        file: &str,
        text: &str,
        version: Option<RuntimeVersion>,
    ) -> Result<Scenario, ScenarioError> {
        Scenario::parse_on(file, text, version, None)
    }

    /// [`Scenario::parse_as`], also answering on `platform` when it is given, whatever the
    /// file's `platform` says: the same process on the other operating system (the Windows
    /// lane runs the Linux lane's programs and compares them with their own scenarios so).
    pub fn parse_on(
        file: &str,
        text: &str,
        version: Option<RuntimeVersion>,
        platform: Option<Platform>,
    ) -> Result<Scenario, ScenarioError> {
        let src = Source::new(file, text);
        let model: FileModel = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
        let model = super::churn::expand(&src, model)?;
        let mut builder = Builder {
            src: &src,
            version: RuntimeVersion::default(),
            platform,
        };
        builder.version = match (version, &model.runtime.version) {
            (Some(v), _) => v,
            (None, Some(named)) => named
                .get_ref()
                .parse()
                .map_err(|message: String| builder.err(named.span(), "version", message))?,
            (None, None) => RuntimeVersion::default(),
        };
        builder.scenario(model, file)
    }

    /// Reads, parses and validates a scenario file.
    /// Only regular files of at most [`MAX_FILE_BYTES`] are read: a FIFO or a device is
    /// refused before it is opened (opening a FIFO would block).
    pub fn load(path: &std::path::Path) -> Result<Scenario, ScenarioError> {
        Scenario::load_as(path, None)
    }

    /// [`Scenario::load`], answering as `version` when it is given, whatever the file's
    /// `[runtime] version` says.
    pub fn load_as(
        path: &std::path::Path,
        version: Option<RuntimeVersion>,
    ) -> Result<Scenario, ScenarioError> {
        Scenario::load_on(path, version, None)
    }

    /// [`Scenario::load_as`], also answering on `platform` when it is given (see
    /// [`Scenario::parse_on`]).
    pub fn load_on(
        path: &std::path::Path,
        version: Option<RuntimeVersion>,
        platform: Option<Platform>,
    ) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let fail = |message: String| ScenarioError {
            file: file.clone(),
            line: 0,
            column: 0,
            field: "<file>".into(),
            message,
        };
        let bytes = crate::input::read(path, MAX_FILE_BYTES).map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => fail(format!("the file is {e}")),
            _ => fail(format!("cannot read: {e}")),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            // Where the bad byte is, as an editor shows it, and the key being written there.
            let bytes = e.as_bytes();
            let valid = e.utf8_error().valid_up_to();
            let lossy = String::from_utf8_lossy(&bytes[..valid]);
            let source = Source::new(&file, &lossy);
            let at = lossy.len();
            source.error(at..at, &source.key_at(at), "invalid UTF-8")
        })?;
        Scenario::parse_on(&file, &text, version, platform)
    }

    /// A fresh runtime in the scenario's initial state.
    /// A managed thread that starts later (`start = "spawned"` or `"profiler"`) is not
    /// started in it: `EnumThreads` does not list it and no callback has named it.
    pub fn runtime(&self) -> Runtime {
        let mut threads = self.threads.clone();
        for (t, thread) in threads.iter_mut().enumerate() {
            let later = self.process.spawned.get(t).copied().unwrap_or(false)
                || self.process.created.get(t).copied().unwrap_or(false);
            if later && thread.is_managed() {
                thread.lifecycle = crate::thread::Lifecycle::Unstarted;
            }
        }
        let rt = Runtime::new(self.config.clone(), self.code.clone(), threads);
        rt.fail_calls(&self.fails);
        rt
    }
}

/// Turns the model of one file into a [`Scenario`], every error located in the file.
pub(super) struct Builder<'a> {
    pub src: &'a Source<'a>,
    /// The runtime version the scenario answers as.
    pub version: RuntimeVersion,
    /// The platform it answers on, when the caller chose one over the file's.
    pub platform: Option<Platform>,
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
        let named = self.choice(&m.platform, "platform", PLATFORMS)?;
        let platform = self.platform.unwrap_or(named);
        let mut config = RuntimeConfig {
            platform,
            version: self.version,
            ..RuntimeConfig::default()
        };
        let r = &m.runtime;
        config.started = r.started.unwrap_or(true);
        config.gc_initialized = r.gc_initialized.unwrap_or(true);
        config.detaching = r.detaching.unwrap_or(false);
        config.attached = r.attached.unwrap_or(false);
        config.suspend_in_progress = r.suspend_in_progress.unwrap_or(false);
        if let Some(mask) = &r.event_mask {
            let allowed = event::ALLOWABLE_AFTER_ATTACH;
            config.event_mask = self.mask(mask, "event_mask", event::from_name, allowed, config.attached)?;
        }
        if let Some(mask) = &r.event_mask_high {
            let allowed = high::ALLOWABLE_AFTER_ATTACH;
            config.event_mask_high =
                self.mask(mask, "event_mask_high", high::from_name, allowed, config.attached)?;
        }
        if let Some(size) = &r.context_size {
            if (*size.get_ref() as usize) < Context::SIZE {
                return Err(self.err(
                    size.span(),
                    "context_size",
                    format!("must be at least {}", Context::SIZE),
                ));
            }
            config.context_size = Some(*size.get_ref());
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
        let thread_index: HashMap<&str, usize> = threads
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let mut calls = Vec::with_capacity(m.calls.len());
        let mut history = History::default();
        let mut walked = 0usize;
        let depths = Depths {
            threads: &threads,
            index: &thread_index,
            deepest: threads.iter().map(|t| t.stack.len()).max().unwrap_or(0),
        };
        for c in &m.calls {
            let ctx = CallCtx {
                threads: &threads,
                thread_index: &thread_index,
                declared_calls: &declared_calls,
                code: &code,
                earlier: &calls,
                history: &history,
            };
            let call = self.call(c.span(), c.get_ref(), &ctx, None)?;
            walked = walked.saturating_add(depths.walked_frames(&call));
            if walked > MAX_WALKED_FRAMES {
                return Err(self.err(
                    c.span(),
                    "calls",
                    format!(
                        "the walks up to this call cover more than the limit of {MAX_WALKED_FRAMES} frames in all (each walk counts the frames of the thread it walks, a nested walk once per callback it is made at)"
                    ),
                ));
            }
            history.record(&call);
            calls.push(call);
        }
        let stem = std::path::Path::new(file)
            .file_stem()
            .map_or(file.to_string(), |s| s.to_string_lossy().into_owned());
        let process = super::process::process_spec(self.src, &m, &threads, &declared_calls, &code)?;
        // A thread that starts later (spawned, or created by the profiler) does not exist in
        // the frozen state the calls run in: it cannot make one.
        for c in &m.calls {
            let Some(caller) = &c.get_ref().caller else {
                continue;
            };
            if let Some(&t) = thread_index.get(caller.get_ref().as_str()) {
                if process.spawned[t] || process.created[t] {
                    return Err(self.err(
                        caller.span(),
                        "caller",
                        format!(
                            "thread `{}` starts later (`start = \"{}\"`): it does not exist yet when the calls run",
                            caller.get_ref(),
                            if process.spawned[t] { "spawned" } else { "profiler" }
                        ),
                    ));
                }
            }
        }
        // A taken-over id is the first owner's (a chain of takeovers passes one id on).
        let id_owners = super::process::first_owners(&process.reuses, |r| r.thread_id);
        let os_owners = super::process::first_owners(&process.reuses, |r| r.os_id);
        for (t, (id_from, os_from)) in id_owners.into_iter().zip(os_owners).enumerate() {
            threads[t].id = threads[id_from].id;
            threads[t].os_id = threads[os_from].os_id;
        }
        let host = super::host::host_spec(self.src, m.host.as_ref(), &threads, &code)?;
        let fails = super::fail::fail_rules(self.src, &m.fail, &threads)?;
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
            fails,
        })
    }

    /// An event mask (its low or high word): an attached profiler can have set only the bits
    /// `allowed` after attach.
    fn mask(
        &self,
        value: &Spanned<Value>,
        field: &str,
        lookup: fn(&str) -> Option<u32>,
        allowed: u32,
        attached: bool,
    ) -> Res<u32> {
        let mask = self.bits(value, field, lookup)?;
        let refused = mask & !allowed;
        if attached && refused != 0 {
            return Err(self.err(
                value.span(),
                field,
                format!("an attached profiler cannot have set 0x{refused:08x}: only the bits allowed after attach (0x{allowed:08x})"),
            ));
        }
        Ok(mask)
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
}

/// The depths of a file's threads, for [`MAX_WALKED_FRAMES`].
struct Depths<'a> {
    threads: &'a [Thread],
    index: &'a HashMap<&'a str, usize>,
    /// The most frames of any thread (a raw `ThreadID` may name any of them).
    deepest: usize,
}

impl Depths<'_> {
    /// How many frames `call` may walk: a `DoStackSnapshot` walks at most its thread's
    /// frames, and each of its nested calls runs at most once per callback.
    fn walked_frames(&self, call: &Call) -> usize {
        let Action::Api(ApiCall::DoStackSnapshot { target, nested, .. }) = &call.action else {
            return 0;
        };
        let depth = match target {
            Target::Zero => self.depth(&call.caller),
            Target::Thread(name) if name == "self" => self.depth(&call.caller),
            Target::Thread(name) => self.depth(name),
            Target::Raw(_) => self.deepest,
        };
        nested.iter().fold(depth, |total, (at, inner)| {
            let times = match at {
                NestedAt::Every => depth,
                NestedAt::Frames(at) => at.len().min(depth),
            };
            total.saturating_add(times.saturating_mul(self.walked_frames(inner)))
        })
    }

    /// The frames of the thread named `name`.
    fn depth(&self, name: &str) -> usize {
        self.index.get(name).map_or(0, |&i| self.threads[i].stack.len())
    }
}
