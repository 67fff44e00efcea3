#!/usr/bin/env bash
# The Windows lane: the real Windows x64 CoreCLR 3.1.23 run under Wine 10, with the lane's
# profiler built for Windows (conformance/windows/confprof.c, mingw-w64), on the lane's C#
# programs; every case is compared with the simulator answering as Windows
# (`simclr conform --platform windows`), and every log is recorded into a scenario that must
# reproduce it (`simclr record`).
#
# Installs what it needs and caches it under the target folder (windows/): Debian's
# debootstrap, mingw-w64 and mono-mcs on the host (apt), a Debian 13 root with Wine 10 in it
# (Debian 12's Wine 8 cannot stand for Windows here: its GetThreadContext never reports
# CONTEXT_EXCEPTION_REPORTING, so the runtime refuses every cross-thread walk of managed code),
# and the runtime from PyPI (the win_amd64 wheel of dotnetcore2==3.1.23). Nothing on the host
# changes but those apt packages: Wine runs in the root through a private mount namespace.
# Needs root (debootstrap, chroot). Prints "windows: N passed, M failed" and the recorded line;
# exits non-zero on any failure.
set -euo pipefail
source "$(dirname "$0")/lane.sh"
work="$target/windows"
chroot_dir="$work/root"
mkdir -p "$work"

# 1. Host tools: debootstrap, the mingw-w64 C compiler, the C# compiler.
need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need+=(gcc-mingw-w64-x86-64)
command -v mcs >/dev/null 2>&1 || need+=(mono-mcs)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (Debian)" >&2
  $sudo_cmd apt-get update -qq >/dev/null || true
  apt_install "${need[@]}"
fi

# 2. The Debian 13 root with Wine 10 (about 1.5 GB, a few minutes, once).
# in_root CMD…: runs CMD in the root, in a private mount namespace with /proc, /dev, /sys and
# the repository and the lane's folder bound at the same paths.
in_root() {
  $sudo_cmd unshare --mount --fork bash -c '
    r=$1 repo=$2 lane=$3; shift 3
    mount --bind /proc "$r/proc"; mount --rbind /dev "$r/dev"; mount --bind /sys "$r/sys"
    for d in "$repo" "$lane"; do mkdir -p "$r$d"; mount --bind "$d" "$r$d"; done
    exec chroot "$r" "$@"' in_root "$chroot_dir" "$root" "$work" "$@"
}
if [ ! -x "$chroot_dir/usr/lib/wine/wine64" ]; then
  echo "== building a Debian 13 root with Wine 10 in $chroot_dir" >&2
  rm -rf "${chroot_dir:?}"
  retry $sudo_cmd debootstrap --variant=minbase trixie "$chroot_dir" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1
  $sudo_cmd cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
  retry in_root env DEBIAN_FRONTEND=noninteractive bash -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends wine64 wine' >"$work/wine-install.log" 2>&1 \
    || { echo "conformance/windows.sh: installing Wine 10 failed; see $work/wine-install.log" >&2; exit 1; }
fi

# 3. The Windows runtime: the win_amd64 wheel of dotnetcore2==3.1.23 (PyPI), unpacked.
dotnet_dir="$work/runtime/dotnetcore2/bin"
if [ ! -f "$dotnet_dir/shared/Microsoft.NETCore.App/3.1.23/coreclr.dll" ]; then
  echo "== fetching the Windows CoreCLR 3.1.23 (PyPI dotnetcore2, win_amd64)" >&2
  mkdir -p "$work/download"
  retry python3 -m pip download --quiet --disable-pip-version-check --no-deps --platform win_amd64 \
    --only-binary=:all: dotnetcore2==3.1.23 -d "$work/download"
  rm -rf "${work:?}/runtime"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$work/download/dotnetcore2-3.1.23-py3-none-win_amd64.whl" "$work/runtime"
fi

# 4. The profiler, the comparison tool and the programs.
echo "== building"
bin="$work/bin"
rm -rf "${bin:?}"
mkdir -p "$bin"
(cd "$root" && cargo build --quiet --release -p simclr)
x86_64-w64-mingw32-gcc -shared -O1 -Wall -Wextra -Werror -static-libgcc -o "$bin/confprof.dll" \
  "$root/conformance/windows/confprof.c"
mcs -optimize+ -target:library -out:"$bin/Plugin.dll" "$root/conformance/programs/Plugin.cs" >/dev/null
programs=(Sync Cross Crash Runtime Windows)
for program in "${programs[@]}"; do
  source="$root/conformance/programs/$program.cs"
  [ -f "$source" ] || source="$root/conformance/windows/$program.cs"
  # The cross-thread targets Runtime.cs and Windows.cs share.
  shared=()
  case "$program" in Runtime | Windows) shared=("$root/conformance/programs/Targets.cs") ;; esac
  mcs -optimize+ -nowarn:414,649 -out:"$bin/$program.exe" "$root/conformance/programs/Common.cs" "${shared[@]}" "$source" >/dev/null
  printf '{ "runtimeOptions": { "tfm": "netcoreapp3.1", "framework": { "name": "Microsoft.NETCore.App", "version": "3.1.23" } } }\n' \
    >"$bin/$program.runtimeconfig.json"
done

# 5. The runs, one process each, in the root under Wine 10. The exit is "ok", "crash" (the
#    process ended by an unhandled exception or a signal) or "hang" (killed when its time ran out).
# Wine's settings: the lane's prefix, no debug output, no Mono or Gecko installer.
wine_env=(WINEPREFIX="$work/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=")
if [ ! -f "$work/prefix/system.reg" ]; then
  echo "== creating the Wine prefix" >&2
  in_root env "${wine_env[@]}" /usr/lib/wine/wine64 wineboot -i >"$work/wineboot.log" 2>&1
fi
results="$work/results"
rm -rf "${results:?}"
mkdir -p "$results"
winpath() { printf 'Z:%s' "${1//\//\\}"; }
run() {
  local name="$1" seconds="$2" extra_env="$3"; shift 3
  rm -f "$results/$name.rc"
  # The time limit and the exit status are taken inside the root (wait's status of the
  # namespace's process is not the program's).
  in_root env -C "$bin" "${wine_env[@]}" DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 CORECLR_ENABLE_PROFILING=1 \
      CORECLR_PROFILER='{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}' \
      CORECLR_PROFILER_PATH="$(winpath "$bin/confprof.dll")" CONF_LOG="$(winpath "$results/$name.jsonl")" RC="$results/$name.rc" $extra_env \
      bash -c 'timeout -s KILL "$@"; echo $? >"$RC"' run "$seconds" /usr/lib/wine/wine64 \
      "$(winpath "$dotnet_dir/dotnet.exe")" "$@" >"$results/$name.out" 2>&1 || true
  # Whatever the program left running (a hung process's wineserver) goes with it.
  in_root env "${wine_env[@]}" /usr/lib/wine/wineserver -k >/dev/null 2>&1 || true
  touch "$results/$name.jsonl"
  local rc
  rc="$(cat "$results/$name.rc" 2>/dev/null || echo none)"
  case "$rc" in
    0) echo ok ;;
    137) echo hang ;;
    *) echo crash ;;
  esac >"$results/$name.exit"
  echo "   $name: $(cat "$results/$name.exit")"
}
echo "== running on the Windows CoreCLR 3.1.23 under Wine 10"
run_shared_programs 3
run windows 240 "" Windows.exe
run windows-destroyed 60 "" Windows.exe destroyed

# 6. The comparison: the Linux lane's scenarios answering on Windows (`--platform windows`),
#    then the Windows lane's own; the answers Wine gives where Windows would not are listed,
#    with why, in conformance/windows/wine.toml.
echo "== comparing the Windows CoreCLR 3.1.23 with the simulator"
status=0
known="$root/conformance/windows/wine.toml"
simclr="$target/release/simclr"
shared="$work/shared-scenarios"
own="$work/own-scenarios"
rm -rf "${shared:?}" "${own:?}"
mkdir -p "$shared" "$own"
cp "$root"/conformance/scenarios/*.toml "$shared/"
cp "$root"/conformance/windows/scenarios/*.toml "$own/"
"$simclr" conform "$shared" "$results" --runtime 3.1 --platform windows --known "$known" >"$work/shared.txt" || status=1
"$simclr" conform "$own" "$results" --runtime 3.1 --known "$known" >"$work/own.txt" || status=1
cat "$work/shared.txt" "$work/own.txt" | grep -v -e ' ok$' -e '^case ' -e ' passed' || true
summary() { tail -n 1 "$1" | sed -E 's/^([0-9]+) passed.* ([0-9]+) failed$/\1 \2/'; }
read -r shared_passed shared_failed < <(summary "$work/shared.txt")
read -r own_passed own_failed < <(summary "$work/own.txt")
known_count=$(cat "$work/shared.txt" "$work/own.txt" | grep -c ' ok, a known difference' || true)
echo "windows: $((shared_passed + own_passed)) passed, $((shared_failed + own_failed)) failed ($known_count as a difference Wine makes, listed in conformance/windows/wine.toml)"

# 7. Recording: each log turned into a Windows scenario by `simclr record`, which must
#    reproduce every recorded answer.
echo "== recording every log into a scenario and running it"
rm -rf "${work:?}/recorded"
"$simclr" record "$results" -o "$work/recorded" --runtime 3.1 --platform windows >"$work/recorded.txt" || status=1
grep -v -e ' ok$' -e '^case ' "$work/recorded.txt"
exit "$status"
