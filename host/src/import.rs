//! The metadata COM object handed out for a module: `IMetaDataImport` and
//! `IMetaDataImport2` (one vtable), whose `GetMethodProps` and `GetTypeDefProps` answer from
//! the module's metadata and `GetVersionString` with the metadata version every assembly a
//! .NET compiler writes carries (`v4.0.30319`); and `IMetaDataAssemblyImport` (a second
//! vtable in the same object), whose `GetAssemblyFromScope` and `GetAssemblyProps` name the
//! module's assembly. Every other method is `E_NOTIMPL` (generic parameters included: the
//! simulated metadata does not hold them).
//!
//! One object per module lives as long as the host; `AddRef`/`Release` count, but never free
//! it, and a `Release` past the count is noted as misuse instead of freeing twice.

use crate::com_object::{query_interface as query_interface_of, release_owned};
use crate::out::{hr, put, put_name};
use corprof::com::*;
use corprof::{HResult, MetaDataImport};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The `IMetaDataAssemblyImport` part of an [`ImportObject`]: its own vtable pointer.
#[repr(C)]
struct AssemblyPart {
    vtbl: &'static IMetaDataAssemblyImportVtbl,
}

/// A metadata object over one module's metadata.
#[repr(C)]
pub struct ImportObject {
    vtbl: &'static IMetaDataImport2Vtbl,
    assembly_part: AssemblyPart,
    refs: AtomicU32,
    import: Arc<dyn MetaDataImport>,
    /// The simple name of the module's assembly.
    assembly: String,
    /// Where over-releases are noted.
    misuse: Arc<Mutex<Vec<String>>>,
}

impl ImportObject {
    /// A new object over `import`, a module of assembly `assembly`.
    pub fn new(
        import: Arc<dyn MetaDataImport>,
        assembly: String,
        misuse: Arc<Mutex<Vec<String>>>,
    ) -> Box<ImportObject> {
        Box::new(ImportObject {
            vtbl: vtable(),
            assembly_part: AssemblyPart {
                vtbl: assembly_vtable(),
            },
            refs: AtomicU32::new(0),
            import,
            assembly,
            misuse,
        })
    }

    /// The object as the `IMetaDataAssemblyImport*` handed out, with one more reference.
    fn hand_out_assembly(&self) -> *mut c_void {
        self.refs.fetch_add(1, Ordering::SeqCst);
        &self.assembly_part as *const AssemblyPart as *mut c_void
    }

    /// The object as the `IUnknown*` handed out, with one more reference counted.
    pub fn hand_out(&self) -> *mut c_void {
        self.refs.fetch_add(1, Ordering::SeqCst);
        self as *const ImportObject as *mut c_void
    }

    /// What the profiler still holds of it (the metadata object of its assembly, with its
    /// count of references), if anything.
    pub fn held(&self) -> Option<String> {
        match self.refs.load(Ordering::SeqCst) {
            0 => None,
            n => Some(format!(
                "the metadata object of {} ({n} reference(s))",
                self.assembly
            )),
        }
    }

    /// True when this object serves `import`.
    pub fn serves(&self, import: &Arc<dyn MetaDataImport>) -> bool {
        Arc::ptr_eq(&self.import, import)
    }
}

/// The object behind `this`.
///
/// # Safety
/// `this` is a pointer [`ImportObject::hand_out`] returned, and the host is alive.
unsafe fn object<'a>(this: *mut c_void) -> &'a ImportObject {
    // SAFETY: per the contract, `this` points at a live ImportObject.
    unsafe { &*(this as *const ImportObject) }
}

/// The object behind the `IMetaDataAssemblyImport*` `this`.
///
/// # Safety
/// `this` is a pointer [`ImportObject::hand_out_assembly`] returned, and the host is alive.
unsafe fn object_of_assembly<'a>(this: *mut c_void) -> &'a ImportObject {
    let offset = std::mem::offset_of!(ImportObject, assembly_part);
    // SAFETY: per the contract, `this` is the `assembly_part` field of a live ImportObject.
    unsafe { &*((this as *const u8).sub(offset) as *const ImportObject) }
}

/// The IIDs of the first vtable; the object also answers `IID_IMetaDataAssemblyImport` with
/// its second.
pub const IIDS: [Guid; 4] = [
    IID_IUNKNOWN,
    IID_IMETADATAIMPORT,
    IID_IMETADATAIMPORT2,
    IID_IMETADATAASSEMBLYIMPORT,
];

/// `QueryInterface` of the object `o`.
///
/// # Safety
/// `riid` is NULL or valid; `out` is NULL or valid for one write.
pub unsafe fn query(o: &ImportObject, riid: *const Guid, out: *mut *mut c_void) -> HRESULT {
    // SAFETY: per the contract.
    unsafe {
        if !riid.is_null() && *riid == IID_IMETADATAASSEMBLYIMPORT {
            return query_interface_of(riid, out, &IIDS, || o.hand_out_assembly());
        }
        query_interface_of(riid, out, &IIDS, || o.hand_out())
    }
}

unsafe extern "system-unwind" fn query_interface(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    // SAFETY: COM passes a valid (or NULL) IID and out-pointer, and a pointer it was handed.
    unsafe { query(object(this), riid, out) }
}

unsafe extern "system-unwind" fn assembly_query_interface(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    // SAFETY: as above, on the assembly part.
    unsafe { query(object_of_assembly(this), riid, out) }
}

unsafe extern "system-unwind" fn assembly_add_ref(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a pointer it was handed.
    unsafe { object_of_assembly(this) }
        .refs
        .fetch_add(1, Ordering::SeqCst)
        + 1
}

unsafe extern "system-unwind" fn assembly_release(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a pointer it was handed.
    let o = unsafe { object_of_assembly(this) };
    release_owned(&o.refs, &o.misuse, "IMetaDataAssemblyImport")
}

/// The `mdAssembly` of a module's own assembly.
const ASSEMBLY_TOKEN: u32 = 0x2000_0001;

unsafe extern "system-unwind" fn get_assembly_from_scope(_this: *mut c_void, assembly: *mut u32) -> HRESULT {
    if assembly.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: non-NULL, the caller's.
    unsafe { assembly.write(ASSEMBLY_TOKEN) };
    hr(HResult::S_OK)
}

/// `ASSEMBLYMETADATA`: four version numbers, then the locale buffer and the processor and OS
/// arrays with their counts.
#[repr(C)]
struct AssemblyMetadata {
    version: [u16; 4],
    locale: *mut WCHAR,
    locale_len: u32,
    processors: *mut u32,
    processor_count: u32,
    os: *mut c_void,
    os_count: u32,
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system-unwind" fn get_assembly_props(
    this: *mut c_void,
    assembly: u32,
    key: *mut *const c_void,
    key_len: *mut u32,
    hash: *mut u32,
    name: *mut WCHAR,
    len: u32,
    out_len: *mut u32,
    metadata: *mut c_void,
    flags: *mut u32,
) -> HRESULT {
    if assembly != ASSEMBLY_TOKEN {
        return hr(HResult::CLDB_E_RECORD_NOTFOUND);
    }
    // SAFETY: `this` was handed out by the host; each out-pointer is NULL or the caller's.
    unsafe {
        let o = object_of_assembly(this);
        put(key, std::ptr::null());
        put(key_len, 0);
        put(hash, 0);
        put(flags, 0);
        if let Some(m) = metadata.cast::<AssemblyMetadata>().as_mut() {
            m.version = [0; 4];
            m.locale_len = 0;
            m.processor_count = 0;
            m.os_count = 0;
        }
        truncation(put_name(&o.assembly, name, len, out_len))
    }
}

unsafe extern "system-unwind" fn assembly_close_enum(_this: *mut c_void, _e: *mut c_void) -> HRESULT {
    hr(HResult::S_OK)
}

/// The metadata version string a .NET compiler writes in every assembly's metadata root.
const METADATA_VERSION: &str = "v4.0.30319";

unsafe extern "system-unwind" fn get_version_string(
    _this: *mut c_void,
    text: *mut WCHAR,
    len: u32,
    out_len: *mut u32,
) -> HRESULT {
    // SAFETY: the out-pointers are NULL or the caller's.
    unsafe { truncation(put_name(METADATA_VERSION, text, len, out_len)) }
}

unsafe extern "system-unwind" fn add_ref(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a pointer it was handed.
    unsafe { object(this) }.refs.fetch_add(1, Ordering::SeqCst) + 1
}

unsafe extern "system-unwind" fn release(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a pointer it was handed.
    let o = unsafe { object(this) };
    release_owned(&o.refs, &o.misuse, "IMetaDataImport")
}

unsafe extern "system-unwind" fn get_method_props(
    this: *mut c_void,
    method: u32,
    class: *mut u32,
    name: *mut WCHAR,
    len: u32,
    out_len: *mut u32,
    attributes: *mut u32,
    sig: *mut *const u8,
    sig_len: *mut u32,
    rva: *mut u32,
    impl_flags: *mut u32,
) -> HRESULT {
    // SAFETY: `this` was handed out by the host.
    let props = match unsafe { object(this) }.import.get_method_props(method) {
        Ok(p) => p,
        Err(e) => return hr(e),
    };
    // SAFETY: each out-pointer is NULL or valid, per the COM contract.
    unsafe {
        put(class, props.class);
        put(attributes, props.attributes);
        put(sig, std::ptr::null());
        put(sig_len, 0);
        put(rva, 0);
        put(impl_flags, 0);
        truncation(put_name(&props.name, name, len, out_len))
    }
}

unsafe extern "system-unwind" fn get_type_def_props(
    this: *mut c_void,
    type_def: u32,
    name: *mut WCHAR,
    len: u32,
    out_len: *mut u32,
    flags: *mut u32,
    extends: *mut u32,
) -> HRESULT {
    // SAFETY: `this` was handed out by the host.
    let props = match unsafe { object(this) }.import.get_type_def_props(type_def) {
        Ok(p) => p,
        Err(e) => return hr(e),
    };
    // SAFETY: each out-pointer is NULL or valid, per the COM contract.
    unsafe {
        put(flags, props.flags);
        put(extends, props.extends);
        truncation(put_name(&props.name, name, len, out_len))
    }
}

/// Metadata reports a cut name with the success code `CLDB_S_TRUNCATION`.
fn truncation(fit: bool) -> HRESULT {
    hr(if fit {
        HResult::S_OK
    } else {
        HResult::CLDB_S_TRUNCATION
    })
}

fn vtable() -> &'static IMetaDataImport2Vtbl {
    static VTBL: OnceLock<IMetaDataImport2Vtbl> = OnceLock::new();
    VTBL.get_or_init(|| {
        let mut v = IMetaDataImport2Vtbl::not_implemented(IUnknownVtbl {
            QueryInterface: query_interface,
            AddRef: add_ref,
            Release: release,
        });
        v.GetVersionString = get_version_string;
        v.base.GetMethodProps = get_method_props;
        v.base.GetTypeDefProps = get_type_def_props;
        v
    })
}

fn assembly_vtable() -> &'static IMetaDataAssemblyImportVtbl {
    static VTBL: OnceLock<IMetaDataAssemblyImportVtbl> = OnceLock::new();
    VTBL.get_or_init(|| {
        let mut v = IMetaDataAssemblyImportVtbl::not_implemented(IUnknownVtbl {
            QueryInterface: assembly_query_interface,
            AddRef: assembly_add_ref,
            Release: assembly_release,
        });
        v.GetAssemblyFromScope = get_assembly_from_scope;
        v.GetAssemblyProps = get_assembly_props;
        v.CloseEnum = assembly_close_enum;
        v
    })
}
