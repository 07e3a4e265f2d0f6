"""Failures are results (issue 14): a B that aborts in a third of its runs is FAILED in ab,
in a matrix summary and in the scorecard, never judged on the runs that survived; a
checksum that is not glibc's is a failed sample too.

The failing allocator is a real preload this test builds with gcc: malloc and friends
forward to glibc, and its constructor aborts every third process that loads it (a counter
file, locked, in the test's tmp directory: the measured process gets a clean environment,
so the path is compiled in).
"""

import csv
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.experiments import scorecard_refresh
from hakbench.experiments.ab import run_ab
from hakbench.experiments.ab_spec import ABSpec

REAL_BENCH = Path(__file__).resolve().parents[1] / "build" / "bench"

pytestmark = [
    pytest.mark.skipif(not (REAL_BENCH / "bench_random_mixed").exists(), reason="make build"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

SHIM = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    if (p == NULL) return 12;
    *out = p;
    return 0;
}

__attribute__((constructor)) static void every_third_process_aborts(void) {
    int fd = open(COUNT_FILE, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return;
    flock(fd, LOCK_EX);
    char buf[32] = {0};
    long n = read(fd, buf, sizeof buf - 1) > 0 ? atol(buf) : 0;
    n++;
    lseek(fd, 0, SEEK_SET);
    if (ftruncate(fd, 0) == 0) dprintf(fd, "%ld", n);
    close(fd);
    if (n % 3 == 0) abort();
}
"""

WORKLOADS = """\
[mixed_tiny]
program = "bench_random_mixed"
args = ["--min", "16", "--max", "1024", "--ws", "64", "--iters", "20000", "--seed", "1"]

[wrongsum]
program = "wrongsum"
"""


@pytest.fixture
def lab(make_lab):
    root = make_lab(WORKLOADS)
    real = REAL_BENCH / "bench_random_mixed"
    # The real harness, whose checksum line is altered whenever a library is preloaded.
    wrongsum = root / "build" / "bench" / "wrongsum"
    wrongsum.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        args="--min 16 --max 1024 --ws 64 --iters 20000 --seed 1"
        if [ -n "$LD_PRELOAD" ]; then
          {real} $args | sed 's/^checksum=.*/checksum=00000000deadbeef/'
        else
          exec {real} $args
        fi
        """)
    )
    wrongsum.chmod(0o755)
    return root


@pytest.fixture
def shim(tmp_path, monkeypatch) -> Path:
    """The aborting preload; its counter (and the name "shim") are the test's own."""
    monkeypatch.setattr("hakbench.core.allocators._BY_PATH", {})
    src, lib = tmp_path / "shim.c", tmp_path / "libshim.so"
    src.write_text(SHIM)
    count = tmp_path / "shim-count"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f'-DCOUNT_FILE="{count}"', "-o", lib, src],
        check=True,
    )
    return lib


def test_ab_is_failed_when_b_aborts_in_a_third_of_its_runs(lab, shim):
    out = lab / "ab"
    argv = ["ab", "-a", f"shim={shim}", "--baseline-allocator", "system", "-w", "mixed_tiny"]
    argv += ["--runs", "9", "--warmup", "0", "--perf", "off", "--out", str(out)]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("mixed_tiny "))
    assert row.split()[2] == "FAILED", r.output
    assert "A 0/9 failed, B 3/9 failed; first: killed by signal 6 (SIGABRT)" in r.output
    summary = list(csv.DictReader(open(out / "summary.csv")))
    primary = next(x for x in summary if x["role"] == "primary")
    assert primary["verdict"] == "FAILED" and primary["n_pairs"] == "6"  # survivors kept apart
    report = (out / "report.md").read_text()
    assert "## Failures" in report and "B 3/9 failed" in report
    assert json.loads((out / "meta.json").read_text())["verdicts"] == {"mixed_tiny": "FAILED"}


def test_ab_gate_trips_on_failed(lab, shim):
    argv = ["ab", "-a", f"shim={shim}", "--baseline-allocator", "system", "-w", "mixed_tiny"]
    argv += ["--runs", "3", "--warmup", "0", "--perf", "off", "--fail-on", "no-go"]
    r = CliRunner().invoke(main, [*argv, "--out", str(lab / "gate")])
    assert r.exit_code == 1, r.output


def test_the_same_failures_on_both_sides_leave_the_verdict_to_the_pairs(lab, shim):
    # A and B are the same aborting library: one counter, so each side loses some runs.
    spec = ABSpec(
        allocator=f"shim={shim}",
        baseline_allocator=f"shim={shim}",
        workloads=("mixed_tiny",),
        pairs=6,
        warmup_pairs=0,
        perf="off",
    )
    result = run_ab(spec, lab / "both", show_progress=False)
    sides = sorted(s["side"] for s in result.failed)
    note = result.failures["mixed_tiny"]
    if sides.count("A") == sides.count("B"):
        assert note.startswith("the same failures on both sides")
        assert result.verdicts()["mixed_tiny"] != "FAILED"
    else:
        assert result.verdicts()["mixed_tiny"] == "FAILED" and "first:" in note


def test_a_checksum_that_is_not_glibcs_is_a_failed_sample(lab):
    spec = ABSpec(
        allocator="mimalloc",
        baseline_allocator="system",
        workloads=("wrongsum",),
        pairs=3,
        warmup_pairs=0,
        perf="off",
    )
    from hakbench.core.allocators import resolve_allocator

    if not resolve_allocator("mimalloc").available:
        pytest.skip("libmimalloc2.0 not installed")
    result = run_ab(spec, lab / "sum", show_progress=False)
    assert {s["status"] for s in result.failed} == {"wrong_checksum"}
    assert {s["side"] for s in result.failed} == {"B"}
    assert "under glibc" in result.failed[0]["error"]
    assert result.verdicts() == {"wrongsum": "FAILED"}


MATRIX = """\
name = "shim"
runs = 6
warmup = 0
seed = 3
reference = {{ allocator = "system" }}
[axes]
allocator = ["shim={shim}", "system"]
workload = ["mixed_tiny"]
"""


def test_matrix_and_scorecard_say_failed(lab, shim):
    matrix_file = lab / "shim.toml"
    matrix_file.write_text(MATRIX.format(shim=shim))
    out = lab / "matrix"
    r = CliRunner().invoke(main, ["matrix", str(matrix_file), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "FAILED: A 0/6 failed, B 2/6 failed; first: killed by signal 6" in r.output
    rows = list(csv.DictReader(open(out / "summary.csv")))
    shim_row = next(x for x in rows if x["label"] == "shim")
    assert shim_row["status"] == "FAILED" and shim_row["ratio"] == ""
    samples = [json.loads(line) for line in open(out / "samples.jsonl")]
    # adjacent pairs: the shim and its reference run back to back, pair = the shim's key
    measured = [s for s in samples if s["phase"] == "measure"]
    assert all(s["pair"] == shim_row["cell"] for s in measured)
    for r_ in range(6):
        sides = sorted(s["side"] for s in measured if s["round"] == r_)
        assert sides == ["A", "B"]

    results = lab / "results"
    scorecard_refresh.refresh(results, matrix=matrix_file)  # the counter goes on: 2 in 6 again
    csv_rows = list(csv.DictReader(open(results / "scorecard.csv")))
    row = next(x for x in csv_rows if x["allocator"] == "shim" and x["metric"] == "throughput")
    assert row["status"] == "FAILED" and row["ratio_to_reference"] == ""
    assert "B 2/6 failed" in row["reason"]
    md = (results / "SCORECARD.md").read_text()
    assert "**FAILED**" in md and "shim not counted on: mixed_tiny (shim FAILED)" in md
