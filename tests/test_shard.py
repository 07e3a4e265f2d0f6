"""Sharded matrices: the split keeps comparisons on one machine, the merge gives the run one
machine would have made, and shards that do not belong together are refused."""

import csv
import json
import subprocess
import sys

import pytest

from hakbench.core.errors import UsageError
from hakbench.experiments import shard
from hakbench.experiments.matrix_spec import expand_coords, load_matrix
from hakbench.tables.matrix_summary import reference_index

SMALL = """
name = "small"
runs = 2
warmup = 0
seed = 3
instructions = true
reference = { allocator = "system" }
[axes]
allocator = ["hakmem", "system"]
profile = ["C7_SAFE"]
workload = ["mixed_short", "tiny_hot_short"]
"""


def test_parse_shard():
    assert shard.parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1", "a/b", ""):
        with pytest.raises(UsageError):
            shard.parse_shard(bad)


def test_groups_join_references_transitively_and_assignment_is_balanced():
    # cells 0..5: 1 and 2 refer to 0; 4 refers to 3; 5 stands alone
    groups = shard.comparison_groups([0, 0, 0, 3, 3, None])
    assert groups == [[0, 1, 2], [3, 4], [5]]
    assert shard.assign(groups, 2) == [[0, 1, 2], [3, 4, 5]]
    assert shard.assign(groups, 3) == [[0, 1, 2], [3, 4], [5]]
    assert shard.assign(groups, 2) == shard.assign(list(reversed(groups)), 2)  # deterministic
    with pytest.raises(UsageError, match="only 3 group"):
        shard.shard_cells([0, 0, 0, 3, 3, None], 1, 4)


def test_scorecard_shards_partition_the_cells_and_keep_each_reference():
    spec = load_matrix("profiles/matrices/scorecard.toml")
    coords = expand_coords(spec, validate_options=False)
    refs = reference_index(coords, spec.reference)
    parts = [shard.shard_cells(refs, k, 2) for k in (1, 2)]
    assert sorted(parts[0] + parts[1]) == list(range(len(coords)))
    for part in parts:
        assert all(refs[i] in part for i in part)
        assert abs(len(parts[0]) - len(parts[1])) <= max(
            len(g) for g in shard.comparison_groups(refs)
        )


def meta(k, n, **over):
    m = {
        "kind": "matrix",
        "matrix": {"text": "x", "runs": 2, "seed": 1},
        "git": {"commit": "abc", "dirty": False},
        "shard": {"k": k, "n": n, "cells": [k - 1], "of": n},
        "hostname": "lab",
    }
    m.update(over)
    return m


def test_check_shards_refuses_foreign_missing_and_twice_given_shards():
    assert shard.check_shards([meta(1, 2), meta(2, 2)], ["a", "b"]) == []
    with pytest.raises(UsageError, match="matrix differs"):
        shard.check_shards([meta(1, 2), meta(2, 2, matrix={"text": "y", "runs": 2})], ["a", "b"])
    with pytest.raises(UsageError, match="git differs"):
        shard.check_shards([meta(1, 2), meta(2, 2, git={"commit": "def"})], ["a", "b"])
    with pytest.raises(UsageError, match=r"shard\(s\) \[2\] missing"):
        shard.check_shards([meta(1, 3), meta(3, 3)], ["a", "b"])
    with pytest.raises(UsageError, match="given twice"):
        shard.check_shards([meta(1, 2), meta(1, 2)], ["a", "b"])
    notes = shard.check_shards([meta(1, 2), meta(2, 2, hostname="other")], ["a", "b"])
    assert notes and "different machines" in notes[0]


def hakbench(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "hakbench", *args], cwd=cwd, capture_output=True, text=True
    )


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_two_shards_merged_give_the_unsharded_summary(tmp_path, repo_root):
    """Same cells in the same order, the same sample counts, and the exact instruction
    counts equal to the unsharded run's; timed medians differ only by noise."""
    matrix_file = tmp_path / "small.toml"
    matrix_file.write_text(SMALL)
    for name, extra in (("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"]), ("all", [])):
        r = hakbench(
            "matrix", str(matrix_file), "--out", str(tmp_path / name), *extra, cwd=repo_root
        )
        assert r.returncode == 0, r.stderr[-2000:]
    s1 = json.loads((tmp_path / "s1" / "meta.json").read_text())["shard"]
    assert s1["k"] == 1 and s1["n"] == 2 and len(s1["cells"]) == 2
    r = hakbench(
        "merge",
        str(tmp_path / "s2"),
        str(tmp_path / "s1"),
        "--out",
        str(tmp_path / "m"),
        cwd=repo_root,
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["load"] is None and all(m["load"]["available"] for m in meta["merged_from"])
    merged, whole = rows(tmp_path / "m" / "summary.csv"), rows(tmp_path / "all" / "summary.csv")
    key = ("cell", "metric", "status", "n", "n_failed", "reference", "n_pairs")
    assert [tuple(m[k] for k in key) for m in merged] == [tuple(w[k] for k in key) for w in whole]
    ir = [(m["median"], m["ratio"]) for m in merged if m["metric"] == "ir_per_op"]
    assert ir == [(w["median"], w["ratio"]) for w in whole if w["metric"] == "ir_per_op"]
    assert len(ir) == 4
    again = hakbench(
        "merge",
        str(tmp_path / "s1"),
        str(tmp_path / "s1"),
        "--out",
        str(tmp_path / "x"),
        cwd=repo_root,
    )
    assert again.returncode == 2 and "given twice" in again.stderr
