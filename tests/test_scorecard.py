"""hakbench scorecard: refresh into stored samples, rebuild from them alone, byte for byte,
and --check catching files that no longer match. One real quick refresh (hakmem and
mimalloc on mixed_short) feeds the tests; nothing here asserts on time.
"""

import datetime as _dt
import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.experiments import scorecard, scorecard_refresh
from hakbench.tables import scorecard_model
from hakbench.tables.misuse_model import pattern_records

TINY = """
name = "tiny-scorecard"
runs = 4
quick_runs = 2
warmup = 1
seed = 5
reference = { allocator = "mimalloc" }
[axes]
allocator = ["hakmem", "mimalloc"]
workload = ["mixed_short"]
"""
FILES = (
    "scorecard.csv",
    "SCORECARD.md",
    "history.csv",
    "plots/throughput.png",
    "plots/ratio_to_mimalloc.png",
    "plots/history.png",
)


@pytest.fixture(scope="module")
def matrix_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("matrix") / "tiny.toml"
    p.write_text(TINY)
    return p


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory, matrix_file) -> Path:
    results = tmp_path_factory.mktemp("results")
    scorecard_refresh.refresh(results, matrix=matrix_file, quick=True)
    return results


@pytest.fixture
def results(refreshed, tmp_path) -> Path:
    """A private copy of the refreshed results directory, free to edit."""
    copy = tmp_path / "results"
    shutil.copytree(refreshed, copy, ignore=shutil.ignore_patterns("runs"))
    return copy


def stored(results: Path) -> list[dict]:
    text = (results / "scorecard" / "samples.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_refresh_stores_compact_samples_and_writes_every_file(refreshed):
    for name in FILES:
        assert (refreshed / name).is_file(), name
    samples = stored(refreshed)
    assert len(samples) == 2 * (1 + 2)  # quick: 2 measured rounds and the warm-up
    assert all(s["status"] == "ok" for s in samples), [s.get("error") for s in samples]
    for s in samples:
        assert "stderr_tail" not in s and "env" not in s and "alloc_stats" not in s
        assert s["metrics"]["throughput"] > 0 and s["metrics"]["maxrss_kb"] > 0
    meta = json.loads((refreshed / "scorecard" / "meta.json").read_text())
    assert meta["quick"] is True and meta["matrix"]["runs"] == 2
    assert [c["label"] for c in meta["cells"]] == ["hakmem:fast", "mimalloc"]
    md = (refreshed / "SCORECARD.md").read_text()
    assert "### mixed_short" in md and "**quick** refresh" in md
    assert "| hakmem:fast | " in md and "| mimalloc | " in md and "reference" in md
    rows = (refreshed / "scorecard.csv").read_text().splitlines()
    assert rows[0] == ",".join(scorecard.CSV_FIELDS)
    assert [r.split(",")[5] for r in rows[1:]] == ["throughput", "maxrss_kb", "minflt"] * 2
    assert len((refreshed / "history.csv").read_text().splitlines()) == 1 + 2


def test_regeneration_is_byte_identical(results, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    scorecard.render(results, first)
    scorecard.render(results, second)
    for name in FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
        assert (first / name).read_bytes() == (results / name).read_bytes(), name


def test_check_passes_and_then_catches_an_edited_csv(results):
    runner = CliRunner()
    ok = runner.invoke(main, ["scorecard", "--check", "--results", str(results)])
    assert ok.exit_code == 0, ok.output
    csv_file = results / "scorecard.csv"
    lines = csv_file.read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[9] = str(int(fields[9]) * 2)  # double hakmem's median throughput
    lines[1] = ",".join(fields)
    csv_file.write_text("".join(lines))
    bad = runner.invoke(main, ["scorecard", "--check", "--results", str(results)])
    assert bad.exit_code == 1
    assert "--- committed scorecard.csv" in bad.output
    assert "-" + lines[1].rstrip("\n") in bad.output
    assert "1 file(s) differ" in bad.output


def test_adopting_a_run_already_in_history_is_refused(refreshed, results, matrix_file):
    (run_dir,) = (refreshed / "runs").iterdir()
    before = {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="already holds the refresh"):
        scorecard_refresh.adopt_finished(run_dir, results, matrix=matrix_file)
    after = {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()}
    assert after == before, "a refused adoption changes nothing"


def test_check_catches_a_stale_plot_and_a_missing_file(results):
    (results / "plots" / "old_workload.png").write_bytes(b"\x89PNG")
    (results / "SCORECARD.md").unlink()
    problems = scorecard.check(results)
    assert any("SCORECARD.md: missing" in p for p in problems)
    assert any("old_workload.png: not produced" in p for p in problems)


def test_history_is_append_only_across_refreshes(results, matrix_file):
    before = (results / "history.csv").read_text()
    # A refresh is known by its start second and commit: start this one a second later
    # than the fixture's (a tiny quick matrix can finish within the second it began).
    first = json.loads((results / "scorecard" / "meta.json").read_text())["date"]
    while _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds") <= first:
        time.sleep(0.05)
    gate_baseline = results / "scorecard" / "gate.json"
    gate_baseline.write_text('{"cells": []}\n')  # the gate's file beside the samples
    scorecard_refresh.refresh(results, matrix=matrix_file, quick=True)
    assert gate_baseline.read_text() == '{"cells": []}\n', "a refresh keeps the gate's baseline"
    after = (results / "history.csv").read_text()
    assert after.startswith(before), "earlier refreshes' rows stay as they were"
    new_rows = after[len(before) :].splitlines()
    assert len(new_rows) == 2 and {r.split(",")[3] for r in new_rows} == {"hakmem:fast", "mimalloc"}
    scorecard.render(results)  # a plain rebuild keeps the history as it is
    assert (results / "history.csv").read_text() == after
    assert "2 refresh(es)" in (results / "SCORECARD.md").read_text()
    assert scorecard.check(results) == []


def test_a_failed_cell_stays_in_the_scorecard_with_its_reason(results):
    meta = json.loads((results / "scorecard" / "meta.json").read_text())
    hakmem_key = meta["cells"][0]["key"]
    samples = stored(results)
    for s in samples:
        if s["cell"] == hakmem_key:
            s.update(status="failed", error="killed by signal 11 (Segmentation fault)", metrics={})
    (results / "scorecard" / "samples.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in samples)
    )
    scorecard.render(results)
    row = (results / "scorecard.csv").read_text().splitlines()[1].split(",")
    assert row[:2] == ["mixed_short", "hakmem"] and row[6:9] == ["failed", "0", "2"]
    assert row[-1] == "killed by signal 11 (Segmentation fault)"
    md = (results / "SCORECARD.md").read_text()
    assert "| hakmem:fast | **failed**: killed by signal 11 (Segmentation fault) |" in md
    assert "hakmem:fast not counted on: mixed_short (hakmem:fast failed)" in md


def _synthetic(workloads: dict[str, tuple[float | None, float]]) -> scorecard_model.Scorecard:
    """hakmem and mimalloc per workload with constant throughput (None: hakmem failed)."""
    cells, samples = [], []
    for w, (hakmem, mimalloc) in workloads.items():
        for alloc, value in (("hakmem", hakmem), ("mimalloc", mimalloc)):
            coords = {"workload": w, "allocator": alloc}
            cells.append({"key": f"{alloc}|{w}", "label": alloc, "coords": coords})
            for r in range(3):
                ok = value is not None
                samples.append(
                    {
                        "cell": f"{alloc}|{w}",
                        "round": r,
                        "phase": "measure",
                        "status": "ok" if ok else "failed",
                        "error": None if ok else "exit status 1",
                        "metrics": {"throughput": value} if ok else {},
                    }
                )
    meta = {
        "date": "2026-01-01T00:00:00+00:00",
        "git": {"commit": "0" * 40, "dirty": False},
        "matrix": {"reference": {"allocator": "mimalloc"}},
        "cells": cells,
    }
    return scorecard.build_scorecard(samples, meta, [])


def test_geomean_counts_matched_workloads_only():
    card = _synthetic({"a": (50.0, 100.0), "b": (200.0, 100.0), "c": (None, 100.0)})
    (st,) = card.standings()
    assert st.label == "hakmem"
    assert st.geomean == pytest.approx(1.0)  # sqrt(0.5 * 2.0); c is not counted as 0
    assert st.matched == ["a", "b"]
    assert st.unmatched == [("c", "hakmem failed")]
    assert st.at_least == {"M1": 2, "M2": 1, "M3": 1}
    assert st.milestone == "M3"
    assert scorecard_model.milestone_of(0.79) == "M1" and scorecard_model.milestone_of(0.49) is None


def test_no_stored_samples_is_a_clear_exit_2(tmp_path):
    for args in ([], ["--check"]):
        result = CliRunner().invoke(main, ["scorecard", "--results", str(tmp_path), *args])
        assert result.exit_code == 2
        assert "no stored scorecard samples" in result.output
        assert "hakbench scorecard --refresh" in result.output


def test_compact_sample_keeps_stderr_only_of_a_failed_sample():
    ok = {"status": "ok", "stderr_tail": "noise", "env": {"A": "1"}, "metrics": {"ipc": 1}}
    bad = {"status": "failed", "stderr_tail": "Segmentation fault", "error": "exit status 139"}
    assert "stderr_tail" not in scorecard_refresh.compact_sample(ok)
    assert "env" not in scorecard_refresh.compact_sample(ok)
    assert scorecard_refresh.compact_sample(ok)["metrics"] == {}
    assert scorecard_refresh.compact_sample(bad)["stderr_tail"] == "Segmentation fault"


TINY_APPS = """
name = "tiny-apps"
runs = 2
warmup = 0
seed = 5
reference = { allocator = "mimalloc" }
[axes]
allocator = ["system", "mimalloc"]
workload = ["xmalloc"]
"""


def test_apps_section_is_stored_apart_rendered_into_the_scorecard_and_checked(results, tmp_path):
    apps_file = tmp_path / "apps.toml"
    apps_file.write_text(TINY_APPS.replace('"xmalloc"', '"xmalloc_short"'))
    scorecard_refresh.refresh(results, matrix=apps_file, apps=True)
    stored_apps = results / scorecard.APPS_STORED_DIR / "samples.jsonl"
    assert stored_apps.exists() and (results / "scorecard" / "samples.jsonl").exists()
    md = (results / "SCORECARD.md").read_text()
    assert "## Applications and stress: tiny-apps" in md
    assert "![time](plots/apps_time.png)" in md and "| xmalloc_short | system |" in md
    for chart in ("apps_time.png", "apps_memory.png"):
        assert (results / "plots" / chart).stat().st_size > 0
    assert scorecard.check(results) == []
    rows = [json.loads(line) for line in stored_apps.read_text().splitlines()]
    for r in rows:
        if r["metrics"].get("maxrss_kb"):
            r["metrics"]["maxrss_kb"] *= 3
    stored_apps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert any("SCORECARD.md" in p for p in scorecard.check(results))


def test_misuse_section_is_stored_apart_rendered_and_checked(results, monkeypatch):
    from hakbench.core import suites
    from hakbench.experiments import misuse

    # the suite's probes from the tests' stand-in suite (tests/test_misuse_suite.py)
    monkeypatch.setenv(
        suites.ENV_VAR, str(Path(__file__).parent / "data" / "mimalloc-bench-standin")
    )
    monkeypatch.delenv(misuse.HARDENED_ENV, raising=False)
    monkeypatch.setattr(misuse, "DEFAULT_ALLOCATORS", ("system", "hakmem"))
    monkeypatch.setattr(misuse, "HAKMEM_VARIANTS", ["fast"])
    monkeypatch.setattr(
        misuse, "list_patterns", lambda build=None: ["double-free-tiny", "uaf-read-mid"]
    )
    stored = results / scorecard.MISUSE_DIR
    stored.mkdir(parents=True)  # the builds' costs, measured apart, stay across a refresh
    (stored / "build_costs.csv").write_text(
        "allocator,workload,ir_per_op,peak_rss_kb\nhakmem:fast,mixed,80.00,2000\n"
    )
    scorecard_refresh.refresh_misuse(results)
    assert (stored / "build_costs.csv").exists()
    assert "| mixed Ir/op |" in (results / "SCORECARD.md").read_text()
    records = [json.loads(line) for line in (stored / "probes.jsonl").read_text().splitlines()]
    assert len(pattern_records(records)) == 2 * 2 * misuse.RUNS
    md = (results / "SCORECARD.md").read_text()
    assert "## Heap misuse" in md and "| double-free-tiny | ✔ | ✔ |" in md
    assert "| double_free | S M L | ✔ ✔ ✔ | ✔ ✔ ✔ |" in md
    assert (stored / "suite-probes.csv").exists()
    assert "`hakbench scorecard --refresh --misuse`" in md
    assert (stored / "misuse.csv").read_text().count("\nhakmem,fast,hakmem:fast,") == 2
    assert scorecard.check(results) == []
    for r in records:  # pretend libhakmem let the double free through
        if r["label"] == "hakmem:fast" and r.get("pattern") == "double-free-tiny":
            r.update(returncode=0, signal=None, stderr="", stdout=r["stdout"] + "end=1\n")
    (stored / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    problems = scorecard.check(results)
    assert any("SCORECARD.md" in p for p in problems)
    assert any("misuse/misuse.csv" in p for p in problems)
    scorecard.render(results)
    assert "| double-free-tiny | ✔ | ✘ |" in (results / "SCORECARD.md").read_text()
    # each build's cost beside its count, from the stored cost file (a ratio to the fast build)
    (stored / "build_costs.csv").write_text(
        "allocator,workload,ir_per_op,peak_rss_kb\n"
        "hakmem:fast,mixed,80.00,2000\nhakmem:secure,mixed,160.00,2500\n"
        "hardened_malloc,mixed,,9000\n"
    )
    assert any("SCORECARD.md" in p for p in scorecard.check(results))
    scorecard.render(results)
    md = (results / "SCORECARD.md").read_text()
    assert "| **hakmem:secure** | — | 160.00 (2.00x) |" in md
    assert "| **hakmem:fast** | " in md and "| 80.00 |" in md
    assert "| hardened_malloc | — | — |" in md and "| 9000 (4.50x) |" in md
    assert scorecard.check(results) == []


def test_misuse_refresh_options_go_together(tmp_path):
    runner = CliRunner()
    for args in (
        ["--misuse"],
        ["--refresh", "--misuse", "--quick"],
        ["--refresh", "--misuse", "--apps"],
    ):
        result = runner.invoke(main, ["scorecard", "--results", str(tmp_path), *args])
        assert result.exit_code == 2, args
        assert "--misuse" in result.output
