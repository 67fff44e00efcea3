// A GoogleTest suite that explores a hosted library through the C ABI, as a C++ team's own
// tests do: the library calls std::terminate in some runs, and the test process survives it
// (each run is in a worker process of its own); the report counts the crash and names the
// command that replays it, which reproduces it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "simclr.h"

namespace {

// The value of the first `"key": "…"` string after `from` in the report.
std::string string_after(const std::string &report, const std::string &key, size_t from) {
    size_t at = report.find("\"" + key + "\": \"", from);
    if (at == std::string::npos) return "";
    at += key.size() + 5;
    return report.substr(at, report.find('"', at) - at);
}

std::string run(const std::string &command) {
    std::string out;
    FILE *pipe = popen((command + " 2>&1").c_str(), "r");
    if (!pipe) return out;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    pclose(pipe);
    return out;
}

TEST(Explore, ALibraryThatTerminatesIsAnOutcomeOfItsRunNotTheEndOfTheTest) {
    char *error = nullptr;
    char *json = simclr_explore_profiler(PROCESS_FILE, LIBRARY, "{2c0f6a1e-7b3d-4e21-8f5a-112233448c01}", 10, 1,
                                         &error);
    ASSERT_NE(nullptr, json) << (error ? error : "");
    std::string report(json);
    simclr_string_free(json);
    // This process is still here, and the report counts the run that terminated.
    EXPECT_NE(std::string::npos, report.find("\"profiler_crash\": 1")) << report;
    EXPECT_NE(std::string::npos, report.find("terminate called without an active exception")) << report;
    size_t failure = report.find("\"failures\"");
    ASSERT_NE(std::string::npos, failure) << report;
    std::string replay = string_after(report, "replay", report.find("\"profiler_crash\": {", failure));
    ASSERT_EQ(0u, replay.rfind("simclr replay ", 0)) << report;
    // The command reproduces it.
    std::string out = run(SIMCLR + replay.substr(6));
    EXPECT_NE(std::string::npos, out.find("outcome: profiler_crash")) << replay << "\n" << out;
}

}  // namespace
