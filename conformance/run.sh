#!/usr/bin/env bash
# The real-runtime lane: runs the conformance call shapes on CoreCLR 3.1.23 with the Rust
# profiler loaded, then compares every case with the simulator (`simclr conform`), and the
# same profiler library hosted inside the simulator with the real runtime.
# Installs what it needs (a Python venv under the target folder with dotnetcore2, mono-mcs
# through apt) and ends with "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Cargo's output folder: CARGO_TARGET_DIR when it is set (a relative one is relative to the
# workspace root, where cargo runs below), else target/.
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
work="$target/conformance"
bin="$work/bin"
results="$work/results"
mkdir -p "$bin" "$results"
rm -rf "${results:?}"/*

# Runs a command up to three times (package registries can fail transiently).
retry() {
  "$@" || { sleep 3; "$@"; } || { sleep 10; "$@"; }
}

# 1. The runtime (PyPI) and the C# compiler (Debian).
if [ ! -x "$work/venv/bin/python" ] || ! "$work/venv/bin/python" -c 'import dotnetcore2' 2>/dev/null; then
  echo "== installing CoreCLR 3.1.23 (PyPI dotnetcore2) into $work/venv"
  python3 -m venv "$work/venv"
  retry "$work/venv/bin/pip" install --quiet --disable-pip-version-check dotnetcore2==3.1.23
fi
dotnet="$("$work/venv/bin/python" -c 'import dotnetcore2, os; print(os.path.join(os.path.dirname(dotnetcore2.__file__), "bin", "dotnet"))')"
if ! command -v mcs >/dev/null 2>&1; then
  echo "== installing mono-mcs (apt)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  retry $sudo_cmd apt-get update -qq
  retry env DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends mono-mcs >/dev/null
fi

# 2. The profiler, the comparison tool and the programs.
echo "== building"
(cd "$root" && cargo build --quiet --release -p conformance-profiler -p simclr)
cp "$target/release/libconfprof.so" "$bin/"
mcs -optimize+ -target:library -out:"$bin/Plugin.dll" "$root/conformance/programs/Plugin.cs" >/dev/null
for program in Sync Cross Crash Runtime; do
  mcs -optimize+ -nowarn:414 -out:"$bin/$program.exe" \
    "$root/conformance/programs/Common.cs" "$root/conformance/programs/$program.cs" >/dev/null
  printf '{ "runtimeOptions": { "tfm": "netcoreapp3.1", "framework": { "name": "Microsoft.NETCore.App", "version": "3.1.23" } } }\n' \
    > "$bin/$program.runtimeconfig.json"
done

# 3. The runs: NAME, seconds allowed, environment, program and arguments. The exit is "ok",
#    "crash" (killed by a signal, e.g. SIGSEGV) or "hang" (killed when the time ran out).
run() {
  local name="$1" seconds="$2" extra_env="$3"; shift 3
  local rc=0
  # Started in the background and waited for with wait's stderr discarded, so that bash does
  # not print its report of the expected crashes ("Segmentation fault").
  (cd "$bin" && exec env DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 CORECLR_ENABLE_PROFILING=1 \
      CORECLR_PROFILER='{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}' CORECLR_PROFILER_PATH="$bin/libconfprof.so" \
      CONF_LOG="$results/$name.jsonl" $extra_env \
      timeout -s KILL "$seconds" "$dotnet" "$@" >"$results/$name.out" 2>&1) &
  wait $! 2>/dev/null || rc=$?
  touch "$results/$name.jsonl"
  case "$rc" in
    0) echo ok ;;
    137) echo hang ;;
    *) if [ "$rc" -gt 128 ]; then echo crash; else echo "failed($rc)"; fi ;;
  esac >"$results/$name.exit"
  echo "   $name: $(cat "$results/$name.exit")"
}
echo "== running on CoreCLR 3.1.23"
run sync 60 "" Sync.exe
run noflag 60 "CONF_NO_SNAPSHOT=1" Sync.exe noflag
run cross 60 "" Cross.exe
run runtime 60 "" Runtime.exe
run crash-nullcb 20 "" Crash.exe nullcb
run crash-nullcb-x 20 "" Crash.exe nullcb_x
run crash-bogus 20 "" Crash.exe bogus
run crash-double 5 "" Crash.exe double

# 4. The comparison: the simulator running each scenario, and the simulator hosting the same
#    libconfprof.so, driven by each scenario's [host] steps ("hosted: N passed, M failed").
echo "== comparing with the simulator"
status=0
"$target/release/simclr" conform "$root/conformance/scenarios" "$results" --hosted "$bin/libconfprof.so" || status=$?

# 5. Recording: each log turned into a scenario by `simclr record`, which must reproduce every
#    recorded answer ("recorded: N passed, M failed").
echo "== recording every log into a scenario and running it"
rm -rf "${work:?}/recorded"
"$target/release/simclr" record "$results" -o "$work/recorded" || status=$?
exit "$status"
