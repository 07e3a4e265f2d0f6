"""Engagement, declared once (issue 14): each options-table row names the stats counters
that prove its switch acted, `hakmem-options --json` exports them, and `hakbench ab`
checks every switch that differs between A and B against them, on the real allocator.

The lean memory policy (C7_SAFE + HAKMEM_SS_MEM_LEAN=1, what BALANCED adds besides keeping
the 32-256 KiB classes off) acts on `burst`, which empties superslabs, and never on `mixed`,
whose working set never empties one."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.collect.allocstats import counter
from hakbench.core import paths
from hakbench.engine.cells import make_cell
from hakbench.engine.probes import load_options
from hakbench.engine.runner import run_sample

pytestmark = pytest.mark.skipif(
    not (paths.build_dir() / "stats" / "libhakmem.so").exists()
    or not paths.options_binary().exists(),
    reason="make build first",
)

SWITCHES_THAT_ACT = (
    "HAKMEM_SS_MEM_LEAN",
    "HAKMEM_SS_CACHE_SIZE",
    "HAKMEM_TINY_HEAP_PROFILE",
    "HAKMEM_TINY_HOTHEAP_V2",
    "HAKMEM_SMALL_HEAP_V3_ENABLED",
)


def test_the_options_table_declares_counters_and_the_stats_build_prints_them():
    table = {o["name"]: o["counters"] for o in load_options()}
    for name in SWITCHES_THAT_ACT:
        assert table[name], f"{name} declares no counter"
    assert "SS_OS_STATS.slot_purge_kb" in table["HAKMEM_SS_MEM_LEAN"]
    assert table["HAKMEM_STATS"] == []  # prints, does not act
    # every declared counter is a real one: a stats-build run with every group printed
    cell = make_cell("hakmem", "mixed_short", variant="stats", profile="C7_SAFE")
    sample = run_sample(cell, phase="observe", perf=False, stats=True)
    assert sample["status"] == "ok", sample["error"]
    declared = {c for counters in table.values() for c in counters}
    missing = sorted(c for c in declared if counter(sample["alloc_stats"], c) is None)
    assert not missing, f"declared but not printed by the stats build: {missing}"


LEAN = ("--set", "HAKMEM_SS_MEM_LEAN=1")  # against C7_SAFE: the lean policy alone


def _ab(tmp_path: Path, workload: str, *extra: str, profile: str = "C7_SAFE") -> tuple[str, dict]:
    out = tmp_path / workload
    argv = ["ab", "--profile", profile, "--baseline", "C7_SAFE", "-w", workload, *extra]
    argv += ["--runs", "3", "--warmup", "0", "--perf", "off", "--out", str(out)]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.output
    return r.output, json.loads((out / "engagement.json").read_text())[workload]


def test_lean_policy_is_not_engaged_on_mixed(tmp_path):
    # mixed never empties a page slot, so the lean policy has nothing to give back there, and
    # since issue #38 it shares small superslabs between classes as speed-first does (it gave
    # each group of classes superslabs of its own before, which moved the superslab count):
    # every counter it names is equal on both sides, and the row says NOT-ENGAGED instead of a
    # verdict on a switch that did nothing
    output, e = _ab(tmp_path, "mixed", *LEAN)
    assert e["status"] == "not-engaged", e
    assert e["switches"] == {"HAKMEM_SS_MEM_LEAN": "not-engaged"}
    alloc = re.search(r"SS_OS_STATS\.alloc A=(\d+) B=(\d+)", e["detail"])
    assert alloc and alloc.group(1) == alloc.group(2), e["detail"]
    row = next(line for line in output.splitlines() if line.startswith("mixed "))
    assert "NOT-ENGAGED" in row


def test_a_switch_that_never_acts_is_not_engaged_naming_its_counters(tmp_path):
    # the lean policy's target matters only under the lean policy: off under C7_SAFE
    output, e = _ab(tmp_path, "mixed", "--set", "HAKMEM_SS_MEM_LEAN_TARGET_MB=4", profile="C7_SAFE")
    assert e["status"] == "not-engaged"
    assert "SS_OS_STATS.madvise A=0 B=0" in e["detail"]
    row = next(line for line in output.splitlines() if line.startswith("mixed "))
    assert "NOT-ENGAGED" in row
    assert "mixed: NOT-ENGAGED: HAKMEM_SS_MEM_LEAN_TARGET_MB: not-engaged (SS_OS_STATS" in output


def test_lean_policy_is_engaged_on_burst(tmp_path):
    output, e = _ab(tmp_path, "burst", *LEAN)
    assert e["status"] == "engaged", e
    assert e["switches"] == {"HAKMEM_SS_MEM_LEAN": "engaged"}
    row = next(line for line in output.splitlines() if line.startswith("burst "))
    assert "NOT-ENGAGED" not in row and " engaged " in row


def test_partial_when_one_differing_switch_acts_and_another_does_not(tmp_path):
    # HotHeap v2 takes class 7 (513-1024 B), which mixed allocates; the lean target idles
    # without the lean policy
    output, e = _ab(
        tmp_path,
        "mixed",
        "--set",
        "HAKMEM_SS_MEM_LEAN_TARGET_MB=4",
        "--set",
        "HAKMEM_TINY_HOTHEAP_V2=1",
        profile="C7_SAFE",
    )
    assert e["status"] == "partial", e
    assert e["switches"] == {
        "HAKMEM_SS_MEM_LEAN_TARGET_MB": "not-engaged",
        "HAKMEM_TINY_HOTHEAP_V2": "engaged",
    }
    assert "mixed: PARTIAL:" in output
