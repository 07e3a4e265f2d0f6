"""Instruction counts: exact (A/A is exactly 1.0) and sensitive (a known code path shows)."""

import dataclasses
import shutil

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths
from hakbench.core.profiles import resolve_workload
from hakbench.engine import instructions as ins
from hakbench.engine.cells import make_cell
from hakbench.engine.instructions import measure_instructions, parse_callgrind_total, pick_tool

CALLGRIND_OUT = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir
summary: 2740530
fl=(1) ???
fn=(1) main
0 12
totals: 2740530
"""

needs_harness = pytest.mark.skipif(
    pick_tool() is None or not paths.bench_binary("bench_random_mixed").exists(),
    reason="needs valgrind (or perf hardware counters) and build/bench/bench_random_mixed",
)


def tiny_workload(extra_work: str | None = None):
    """mixed_short cut to 5k iterations (callgrind is ~50x slower than native)."""
    base = resolve_workload("mixed_short")
    args = list(base.args)
    args[args.index("--iters") + 1] = "5000"
    if extra_work is not None:
        args += ["--extra-work", extra_work]
    return dataclasses.replace(base, name=f"tiny_ew{extra_work}", args=tuple(args))


def test_parse_callgrind_total_prefers_totals_line():
    assert parse_callgrind_total(CALLGRIND_OUT) == 2740530
    assert parse_callgrind_total("events: Ir\nsummary: 17\n") == 17
    assert parse_callgrind_total("events: Ir\n") is None


@needs_harness
def test_aa_is_exactly_one_and_startup_is_netted_out():
    cell = make_cell("system", tiny_workload("0"), validate=False)
    a = measure_instructions(cell)
    b = measure_instructions(cell)
    assert a["status"] == "ok", a["error"]
    assert a["ops"] == 5000
    assert 0 < a["ir_startup"] < a["ir_total"]
    assert a["ir_per_op"] == pytest.approx((a["ir_total"] - a["ir_startup"]) / 5000)
    assert b["ir_per_op"] / a["ir_per_op"] == 1.0


@needs_harness
def test_extra_work_is_detected():
    """--extra-work 1 adds a real multiply chain per op: research note says +7 % Ir/op."""
    base = measure_instructions(make_cell("system", tiny_workload("0"), validate=False))
    more = measure_instructions(make_cell("system", tiny_workload("1"), validate=False))
    assert base["status"] == more["status"] == "ok"
    assert more["ir_per_op"] / base["ir_per_op"] > 1.01


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_failed_process_is_reported():
    cell = make_cell("system", tiny_workload("-5"), validate=False)  # rejected by the harness
    r = measure_instructions(cell)
    assert r["status"] == "failed"
    assert "exit" in r["error"]


@needs_harness
def test_ab_metric_instructions_aa_is_neutral_at_exactly_one(tmp_path):
    """The ab engine's instructions path end to end: one callgrind run per side."""
    out = tmp_path / "ab"
    args = ["ab", "-a", "system", "-w", "mixed_short", "--metric", "instructions"]
    r = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = (out / "summary.csv").read_text().splitlines()
    assert rows[1].startswith("mixed_short,ir_per_op,instructions,primary,")
    assert ",1.0,1.0,1.0," in rows[1] and ",1,NEUTRAL," in rows[1]


def _count(ir, status="ok"):
    return {
        "status": status,
        "ir_per_op": ir,
        "tool": "callgrind",
        "error": None if status == "ok" else "exit 1",
    }


def test_lowest_count_keeps_the_undisturbed_interleaving_and_fails_on_any_failed_run():
    # xthread at the gate's scale: most runs at 96.53, unlucky interleavings above.
    r = ins.lowest_count([_count(99.52), _count(96.53), _count(97.43)])
    assert r["status"] == "ok" and r["ir_per_op"] == 96.53
    assert r["ir_runs"] == [99.52, 96.53, 97.43]
    single = ins.lowest_count([_count(82.8)])
    assert single["ir_per_op"] == 82.8 and single["ir_runs"] == []
    bad = ins.lowest_count([_count(96.5), _count(None, "failed")])
    assert bad["status"] == "failed" and bad["ir_per_op"] is None and bad["error"] == "exit 1"
    assert ins.lowest_count([])["status"] == "failed"


def test_threaded_workloads_are_counted_several_times_by_default():
    assert ins.default_runs(resolve_workload("xthread")) == ins.THREADED_RUNS > 1
    assert ins.default_runs(resolve_workload("mid_large_mt")) == ins.THREADED_RUNS
    assert ins.default_runs(resolve_workload("mixed")) == 1
