/* The lane's probe of module metadata: for every module ModuleLoadFinished announces, the
 * profiler opens its metadata (GetModuleMetaData, IMetaDataImport2) and reads its version
 * string; at Shutdown it writes the distinct strings, one line, to the file $PROBE_OUT names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x06}};
static const GUID IID_ICorProfilerInfo3 = {0xB555ED4F, 0x452A, 0x4E54, {0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0}};
static const GUID IID_IMetaDataImport2 = {0xFCE5EFA0, 0x8BBA, 0x4F8E, {0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66}};
enum { INFO_SET_EVENT_MASK = 16, INFO_GET_MODULE_METADATA = 21, CB_MODULE_LOAD_FINISHED = 14, MD_GET_VERSION_STRING = 71 };
#define MONITOR_MODULE_LOADS 0x4u

static Object *info;
static char seen[256];
static int failures;

static HRESULT module_loaded(Object *self, UINT_PTR module, HRESULT status) {
    typedef HRESULT (*ModuleMetaData)(Object *, UINT_PTR, uint32_t, const GUID *, Object **);
    typedef HRESULT (*VersionString)(Object *, WCHAR *, uint32_t, uint32_t *);
    Object *import = NULL;
    WCHAR text[64] = {0};
    uint32_t length = 0;
    char narrow[64] = {0};
    (void)self;
    (void)status;
    if (((ModuleMetaData)info->vtbl[INFO_GET_MODULE_METADATA])(info, module, 0, &IID_IMetaDataImport2, &import) != S_OK ||
        !import) {
        failures++;
        return S_OK;
    }
    if (((VersionString)import->vtbl[MD_GET_VERSION_STRING])(import, text, 64, &length) == S_OK) {
        for (uint32_t i = 0; i < length && i < 63 && text[i]; i++) narrow[i] = (char)text[i];
        if (!strstr(seen, narrow) && strlen(seen) + strlen(narrow) + 2 < sizeof seen) {
            if (seen[0]) strcat(seen, ",");
            strcat(seen, narrow);
        }
    } else {
        failures++;
    }
    ((HRESULT (*)(Object *))import->vtbl[SLOT_RELEASE])(import);
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo3, (void **)&info);
    if (hr != S_OK) return hr;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_MODULE_LOADS);
}

static HRESULT shutdown(Object *self) {
    (void)self;
    FILE *out = probe_out();
    if (!out) return S_OK;
    fprintf(out, "metadata: version strings %s, modules whose metadata could not be read %d\n", seen, failures);
    fclose(out);
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
    slots[CB_MODULE_LOAD_FINISHED] = (void *)module_loaded;
}

SIMCLR_ONE_CLASS(CLSID_PROBE)
