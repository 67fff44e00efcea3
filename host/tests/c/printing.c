/* A profiler that prints, as profilers print their diagnostics: printf without fflush, so the
 * lines sit in the C library's buffer until the process flushes it (at exit, when standard
 * output is a file or a pipe). Initialize prints one line, each ThreadDestroyed another. */
#include <stdio.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_PRINTING = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x8b, 0x01}};
static const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};

enum { INFO_SET_EVENT_MASK = 16, CB_THREAD_DESTROYED = 30 };
#define MONITOR_THREADS 0x200u

static Object *info;

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo2, (void **)&info);
    if (hr != S_OK) return hr;
    printf("printing profiler: initialized\n");
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS);
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    (void)self;
    printf("printing profiler: thread %#lx destroyed\n", (unsigned long)thread);
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_PRINTING)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
