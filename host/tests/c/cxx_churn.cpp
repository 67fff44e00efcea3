// A C++17 Linux sampler built as production samplers are (-static-libstdc++): a std::thread
// that every few microseconds suspends the runtime, lists its threads with EnumThreads, looks
// each up in its registry (a std::shared_mutex over a map ThreadCreated fills and
// ThreadDestroyed empties) and walks the ones it finds, then resumes the runtime.
//
// Two classes. The correct one walks while it holds the registry's shared lock, so a
// ThreadDestroyed that erases the thread's entry waits for a walk of that thread to end. The
// buggy one (the planted bug) drops the lock between the lookup and the walk: ThreadDestroyed
// can run, erase the entry and return in between, and the walk then uses a ThreadID that is
// no longer valid.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "../../../include/simclr_com.h"

namespace {

const GUID CLSID_CHURN = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x8a, 0x01}};
const GUID CLSID_CHURN_BUGGY = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x8a, 0x02}};
const GUID IID_ICorProfilerInfo10 = {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}};

enum {
    INFO_SET_EVENT_MASK = 16,
    INFO_DO_STACK_SNAPSHOT = 36,
    INFO_ENUM_THREADS = 71,
    INFO_SUSPEND_RUNTIME = 97,
    INFO_RESUME_RUNTIME = 98,
};
enum { ENUM_NEXT = 7, CB_THREAD_CREATED = 29, CB_THREAD_DESTROYED = 30 };
constexpr uint32_t ENABLE_STACK_SNAPSHOT = 0x10000000u;
constexpr uint32_t MONITOR_THREADS = 0x200u;
constexpr int ROUNDS = 40;

template <typename F> F slot(Object *o, int index) { return reinterpret_cast<F>(o->vtbl[index]); }
using Simple = HRESULT (*)(Object *);

// What the sampler keeps per thread.
struct Entry {
    unsigned long frames = 0;
};

Object *info;
bool buggy = false;
std::shared_mutex registry;
std::map<UINT_PTR, std::unique_ptr<Entry>> threads;

HRESULT on_frame(UINT_PTR, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *data) {
    static_cast<Entry *>(data)->frames++;
    return S_OK;
}

HRESULT walk(UINT_PTR id, Entry *entry) {
    using Snapshot = HRESULT (*)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    return slot<Snapshot>(info, INFO_DO_STACK_SNAPSHOT)(info, id, reinterpret_cast<void *>(&on_frame), 0, entry,
                                                        nullptr, 0);
}

void sample_round() {
    using EnumThreads = HRESULT (*)(Object *, Object **);
    using Next = HRESULT (*)(Object *, uint32_t, UINT_PTR *, uint32_t *);
    if (slot<Simple>(info, INFO_SUSPEND_RUNTIME)(info) != S_OK) return;
    std::vector<UINT_PTR> ids;
    Object *list = nullptr;
    if (slot<EnumThreads>(info, INFO_ENUM_THREADS)(info, &list) == S_OK) {
        UINT_PTR id = 0;
        uint32_t fetched = 0;
        while (slot<Next>(list, ENUM_NEXT)(list, 1, &id, &fetched) == S_OK && fetched == 1) ids.push_back(id);
        slot<Simple>(list, SLOT_RELEASE)(list);
    }
    for (UINT_PTR id : ids) {
        if (buggy) {
            Entry *entry = nullptr;
            {
                std::shared_lock<std::shared_mutex> lock(registry);
                auto found = threads.find(id);
                if (found == threads.end()) continue;
                entry = found->second.get();
            }
            // The bug: nothing keeps ThreadDestroyed from running to its end here.
            Entry copy = *entry;
            walk(id, &copy);
        } else {
            std::shared_lock<std::shared_mutex> lock(registry);
            auto found = threads.find(id);
            if (found != threads.end()) walk(id, found->second.get());
        }
    }
    slot<Simple>(info, INFO_RESUME_RUNTIME)(info);
}

HRESULT thread_created(Object *, UINT_PTR id) {
    std::unique_lock<std::shared_mutex> lock(registry);
    threads[id] = std::make_unique<Entry>();
    return S_OK;
}

HRESULT thread_destroyed(Object *, UINT_PTR id) {
    // Erases the entry without waiting for a walk in progress: only the registry's lock, if
    // the walk holds it, makes it wait.
    std::unique_lock<std::shared_mutex> lock(registry);
    threads.erase(id);
    return S_OK;
}

HRESULT initialize(Object *, Object *unknown) {
    using QueryInterface = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    if (slot<QueryInterface>(unknown, SLOT_QI)(unknown, &IID_ICorProfilerInfo10, reinterpret_cast<void **>(&info)) != S_OK)
        return E_NOINTERFACE;
    HRESULT hr = slot<SetEventMask>(info, INFO_SET_EVENT_MASK)(info, ENABLE_STACK_SNAPSHOT | MONITOR_THREADS);
    if (hr != S_OK) return hr;
    std::thread([] {
        for (int round = 0; round < ROUNDS; round++) {
            sample_round();
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    }).detach();
    return S_OK;
}

}  // namespace

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize);
    slots[CB_THREAD_CREATED] = reinterpret_cast<void *>(&thread_created);
    slots[CB_THREAD_DESTROYED] = reinterpret_cast<void *>(&thread_destroyed);
}

extern "C" HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    buggy = same(clsid, &CLSID_CHURN_BUGGY);
    if (!same(clsid, &CLSID_CHURN) && !buggy) {
        *out = nullptr;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
