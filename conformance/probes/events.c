/* The lane's probe of JIT and thread-name callbacks. The program calls mark() right before it
 * names another thread and right before its first call of a method; the profiler notes on which
 * OS thread the next ThreadNameChanged and JITCompilationStarted/Finished come, walks its own
 * thread from every JIT event (its leaf managed frame must never be the method being compiled),
 * and report() writes one line to the file $PROBE_OUT names. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x03}};
static const GUID IID_ICorProfilerInfo3 = {0xB555ED4F, 0x452A, 0x4E54, {0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0}};
enum { INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36 };
enum { CB_JIT_STARTED = 23, CB_JIT_FINISHED = 24, CB_THREAD_ASSIGNED = 31, CB_THREAD_NAME_CHANGED = 72 };
#define MONITOR_JIT_COMPILATION 0x20u
#define MONITOR_THREADS 0x200u
#define ENABLE_STACK_SNAPSHOT 0x10000000u
enum { MAX_THREADS = 64 };

static Object *info;
static long marked_tid;
static int marked_for; /* 1: a name follows, 2: a first call follows */
static UINT_PTR threads[MAX_THREADS];
static uint32_t os_ids[MAX_THREADS];
static int thread_count;
static UINT_PTR first_call;
static int name_on_marked = -1, name_for_other = -1, jit_on_marked = -1, finished_on_marked = -1, leaf_was_method;

static long tid(void) { return syscall(SYS_gettid); }

/* Called by the program: `what` 1 before it names a thread, 2 before a first call. */
void mark(int what) {
    marked_tid = tid();
    marked_for = what;
}

static HRESULT on_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame, uint32_t size, uint8_t *context, void *data) {
    (void)ip; (void)frame; (void)size; (void)context;
    UINT_PTR *leaf = data;
    if (function && !*leaf) *leaf = function;
    return S_OK;
}

static void walk_from(UINT_PTR compiled) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    UINT_PTR leaf = 0;
    if (((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, 0, (void *)on_frame, 0, &leaf, NULL, 0) == S_OK &&
        leaf == compiled)
        leaf_was_method = 1;
}

static HRESULT jit_started(Object *self, UINT_PTR function, int32_t safe) {
    (void)self; (void)safe;
    walk_from(function);
    if (marked_for == 2 && !first_call) {
        first_call = function;
        jit_on_marked = tid() == marked_tid;
    }
    return S_OK;
}

static HRESULT jit_finished(Object *self, UINT_PTR function, HRESULT status, int32_t safe) {
    (void)self; (void)status; (void)safe;
    walk_from(function);
    if (function == first_call && first_call) finished_on_marked = tid() == marked_tid;
    return S_OK;
}

static HRESULT thread_assigned(Object *self, UINT_PTR thread, uint32_t os_id) {
    (void)self;
    if (thread_count < MAX_THREADS) {
        threads[thread_count] = thread;
        os_ids[thread_count++] = os_id;
    }
    return S_OK;
}

static HRESULT thread_name_changed(Object *self, UINT_PTR thread, uint32_t length, WCHAR *name) {
    (void)self; (void)length; (void)name;
    if (marked_for != 1) return S_OK;
    name_on_marked = tid() == marked_tid;
    name_for_other = 0;
    for (int i = 0; i < thread_count; i++)
        if (threads[i] == thread) name_for_other = (long)os_ids[i] != marked_tid;
    return S_OK;
}

/* Called by the program last: writes what the profiler saw. */
void report(void) {
    FILE *out = probe_out();
    if (!out) return;
    fprintf(out,
            "events: ThreadNameChanged on the naming thread %d, for the named one %d; a first call's "
            "JITCompilationStarted on the calling thread %d, Finished on it %d; a walk from a JIT event "
            "with the method as leaf %d\n",
            name_on_marked, name_for_other, jit_on_marked, finished_on_marked, leaf_was_method);
    fclose(out);
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo3, (void **)&info);
    if (hr != S_OK) return hr;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(
        info, MONITOR_JIT_COMPILATION | MONITOR_THREADS | ENABLE_STACK_SNAPSHOT);
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_JIT_STARTED] = (void *)jit_started;
    slots[CB_JIT_FINISHED] = (void *)jit_finished;
    slots[CB_THREAD_ASSIGNED] = (void *)thread_assigned;
    slots[CB_THREAD_NAME_CHANGED] = (void *)thread_name_changed;
}

SIMCLR_ONE_CLASS(CLSID_PROBE)
