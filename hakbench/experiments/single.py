"""``hakbench run`` as a library: one cell run N times, summarised, into a results directory.

The processes follow hakbench.engine.schedule (warm-up rounds first, then the measured ones; with
``perf_mode`` "observe" a few perf-wrapped runs after them), every sample is appended to the
run store as it finishes, and summary.csv holds each metric's median with its CI.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core.cell import Cell
from hakbench.core.metrics import METRICS, PERF_SOURCED
from hakbench.engine import engine, interrupts, schedule
from hakbench.engine.meta import cell_meta
from hakbench.engine.progress import Progress
from hakbench.engine.runner import perf_usable, run_sample
from hakbench.stats.stats import cell_summary

SUMMARY_FIELDS = (
    "workload",
    "cell",
    "source",
    "metric",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "min",
    "max",
)


@dataclass
class CellRun:
    cell: Cell
    out: Path
    perf_mode: str
    perf_runs: int  # perf-wrapped runs planned after the measured ones
    samples: list = field(default_factory=list)
    summaries: dict = field(default_factory=dict)  # "runs" | "perf" -> stats.cell_summary rows
    interrupted: bool = False

    @property
    def measured(self) -> list[dict]:
        return [s for s in self.samples if s["phase"] == "measure"]

    @property
    def ok(self) -> list[dict]:
        return [s for s in self.measured if s["status"] == "ok"]

    @property
    def perf_ok(self) -> list[dict]:
        return [s for s in self.samples if s["phase"] == "perf" and s["status"] == "ok"]

    def unavailable(self) -> list[str]:
        """Metrics no ok run had (recorded as unavailable, never as 0)."""
        ok = self.ok + self.perf_ok
        return sorted(
            {u for s in ok for u in s["unavailable"]} - {m for s in ok for m in s["metrics"]}
        )


def _values(samples: list[dict], names) -> dict:
    return {m: [s["metrics"][m] for s in samples if m in s["metrics"]] for m in names}


def run_cell(
    cell: Cell,
    out: Path,
    *,
    runs: int,
    warmups: int,
    timeout: float,
    perf_mode: str,
    perf_runs: int,
    show_progress: bool = True,
) -> CellRun:
    """Run ``cell`` and write samples.jsonl, meta.json and summary.csv into ``out``.
    Ctrl-C stops it with what finished on disk (``interrupted``)."""
    perf_runs = perf_runs if perf_mode == "observe" and perf_usable() else 0
    if cell.workload.command is not None:  # a real program never runs under perf
        perf_mode, perf_runs = "off", 0
    meta = cell_meta(
        cell, "run", perf_mode=perf_mode, perf_used=perf_mode != "off" and perf_usable()
    )
    store, _, _ = engine.open_run(out, meta, resume=False, ident=engine.identity([cell], out))
    slots = schedule.plan(1, runs, seed=1, warmup=warmups)
    slots += schedule.plan(1, perf_runs, seed=1, phase="perf", salt="perf")
    result = CellRun(cell, store.path, perf_mode, perf_runs)
    progress = (
        Progress(len(slots), f"run {cell.label} {cell.workload.name}") if show_progress else None
    )
    session = engine.Session(store, on_sample=engine.progress_step(progress) if progress else None)
    try:
        for slot in slots:
            perf = slot.phase == "perf" or perf_mode == "each"
            tags = {"phase": slot.phase, "side": None, "pair": None, "round": slot.round}
            result.samples.append(
                session.take(
                    tags,
                    lambda perf=perf, slot=slot: run_sample(
                        cell, phase=slot.phase, perf=perf, timeout=timeout
                    ),
                )
            )
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        if progress:
            progress.close()
    with interrupts.finishing():  # the summary of what finished: a stop cuts nothing here
        _summarise(result, store.path, cell)
    return result


def _summarise(result: CellRun, out: Path, cell: Cell) -> None:
    """summary.csv: each metric's median with its CI, of the measured and the perf runs."""
    result.summaries = {
        source: [r for r in cell_summary(_values(group, names)) if r["n"]]
        for source, group, names in (
            ("runs", result.ok, METRICS),
            ("perf", result.perf_ok, PERF_SOURCED),
        )
    }
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        for source, rows in result.summaries.items():
            for r in rows:
                w.writerow(
                    {"workload": cell.workload.name, "cell": cell.key, "source": source, **r}
                )
