//! What a profiler learns about modules, assemblies, classes and method names: the
//! `GetModuleInfo2` / `GetClassIDInfo2` / `GetAppDomainInfo` / `GetAssemblyInfo` answers, and
//! the two `IMetaDataImport` queries that name a method (`GetMethodProps`, `GetTypeDefProps`).
//!
//! Names are `String`s here; the COM layer copies them into the caller's UTF-16 buffers with
//! the runtime's truncation rules.

use crate::hresult::HResult;
use crate::ids::{AppDomainId, AssemblyId, ClassId, MdToken, ModuleId};

/// `COR_PRF_MODULE_DISK`: the module was loaded from a file.
pub const MODULE_DISK: u32 = 0x1;

/// What `GetModuleInfo2` reports about a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The address the module is loaded at.
    pub base_address: u64,
    /// Its file name.
    pub name: String,
    /// The assembly it belongs to.
    pub assembly_id: AssemblyId,
    /// `COR_PRF_MODULE_FLAGS` ([`MODULE_DISK`], …).
    pub flags: u32,
}

/// What `GetClassIDInfo2` reports about a class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassInfo {
    /// The module that defines it.
    pub module_id: ModuleId,
    /// Its `mdTypeDef` token (`0x02xxxxxx`).
    pub type_def: MdToken,
    /// Its parent class (0 when it has none the runtime reports).
    pub parent: ClassId,
    /// Its type arguments (empty for a non-generic class).
    pub type_args: Vec<ClassId>,
}

/// What `GetAppDomainInfo` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppDomainInfo {
    /// The domain's friendly name.
    pub name: String,
    /// The id of the process that hosts it.
    pub process_id: u64,
}

/// What `GetAssemblyInfo` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssemblyInfo {
    /// The assembly's simple name (no extension).
    pub name: String,
    /// The domain it is loaded in.
    pub app_domain_id: AppDomainId,
    /// Its manifest module.
    pub module_id: ModuleId,
}

/// What `IMetaDataImport::GetMethodProps` reports about an `mdMethodDef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodProps {
    /// The `mdTypeDef` of the declaring class.
    pub class: MdToken,
    /// The method's name, without its class.
    pub name: String,
    /// `CorMethodAttr` flags.
    pub attributes: u32,
}

/// What `IMetaDataImport::GetTypeDefProps` reports about an `mdTypeDef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeDefProps {
    /// The type's full name (namespace included, if any).
    pub name: String,
    /// `CorTypeAttr` flags.
    pub flags: u32,
    /// The token of the base type (0 for none).
    pub extends: MdToken,
}

/// A module's metadata, as much of `IMetaDataImport` as naming a method needs.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait MetaDataImport: Send + Sync {
    /// `GetMethodProps`: fails with `CLDB_E_RECORD_NOTFOUND` for a token the module does not
    /// define.
    fn get_method_props(&self, method: MdToken) -> Result<MethodProps, HResult>;
    /// `GetTypeDefProps`: fails with `CLDB_E_RECORD_NOTFOUND` for a token the module does not
    /// define.
    fn get_type_def_props(&self, type_def: MdToken) -> Result<TypeDefProps, HResult>;
}
