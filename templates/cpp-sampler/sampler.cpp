// The team's sampler (sampler.hpp).
#include "sampler.hpp"

#include <chrono>

namespace team {
namespace {

// ICorProfilerInfo vtable slots, and ICorProfilerThreadEnum's.
enum {
    SLOT_RELEASE = 2,
    INFO_DO_STACK_SNAPSHOT = 36,
    INFO_ENUM_THREADS = 71,
    INFO_SUSPEND_RUNTIME = 97,
    INFO_RESUME_RUNTIME = 98,
    ENUM_NEXT = 7,
};
constexpr HRESULT S_OK = 0;

template <typename F> F slot(void *object, int index) {
    return reinterpret_cast<F>((*static_cast<void ***>(object))[index]);
}

HRESULT on_frame(UINT_PTR function, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *data) {
    auto *functions = static_cast<std::vector<UINT_PTR> *>(data);
    if (function != 0 && functions->size() < functions->capacity()) functions->push_back(function);
    return S_OK;
}

} // namespace

HRESULT walk(void *info, UINT_PTR thread, std::vector<UINT_PTR> &functions) {
    using Snapshot = HRESULT (*)(void *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    functions.clear();
    return slot<Snapshot>(info, INFO_DO_STACK_SNAPSHOT)(info, thread, reinterpret_cast<void *>(&on_frame), 0,
                                                        &functions, nullptr, 0);
}

Sampler::Sampler(void *info) : info_(info) {
    // Every buffer is reserved before any thread is stopped.
    threads_.reserve(256);
    frames_.reserve(512);
    last_.reserve(512);
}

Sampler::~Sampler() { stop(); }

int Sampler::sample_round() {
    using Simple = HRESULT (*)(void *);
    using EnumThreads = HRESULT (*)(void *, void **);
    using Next = HRESULT (*)(void *, uint32_t, UINT_PTR *, uint32_t *);
    if (slot<Simple>(info_, INFO_SUSPEND_RUNTIME)(info_) != S_OK) return 0;
    threads_.clear();
    void *list = nullptr;
    if (slot<EnumThreads>(info_, INFO_ENUM_THREADS)(info_, &list) == S_OK) {
        UINT_PTR id = 0;
        uint32_t fetched = 0;
        while (threads_.size() < threads_.capacity() &&
               slot<Next>(list, ENUM_NEXT)(list, 1, &id, &fetched) == S_OK && fetched == 1)
            threads_.push_back(id);
        slot<Simple>(list, SLOT_RELEASE)(list);
    }
    int walked = 0;
    for (UINT_PTR thread : threads_) {
        if (walk(info_, thread, frames_) == S_OK) {
            walked++;
            samples_++;
        }
    }
    slot<Simple>(info_, INFO_RESUME_RUNTIME)(info_);
    // Kept after the runtime resumed: the lock is never taken while threads are stopped.
    std::lock_guard<std::mutex> lock(last_lock_);
    last_.assign(frames_.begin(), frames_.end());
    return walked;
}

void Sampler::start(std::chrono::microseconds period) {
    thread_ = std::thread([this, period] {
        while (true) {
            {
                std::unique_lock<std::mutex> lock(stop_lock_);
                if (stop_changed_.wait_for(lock, period, [this] { return stopping_; })) return;
            }
            sample_round();
        }
    });
}

void Sampler::stop() {
    {
        std::lock_guard<std::mutex> lock(stop_lock_);
        stopping_ = true;
    }
    stop_changed_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::vector<UINT_PTR> Sampler::last_sample() {
    std::lock_guard<std::mutex> lock(last_lock_);
    return last_;
}

} // namespace team
