"""hakbench publish without a browser: the history read from every committed refresh (each on
its machine's line), commits in first-parent order, the regressions runs flagged, the
scorecard's summaries made one workload at a time, and bad input. The pages themselves are
opened in Chromium by test_publish_browser.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.experiments import publish as pub
from hakbench.experiments import scorecard as sc
from hakbench.tables.history_model import summaries_of

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
RUNS = REPO / "tests" / "data" / "publish-runs"


def git(root: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
    }
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    return root


def cut(workloads) -> tuple[list[dict], dict]:
    """The committed refresh cut to some workloads' cells (a small stored scorecard)."""
    samples, meta = sc.load_stored(RESULTS)
    cells = [c for c in meta["cells"] if c["coords"]["workload"] in workloads]
    keys = {c["key"] for c in cells}
    return [s for s in samples if s.get("cell") in keys], {**meta, "cells": cells}


def test_summaries_one_workload_at_a_time_are_the_scorecards():
    samples, meta = cut(("mixed", "xthread"))
    assert summaries_of(samples, meta, sc.REPORT_METRICS) == (
        sc.build_scorecard(samples, meta, []).by_metric
    )


def test_commits_stand_in_first_parent_order_a_side_commit_at_its_merge(repo):
    c1 = commit(repo, "c1")
    git(repo, "checkout", "-q", "-b", "side")
    s1 = commit(repo, "s1")
    git(repo, "checkout", "-q", "main")
    c2 = commit(repo, "c2")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    c3 = commit(repo, "c3")
    label = {c: c[:12] for c in (c1, s1, c2, c3)}
    given = [
        ("unknown", None, "2026-01-01"),
        (label[c3], c3, "2026-01-05"),
        (label[s1] + "+dirty", s1, "2026-01-04"),
        (label[s1], s1, "2026-01-03"),
        (label[c1], c1, "2026-01-09"),
        (label[c2], c2, "2026-01-02"),
    ]
    assert pub.commit_order(given, repo) == [
        label[c1],
        label[c2],
        label[s1],  # entered the line with the merge, after c2
        label[s1] + "+dirty",  # a tree with uncommitted changes: just after its commit
        label[c3],
        "unknown",  # git does not know it: last
    ]


def store(results: Path, samples: list[dict], meta: dict) -> None:
    d = results / sc.STORED_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def test_history_reads_every_committed_refresh_each_on_its_machines_line(repo):
    samples, meta = cut(("mixed",))
    results = repo / "results"
    first = {
        **meta,
        "date": "2026-11-20T10:00:00+00:00",
        "run_id": "r1",
        "full_run": "r1",
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "cpu_count": 2,
        "git": {"commit": "a" * 40, "dirty": False},
    }
    store(results, samples, first)
    stored_first = commit(repo, "first refresh")
    second = {**meta, "date": "2026-11-21T10:00:00+00:00", "run_id": "r2", "full_run": "r2"}
    store(results, samples, second)
    stored_second = commit(repo, "second refresh")
    (results / sc.STORED_DIR / "meta.json").write_text("{")  # a version no reader knows
    commit(repo, "a broken meta.json")
    third = {**meta, "date": "2026-11-22T10:00:00+00:00", "run_id": "r3", "full_run": "r3"}
    store(results, samples, third)  # on disk, not committed

    card = pub.stored_scorecard(results)
    points = pub.stored_refreshes(results, card)
    refreshes = {p.refresh.run_id: p.refresh for p in points}
    assert sorted(refreshes) == ["r1", "r2", "r3"]
    assert refreshes["r1"].stored_in == stored_first
    assert refreshes["r2"].stored_in == stored_second
    assert refreshes["r3"].stored_in is None
    assert refreshes["r1"].machine != refreshes["r2"].machine == refreshes["r3"].machine
    assert refreshes["r1"].machine.short == "Intel Xeon ×2"
    throughput = [p for p in points if p.metric == "throughput" and p.label == "mimalloc"]
    assert len(throughput) == 3 and all(p.low < p.value < p.high for p in throughput)
    assert {p.metric for p in points} == {"throughput", "ir_per_op", "maxrss_kb"}


def test_flags_are_an_abs_no_go_and_a_gates_rise(tmp_path):
    ab = pub.read_run(RUNS / "ab-lean-policy", RESULTS)
    flags = pub.flags_of([ab])
    # the lean policy's NO-GO guardrails on mixed (its primary verdicts were INCONCLUSIVE)
    assert [(f.workload, f.metric) for f in flags] == [
        ("mixed", "maxrss_kb"),
        ("mixed", "page_faults"),
    ]
    assert flags[0].commit == "3950ec1442f9" and flags[0].run_id == "ab-lean-policy"
    assert flags[0].what == "ab NO-GO: maxrss_kb B/A 1.0130 [1.0114, 1.0148]"

    gate = pub.read_run(RUNS / "gate", RESULTS)
    assert gate.gate and pub.flags_of([gate]) == []  # that run passed
    rose = tmp_path / "gate"
    shutil.copytree(RUNS / "gate", rose)
    rows = [json.loads(line) for line in (rose / "cells.jsonl").read_text().splitlines()]
    rows[0]["ir_per_op"] *= 1.05
    (rose / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    [flag] = pub.flags_of([pub.read_run(rose, RESULTS)])
    assert (flag.workload, flag.metric) == (rows[0]["workload"], "ir_per_op")
    assert flag.what.startswith("gate ROSE: ir_per_op +")


def test_outside_git_the_history_is_the_stored_refresh_and_history_csv_and_sections_plug_in(
    tmp_path,
):
    results = tmp_path / "results"
    for name in (sc.STORED_DIR, sc.HISTORY_NAME):
        src = RESULTS / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, results / name)
    # a public-suite refresh is stored like the applications' (a copy of theirs stands in)
    shutil.copytree(RESULTS / sc.APPS_STORED_DIR, results / pub.SUITE_STORED_DIR)
    out = tmp_path / "site"
    written = pub.publish(out, results=results)
    assert out / "index.html" in written
    history = pub.build(results, [], None).history
    refreshes = history.refreshes()
    assert len(refreshes) == len(
        {(r["date"], r["commit"]) for r in sc.read_history(results / sc.HISTORY_NAME)}
    )
    with_ci = [r for r in refreshes if r.machine.description != "unknown machine"]
    assert len(with_ci) == 1  # the refresh on disk; the others come from history.csv
    # no apps or misuse stored here: the page has the sections it has tables for
    index = (out / "index.html").read_text()
    assert 'id="standing"' in index and 'id="suite"' in index
    assert 'id="apps"' not in index and 'id="misuse"' not in index
    assert "No run directories published" in (out / "runs/index.html").read_text()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(
        main, ["publish", str(tmp_path / "site"), "--runs", str(tmp_path / "no")]
    )
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines()[-1].endswith("no such directory")
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(
        main, ["publish", str(tmp_path / "site"), "--runs", str(tmp_path / "empty")]
    )
    assert empty.exit_code == 2 and "neither a run directory" in empty.output
    several = runner.invoke(
        main, ["publish", str(tmp_path / "s2"), "--runs", str(tmp_path / "empty"), str(RUNS)]
    )
    assert several.exit_code == 2 and "empty: neither a run directory" in several.output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    taken = runner.invoke(main, ["publish", str(tmp_path / "mine")])
    assert taken.exit_code == 2 and "holds other files" in taken.output
    assert (tmp_path / "mine" / "notes.txt").exists()
    nothing = runner.invoke(
        main, ["publish", str(tmp_path / "site"), "--results", str(tmp_path / "empty")]
    )
    assert nothing.exit_code == 2 and "no stored scorecard samples" in nothing.output
