#!/usr/bin/env bash
# Runs the libhakmem C tests as a matrix: profiles x variants x tests, one line per
# combination (PASS/FAIL, seconds), and exits non-zero when any combination failed.
#
#   run_tests.sh [--build DIR] [--profiles LIST] [--variants LIST] [--matrix-variants LIST]
#                [--tests LIST] [--matrix-tests LIST]
#
#   --profiles  space-separated env profiles: `default` (no settings) or comma-joined
#               assignments, e.g. "default HAKMEM_TINY_HEAP_PROFILE=C7_SAFE,HAKMEM_X=1"
#   --variants  fast stats debug secure asan preload   (libhakmem builds; tests.mk builds them)
#               tsan                            (ThreadSanitizer build; multi-threaded tests)
#               glibc mimalloc                  (reference runs, no libhakmem involved)
#   --matrix-variants  variants for the profiles other than `default` (default: --variants);
#               the default profile runs under every variant, the others under these
#   --tests     test names (build/tests/<kind>/<name>) and/or preload_programs, which runs
#               only in the preload variant (and mimalloc, against mimalloc)
#   --matrix-tests  the tests for the profiles other than `default` (default: --tests)
#
# Every test process starts from a clean environment: PATH, HOME and LC_ALL, then the
# profile's settings, then the variant's (LD_PRELOAD, stats switches) — so no stray HAKMEM_*
# of the caller leaks in. A combination also fails when libhakmem reports an option it does
# not know (a misspelt profile), and in the stats variant when the stats file is not in the
# one stats format. Logs: <build>/tests/logs/<profile>/<variant>/<test>.log.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=build
profiles=default
variants="fast stats debug secure asan preload"
matrix_variants=""
matrix_tests=""
tests="test_api test_stress test_fork test_thread_exit test_large test_invalid_free test_release test_paths test_conformance test_fork_signal fuzz_api test_cxx preload_programs"
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --profiles) profiles=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --matrix-variants) matrix_variants=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --matrix-tests) matrix_tests=$2; shift 2 ;;
    *) echo "run_tests.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

mimalloc_library=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
# How long a test may run before it counts as hung. The tests are not timed; this only turns
# a deadlock into a failure.
test_timeout_seconds=300

# Arguments per test and variant: the sanitized build runs a smaller stress.
test_arguments() {
    local variant=$1 test=$2
    case "$variant/$test" in
    asan/test_stress) echo "6 6 20" ;;
    tsan/test_stress) echo "4 4 10" ;;
    debug/test_stress) echo "8 6 20" ;;
    */test_stress) echo "8 12 40" ;;
    asan/test_fork | debug/test_fork) echo 20 ;;
    asan/test_large) echo 40 ;;
    asan/test_paths | debug/test_paths) echo 1 ;; # debug frees walk the page's free lists
    asan/test_fork_signal) echo 100 ;; # forks per pattern (default 200)
    # The fuzzer: a fixed seed (the same ops every run) and one from the clock (new ops every
    # run), both printed; 0.5 s each, 0.25 s in the sanitized and debug builds. mimalloc
    # needs the documented exemptions (fuzz_api.c: --portable, --mimalloc-issue-700).
    asan/fuzz_api | debug/fuzz_api) echo "--seed 1 --seed time --seconds 0.25 --threads 2" ;;
    mimalloc/fuzz_api) echo "--seed 1 --seed time --seconds 0.5 --threads 2 --portable --mimalloc-issue-700" ;;
    */fuzz_api) echo "--seed 1 --seed time --seconds 0.5 --threads 2" ;;
    *) echo "" ;;
    esac
}

binary_kind() {
    case "$1" in
    preload | glibc | mimalloc) echo dynamic ;;
    *) echo "$1" ;;
    esac
}

# Environment the variant adds: which allocator is preloaded, and the stats switches. Under
# asan, libhakmem's blocks come from its own mmaps, invisible to LeakSanitizer, so leak
# checking would only scan libc's few blocks at every exit (seconds per forked child).
variant_environment() {
    local variant=$1 stats_file=$2
    case "$variant" in
    preload) echo "LD_PRELOAD=$(realpath "$build/fast/libhakmem.so")" ;;
    mimalloc) echo "LD_PRELOAD=$mimalloc_library" ;;
    stats) echo "HAKMEM_STATS=1 HAKMEM_STATS_FILE=$stats_file" ;;
    asan) echo "ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1" ;;
    tsan) echo "TSAN_OPTIONS=halt_on_error=1:exitcode=66" ;;
    debug) echo "UBSAN_OPTIONS=print_stacktrace=1" ;;
    esac
}

# The stats variant must produce the one stats format: `[GROUP] key=value ...`, integers.
check_stats_file() {
    local file=$1
    [ -s "$file" ] || { echo "stats: $file is missing or empty"; return 1; }
    grep -q '^\[SS_OS_STATS\] ' "$file" || { echo "stats: no [SS_OS_STATS] line"; return 1; }
    local bad
    bad=$(grep -Ev '^\[[A-Z0-9_]+\]( [a-z0-9_]+=-?[0-9]+)+$' "$file" | head -3)
    [ -z "$bad" ] || { echo "stats: lines not in the stats format: $bad"; return 1; }
}

# One combination: runs it, prints its PASS/FAIL line (one write, so lines of parallel jobs do
# not mix) and, for a failure, the end of its log; leaves "PASS" or "FAIL <name>" in $log.result.
run_one() {
    local profile=$1 variant=$2 test=$3 profile_dir kind command arguments log_dir log stats_file
    local profile_env=() run_env=() start status seconds result
    [ "$profile" = default ] || IFS=, read -r -a profile_env <<<"$profile"
    profile_dir=$(echo "$profile" | tr -c 'A-Za-z0-9_=.\n-' '_')
    kind=$(binary_kind "$variant")
    if [ "$test" = preload_programs ]; then
        case "$variant" in
        preload) command=(bash allocator/tests/preload_programs.sh "$build/fast/libhakmem.so") ;;
        mimalloc) command=(bash allocator/tests/preload_programs.sh "$mimalloc_library") ;;
        esac
    else
        read -r -a arguments <<<"$(test_arguments "$variant" "$test")"
        command=("$build/tests/$kind/$test" "${arguments[@]}")
    fi
    log_dir="$build/tests/logs/$profile_dir/$variant"
    mkdir -p "$log_dir"
    log="$log_dir/$test.log"
    stats_file="$log_dir/$test.stats"
    rm -f "$stats_file" "$log.result"
    # preload_programs sets LD_PRELOAD per program itself.
    [ "$test" = preload_programs ] ||
        read -r -a run_env <<<"$(variant_environment "$variant" "$(realpath -m "$stats_file")")"
    start=$EPOCHREALTIME
    env -i PATH="$PATH" HOME="${HOME:-/root}" LC_ALL=C "${profile_env[@]}" "${run_env[@]}" \
        timeout "$test_timeout_seconds" "${command[@]}" >"$log" 2>&1
    status=$?
    seconds=$(awk -v start="$start" -v end="$EPOCHREALTIME" 'BEGIN { print end - start }')
    if [ $status -eq 0 ] && [ "$variant" = stats ] && [ "$test" != preload_programs ]; then
        check_stats_file "$stats_file" >>"$log" || status=1
    fi
    # A profile naming an option libhakmem does not have would silently test the defaults
    # instead; libhakmem reports such names, and that fails the combination.
    if [ $status -eq 0 ] && grep -q '^hakmem: unknown option' "$log"; then
        echo "profile sets an option libhakmem does not know" >>"$log"
        status=1
    fi
    result=PASS
    [ $status -eq 0 ] || result=FAIL
    local report
    report=$(printf '%s %7.2fs  %-10s %-8s %s\n' "$result" "$seconds" "$profile" "$variant" "$test")
    if [ $result = FAIL ]; then
        report+=$'\n'"    exit status $status; last lines of $log:"$'\n'
        report+=$(tail -n 15 "$log" | sed 's/^/    | /')
        echo "FAIL $profile/$variant/$test" >"$log.result"
    else
        echo PASS >"$log.result"
    fi
    printf '%s\n' "$report"
}

# Combinations run `jobs` at a time (HAKMEM_TEST_JOBS, default: the machine's cores): most are
# a single thread waiting on nothing, and on 2 cores two at a time took the matrix from ~4.5 to
# ~2.5 minutes. Their bounds are not timings, and the fork test's stall limit allows for it.
jobs=${HAKMEM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
results=()
running=0
for profile in $profiles; do
    profile_variants=$variants profile_tests=$tests
    [ "$profile" = default ] || [ -z "$matrix_variants" ] || profile_variants=$matrix_variants
    [ "$profile" = default ] || [ -z "$matrix_tests" ] || profile_tests=$matrix_tests
    profile_dir=$(echo "$profile" | tr -c 'A-Za-z0-9_=.\n-' '_')
    for variant in $profile_variants; do
        if [ "$variant" = mimalloc ] && [ ! -e "$mimalloc_library" ]; then
            echo "SKIP variant mimalloc: $mimalloc_library is not installed"
            continue
        fi
        for test in $profile_tests; do
            if [ "$test" = preload_programs ] && [ "$variant" != preload ] &&
                [ "$variant" != mimalloc ]; then
                continue
            fi
            # C++'s allocation functions: the sanitized builds leave them to ASan and TSan, and
            # Debian's mimalloc 2.0.9 aborts where operator new must throw std::bad_alloc.
            if [ "$test" = test_cxx ] &&
                { [ "$variant" = asan ] || [ "$variant" = tsan ] || [ "$variant" = mimalloc ]; }; then
                continue
            fi
            results+=("$build/tests/logs/$profile_dir/$variant/$test.log.result")
            if [ $running -ge "$jobs" ]; then
                wait -n
                running=$((running - 1))
            fi
            run_one "$profile" "$variant" "$test" &
            running=$((running + 1))
        done
    done
done
wait
total=${#results[@]}
failed_names=()
for result in "${results[@]}"; do
    line=$(cat "$result" 2>/dev/null || echo "FAIL ${result%.log.result} (no result)")
    [ "$line" = PASS ] || failed_names+=("${line#FAIL }")
done
failed=${#failed_names[@]}
echo "run_tests: $total combinations, $((total - failed)) passed, $failed failed"
[ $failed -eq 0 ] || { printf '  failed: %s\n' "${failed_names[@]}"; exit 1; }
