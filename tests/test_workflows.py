"""The GitHub workflows a project can adopt (.github/workflows/) pass actionlint and zizmor
(both installed by make setup: actionlint built with Go into .venv/bin, zizmor from PyPI),
the recipes the docs give are the files that run, and `scorecard --refresh --from` (the
scorecard workflow's store step) refuses what is not a whole run of the scorecard."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from hakbench.core.errors import UsageError
from hakbench.experiments.scorecard_refresh import adopt_finished

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent

# a workflow with two real mistakes: an attacker-controlled title expanded into a shell
# script (zizmor: template-injection) and an unknown runner label (actionlint)
BAD = """\
name: bad
on: pull_request
permissions: {}
jobs:
  greet:
    runs-on: [self-hosted, no-such-label]
    steps:
      - run: echo "${{ github.event.pull_request.title }}"
"""


def tool(name: str) -> str:
    path = shutil.which(name, path=f"{BIN}:{REPO_ROOT / '.venv' / 'bin'}") or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (make setup installs it; actionlint needs Go 1.21+)")
    return path


def run(*args, cwd=REPO_ROOT):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_workflows_exist():
    assert {p.name for p in WORKFLOWS.glob("*.yml")} >= {"pull-request.yml", "scorecard.yml"}


def test_actionlint_passes_the_workflows_and_catches_a_bad_one(tmp_path):
    actionlint = tool("actionlint")
    r = run(actionlint, "-no-color", "-oneline")
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD)
    r = run(actionlint, "-no-color", "-oneline", str(bad), cwd=tmp_path)
    assert r.returncode == 1 and "no-such-label" in r.stdout, r.stdout + r.stderr


def test_zizmor_passes_the_workflows_and_catches_a_bad_one(tmp_path):
    zizmor = tool("zizmor")
    r = run(zizmor, "--offline", "--no-progress", str(WORKFLOWS))
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "bad.yml").write_text(BAD)
    r = run(zizmor, "--offline", "--no-progress", str(tmp_path / "bad.yml"))
    assert r.returncode != 0 and "template-injection" in r.stdout, r.stdout + r.stderr


def test_the_docs_point_at_the_recipes_that_run_and_copy_none():
    doc = (REPO_ROOT / "docs" / "hakbench-internals.md").read_text()
    for recipe in (
        "scripts/slurm/shard.sbatch",
        "scripts/slurm/merge.sbatch",
        ".github/workflows/scorecard.yml",
        ".github/workflows/pull-request.yml",
    ):
        assert recipe in doc and (REPO_ROOT / recipe).exists(), recipe
    assert "#SBATCH" not in doc and "runs-on:" not in doc  # no second copy to drift


def write_run(d: Path, **meta) -> Path:
    d.mkdir(parents=True)
    base = {"kind": "matrix", "matrix": {"name": "scorecard"}, "shard": None}
    (d / "meta.json").write_text(json.dumps(base | meta))
    return d


def test_scorecard_from_refuses_what_is_not_a_whole_scorecard_run(tmp_path):
    results = tmp_path / "results"
    with pytest.raises(UsageError, match="no meta.json"):
        adopt_finished(tmp_path, results)
    other = write_run(tmp_path / "other", matrix={"name": "bench_alloc"})
    with pytest.raises(UsageError, match="not a run of the scorecard matrix"):
        adopt_finished(other, results)
    one = write_run(tmp_path / "one", shard={"k": 1, "n": 4, "cells": [0], "of": 4})
    with pytest.raises(UsageError, match="one shard; `hakbench merge`"):
        adopt_finished(one, results)
    cut = write_run(tmp_path / "cut", interrupted=True)
    with pytest.raises(UsageError, match="interrupted"):
        adopt_finished(cut, results)
    assert not results.exists()  # nothing stored
