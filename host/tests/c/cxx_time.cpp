// C++ code that reads the steady clock, sleeps and waits on a condition variable through the
// standard library: these happen partly inside libstdc++, whose clock, sleep and condition
// variable imports are redirected too.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

static std::mutex flag_lock;
static std::condition_variable flag_changed;
static bool flag;

extern "C" long long steady_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

extern "C" void sleep_for_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Waits at most `ms` for the flag; 1 if it was set, 0 on timeout.
extern "C" int wait_for_flag(int ms) {
    std::unique_lock<std::mutex> lock(flag_lock);
    return flag_changed.wait_for(lock, std::chrono::milliseconds(ms), [] { return flag; }) ? 1 : 0;
}

// Waits without a deadline until the flag is set.
extern "C" void wait_flag() {
    std::unique_lock<std::mutex> lock(flag_lock);
    flag_changed.wait(lock, [] { return flag; });
}

extern "C" void set_flag(int value) {
    {
        std::lock_guard<std::mutex> lock(flag_lock);
        flag = value != 0;
    }
    flag_changed.notify_all();
}

// Starts a std::thread (pthread_create inside the shared libstdc++) that sleeps 3 ms and sets a
// value, joins it (pthread_join, also inside libstdc++), and returns the value.
extern "C" int thread_sleeps_and_joins() {
    int seen = 0;
    std::thread t([&seen] {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        seen = 1;
    });
    t.join();
    return seen;
}
