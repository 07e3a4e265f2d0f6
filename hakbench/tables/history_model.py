"""The scorecard across commits: one row per (refresh, workload, allocator, metric), the
long table the site's history charts pivot. Pure: a refresh's stored samples and meta.json
in, ``HistoryPoint`` rows out; ``results/history.csv`` rows in for a refresh whose samples
were never committed (throughput only, no interval, machine unknown).

A refresh is placed on the x axis by the commit it measured (meta.json's git commit, with
``+dirty`` when the tree had uncommitted changes) and drawn on the line of the machine that
measured it: its fingerprint (host name, CPU model and count), so two machines' numbers are
never joined into one line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from hakbench.tables.matrix_summary import CellSummary, summarize

# metric -> (its axis title, the scale its values are drawn in, higher is better)
HISTORY_METRICS = {
    "throughput": ("throughput (Mops/s, median, 95 % CI)", 1e-6, True),
    "ir_per_op": ("instructions per op (Ir/op, exact)", 1.0, False),
    "maxrss_kb": ("peak RSS (MiB, median, 95 % CI)", 1 / 1024, False),
}
UNKNOWN_MACHINE = "unknown machine"


@dataclass(frozen=True)
class Machine:
    fingerprint: str  # 8 hex digits of host name, CPU model and count
    description: str  # "vm, AMD EPYC ×2"

    @property
    def short(self) -> str:
        """The CPU part, trademarks and filler words dropped: "Intel Xeon ×2"."""
        cpu = self.description.split(", ", 1)[-1]
        for word in ("(R)", "(TM)", " Processor", " CPU"):
            cpu = cpu.replace(word, "")
        return " ".join(cpu.split())


@dataclass(frozen=True)
class Refresh:
    """One stored refresh: when, which commit it measured, on which machine, by which run."""

    date: str
    commit: str  # 12 hex digits, "+dirty" when the tree had uncommitted changes
    full_commit: str | None
    machine: Machine
    run_id: str | None
    load: float | None  # 1-minute load average when it started
    stored_in: str | None = None  # the commit that committed these samples


@dataclass(frozen=True)
class HistoryPoint:
    refresh: Refresh
    workload: str
    label: str  # the allocator cell's label: "hakmem:fast/C7_SAFE", "mimalloc", ...
    metric: str
    value: float  # in the metric's own unit (ops/s, Ir/op, KiB)
    low: float | None
    high: float | None
    ratio: float | None = None  # to the reference allocator, throughput only
    n: int = 0


def machine_of(meta: dict) -> Machine:
    host, cpu, count = meta.get("hostname"), meta.get("cpu_model"), meta.get("cpu_count")
    if not (host or cpu):
        return Machine("-", UNKNOWN_MACHINE)
    key = json.dumps([host, cpu, count])
    return Machine(hashlib.sha256(key.encode()).hexdigest()[:8], f"{host}, {cpu} ×{count or '?'}")


def refresh_of(meta: dict, stored_in: str | None = None) -> Refresh:
    git = meta.get("git") or {}
    full = git.get("commit")
    commit = (full or "unknown")[:12] + ("+dirty" if git.get("dirty") else "")
    return Refresh(
        meta.get("date", "?"),
        commit,
        full,
        machine_of(meta),
        meta.get("full_run") or meta.get("run_id"),
        meta.get("load_avg_1min"),
        stored_in,
    )


def summaries_of(samples: list[dict], meta: dict, metrics) -> dict[str, list[CellSummary]]:
    """``summarize``'s rows of each of ``metrics`` the samples carry, aligned with
    meta.json's cells, throughput with its ratio to the reference.

    Summarised one workload at a time: a cell pairs only with the reference of its own
    workload, so each summary scans that workload's samples, not the whole refresh's (the
    same rows as ``summarize`` over the whole refresh; a test checks it)."""
    cells = meta["cells"]
    reference = {"allocator": meta["matrix"]["reference"]["allocator"]}
    present = {m for s in samples for m in s.get("metrics", {})}
    workload_of = {c["key"]: c["coords"]["workload"] for c in cells}
    groups: dict[str, tuple[list[dict], list[dict]]] = {w: ([], []) for w in workload_of.values()}
    for c in cells:
        groups[workload_of[c["key"]]][0].append(c)
    for s in samples:
        if s.get("cell") in workload_of:
            groups[workload_of[s["cell"]]][1].append(s)
    out = {}
    for metric in metrics:
        if metric != "throughput" and metric not in present:
            continue
        ref = reference if metric == "throughput" else None
        by_key = {
            row.key: row for cs, ss in groups.values() for row in summarize(ss, cs, metric, ref)
        }
        out[metric] = [by_key[c["key"]] for c in cells]
    return out


def points_of(samples: list[dict], meta: dict, stored_in: str | None = None) -> list[HistoryPoint]:
    """Every cell's median and 95 % CI of each history metric in one stored refresh."""
    return points_of_summaries(summaries_of(samples, meta, HISTORY_METRICS), meta, stored_in)


def points_of_summaries(
    by_metric: dict[str, list], meta: dict, stored_in: str | None = None
) -> list[HistoryPoint]:
    """History points from a refresh's ``CellSummary`` rows per metric (those a
    ``Scorecard`` holds already, or ``points_of``'s)."""
    refresh = refresh_of(meta, stored_in)
    out = []
    for metric in HISTORY_METRICS:
        for s in by_metric.get(metric, []):
            if s.status != "ok" or s.median is None:
                continue
            out.append(
                HistoryPoint(
                    refresh,
                    s.coords["workload"],
                    s.label,
                    metric,
                    s.median,
                    s.ci_low,
                    s.ci_high,
                    s.ratio,
                    s.n,
                )
            )
    return out


def points_of_history_csv(rows: list[dict], known: set[tuple[str, str]]) -> list[HistoryPoint]:
    """history.csv's throughput rows of refreshes not in ``known`` ((date, commit) pairs
    read from stored samples): no interval, no machine (the file does not record one)."""
    out = []
    for r in rows:
        if (r["date"], r["commit"]) in known or r.get("status") != "ok" or not r["median_ops_s"]:
            continue
        full = r["commit"].removesuffix("+dirty")
        refresh = Refresh(
            r["date"], r["commit"], full, Machine("-", UNKNOWN_MACHINE), None, None, None
        )
        ratio = float(r["ratio_to_reference"]) if r.get("ratio_to_reference") else None
        value = float(r["median_ops_s"])
        out.append(
            HistoryPoint(
                refresh, r["workload"], r["allocator"], "throughput", value, None, None, ratio
            )
        )
    return out


def refreshes(points: list[HistoryPoint]) -> list[Refresh]:
    return list(dict.fromkeys(p.refresh for p in points))


@dataclass(frozen=True)
class Flag:
    """A regression that a check flagged at a commit: an ``ab`` NO-GO or a gate rise."""

    commit: str  # 12 hex digits (+dirty)
    full_commit: str | None
    workload: str
    metric: str  # the metric the check judged ("cpu_throughput", "ir_per_op", "minflt", ...)
    what: str  # "ab NO-GO: B/A 0.981 [0.972, 0.994]", "gate: Ir/op rose 2.1 %"
    run_id: str  # the run page that has the evidence
    date: str = ""
