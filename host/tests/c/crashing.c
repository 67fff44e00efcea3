/* A sampling profiler in C with a bug that crashes the process in some interleavings only, as
 * production crashes go, and one that blocks outside anything a scheduler can see.
 *
 * Initialize starts a sampler thread; ThreadCreated allocates a record per managed thread in a
 * table under a pthread mutex, ThreadDestroyed frees it and clears its slot. The sampler walks
 * each listed thread and then counts the walk on the thread's record, reading the slot a
 * second time without the mutex: when the thread was destroyed during the walk, the slot is
 * NULL and the sampler dereferences it (SIGSEGV).
 *
 * CLSID_RACE has that bug. CLSID_BLOCKS also busy-waits, on its sampler thread, for a flag
 * nobody sets: a wait without any call the simulation could see, so its run never ends. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_RACE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x66, 0x01}};
static const GUID CLSID_BLOCKS = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x66, 0x02}};
static const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};

enum { INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36 };
enum { CB_THREAD_CREATED = 29, CB_THREAD_DESTROYED = 30 };
enum { MAX_THREADS = 16 };

#define MONITOR_THREADS 0x200u
#define ENABLE_STACK_SNAPSHOT 0x10000000u

struct record {
    UINT_PTR thread;
    long walks;
};

static Object *info;
static int blocks;
/* Never set: CLSID_BLOCKS's sampler busy-waits for it. */
static int released;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct record *volatile slots[MAX_THREADS];
static int stop;
static pthread_t sampler;

static HRESULT ignore_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t context_size,
                            uint8_t *context, void *client_data) {
    (void)function; (void)ip; (void)frame_info; (void)context_size; (void)context; (void)client_data;
    return S_OK;
}

void walk_and_count(int slot) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    UINT_PTR thread;
    pthread_mutex_lock(&lock);
    thread = slots[slot] ? slots[slot]->thread : 0;
    pthread_mutex_unlock(&lock);
    if (!thread) return;
    ((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, thread, (void *)ignore_frame, 0, NULL, NULL, 0);
    /* The bug: the slot is read again, without the mutex, after the walk. */
    slots[slot]->walks++;
}

void *sample(void *unused) {
    (void)unused;
    if (blocks) {
        while (!__atomic_load_n(&released, __ATOMIC_SEQ_CST)) {
        }
    }
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        for (int i = 0; i < MAX_THREADS; i++) walk_and_count(i);
        usleep(1000);
    }
    return NULL;
}

static HRESULT thread_created(Object *self, UINT_PTR thread) {
    (void)self;
    struct record *r = calloc(1, sizeof *r);
    if (!r) return S_OK;
    r->thread = thread;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_THREADS; i++) {
        if (!slots[i]) {
            slots[i] = r;
            r = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    free(r);
    return S_OK;
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    (void)self;
    struct record *gone = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_THREADS; i++) {
        if (slots[i] && slots[i]->thread == thread) {
            gone = slots[i];
            slots[i] = NULL;
        }
    }
    pthread_mutex_unlock(&lock);
    free(gone);
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
    return pthread_create(&sampler, NULL, sample, NULL) == 0 ? S_OK : (HRESULT)0x80004005;
}

static HRESULT shutdown(Object *self) {
    (void)self;
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(sampler, NULL);
    return S_OK;
}

static void set_callbacks(void **slots_) {
    slots_[CB_INITIALIZE] = (void *)initialize;
    slots_[CB_SHUTDOWN] = (void *)shutdown;
    slots_[CB_THREAD_CREATED] = (void *)thread_created;
    slots_[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_RACE) && !same(clsid, &CLSID_BLOCKS)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    blocks = same(clsid, &CLSID_BLOCKS);
    return factory_qi(&factory, iid, out);
}
