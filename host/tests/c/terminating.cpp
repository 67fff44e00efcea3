// A C++ profiler that calls std::terminate in some interleavings only: its std::thread
// suspends the runtime once and lists the threads; when it finds exactly one left it takes
// that for a broken invariant and terminates the process, as a failed assertion in
// production does.
#include <exception>
#include <thread>

#include "../../../include/simclr_com.h"

namespace {

const GUID CLSID_TERMINATING = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x8c, 0x01}};
const GUID IID_ICorProfilerInfo10 = {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}};

enum { INFO_SET_EVENT_MASK = 16, INFO_ENUM_THREADS = 71, INFO_SUSPEND_RUNTIME = 97, INFO_RESUME_RUNTIME = 98 };
enum { ENUM_NEXT = 7 };
constexpr uint32_t MONITOR_THREADS = 0x200u;

template <typename F> F slot(Object *o, int index) { return reinterpret_cast<F>(o->vtbl[index]); }
using Simple = HRESULT (*)(Object *);

Object *info;

int listed_threads() {
    using EnumThreads = HRESULT (*)(Object *, Object **);
    using Next = HRESULT (*)(Object *, uint32_t, UINT_PTR *, uint32_t *);
    int n = 0;
    Object *list = nullptr;
    if (slot<EnumThreads>(info, INFO_ENUM_THREADS)(info, &list) == S_OK) {
        UINT_PTR id = 0;
        uint32_t fetched = 0;
        while (slot<Next>(list, ENUM_NEXT)(list, 1, &id, &fetched) == S_OK && fetched == 1) n++;
        slot<Simple>(list, SLOT_RELEASE)(list);
    }
    return n;
}

HRESULT initialize(Object *, Object *unknown) {
    using QueryInterface = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    if (slot<QueryInterface>(unknown, SLOT_QI)(unknown, &IID_ICorProfilerInfo10, reinterpret_cast<void **>(&info)) != S_OK)
        return E_NOINTERFACE;
    HRESULT hr = slot<SetEventMask>(info, INFO_SET_EVENT_MASK)(info, MONITOR_THREADS);
    if (hr != S_OK) return hr;
    std::thread([] {
        if (slot<Simple>(info, INFO_SUSPEND_RUNTIME)(info) != S_OK) return;
        int n = listed_threads();
        slot<Simple>(info, INFO_RESUME_RUNTIME)(info);
        if (n == 1) std::terminate();
    }).detach();
    return S_OK;
}

}  // namespace

static void set_callbacks(void **slots) { slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize); }

extern "C" HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_TERMINATING)) {
        *out = nullptr;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
