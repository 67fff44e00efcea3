// A Windows-design sampler in C++17 whose per-thread slots sit behind spin locks
// (std::atomic<bool>), with no OS lock and no hand-placed scheduling point: built with
// -fsanitize=thread (and -static-libstdc++ -static-libgcc, as production ships), its atomic
// operations are the only places the scheduler can switch threads inside it.
//
// ThreadDestroyed spin-locks the dying thread's slot, marks it destroyed and unlocks, so it
// waits for a walk in progress. The sampler thread (a std::thread started by Initialize) lists
// the threads under SuspendRuntime, then takes three rounds over the slots: lock, check the
// mark, walk (a cross-thread DoStackSnapshot, which suspends the target itself), unlock. Built
// with -DSLOTS_BUG it reads the mark before taking the lock, so ThreadDestroyed can run to its
// end in between and the sampler walks a thread whose ThreadDestroyed returned.
//
// At Shutdown it appends "walks N" (its successful walks) to the file $TSAN_SLOTS_OUT names.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "../../../include/simclr_com.h"

namespace {

const GUID CLSID_TSAN_SLOTS = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x89, 0x01}};
const GUID IID_ICorProfilerInfo12 = {0x27B24CCD, 0x1CB1, 0x47C5, {0x96, 0xEE, 0x98, 0x19, 0x0D, 0xC3, 0x09, 0x59}};

enum {
    INFO_SET_EVENT_MASK = 16,
    INFO_DO_STACK_SNAPSHOT = 36,
    INFO_ENUM_THREADS = 71,
    INFO_INITIALIZE_CURRENT_THREAD = 72,
    INFO_SUSPEND_RUNTIME = 97,
    INFO_RESUME_RUNTIME = 98,
};
enum { ENUM_NEXT = 7 };
enum { CB_THREAD_DESTROYED = 30 };
constexpr uint32_t MONITOR_THREADS = 0x200u;
constexpr uint32_t ENABLE_STACK_SNAPSHOT = 0x10000000u;

template <typename F> F slot(Object *o, int index) { return reinterpret_cast<F>(o->vtbl[index]); }

// One thread's slot: its ThreadID (0: free), a spin lock, the destroyed mark.
struct Slot {
    std::atomic<UINT_PTR> thread{0};
    std::atomic<bool> busy{false};
    std::atomic<bool> destroyed{false};

    void lock() {
        while (busy.exchange(true, std::memory_order_acquire)) {
        }
    }
    void unlock() { busy.store(false, std::memory_order_release); }
};

std::array<Slot, 4> slots;
Object *info;
std::thread sampler;
unsigned long walks;

// `thread`'s slot, claimed if it has none. Every caller scans in the same order, so two
// threads claiming one thread's slot at once find the same one.
Slot *slot_of(UINT_PTR thread) {
    for (Slot &s : slots) {
        UINT_PTR owner = 0;
        if (s.thread.compare_exchange_strong(owner, thread) || owner == thread) return &s;
    }
    return nullptr;
}

HRESULT on_frame(UINT_PTR, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *) { return S_OK; }

void walk(UINT_PTR thread) {
    using Snapshot = HRESULT (*)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    if (slot<Snapshot>(info, INFO_DO_STACK_SNAPSHOT)(info, thread, reinterpret_cast<void *>(&on_frame), 0, nullptr,
                                                     nullptr, 0) == S_OK)
        walks++;
}

void sample() {
    using Simple = HRESULT (*)(Object *);
    using EnumThreads = HRESULT (*)(Object *, Object **);
    using Next = HRESULT (*)(Object *, uint32_t, UINT_PTR *, uint32_t *);
    slot<Simple>(info, INFO_INITIALIZE_CURRENT_THREAD)(info);
    // The threads that exist, listed where none is freed.
    if (slot<Simple>(info, INFO_SUSPEND_RUNTIME)(info) == S_OK) {
        Object *threads = nullptr;
        if (slot<EnumThreads>(info, INFO_ENUM_THREADS)(info, &threads) == S_OK) {
            UINT_PTR id = 0;
            uint32_t fetched = 0;
            while (slot<Next>(threads, ENUM_NEXT)(threads, 1, &id, &fetched) == S_OK && fetched == 1) slot_of(id);
            slot<Simple>(threads, SLOT_RELEASE)(threads);
        }
        slot<Simple>(info, INFO_RESUME_RUNTIME)(info);
    }
    for (int round = 0; round < 3; round++) {
        for (Slot &s : slots) {
            UINT_PTR thread = s.thread.load();
            if (thread == 0) continue;
#ifdef SLOTS_BUG
            if (s.destroyed.load()) continue;
            s.lock();
            walk(thread);
#else
            s.lock();
            if (!s.destroyed.load()) walk(thread);
#endif
            s.unlock();
        }
    }
}

// Marks the thread destroyed (in a slot of its own if the sampler has not listed it yet, so it
// never will), waiting for a walk in progress.
HRESULT thread_destroyed(Object *, UINT_PTR thread) {
    if (Slot *s = slot_of(thread)) {
        s->lock();
        s->destroyed.store(true);
        s->unlock();
    }
    return S_OK;
}

HRESULT initialize(Object *, Object *unknown) {
    using QueryInterface = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    if (slot<QueryInterface>(unknown, SLOT_QI)(unknown, &IID_ICorProfilerInfo12, reinterpret_cast<void **>(&info)) != S_OK)
        return E_NOINTERFACE;
    HRESULT hr = slot<SetEventMask>(info, INFO_SET_EVENT_MASK)(info, MONITOR_THREADS | ENABLE_STACK_SNAPSHOT);
    if (hr != S_OK) return hr;
    sampler = std::thread(sample);
    return S_OK;
}

HRESULT shutdown(Object *) {
    if (sampler.joinable()) sampler.join();
    if (const char *path = std::getenv("TSAN_SLOTS_OUT")) {
        if (FILE *out = std::fopen(path, "a")) {
            std::fprintf(out, "walks %lu\n", walks);
            std::fclose(out);
        }
    }
    return S_OK;
}

}  // namespace

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize);
    slots[CB_SHUTDOWN] = reinterpret_cast<void *>(&shutdown);
    slots[CB_THREAD_DESTROYED] = reinterpret_cast<void *>(&thread_destroyed);
}

extern "C" HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_TSAN_SLOTS)) {
        *out = nullptr;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
