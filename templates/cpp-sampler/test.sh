#!/usr/bin/env bash
# The C++ starting point in one command: builds simclr's C ABI (libsimclr_host.a), then this
# sampler and its GoogleTest suite with CMake against it, and runs the tests. Needs cmake, a
# C++17 compiler, pkg-config and GoogleTest (Debian: cmake g++ pkg-config libgtest-dev).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/target/cpp-sampler}
cargo build --release --quiet -p simclr-host --manifest-path "$root/Cargo.toml"
export PKG_CONFIG_PATH="$root/include${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cmake -S "$here" -B "$build" -DSIMCLR_ROOT="$root" > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j 2
ctest --test-dir "$build" --output-on-failure
