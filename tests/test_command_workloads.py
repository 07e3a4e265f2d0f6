"""Command workloads (real programs): TOML validation, groups, generated inputs, the hakrun
measurements (rusage of the tree, peak RSS, preload check), the output check against
glibc, a server workload, and allocators given by path. Short inputs: ~30 s in all."""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import allocators
from hakbench.core.allocators import find_library, resolve_allocator
from hakbench.core.errors import UsageError
from hakbench.core.inputs import GENERATORS, generate, input_path
from hakbench.core.profiles import expand_workloads, load_workloads, parse_workload
from hakbench.engine.cells import make_cell
from hakbench.engine.runner import run_sample
from hakbench.experiments.matrix_spec import expand_coords, parse_matrix

REPO = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"
ALLOC_64M = "b = bytearray(64 << 20); s = sum(range(2_000_000))"

WORKLOADS = f"""\
[hot]
program = "bench_tiny_hot"
args = ["--size", "64", "--batch", "100", "--cycles", "2000", "--seed", "42"]
groups = ["micro"]

[lua_small]
kind = "command"
groups = ["apps", "quick"]
argv = ["lua5.4", "{{input}}"]
input = {{ generator = "lua", rounds = 3, size = 300 }}
check = {{ output = "stdout" }}

[tree]
kind = "command"
groups = ["quick"]
description = "a shell whose child allocates 64 MiB and burns CPU, then a second child"
argv = ["/bin/sh", "-c", "{PY} -c '{ALLOC_64M}'; /bin/true"]

[tiny]
kind = "command"
argv = ["/bin/true"]

[sums]
kind = "command"
argv = ["{PY}", "-c", "print('rate 1234.5 ops/s'); open('out.txt','w').write('x=7 t=99')"]
measure = {{ regex = "rate ([0-9.]+) ops/s", kind = "rate" }}
check = {{ output = "out.txt", substitute = [["t=[0-9]+", "t=N"]] }}

[nostdin]
kind = "command"
argv = ["/bin/cat"]
stdin = "/nonexistent/hakbench-input"

[redis_small]
kind = "command"
server = [
  "redis-server", "--port", "{{port}}", "--bind", "127.0.0.1", "--save", "", "--appendonly",
  "no", "--dir", "{{dir}}",
]
ready = ["redis-cli", "-h", "127.0.0.1", "-p", "{{port}}", "ping"]
ready_expect = "PONG"
stop = ["redis-cli", "-h", "127.0.0.1", "-p", "{{port}}", "shutdown", "nosave"]
argv = [
  "redis-benchmark", "-h", "127.0.0.1", "-p", "{{port}}", "-n", "2000", "-c", "4", "-t",
  "set,get", "--csv",
]
measure = "cpu"
check = {{ output = "stdout", substitute = [['"[0-9.]+"', '"N"']] }}
"""


@pytest.fixture(autouse=True)
def fresh_path_allocators(monkeypatch):
    """Allocators given by path are remembered per process; each test starts without any."""
    monkeypatch.setattr(allocators, "_BY_PATH", {})


@pytest.fixture
def lab(tmp_path, monkeypatch):
    bench = tmp_path / "build" / "bench"
    bench.mkdir(parents=True)
    (bench / "bench_tiny_hot").symlink_to(REPO / "build" / "bench" / "bench_tiny_hot")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "workloads.toml").write_text(WORKLOADS)
    (tmp_path / "profiles" / "c7_safe.toml").write_text('name = "C7_SAFE"\n')
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    return tmp_path


def _needs(*programs):
    missing = [p for p in programs if shutil.which(p) is None]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {missing} (make setup)")


# --- parsing and validation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"kind": "command", "argv": ["x"], "stdn": "a"}, "unknown key(s) stdn"),
        ({"kind": "command"}, "needs argv"),
        ({"kind": "command", "argv": "x"}, "argv must be a non-empty list"),
        ({"kind": "command", "argv": ["x"], "measure": "fast"}, "measure must be one of"),
        ({"kind": "command", "argv": ["x"], "measure": {"regex": "a", "kind": "rate"}}, "group"),
        (
            {"kind": "command", "argv": ["x"], "measure": {"regex": "(", "kind": "rate"}},
            "bad regex",
        ),
        ({"kind": "command", "argv": ["{input}"]}, "declares no input generator"),
        ({"kind": "command", "argv": ["x"], "input": {"generator": "zip"}}, "unknown"),
        ({"kind": "command", "argv": ["x"], "input": {"generator": "sql", "n": 1}}, "no parameter"),
        ({"kind": "command", "argv": ["x"], "server": ["s"]}, "server, ready and stop together"),
        ({"kind": "command", "argv": ["x", "{port}"]}, "not a server workload"),
        ({"kind": "command", "argv": ["x"], "check": {"output": 1}}, "check must be a table"),
        ({"kind": "command", "argv": ["x"], "timeout": -1}, "timeout must be a positive"),
        ({"kind": "daemon", "argv": ["x"]}, "kind must be harness or command"),
        ({"program": "p", "argz": []}, "unknown key(s) argz"),
        ({"program": "p", "groups": "apps"}, "groups must be a list"),
    ],
)
def test_bad_workload_tables_are_one_line_usage_errors(table, message):
    with pytest.raises(UsageError) as e:
        parse_workload("w", table, "workloads.toml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_workloads_toml_exits_2_with_one_line(lab):
    (lab / "profiles" / "workloads.toml").write_text(
        '[w]\nkind = "command"\nargv = ["x"]\nfoo = 1\n'
    )
    r = CliRunner().invoke(main, ["ab", "-a", "system", "-w", "w", "-n", "1"])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "unknown key(s) foo" in r.output


def test_groups_expand_in_file_order_without_duplicates(lab):
    wl = load_workloads()
    assert wl["lua_small"].groups == ("apps", "quick") and wl["tiny"].groups == ()
    assert wl["lua_small"].primary_metric == "wall_s" and wl["hot"].primary_metric == "throughput"
    assert wl["sums"].primary_metric == "app_rate" and wl["redis_small"].primary_metric == "cpu_s"
    assert expand_workloads(["@quick", "lua_small", "hot"], wl) == ["lua_small", "tree", "hot"]
    with pytest.raises(UsageError, match=r"unknown workload group '@nope'; known groups: @apps"):
        expand_workloads(["@nope"], wl)
    spec = parse_matrix('[axes]\nallocator = ["system"]\nworkload = ["@quick", "@micro"]\n')
    assert [c["workload"] for c in expand_coords(spec)] == ["lua_small", "tree", "hot"]
    r = CliRunner().invoke(main, ["ab", "-a", "system", "-w", "@nope", "-n", "1"])
    assert r.exit_code == 2 and "known groups: @apps, @micro, @quick" in r.output


def test_input_generators_are_deterministic(tmp_path):
    for name in GENERATORS:
        small = {"generator": name, "seed": 3}
        assert generate(small) == generate(small), name
        assert generate(small) != generate({**small, "seed": 4}), name
    spec = {"generator": "sql", "rows": 50}
    first = input_path(spec, tmp_path)
    assert input_path(spec, tmp_path) == first and first.read_text() == generate(spec)
    assert input_path({**spec, "rows": 51}, tmp_path) != first


# --- measurements ------------------------------------------------------------------------


def test_rusage_covers_the_reaped_tree_and_rss_is_the_programs_own(lab):
    tree = run_sample(make_cell("system", "tree"))
    assert tree["status"] == "ok", tree["error"]
    m = tree["metrics"]
    # the 64 MiB child was reaped by the shell: its peak and CPU time are in wait4's rusage
    assert 64 * 1024 < m["maxrss_kb"] < 64 * 1024 + 40 * 1024
    assert m["cpu_s"] == pytest.approx(m["user_s"] + m["sys_s"]) and m["cpu_s"] > 0.02
    assert m["wall_s"] >= m["cpu_s"] * 0.5
    tiny = run_sample(make_cell("system", "tiny"))
    # /bin/true's own peak: not this Python's (tens of MB), which exec would carry over
    assert tiny["status"] == "ok" and tiny["metrics"]["maxrss_kb"] < 8 * 1024
    assert "libc.so" in tiny["process"]["malloc_impl"]  # glibc's malloc, nothing preloaded


def test_a_program_that_cannot_start_is_a_failed_sample_not_a_traceback(lab):
    s = run_sample(make_cell("system", "nostdin"))
    assert s["status"] == "error" and "cannot start /bin/cat" in s["error"]


def test_regex_rate_and_normalised_output_file(lab):
    s = run_sample(make_cell("system", "sums"))
    assert s["status"] == "ok", s["error"]
    assert s["metrics"]["app_rate"] == 1234.5
    ref = json.loads(next((lab / "build" / "reference").glob("sums-*.json")).read_text())
    assert ref["output_sha256"] == s["output_sha256"]


@_needs("lua5.4")
def test_preload_is_seen_in_maps_and_output_matches_glibc(lab):
    mimalloc = resolve_allocator("mimalloc")
    if not mimalloc.available:
        pytest.skip(mimalloc.missing_reason)
    s = run_sample(make_cell("mimalloc", "lua_small"))
    assert s["status"] == "ok", s["error"]
    assert "libmimalloc.so" in s["process"]["malloc_impl"]
    assert s["output_sha256"] == s["reference_sha256"]


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
/* A malloc "allocator" (glibc's own, forwarded) that also corrupts output: the first byte
 * of every fwrite to stdout is flipped. */
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t), *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void free(void *p) { __libc_free(p); }
size_t fwrite(const void *p, size_t size, size_t n, FILE *f) {
  static size_t (*real)(const void *, size_t, size_t, FILE *);
  if (!real) real = (size_t(*)(const void *, size_t, size_t, FILE *))dlsym(RTLD_NEXT, "fwrite");
  if (f == stdout && size * n > 0 && size * n < 65536) {
    char buf[65536];
    memcpy(buf, p, size * n);
    buf[0] ^= 1;
    return real(buf, size, n, f);
  }
  return real(p, size, n, f);
}
"""


def _build_shim(directory: Path) -> Path:
    src = directory / "shim.c"
    src.write_text(SHIM)
    shim = directory / "libshim.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"], check=True)
    return shim


@_needs("lua5.4", "gcc")
def test_output_that_differs_under_an_allocator_is_a_failed_sample_in_the_report(lab):
    shim = _build_shim(lab)
    out = lab / "res"
    argv = ["ab", "-a", f"shim={shim}", "--baseline-allocator", "system", "-w", "lua_small"]
    r = CliRunner().invoke(main, [*argv, "-n", "2", "--warmup", "0", "--out", str(out)])
    assert r.exit_code == 3, r.output  # no complete pair: every B sample failed
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    by_side = {side: [s for s in samples if s["side"] == side] for side in "AB"}
    assert {s["status"] for s in by_side["A"]} == {"ok"}
    assert {s["status"] for s in by_side["B"]} == {"wrong_output"}
    assert all(s["output_sha256"] != s["reference_sha256"] for s in by_side["B"])
    assert all("libshim.so" in s["process"]["malloc_impl"] for s in by_side["B"])
    report = (out / "report.md").read_text()
    assert report.count("**wrong_output**") == 2 and "`shim`" in report


@_needs("lua5.4", "gcc")
def test_matrix_with_command_workloads_reports_time_and_memory_ratios(lab):
    shim = _build_shim(lab)
    matrix_file = lab / "m.toml"
    matrix_file.write_text(
        textwrap.dedent(f"""\
        name = "quick"
        runs = 2
        warmup = 0
        reference = {{ allocator = "system" }}
        [axes]
        allocator = ["system", "shim={shim}"]
        workload = ["@quick"]
        """)
    )
    out = lab / "mres"
    r = CliRunner().invoke(main, ["matrix", str(matrix_file), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "summary.csv").open()))
    got = {(x["workload"], x["label"], x["metric"]): x for x in rows}
    assert got[("tree", "shim", "wall_s")]["status"] == "ok"
    assert got[("tree", "shim", "maxrss_kb")]["reference"] == "system"
    assert got[("lua_small", "shim", "wall_s")]["status"] == "failed"
    report = (out / "apps.md").read_text()
    assert "| lua_small | shim | - | - |" in report and "wrong output 2/2" in report
    assert "| tree | shim |" in report and "1 of 2" in report  # shim's geomean covers tree only
    assert (out / "apps_time.png").stat().st_size > 0 and (out / "apps_memory.png").exists()


@_needs("redis-server", "redis-benchmark", "redis-cli")
def test_redis_server_starts_on_localhost_and_stops_by_itself(lab):
    s = run_sample(make_cell("system", "redis_small"), timeout=60)
    assert s["status"] == "ok", (s["error"], s["stderr_tail"])
    assert s["argv"][0] == "redis-server" and "127.0.0.1" in s["argv"]
    port = int(s["argv"][s["argv"].index("--port") + 1])
    assert s["client"]["returncode"] == 0 and "127.0.0.1" in s["client"]["argv"]
    m = s["metrics"]
    assert 1024 < m["maxrss_kb"] < 512 * 1024 and m["cpu_s"] > 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass  # the server is gone: SHUTDOWN NOSAVE, and hakbench reaped it


# --- allocators by path ------------------------------------------------------------------


def test_allocator_by_path_passes_the_harness_malloc_impl_check():
    lib = find_library("libjemalloc.so.2")
    if lib is None or not (REPO / "build" / "bench" / "bench_random_mixed").exists():
        pytest.skip("libjemalloc2 not installed or harness not built")
    s = run_sample(make_cell(str(lib), "mixed_short"), perf=False)
    assert s["status"] == "ok", s["error"]
    assert s["allocator"] == "libjemalloc.so.2" and "libjemalloc.so" in s["harness"]["malloc_impl"]
    named = run_sample(make_cell(f"je={lib}", "mixed_short"), perf=False)
    assert named["status"] == "ok" and named["allocator"] == "je"


def test_allocator_wrong_path_is_one_line_exit_2(tmp_path):
    for spec in (str(tmp_path / "libnope.so"), f"x={tmp_path}/libnope.so"):
        r = CliRunner().invoke(main, ["ab", "-a", spec, "-w", "mixed_short", "-n", "1"])
        assert r.exit_code == 2 and "no such file" in r.output, r.output
        assert r.output.strip().count("\n") == 0
    r = CliRunner().invoke(main, ["run", "-a", "mimalloc=/usr/lib/x", "-w", "mixed_short"])
    assert r.exit_code == 2


def test_command_workloads_refuse_instruction_counts(lab):
    r = CliRunner().invoke(main, ["ab", "-a", "system", "-w", "tiny", "--metric", "instructions"])
    assert r.exit_code == 2 and "judged on its own wall_s" in r.output
