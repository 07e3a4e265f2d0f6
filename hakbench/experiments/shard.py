"""Shards: a matrix split across machines (or CI jobs), and the merge of their results.

``hakbench matrix FILE --shard K/N`` runs shard K of N: a deterministic subset of the cells
in which every cell keeps the cells it is compared with — its reference cell and every
other cell that shares that reference — so every ratio in a summary is still taken between
two cells measured on one machine, round by round. A shard's run directory is an ordinary,
self-contained matrix run (samples.jsonl, meta.json, summary.csv) whose meta says which
shard it is and which cells of the whole matrix it holds.

``hakbench merge DIR... --out DIR`` checks that the shards belong together (the same matrix
text, the same rounds and seed, the same build revisions, each shard exactly once) and writes
the run directory that one machine running the whole matrix would have written. Results of
different machines are never compared with each other: the merge only puts comparison groups
side by side, and it says so when the shards' machines differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from hakbench.core.errors import UsageError

# meta.json keys that must agree for shards to be parts of one run, and those that describe
# the machine (they may differ: each group of cells is still compared on one machine).
SAME_RUN = ("matrix", "git")
MACHINE = ("hostname", "cpu_model", "cpu_count", "kernel", "compiler", "glibc")


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` with 1 <= K <= N -> (K, N)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise UsageError(f"--shard takes K/N (e.g. 1/2), got {text!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise UsageError(f"--shard {text}: K must be between 1 and N")
    return k, n


def comparison_groups(refs: Sequence[int | None]) -> list[list[int]]:
    """Cells that must share a machine: each cell with its reference (``refs[i]``, from
    ``matrix_summary.reference_index``), joined transitively. Groups in order of their first
    cell."""
    parent = list(range(len(refs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in enumerate(refs):
        if j is not None:
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(refs)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def assign(groups: Sequence[Sequence[int]], n: int) -> list[list[int]]:
    """Deterministic balanced split: the largest groups first, each onto the shard holding
    the fewest cells so far (ties: the lower shard). -> per shard, its cell indices sorted."""
    shards: list[list[int]] = [[] for _ in range(n)]
    for g in sorted(groups, key=lambda g: (-len(g), g[0])):
        target = min(range(n), key=lambda s: (len(shards[s]), s))
        shards[target].extend(g)
    return [sorted(s) for s in shards]


def shard_cells(refs: Sequence[int | None], k: int, n: int) -> list[int]:
    """Indices of the cells of shard K of N (1-based K)."""
    groups = comparison_groups(refs)
    if n > len(groups):
        raise UsageError(
            f"--shard {k}/{n}: this matrix has only {len(groups)} group(s) of cells that must "
            f"run together (a reference and the cells compared with it); use N <= {len(groups)}"
        )
    return assign(groups, n)[k - 1]


def _read_meta(directory: Path) -> dict:
    from hakbench.engine.store import read_json

    if not (directory / "meta.json").exists():
        raise UsageError(f"{directory}: no meta.json (not a matrix run directory)")
    meta = read_json(directory / "meta.json")
    if meta.get("kind") != "matrix" or not isinstance(meta.get("shard"), dict):
        raise UsageError(f"{directory}: not a shard of a matrix run (run with --shard K/N)")
    return meta


def _describe(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def check_shards(metas: Sequence[dict], names: Sequence[str]) -> list[str]:
    """Raise UsageError unless the shards form one whole run; return notes (machines)."""
    first = metas[0]
    n = first["shard"]["n"]
    for meta, name in zip(metas[1:], names[1:], strict=True):
        for key in SAME_RUN:
            if key == "matrix":
                a = {k: v for k, v in first[key].items() if k != "runs"}
                b = {k: v for k, v in meta[key].items() if k != "runs"}
            else:
                a, b = first.get(key), meta.get(key)
            if a != b:
                raise UsageError(
                    f"{name} is not a shard of the same run as {names[0]}: {key} differs "
                    f"({_describe(b)} vs {_describe(a)})"
                )
        if meta["shard"]["n"] != n:
            raise UsageError(f"{name} is shard of {meta['shard']['n']}, {names[0]} of {n}")
    ks = sorted(m["shard"]["k"] for m in metas)
    if ks != list(range(1, n + 1)):
        dup = sorted({k for k in ks if ks.count(k) > 1})
        missing = sorted(set(range(1, n + 1)) - set(ks))
        what = f"shard(s) {dup} given twice" if dup else f"shard(s) {missing} missing"
        raise UsageError(f"cannot merge: {what} of {n}")
    notes = []
    machines = {json.dumps({k: m.get(k) for k in MACHINE}, sort_keys=True) for m in metas}
    if len(machines) > 1:
        notes.append(
            f"the {n} shards ran on {len(machines)} different machines: each ratio compares "
            "cells of one shard (one machine); medians of different shards are not comparable"
        )
    return notes


def merge(dirs: Sequence[Path], out: Path) -> tuple[dict, list[dict], list[str]]:
    """Check the shards and write their union into ``out``; -> (meta, samples, notes)."""
    from hakbench.engine.store import RunStore, load_samples

    if len(dirs) < 2:
        raise UsageError("merge needs at least two shard directories")
    dirs = [Path(d) for d in dirs]
    metas = [_read_meta(d) for d in dirs]
    notes = check_shards(metas, [str(d) for d in dirs])
    if (out / "samples.jsonl").exists():
        raise UsageError(f"{out} already holds samples; choose another --out")
    order = sorted(range(len(dirs)), key=lambda i: metas[i]["shard"]["k"])
    indexed = sorted(
        (idx, cell)
        for i in order
        for idx, cell in zip(metas[i]["shard"]["cells"], metas[i]["cells"], strict=True)
    )
    meta = dict(metas[order[0]])
    meta.update(
        run_id=out.name,
        cells=[cell for _, cell in indexed],
        skipped=[s for i in order for s in metas[i].get("skipped", [])],
        shard=None,
        merged_from=[
            {
                "k": metas[i]["shard"]["k"],
                "dir": str(dirs[i]),
                "hostname": metas[i].get("hostname"),
                "load": metas[i].get("load"),  # each shard's machine and time had its own
            }
            for i in order
        ],
        load=None,
        merge_notes=notes,
    )
    meta["matrix"] = dict(meta["matrix"], runs=max(metas[i]["matrix"]["runs"] for i in order))
    store = RunStore(out, fresh=True)
    store.write_meta(meta)
    samples = []
    for i in order:
        for s in load_samples(dirs[i]):
            s = {k: v for k, v in s.items() if k not in ("seq", "run_id")}
            s["shard"] = metas[i]["shard"]["k"]
            samples.append(store.append(s))
    return meta, samples, notes
