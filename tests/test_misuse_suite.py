"""hakbench misuse with mimalloc-bench's security probes, on the tests' stand-in suite
(tests/data/mimalloc-bench-standin: its bench/security/ holds small probes written for the
lab, shaped like the suite's): the NOT_CAUGHT contract under real glibc and libhakmem, the
benign-program rule (a broken allocator built here gets no credit), the every-run rule, a
run killed and resumed, and the scorecard's two sets."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CHANCE

from hakbench.cli import main
from hakbench.core import suites
from hakbench.engine import engine, suite_build
from hakbench.experiments import misuse, misuse_suite
from hakbench.report.misuse_md import scorecard_section
from hakbench.tables import misuse_suite_model
from hakbench.tables.misuse_model import pattern_records, rows_of

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "tests" / "data" / "mimalloc-bench-standin"
HAKMEM_FAST = REPO / "build" / "fast" / "libhakmem.so"
GLIBC_AND_FAST = ("-a", "system", "-a", "hakmem", "--variant", "fast", "-n", "1")
needs_build = pytest.mark.skipif(not HAKMEM_FAST.exists(), reason="run `make build` first")

# An allocator that stops every program: its malloc aborts. By the NOT_CAUGHT contract
# alone it would "catch" every probe.
ABORTING_MALLOC = r"""
#include <stdlib.h>
void *malloc(size_t n) { (void)n; abort(); }
"""


@pytest.fixture(autouse=True)
def _no_suite_from_the_caller(monkeypatch):
    for var in (suites.ENV_VAR, misuse.HARDENED_ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def standin_build() -> Path:
    return suite_build.ensure_built(STANDIN)


def invoke(out: Path, *args: str):
    return CliRunner().invoke(
        main, ["misuse", "--suite-dir", str(STANDIN), "--out", str(out), *args]
    )


def records_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "probes.jsonl").read_text().splitlines()]


def test_the_probes_are_the_security_directorys_programs(standin_build):
    names = misuse_suite.list_probes(standin_build)
    c_probes = ("caught_by_chance", "double_free", "no_misuse", "write_after_free")
    assert sorted(names) == sorted(
        [f"{p}_{s}" for p in c_probes for s in ("small", "medium", "large")] + ["double_delete"]
    )
    assert names[:4] == [
        "caught_by_chance_small",
        "caught_by_chance_medium",
        "caught_by_chance_large",
        "double_delete",
    ]
    assert misuse_suite_model.probe_program("double_free_large") == ("double_free", "large")
    assert misuse_suite_model.probe_program("double_delete") == ("double_delete", "")
    listed = CliRunner().invoke(main, ["misuse", "--suite-dir", str(STANDIN), "--list", "-P", "d*"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.split() == [
        "double_delete",
        *(f"double_free_{s}" for s in ("small", "medium", "large")),
    ]


@needs_build
def test_glibc_and_libhakmem_by_the_not_caught_contract(standin_build, tmp_path):
    out = tmp_path / "run"
    wanted = ["double_free_small", "double_free_large", "write_after_free_medium", "double_delete"]
    result = invoke(
        out,
        *GLIBC_AND_FAST,
        *(x for w in wanted for x in ("-P", w)),
    )
    assert result.exit_code == 0, result.output
    rows = {(r["label"], r["probe"]): r for r in misuse_suite_model.rows_of(records_of(out))}
    assert len(rows) == 8
    for label in ("system", "hakmem:fast"):
        df = rows[label, "double_free_small"]
        assert (df["outcome"], df["ended"], df["counted"]) == ("caught", "SIGABRT", 1)
        waf = rows[label, "write_after_free_medium"]
        assert (waf["outcome"], waf["ended"], waf["counted"]) == ("not-caught", "exit 0", 0)
        assert rows[label, "double_delete"]["outcome"] == "caught"
    assert "double free" in rows["system", "double_free_small"]["stderr_first"]
    assert rows["hakmem:fast", "double_free_small"]["stderr_first"].startswith(
        "hakmem: free(): double free"
    )
    assert "| system | ran 3 of 3 | 3 of 4 |" in result.output
    assert "| **hakmem:fast** | ran 3 of 3 | 3 of 4 |" in result.output
    benign = [r for r in records_of(out) if r["set"] == "benign"]
    assert [b["program"] for b in benign] == ["cfrac", "mstress", "mleak"] * 2
    assert all("libhakmem.so" in b["malloc_impl"] for b in benign if b["label"] == "hakmem:fast")
    table = (out / misuse_suite_model.SUITE_CSV).read_text().splitlines()
    assert table[0].split(",") == list(misuse_suite_model.CSV_FIELDS) and len(table) == 9
    md = (out / "misuse.md").read_text()
    assert "| write_after_free | M | ✘ | ✘ |" in md and "## Our patterns" not in md
    meta = json.loads((out / "meta.json").read_text())
    assert meta["suite"]["commit"] == suite_build.suite_commit(STANDIN)
    assert meta["suite"]["probes"] == misuse_suite_model.probe_order(wanted)


def test_an_allocator_that_fails_the_benign_programs_gets_no_credit(standin_build, tmp_path):
    src = tmp_path / "aborting.c"
    src.write_text(ABORTING_MALLOC)
    lib = tmp_path / "libaborting.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    out = tmp_path / "run"
    result = invoke(
        out,
        "-a",
        "system",
        "-a",
        f"aborting={lib}",
        "-n",
        "1",
        "-P",
        "no_misuse_small",
        "-P",
        "write_after_free_small",
        "-P",
        "double_free_small",
    )
    assert result.exit_code == 0, result.output
    records = records_of(out)
    usable = misuse_suite_model.usability(records)
    assert usable["system"].usable and not usable["aborting"].usable
    assert usable["aborting"].reason.startswith("cfrac: SIGABRT")
    rows = misuse_suite_model.rows_of(records)
    mine = [r for r in rows if r["label"] == "aborting"]
    # by the contract alone it caught all three, even the program with no misuse at all
    assert [r["outcome"] for r in mine] == ["caught"] * 3
    assert [r["counted"] for r in mine] == [0, 0, 0] and all(r["usable"] == 0 for r in mine)
    counts = {c.label: c for c in misuse_suite_model.counts(rows, records)}
    assert (counts["aborting"].counted, counts["system"].counted) == (0, 1)
    assert "not counted (3 of 3 by the contract alone)" in result.output
    assert "**not usable**: cfrac: SIGABRT" in result.output
    assert "aborting *not usable*" in (out / "misuse.md").read_text()


def test_a_probe_caught_in_some_runs_only_is_not_caught(standin_build, tmp_path):
    out = tmp_path / "run"
    result = invoke(out, "-a", "system", "-n", "20", "-P", "caught_by_chance_small")
    assert result.exit_code == 0, result.output
    [row] = misuse_suite_model.rows_of(records_of(out))
    # a coin toss per run: all 20 alike has probability 2 in 2^20
    assert row["outcome"] == "sometimes" and 0 < row["caught_runs"] < 20 and row["runs"] == 20
    assert row["counted"] == 0 and row["ended"] == "SIGABRT"
    assert row["split"] in (
        f"caught {row['caught_runs']}, not-caught {20 - row['caught_runs']}",
        f"not-caught {20 - row['caught_runs']}, caught {row['caught_runs']}",
    )
    assert f"| caught_by_chance | S | {row['caught_runs']}/20 |" in (out / "misuse.md").read_text()
    share = f"{row['caught_runs']} of 20"
    assert f"| system | ran 3 of 3 | 0 of 1 | 0 | 0 | 1 | 0 | 0 | 0 | {share}" in result.output


REAL = Path(__file__).parent / "data" / "misuse_suite_records.jsonl"  # from the 2026-11-28 refresh


@pytest.mark.parametrize(
    "label, probe, outcome, caught_runs, ended, stderr",
    [
        ("system", "double_free_small", "caught", 3, "SIGABRT", "free(): double free detected"),
        ("system", "write_after_free_large", "caught", 3, "SIGSEGV", ""),  # unmapped on free
        ("system", "zero_on_malloc_large", "caught", 3, "exit 0", ""),  # a fresh mmap is zeroed
        ("system", "read_zero_size_small", "not-caught", 0, "exit 0", ""),  # after a NUL byte
        ("tcmalloc", "invalid_free_stack_small", "caught", 3, "SIGABRT", "src/tcmalloc.cc"),
        ("hakmem:fast", "double_free_small", "caught", 3, "SIGABRT", "hakmem: free(): double"),
        ("hardened_malloc", "invalid_free_close_small", "caught", 3, "SIGABRT", "fatal allocator"),
        ("hardened_malloc", "one_byte_underflow_medium", "sometimes", 1, "SIGSEGV", ""),
        ("hakmem:secure", "one_mbyte_underflow_large", "sometimes", 2, "SIGSEGV", ""),
        ("mimalloc", "invalid_free_stack_medium", "sometimes", 2, "SIGSEGV", ""),
    ],
)
def test_real_probe_records_are_classified(label, probe, outcome, caught_runs, ended, stderr):
    records = [json.loads(line) for line in REAL.read_text().splitlines()]
    rows = {(r["label"], r["probe"]): r for r in misuse_suite_model.rows_of(records)}
    row = rows[label, probe]
    assert (row["outcome"], row["caught_runs"], row["runs"], row["ended"]) == (
        outcome,
        caught_runs,
        3,
        ended,
    )
    assert row["stderr_first"].startswith(stderr)
    assert row["counted"] == int(outcome == "caught")  # both ran the benign programs
    if outcome == "sometimes":
        assert row["split"] and row["note"] == ""


def test_real_benign_runs_pass_their_checks():
    records = [json.loads(line) for line in REAL.read_text().splitlines()]
    benign = [r for r in records if r["set"] == "benign"]
    assert {misuse_suite_model.benign_problem(r) for r in benign} == {""}
    cfrac = next(r for r in benign if r["label"] == "system" and r["program"] == "cfrac")
    wrong = {**cfrac, "stdout": cfrac["stdout"].replace(" * 468551", " * 468552")}
    assert "do not multiply" in misuse_suite_model.benign_problem(wrong)
    elsewhere = next(r for r in benign if r["label"] == "hardened_malloc")
    moved = {**elsewhere, "malloc_impl": "/lib/x86_64-linux-gnu/libc.so.6"}
    assert "not libhardened_malloc.so" in misuse_suite_model.benign_problem(moved)
    assert misuse_suite_model.benign_problem({**cfrac, "returncode": -6, "stderr": "x\n"}) == (
        "SIGABRT: x"
    )
    partial = [r for r in records if not (r["label"] == "system" and r.get("program") == "mleak")]
    usable = misuse_suite_model.usability(partial)
    assert usable["hakmem:fast"].usable and not usable["system"].usable
    assert usable["system"].reason == "mleak: not run"  # a run stopped among them


def test_how_a_process_ended_is_kept():
    def run(**kw):
        base = {"returncode": 0, "timed_out": False, "stdout": "", "stderr": ""}
        return misuse_suite_model.classify_run({**base, **kw})

    assert run().outcome == "caught" and "prevented" in run().note  # exit 0, no NOT_CAUGHT
    late = run(stdout="NOT_CAUGHT\n", returncode=-11)
    assert (late.outcome, late.ended, late.note) == (
        "not-caught",
        "SIGSEGV",
        "late crash: NOT_CAUGHT, then SIGSEGV",
    )
    hung = run(returncode=-9, timed_out=True)
    assert (hung.outcome, hung.ended) == ("hung", "timeout")
    assert run(returncode=-9).outcome == "error"  # a SIGKILL from outside is no check
    refused = run(returncode=127, stderr="ERROR: ld.so: object 'x.so' cannot be preloaded\n")
    assert refused.outcome == "error"
    assert run(returncode=None, stderr="cannot start x\n").outcome == "error"
    assert run(
        returncode=1, stderr="hardened_malloc: fatal allocator error: invalid free\n"
    ).stderr_first.startswith("hardened_malloc:")


def test_a_killed_run_resumes_with_its_finished_probes(standin_build, tmp_path):
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "hakbench",
        "misuse",
        "--suite-dir",
        str(STANDIN),
        "-a",
        "system",
        "-n",
        "4",
        "-P",
        "*",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    total = 3 + 13 * 4
    deadline = time.monotonic() + 60
    probes = out / misuse.PROBES_FILE
    while not (probes.exists() and probes.read_text().count("\n") >= 10):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = probes.read_text()
    kept = before.count("\n")
    if kept >= total:
        pytest.skip(CHANCE + "the run finished before the kill")
    resumed = CliRunner().invoke(main, ["misuse", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    text = probes.read_text()
    assert text.startswith(before.rsplit("\n", 1)[0])  # nothing stored is lost
    records = records_of(out)
    assert len(records) == total == len({engine.key(r) for r in records})
    assert len(misuse_suite_model.rows_of(records)) == 13
    assert json.loads((out / "meta.json").read_text())["resumed"]


@needs_build
def test_the_scorecard_counts_both_sets(standin_build, tmp_path):
    out = tmp_path / "run"
    result = invoke(
        out,
        *GLIBC_AND_FAST,
        "-p",
        "double-free-tiny",
        "-p",
        "uaf-read-mid",
        "-P",
        "double_free_small",
        "-P",
        "write_after_free_small",
    )
    assert result.exit_code == 0, result.output
    records = records_of(out)
    meta = json.loads((out / "meta.json").read_text())
    rows = rows_of(pattern_records(records))
    assert len(rows) == 4  # the suite's records are not read as patterns
    md = scorecard_section(rows, meta, "misuse", records)
    assert md.startswith("## Heap misuse") and md == scorecard_section(
        rows, meta, "misuse", records
    )
    assert "| allocator | our patterns caught | the suite's probes caught (every run) |" in md
    assert "| system | 1 of 2 | 1 of 2 |" in md
    assert "### Our patterns" in md and "### The suite's security probes (mimalloc-bench)" in md
    assert "| double_free | S | ✔ | ✔ |" in md and "| write_after_free | S | ✘ | ✘ |" in md
    assert "Anchors: glibc (`system`)." in md and "hakbench scorecard --refresh --misuse" in md
