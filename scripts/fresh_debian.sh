#!/usr/bin/env bash
# The README's promise, checked as a new user would find it: a minimal Debian 12 made with
# `debootstrap --variant=minbase bookworm` in a chroot (/proc, /sys and /dev mounted, and
# unmounted again whatever happens), only git, make and python3 installed there, a clone of
# this repository's HEAD, then, as root inside:
#   1. `make setup` interrupted (Ctrl-C to its process group) while apt-get unpacks packages,
#   2. `make setup` interrupted while `python3 -m venv` makes .venv,
#   3. `make setup` again, which must finish (finishing dpkg's work, making .venv again),
#   4. `make demo`, 5. `make test` (with CI=true: a test whose tool is missing fails).
# usage (root): scripts/fresh_debian.sh [--keep]   (--keep leaves the chroot for a look)
# Logs go to stdout; about 20-30 min on a 2-core machine. .ci/run runs it after `make test`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
keep=0
[ "${1:-}" = --keep ] && keep=1
[ "$(id -u)" -eq 0 ] || { echo "fresh_debian: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_debian: no debootstrap (make setup installs it)" >&2; exit 2; }

work=$(mktemp -d /var/tmp/hakmem-fresh-debian.XXXXXX)
root=$work/root
lab=/root/lab
t0=$(date +%s)

say() { printf '\n== fresh_debian %s (%ss): %s\n' "$(date -u +%H:%M:%S)" "$(($(date +%s) - t0))" "$*"; }

chroot_pids() {  # processes whose root is the chroot (started by this script, inside it)
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
    done
    return 0
}

cleanup() {
    local status=$? pids
    set +e
    pids=$(chroot_pids)
    [ -n "$pids" ] && { kill -TERM $pids; sleep 2; pids=$(chroot_pids); [ -n "$pids" ] && kill -KILL $pids; }
    for m in dev sys proc; do
        mountpoint -q "$root/$m" && { umount -R "$root/$m" || umount -R -l "$root/$m"; }
    done
    if grep -q " $root/" /proc/mounts; then
        echo "fresh_debian: still mounted under $root, not deleting $work:" >&2
        grep " $root/" /proc/mounts >&2
    elif [ "$keep" = 1 ]; then
        echo "fresh_debian: chroot kept in $root"
    else
        rm -rf "$work"
    fi
    say "done, exit $status"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the machine's Debian mirror (first URI of its apt sources)
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
mirror=${mirror:-http://deb.debian.org/debian}

say "debootstrap --variant=minbase bookworm from $mirror into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; echo "fresh_debian: debootstrap failed" >&2; exit 1; }

# this machine's network set-up, as the admin of a new machine would have it: name server,
# apt sources and settings, the CA certificates its TLS goes through
cp /etc/resolv.conf "$root/etc/resolv.conf"
rm -f "$root/etc/apt/sources.list"
cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/" 2>/dev/null ||
    cp /etc/apt/sources.list "$root/etc/apt/sources.list"
for f in /etc/apt/apt.conf.d/*; do
    dpkg -S "$f" >/dev/null 2>&1 || cp "$f" "$root/etc/apt/apt.conf.d/"  # local settings only
done
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
# no service starts inside a chroot (the usual policy-rc.d)
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"

mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"

# a clean environment inside: what a root login has, CI=true (a test whose tool is missing
# fails), and the machine's pip settings. Two things may be missing there, and only those
# tests may skip: actionlint (Debian 12 has no Go 1.21+ to build it; the host's make test runs
# it) and the public suite mimalloc-bench (a checkout the user points the lab at, not part
# of the lab).
envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
      TERM=dumb DEBIAN_FRONTEND=noninteractive CI=true
      "HAKBENCH_MISSING_OK=actionlint mimalloc-bench")
while IFS= read -r v; do envs+=("$v"); done < <(env | grep '^PIP_' | grep -v '^PIP_FIND_LINKS=' || true)
inside() { chroot "$root" /usr/bin/env -i "${envs[@]}" bash -c "$1"; }

say "apt-get install git make python3 (nothing else)"
inside 'apt-get update -q >/dev/null && apt-get install -y -q git make python3 >/dev/null'

say "clone of $(git -C "$repo" rev-parse --short HEAD)"
git -C "$repo" bundle create "$root/tmp/lab.bundle" HEAD >/dev/null 2>&1
inside "git -c advice.detachedHead=false clone -q /tmp/lab.bundle $lab && git -C $lab log --oneline -1"

interrupt_setup() {  # interrupt_setup WHAT TEST: make setup, Ctrl-C at the first moment TEST holds
    local what=$1 test=$2 pid deadline=$((SECONDS + 1800))
    say "make setup, interrupted $what"
    set -m  # own process group, SIGINT not ignored: as Ctrl-C in a terminal
    chroot "$root" /usr/bin/env -i "${envs[@]}" bash -c "cd $lab && exec make setup" &
    pid=$!
    set +m
    until eval "$test"; do
        kill -0 "$pid" 2>/dev/null || { echo "fresh_debian: make setup ended before it could be interrupted $what" >&2; exit 1; }
        [ $SECONDS -lt $deadline ] || { echo "fresh_debian: never reached the point to interrupt" >&2; exit 1; }
        sleep 0.2
    done
    kill -INT -- "-$pid"
    if wait "$pid"; then echo "fresh_debian: make setup finished despite the interrupt" >&2; exit 1; fi
    echo "(make setup interrupted $what, as meant)"
}

unpacking() {  # dpkg unpacking packages inside the chroot
    local p
    for p in $(chroot_pids); do
        tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -Eq '^(/usr/bin/)?dpkg .*--unpack' && return 0
    done
    return 1
}

interrupt_setup "while dpkg unpacks" unpacking
interrupt_setup "while python3 -m venv makes .venv" "[ -e $root$lab/.venv/pyvenv.cfg ]"

say "make setup after the interrupted ones"
inside "cd $lab && make setup" 2>&1 | tee "$work/setup.log"
inside "cd $lab && scripts/setup.sh check-venv"
grep -q 'making it again' "$work/setup.log" ||
    { echo "fresh_debian: the second make setup did not rebuild the half-made .venv" >&2; exit 1; }

say "make demo"
inside "cd $lab && make demo"

say "make test"
inside "cd $lab && make test"
say "make demo and make test passed on a fresh Debian 12"
