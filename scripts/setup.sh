#!/usr/bin/env bash
# make setup: the system packages first (apt-get when root), then the venv, then the tools
# the tests run (actionlint). Nothing half-works: a package apt-get could not install is an
# error naming it; a venv an interrupted or failed run left behind (no python, another
# python, no pip, no hakbench) is found and made again.
#   scripts/setup.sh [all|system|venv|tools|check-venv]
# Environment: PYTHON (python3), VENV (.venv), SETUP_PACKAGES (replaces the package list),
# SETUP_ALLOW_MISSING=1 (go on without the packages a non-root user cannot install).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
ACTIONLINT_VERSION=v1.7.12
PKGS=(gcc make python3-venv linux-perf valgrind strace clang-format git perl sqlite3
      g++ libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 libtbbmalloc2 time
      python3 lua5.4 redis-server redis-tools ghostscript z3
      cmake chromium shellcheck
      debootstrap slurm-wlm munge)
# second line: the programs of the `apps` command workloads (profiles/workloads.toml);
# third: the public suite's build, the dashboard's browser tests, actionlint's check of the
# workflows' shell steps; last: .ci/run's fresh-Debian check (scripts/fresh_debian.sh) and
# its Slurm cluster (make test-slurm)
if [ -n "${SETUP_PACKAGES:-}" ]; then read -r -a PKGS <<<"$SETUP_PACKAGES"; fi

die() {
    echo "setup: $*" >&2
    exit 1
}

missing_packages() {
    local installed
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${PKGS[@]}" 2>/dev/null |
        awk '$4 == "installed" {print $1}' || true)
    local p
    for p in "${PKGS[@]}"; do
        grep -qx "$p" <<<"$installed" || echo "$p"
    done
}

apt_install() {  # apt_install LOG PKG... -> apt-get's status; its output in LOG
    local log=$1
    shift
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$log" 2>&1
}

system() {
    command -v dpkg-query >/dev/null || {
        echo "setup: no dpkg-query (not Debian): install by hand: ${PKGS[*]}" >&2
        return 0
    }
    local missing
    mapfile -t missing < <(missing_packages)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        if [ "${SETUP_ALLOW_MISSING:-}" = 1 ]; then
            echo "setup: going on without ${missing[*]} (SETUP_ALLOW_MISSING=1); the tests that need them skip" >&2
            return 0
        fi
        die "missing system packages: ${missing[*]}
  as root run:  apt-get install -y ${missing[*]}
  (or SETUP_ALLOW_MISSING=1 make setup to go on without them; the tests that need them skip, and fail when CI is set)"
    fi
    echo "setup: installing ${missing[*]}"
    local log
    log=$(mktemp)
    # an earlier run stopped inside dpkg leaves packages half-configured: finish them first
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a >"$log" 2>&1 ||
        { cat "$log" >&2; die "dpkg --configure -a failed (an earlier install was interrupted)"; }
    local lists=/var/lib/apt/lists
    if [ -z "$(find "$lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
        apt-get update -q >"$log" 2>&1 || { cat "$log" >&2; die "apt-get update failed"; }
    fi
    local unknown=() p
    for p in "${missing[@]}"; do
        apt-cache show --no-all-versions "$p" >/dev/null 2>&1 || unknown+=("$p")
    done
    [ ${#unknown[@]} -eq 0 ] ||
        die "apt-get install failed: no package named ${unknown[*]} in this machine's apt sources (updated within a day); nothing installed"
    if ! apt_install "$log" "${missing[@]}"; then
        # stale package lists, or packages an interrupted run left half-installed: update,
        # let apt repair what it can, and try once more
        apt-get update -q >>"$log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get -f install -y -q >>"$log" 2>&1 || true
        if ! apt_install "$log" "${missing[@]}"; then
            tail -n 15 "$log" >&2
            rm -f "$log"
            mapfile -t missing < <(missing_packages)
            die "apt-get install failed; not installed: ${missing[*]}"
        fi
    fi
    rm -f "$log"
    mapfile -t missing < <(missing_packages)
    [ ${#missing[@]} -eq 0 ] || die "apt-get install ended without an error (interrupted?), but these are not installed: ${missing[*]}"
}

pyversion() {  # pyversion PYTHON -> "3.11"
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}

venv_broken() {  # prints why $VENV must be made again (nothing when it need not)
    local want have cfg
    [ -e "$VENV" ] || { echo "there is no $VENV"; return; }
    [ -x "$VENV/bin/python" ] || { echo "$VENV has no bin/python"; return; }
    have=$(pyversion "$VENV/bin/python" 2>/dev/null) || { echo "$VENV/bin/python does not run"; return; }
    want=$(pyversion "$PY") || { echo "$PY does not run"; return; }
    [ "$have" = "$want" ] || { echo "$VENV runs python $have, $PY is $want"; return; }
    cfg=$(sed -n 's/^version *= *\([0-9]*\.[0-9]*\).*/\1/p' "$VENV/pyvenv.cfg" 2>/dev/null || true)
    [ "$cfg" = "$have" ] || { echo "$VENV was made by python ${cfg:-?}, its python is now $have"; return; }
    "$VENV/bin/python" -c "import pip" 2>/dev/null || { echo "$VENV has no pip"; return; }
}

venv_incomplete() {  # prints why hakbench[dev] must be installed into $VENV again
    [ -x "$VENV/bin/hakbench" ] || { echo "$VENV has no hakbench entry point"; return; }
    "$VENV/bin/python" -c 'import hakbench.cli' 2>/dev/null || { echo "hakbench does not import in $VENV"; return; }
    [ "$(cat "$VENV/.setup-stamp" 2>/dev/null)" = "$(stamp)" ] ||
        { echo "$VENV was not installed from this pyproject.toml to the end"; return; }
}

venv_problem() {
    local why
    why=$(venv_broken)
    [ -n "$why" ] || why=$(venv_incomplete)
    echo "$why"
}

stamp() {  # what a finished install of this pyproject.toml writes into $VENV/.setup-stamp
    { pyversion "$PY"; cat pyproject.toml; } | sha256sum | cut -d' ' -f1
}

venv() {
    local why
    pyversion "$PY" >/dev/null || die "$PY does not run (PYTHON=...)"
    why=$(venv_broken)
    if [ -n "$why" ]; then
        echo "setup: $why: making it again"
        rm -rf "$VENV"
        "$PY" -m venv "$VENV" ||
            die "$PY -m venv $VENV failed (is python3-venv installed? make setup installs it as root)"
    fi
    why=$(venv_incomplete)
    [ -z "$why" ] && return 0
    echo "setup: $why: installing hakbench[dev]"
    rm -f "$VENV/.setup-stamp"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]' ||
        die "pip install -e '.[dev]' failed into $VENV"
    stamp >"$VENV/.setup-stamp"
    why=$(venv_problem)
    [ -z "$why" ] || die "$VENV is still not usable after installing: $why"
}

find_go() {  # a go able to build actionlint (1.21+ fetches the toolchain its go.mod needs)
    local go v
    for go in "$(command -v go || true)" /usr/local/go/bin/go; do
        [ -x "$go" ] || continue
        v=$("$go" env GOVERSION 2>/dev/null) || continue
        v=${v#go}
        [ "${v%%.*}" -gt 1 ] || [ "$(echo "$v" | cut -d. -f2)" -ge 21 ] && { echo "$go"; return; }
    done
}

tools() {  # actionlint (workflow lint, tests/test_workflows.py) into $VENV/bin, built with go
    local have go
    have=$("$VENV/bin/actionlint" -version 2>/dev/null | head -1 || true)
    [ "$have" = "$ACTIONLINT_VERSION" ] && return 0
    go=$(find_go)
    if [ -z "$go" ]; then
        echo "setup: note: actionlint not built: it needs Go 1.21 or newer (Debian 12's golang-go is 1.19); tests/test_workflows.py skips, and fails when CI is set" >&2
        return 0
    fi
    echo "setup: building actionlint $ACTIONLINT_VERSION with $go"
    GOBIN="$(realpath "$VENV/bin")" GOFLAGS=-modcacherw "$go" install \
        "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" ||
        die "go install actionlint@$ACTIONLINT_VERSION failed"
}

bytecode() {  # hakbench's own modules compiled (pip compiles the dependencies, not an editable
    # install's source): where PYTHONDONTWRITEBYTECODE is set, as on the lab's VMs, every
    # hakbench process would compile them again (0.50 -> 0.25 s a start); an edited module
    # is compiled afresh by Python as usual
    "$VENV/bin/python" -m compileall -q hakbench >/dev/null || die "compiling hakbench's modules failed"
}

case "$what" in
    system) system ;;
    venv) venv ;;
    tools) tools ;;
    all) system; venv; bytecode; tools ;;
    check-venv)
        why=$(venv_problem)
        [ -z "$why" ] || { echo "$why"; exit 1; }
        ;;
    *) die "unknown step '$what' (all, system, venv, tools, check-venv)" ;;
esac
