#!/usr/bin/env bash
# make setup: system packages (apt-get when root, else print the exact line) and the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
PKGS=(gcc make python3-venv linux-perf valgrind strace clang-format git perl sqlite3
      g++ libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 libtbbmalloc2 time
      python3 lua5.4 redis-server redis-tools ghostscript z3)
# (the second line: the programs of the `apps` command workloads, profiles/workloads.toml)

system() {
  local missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || true
    apt-get install -y -qq "${missing[@]}" >/dev/null || {
      echo "setup: apt-get install failed for some of: ${missing[*]} — carrying on with what is there" >&2; }
  else
    echo "setup: missing packages; run as root:  apt-get install -y ${missing[*]}" >&2
  fi
}

venv() {
  local py=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
}

case "$what" in
  system) system ;;
  venv) venv ;;
  all) system; venv ;;
esac
