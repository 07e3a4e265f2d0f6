"""The instruction gate: CI's regression check that a shared, noisy VM can still run.

Wall-clock timings cannot gate a pull request on a 2-core shared VM (identical builds differ
by 20-35 % between runs), but instruction counts can: callgrind counts the same number of
instructions on every run of a single-threaded cell (an A/A is exactly 1.0000). So the gate
re-measures, with the exact counter of ``hakbench.engine.instructions``, the instructions per
harness op of libhakmem under each shipping profile on every seed workload, at a fraction
of the scorecard's iteration counts (``scale``) and net of start-up, and compares each cell
with the baseline committed beside the scorecard (``results/scorecard/gate.json``).

Rules (the ``[gate]`` table of ``profiles/matrices/scorecard.toml`` states the numbers):

- a cell whose count rose by more than its tolerance fails the gate (exit 1);
- a cell whose count dropped by more than its tolerance fails too, with the message to
  refresh: the committed figures must stay true, and an improvement is recorded on purpose;
- where threads interleave (``mid_large_mt``, ``xthread``) the count depends on the
  schedule: how many remote frees a batch carries, how often a thread finds its ring empty.
  Measured at the gate's scale, 20 callgrind runs of ``xthread`` gave 96.27-99.64 Ir/op, 10
  of them within 0.1 % of 96.53 and the rest spread above (an unlucky interleaving only adds
  work). So those workloads are counted ``ir_runs_by_workload`` times and the gate keeps the
  *lowest* count, the undisturbed interleaving, which a real regression raises as well; they
  carry a wider tolerance too, measured and stated in the table;
- a cell that cannot be measured fails as a measurement error (exit 3), never as a pass.

Instructions miss the kernel's work: a memory-policy change that made ``mid_large_mt1``
take 18,300 minor page faults instead of ~1,300 (and run 5x slower) left its count of
instructions unchanged. So the gate measures a second quantity per cell: the minor page
faults (``minflt``, wait4's rusage of the harness, ``hakbench.engine.runner.run_sample`` without
perf) of a native run of the same scaled cell, the median of ``FAULT_RUNS`` runs, done one
at a time before the callgrind counts start. Faults of a deterministic program are nearly
repeatable, but the allocator purges page slots after a delay, so they can depend on
timing: a cell's faults fail the gate only when they moved by more than
``faults_tolerance_pct`` AND by more than ``faults_min_change`` faults (both in the table),
a rise as a regression, a drop with the message to refresh, like instructions.

The counts depend on the toolchain as well as on the code: the compiler builds the library,
glibc runs the harness and valgrind's version decides what it counts. The baseline records
all three; when the machine's differ, the table says so on its first line, so a rise caused
by a new compiler is not mistaken for a code regression (and the fix is a refresh).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import subprocess
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.core.profiles import Workload, resolve_workload

GATE_FILE = "gate.json"
DEFAULT_TOLERANCE_PCT = 0.5
DEFAULT_FAULTS_TOLERANCE_PCT = 25.0
DEFAULT_FAULTS_MIN_CHANGE = 256
FAULT_RUNS = 3  # native runs per cell; the gate keeps their median
GATE_KEYS = {
    "profiles",
    "workloads",
    "scale",
    "tolerance_pct",
    "tolerance_pct_by_workload",
    "faults_tolerance_pct",
    "faults_tolerance_pct_by_workload",
    "faults_min_change",
    "ir_runs_by_workload",
}

OK, ROSE, DROPPED, FAILED, NEW, MISSING = "ok", "ROSE", "DROPPED", "FAILED", "new", "missing"


@dataclass(frozen=True)
class GateSpec:
    profiles: tuple[str, ...]
    workloads: tuple[str, ...]
    scale: float = 0.1
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    tolerance_by_workload: dict = field(default_factory=dict)
    faults_tolerance_pct: float = DEFAULT_FAULTS_TOLERANCE_PCT
    faults_min_change: int = DEFAULT_FAULTS_MIN_CHANGE
    faults_tolerance_by_workload: dict = field(default_factory=dict)
    ir_runs_by_workload: dict = field(default_factory=dict)

    def ir_runs(self, workload: str) -> int:
        return int(self.ir_runs_by_workload.get(workload, 1))

    def tolerance(self, workload: str) -> float:
        return float(self.tolerance_by_workload.get(workload, self.tolerance_pct))

    def faults_tolerance(self, workload: str) -> float:
        return float(self.faults_tolerance_by_workload.get(workload, self.faults_tolerance_pct))


def _number(value, what: str, where: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: {what} must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise UsageError(f"{where}: {what} must be {'> 0' if positive else '>= 0'}, got {value}")
    return float(value)


def parse_gate(data: dict, where: str = "scorecard.toml") -> GateSpec:
    """The ``[gate]`` table of a scorecard matrix (already parsed TOML, whole document)."""
    axes = data.get("axes", {})
    gate = data.get("gate")
    if not isinstance(gate, dict):
        raise UsageError(f"{where}: needs a [gate] table for `hakbench gate`")
    unknown = sorted(set(gate) - GATE_KEYS)
    if unknown:
        raise UsageError(f"{where}: [gate] has unknown key(s) {', '.join(unknown)}")
    profiles = gate.get("profiles", axes.get("profile"))
    workloads = gate.get("workloads", axes.get("workload"))
    for what, value in (("profiles", profiles), ("workloads", workloads)):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where}: [gate] {what} must be a non-empty list of names")
    scale = _number(gate.get("scale", 0.1), "[gate] scale", where)
    if scale > 1:
        raise UsageError(f"{where}: [gate] scale must be at most 1, got {scale}")
    tolerance = _number(gate.get("tolerance_pct", DEFAULT_TOLERANCE_PCT), "tolerance_pct", where)
    names = tuple(w.lower() for w in workloads)

    def per_workload(key: str) -> dict:
        table = gate.get(key, {})
        if not isinstance(table, dict):
            raise UsageError(f"{where}: [gate] {key} must be a table")
        table = {str(k).lower(): _number(v, f"{key}.{k}", where) for k, v in table.items()}
        stray = sorted(set(table) - set(names))
        if stray:
            raise UsageError(f"{where}: [gate] {key} names workload(s) not gated: {stray}")
        return table

    by_workload = per_workload("tolerance_pct_by_workload")
    faults_by_workload = per_workload("faults_tolerance_pct_by_workload")
    faults_tolerance = _number(
        gate.get("faults_tolerance_pct", DEFAULT_FAULTS_TOLERANCE_PCT),
        "[gate] faults_tolerance_pct",
        where,
    )
    ir_runs = per_workload("ir_runs_by_workload")
    for w, n in ir_runs.items():
        if n != int(n) or not 1 <= n <= 20:
            raise UsageError(f"{where}: [gate] ir_runs_by_workload.{w} must be an integer 1-20")
    min_change = gate.get("faults_min_change", DEFAULT_FAULTS_MIN_CHANGE)
    if isinstance(min_change, bool) or not isinstance(min_change, int) or min_change < 0:
        raise UsageError(f"{where}: [gate] faults_min_change must be an integer >= 0")
    return GateSpec(
        tuple(p.upper() for p in profiles),
        names,
        scale,
        tolerance,
        by_workload,
        faults_tolerance,
        int(min_change),
        faults_by_workload,
        {w: int(n) for w, n in ir_runs.items()},
    )


def load_gate(path: Path | None = None) -> GateSpec:
    path = path or paths.profiles_dir() / "matrices" / "scorecard.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: malformed TOML: {e}") from None
    return parse_gate(data, str(path))


def scaled_workload(workload: Workload, scale: float) -> Workload:
    """The workload with its iteration count (``iters_flag``) multiplied by ``scale``."""
    if not workload.iters_flag or workload.iters_flag not in workload.args:
        raise UsageError(f"workload '{workload.name}' has no iters_flag: it cannot be gated")
    args = list(workload.args)
    i = args.index(workload.iters_flag) + 1
    args[i] = str(max(1, round(int(args[i]) * scale)))
    return dataclasses.replace(workload, args=tuple(args))


def gate_cells(spec: GateSpec, *, build: Path | None = None) -> list:
    """One fast-variant libhakmem cell per (profile, workload), names validated."""
    from hakbench.core.cell import make_cell

    return [
        make_cell(
            "hakmem",
            scaled_workload(resolve_workload(w), spec.scale),
            profile=p,
            build=build,
        )
        for p in spec.profiles
        for w in spec.workloads
    ]


def measure_faults(cell, runs: int = FAULT_RUNS, session=None) -> dict:
    """Minor page faults of ``runs`` native runs of ``cell`` (no perf: the harness is
    hakbench's own child and wait4 gives its rusage), and their median.
    ``{"status", "minflt", "minflt_runs", "error"}``; never raises for a failed run.
    ``session`` (``hakbench.engine.engine.Session``): each run stored the moment it finishes."""
    from hakbench.engine.runner import run_sample

    counts = []
    for i in range(runs):
        tags = {"cell": cell.key, "workload": cell.workload.name, "phase": "gate", "round": i}
        s = (session.take if session else lambda _tags, run: run())(
            tags, lambda: run_sample(cell, phase="gate", perf=False)
        )
        flt = s.get("metrics", {}).get("minflt")
        if s["status"] != "ok" or not isinstance(flt, int):
            error = s.get("error") or s["status"]
            return {"status": "failed", "minflt": None, "minflt_runs": counts, "error": error}
        counts.append(flt)
    return {"status": "ok", "minflt": sorted(counts)[len(counts) // 2], "minflt_runs": counts}


def measure(
    cells: Sequence,
    *,
    jobs: int = 2,
    on_result: Callable[[dict], None] | None = None,
    ir_runs: Callable[[str], int] = lambda workload: 1,
    session=None,
) -> list[dict]:
    """Page faults (median of ``FAULT_RUNS`` native runs) and exact Ir/op of every cell
    (the lowest of ``ir_runs(workload)`` counts, ``hakbench.engine.instructions.lowest_count``).

    The native runs go first, one at a time, so they do not share the CPUs with callgrind
    (a purge after a delay makes faults depend a little on timing); then callgrind runs
    ``jobs`` at a time (counts do not depend on what else runs, only the wall time does).
    One row per cell, in the cells' order; ``on_result(row)`` as each finishes, in this
    thread. A stop signal during the counts lets the running ones finish (their rows are
    reported), starts no other, and then stops (KeyboardInterrupt)."""
    from hakbench.engine.instructions import measure_lowest

    faults = [measure_faults(cell, session=session) for cell in cells]

    def one(item) -> dict:
        cell, f = item
        r = measure_lowest(cell, ir_runs(cell.workload.name))
        status, error = r["status"], r["error"]
        if status == "ok" and f["status"] != "ok":
            status, error = "failed", f"native run: {f['error']}"
        row = {
            "profile": cell.profile,
            "workload": cell.workload.name,
            "args": list(cell.workload.args),
            "status": status,
            "ir_per_op": r["ir_per_op"],
            "minflt": f["minflt"],
            "minflt_runs": f["minflt_runs"],
            "tool": r["tool"],
            "error": error,
        }
        if r["ir_runs"]:
            row["ir_runs"] = r["ir_runs"]
        return row

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(one, item) for item in zip(cells, faults, strict=True)]
    pending = set(futures)

    def report(f) -> None:
        pending.discard(f)
        if on_result:
            on_result(f.result())

    try:
        for f in as_completed(futures):
            report(f)
    except KeyboardInterrupt:
        pool.shutdown(wait=True, cancel_futures=True)  # the running counts finish
        for f in [f for f in futures if f in pending and f.done() and not f.cancelled()]:
            report(f)
        raise
    pool.shutdown()
    return [f.result() for f in futures]


def _first_line(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def toolchain() -> dict:
    """What besides the code decides an instruction count."""
    cc = os.environ.get("CC") or "gcc"
    return {
        "compiler": _first_line([cc, "--version"]),
        "libc": " ".join(platform.libc_ver()) or None,
        "valgrind": _first_line(["valgrind", "--version"]),
        "machine": platform.machine(),
    }


def toolchain_differences(baseline: dict, now: dict) -> list[str]:
    return [
        f"{k}: baseline {baseline.get(k)!r}, here {now.get(k)!r}"
        for k in sorted(set(baseline) | set(now))
        if baseline.get(k) != now.get(k)
    ]


@dataclass(frozen=True)
class GateRow:
    profile: str
    workload: str
    baseline: float | None
    now: float | None
    tolerance_pct: float
    status: str
    error: str | None = None
    faults_baseline: int | None = None
    faults_now: int | None = None
    faults_status: str | None = None

    @property
    def change_pct(self) -> float | None:
        if self.baseline and self.now is not None:
            return (self.now / self.baseline - 1) * 100
        return None

    @property
    def faults_change(self) -> int | None:
        if self.faults_baseline is not None and self.faults_now is not None:
            return self.faults_now - self.faults_baseline
        return None

    @property
    def faults_change_pct(self) -> float | None:
        if self.faults_baseline and self.faults_now is not None:
            return (self.faults_now / self.faults_baseline - 1) * 100
        return None


def judge_faults(spec: GateSpec, workload: str, baseline: int, now: int) -> str:
    """ROSE or DROPPED when the faults moved by more than the workload's fault tolerance (%
    of the baseline) AND by more than ``faults_min_change`` faults; otherwise OK (pure)."""
    change = now - baseline
    pct = change / baseline * 100 if baseline else float("inf") if change else 0.0
    if abs(change) <= spec.faults_min_change or abs(pct) <= spec.faults_tolerance(workload):
        return OK
    return ROSE if change > 0 else DROPPED


def compare(spec: GateSpec, baseline: Iterable[dict], current: Iterable[dict]) -> list[GateRow]:
    """Judge every measured cell against its baseline row (pure): its instructions and its
    page faults, each with its own status."""
    base = {(r["profile"], r["workload"]): r for r in baseline}
    rows = []
    for r in current:
        key = (r["profile"], r["workload"])
        tol = spec.tolerance(r["workload"])
        b = base.pop(key, None)
        b_ir = b.get("ir_per_op") if b else None
        b_flt = b.get("minflt") if b else None
        flt = r.get("minflt")
        if r["status"] != "ok" or r["ir_per_op"] is None or flt is None:
            error = r.get("error") or r["status"]
            rows.append(GateRow(*key, b_ir, None, tol, FAILED, error, b_flt, None, FAILED))
            continue
        if b_ir is None or b_flt is None:
            rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, NEW, None, b_flt, flt, NEW))
            continue
        if b.get("args") and b["args"] != r["args"]:
            other = "measured with other arguments"
            rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, NEW, other, b_flt, flt, NEW))
            continue
        change = (r["ir_per_op"] / b_ir - 1) * 100
        status = ROSE if change > tol else DROPPED if change < -tol else OK
        faults = judge_faults(spec, r["workload"], b_flt, flt)
        rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, status, None, b_flt, flt, faults))
    return rows


def failing(rows: Iterable[GateRow]) -> list[GateRow]:
    """Rows that fail the gate: a rise, a drop (of instructions or of page faults), a cell
    without a baseline."""
    bad = (ROSE, DROPPED, NEW)
    return [r for r in rows if r.status in bad or r.faults_status in bad]


def table(rows: Sequence[GateRow]) -> str:
    """The gate's table, Markdown (readable in a terminal and in a CI log)."""

    def num(v, spec):
        return "—" if v is None else format(v, spec)

    lines = [
        "| profile | workload | baseline Ir/op | now Ir/op | change | tolerance | verdict "
        "| baseline faults | now faults | change | faults verdict |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        verdict = r.status + (f" ({r.error})" if r.error else "")
        flt_change = "—"
        if r.faults_change is not None:
            pct = r.faults_change_pct
            flt_change = f"{r.faults_change:+d}" + ("" if pct is None else f" ({pct:+.0f} %)")
        lines.append(
            f"| {r.profile} | {r.workload} | {num(r.baseline, '.2f')} | {num(r.now, '.2f')} "
            f"| {num(r.change_pct, '+.2f')}{'' if r.change_pct is None else ' %'} "
            f"| ±{r.tolerance_pct:g} % | {verdict} "
            f"| {num(r.faults_baseline, 'd')} | {num(r.faults_now, 'd')} | {flt_change} "
            f"| {r.faults_status or '—'} |"
        )
    return "\n".join(lines)


def faults_rule(spec: GateSpec) -> str:
    """The fault columns' rule, printed under the table."""
    wider = "".join(
        f", {w} {pct:g} %" for w, pct in sorted(spec.faults_tolerance_by_workload.items())
    )
    return (
        f"faults: minor page faults, median of {FAULT_RUNS} native runs; a cell fails when "
        f"they moved by more than {spec.faults_tolerance_pct:g} %{wider} and by more than "
        f"{spec.faults_min_change} faults"
    )


def baseline_path(results: Path | None = None) -> Path:
    return (results or paths.results_dir()) / "scorecard" / GATE_FILE


def read_baseline(path: Path) -> dict:
    from hakbench.engine.store import read_json

    if not path.exists():
        raise UsageError(f"no gate baseline at {path}; run `hakbench gate --refresh`")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(f"{path}: not a gate baseline (no 'cells' list)")
    if any(not isinstance(c, dict) or not isinstance(c.get("minflt"), int) for c in data["cells"]):
        raise UsageError(
            f"{path}: baseline has no page-fault counts (made before the gate measured "
            "faults); run `hakbench gate --refresh` and commit it"
        )
    return data


BASELINE_KEYS = ("profile", "workload", "args", "ir_per_op", "tool", "minflt", "minflt_runs")


def baseline_document(spec: GateSpec, rows: list[dict], commit: str | None) -> dict:
    """What ``--refresh`` commits: the counts and everything they depend on."""
    return {
        "kind": "instruction-gate",
        "fault_runs": FAULT_RUNS,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "scale": spec.scale,
        "toolchain": toolchain(),
        "cells": [{k: r[k] for k in (*BASELINE_KEYS, "ir_runs") if k in r} for r in rows],
    }
