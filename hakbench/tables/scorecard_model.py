"""What a scorecard is, apart from how it is measured or drawn: the per-cell summaries of a
stored refresh, each allocator's standing against the reference, and the milestones.

``hakbench.experiments.scorecard`` builds a ``Scorecard`` from stored samples; ``hakbench.report``
draws it (Markdown, plots). Both import this module; neither imports the other back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hakbench.tables.matrix_summary import CellSummary

MILESTONES = (("M1", 0.5), ("M2", 0.8), ("M3", 1.0))


@dataclass(frozen=True)
class Standing:
    """Where one allocator stands against the reference over the matched workloads."""

    label: str
    geomean: float | None
    matched: list[str]  # workloads where both it and the reference have a ratio
    unmatched: list[tuple[str, str]]  # (workload, why)
    at_least: dict[str, int]  # milestone -> matched workloads whose ratio reaches it
    ir_geomean: float | None = None  # geomean of Ir/op ratios (lower: fewer instructions)
    ir_matched: int = 0

    @property
    def milestone(self) -> str | None:
        return milestone_of(self.geomean)


@dataclass
class Scorecard:
    meta: dict
    cells: list[dict]  # meta.json's cell list: key, label, coords, workload_description, ...
    by_metric: dict[str, list[CellSummary]]  # aligned with cells
    n_samples: int
    history: list[dict]
    ir_tools: list[str]  # instruction counters the samples used (callgrind, perf)
    # the lab machine's committed calibrations (results/calibration/): "noise" (latest.json:
    # the A/B noise floor) and "layouts" (layouts.json: the layout spread per workload)
    calibration: dict = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return self.meta["matrix"]["reference"]["allocator"]

    @property
    def skipped(self) -> list[dict]:
        return self.meta.get("skipped", [])

    @property
    def throughput(self) -> list[CellSummary]:
        return self.by_metric["throughput"]

    def workloads(self) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for c in self.cells:
            seen.setdefault(c["coords"]["workload"], c.get("workload_description", ""))
        return list(seen.items())

    def labels(self) -> list[str]:
        return list(dict.fromkeys(c["label"] for c in self.cells))

    def summary(self, metric: str, workload: str, label: str) -> CellSummary | None:
        for s in self.by_metric.get(metric, []):
            if s.coords["workload"] == workload and s.label == label:
                return s
        return None

    def standings(self) -> list[Standing]:
        """Every allocator but the reference: geomean ratio over matched workloads only."""
        out = []
        reference_label = next(
            (c["label"] for c in self.cells if c["coords"]["allocator"] == self.reference),
            None,
        )
        for label in self.labels():
            if label == reference_label:
                continue
            matched, unmatched, ratios, ir_ratios = [], [], [], []
            for workload, _ in self.workloads():
                ir = self.summary("ir_per_op", workload, label)
                ir_ref = self.summary("ir_per_op", workload, reference_label or "")
                if ir and ir_ref and ir.median and ir_ref.median:
                    ir_ratios.append(ir.median / ir_ref.median)
                s = self.summary("throughput", workload, label)
                ref = self.summary("throughput", workload, reference_label or "")
                if s is not None and s.ratio is not None:
                    matched.append(workload)
                    ratios.append(s.ratio)
                elif s is None:
                    unmatched.append((workload, "not in matrix"))
                elif s.status != "ok":
                    unmatched.append((workload, f"{label} {s.status}"))
                elif ref is None or ref.status != "ok":
                    why = "skipped" if ref is None else ref.status
                    unmatched.append((workload, f"{self.reference} {why}"))
                else:
                    unmatched.append((workload, "no round with both"))
            at_least = {m: sum(r >= t for r in ratios) for m, t in MILESTONES}
            out.append(
                Standing(
                    label,
                    geomean(ratios),
                    matched,
                    unmatched,
                    at_least,
                    geomean(ir_ratios),
                    len(ir_ratios),
                )
            )
        return out


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def history_ratios(history: list[dict]) -> dict[tuple[str, str, str, str], float]:
    """(date, commit, allocator, workload) -> ratio to the reference, where there was one."""
    return {
        (r["date"], r["commit"], r["allocator"], r["workload"]): float(r["ratio_to_reference"])
        for r in history
        if r["ratio_to_reference"]
    }


def milestone_of(ratio: float | None) -> str | None:
    reached = None
    for name, threshold in MILESTONES:
        if ratio is not None and ratio >= threshold:
            reached = name
    return reached
