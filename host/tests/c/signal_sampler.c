/* A signal-based sampler, as Linux native profilers are built: Initialize installs a SIGPROF
 * handler with sigaction (SA_SIGINFO | SA_RESTART) and starts a sampler thread with
 * pthread_create; ThreadAssignedToOSThread lists each managed thread's OS id. Every
 * millisecond the sampler sends SIGPROF to each listed thread with tgkill (through syscall)
 * and waits, polling a flag, for the handler to post the interrupted instruction pointer from
 * its ucontext_t; it then asks GetFunctionFromIP whether that is managed code. Shutdown stops
 * and joins the sampler and (first class only) appends "signals N managed M" to the file
 * $SIGNAL_SAMPLER_OUT names.
 *
 * Two classes: CLSID_ATOMIC's handler only stores to the posted slot (async-signal-safe);
 * CLSID_LOCKING's takes a pthread mutex to do it, which a thread interrupted while holding
 * that mutex would deadlock on. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_ATOMIC = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x99, 0x01}};
static const GUID CLSID_LOCKING = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x99, 0x02}};
static const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};

enum { INFO_GET_FUNCTION_FROM_IP = 7, INFO_SET_EVENT_MASK = 16 };
enum { CB_THREAD_ASSIGNED_TO_OS_THREAD = 31 };
enum { MAX_THREADS = 16, POLLS = 50 };

#define MONITOR_THREADS 0x200u

static Object *info;
static int locking;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t os_ids[MAX_THREADS];
static int thread_count;
static int stop;
static pthread_t sampler;
static unsigned long signals, managed;

/* The interrupted instruction pointer the handler posts (0: none yet). */
static uintptr_t posted;

static void on_signal(int signal, siginfo_t *detail, void *context) {
    (void)signal;
    (void)detail;
    uintptr_t rip = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
    if (locking) pthread_mutex_lock(&lock);
    __atomic_store_n(&posted, rip, __ATOMIC_SEQ_CST);
    if (locking) pthread_mutex_unlock(&lock);
}

static void sample_one(uint32_t os_id) {
    typedef HRESULT (*FunctionFromIp)(Object *, UINT_PTR, UINT_PTR *);
    __atomic_store_n(&posted, 0, __ATOMIC_SEQ_CST);
    if (syscall(SYS_tgkill, getpid(), os_id, SIGPROF) != 0) return;
    signals++;
    uintptr_t rip = 0;
    for (int i = 0; i < POLLS && !(rip = __atomic_load_n(&posted, __ATOMIC_SEQ_CST)); i++) usleep(100);
    UINT_PTR function = 0;
    if (rip && ((FunctionFromIp)info->vtbl[INFO_GET_FUNCTION_FROM_IP])(info, rip, &function) == S_OK && function)
        managed++;
}

static void *sample(void *unused) {
    (void)unused;
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        uint32_t listed[MAX_THREADS];
        int n;
        pthread_mutex_lock(&lock);
        n = thread_count;
        for (int i = 0; i < n; i++) listed[i] = os_ids[i];
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < n; i++) sample_one(listed[i]);
        usleep(1000);
    }
    return NULL;
}

static HRESULT thread_assigned(Object *self, UINT_PTR thread, uint32_t os_id) {
    (void)self;
    (void)thread;
    pthread_mutex_lock(&lock);
    if (thread_count < MAX_THREADS) os_ids[thread_count++] = os_id;
    pthread_mutex_unlock(&lock);
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo2, (void **)&info);
    if (hr != S_OK) return hr;
    hr = ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS);
    if (hr != S_OK) return hr;
    struct sigaction action = {0};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGPROF, &action, NULL) != 0) return (HRESULT)0x80004005;
    return pthread_create(&sampler, NULL, sample, NULL) == 0 ? S_OK : (HRESULT)0x80004005;
}

static HRESULT shutdown(Object *self) {
    (void)self;
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(sampler, NULL);
    const char *path = locking ? NULL : getenv("SIGNAL_SAMPLER_OUT");
    FILE *out = path ? fopen(path, "a") : NULL;
    if (out) {
        fprintf(out, "signals %lu managed %lu\n", signals, managed);
        fclose(out);
    }
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
    slots[CB_THREAD_ASSIGNED_TO_OS_THREAD] = (void *)thread_assigned;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_ATOMIC) && !same(clsid, &CLSID_LOCKING)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    locking = same(clsid, &CLSID_LOCKING);
    return factory_qi(&factory, iid, out);
}
