"""The instruction gate: its rules as pure functions, and the real thing catching one added
instruction in libhakmem's malloc fast path (a patched copy built in a temporary tree)."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from hakbench import gate as g
from hakbench.errors import UsageError
from hakbench.profiles import resolve_workload

SPEC = g.GateSpec(("C7_SAFE",), ("mixed", "xthread"), 0.1, 0.5, {"xthread": 2.0})


def row(workload, ir, status="ok", profile="C7_SAFE", args=None):
    return {
        "profile": profile,
        "workload": workload,
        "status": status,
        "ir_per_op": ir,
        "args": args or ["--iters", "10"],
        "error": None if status == "ok" else "exit 1",
    }


def test_parse_gate_defaults_from_axes_and_rejects_bad_tables():
    data = {"axes": {"profile": ["c7_safe"], "workload": ["Mixed", "xthread"]}, "gate": {}}
    spec = g.parse_gate(data)
    assert spec.profiles == ("C7_SAFE",) and spec.workloads == ("mixed", "xthread")
    assert spec.tolerance("mixed") == g.DEFAULT_TOLERANCE_PCT
    with pytest.raises(UsageError, match="unknown key"):
        g.parse_gate({**data, "gate": {"tolerence_pct": 1}})
    with pytest.raises(UsageError, match="scale must be at most 1"):
        g.parse_gate({**data, "gate": {"scale": 2}})
    with pytest.raises(UsageError, match="not gated"):
        g.parse_gate({**data, "gate": {"tolerance_pct_by_workload": {"tiny_hot": 1}}})
    with pytest.raises(UsageError, match="needs a \\[gate\\] table"):
        g.parse_gate({"axes": data["axes"]})


def test_committed_scorecard_matrix_has_a_gate_over_the_shipping_profiles():
    spec = g.load_gate()
    assert {"C7_SAFE", "BALANCED"} <= set(spec.profiles)
    assert {"mixed", "tiny_only", "c7_only", "c6_heavy", "tiny_hot"} <= set(spec.workloads)


def test_scaled_workload_scales_only_the_iteration_count():
    w = resolve_workload("tiny_hot")
    s = g.scaled_workload(w, 0.1)
    i = w.args.index(w.iters_flag) + 1
    assert int(s.args[i]) == round(int(w.args[i]) * 0.1)
    assert [a for k, a in enumerate(s.args) if k != i] == [
        a for k, a in enumerate(w.args) if k != i
    ]


def test_compare_rose_dropped_within_tolerance_and_per_workload_tolerance():
    base = [row("mixed", 100.0), row("xthread", 100.0)]
    judged = {
        r.workload: r for r in g.compare(SPEC, base, [row("mixed", 100.6), row("xthread", 101.5)])
    }
    assert judged["mixed"].status == g.ROSE and judged["mixed"].change_pct == pytest.approx(0.6)
    assert judged["xthread"].status == g.OK  # 1.5 % is inside xthread's 2 %
    judged = g.compare(SPEC, base, [row("mixed", 99.4), row("xthread", 100.0)])
    assert [r.status for r in judged] == [g.DROPPED, g.OK]
    assert [r.status for r in g.compare(SPEC, base, [row("mixed", 100.4)])] == [g.OK]


def test_compare_failed_new_and_other_arguments_never_pass():
    base = [row("mixed", 100.0)]
    judged = g.compare(SPEC, base, [row("mixed", None, status="timeout"), row("xthread", 90.0)])
    assert [r.status for r in judged] == [g.FAILED, g.NEW]
    moved = g.compare(SPEC, base, [row("mixed", 100.0, args=["--iters", "20"])])
    assert moved[0].status == g.NEW and g.failing(moved) == moved


def test_table_names_every_cell_and_its_change():
    text = g.table(g.compare(SPEC, [row("mixed", 80.0)], [row("mixed", 81.0)]))
    assert "| C7_SAFE | mixed | 80.00 | 81.00 | +1.25 % | ±0.5 % | ROSE |" in text


def test_toolchain_differences_are_named():
    assert g.toolchain_differences({"compiler": "gcc 12"}, {"compiler": "gcc 13"}) == [
        "compiler: baseline 'gcc 12', here 'gcc 13'"
    ]
    assert g.toolchain_differences(g.toolchain(), g.toolchain()) == []


def hakbench(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "hakbench", *args], cwd=cwd, capture_output=True, text=True
    )


def test_missing_baseline_is_one_line_exit_2(tmp_path, repo_root):
    r = hakbench("gate", "--results", str(tmp_path), cwd=repo_root)
    assert r.returncode == 2
    assert "no gate baseline" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_unknown_workload_is_exit_2(repo_root):
    r = hakbench("gate", "-w", "nosuch", cwd=repo_root)
    assert r.returncode == 2 and "not gated" in r.stderr


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_one_added_instruction_in_malloc_fails_the_gate_and_the_tree_passes(tmp_path, repo_root):
    """A copy of the tree whose malloc fast path does one extra multiply, built with the
    project's own Makefile, fails the gate on the workloads it touches; the tree itself passes.
    The baseline is the tree's own, measured here (whether the committed one is current is
    what `make test`'s own `hakbench gate` checks)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(repo_root / "Makefile", tree)
    for d in ("allocator", "harness"):
        shutil.copytree(repo_root / d, tree / d)
    wrappers = tree / "allocator" / "src" / "wrappers.c"
    text = wrappers.read_text()
    entry = re.search(r"HAK_EXPORT void \*hak_malloc\(size_t size\) \{\n", text)
    assert entry, "malloc's definition moved: update this test's patch"
    probe = (
        '    { size_t gate_probe = size; __asm__ volatile("imul %0, %0" : "+r"(gate_probe)); }\n'
    )
    wrappers.write_text(text[: entry.end()] + probe + text[entry.end() :])
    build = tree / "build"
    targets = [
        "build/fast/libhakmem.so",
        "build/bin/hakmem-options",
        "build/bench/bench_random_mixed",
        "build/bench/bench_tiny_hot",
    ]
    made = subprocess.run(
        ["make", "-s", "-j2", "-C", str(tree), *targets], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr[-2000:]
    narrow = ("-p", "C7_SAFE", "-w", "mixed", "-w", "tiny_hot", "--results", str(tmp_path))
    base = hakbench("gate", "--refresh", *narrow, cwd=repo_root)
    assert base.returncode == 0, base.stdout + base.stderr
    patched = hakbench("gate", "--build", str(build), *narrow, cwd=repo_root)
    assert patched.returncode == 1, patched.stdout + patched.stderr
    assert re.search(r"\| C7_SAFE \| mixed \|.*\| ROSE \|", patched.stdout)
    assert re.search(r"\| C7_SAFE \| tiny_hot \|.*\| ROSE \|", patched.stdout)
    assert "instructions rose on mixed, tiny_hot" in patched.stderr
    clean = hakbench("gate", *narrow, cwd=repo_root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "gate passed: 2 cells" in clean.stdout


def test_committed_baseline_records_its_toolchain(repo_root):
    doc = json.loads(g.baseline_path(repo_root / "results").read_text())
    assert doc["kind"] == "instruction-gate" and doc["toolchain"]["valgrind"]
    assert all(c["ir_per_op"] > 0 for c in doc["cells"])
