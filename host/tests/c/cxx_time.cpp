// C++ code that reads the steady clock and sleeps through the standard library: both happen
// inside libstdc++, whose clock and sleep imports are redirected too.
#include <chrono>
#include <thread>

extern "C" long long steady_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

extern "C" void sleep_for_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
