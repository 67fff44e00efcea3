/* A sampler designed for Windows, ported to simclr through include/simclr_os.h: a sampler
 * thread suspends each managed thread with SuspendThread, reads it with GetThreadContext,
 * walks it with DoStackSnapshot and resumes it with ResumeThread; a watchdog thread resumes a
 * thread left suspended longer than 500 ms. ThreadCreated, ThreadAssignedToOSThread and
 * ThreadDestroyed keep one record per managed thread, each with its own pthread mutex, which
 * ThreadDestroyed takes to mark the record destroyed, so it waits for a sample in progress.
 *
 * CLSID_CORRECT checks the destroyed flag after taking the record's mutex. CLSID_PLANTED reads
 * it before taking the mutex: ThreadDestroyed can run to its end in between, and the sampler
 * then suspends and walks a thread the runtime has destroyed. */
#define _DEFAULT_SOURCE
#define SIMCLR_OS_WINDOWS_NAMES
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"
#include "../../../include/simclr_os.h"

static const GUID CLSID_CORRECT = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x77, 0x01}};
static const GUID CLSID_PLANTED = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x77, 0x02}};
static const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};

enum { INFO_SET_EVENT_MASK = 16, INFO_DO_STACK_SNAPSHOT = 36 };
enum { CB_THREAD_CREATED = 29, CB_THREAD_DESTROYED = 30, CB_THREAD_ASSIGNED = 31 };
enum { MAX_THREADS = 16, CONTEXT_SIZE = 1232 };

#define MONITOR_THREADS 0x200u
#define ENABLE_STACK_SNAPSHOT 0x10000000u

struct record {
    UINT_PTR thread;
    DWORD os_thread;
    int destroyed;
    pthread_mutex_t lock;
};

static Object *info;
static int planted;
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;
static struct record records[MAX_THREADS];
static int record_count;
static int stop;
static pthread_t sampler, watchdog;
static unsigned char context[CONTEXT_SIZE];

/* The suspension in progress, shared with the watchdog: 0 none, else the thread id; and
   since when (monotonic ms). The watchdog resumes it at most once (compare-and-swap). */
static DWORD suspended;
static long long suspended_since;

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static HRESULT ignore_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t context_size,
                            uint8_t *frame_context, void *client_data) {
    (void)function; (void)ip; (void)frame_info; (void)context_size; (void)frame_context; (void)client_data;
    return S_OK;
}

static void sample_one(struct record *r) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    HANDLE h = OpenThread(0, 0, r->os_thread);
    __atomic_store_n(&suspended_since, now_ms(), __ATOMIC_SEQ_CST);
    __atomic_store_n(&suspended, r->os_thread, __ATOMIC_SEQ_CST);
    if (SuspendThread(h) == (DWORD)-1) {
        __atomic_store_n(&suspended, 0, __ATOMIC_SEQ_CST);
        return;
    }
    if (GetThreadContext(h, context)) {
        ((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, r->thread, (void *)ignore_frame, 0, NULL, NULL, 0);
    }
    DWORD mine = r->os_thread;
    /* Whoever clears `suspended` resumes the thread: the sampler, or the watchdog. */
    if (__atomic_compare_exchange_n(&suspended, &mine, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        ResumeThread(h);
    }
    CloseHandle(h);
}

static void *sample(void *unused) {
    (void)unused;
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&records_lock);
        int n = record_count;
        pthread_mutex_unlock(&records_lock);
        for (int i = 0; i < n; i++) {
            struct record *r = &records[i];
            if (planted && (r->destroyed || !r->os_thread)) continue;
            pthread_mutex_lock(&r->lock);
            if (!planted && (r->destroyed || !r->os_thread)) {
                pthread_mutex_unlock(&r->lock);
                continue;
            }
            sample_one(r);
            pthread_mutex_unlock(&r->lock);
        }
        usleep(1000);
    }
    return NULL;
}

static void *watch(void *unused) {
    (void)unused;
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        usleep(100000);
        DWORD target = __atomic_load_n(&suspended, __ATOMIC_SEQ_CST);
        if (target && now_ms() - __atomic_load_n(&suspended_since, __ATOMIC_SEQ_CST) > 500 &&
            __atomic_compare_exchange_n(&suspended, &target, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            ResumeThread(OpenThread(0, 0, target));
        }
    }
    return NULL;
}

static struct record *find(UINT_PTR thread) {
    for (int i = 0; i < record_count; i++) {
        if (records[i].thread == thread) return &records[i];
    }
    return NULL;
}

static HRESULT thread_created(Object *self, UINT_PTR thread) {
    (void)self;
    pthread_mutex_lock(&records_lock);
    if (!find(thread) && record_count < MAX_THREADS) {
        struct record *r = &records[record_count];
        r->thread = thread;
        r->os_thread = 0;
        r->destroyed = 0;
        pthread_mutex_init(&r->lock, NULL);
        simclr_os->vtbl->NameObject(simclr_os, &r->lock, "thread record lock");
        record_count++;
    }
    pthread_mutex_unlock(&records_lock);
    return S_OK;
}

static HRESULT thread_assigned(Object *self, UINT_PTR thread, DWORD os_thread) {
    (void)self;
    pthread_mutex_lock(&records_lock);
    struct record *r = find(thread);
    if (r) r->os_thread = os_thread;
    pthread_mutex_unlock(&records_lock);
    return S_OK;
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    (void)self;
    pthread_mutex_lock(&records_lock);
    struct record *r = find(thread);
    pthread_mutex_unlock(&records_lock);
    if (r) {
        pthread_mutex_lock(&r->lock);
        r->destroyed = 1;
        pthread_mutex_unlock(&r->lock);
    }
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo2, (void **)&info);
    if (hr != S_OK) return hr;
    if (!simclr_os_attach(unknown)) return E_NOINTERFACE;
    /* Reports name the lock so. */
    simclr_os->vtbl->NameObject(simclr_os, &records_lock, "records lock");
    hr = ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, MONITOR_THREADS | ENABLE_STACK_SNAPSHOT);
    if (hr != S_OK) return hr;
    if (pthread_create(&sampler, NULL, sample, NULL) != 0) return (HRESULT)0x80004005;
    return pthread_create(&watchdog, NULL, watch, NULL) == 0 ? S_OK : (HRESULT)0x80004005;
}

static HRESULT shutdown(Object *self) {
    (void)self;
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(sampler, NULL);
    pthread_join(watchdog, NULL);
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
    slots[CB_THREAD_CREATED] = (void *)thread_created;
    slots[CB_THREAD_ASSIGNED] = (void *)thread_assigned;
    slots[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_CORRECT) && !same(clsid, &CLSID_PLANTED)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    planted = same(clsid, &CLSID_PLANTED);
    return factory_qi(&factory, iid, out);
}
