/* The lane's probe of on-stack replacement and code lookups. The program's method with a loop
 * calls probe(0) in its first round and probe(1) in its last, a million rounds later; each time
 * the profiler walks its own thread and, for the first managed frame (the looping method),
 * asks GetCodeInfo2 for its regions (is the IP in them?), GetNativeCodeStartAddresses for its
 * native code bodies (how many, and which one starts last at or below the IP), and GetCodeInfo4
 * for the first body's regions (a SYNC call, made from a P/Invoke). The program's hot method
 * without a loop asks the same from its last call, probe(2), once tiering has promoted it.
 * report() writes one line to the file $PROBE_OUT names. */
#include <stdio.h>
#include <stdlib.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x07}};
static const GUID IID_ICorProfilerInfo9 = {0x008170DB, 0xF8CC, 0x4796, {0x9A, 0x51, 0xDC, 0x8A, 0xA0, 0xB4, 0x70, 0x12}};
enum { INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36, INFO_GET_CODE_INFO2 = 42 };
enum { INFO_GET_NATIVE_CODE_START_ADDRESSES = 90, INFO_GET_CODE_INFO4 = 92 };
#define ENABLE_STACK_SNAPSHOT 0x10000000u
enum { MAX_REGIONS = 8, MAX_BODIES = 8 };

typedef struct { UINT_PTR start; UINT_PTR size; } CodeInfo;

static Object *info;
static char line[3][160];

static HRESULT on_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame, uint32_t size, uint8_t *context, void *data) {
    (void)frame; (void)size; (void)context;
    UINT_PTR *first = data;
    if (function && !first[0]) {
        first[0] = function;
        first[1] = ip;
    }
    return S_OK;
}

static int inside(const CodeInfo *regions, uint32_t n, UINT_PTR ip) {
    for (uint32_t i = 0; i < n && i < MAX_REGIONS; i++)
        if (ip >= regions[i].start && ip < regions[i].start + regions[i].size) return 1;
    return 0;
}

/* Called by the program: `moment` 0 in the loop's first round, 1 in its last, 2 in the hot
 * method's last call. */
void probe(int moment) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    typedef HRESULT (*CodeInfo2)(Object *, UINT_PTR, uint32_t, uint32_t *, CodeInfo *);
    typedef HRESULT (*Starts)(Object *, UINT_PTR, UINT_PTR, uint32_t, uint32_t *, UINT_PTR *);
    typedef HRESULT (*CodeInfo4)(Object *, UINT_PTR, uint32_t, uint32_t *, CodeInfo *);
    UINT_PTR first[2] = {0, 0};
    CodeInfo regions[MAX_REGIONS];
    UINT_PTR starts[MAX_BODIES];
    uint32_t n = 0, bodies = 0;
    int in_code_info2 = -1, body = -1;
    if (moment < 0 || moment > 2) return;
    if (((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, 0, (void *)on_frame, 0, first, NULL, 0) != S_OK || !first[0]) {
        snprintf(line[moment], sizeof line[moment], "no walk");
        return;
    }
    if (((CodeInfo2)info->vtbl[INFO_GET_CODE_INFO2])(info, first[0], MAX_REGIONS, &n, regions) == S_OK)
        in_code_info2 = inside(regions, n, first[1]);
    HRESULT starts_hr =
        ((Starts)info->vtbl[INFO_GET_NATIVE_CODE_START_ADDRESSES])(info, first[0], 0, MAX_BODIES, &bodies, starts);
    /* The body the IP lies in, as far as starts tell: the one starting last at or below it. */
    for (uint32_t b = 0; starts_hr == S_OK && b < bodies && b < MAX_BODIES; b++)
        if (starts[b] <= first[1] && (body < 0 || starts[b] > starts[body])) body = (int)b;
    HRESULT info4_hr = bodies ? ((CodeInfo4)info->vtbl[INFO_GET_CODE_INFO4])(info, starts[0], MAX_REGIONS, &n, regions) : S_OK;
    snprintf(line[moment], sizeof line[moment],
             "IP in GetCodeInfo2 %d, GetNativeCodeStartAddresses 0x%08x with %u bodies, the IP in body %d, GetCodeInfo4 0x%08x",
             in_code_info2, (unsigned)starts_hr, bodies, body, (unsigned)info4_hr);
}

/* Called by the program last: writes what the profiler saw. */
void report(void) {
    FILE *out = probe_out();
    if (!out) return;
    fprintf(out, "osr: first round: %s; last round: %s; hot method's last call: %s\n", line[0], line[1], line[2]);
    fclose(out);
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo9, (void **)&info);
    if (hr != S_OK) return hr;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, ENABLE_STACK_SNAPSHOT);
}

static void set_callbacks(void **slots) { slots[CB_INITIALIZE] = (void *)initialize; }

SIMCLR_ONE_CLASS(CLSID_PROBE)
