//! Unloading code: a collected dynamic method (`DynamicMethodUnloaded`) and a collectible
//! assembly (`AssemblyUnloadStarted` / `AssemblyUnloadFinished`).
//!
//! The callback that announces an unload is raised while the ids are still valid; then the
//! code's address ranges are released, so `GetFunctionFromIP` on a stale IP fails with
//! `E_FAIL`, and its `FunctionID`s name freed memory (a fault when used).

use super::{CallContext, Runtime};
use crate::code::{CodeKind, CodeMap, FunctionIndex};
use crate::trace::Event;
use corprof::flags::{event, high};
use corprof::{AssemblyId, HResult};

/// What is unloaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unload {
    /// One dynamic method (LCG), collected.
    DynamicMethod(FunctionIndex),
    /// A collectible assembly, with the functions of its module.
    Assembly {
        /// The assembly's id.
        assembly: AssemblyId,
        /// Its module's name.
        module: String,
        /// Its functions.
        functions: Vec<FunctionIndex>,
    },
}

impl Unload {
    /// The unload of dynamic method `name`; the error says why it cannot be unloaded alone.
    pub fn dynamic_method(code: &CodeMap, name: &str) -> Result<Unload, String> {
        let index = code
            .by_name(name)
            .ok_or_else(|| format!("no function named `{name}` in [[code]]"))?;
        if code.function(index).kind != CodeKind::Lcg {
            return Err(format!(
                "`{name}` is not a dynamic method (kind = \"lcg\"); other methods unload only with their assembly (`module`)"
            ));
        }
        Ok(Unload::DynamicMethod(index))
    }

    /// The unload of the collectible assembly of module `name`, with its methods; the error
    /// says why it cannot be.
    pub fn assembly(code: &CodeMap, name: &str) -> Result<Unload, String> {
        let functions: Vec<FunctionIndex> = (code.functions().iter().enumerate())
            .filter(|(_, f)| f.module == name && f.kind.has_metadata())
            .map(|(i, _)| i)
            .collect();
        let def = code.metadata().modules().iter().find(|d| d.name == name);
        let (Some(def), false) = (def, functions.is_empty()) else {
            return Err(format!("no method with metadata is in module `{name}`"));
        };
        if name.ends_with("System.Private.CoreLib.dll") {
            return Err("System.Private.CoreLib is never unloaded".into());
        }
        Ok(Unload::Assembly {
            assembly: def.assembly,
            module: name.to_string(),
            functions,
        })
    }

    /// The functions unloaded.
    pub fn functions(&self) -> &[FunctionIndex] {
        match self {
            Unload::DynamicMethod(f) => std::slice::from_ref(f),
            Unload::Assembly { functions, .. } => functions,
        }
    }
}

impl Runtime {
    /// Unloads code on thread `thread` (the finalizer or the thread that unloads the
    /// assembly), raising the callbacks the event mask asks for. Returns false when no
    /// thread is named `thread`.
    pub fn unload(&self, thread: &str, unload: &Unload) -> bool {
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let raise = |kind: &str,
                     bits: (u32, u32),
                     detail: &str,
                     f: &dyn Fn(&dyn corprof::ProfilerCallback) -> HResult| {
            let wanted = {
                let mut st = self.lock();
                let wanted =
                    st.config.event_mask & bits.0 == bits.0 && st.config.event_mask_high & bits.1 == bits.1;
                if wanted {
                    st.record(Event {
                        kind: kind.into(),
                        on: thread.to_string(),
                        detail: Some(detail.to_string()),
                    });
                }
                wanted
            };
            if let (true, Some(p)) = (wanted, &profiler) {
                f(p.as_ref());
            }
        };
        let ran = self.on_thread(thread, CallContext::Thread, |rt| {
            let release = |functions: &[FunctionIndex]| {
                let mut st = rt.lock();
                for &f in functions {
                    std::sync::Arc::make_mut(&mut st.code).unload(f);
                }
            };
            match unload {
                Unload::DynamicMethod(f) => {
                    let (id, name) = {
                        let st = rt.lock();
                        let function = st.code.function(*f);
                        (function.function_id, function.name.clone())
                    };
                    raise(
                        "DynamicMethodUnloaded",
                        (0, high::MONITOR_DYNAMIC_FUNCTION_UNLOADS),
                        &name,
                        &|p| p.dynamic_method_unloaded(id),
                    );
                    release(&[*f]);
                }
                Unload::Assembly {
                    assembly,
                    module,
                    functions,
                } => {
                    let bits = (event::MONITOR_ASSEMBLY_LOADS, 0);
                    raise("AssemblyUnloadStarted", bits, module, &|p| {
                        p.assembly_unload_started(*assembly)
                    });
                    release(functions);
                    raise("AssemblyUnloadFinished", bits, module, &|p| {
                        p.assembly_unload_finished(*assembly, HResult::S_OK)
                    });
                }
            }
        });
        ran.is_ok()
    }
}
