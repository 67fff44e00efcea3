/* The lane's probe of a thread whose ThreadDestroyed returned while the runtime is suspended.
 * The program starts a thread that marks itself (mark_target) and returns. When its
 * ThreadDestroyed comes, the callback asks the profiler's own native thread to suspend the
 * runtime, which walks the dying thread and looks for it in EnumThreads while the callback
 * still runs; then the callback returns, and, with the runtime still suspended, the native
 * thread looks for it again, asks GetThreadInfo and walks it, then resumes the runtime.
 * Each answer is written as soon as it is known, so a crash leaves the answers before it;
 * the line goes to the file $PROBE_OUT names. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x08}};
static const GUID IID_ICorProfilerInfo10 = {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}};
enum { INFO_GET_THREAD_INFO = 12, INFO_GET_CURRENT_THREAD_ID = 13, INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36 };
enum { INFO_ENUM_THREADS = 71, INFO_INITIALIZE_CURRENT_THREAD = 72, INFO_SUSPEND_RUNTIME = 97, INFO_RESUME_RUNTIME = 98 };
enum { ENUM_NEXT = 7, CB_THREAD_DESTROYED = 30 };
#define MONITOR_THREADS 0x200u
#define ENABLE_STACK_SNAPSHOT 0x10000000u

typedef HRESULT (*Call0)(Object *);
typedef HRESULT (*ThreadInfo)(Object *, UINT_PTR, uint32_t *);
typedef HRESULT (*CurrentThread)(Object *, UINT_PTR *);
typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
typedef HRESULT (*EnumThreads)(Object *, Object **);
typedef HRESULT (*Next)(Object *, uint32_t, UINT_PTR *, uint32_t *);

static Object *info;
static UINT_PTR target;
static pthread_t sampler;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
/* 1: ThreadDestroyed asks for the suspension; 2: the native thread looked inside it;
 * 3: the callback returns; 4: the native thread is done. */
static int phase;
static FILE *out;

/* Called by the target thread: it is the thread the probe watches. */
void mark_target(void) { ((CurrentThread)info->vtbl[INFO_GET_CURRENT_THREAD_ID])(info, &target); }

static void note(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *format, ...) {
    if (!out) return;
    va_list args;
    va_start(args, format);
    vfprintf(out, format, args);
    va_end(args);
    fflush(out);
}

/* Waits, holding `lock`, until `phase` is at least `until`, for at most 10 s. */
static int wait_for(int until) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (phase < until)
        if (pthread_cond_timedwait(&changed, &lock, &deadline) == ETIMEDOUT) return 0;
    return 1;
}

static void advance(int to) {
    phase = to;
    pthread_cond_broadcast(&changed);
}

static HRESULT count_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame, uint32_t size, uint8_t *context, void *data) {
    (void)function; (void)ip; (void)frame; (void)size; (void)context;
    ++*(int *)data;
    return S_OK;
}

static void walk(void) {
    int frames = 0;
    note(" DoStackSnapshot ");
    HRESULT hr = ((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, target, (void *)count_frame, 0, &frames, NULL, 0);
    note("0x%08x %d frames", (unsigned)hr, frames);
}

static void listed(void) {
    Object *threads = NULL;
    UINT_PTR id;
    uint32_t fetched = 0;
    int found = 0;
    HRESULT hr = ((EnumThreads)info->vtbl[INFO_ENUM_THREADS])(info, &threads);
    if (hr != S_OK) {
        note(" EnumThreads 0x%08x", (unsigned)hr);
        return;
    }
    while (((Next)threads->vtbl[ENUM_NEXT])(threads, 1, &id, &fetched) == S_OK && fetched == 1)
        found |= id == target;
    ((Call0)threads->vtbl[SLOT_RELEASE])(threads);
    note(" EnumThreads lists it %d", found);
}

static void *sample(void *unused) {
    (void)unused;
    ((Call0)info->vtbl[INFO_INITIALIZE_CURRENT_THREAD])(info);
    pthread_mutex_lock(&lock);
    if (!wait_for(1)) goto done;
    pthread_mutex_unlock(&lock);
    HRESULT hr = ((Call0)info->vtbl[INFO_SUSPEND_RUNTIME])(info);
    note("destroyed: SuspendRuntime 0x%08x; inside ThreadDestroyed:", (unsigned)hr);
    listed();
    walk();
    pthread_mutex_lock(&lock);
    advance(2);
    if (!wait_for(3)) goto done;
    pthread_mutex_unlock(&lock);
    /* The callback has returned; let the thread go on with its teardown as far as it can. */
    usleep(300 * 1000);
    uint32_t os_id = 0;
    note("; after it returned:");
    listed();
    hr = ((ThreadInfo)info->vtbl[INFO_GET_THREAD_INFO])(info, target, &os_id);
    note(" GetThreadInfo 0x%08x", (unsigned)hr);
    walk();
    hr = ((Call0)info->vtbl[INFO_RESUME_RUNTIME])(info);
    note("; ResumeRuntime 0x%08x\n", (unsigned)hr);
    pthread_mutex_lock(&lock);
done:
    advance(4);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    (void)self;
    if (thread != target || !target) return S_OK;
    pthread_mutex_lock(&lock);
    advance(1);
    if (wait_for(2)) advance(3);
    pthread_mutex_unlock(&lock);
    return S_OK;
}

/* Called by the program once the target has ended: waits for the native thread's answers. */
void report(void) {
    pthread_mutex_lock(&lock);
    wait_for(4);
    pthread_mutex_unlock(&lock);
    if (out) fclose(out);
    out = NULL;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo10, (void **)&info);
    if (hr != S_OK) return hr;
    hr = ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS | ENABLE_STACK_SNAPSHOT);
    if (hr != S_OK) return hr;
    out = probe_out();
    return pthread_create(&sampler, NULL, sample, NULL) == 0 ? S_OK : (HRESULT)0x80004005;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
}

SIMCLR_ONE_CLASS(CLSID_PROBE)
