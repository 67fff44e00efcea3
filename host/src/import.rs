//! The `IMetaDataImport` COM object handed out for a module: `GetMethodProps` and
//! `GetTypeDefProps` answer from the module's metadata; every other method is `E_NOTIMPL`.
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

/// An `IMetaDataImport` object over one module's metadata.
#[repr(C)]
pub struct ImportObject {
    vtbl: &'static IMetaDataImportVtbl,
    refs: AtomicU32,
    import: Arc<dyn MetaDataImport>,
    /// Where over-releases are noted.
    misuse: Arc<Mutex<Vec<String>>>,
}

impl ImportObject {
    /// A new object over `import`.
    pub fn new(import: Arc<dyn MetaDataImport>, misuse: Arc<Mutex<Vec<String>>>) -> Box<ImportObject> {
        Box::new(ImportObject {
            vtbl: vtable(),
            refs: AtomicU32::new(0),
            import,
            misuse,
        })
    }

    /// The object as the `IUnknown*` handed out, with one more reference counted.
    pub fn hand_out(&self) -> *mut c_void {
        self.refs.fetch_add(1, Ordering::SeqCst);
        self as *const ImportObject as *mut c_void
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

/// The IIDs this object answers to.
const IIDS: [Guid; 2] = [IID_IUNKNOWN, IID_IMETADATAIMPORT];

unsafe extern "system-unwind" fn query_interface(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    // SAFETY: COM passes a valid (or NULL) IID and out-pointer, and a pointer it was handed.
    unsafe { query_interface_of(riid, out, &IIDS, || object(this).hand_out()) }
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

fn vtable() -> &'static IMetaDataImportVtbl {
    static VTBL: OnceLock<IMetaDataImportVtbl> = OnceLock::new();
    VTBL.get_or_init(|| {
        let mut v = IMetaDataImportVtbl::not_implemented(IUnknownVtbl {
            QueryInterface: query_interface,
            AddRef: add_ref,
            Release: release,
        });
        v.GetMethodProps = get_method_props;
        v.GetTypeDefProps = get_type_def_props;
        v
    })
}
