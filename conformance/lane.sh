# What the real-runtime lanes (run.sh, windows.sh) share, sourced by both: the repository's
# root, cargo's output folder, a retry for package registries, and Debian package installs.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Cargo's output folder: CARGO_TARGET_DIR when it is set (a relative one is relative to the
# workspace root, where cargo runs), else target/.
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac

# Runs a command up to three times (package registries can fail transiently).
retry() {
  "$@" || { sleep 3; "$@"; } || { sleep 10; "$@"; }
}

# sudo, unless the lane already runs as root.
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

# Installs Debian packages (apt), without their recommendations.
apt_install() {
  retry env DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Runs the programs both lanes run, each with the lane's `run NAME SECONDS ENV PROGRAM ARGS…`
# (one process, killed when its time is out); the time limits are multiplied by $1 (a
# runtime under Wine starts slower).
run_shared_programs() {
  local k="$1"
  run sync $((60 * k)) "" Sync.exe
  run noflag $((60 * k)) "CONF_NO_SNAPSHOT=1" Sync.exe noflag
  run cross $((60 * k)) "" Cross.exe
  run runtime $((60 * k)) "" Runtime.exe
  run crash-nullcb $((20 * k)) "" Crash.exe nullcb
  run crash-nullcb-x $((20 * k)) "" Crash.exe nullcb_x
  run crash-bogus $((20 * k)) "" Crash.exe bogus
  run crash-double $((5 * k)) "" Crash.exe double
}
