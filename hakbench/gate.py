"""The instruction gate: CI's regression check that a shared, noisy VM can still run.

Wall-clock timings cannot gate a pull request on a 2-core shared VM (identical builds differ
by 20-35 % between runs), but instruction counts can: callgrind counts the same number of
instructions on every run of a single-threaded cell (an A/A is exactly 1.0000). So the gate
re-measures, with the exact counter of ``hakbench.instructions``, the instructions per
harness op of libhakmem under each shipping profile on every seed workload, at a fraction
of the scorecard's iteration counts (``scale``) and net of start-up, and compares each cell
with the baseline committed beside the scorecard (``results/scorecard/gate.json``).

Rules (the ``[gate]`` table of ``profiles/matrices/scorecard.toml`` states the numbers):

- a cell whose count rose by more than its tolerance fails the gate (exit 1);
- a cell whose count dropped by more than its tolerance fails too, with the message to
  refresh: the committed figures must stay true, and an improvement is recorded on purpose;
- where threads interleave (``mid_large_mt``, ``xthread``) the count depends on the
  schedule, so those workloads carry a wider tolerance, measured and stated in the table;
- a cell that cannot be measured fails as a measurement error (exit 3), never as a pass.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hakbench import paths
from hakbench.errors import UsageError
from hakbench.profiles import Workload, resolve_workload

GATE_FILE = "gate.json"
DEFAULT_TOLERANCE_PCT = 0.5
GATE_KEYS = {"profiles", "workloads", "scale", "tolerance_pct", "tolerance_pct_by_workload"}

OK, ROSE, DROPPED, FAILED, NEW, MISSING = "ok", "ROSE", "DROPPED", "FAILED", "new", "missing"


@dataclass(frozen=True)
class GateSpec:
    profiles: tuple[str, ...]
    workloads: tuple[str, ...]
    scale: float = 0.1
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    tolerance_by_workload: dict = field(default_factory=dict)

    def tolerance(self, workload: str) -> float:
        return float(self.tolerance_by_workload.get(workload, self.tolerance_pct))


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
    by_workload = gate.get("tolerance_pct_by_workload", {})
    if not isinstance(by_workload, dict):
        raise UsageError(f"{where}: [gate] tolerance_pct_by_workload must be a table")
    by_workload = {
        str(k).lower(): _number(v, f"tolerance_pct_by_workload.{k}", where)
        for k, v in by_workload.items()
    }
    names = tuple(w.lower() for w in workloads)
    stray = sorted(set(by_workload) - set(names))
    if stray:
        raise UsageError(f"{where}: [gate] tolerance for workload(s) not gated: {stray}")
    return GateSpec(tuple(p.upper() for p in profiles), names, scale, tolerance, by_workload)


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
    from hakbench.cell import make_cell

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


def measure(
    cells: Sequence, *, jobs: int = 2, on_result: Callable[[dict], None] | None = None
) -> list[dict]:
    """Exact Ir/op of every cell (callgrind runs ``jobs`` at a time: counts do not depend
    on what else runs, only the wall time does). One row per cell, in the cells' order."""
    from hakbench.instructions import measure_instructions

    def one(cell) -> dict:
        r = measure_instructions(cell)
        row = {
            "profile": cell.profile,
            "workload": cell.workload.name,
            "args": list(cell.workload.args),
            "status": r["status"],
            "ir_per_op": r["ir_per_op"],
            "tool": r["tool"],
            "error": r["error"],
        }
        if on_result:
            on_result(row)
        return row

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, cells))


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

    @property
    def change_pct(self) -> float | None:
        if self.baseline and self.now is not None:
            return (self.now / self.baseline - 1) * 100
        return None


def compare(spec: GateSpec, baseline: Iterable[dict], current: Iterable[dict]) -> list[GateRow]:
    """Judge every measured cell against its baseline row (pure)."""
    base = {(r["profile"], r["workload"]): r for r in baseline}
    rows = []
    for r in current:
        key = (r["profile"], r["workload"])
        tol = spec.tolerance(r["workload"])
        b = base.pop(key, None)
        b_ir = b.get("ir_per_op") if b else None
        if r["status"] != "ok" or r["ir_per_op"] is None:
            rows.append(GateRow(*key, b_ir, None, tol, FAILED, r.get("error") or r["status"]))
            continue
        if b_ir is None:
            rows.append(GateRow(*key, None, r["ir_per_op"], tol, NEW))
            continue
        if b.get("args") and b["args"] != r["args"]:
            rows.append(
                GateRow(*key, b_ir, r["ir_per_op"], tol, NEW, "measured with other arguments")
            )
            continue
        change = (r["ir_per_op"] / b_ir - 1) * 100
        status = ROSE if change > tol else DROPPED if change < -tol else OK
        rows.append(GateRow(*key, b_ir, r["ir_per_op"], tol, status))
    return rows


def failing(rows: Iterable[GateRow]) -> list[GateRow]:
    """Rows that fail the gate: a rise, a drop, a cell without a baseline."""
    return [r for r in rows if r.status in (ROSE, DROPPED, NEW)]


def table(rows: Sequence[GateRow]) -> str:
    """The gate's table, Markdown (readable in a terminal and in a CI log)."""

    def num(v, spec):
        return "—" if v is None else format(v, spec)

    lines = [
        "| profile | workload | baseline Ir/op | now Ir/op | change | tolerance | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        verdict = r.status + (f" ({r.error})" if r.error else "")
        lines.append(
            f"| {r.profile} | {r.workload} | {num(r.baseline, '.2f')} | {num(r.now, '.2f')} "
            f"| {num(r.change_pct, '+.2f')}{'' if r.change_pct is None else ' %'} "
            f"| ±{r.tolerance_pct:g} % | {verdict} |"
        )
    return "\n".join(lines)


def baseline_path(results: Path | None = None) -> Path:
    return (results or paths.results_dir()) / "scorecard" / GATE_FILE


def read_baseline(path: Path) -> dict:
    from hakbench.store import read_json

    if not path.exists():
        raise UsageError(f"no gate baseline at {path}; run `hakbench gate --refresh`")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise UsageError(f"{path}: not a gate baseline (no 'cells' list)")
    return data


def baseline_document(spec: GateSpec, rows: list[dict], commit: str | None) -> dict:
    """What ``--refresh`` commits: the counts and everything they depend on."""
    return {
        "kind": "instruction-gate",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "scale": spec.scale,
        "toolchain": toolchain(),
        "cells": [
            {k: r[k] for k in ("profile", "workload", "args", "ir_per_op", "tool")} for r in rows
        ],
    }
