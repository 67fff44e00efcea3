//! Naming methods and classes through metadata: `IMetaDataImport` is obtained per module in
//! `ModuleLoadFinished` (where the SYNC `GetModuleMetaData` is allowed) and used afterwards.

use crate::info::Info;
use corprof::com::*;
use std::ffi::c_void;
use std::sync::Mutex;

/// (ModuleID, IMetaDataImport*) for every loaded module.
static IMPORTS: Mutex<Vec<(UintPtr, usize)>> = Mutex::new(Vec::new());

/// `ModuleLoadFinished`: keeps the module's metadata importer.
pub fn module_loaded(module: UintPtr) {
    let (hr, import) = Info::get().get_module_metadata(module);
    if hr == 0 && !import.is_null() {
        IMPORTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((module, import as usize));
    }
}

fn import_of(module: UintPtr) -> Option<*mut c_void> {
    let imports = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    imports
        .iter()
        .find(|(m, _)| *m == module)
        .map(|(_, i)| *i as *mut c_void)
}

fn vtbl(import: *mut c_void) -> &'static IMetaDataImportVtbl {
    // SAFETY: a COM object starts with its vtable pointer; the runtime keeps it alive.
    unsafe { &**(import as *const *const IMetaDataImportVtbl) }
}

fn type_name(import: *mut c_void, type_def: u32) -> Option<String> {
    let mut buf = [0u16; 512];
    let mut len = 0;
    let (mut flags, mut extends) = (0, 0);
    // SAFETY: the importer's slot, called with its declared arguments and buffers of the sizes passed.
    let hr = unsafe {
        (vtbl(import).GetTypeDefProps)(
            import,
            type_def,
            buf.as_mut_ptr(),
            buf.len() as u32,
            &mut len,
            &mut flags,
            &mut extends,
        )
    };
    (hr == 0).then(|| utf16(&buf, len))
}

fn utf16(buf: &[u16], len: u32) -> String {
    let len = (len as usize).min(buf.len());
    String::from_utf16_lossy(&buf[..len])
        .trim_end_matches('\0')
        .to_string()
}

/// `Class::Method` for a `FunctionID`, as the simulator's scenarios name methods.
pub fn function_name(function: UintPtr) -> String {
    let (hr, _class, module, token) = Info::get().get_function_info(function);
    let Some(import) = import_of(module).filter(|_| hr == 0) else {
        return format!("<unnamed 0x{function:x}>");
    };
    let mut buf = [0u16; 512];
    let (mut class_token, mut len, mut attrs, mut sig_len, mut rva, mut impl_flags) = (0, 0, 0, 0, 0, 0);
    let mut sig = std::ptr::null();
    // SAFETY: the importer's slot, called with its declared arguments and buffers of the sizes passed.
    let hr = unsafe {
        (vtbl(import).GetMethodProps)(
            import,
            token,
            &mut class_token,
            buf.as_mut_ptr(),
            buf.len() as u32,
            &mut len,
            &mut attrs,
            &mut sig,
            &mut sig_len,
            &mut rva,
            &mut impl_flags,
        )
    };
    if hr != 0 {
        return format!("<unnamed 0x{function:x}>");
    }
    let class = type_name(import, class_token).unwrap_or_else(|| "<class>".into());
    format!("{class}::{}", utf16(&buf, len))
}

/// The name of a `ClassID`'s type definition.
pub fn class_name(class: UintPtr) -> Option<String> {
    let (hr, module, type_def) = Info::get().get_class_id_info(class);
    if hr != 0 || type_def == 0 {
        return None;
    }
    type_name(import_of(module)?, type_def)
}
