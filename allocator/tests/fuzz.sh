#!/usr/bin/env bash
# make fuzz: the differential fuzzer (fuzz_api) against the debug build of libhakmem under
# each profile in turn, with fresh seeds from the clock. The time is shared by the profiles.
# Every run starts from a clean environment plus the profile's settings (as run_tests.sh);
# its output goes to the terminal, so a failure's reproducer line is right there.
#
#   fuzz.sh [--build DIR] [--seconds T] [--profiles LIST] [--threads K]
set -uo pipefail
cd "$(dirname "$0")/../.."

build=build
seconds=60
profiles=default
threads=2
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --profiles) profiles=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

binary=$build/tests/debug/fuzz_api
read -r -a profile_list <<<"$profiles"
[ ${#profile_list[@]} -gt 0 ] || { echo "fuzz.sh: no profiles" >&2; exit 2; }
per_profile=$(awk -v t="$seconds" -v n=${#profile_list[@]} 'BEGIN { printf "%.2f", t / n }')
echo "fuzz: $binary, ${#profile_list[@]} profiles, $per_profile s each, $threads threads"

failed=()
for profile in "${profile_list[@]}"; do
    profile_env=()
    [ "$profile" = default ] || IFS=, read -r -a profile_env <<<"$profile"
    echo "== fuzz: profile $profile"
    # (the timeout only turns a hang into a failure: the fuzzer stops itself on time)
    env -i PATH="$PATH" HOME="${HOME:-/root}" LC_ALL=C "${profile_env[@]}" \
        UBSAN_OPTIONS=print_stacktrace=1 \
        timeout "$(awk -v t="$per_profile" 'BEGIN { printf "%d", t * 2 + 120 }')" \
        "$binary" --seed time --seconds "$per_profile" --threads "$threads"
    status=$?
    if [ $status -ne 0 ]; then
        echo "== fuzz: profile $profile FAILED (exit status $status; reproducer above)"
        failed+=("$profile")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failed under ${#failed[@]} of ${#profile_list[@]} profiles:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "fuzz: passed under all ${#profile_list[@]} profiles"
