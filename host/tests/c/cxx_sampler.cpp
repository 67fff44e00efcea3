// A sampling profiler in C++17 built the way production profilers are: linked with
// -static-libstdc++ -static-libgcc, its sampler a std::thread, its caches behind
// std::shared_mutex, its one-time setup a std::call_once, its stop signal a
// std::condition_variable, its frame filter a std::regex. It asks for ICorProfilerInfo12 and
// checks GetRuntimeInformation (no sampling on a runtime it does not know), and samples as
// Unix profilers must: SuspendRuntime, EnumThreads, DoStackSnapshot of each thread,
// ResumeRuntime. As production samplers do, it takes no sample before the runtime has
// compiled managed code (its first JITCompilationFinished), and it keeps the names
// ThreadNameChanged reports. Frames are named through IMetaDataImport2 (GetMethodProps,
// GetTypeDefProps) and cached. At Shutdown it appends what it saw to the file
// $CXX_SAMPLER_OUT names: "samples N", then "frame NAME" for each method name the filter
// keeps, then "thread NAME" for each thread name reported. Its second class forgets to
// release the thread enumerators EnumThreads gives it (and reports nothing).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../../include/simclr_com.h"

namespace {

const GUID CLSID_CXX_SAMPLER = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x88, 0x01}};
// The same sampler with a leak: it never releases its thread enumerators.
const GUID CLSID_CXX_SAMPLER_LEAKING = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x88, 0x02}};
bool leaks_enumerators = false;
const GUID IID_ICorProfilerInfo12 = {0x27B24CCD, 0x1CB1, 0x47C5, {0x96, 0xEE, 0x98, 0x19, 0x0D, 0xC3, 0x09, 0x59}};
const GUID IID_IMetaDataImport2 = {0xFCE5EFA0, 0x8BBA, 0x4F8E, {0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66}};

enum {
    INFO_SET_EVENT_MASK = 16,
    INFO_GET_TOKEN_AND_METADATA = 19,
    INFO_DO_STACK_SNAPSHOT = 36,
    INFO_GET_RUNTIME_INFORMATION = 67,
    INFO_ENUM_THREADS = 71,
    INFO_SUSPEND_RUNTIME = 97,
    INFO_RESUME_RUNTIME = 98,
};
enum { ENUM_NEXT = 7 };
enum { MD_GET_TYPE_DEF_PROPS = 12, MD_GET_METHOD_PROPS = 30 };
enum { CB_JIT_COMPILATION_FINISHED = 24, CB_THREAD_NAME_CHANGED = 72 };
constexpr uint32_t ENABLE_STACK_SNAPSHOT = 0x10000000u;
constexpr uint32_t MONITOR_JIT_COMPILATION = 0x20u;
constexpr uint32_t MONITOR_THREADS = 0x200u;

template <typename F> F slot(Object *o, int index) { return reinterpret_cast<F>(o->vtbl[index]); }

class Sampler {
public:
    explicit Sampler(Object *info) : info_(info) {}

    void start() { thread_ = std::thread([this] { run(); }); }

    void stop() {
        {
            std::lock_guard<std::mutex> lock(stop_lock_);
            stopping_ = true;
        }
        stop_changed_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    void report() {
        const char *path = std::getenv("CXX_SAMPLER_OUT");
        if (!path || leaks_enumerators) return;
        FILE *out = std::fopen(path, "a");
        if (!out) return;
        std::fprintf(out, "samples %lu\n", static_cast<unsigned long>(samples_.load()));
        std::shared_lock<std::shared_mutex> lock(names_lock_);
        static const std::regex kept("^App(\\.[A-Za-z]+)*::[A-Za-z]+$");
        for (const auto &name : seen_) {
            if (std::regex_match(name, kept)) std::fprintf(out, "frame %s\n", name.c_str());
        }
        for (const auto &name : thread_names_) std::fprintf(out, "thread %s\n", name.c_str());
        std::fclose(out);
    }

    // The runtime has compiled managed code: there is something to sample.
    void jitted() { jitted_.store(true); }

    void thread_named(const WCHAR *name, uint32_t len) {
        std::string text;
        for (uint32_t i = 0; name && i < len; i++) text.push_back(static_cast<char>(name[i]));
        std::unique_lock<std::shared_mutex> lock(names_lock_);
        thread_names_.insert(text);
    }

private:
    void run() {
        while (true) {
            {
                std::unique_lock<std::mutex> lock(stop_lock_);
                if (stop_changed_.wait_for(lock, std::chrono::milliseconds(1), [this] { return stopping_; })) return;
            }
            if (jitted_.load()) sample_all();
        }
    }

    void sample_all() {
        using Simple = HRESULT (*)(Object *);
        using EnumThreads = HRESULT (*)(Object *, Object **);
        using Next = HRESULT (*)(Object *, uint32_t, UINT_PTR *, uint32_t *);
        if (slot<Simple>(info_, INFO_SUSPEND_RUNTIME)(info_) != S_OK) return;
        Object *threads = nullptr;
        std::vector<UINT_PTR> ids;
        if (slot<EnumThreads>(info_, INFO_ENUM_THREADS)(info_, &threads) == S_OK) {
            UINT_PTR id = 0;
            uint32_t fetched = 0;
            while (slot<Next>(threads, ENUM_NEXT)(threads, 1, &id, &fetched) == S_OK && fetched == 1) ids.push_back(id);
            if (!leaks_enumerators) slot<Simple>(threads, SLOT_RELEASE)(threads);
        }
        for (UINT_PTR id : ids) walk(id);
        slot<Simple>(info_, INFO_RESUME_RUNTIME)(info_);
        // Named after the runtime has resumed: metadata calls need no suspension.
        std::vector<UINT_PTR> functions;
        functions.swap(pending_);
        for (UINT_PTR f : functions) name(f);
    }

    static HRESULT on_frame(UINT_PTR function, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *data) {
        auto *self = static_cast<Sampler *>(data);
        if (function != 0 && self->pending_.size() < self->pending_.capacity()) self->pending_.push_back(function);
        return S_OK;
    }

    void walk(UINT_PTR thread) {
        using Snapshot = HRESULT (*)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
        // The buffer is reserved before the walk: nothing allocates while threads are stopped.
        pending_.reserve(4096);
        if (slot<Snapshot>(info_, INFO_DO_STACK_SNAPSHOT)(info_, thread, reinterpret_cast<void *>(&on_frame), 0, this,
                                                          nullptr, 0) == S_OK)
            samples_++;
    }

    void name(UINT_PTR function) {
        {
            std::shared_lock<std::shared_mutex> lock(names_lock_);
            if (names_.count(function)) return;
        }
        using TokenAndMetadata = HRESULT (*)(Object *, UINT_PTR, const GUID *, Object **, uint32_t *);
        using MethodProps = HRESULT (*)(Object *, uint32_t, uint32_t *, WCHAR *, uint32_t, uint32_t *, uint32_t *,
                                        const uint8_t **, uint32_t *, uint32_t *, uint32_t *);
        using TypeDefProps = HRESULT (*)(Object *, uint32_t, WCHAR *, uint32_t, uint32_t *, uint32_t *, uint32_t *);
        Object *import = nullptr;
        uint32_t token = 0, type = 0, len = 0;
        WCHAR method[256], type_name[256];
        std::string text = "?";
        if (slot<TokenAndMetadata>(info_, INFO_GET_TOKEN_AND_METADATA)(info_, function, &IID_IMetaDataImport2, &import,
                                                                      &token) == S_OK) {
            if (slot<MethodProps>(import, MD_GET_METHOD_PROPS)(import, token, &type, method, 256, &len, nullptr, nullptr,
                                                               nullptr, nullptr, nullptr) == S_OK &&
                slot<TypeDefProps>(import, MD_GET_TYPE_DEF_PROPS)(import, type, type_name, 256, &len, nullptr,
                                                                  nullptr) == S_OK)
                text = narrow(type_name) + "::" + narrow(method);
            slot<HRESULT (*)(Object *)>(import, SLOT_RELEASE)(import);
        }
        std::unique_lock<std::shared_mutex> lock(names_lock_);
        names_[function] = text;
        seen_.insert(text);
    }

    static std::string narrow(const WCHAR *text) {
        std::string out;
        for (; *text; ++text) out.push_back(static_cast<char>(*text));
        return out;
    }

    Object *info_;
    std::thread thread_;
    std::mutex stop_lock_;
    std::condition_variable stop_changed_;
    bool stopping_ = false;
    std::atomic<unsigned long> samples_{0};
    std::atomic<bool> jitted_{false};
    std::set<std::string> thread_names_;
    std::vector<UINT_PTR> pending_;
    std::shared_mutex names_lock_;
    std::map<UINT_PTR, std::string> names_;
    std::set<std::string> seen_;
};

Object *info12;
Sampler *sampler;
std::once_flag started;

// Samples only on a runtime it knows: CoreCLR, version 4 (what Core 3.x reports) or later.
bool known_runtime(Object *info) {
    using RuntimeInformation = HRESULT (*)(Object *, uint16_t *, uint32_t *, uint16_t *, uint16_t *, uint16_t *,
                                           uint16_t *, uint32_t, uint32_t *, WCHAR *);
    uint32_t type = 0;
    uint16_t major = 0;
    return slot<RuntimeInformation>(info, INFO_GET_RUNTIME_INFORMATION)(info, nullptr, &type, &major, nullptr, nullptr,
                                                                        nullptr, 0, nullptr, nullptr) == S_OK &&
           type == 2 && major >= 4;
}

HRESULT initialize(Object *, Object *unknown) {
    using QueryInterface = HRESULT (*)(Object *, const GUID *, void **);
    using SetEventMask = HRESULT (*)(Object *, uint32_t);
    if (slot<QueryInterface>(unknown, SLOT_QI)(unknown, &IID_ICorProfilerInfo12, reinterpret_cast<void **>(&info12)) != S_OK)
        return E_NOINTERFACE;
    if (!known_runtime(info12)) return static_cast<HRESULT>(0x80004005);
    HRESULT hr = slot<SetEventMask>(info12, INFO_SET_EVENT_MASK)(
        info12, ENABLE_STACK_SNAPSHOT | MONITOR_JIT_COMPILATION | MONITOR_THREADS);
    if (hr != S_OK) return hr;
    std::call_once(started, [] {
        sampler = new Sampler(info12);
        sampler->start();
    });
    return S_OK;
}

HRESULT jit_compilation_finished(Object *, UINT_PTR, HRESULT, int32_t) {
    if (sampler) sampler->jitted();
    return S_OK;
}

HRESULT thread_name_changed(Object *, UINT_PTR, uint32_t len, WCHAR *name) {
    if (sampler) sampler->thread_named(name, len);
    return S_OK;
}

HRESULT shutdown(Object *) {
    if (sampler) {
        sampler->stop();
        sampler->report();
    }
    return S_OK;
}

}  // namespace

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = reinterpret_cast<void *>(&initialize);
    slots[CB_SHUTDOWN] = reinterpret_cast<void *>(&shutdown);
    slots[CB_JIT_COMPILATION_FINISHED] = reinterpret_cast<void *>(&jit_compilation_finished);
    slots[CB_THREAD_NAME_CHANGED] = reinterpret_cast<void *>(&thread_name_changed);
}

extern "C" HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    leaks_enumerators = same(clsid, &CLSID_CXX_SAMPLER_LEAKING);
    if (!same(clsid, &CLSID_CXX_SAMPLER) && !leaks_enumerators) {
        *out = nullptr;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}
