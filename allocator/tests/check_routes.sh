#!/usr/bin/env bash
# Each path switch must flip a real path: runs test_paths (stats build) under a switch
# setting and checks which engagement groups report route_hits > 0 — exactly the expected
# ones, so a switch that routes nothing (the "v2 ON with route_hits=0" failure) or the wrong
# precedence fails. Also checks the OS policy counters of the lean switch.
#
#   check_routes.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
binary=$build/tests/stats/test_paths
log_dir=$build/tests/logs/routes
mkdir -p "$log_dir"
failed=0
case_number=0

# run_case "ENV ASSIGNMENTS" -> prints the stats file path (call next_case first: run_case
# runs in a subshell)
next_case() { case_number=$((case_number + 1)); }
run_case() {
    local stats=$log_dir/case$case_number.stats
    rm -f "$stats" "$stats.err"
    # shellcheck disable=SC2086 # the assignments are meant to split
    env -i PATH="$PATH" LC_ALL=C $1 HAKMEM_STATS=1 HAKMEM_STATS_FILE="$stats" "$binary" 1 \
        >"$log_dir/case$case_number.log" 2>&1 || echo "test_paths failed under '$1'" >>"$stats.err"
    echo "$stats"
}

field() { # field FILE GROUP KEY
    grep "^\[$2\] " "$1" | tr ' ' '\n' | sed -n "s/^$3=//p"
}

report() {
    local status=$1 what=$2
    if [ "$status" = PASS ]; then
        echo "PASS routes: $what"
    else
        echo "FAIL routes: $what"
        failed=$((failed + 1))
    fi
}

# expect_paths "ENV" "GROUPS ENGAGED"
expect_paths() {
    local stats engaged="" group
    next_case
    stats=$(run_case "$1")
    for group in TINY_HEAP_STATS HOTHEAP_V2_STATS SMALL_HEAP_V3_STATS; do
        [ "$(field "$stats" $group route_hits)" -gt 0 ] 2>/dev/null && engaged="$engaged $group"
    done
    engaged=${engaged# }
    if [ -e "$stats.err" ] || [ "$engaged" != "$2" ]; then
        report FAIL "'$1': engaged '$engaged', expected '$2'"
    else
        report PASS "'${1:-default}' -> '${2:-legacy only}'"
    fi
}

# expect_field "ENV" GROUP KEY VALUE : that stats field must be exactly VALUE
expect_field() {
    local stats value
    next_case
    stats=$(run_case "$1")
    value=$(field "$stats" "$2" "$3")
    if [ -e "$stats.err" ] || [ "$value" != "$4" ]; then
        report FAIL "'$1': $2 $3=$value, expected $4"
    else
        report PASS "'$1' -> $2 $3=$4"
    fi
}

# expect_os "ENV" "KEYS" : the sum of these SS_OS_STATS keys must be > 0
expect_os() {
    local stats key sum=0 value
    next_case
    stats=$(run_case "$1")
    for key in $2; do
        value=$(field "$stats" SS_OS_STATS "$key")
        sum=$((sum + ${value:-0}))
    done
    if [ -e "$stats.err" ] || [ "$sum" -eq 0 ]; then
        report FAIL "'$1': SS_OS_STATS $2 sum to $sum, expected > 0"
    else
        report PASS "'$1' -> SS_OS_STATS $2 sum to $sum"
    fi
}

expect_paths "" "TINY_HEAP_STATS SMALL_HEAP_V3_STATS" # default C7_SAFE: C7 on TinyHeap, the rest v3
off="HAKMEM_SMALL_HEAP_V3_ENABLED=0"
expect_paths "$off" "TINY_HEAP_STATS" # without v3: the profile C7_SAFE's TinyHeap for class 7
expect_paths "$off HAKMEM_TINY_HEAP_PROFILE=LEGACY" ""
expect_paths "$off HAKMEM_TINY_HEAP_PROFILE=LEGACY HAKMEM_TINY_HOTHEAP_V2=1" "HOTHEAP_V2_STATS"
expect_paths "HAKMEM_TINY_HEAP_PROFILE=LEGACY HAKMEM_SMALL_HEAP_V3_ENABLED=1" \
    "SMALL_HEAP_V3_STATS"
expect_paths "$off HAKMEM_TINY_HEAP_PROFILE=LEGACY HAKMEM_TINY_HEAP_CLASSES=0x40" "TINY_HEAP_STATS"
# Precedence: v3 over v2 over TinyHeap for a class several claim (class 7 here).
expect_paths "HAKMEM_TINY_HOTHEAP_V2=1 HAKMEM_SMALL_HEAP_V3_CLASSES=0xffff" "SMALL_HEAP_V3_STATS"
expect_paths "$off HAKMEM_TINY_HEAP_CLASSES=0xC0 HAKMEM_TINY_HOTHEAP_V2=1" \
    "TINY_HEAP_STATS HOTHEAP_V2_STATS"
expect_paths "$off HAKMEM_TINY_HOTHEAP_V2=1 HAKMEM_TINY_HOTHEAP_CLASSES=0" "TINY_HEAP_STATS"
# The profile C6_HEAVY: classes 6 and 7 on TinyHeap, the rest on v3.
expect_paths "HAKMEM_TINY_HEAP_CLASSES=0xC0 HAKMEM_SMALL_HEAP_V3_CLASSES=0x1f3f" \
    "TINY_HEAP_STATS SMALL_HEAP_V3_STATS"
# SmallObject v3's mask covers the mid groups M0..M7 (bits 8-15): v3 on the mid sizes alone
# must engage, and report exactly those classes.
expect_paths "HAKMEM_TINY_HEAP_PROFILE=LEGACY HAKMEM_SMALL_HEAP_V3_CLASSES=0xff00" \
    "SMALL_HEAP_V3_STATS"
expect_field "HAKMEM_SMALL_HEAP_V3_ENABLED=1 HAKMEM_SMALL_HEAP_V3_CLASSES=0xff00" \
    SMALL_HEAP_V3_STATS classes 65280
expect_field "HAKMEM_SMALL_HEAP_V3_CLASSES=0xffff" SMALL_HEAP_V3_STATS classes 65535
expect_field "" SMALL_HEAP_V3_STATS classes 65407 # the default 0xff7f: up to 256 KiB, all but C7
expect_os "HAKMEM_SS_MEM_LEAN=1" madvise

echo "check_routes: $case_number cases, $failed failed"
[ $failed -eq 0 ]
