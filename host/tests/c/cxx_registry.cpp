// A C++17 sampler whose thread registry is a std::shared_mutex, with the bug production
// samplers have shipped: the sampler thread holds the registry's exclusive lock across
// SuspendRuntime, EnumThreads, the walks and ResumeRuntime, while ObjectAllocated (raised on
// an application thread in cooperative mode) takes the shared lock to count the thread's
// allocations. SuspendRuntime waits for that thread's safe point; the thread, inside the
// callback, waits for the lock: a deadlock through the read-write lock.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "../../../include/simclr_com.h"

namespace {

const GUID CLSID_REGISTRY = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x89, 0x01}};
const GUID IID_ICorProfilerInfo10 = {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}};

enum {
    INFO_GET_CURRENT_THREAD_ID = 13,
    INFO_SET_EVENT_MASK = 16,
    INFO_DO_STACK_SNAPSHOT = 36,
    INFO_ENUM_THREADS = 71,
    INFO_SUSPEND_RUNTIME = 97,
    INFO_RESUME_RUNTIME = 98,
};
enum { ENUM_NEXT = 7, CB_OBJECT_ALLOCATED = 50 };
constexpr uint32_t ENABLE_STACK_SNAPSHOT = 0x10000000u;
constexpr uint32_t ENABLE_OBJECT_ALLOCATED = 0x800000u;
constexpr uint32_t MONITOR_OBJECT_ALLOCATED = 0x100u;

template <typename F> F slot(Object *o, int index) { return reinterpret_cast<F>(o->vtbl[index]); }

using Simple = HRESULT (*)(Object *);

Object *info;
std::shared_mutex registry;
std::map<UINT_PTR, unsigned long> allocations;
std::thread sampler;

HRESULT on_frame(UINT_PTR, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *) { return S_OK; }

void sample_all() {
    using EnumThreads = HRESULT (*)(Object *, Object **);
    using Next = HRESULT (*)(Object *, uint32_t, UINT_PTR *, uint32_t *);
    using Snapshot = HRESULT (*)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    std::vector<UINT_PTR> ids;
    ids.reserve(64);
    // The bug: the registry stays locked while the runtime is suspended.
    std::unique_lock<std::shared_mutex> lock(registry);
    if (slot<Simple>(info, INFO_SUSPEND_RUNTIME)(info) != S_OK) return;
    Object *threads = nullptr;
    if (slot<EnumThreads>(info, INFO_ENUM_THREADS)(info, &threads) == S_OK) {
        UINT_PTR id = 0;
        uint32_t fetched = 0;
        while (ids.size() < ids.capacity() && slot<Next>(threads, ENUM_NEXT)(threads, 1, &id, &fetched) == S_OK &&
               fetched == 1)
            ids.push_back(id);
        slot<Simple>(threads, SLOT_RELEASE)(threads);
    }
    for (UINT_PTR id : ids)
        slot<Snapshot>(info, INFO_DO_STACK_SNAPSHOT)(info, id, reinterpret_cast<void *>(&on_frame), 0, nullptr, nullptr, 0);
    slot<Simple>(info, INFO_RESUME_RUNTIME)(info);
}

HRESULT object_allocated(Object *, UINT_PTR, UINT_PTR) {
    UINT_PTR thread = 0;
    slot<HRESULT (*)(Object *, UINT_PTR *)>(info, INFO_GET_CURRENT_THREAD_ID)(info, &thread);
    std::shared_lock<std::shared_mutex> lock(registry);
    auto found = allocations.find(thread);
    if (found != allocations.end()) found->second++;
    return S_OK;
}

HRESULT initialize(Object *, Object *unknown) {
    using QueryInterface = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    if (slot<QueryInterface>(unknown, SLOT_QI)(unknown, &IID_ICorProfilerInfo10, reinterpret_cast<void **>(&info)) != S_OK)
        return E_NOINTERFACE;
    HRESULT hr = slot<SetEventMask>(info, INFO_SET_EVENT_MASK)(
        info, ENABLE_STACK_SNAPSHOT | ENABLE_OBJECT_ALLOCATED | MONITOR_OBJECT_ALLOCATED);
    if (hr != S_OK) return hr;
    sampler = std::thread([] {
        for (int round = 0; round < 3; round++) {
            sample_all();
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
    sampler.detach();
    return S_OK;
}

}  // namespace

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize);
    slots[CB_OBJECT_ALLOCATED] = reinterpret_cast<void *>(&object_allocated);
}

SIMCLR_ONE_CLASS(CLSID_REGISTRY)
