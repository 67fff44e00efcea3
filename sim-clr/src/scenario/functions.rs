//! Validation of the code: the functions a file declares (`[[code]]`), their machine-code
//! shapes, the runtime's built-in functions, those the frame templates bring, and the code
//! versions a runtime version compiles on its own (OSR bodies, instrumented tiers).

use super::build::{Builder, Res};
use super::model::{CodeModel, ThreadModel};
use super::names::CODE_KINDS;
use super::templates;
use super::threads::{osr_name, INSTRUMENTED_SUFFIX, OSR_SUFFIX};
use crate::code::{CodeKind, FunctionSpec};
use crate::runtime::{builtin, CallbackKind};
use crate::synth::{Epilogue, FunctionShape, PrologStep};
use toml::{Spanned, Value};

impl Builder<'_> {
    /// The scenario's functions: those `code` declares, the runtime's built-ins, and those of
    /// the templates `threads` use (unless declared).
    pub(super) fn functions(
        &self,
        code: &[Spanned<CodeModel>],
        threads: &[Spanned<ThreadModel>],
    ) -> Res<Vec<FunctionSpec>> {
        let mut out: Vec<FunctionSpec> = Vec::new();
        let builtins = builtins();
        let mut names: std::collections::BTreeSet<&str> = builtins
            .iter()
            .map(|f| f.name.as_str())
            .chain(CallbackKind::process_raisers())
            .collect();
        for c in code {
            let c = c.get_ref();
            let name = c.name.get_ref();
            if name.trim().is_empty() {
                return Err(self.err(c.name.span(), "name", "a function needs a name"));
            }
            if name.ends_with(OSR_SUFFIX) {
                return Err(self.err(
                    c.name.span(),
                    "name",
                    format!("names ending in `{OSR_SUFFIX}` are the OSR bodies of frames marked `in_loop`"),
                ));
            }
            if name.ends_with(INSTRUMENTED_SUFFIX) {
                return Err(self.err(
                    c.name.span(),
                    "name",
                    format!("names ending in `{INSTRUMENTED_SUFFIX}` are the instrumented tiers of methods with a tier-1 version"),
                ));
            }
            if !names.insert(name.as_str()) {
                return Err(self.err(
                    c.name.span(),
                    "name",
                    format!("function `{name}` is declared twice (or is a built-in)"),
                ));
            }
            let kind = self.choice(&c.kind, "kind", CODE_KINDS)?;
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
        let from_templates = templates::functions(used, self.version, &declared);
        out.extend(from_templates);
        if self.version.replaces_loops_on_stack() {
            out.extend(osr_bodies(&out, threads));
        }
        // Last, so that the functions above have the same addresses with or without them.
        out.extend(CallbackKind::process_raisers().map(|name| FunctionSpec::new(name, CodeKind::Helper)));
        if self.version.instruments_hot_code() {
            out.extend(instrumented_tiers(&out));
        }
        Ok(out)
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
}

/// The functions the runtime itself contributes to every code map.
fn builtins() -> Vec<FunctionSpec> {
    let mut out = Vec::new();
    for name in [builtin::PINVOKE_ENTRY, builtin::PROFILER_CALLBACK] {
        let mut f = FunctionSpec::new(name, CodeKind::Native);
        f.module = Some("libprofiler.so".into());
        out.push(f);
    }
    for raiser in CallbackKind::ALL.iter().filter_map(|cb| cb.raiser()) {
        out.push(FunctionSpec::new(raiser, CodeKind::Helper));
    }
    out.push(FunctionSpec::new(builtin::WAIT, CodeKind::Helper));
    out.push(FunctionSpec::new(builtin::HIJACK_STUB, CodeKind::Stub));
    out
}

/// The on-stack-replacement bodies of the JIT-compiled methods that `threads` run in a loop
/// (`in_loop`), one per method: another code version of it, as the runtime compiles when a
/// tier-0 loop has run long (see `RuntimeVersion::replaces_loops_on_stack`).
fn osr_bodies(functions: &[FunctionSpec], threads: &[Spanned<ThreadModel>]) -> Vec<FunctionSpec> {
    let in_loop: std::collections::BTreeSet<&str> = threads
        .iter()
        .flat_map(|t| &t.get_ref().frames)
        .map(|f| f.get_ref())
        .filter(|f| f.in_loop.as_ref().is_some_and(|l| *l.get_ref()))
        .filter_map(|f| f.function.as_ref().map(|n| n.get_ref().as_str()))
        .collect();
    functions
        .iter()
        .filter(|f| f.kind == CodeKind::Jit && f.version_of.is_none() && in_loop.contains(f.name.as_str()))
        .map(|f| {
            let mut body = FunctionSpec::new(&osr_name(&f.name), CodeKind::Jit);
            body.module = f.module.clone();
            body.version_of = Some(f.name.clone());
            body
        })
        .collect()
}

/// The instrumented tier of each JIT-compiled method with a tier-1 version (a `version_of`
/// that is neither a ReJIT version nor an OSR body): another code version of it, compiled
/// before the tier-1 one and listed after it (see `RuntimeVersion::instruments_hot_code`).
fn instrumented_tiers(functions: &[FunctionSpec]) -> Vec<FunctionSpec> {
    let promoted: std::collections::BTreeSet<&str> = functions
        .iter()
        .filter(|f| f.rejit == 0 && !f.name.ends_with(OSR_SUFFIX))
        .filter_map(|f| f.version_of.as_deref())
        .collect();
    functions
        .iter()
        .filter(|f| f.kind == CodeKind::Jit && f.version_of.is_none() && promoted.contains(f.name.as_str()))
        .map(|f| {
            let mut body = FunctionSpec::new(&format!("{}{INSTRUMENTED_SUFFIX}", f.name), CodeKind::Jit);
            body.module = f.module.clone();
            body.version_of = Some(f.name.clone());
            body
        })
        .collect()
}
