/* A C test of the simclr C ABI: a runtime from a scenario string, a walk made as one of its
 * threads through its ICorProfilerInfo*, a profiler object attached and a callback raised,
 * and a scenario file run to JSON. Prints one line per check; exits 1 on the first failure. */
#include "simclr.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t HRESULT;
typedef uintptr_t UINT_PTR;
typedef struct { void **vtbl; } Object;

static const char *SCENARIO =
    "platform = \"unix\"\n"
    "[runtime]\n"
    "event_mask = [\"ENABLE_STACK_SNAPSHOT\"]\n"
    "[[code]]\nname = \"App::Work\"\nkind = \"jit\"\n"
    "[[code]]\nname = \"App::Main\"\nkind = \"jit\"\n"
    "[[code]]\nname = \"host!main\"\nkind = \"native\"\n"
    "[[threads]]\nname = \"main\"\n"
    "frames = [{ fn = \"App::Work\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]\n";

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) exit(1);
}

typedef struct { Object *info; int managed, native; HRESULT hr; } Walk;

static HRESULT on_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t size, uint8_t *context, void *data) {
    Walk *w = data;
    (void)ip; (void)frame_info; (void)size; (void)context;
    if (function) w->managed++; else w->native++;
    return 0;
}

static void walk_here(void *data) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    Walk *w = data;
    w->hr = ((Snapshot)w->info->vtbl[SIMCLR_SLOT_DO_STACK_SNAPSHOT])(w->info, 0, (void *)on_frame, 0, w, NULL, 0);
}

/* A profiler object: Initialize asks for ObjectAllocated; ObjectAllocated counts. */
static int allocations, shutdowns;
static HRESULT p_ignore(Object *self) { (void)self; return 0; }
static uint32_t p_ref(Object *self) { (void)self; return 1; }
static HRESULT p_qi(Object *self, const void *iid, void **out) { (void)iid; *out = self; return 0; }
static HRESULT p_initialize(Object *self, Object *unknown) {
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    /* ENABLE_STACK_SNAPSHOT | ENABLE_OBJECT_ALLOCATED | MONITOR_OBJECT_ALLOCATED */
    return ((SetEventMask)unknown->vtbl[SIMCLR_SLOT_SET_EVENT_MASK])(unknown, 0x10000000u | 0x800000u | 0x100u);
}
static HRESULT p_shutdown(Object *self) { (void)self; shutdowns++; return 0; }
static HRESULT p_allocated(Object *self, UINT_PTR object, UINT_PTR class_id) { (void)self; (void)object; (void)class_id; allocations++; return 0; }
static void *slots[80];
static Object profiler = {slots};

int main(int argc, char **argv) {
    char *error = NULL;
    check(simclr_runtime_from_string("bad.toml", "platform = 1\n", &error) == NULL && error != NULL, "a bad scenario is an error");
    printf("   %s\n", error);
    simclr_string_free(error);

    simclr_runtime *rt = simclr_runtime_from_string("capi.toml", SCENARIO, &error);
    check(rt != NULL, "a runtime from a string");
    Object *info = simclr_profiler_info(rt);
    check(info != NULL, "its ICorProfilerInfo*");

    Walk w = {info, 0, 0, -1};
    check(simclr_on_thread(rt, "main", "pinvoke", walk_here, &w) == 0, "code run as thread main");
    check(w.hr == 0 && w.managed == 2 && w.native == 1, "its walk: 2 managed frames, 1 native run");
    check(simclr_on_thread(rt, "ghost", "pinvoke", walk_here, &w) == -1, "an unknown thread is refused");

    typedef HRESULT (*CurrentThread)(Object *, UINT_PTR *);
    UINT_PTR id = 0;
    HRESULT hr = ((CurrentThread)info->vtbl[SIMCLR_SLOT_GET_CURRENT_THREAD_ID])(info, &id);
    check((uint32_t)hr == 0x80131355u, "this OS thread is a native thread to the runtime");

    for (int i = 0; i < 80; i++) slots[i] = (void *)p_ignore;
    slots[0] = (void *)p_qi; slots[1] = (void *)p_ref; slots[2] = (void *)p_ref;
    slots[3] = (void *)p_initialize; slots[4] = (void *)p_shutdown; slots[50] = (void *)p_allocated;
    check(simclr_attach(rt, &profiler) == 0, "a profiler attached");
    check(simclr_raise(rt, "main", "ObjectAllocated") == 0 && allocations == 1, "ObjectAllocated raised into it");
    check(simclr_raise(rt, "main", "GarbageCollectionStarted") == 1, "a callback outside its event mask is not raised");

    typedef uint32_t (*Release)(Object *);
    ((Release)info->vtbl[SIMCLR_SLOT_RELEASE])(info);
    simclr_runtime_free(rt);
    check(shutdowns == 1, "freeing the runtime shuts the profiler down");

    if (argc > 1) {
        char *json = simclr_run_scenario(argv[1], &error);
        check(json != NULL && strstr(json, "\"calls\"") != NULL, "a scenario file run to JSON");
        simclr_string_free(json);
        check(simclr_run_scenario("/nonexistent.toml", &error) == NULL, "a missing file is an error");
        simclr_string_free(error);
    }
    if (argc > 3) {
        /* argv[2]: a process scenario, argv[3]: the sampler library (tests/c/sampler.c). */
        char *json = simclr_explore_profiler(argv[2], argv[3], "{2C0F6A1E-7B3D-4E21-8F5A-112233445501}", 20, 1, &error);
        check(json != NULL && strstr(json, "\"schedules_run\": 20") != NULL && strstr(json, "\"ok\": 20") != NULL,
              "a hosted sampler explored: 20 schedules, all ok");
        simclr_string_free(json);
        check(simclr_explore_profiler(argv[2], argv[3], "not a guid", 20, 1, &error) == NULL, "a bad CLSID is an error");
        simclr_string_free(error);
    }
    return 0;
}
