#!/bin/bash
# build_costs.sh: what each build costs on the seed workloads, as CSV on stdout
# (results/misuse/build_costs.csv, which the scorecard's misuse section shows beside the probe
# counts):
#
#   allocator/tools/build_costs.sh [HARDENED_MALLOC_SO] > results/misuse/build_costs.csv
#
# Run from the repository root after `make build`. For each allocator (libhakmem's fast and
# secure builds, hardened_malloc when its .so is given, glibc as `system`: the labels of the
# misuse records) and each of four seed workloads
# (profiles/workloads.toml: mixed, tiny_hot, mid_large_mt1, xthread):
#   ir_per_op  callgrind's instruction count under LD_PRELOAD, as (Ir at 3 N - Ir at N) /
#              (ops at 3 N - ops at N), N a tenth of the workload's iterations: start-up and
#              exit cancel out. Empty where the allocator does not run under valgrind
#              (hardened_malloc: "non-ENOMEM mmap failure" at start).
#   peak_rss_kb the harness's own maxrss_kb of a native run at 2x the workload's iterations.
# Instruction counts are exact whatever the machine's load; peak RSS varies by a few pages.
set -euo pipefail
BUILD=${BUILD:-build}
HARDENED=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|program|arguments with @N@ for the iteration count|N (a tenth of the workload's)
workloads=(
    "mixed|bench_random_mixed|--min 16 --max 1024 --ws 400 --iters @N@ --seed 42|100000"
    "tiny_hot|bench_tiny_hot|--size 64 --batch 100 --cycles @N@ --seed 42|1000"
    "mid_large_mt1|bench_mid_large_mt|--threads 1 --iters @N@ --ws 256 --seed 42|20000"
    "xthread|bench_xthread|--pairs 1 --count @N@ --min 16 --max 256 --seed 42|50000"
)
allocators=("hakmem:fast|$BUILD/fast/libhakmem.so" "hakmem:secure|$BUILD/secure/libhakmem.so")
[ -n "$HARDENED" ] && allocators+=("hardened_malloc|$HARDENED")
allocators+=("system|")

field() { sed -n "s/^$1=//p" "$2" | head -1; }

# callgrind LIB PROGRAM ARGS -> "Ir ops", or "" when it does not run
callgrind() {
    local lib=$1 program=$2 args=$3
    if ! LD_PRELOAD=$lib valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        "$BUILD/bench/$program" $args >"$tmp/out" 2>"$tmp/err"; then
        return 0
    fi
    local ir
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err" | head -1)
    [ -n "$ir" ] && echo "$ir $(field ops "$tmp/out")"
}

echo "allocator,workload,ir_per_op,peak_rss_kb"
for a in "${allocators[@]}"; do
    label=${a%%|*} lib=${a#*|}
    for w in "${workloads[@]}"; do
        IFS='|' read -r name program args n <<<"$w"
        one=$(callgrind "$lib" "$program" "${args//@N@/$n}")
        three=$(callgrind "$lib" "$program" "${args//@N@/$((3 * n))}")
        ir=""
        if [ -n "$one" ] && [ -n "$three" ]; then
            read -r ir1 ops1 <<<"$one"
            read -r ir3 ops3 <<<"$three"
            ir=$(awk -v a="$ir1" -v b="$ir3" -v x="$ops1" -v y="$ops3" \
                'BEGIN { printf "%.2f", (b - a) / (y - x) }')
        fi
        LD_PRELOAD=$lib "$BUILD/bench/$program" ${args//@N@/$((20 * n))} >"$tmp/native"
        echo "$label,$name,$ir,$(field maxrss_kb "$tmp/native")"
    done
done
