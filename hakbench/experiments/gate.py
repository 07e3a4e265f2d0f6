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

Every native run and every count is a sample of the engine (``measure``), stored in the run
directory the moment it finishes; the counts run ``jobs`` at a time
(``Session.take_concurrent``). A stopped or killed gate keeps them, and ``gate --resume
DIR`` measures the rest against the baseline the run started with (``gate_meta``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.core.profiles import resolve_workload, scaled_workload
from hakbench.engine import process

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


def gate_cells(spec: GateSpec, *, build: Path | None = None) -> list:
    """One fast-variant libhakmem cell per (profile, workload), names validated."""
    from hakbench.engine.cells import make_cell

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


FAULTS, COUNTS = "gate", "instructions"  # the phases of a gate run's samples


def faults_of(samples: Sequence[dict], runs: int = FAULT_RUNS) -> dict | None:
    """One cell's page faults from its native runs' samples (in round order): the median of
    ``runs``; failed at the first failed run (no more are taken); None while incomplete.
    ``{"status", "minflt", "minflt_runs", "error"}``."""
    counts = []
    for s in samples:
        flt = s.get("metrics", {}).get("minflt")
        if s["status"] != "ok" or not isinstance(flt, int):
            error = s.get("error") or s["status"]
            return {"status": "failed", "minflt": None, "minflt_runs": counts, "error": error}
        counts.append(flt)
    if len(counts) < runs:
        return None
    return {"status": "ok", "minflt": sorted(counts)[len(counts) // 2], "minflt_runs": counts}


def measure_faults(cell, session, runs: int = FAULT_RUNS) -> dict:
    """Minor page faults of ``runs`` native runs of ``cell`` (no perf: the harness is
    hakbench's own child and wait4 gives its rusage), each a sample of ``session``
    (``hakbench.engine.engine.Session``: stored the moment it finishes); ``faults_of``."""
    from hakbench.engine.runner import run_sample

    taken = []
    for i in range(runs):
        tags = {"cell": cell.key, "workload": cell.workload.name, "phase": FAULTS, "round": i}
        taken.append(session.take(tags, lambda: run_sample(cell, phase=FAULTS, perf=False)))
        faults = faults_of(taken, runs)
        if faults is not None:
            return faults
    return faults_of(taken, runs)


def count_slots(cells: Sequence, ir_runs: Callable[[str], int]) -> list[tuple[dict, Callable]]:
    """The exact counts of ``cells`` as engine slots: ``ir_runs(workload)`` per cell, each a
    sample of its own (``runner.instruction_sample`` of one count)."""
    from hakbench.engine.runner import instruction_sample

    return [
        (
            {"phase": COUNTS, "cell": c.key, "workload": c.workload.name, "round": i},
            lambda c=c: instruction_sample(c, COUNTS, runs=1),
        )
        for c in cells
        for i in range(ir_runs(c.workload.name))
    ]


def cell_row(cell, faults: dict, counts: Sequence[dict]) -> dict:
    """A cell's row (``cells.jsonl``, the verdict's input) from its faults and its counts'
    samples: the lowest count (``instructions.lowest_count``; any failed count fails it)."""
    from hakbench.engine.instructions import lowest_count

    r = lowest_count([s["instructions"] for s in counts])
    status, error = r["status"], r["error"]
    if status == "ok" and faults["status"] != "ok":
        status, error = "failed", f"native run: {faults['error']}"
    row = {
        "profile": cell.profile,
        "workload": cell.workload.name,
        "args": list(cell.workload.args),
        "status": status,
        "ir_per_op": r["ir_per_op"],
        "minflt": faults["minflt"],
        "minflt_runs": faults["minflt_runs"],
        "tool": r["tool"],
        "error": error,
    }
    if r["ir_runs"]:
        row["ir_runs"] = r["ir_runs"]
    return row


def rows_of(cells: Sequence, samples: Sequence[dict], ir_runs: Callable[[str], int]) -> list:
    """The rows of the cells whose runs and counts are all among ``samples`` (a stopped run
    judges what finished), in the cells' order."""
    by: dict = {}
    for s in sorted(samples, key=lambda s: s.get("round") or 0):
        by.setdefault((s["cell"], s["phase"]), []).append(s)
    rows = []
    for cell in cells:
        faults = faults_of(by.get((cell.key, FAULTS), []))
        counts = by.get((cell.key, COUNTS), [])
        if faults is not None and len(counts) >= ir_runs(cell.workload.name):
            rows.append(cell_row(cell, faults, counts))
    return rows


def measure(
    cells: Sequence,
    session,
    *,
    jobs: int = 2,
    ir_runs: Callable[[str], int] = lambda workload: 1,
) -> list[dict]:
    """Page faults (median of ``FAULT_RUNS`` native runs) and exact Ir/op of every cell
    (the lowest of ``ir_runs(workload)`` counts), every run and count a sample of
    ``session`` (stored as it finishes; a resumed run's stored ones reused). One row per
    cell, in the cells' order.

    The native runs go first, one at a time (``Session.take``), so they do not share the
    CPUs with callgrind (a purge after a delay makes faults depend a little on timing);
    then the counts run ``jobs`` at a time (``Session.take_concurrent``: a count does not
    depend on what else runs, only its wall time does). A stop signal stops the running
    counts, keeps every finished one and raises KeyboardInterrupt (``rows_of`` the
    finished samples then gives the cells that finished)."""
    for cell in cells:
        measure_faults(cell, session)
    session.take_concurrent(count_slots(cells, ir_runs), jobs)
    return rows_of(cells, session.finished, ir_runs)


# ---- a gate run's directory: what --resume needs ----


def gate_meta(
    spec: GateSpec,
    *,
    refresh: bool,
    baseline: Path,
    build: Path | None,
    document: dict | None = None,
) -> dict:
    """meta.json of a gate run: its spec, baseline and build, so ``--resume`` measures the
    same cells against the same baseline. ``document``, the baseline as read, is kept whole
    (``baseline_document``): the file is replaced by every refresh, and a run stays judged
    against what it ran against (a resume, the dashboard's flags of a stored run)."""
    from hakbench.engine.meta import collect_meta

    return collect_meta(
        kind="gate",
        refresh=refresh,
        gate_spec=dataclasses.asdict(spec),
        baseline=str(Path(baseline).resolve()),  # a --resume from another directory
        baseline_document=document,
        build=str(Path(build).resolve()) if build else None,
    )


def run_baseline(meta: dict, results: Path | None = None) -> dict | None:
    """The baseline a gate run was judged against: the copy in its meta.json, else the file
    it names, else the committed one (runs made before the copy); None if none is there."""
    if meta.get("baseline_document"):
        return meta["baseline_document"]
    for path in (Path(meta.get("baseline") or ""), baseline_path(results)):
        if path.is_file():
            return read_baseline(path)
    return None


def resumed_spec(meta: dict, out: Path) -> GateSpec:
    """The spec a stored gate run measured (one line, exit 2, when it recorded none)."""
    record = meta.get("gate_spec")
    if not isinstance(record, dict):
        raise UsageError(f"--resume {out}: a gate run made before gate could resume")
    return GateSpec(
        **{k: tuple(v) if k in ("profiles", "workloads") else v for k, v in record.items()}
    )


def _first_line(argv: list[str]) -> str | None:
    out = process.run(argv, timeout=30)
    if out.error is not None or out.timed_out:
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
