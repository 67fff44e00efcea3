/* simclr_com.h: what a profiler written in C (or C++, without CoreCLR's corprof.h) needs of
 * COM to be hosted by simclr or loaded by CoreCLR: the types, the IIDs, a callback object whose
 * slots answer S_OK unless the profiler sets them, and its class factory. A profiler including
 * this file (in one translation unit: it defines static objects) defines set_callbacks(),
 * which fills the slots it handles, and DllGetClassObject, which hands out `factory` for the
 * CLSIDs it answers to (SIMCLR_ONE_CLASS defines it for one). Slots are the profiling API's
 * vtable indices; profiler_releases() counts the Releases of the profiler object. The test
 * profilers of host/tests/c and the lane's probes (conformance/probes) use it. */
#ifndef SIMCLR_COM_H
#define SIMCLR_COM_H

#include <stdint.h>
#include <string.h>

typedef int32_t HRESULT;
typedef uintptr_t UINT_PTR;
typedef uint16_t WCHAR;
typedef struct { uint32_t d1; uint16_t d2, d3; uint8_t d4[8]; } GUID;
typedef struct { void **vtbl; } Object;

#define S_OK 0
#define E_NOINTERFACE ((HRESULT)0x80004002)
#define CLASS_E_CLASSNOTAVAILABLE ((HRESULT)0x80040111)

static const GUID IID_IUnknown = {0, 0, 0, {0xC0, 0, 0, 0, 0, 0, 0, 0x46}};
static const GUID IID_IClassFactory = {1, 0, 0, {0xC0, 0, 0, 0, 0, 0, 0, 0x46}};
static const GUID IID_ICorProfilerCallback = {0x176FBED1, 0xA55C, 0x4796, {0x98, 0xCA, 0xA9, 0xDA, 0x0E, 0xF8, 0x83, 0xE7}};
static const GUID IID_ICorProfilerCallback2 = {0x8A8CC829, 0xCCF2, 0x49FE, {0xBB, 0xAE, 0x0F, 0x02, 0x22, 0x28, 0x07, 0x1A}};

enum { SLOT_QI = 0, SLOT_RELEASE = 2 };
enum { CB_INITIALIZE = 3, CB_SHUTDOWN = 4, CB_SLOTS = 80 };

static int same(const GUID *a, const GUID *b) { return memcmp(a, b, sizeof *a) == 0; }

/* Every callback the profiler does not handle answers S_OK. Extra arguments are ignored, as
 * the x64 calling conventions allow. */
static HRESULT ignore(Object *self) { (void)self; return S_OK; }
static uint32_t add_ref(Object *self) { (void)self; return 1; }
static uint32_t release_static(Object *self) { (void)self; return 1; }

/* Releases of the profiler object (the factory's are not counted). */
static int profiler_release_count;
int profiler_releases(void) { return profiler_release_count; }
static uint32_t release_profiler(Object *self) { (void)self; return (uint32_t)++profiler_release_count; }

static HRESULT profiler_qi(Object *self, const GUID *iid, void **out) {
    if (same(iid, &IID_IUnknown) || same(iid, &IID_ICorProfilerCallback) || same(iid, &IID_ICorProfilerCallback2)) {
        *out = self;
        return S_OK;
    }
    *out = NULL;
    return E_NOINTERFACE;
}

/* Fills the slots of the callbacks the profiler handles (defined by the profiler). */
static void set_callbacks(void **slots);

static void *callback_slots[CB_SLOTS];
static Object profiler = {callback_slots};

static HRESULT create_instance(Object *self, void *outer, const GUID *iid, void **out) {
    (void)self; (void)outer;
    for (int i = 3; i < CB_SLOTS; i++) callback_slots[i] = (void *)ignore;
    callback_slots[0] = (void *)profiler_qi;
    callback_slots[1] = (void *)add_ref;
    callback_slots[2] = (void *)release_profiler;
    set_callbacks(callback_slots);
    return profiler_qi(&profiler, iid, out);
}

static HRESULT factory_qi(Object *self, const GUID *iid, void **out) {
    if (same(iid, &IID_IUnknown) || same(iid, &IID_IClassFactory)) {
        *out = self;
        return S_OK;
    }
    *out = NULL;
    return E_NOINTERFACE;
}

static void *factory_slots[5] = {(void *)factory_qi, (void *)add_ref, (void *)release_static, (void *)create_instance, (void *)ignore};
static Object factory = {factory_slots};

/* C linkage for the exports, in C and in C++. */
#ifdef __cplusplus
#define SIMCLR_EXPORT extern "C"
#else
#define SIMCLR_EXPORT
#endif

/* Defines DllGetClassObject for a library of one class, `clsid` (a GUID variable): it hands
 * out `factory` for it and refuses any other CLSID. */
#define SIMCLR_ONE_CLASS(clsid)                                                            \
    SIMCLR_EXPORT HRESULT DllGetClassObject(const GUID *requested, const GUID *iid, void **out) {         \
        if (!same(requested, &(clsid))) {                                                  \
            *out = NULL;                                                                   \
            return CLASS_E_CLASSNOTAVAILABLE;                                              \
        }                                                                                  \
        return factory_qi(&factory, iid, out);                                             \
    }

#endif
