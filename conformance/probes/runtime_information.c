/* The lane's probe of GetRuntimeInformation: a profiler that asks for it in Initialize and
 * writes the answer, one line, to the file $PROBE_OUT names. Loaded by a real runtime and
 * hosted by `simclr run --profiler`, it must write the same line in both. */
#include <stdio.h>
#include <stdlib.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x01}};
static const GUID IID_ICorProfilerInfo3 = {0xB555ED4F, 0x452A, 0x4E54, {0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0}};
enum { INFO_GET_RUNTIME_INFORMATION = 67 };

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*RuntimeInformation)(Object *, uint16_t *, uint32_t *, uint16_t *, uint16_t *, uint16_t *,
                                          uint16_t *, uint32_t, uint32_t *, WCHAR *);
    Object *info = NULL;
    uint16_t id = 9, major = 0, minor = 0, build = 0, qfe = 0;
    uint32_t type = 0, length = 0;
    WCHAR text[64] = {0};
    char narrow[64] = {0};
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo3, (void **)&info);
    if (hr == S_OK)
        hr = ((RuntimeInformation)info->vtbl[INFO_GET_RUNTIME_INFORMATION])(info, &id, &type, &major, &minor, &build,
                                                                            &qfe, 64, &length, text);
    for (uint32_t i = 0; i < length && i < 63; i++) narrow[i] = (char)text[i];
    FILE *out = probe_out();
    if (out) {
        fprintf(out, "GetRuntimeInformation: hr 0x%08X, instance %u, type %u, version %u.%u.%u.%u, string \"%s\" (%u)\n",
                (unsigned)hr, id, type, major, minor, build, qfe, narrow, length);
        fclose(out);
    }
    return S_OK;
}

static void set_callbacks(void **slots) { slots[CB_INITIALIZE] = (void *)initialize; }

SIMCLR_ONE_CLASS(CLSID_PROBE)
