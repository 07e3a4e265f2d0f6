#!/usr/bin/env bash
# Real programs under LD_PRELOAD of an allocator, each with its output checked against a
# fixed expected value (computed once under glibc; the work is deterministic).
#
#   allocator/tests/preload_programs.sh [LIBRARY]     default: build/fast/libhakmem.so
#
# Prints one line per program (PASS/FAIL and what differed) and exits non-zero when any
# failed. Programs that are not installed are reported as SKIP, never silently dropped.
# Any allocator works as LIBRARY (e.g. /usr/lib/x86_64-linux-gnu/libmimalloc.so.2), which
# is how the expected values were checked.
set -uo pipefail
cd "$(dirname "$0")/../.."

library=$(realpath "${1:-build/fast/libhakmem.so}")
[ -f "$library" ] || { echo "preload_programs: no such library: $library" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LC_ALL=C
failures=()

# run_checked NAME EXPECTED COMMAND...: runs COMMAND (a shell snippet in $work) under the
# preloaded allocator and compares its stdout with EXPECTED.
run_checked() {
    local name=$1 expected=$2 snippet=$3 output status
    output=$(cd "$work" && LD_PRELOAD="$library" timeout 120 bash -c "$snippet" 2>"$work/$name.err")
    status=$?
    if [ $status -ne 0 ] || [ "$output" != "$expected" ]; then
        echo "FAIL $name: exit=$status expected '$expected' got '${output:0:200}'"
        sed 's/^/    stderr: /' "$work/$name.err" | head -5
        failures+=("$name")
    else
        echo "PASS $name"
    fi
}

have() { command -v "$1" >/dev/null 2>&1; }
skip() { echo "SKIP $1: $2 not installed"; }

# The allocator must really be in the process, or every PASS below means nothing.
if LD_PRELOAD="$library" cat /proc/self/maps | grep -qF "$library"; then
    echo "PASS preload-active ($library mapped into the process)"
else
    echo "FAIL preload-active: $library is not mapped under LD_PRELOAD"
    failures+=(preload-active)
fi

# Python with pymalloc off, so every object goes through malloc/realloc/free: JSON
# round-trips, regular expressions, sorting and dict churn over 200k generated records.
python_script='
import hashlib, json, re
state, records = 12345, []
for i in range(200000):
    state = (state * 1103515245 + 12345) % 2**31
    records.append({"id": i, "key": "k%08x" % state, "tags": ["t%d" % (state % 97)] * (state % 5)})
text = json.dumps(records)
back = json.loads(text)
keys = sorted((r["key"] for r in back), reverse=True)
hexes = re.findall(r"k([0-9a-f]{8})", text)
counts = {}
for r in back:
    for t in r["tags"]:
        counts[t] = counts.get(t, 0) + 1
digest = hashlib.sha256((",".join(keys) + str(sorted(counts.items()))).encode()).hexdigest()
print(len(back), len(hexes), len(text), digest[:16])
'
if have python3; then
    run_checked python "200000 200000 11932740 96b3096acec31999" \
        "PYTHONMALLOC=malloc python3 -c '$python_script'"
else skip python python3; fi

# gcc: cc1, as and ld all run on the allocator; so does the program they build.
cat >"$work/primes.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
static int compare(const void *a, const void *b) { return *(const int *)b - *(const int *)a; }
int main(void) {
    enum { N = 2000000 };
    char *composite = calloc(N, 1);
    int *primes = malloc(N * sizeof *primes), count = 0;
    for (int i = 2; i < N; i++) {
        if (composite[i]) continue;
        primes[count++] = i;
        for (long j = (long)i * i; j < N; j += i) composite[j] = 1;
    }
    qsort(primes, count, sizeof *primes, compare);
    printf("%d %d\n", count, primes[0]);
    free(composite);
    free(primes);
    return 0;
}
EOF
if have gcc; then
    run_checked gcc "148933 1999993" "gcc -O2 -Wall -o primes primes.c && ./primes"
else skip gcc gcc; fi

# sort of 300k generated lines (awk makes them, under the allocator too).
awk_generate='BEGIN { s = 7; for (i = 0; i < 300000; i++) { s = (s * 69069 + 1) % 4294967296; printf "%010d line %d %x\n", s % 1000000007, i, s } }'
if have sort && have awk && have sha256sum; then
    run_checked sort "93a5ba33c8254212" \
        "awk '$awk_generate' > lines.txt && sort -S 8M lines.txt | sha256sum | cut -c1-16"
else skip sort "sort, awk or sha256sum"; fi

# gzip | gunzip round trip of the same data.
if have gzip; then
    run_checked gzip "roundtrip-ok" \
        "awk '$awk_generate' > data.txt && gzip -9 -c data.txt | gunzip -c | cmp - data.txt && echo roundtrip-ok"
else skip gzip gzip; fi

# git: init, commit with fixed identity and dates (so the commit id is fixed), log.
git_script='
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t
export GIT_COMMITTER_EMAIL=t@example.com GIT_AUTHOR_DATE="2020-01-01T00:00:00Z"
export GIT_COMMITTER_DATE="2020-01-01T00:00:00Z" HOME="$PWD" GIT_CONFIG_NOSYSTEM=1
git init -q -b main repo && cd repo
for i in $(seq 1 200); do echo "file $i" > "f$i.txt"; done
git add . && git commit -q -m first
seq 1 5000 > big.txt && git add big.txt && git commit -q -m second
git log --format=%H | head -1; git ls-files | wc -l
'
if have git; then
    run_checked git "$(printf '%s\n%s' 550c9f355fab23fc6ac07ea9ec12866ea7b59bad 201)" "$git_script"
else skip git git; fi

# sqlite3: 100k rows from a recursive CTE, an index, grouping and a join.
sqlite_script="
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
INSERT INTO t SELECT i, (i * 7919) % 1009, printf('value-%d', i) FROM n;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(k), max(length(v)) FROM t;
SELECT count(*) FROM (SELECT k FROM t GROUP BY k HAVING count(*) > 99);
SELECT sum(a.id % 10) FROM t a JOIN t b ON a.id = b.k WHERE a.id < 1000;"
if have sqlite3; then
    run_checked sqlite3 "$(printf '%s\n%s\n%s' '100000|50401514|12' 109 445984)" \
        "sqlite3 :memory: \"$sqlite_script\""
else skip sqlite3 sqlite3; fi

# perl: hashes, regexes and sorting over generated words.
perl_script='my %h; my $s = 1; for my $i (1..200000) { $s = ($s * 1103515245 + 12345) % 2147483648; my $w = sprintf("w%x", $s % 1000003); $h{$w}++; } my @top = (sort { $h{$b} <=> $h{$a} || $a cmp $b } keys %h)[0..2]; my $n = grep { /^w[0-9a-f]*f$/ } keys %h; print scalar(keys %h), " $n @top\n";'
if have perl; then
    run_checked perl "181296 11211 w1a21e w61ee4 w8cecc" "perl -e '$perl_script'"
else skip perl perl; fi

# node: V8's own heap sits in its mmaps, but its zlib, buffers and strings' backing stores go
# through malloc: object churn, then a 10 MB buffer gzipped and back.
node_script='let a = []; for (let i = 0; i < 2e6; i++) { a.push({x: i, s: "v" + i}); if (a.length > 1e5) a = []; }
const zlib = require("zlib"); const b = zlib.gzipSync(Buffer.alloc(1e7, 7));
console.log(a.length, b.length, zlib.gunzipSync(b).length);'
if have node; then
    run_checked node "99981 9751 10000000" "node -e '$node_script'"
else skip node node; fi

# java: the JVM's threads (compiler, GC, a pool of 4 workers building strings) and its native
# zlib all call malloc; the JVM also relies on signals (SIGSEGV for null checks) beside it.
java_source='import java.util.*; import java.util.concurrent.*;
public class T { public static void main(String[] a) throws Exception {
  ExecutorService ex = Executors.newFixedThreadPool(4); List<Future<Long>> fs = new ArrayList<>();
  for (int t = 0; t < 8; t++) { final int s = t; fs.add(ex.submit(() -> { long h = 0;
    for (int i = 0; i < 300000; i++) { String x = ("k" + i + s).repeat(3); h += x.hashCode(); } return h; })); }
  long h = 0; for (Future<Long> f : fs) h += f.get(); ex.shutdown(); System.out.println(h);
  java.util.zip.Deflater d = new java.util.zip.Deflater(); d.setInput(new byte[5_000_000]); d.finish();
  System.out.println(d.deflate(new byte[100000])); } }'
if have java; then
    printf '%s\n' "$java_source" >"$work/T.java"
    run_checked java "$(printf '%s\n%s' 120534972352 4880)" "java T.java"
else skip java java; fi

if [ ${#failures[@]} -ne 0 ]; then
    echo "preload_programs: FAILED: ${failures[*]}"
    exit 1
fi
echo "preload_programs: all passed under $library"
