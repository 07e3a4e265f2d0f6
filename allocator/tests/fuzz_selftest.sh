#!/usr/bin/env bash
# Shows that fuzz_api catches bugs: each self-test build (fuzz_api.c, -DFUZZ_SELFTEST_BUG=n)
# plants one allocator bug into the calls of stream 0 from op 2000 on; run against glibc, it
# must fail with the check meant for that bug, and name it in its FAIL line.
#
#   fuzz_selftest.sh BUILD [BUG...]     (binaries: BUILD/tests/selftest/fuzz_api_bug<n>)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
bugs=${*:-1 2 3 4 5 6 7 8}

expected_category() {
    case "$1" in
    1) echo contents ;;           # a stray write into another live block
    2) echo alignment ;;          # aligned allocations 16 bytes off
    3) echo realloc-preserve ;;   # a moving realloc loses a byte
    4) echo overlap ;;            # a live block handed out again
    5) echo errno ;;              # a failure without ENOMEM
    6) echo calloc-zero ;;        # calloc leaves a byte set
    7) echo usable-size ;;        # malloc_usable_size understates
    8) echo unexpected-success ;; # realloc to a huge size "succeeds"
    *) echo "?" ;;
    esac
}

failed=0
for bug in $bugs; do
    binary=$build/tests/selftest/fuzz_api_bug$bug
    want=$(expected_category "$bug")
    output=$(env -i PATH="$PATH" LC_ALL=C "$binary" --seed 1 --ops 20000 --threads 0 2>&1)
    status=$?
    line=$(grep -m1 '^fuzz_api: FAIL ' <<<"$output")
    if [ $status -ne 0 ] && [[ "$line" == "fuzz_api: FAIL [$want] "* ]] &&
        grep -q '^fuzz_api: reproduce: ' <<<"$output"; then
        echo "PASS selftest bug $bug caught: $line"
    else
        echo "FAIL selftest bug $bug: expected a FAIL [$want] line and a reproducer, got" \
            "exit $status: ${line:-no FAIL line}"
        failed=$((failed + 1))
    fi
done
[ $failed -eq 0 ] || { echo "fuzz_selftest: $failed planted bugs not caught as expected"; exit 1; }
echo "fuzz_selftest: every planted bug caught by its check"
