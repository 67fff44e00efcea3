//! The code map: every function the simulated process can execute, with its address range.
//!
//! Managed code lives in the JIT heap (JIT'd methods, IL stubs, dynamic methods) or in a
//! ReadyToRun image; native code lives in module images (the runtime's own helpers in
//! `libcoreclr.so`); runtime stubs live in a stub heap the execution manager does not know.
//! Only JIT-heap and ReadyToRun addresses are "managed code" to the runtime (R14).
//!
//! Every function is real machine code ([`machine`]), and the modules a profiler can list
//! carry unwind tables for it ([`images`]).

pub mod images;
pub mod machine;
pub mod metadata;

use crate::platform::Platform;
use crate::synth::FunctionShape;
use corprof::{ClassId, FunctionId, MdToken, ModuleId, ReJitId};
use images::Images;
use machine::{default_shape, MachineCode};
use metadata::{Metadata, MetadataBuilder};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// What kind of code a function is; decides how the runtime treats an IP inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeKind {
    /// A JIT-compiled method with metadata.
    Jit,
    /// A ReadyToRun (precompiled) method with metadata.
    ReadyToRun,
    /// An IL stub (P/Invoke marshalling, …): managed code without metadata (R20.2).
    IlStub,
    /// A dynamic method (LCG): managed code without metadata (R20.2).
    Lcg,
    /// Native code that belongs to the runtime (JIT, GC, allocation helpers).
    Helper,
    /// A runtime stub (precode, hijack stub) with no unwind info and not managed code.
    Stub,
    /// Native code of some other module (the host, the profiler, the application's own DLLs).
    Native,
}

impl CodeKind {
    /// Parses the scenario spelling (`"jit"`, `"r2r"`, `"il_stub"`, …).
    pub fn parse(text: &str) -> Option<CodeKind> {
        Some(match text {
            "jit" => CodeKind::Jit,
            "r2r" => CodeKind::ReadyToRun,
            "il_stub" => CodeKind::IlStub,
            "lcg" => CodeKind::Lcg,
            "helper" => CodeKind::Helper,
            "stub" => CodeKind::Stub,
            "native" => CodeKind::Native,
            _ => return None,
        })
    }

    /// The scenario spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeKind::Jit => "jit",
            CodeKind::ReadyToRun => "r2r",
            CodeKind::IlStub => "il_stub",
            CodeKind::Lcg => "lcg",
            CodeKind::Helper => "helper",
            CodeKind::Stub => "stub",
            CodeKind::Native => "native",
        }
    }

    /// True for code the execution manager knows (JIT heap or ReadyToRun image).
    pub fn is_managed(self) -> bool {
        matches!(
            self,
            CodeKind::Jit | CodeKind::ReadyToRun | CodeKind::IlStub | CodeKind::Lcg
        )
    }

    /// True for code the JIT generates into its heap (not into a module image).
    pub fn in_jit_heap(self) -> bool {
        matches!(self, CodeKind::Jit | CodeKind::IlStub | CodeKind::Lcg)
    }

    /// True for managed code that has metadata and so is reported by `DoStackSnapshot`.
    pub fn has_metadata(self) -> bool {
        matches!(self, CodeKind::Jit | CodeKind::ReadyToRun)
    }
}

/// One function of the simulated process.
#[derive(Clone, Debug)]
pub struct Function {
    /// Its display name (`Program::Main`, `libcoreclr.so!JIT_New`).
    pub name: String,
    /// What kind of code it is.
    pub kind: CodeKind,
    /// The module (assembly or shared library) it belongs to.
    pub module: String,
    /// First byte of its (hot) code.
    pub start: u64,
    /// Size of its hot code in bytes.
    pub size: u64,
    /// A second, cold region (`start`, `size`) when the method is hot/cold split.
    pub cold: Option<(u64, u64)>,
    /// Bytes from the frame's RSP (in the body) to its CFA (the RSP at the call that created
    /// it): its shape's return address, pushes and allocation.
    pub frame_size: u64,
    /// Its machine code and the state at each instruction boundary.
    pub machine: Arc<MachineCode>,
    /// False for a method with no native code yet (never on a stack).
    pub compiled: bool,
    /// True for a typical generic method definition (`GetCodeInfo2` rejects it).
    pub generic_definition: bool,
    /// `FunctionID` (the MethodDesc) of a managed method; null for native code.
    pub function_id: FunctionId,
    /// `ClassID` of a managed method's class.
    pub class_id: ClassId,
    /// `ModuleID` of a managed method's module.
    pub module_id: ModuleId,
    /// The `mdMethodDef` token of a managed method (shared by a generic method's
    /// instantiations).
    pub token: MdToken,
    /// The instantiation's type arguments (`GetFunctionInfo2`); empty when not generic.
    pub type_args: Vec<ClassId>,
    /// For another code version of a method: the method's first function (whose ids it
    /// shares).
    pub version_of: Option<FunctionIndex>,
    /// The ReJIT id of this code (0 for the original IL's code).
    pub rejit_id: ReJitId,
    /// A managed method with metadata that `DoStackSnapshot` does not report (.NET 10's
    /// exception-dispatch methods); code lookups still find it.
    pub hidden: bool,
    /// The code was unloaded ([`CodeMap::unload`]): no address maps to it, and its
    /// `FunctionID` names freed memory.
    pub unloaded: bool,
}

impl Function {
    /// True when `ip` is inside the function's hot or cold code.
    pub fn contains(&self, ip: u64) -> bool {
        let inside = |start: u64, size: u64| ip >= start && ip - start < size;
        inside(self.start, self.size) || self.cold.is_some_and(|(s, n)| inside(s, n))
    }
}

/// Index of a function in a [`CodeMap`].
pub type FunctionIndex = usize;

/// The declaration of a function, before addresses are assigned.
#[derive(Clone, Debug)]
pub struct FunctionSpec {
    /// Display name, unique in the map.
    pub name: String,
    /// Kind of code.
    pub kind: CodeKind,
    /// Owning module; `None` picks the kind's default (`app.dll`, `libcoreclr.so`, …).
    pub module: Option<String>,
    /// Hot code size in bytes (≥ 16).
    pub size: u64,
    /// Frame size in bytes for the default shape: a multiple of 16, at least 16.
    pub frame_size: u64,
    /// The code's shape; `None` for the kind's default ([`machine::default_shape`]).
    pub shape: Option<FunctionShape>,
    /// Whether a cold region exists.
    pub split: bool,
    /// Whether native code exists.
    pub compiled: bool,
    /// Whether this is a typical generic method definition.
    pub generic_definition: bool,
    /// The method's name in metadata when several functions are one method (instantiations)
    /// or share a name (overloads); `None` for `name`.
    pub method: Option<String>,
    /// The instantiation's type arguments (type names; `System.__Canon` for code shared by
    /// reference types); empty for a non-generic method.
    pub type_args: Vec<String>,
    /// Another native code version of this earlier-declared method (a tier-1 body, or a
    /// ReJIT's): the same `FunctionID`, its own code.
    pub version_of: Option<String>,
    /// The version's ReJIT id (0: the original IL, e.g. a tier-1 body).
    pub rejit: u64,
    /// Whether `DoStackSnapshot` leaves this managed method out ([`Function::hidden`]).
    pub hidden: bool,
}

impl FunctionSpec {
    /// A function of `kind` with default size (0x100) and frame size (0x40).
    pub fn new(name: &str, kind: CodeKind) -> FunctionSpec {
        FunctionSpec {
            name: name.to_string(),
            kind,
            module: None,
            size: 0x100,
            frame_size: 0x40,
            shape: None,
            split: false,
            compiled: true,
            generic_definition: false,
            method: None,
            type_args: Vec::new(),
            version_of: None,
            rejit: 0,
            hidden: false,
        }
    }
}

const JIT_HEAP: u64 = 0x7f00_1000_0000;
/// The name the JIT heap goes by in the module list.
pub const JIT_MODULE: &str = "<jit>";
const STUB_HEAP: u64 = 0x7f00_2000_0000;
const COLD_OFFSET: u64 = 0x0800_0000;
const IMAGE_BASE: u64 = 0x7f10_0000_0000;
const IMAGE_STRIDE: u64 = 0x0100_0000;
const METHOD_DESC_BASE: u64 = 0x7f00_0800_0000;

/// Why a code map cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeError {
    /// The spec at fault (its index in the declaration order).
    pub function: usize,
    /// The spec's field at fault (`shape`, `version_of`, or `code` for the whole map).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "function #{}: {}", self.function, self.message)
    }
}

impl std::error::Error for CodeError {}

/// Every function of the process, with deterministic addresses and ids, and a sorted index
/// for IP lookups.
#[derive(Clone, Debug, Default)]
pub struct CodeMap {
    functions: Vec<Function>,
    /// (start, end, index) for every code region, sorted by start.
    ranges: Vec<(u64, u64, FunctionIndex)>,
    /// Each function's index by name.
    names: BTreeMap<String, FunctionIndex>,
    modules: Vec<String>,
    metadata: Metadata,
    images: Arc<Images>,
    /// How many times code was unloaded: caches of lookups are valid for one generation.
    generation: u32,
}

impl CodeMap {
    /// Lays out `specs` in declaration order (the same specs always give the same
    /// addresses), assembles each function's code there and writes `platform`'s unwind
    /// tables. Fails when a shape cannot be assembled or its code does not fit its size.
    pub fn build(specs: &[FunctionSpec], platform: Platform) -> Result<CodeMap, CodeError> {
        let mut map = CodeMap::default();
        let mut cursors: Vec<(String, u64)> = Vec::new();
        let mut metadata = MetadataBuilder::default();
        for spec in specs {
            let module = spec
                .module
                .clone()
                .unwrap_or_else(|| default_module(spec.kind).into());
            let module_index = map.module_index(&module);
            let heap = match spec.kind {
                k if k.in_jit_heap() => (JIT_MODULE.to_string(), JIT_HEAP),
                CodeKind::Stub => ("<stubs>".to_string(), STUB_HEAP),
                _ => (
                    module.clone(),
                    IMAGE_BASE + IMAGE_STRIDE * module_index as u64 + 0x1000,
                ),
            };
            let cursor = match cursors.iter_mut().find(|(name, _)| *name == heap.0) {
                Some((_, cursor)) => cursor,
                None => {
                    cursors.push((heap.0.clone(), heap.1));
                    &mut cursors.last_mut().unwrap().1
                }
            };
            let start = *cursor;
            *cursor = align16(start + spec.size) + 0x10;
            let cold = spec.split.then(|| (start + COLD_OFFSET, spec.size / 2 + 0x10));
            let index = map.functions.len();
            let error = |field: &'static str, message: String| CodeError {
                function: index,
                field,
                message,
            };
            let shape = spec
                .shape
                .clone()
                .unwrap_or_else(|| default_shape(spec.kind, spec.frame_size));
            let machine =
                MachineCode::build_shared(&shape, start, spec.size).map_err(|m| error("shape", m))?;
            if machine.size() > spec.size {
                return Err(error(
                    "shape",
                    format!(
                        "its code takes {:#x} bytes, more than its size {:#x}",
                        machine.size(),
                        spec.size
                    ),
                ));
            }
            let managed = spec.kind.is_managed();
            let base = match &spec.version_of {
                None => None,
                Some(of) => Some(
                    map.names
                        .get(of)
                        .copied()
                        .filter(|&b| map.functions[b].kind.has_metadata() && map.functions[b].version_of.is_none())
                        .filter(|_| spec.kind.has_metadata())
                        .ok_or_else(|| {
                            error(
                                "version_of",
                                format!(
                                "`version_of` must name a method with metadata declared before it (not `{of}`), and be one itself"
                            ))
                        })?,
                ),
            };
            let (function_id, class_id, module_id, token) = if let Some(b) = base {
                let b = &map.functions[b];
                (b.function_id, b.class_id, b.module_id, b.token)
            } else if managed {
                let base = IMAGE_BASE + IMAGE_STRIDE * module_index as u64;
                let name = spec.method.as_deref().unwrap_or(&spec.name);
                let ids = if spec.type_args.is_empty() {
                    metadata.method(&module, module_index, base, name)
                } else {
                    metadata.instantiation(&module, module_index, base, name)
                };
                (
                    FunctionId(METHOD_DESC_BASE + 0x40 * map.functions.len() as u64),
                    ids.class_id,
                    ids.module_id,
                    ids.token,
                )
            } else {
                Default::default()
            };
            let type_args = match base {
                Some(b) => map.functions[b].type_args.clone(),
                None => spec.type_args.iter().map(|t| metadata.type_argument(t)).collect(),
            };
            let index = map.functions.len();
            map.names.entry(spec.name.clone()).or_insert(index);
            map.ranges.push((start, start + spec.size, index));
            if let Some((s, n)) = cold {
                map.ranges.push((s, s + n, index));
            }
            map.functions.push(Function {
                name: spec.name.clone(),
                kind: spec.kind,
                module,
                start,
                size: spec.size,
                cold,
                frame_size: shape.frame_size(),
                machine,
                compiled: spec.compiled,
                generic_definition: spec.generic_definition,
                function_id,
                class_id,
                module_id,
                token,
                type_args,
                version_of: base,
                rejit_id: ReJitId(spec.rejit),
                hidden: spec.hidden,
                unloaded: false,
            });
        }
        map.ranges.sort_unstable();
        map.metadata = metadata.finish();
        map.images = Arc::new(
            Images::build(platform, &map.functions).map_err(|message| CodeError {
                function: 0,
                field: "code",
                message,
            })?,
        );
        Ok(map)
    }

    /// The managed modules and classes, with their metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The loaded modules with unwind info a profiler can find.
    pub fn images(&self) -> &Arc<Images> {
        &self.images
    }

    fn module_index(&mut self, module: &str) -> usize {
        index_of(&mut self.modules, module)
    }

    /// All functions, in declaration order.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The function at `index`.
    pub fn function(&self, index: FunctionIndex) -> &Function {
        &self.functions[index]
    }

    /// The index of the function named `name`.
    pub fn by_name(&self, name: &str) -> Option<FunctionIndex> {
        self.names.get(name).copied()
    }

    /// The function containing `ip`, by binary search over the sorted ranges.
    pub fn lookup(&self, ip: u64) -> Option<FunctionIndex> {
        let i = self.ranges.partition_point(|&(start, _, _)| start <= ip);
        let &(start, end, index) = self.ranges.get(i.checked_sub(1)?)?;
        (ip >= start && ip < end).then_some(index)
    }

    /// Unloads function `index` (a collected dynamic method, or a method of an unloaded
    /// collectible assembly): its code ranges are released, so [`CodeMap::lookup`] no longer
    /// finds them, and it is marked [`Function::unloaded`].
    pub fn unload(&mut self, index: FunctionIndex) {
        self.ranges.retain(|&(_, _, i)| i != index);
        self.functions[index].unloaded = true;
        self.generation = self.generation.wrapping_add(1);
    }

    /// Changes whenever code is unloaded: a cache of [`CodeMap::lookup`] answers made in
    /// another generation may name released code.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The managed method whose `FunctionID` is `id`.
    pub fn by_function_id(&self, id: FunctionId) -> Option<FunctionIndex> {
        // Managed methods' ids are spaced by their index (see `build`).
        let offset = id.0.checked_sub(METHOD_DESC_BASE)?;
        let index = usize::try_from(offset / 0x40).ok()?;
        (offset % 0x40 == 0 && self.functions.get(index)?.function_id == id).then_some(index)
    }

    /// The code versions of the method whose first function is `base`: `base` itself, then
    /// every other version, in declaration order.
    pub fn versions(&self, base: FunctionIndex) -> impl Iterator<Item = FunctionIndex> + '_ {
        std::iter::once(base)
            .chain((0..self.functions.len()).filter(move |&i| self.functions[i].version_of == Some(base)))
    }

    /// True when `ip` is managed code to the execution manager (R14).
    pub fn is_managed(&self, ip: u64) -> bool {
        self.lookup(ip)
            .is_some_and(|i| self.functions[i].kind.is_managed())
    }
}

fn default_module(kind: CodeKind) -> &'static str {
    match kind {
        CodeKind::Jit | CodeKind::ReadyToRun | CodeKind::IlStub | CodeKind::Lcg => "app.dll",
        CodeKind::Helper | CodeKind::Stub => "libcoreclr.so",
        CodeKind::Native => "native.so",
    }
}

fn index_of(names: &mut Vec<String>, name: &str) -> usize {
    match names.iter().position(|n| n == name) {
        Some(i) => i,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
    }
}

fn align16(value: u64) -> u64 {
    (value + 15) & !15
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> CodeMap {
        let mut split = FunctionSpec::new("Program::Hot", CodeKind::Jit);
        split.split = true;
        CodeMap::build(
            &[
                FunctionSpec::new("Program::Main", CodeKind::Jit),
                FunctionSpec::new("IL_STUB_PInvoke", CodeKind::IlStub),
                FunctionSpec::new("host!main", CodeKind::Native),
                FunctionSpec::new("JIT_New", CodeKind::Helper),
                split,
            ],
            Platform::Unix,
        )
        .unwrap()
    }

    #[test]
    fn lookup_finds_every_byte_and_nothing_else() {
        let map = map();
        for (i, f) in map.functions().iter().enumerate() {
            assert_eq!(map.lookup(f.start), Some(i));
            assert_eq!(map.lookup(f.start + f.size - 1), Some(i));
            assert_ne!(map.lookup(f.start + f.size), Some(i));
        }
        let hot = map.by_name("Program::Hot").unwrap();
        let (cold, _) = map.function(hot).cold.unwrap();
        assert_eq!(map.lookup(cold + 4), Some(hot));
        assert_eq!(map.lookup(0), None);
        assert_eq!(map.lookup(u64::MAX), None);
    }

    #[test]
    fn only_execution_manager_code_is_managed() {
        let map = map();
        let ip = |n: &str| map.function(map.by_name(n).unwrap()).start;
        assert!(map.is_managed(ip("Program::Main")));
        assert!(map.is_managed(ip("IL_STUB_PInvoke")));
        assert!(!map.is_managed(ip("host!main")));
        assert!(!map.is_managed(ip("JIT_New")));
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let (a, b) = (map(), map());
        for (x, y) in a.functions().iter().zip(b.functions()) {
            assert_eq!(
                (x.start, x.function_id, x.token),
                (y.start, y.function_id, y.token)
            );
        }
        let main = a.function(a.by_name("Program::Main").unwrap());
        let hot = a.function(a.by_name("Program::Hot").unwrap());
        assert_ne!(main.function_id, hot.function_id);
        assert_eq!(main.class_id, hot.class_id);
        assert_eq!((main.token, hot.token), (0x0600_0001, 0x0600_0003));
        assert_eq!(a.by_function_id(main.function_id), a.by_name("Program::Main"));
    }
}
