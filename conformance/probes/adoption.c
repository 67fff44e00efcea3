/* The lane's probe of a native thread's adoption: the program hands a managed delegate to
 * run_on_native_thread, which calls it on a thread this library starts, a thread the runtime
 * has never seen. The profiler notes on which OS thread ThreadCreated and
 * ThreadAssignedToOSThread come and whether before the delegate runs, and the answer, one
 * line, goes to the file $PROBE_OUT names. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x02}};
static const GUID IID_ICorProfilerInfo3 = {0xB555ED4F, 0x452A, 0x4E54, {0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0}};
enum { INFO_SET_EVENT_MASK = 16, CB_THREAD_CREATED = 29, CB_THREAD_ASSIGNED_TO_OS_THREAD = 31 };
#define MONITOR_THREADS 0x200u

static long native_tid;
static int delegate_ran_on_it, created_on_it, created_before_delegate, assigned_on_it, assigned_its_id;

static long tid(void) { return syscall(SYS_gettid); }

static HRESULT thread_created(Object *self, UINT_PTR thread) {
    (void)self;
    (void)thread;
    if (native_tid && tid() == native_tid) {
        created_on_it = 1;
        created_before_delegate = !delegate_ran_on_it;
    }
    return S_OK;
}

static HRESULT thread_assigned(Object *self, UINT_PTR thread, uint32_t os_id) {
    (void)self;
    (void)thread;
    if (native_tid && tid() == native_tid) {
        assigned_on_it = 1;
        assigned_its_id = (long)os_id == native_tid;
    }
    return S_OK;
}

/* Called by the managed delegate. */
void delegate_ran(void) { delegate_ran_on_it = tid() == native_tid; }

static void *start(void *callback) {
    native_tid = tid();
    ((void (*)(void))callback)();
    return NULL;
}

/* Calls the delegate `callback` on a new native thread; writes what the profiler saw. */
void run_on_native_thread(void *callback) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, start, callback) != 0 || pthread_join(thread, NULL) != 0) return;
    FILE *out = probe_out();
    if (!out) return;
    fprintf(out,
            "adoption: delegate ran on the native thread %d, ThreadCreated on it %d (before the delegate %d), "
            "ThreadAssignedToOSThread on it %d (with its id %d)\n",
            delegate_ran_on_it, created_on_it, created_before_delegate, assigned_on_it, assigned_its_id);
    fclose(out);
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    Object *info = NULL;
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo3, (void **)&info);
    if (hr != S_OK) return hr;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS);
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_THREAD_CREATED] = (void *)thread_created;
    slots[CB_THREAD_ASSIGNED_TO_OS_THREAD] = (void *)thread_assigned;
}

SIMCLR_ONE_CLASS(CLSID_PROBE)
