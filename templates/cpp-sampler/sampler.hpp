// The team's sampler: the code a production profiler ships. It walks every managed thread
// the Unix way (SuspendRuntime, EnumThreads, DoStackSnapshot of each, ResumeRuntime) on a
// std::thread of its own, and keeps the managed frames of each sample. It sees the runtime
// only through the ICorProfilerInfo* it is given, so a test hands it simclr's.
#ifndef TEAM_SAMPLER_HPP
#define TEAM_SAMPLER_HPP

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace team {

using HRESULT = int32_t;
using UINT_PTR = uintptr_t;

// The managed frames (FunctionIDs, leaf first) DoStackSnapshot reports for `thread` (0: the
// calling thread), into `functions` (cleared first; its capacity is not exceeded, so a walk
// of a stopped thread allocates nothing). Returns DoStackSnapshot's HRESULT.
HRESULT walk(void *info, UINT_PTR thread, std::vector<UINT_PTR> &functions);

class Sampler {
public:
    // A sampler over `info` (an ICorProfilerInfo2* or later).
    explicit Sampler(void *info);
    ~Sampler();

    // One round: every managed thread walked under one runtime suspension. Returns the
    // number of threads walked (0 when the runtime could not be suspended).
    int sample_round();

    // Samples every `period` on a thread of its own, until stop().
    void start(std::chrono::microseconds period);
    void stop();

    // Samples taken so far, and the frames of the last one.
    uint64_t samples() const { return samples_.load(); }
    std::vector<UINT_PTR> last_sample();

private:
    void *info_;
    std::atomic<uint64_t> samples_{0};
    std::vector<UINT_PTR> threads_;
    std::vector<UINT_PTR> frames_;
    std::mutex last_lock_;
    std::vector<UINT_PTR> last_;
    std::mutex stop_lock_;
    std::condition_variable stop_changed_;
    bool stopping_ = false;
    std::thread thread_;
};

} // namespace team

#endif
