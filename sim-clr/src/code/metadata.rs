//! The metadata of managed modules: which classes and methods each module defines, with the
//! ids and tokens the runtime hands out for them.
//!
//! A managed function named `Namespace.Class::Method` declares class `Namespace.Class` in its
//! module; a name without `::` belongs to the module's `<Module>` type. Tokens are given in
//! declaration order per module: methods `0x06000001`, `0x06000002`, …; `<Module>` is
//! `0x02000001` and the other classes follow from `0x02000002`. Each module's names are kept
//! in an [`ModuleImport`], the module's `IMetaDataImport`, shared by every caller.
//!
//! Code identity: every function is its own `FunctionID`, but several functions can be one
//! method. Instantiations of a generic method (functions with type arguments and the same
//! metadata name) share its `mdMethodDef`; overloads (the same name, no type arguments) each
//! have their own. Reference-type instantiations share one canonical body, instantiated over
//! `System.__Canon`, so they are one function. Type arguments are classes of
//! `System.Private.CoreLib.dll`.

use corprof::metadata::{MethodProps, TypeDefProps};
use corprof::{AppDomainId, AssemblyId, ClassId, HResult, MdToken, MetaDataImport, ModuleId};
use std::collections::BTreeMap;
use std::sync::Arc;

const CLASS_BASE: u64 = 0x7f00_0900_0000;
const MODULE_BASE: u64 = 0x7f00_0a00_0000;
const ASSEMBLY_BASE: u64 = 0x7f00_0b00_0000;
/// The one application domain of a .NET Core process.
pub const APP_DOMAIN: AppDomainId = AppDomainId(0x7f00_0c00_0000);
/// The default domain's friendly name, as the .NET Core host names it.
pub const APP_DOMAIN_NAME: &str = "clrhost";
/// The process id `GetAppDomainInfo` reports.
pub const PROCESS_ID: u64 = 4242;
/// The type every method without a class belongs to.
const MODULE_TYPE: &str = "<Module>";
const FIRST_TYPE_DEF: MdToken = 0x0200_0001;
const FIRST_METHOD_DEF: MdToken = 0x0600_0001;
/// The module that defines the types used as type arguments.
const CORE_LIBRARY: &str = "System.Private.CoreLib.dll";
/// Where the core library is loaded (it has no code of the scenario's).
const CORE_LIBRARY_BASE: u64 = 0x7f0f_0000_0000;
/// The core library's place among the code map's modules: after any a scenario can declare.
const CORE_LIBRARY_INDEX: usize = 0xfff;

/// A managed module: an assembly's manifest module.
#[derive(Clone, Debug)]
pub struct ModuleDef {
    /// Its file name, as the scenario gives it.
    pub name: String,
    /// Its `ModuleID`.
    pub id: ModuleId,
    /// The address it is loaded at.
    pub base: u64,
    /// Its assembly.
    pub assembly: AssemblyId,
    /// Its metadata.
    pub import: Arc<ModuleImport>,
}

impl ModuleDef {
    /// Its assembly's simple name: the file name without its folders and `.dll` or `.exe`.
    pub fn assembly_name(&self) -> &str {
        let name = self.name.rsplit(['/', '\\']).next().unwrap_or(&self.name);
        name.strip_suffix(".dll")
            .or_else(|| name.strip_suffix(".exe"))
            .unwrap_or(name)
    }
}

/// A class some managed method is declared in.
#[derive(Clone, Debug)]
pub struct ClassDef {
    /// Its full name.
    pub name: String,
    /// Index of its module in [`Metadata::modules`].
    pub module: usize,
    /// Its `mdTypeDef`.
    pub type_def: MdToken,
}

/// One module's names by token: what its `IMetaDataImport` answers.
#[derive(Clone, Debug, Default)]
pub struct ModuleImport {
    /// `mdTypeDef` → full name.
    types: BTreeMap<MdToken, String>,
    /// `mdMethodDef` → (declaring `mdTypeDef`, method name).
    methods: BTreeMap<MdToken, (MdToken, String)>,
}

impl MetaDataImport for ModuleImport {
    fn get_method_props(&self, method: MdToken) -> Result<MethodProps, HResult> {
        let (class, name) = self.methods.get(&method).ok_or(HResult::CLDB_E_RECORD_NOTFOUND)?;
        Ok(MethodProps {
            class: *class,
            name: name.clone(),
            attributes: 0,
        })
    }

    fn get_type_def_props(&self, type_def: MdToken) -> Result<TypeDefProps, HResult> {
        let name = self.types.get(&type_def).ok_or(HResult::CLDB_E_RECORD_NOTFOUND)?;
        Ok(TypeDefProps {
            name: name.clone(),
            flags: 0,
            extends: 0,
        })
    }
}

/// The ids a managed method gets.
#[derive(Clone, Copy, Debug)]
pub struct MethodIds {
    /// Its class.
    pub class_id: ClassId,
    /// Its module.
    pub module_id: ModuleId,
    /// Its `mdMethodDef`.
    pub token: MdToken,
}

/// Every managed module and class of the process.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    modules: Vec<ModuleDef>,
    classes: Vec<ClassDef>,
}

/// Builds [`Metadata`] one managed method at a time.
#[derive(Default)]
pub struct MetadataBuilder {
    /// Module index in the code map → index in `modules`.
    modules: BTreeMap<usize, usize>,
    imports: Vec<ModuleImport>,
    defs: Vec<ModuleDef>,
    /// (module, class name) → class index.
    classes: BTreeMap<(usize, String), usize>,
    class_defs: Vec<ClassDef>,
    /// (module, method name) → the `mdMethodDef` its instantiations share.
    generic_methods: BTreeMap<(usize, String), MdToken>,
}

impl MetadataBuilder {
    /// Declares method `name` of module `module` (the code map's module `module_index`,
    /// loaded at `base`) and returns its ids.
    pub fn method(&mut self, module: &str, module_index: usize, base: u64, name: &str) -> MethodIds {
        self.declare(module, module_index, base, name, false)
    }

    /// Declares an instantiation of generic method `name`: the first one declares the
    /// method, the others share its `mdMethodDef`.
    pub fn instantiation(&mut self, module: &str, module_index: usize, base: u64, name: &str) -> MethodIds {
        self.declare(module, module_index, base, name, true)
    }

    /// The `ClassID` of type `name` of the core library, declared on first use.
    pub fn type_argument(&mut self, name: &str) -> ClassId {
        let m = self.module(CORE_LIBRARY, CORE_LIBRARY_INDEX, CORE_LIBRARY_BASE);
        ClassId(CLASS_BASE + 0x100 * self.class(m, name) as u64)
    }

    /// The index of module `module` in `defs`, declared on first use.
    fn module(&mut self, module: &str, module_index: usize, base: u64) -> usize {
        *self.modules.entry(module_index).or_insert_with(|| {
            self.defs.push(ModuleDef {
                name: module.to_string(),
                id: ModuleId(MODULE_BASE + 0x1000 * module_index as u64),
                base,
                assembly: AssemblyId(ASSEMBLY_BASE + 0x100 * module_index as u64),
                import: Arc::default(),
            });
            let mut import = ModuleImport::default();
            import.types.insert(FIRST_TYPE_DEF, MODULE_TYPE.to_string());
            self.imports.push(import);
            self.defs.len() - 1
        })
    }

    /// The index of class `class` of module `m` (an index in `defs`), declared on first use.
    fn class(&mut self, m: usize, class: &str) -> usize {
        if let Some(&c) = self.classes.get(&(m, class.to_string())) {
            return c;
        }
        let import = &mut self.imports[m];
        let type_def = if class == MODULE_TYPE {
            FIRST_TYPE_DEF
        } else {
            FIRST_TYPE_DEF + import.types.len() as MdToken
        };
        import.types.insert(type_def, class.to_string());
        self.class_defs.push(ClassDef {
            name: class.to_string(),
            module: m,
            type_def,
        });
        self.classes
            .insert((m, class.to_string()), self.class_defs.len() - 1);
        self.class_defs.len() - 1
    }

    fn declare(
        &mut self,
        module: &str,
        module_index: usize,
        base: u64,
        name: &str,
        generic: bool,
    ) -> MethodIds {
        let m = self.module(module, module_index, base);
        let (class, method) = name.rsplit_once("::").unwrap_or((MODULE_TYPE, name));
        let class_index = self.class(m, class);
        let type_def = self.class_defs[class_index].type_def;
        let import = &mut self.imports[m];
        let shared = if generic {
            self.generic_methods.get(&(m, name.to_string())).copied()
        } else {
            None
        };
        let token = shared.unwrap_or_else(|| {
            let token = FIRST_METHOD_DEF + import.methods.len() as MdToken;
            import.methods.insert(token, (type_def, method.to_string()));
            token
        });
        if generic {
            self.generic_methods.insert((m, name.to_string()), token);
        }
        MethodIds {
            class_id: ClassId(CLASS_BASE + 0x100 * class_index as u64),
            module_id: self.defs[m].id,
            token,
        }
    }

    /// The metadata of every method declared.
    pub fn finish(self) -> Metadata {
        let modules = self
            .defs
            .into_iter()
            .zip(self.imports)
            .map(|(def, import)| ModuleDef {
                import: Arc::new(import),
                ..def
            })
            .collect();
        Metadata {
            modules,
            classes: self.class_defs,
        }
    }
}

impl Metadata {
    /// The managed modules, in the order their first method was declared.
    pub fn modules(&self) -> &[ModuleDef] {
        &self.modules
    }

    /// The module whose `ModuleID` is `id`.
    pub fn module(&self, id: ModuleId) -> Option<&ModuleDef> {
        self.modules.iter().find(|m| m.id == id)
    }

    /// The module whose manifest assembly is `id`.
    pub fn assembly(&self, id: AssemblyId) -> Option<&ModuleDef> {
        self.modules.iter().find(|m| m.assembly == id)
    }

    /// The class whose `ClassID` is `id`, with its module.
    pub fn class(&self, id: ClassId) -> Option<(&ClassDef, &ModuleDef)> {
        let offset = id.0.checked_sub(CLASS_BASE)?;
        if offset % 0x100 != 0 {
            return None;
        }
        let class = self.classes.get(usize::try_from(offset / 0x100).ok()?)?;
        Some((class, &self.modules[class.module]))
    }

    /// The name a profiler reads for method `token` of class `class` (`Class::Method`, or
    /// `Method` for a method without a class): the name [`MetadataBuilder::method`] split.
    pub fn method_name(&self, class: ClassId, token: MdToken) -> Option<String> {
        let (class, module) = self.class(class)?;
        let method = module.import.get_method_props(token).ok()?.name;
        Some(if class.name == MODULE_TYPE {
            method
        } else {
            format!("{}::{method}", class.name)
        })
    }

    /// The `ClassID` of class `name` in any module, the first declared.
    pub fn class_named(&self, name: &str) -> Option<ClassId> {
        let index = self.classes.iter().position(|c| c.name == name)?;
        Some(ClassId(CLASS_BASE + 0x100 * index as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_declaration_order_per_module() {
        let mut b = MetadataBuilder::default();
        let main = b.method("app.dll", 0, 0x1000, "Program::Main");
        let work = b.method("app.dll", 0, 0x1000, "Worker::Run");
        let again = b.method("app.dll", 0, 0x1000, "Program::Helper");
        let free = b.method("app.dll", 0, 0x1000, "GlobalFn");
        let other = b.method("lib.dll", 3, 0x3000, "Program::Main");
        let md = b.finish();
        assert_eq!(
            (main.token, work.token, again.token, free.token),
            (0x0600_0001, 0x0600_0002, 0x0600_0003, 0x0600_0004)
        );
        assert_eq!(main.class_id, again.class_id);
        assert_ne!(main.class_id, other.class_id, "one class per module");
        assert_eq!(other.token, 0x0600_0001);
        let (class, module) = md.class(work.class_id).unwrap();
        assert_eq!(
            (class.name.as_str(), class.type_def, module.name.as_str()),
            ("Worker", 0x0200_0003, "app.dll")
        );
        let import = &md.module(main.module_id).unwrap().import;
        let props = import.get_method_props(free.token).unwrap();
        assert_eq!((props.class, props.name.as_str()), (0x0200_0001, "GlobalFn"));
        assert_eq!(import.get_type_def_props(0x0200_0001).unwrap().name, "<Module>");
        assert_eq!(
            import.get_method_props(0x0600_0009),
            Err(HResult::CLDB_E_RECORD_NOTFOUND)
        );
        assert!(md.class(ClassId(CLASS_BASE + 1)).is_none());
        assert_eq!(md.modules().len(), 2);
        assert_eq!(md.class_named("Worker"), Some(work.class_id));
    }

    #[test]
    fn instantiations_share_a_token_and_overloads_do_not() {
        let mut b = MetadataBuilder::default();
        let int = b.instantiation("app.dll", 0, 0x1000, "Cache::Get");
        let canon = b.instantiation("app.dll", 0, 0x1000, "Cache::Get");
        let first = b.method("app.dll", 0, 0x1000, "Cache::Put");
        let second = b.method("app.dll", 0, 0x1000, "Cache::Put");
        assert_eq!(int.token, canon.token);
        assert_ne!(first.token, second.token);
        let i32 = b.type_argument("System.Int32");
        assert_eq!(b.type_argument("System.Int32"), i32);
        let md = b.finish();
        let (class, module) = md.class(i32).unwrap();
        assert_eq!(
            (class.name.as_str(), module.name.as_str()),
            ("System.Int32", "System.Private.CoreLib.dll")
        );
        let import = &md.module(first.module_id).unwrap().import;
        assert_eq!(import.get_method_props(second.token).unwrap().name, "Put");
    }
}
