// The team's sampler tested through simclr's C ABI (simclr.h) with GoogleTest: its walk and
// one sampling round against a simulated runtime, then the whole profiler library explored
// in a simulated process under 200 schedules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sampler.hpp"
#include "simclr.h"

namespace {

// Two managed threads: `main` in App::Work called by App::Main from native code, `worker`
// in App::Main.
const char *SCENARIO = R"(platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT"]
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Work" }, { fn = "App::Main" }, { fn = "host!main" }]
[[threads]]
name = "worker"
frames = [{ fn = "App::Main" }, { fn = "host!main" }]
)";

struct Runtime {
    simclr_runtime *rt = nullptr;
    void *info = nullptr;
    Runtime() {
        char *error = nullptr;
        rt = simclr_runtime_from_string("sampler_test", SCENARIO, &error);
        if (error) {
            ADD_FAILURE() << error;
            simclr_string_free(error);
        }
        info = simclr_profiler_info(rt);
    }
    ~Runtime() { simclr_runtime_free(rt); }
};

struct OwnWalk {
    void *info;
    std::vector<team::UINT_PTR> functions;
    team::HRESULT hr = -1;
};

TEST(Walk, ReportsTheManagedFramesOfItsOwnThread) {
    Runtime runtime;
    OwnWalk w{runtime.info, {}};
    w.functions.reserve(16);
    ASSERT_EQ(0, simclr_on_thread(runtime.rt, "main", "pinvoke", [](void *data) {
        auto *w = static_cast<OwnWalk *>(data);
        w->hr = team::walk(w->info, 0, w->functions);
    }, &w));
    EXPECT_EQ(0, w.hr);
    EXPECT_EQ(2u, w.functions.size()) << "App::Work and App::Main";
}

TEST(Sampler, ARoundWalksEveryManagedThreadUnderSuspendRuntime) {
    Runtime runtime;
    // This test's own thread never ran managed code: it may suspend the runtime.
    team::Sampler sampler(runtime.info);
    EXPECT_EQ(2, sampler.sample_round());
    EXPECT_EQ(2u, sampler.samples());
    EXPECT_FALSE(sampler.last_sample().empty());
}

// Each `"replay": "…"` command line of the report: how to see a failing run again.
std::vector<std::string> replay_commands(const std::string &report) {
    std::vector<std::string> commands;
    const std::string key = "\"replay\": \"";
    for (size_t at = report.find(key); at != std::string::npos; at = report.find(key, at)) {
        at += key.size();
        commands.push_back(report.substr(at, report.find('"', at) - at));
    }
    return commands;
}

TEST(Explore, TheProfilerLibrarySurvives200Schedules) {
    char *error = nullptr;
    char *json = simclr_explore_profiler(PROCESS_FILE, SAMPLER_LIBRARY, "{7E3A9C51-0D2B-4F68-9A14-C0FFEE000001}", 200,
                                         1, &error);
    ASSERT_NE(nullptr, json) << (error ? error : "");
    std::string report(json);
    simclr_string_free(json);
    // Every run ok: no failing outcome. Otherwise the report says what failed and how to
    // replay it (the report is printed as it is, readable; the commands after it).
    std::string how;
    for (const std::string &command : replay_commands(report)) how += "\n  replay: " + command;
    EXPECT_NE(std::string::npos, report.find("\"failures\": {}")) << report << how;
    EXPECT_NE(std::string::npos, report.find("\"ok\": 200")) << report << how;
}

} // namespace
