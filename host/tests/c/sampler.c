/* A sampling profiler in C with its own thread, as production profilers are built: Initialize
 * starts a sampler thread with pthread_create; ThreadCreated and ThreadDestroyed keep a list
 * of managed threads under a pthread mutex; every millisecond the sampler walks each listed
 * thread with DoStackSnapshot; Shutdown stops the sampler and joins it.
 *
 * Two classes: CLSID_LOCKED walks while holding the list's mutex, so ThreadDestroyed waits for
 * a walk of its thread to end (the rule); CLSID_UNLOCKED copies the list, releases the mutex,
 * then walks the copy, so a thread may be destroyed under a walk. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_LOCKED = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x01}};
static const GUID CLSID_UNLOCKED = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x02}};
static const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};

enum { INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36 };
enum { CB_THREAD_CREATED = 29, CB_THREAD_DESTROYED = 30 };
enum { MAX_THREADS = 16 };

#define MONITOR_THREADS 0x200u
#define ENABLE_STACK_SNAPSHOT 0x10000000u

static Object *info;
static int hold_lock_while_walking;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static UINT_PTR threads[MAX_THREADS];
static int thread_count;
static int stop;
static pthread_t sampler;

static HRESULT count_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t context_size,
                           uint8_t *context, void *client_data) {
    (void)function; (void)ip; (void)frame_info; (void)context_size; (void)context;
    ++*(int *)client_data;
    return S_OK;
}

static void walk(UINT_PTR thread) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    int frames = 0;
    ((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, thread, (void *)count_frame, 0, &frames, NULL, 0);
}

/* The monotonic clock when Initialize ran, in ms. */
static long long initialized_at;

static long long monotonic_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *sample(void *unused) {
    (void)unused;
    /* Production samplers skip their own thread; this one checks it knows it. */
    if (!pthread_equal(pthread_self(), sampler)) return NULL;
    /* A monotonic clock that went back since Initialize breaks every timeout a profiler
       computes: make it visible (a mutex taken twice is a fault of the run). */
    if (monotonic_ms() < initialized_at) {
        pthread_mutex_lock(&lock);
        pthread_mutex_lock(&lock);
    }
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        UINT_PTR listed[MAX_THREADS];
        int n;
        pthread_mutex_lock(&lock);
        n = thread_count;
        memcpy(listed, threads, sizeof listed);
        if (!hold_lock_while_walking) pthread_mutex_unlock(&lock);
        for (int i = 0; i < n; i++) walk(listed[i]);
        if (hold_lock_while_walking) pthread_mutex_unlock(&lock);
        usleep(1000);
    }
    return NULL;
}

static HRESULT thread_created(Object *self, UINT_PTR thread) {
    (void)self;
    pthread_mutex_lock(&lock);
    if (thread_count < MAX_THREADS) threads[thread_count++] = thread;
    pthread_mutex_unlock(&lock);
    return S_OK;
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    (void)self;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < thread_count; i++) {
        if (threads[i] == thread) threads[i] = threads[--thread_count];
    }
    pthread_mutex_unlock(&lock);
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo2, (void **)&info);
    if (hr != S_OK) return hr;
    hr = ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS | ENABLE_STACK_SNAPSHOT);
    if (hr != S_OK) return hr;
    initialized_at = monotonic_ms();
    return pthread_create(&sampler, NULL, sample, NULL) == 0 ? S_OK : (HRESULT)0x80004005;
}

static HRESULT shutdown(Object *self) {
    (void)self;
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(sampler, NULL);
    ((HRESULT (*)(Object *))info->vtbl[SLOT_RELEASE])(info);
    info = NULL;
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
    slots[CB_THREAD_CREATED] = (void *)thread_created;
    slots[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_LOCKED) && !same(clsid, &CLSID_UNLOCKED)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    hold_lock_while_walking = same(clsid, &CLSID_LOCKED);
    return factory_qi(&factory, iid, out);
}
