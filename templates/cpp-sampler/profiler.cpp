// The team's profiler library: the COM object CoreCLR (or simclr) loads. Initialize asks for
// stack snapshots and starts the sampler; Shutdown stops it. Built with -static-libstdc++
// -static-libgcc, as production profilers ship.
#include <chrono>
#include <memory>

#include "sampler.hpp"
#include "simclr_com.h"

namespace {

// The class this library answers to: {7E3A9C51-0D2B-4F68-9A14-C0FFEE000001}.
const GUID CLSID_TEAM_SAMPLER = {0x7e3a9c51, 0x0d2b, 0x4f68, {0x9a, 0x14, 0xc0, 0xff, 0xee, 0x00, 0x00, 0x01}};
const GUID IID_ICorProfilerInfo2 = {0xCC0935CD, 0xA518, 0x487D, {0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78}};
enum { INFO_SET_EVENT_MASK = 16 };
constexpr uint32_t ENABLE_STACK_SNAPSHOT = 0x10000000u;

std::unique_ptr<team::Sampler> sampler;

HRESULT initialize(Object *self, Object *unknown) {
    (void)self;
    using Qi = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    Object *info = nullptr;
    HRESULT hr = reinterpret_cast<Qi>(unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo2, reinterpret_cast<void **>(&info));
    if (hr != S_OK) return hr;
    hr = reinterpret_cast<SetEventMask>(info->vtbl[INFO_SET_EVENT_MASK])(info, ENABLE_STACK_SNAPSHOT);
    if (hr != S_OK) return hr;
    sampler = std::make_unique<team::Sampler>(info);
    sampler->start(std::chrono::microseconds(500));
    return S_OK;
}

HRESULT shutdown(Object *self) {
    (void)self;
    if (sampler) sampler->stop();
    return S_OK;
}

} // namespace

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize);
    slots[CB_SHUTDOWN] = reinterpret_cast<void *>(&shutdown);
}

extern "C" __attribute__((visibility("default"))) HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid,
                                                                            void **out) {
    if (!same(clsid, &CLSID_TEAM_SAMPLER)) {
        *out = nullptr;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
