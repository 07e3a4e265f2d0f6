"""A matrix run's summary table: per cell the median and 95 % CI of a metric and the ratio
to its reference cell (the median of the ratios of their adjacent pairs), and the columns
``summary.csv`` and ``results/scorecard.csv`` write. Pure: samples and meta.json's cell list
in, ``CellSummary`` rows out. ``hakbench.experiments.matrix`` runs the matrix and writes it;
``hakbench.experiments.scorecard`` and the reports (``hakbench.report.apps``,
``hakbench.report.scorecard_md``) read it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hakbench.engine import schedule


def reference_index(coords: list[dict], reference: Mapping[str, str]) -> list[int | None]:
    """For each cell, the index of its reference cell (or None when there is none).

    The reference of a cell matches the selector and agrees with the cell on every other
    axis both have: same workload, and for a hakmem reference the same variant, profile
    and switches where the cell has them. The first match in cell order wins.
    """
    out: list[int | None] = []
    for c in coords:
        found = None
        for j, r in enumerate(coords):
            if any(r.get(k) != v for k, v in reference.items()):
                continue
            if all(c.get(k, v) == v for k, v in r.items() if k not in reference):
                found = j
                break
        out.append(found)
    return out


@dataclass(frozen=True)
class CellSummary:
    key: str
    label: str
    coords: dict
    metric: str
    # "ok" | "FAILED" (a failure on its side or its reference's: no ratio is given, survivors
    # never decide; stats.failures) | "failed" (no good sample) | "no samples"
    status: str
    reason: str  # what failed: counts per side and the first error, "" when nothing did
    n: int  # good samples carrying the metric
    n_failed: int
    median: float | None
    ci_low: float | None
    ci_high: float | None
    reference: str | None = None  # label of the reference cell
    ratio: float | None = None  # median of the ratios cell/reference of adjacent pairs
    ratio_ci_low: float | None = None
    ratio_ci_high: float | None = None
    n_pairs: int = 0


def _most_frequent(errors: list[str]) -> str:
    if not errors:
        return ""
    counts: dict[str, int] = {}
    for e in errors:
        counts[e] = counts.get(e, 0) + 1
    best = max(counts.values())
    first = next(e for e in errors if counts[e] == best)
    return first if len(counts) == 1 else f"{first} ({best} of {len(errors)})"


def _values(samples: list[dict], metric: str) -> list[float]:
    out = []
    for s in samples:
        v = s.get("metrics", {}).get(metric)
        if s.get("status") == "ok" and isinstance(v, int | float):
            out.append(float(v))
    return out


def _pair_ratios(pairs: list[tuple[dict, dict]], metric: str) -> list[float]:
    """cell/reference per complete pair carrying ``metric`` on both sides."""
    out = []
    for a, b in pairs:
        x, y = a["metrics"].get(metric), b["metrics"].get(metric)
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0:
            out.append(y / x)
    return out


def _round_pairs(ref: list[dict], own: list[dict]) -> list[tuple[dict, dict]]:
    """Plan-1 samples (no pair or side recorded): the reference and the cell of a round."""
    by_round = {s["round"]: s for s in ref if s.get("status") == "ok"}
    ok = [s for s in own if s.get("status") == "ok" and s["round"] in by_round]
    return [(by_round[s["round"]], s) for s in ok]


def summarize(
    samples: Iterable[dict],
    cells: list[dict],
    metric: str,
    reference: Mapping[str, str] | None = None,
) -> list[CellSummary]:
    """Per cell: median and 95 % CI of ``metric`` over measured samples, and the ratio to
    the reference cell as the median of the ratios of its adjacent pairs
    (hakbench.engine.schedule.complete_pairs), unless a failure on either side makes it FAILED.

    ``cells`` is meta.json's cell list (key, label, coords), in report order. Only samples
    of the phase that measures the metric count: "instructions" for ``ir_per_op`` (one
    exact count per cell: the ratio is of the counts), "measure" for the rest. Samples of
    plan 1 (no pair recorded) are paired by round.
    """
    from hakbench.stats.stats import FAILED, failures, median_ci

    phase = "instructions" if metric == "ir_per_op" else "measure"
    samples = [s for s in samples if s.get("phase") == phase]
    by_cell: dict[str, list[dict]] = {c["key"]: [] for c in cells}
    for s in samples:
        if s.get("cell") in by_cell:
            by_cell[s["cell"]].append(s)
    coords = [c["coords"] for c in cells]
    refs = reference_index(coords, reference) if reference else [None] * len(cells)
    out = []
    for i, c in enumerate(cells):
        own = by_cell[c["key"]]
        values = _values(own, metric)
        failed = [s for s in own if s.get("status") != "ok"]
        med = lo = hi = None
        if values:
            med, lo, hi = median_ci(values)
        ratios: list[float] = []
        judged_own, judged_ref = own, []
        j = refs[i]
        if j is not None and j != i:
            ref_all = by_cell[cells[j]["key"]]
            judged_ref = ref_all
            if phase == "instructions":
                ref_values = _values(ref_all, metric)
                if values and ref_values and ref_values[0] > 0:
                    ratios = [values[0] / ref_values[0]]
            elif any(s.get("side") for s in own):
                judged_own = [s for s in own if s.get("pair") == c["key"]]
                judged_ref = [s for s in ref_all if s.get("pair") == c["key"]]
                ratios = _pair_ratios(schedule.complete_pairs(samples, pair=c["key"]), metric)
            else:
                ratios = _pair_ratios(_round_pairs(ref_all, own), metric)
        elif j == i:
            ratios = [1.0] * len(values)
        judged = failures(judged_ref, judged_own)
        status = "no samples" if not own else "failed" if not values else "ok"
        ratio = rlo = rhi = None
        if status == "ok" and judged.verdict == FAILED:
            status = FAILED
        elif ratios:
            ratio, rlo, rhi = median_ci(ratios)
        errors = [str(s.get("error") or s.get("status")) for s in failed]
        out.append(
            CellSummary(
                key=c["key"],
                label=c["label"],
                coords=dict(c["coords"]),
                metric=metric,
                status=status,
                reason=(judged.note if values else "") or _most_frequent(errors),
                n=len(values),
                n_failed=len(failed),
                median=med,
                ci_low=lo,
                ci_high=hi,
                reference=cells[j]["label"] if j is not None else None,
                ratio=ratio,
                ratio_ci_low=rlo,
                ratio_ci_high=rhi,
                n_pairs=len(ratios),
            )
        )
    return out


# The columns of a cell summary, after what names the cell: matrix summary.csv and
# results/scorecard.csv write them alike (summary_values).
SUMMARY_STATS_FIELDS = ("metric", "status", "n", "n_failed", "median", "ci_low", "ci_high")
SUMMARY_RATIO_FIELDS = ("ratio_ci_low", "ratio_ci_high", "n_pairs", "reason")
SUMMARY_FIELDS = (
    "cell",
    "label",
    "workload",
    *SUMMARY_STATS_FIELDS,
    "reference",
    "ratio",
    *SUMMARY_RATIO_FIELDS,
)


def metric_digits(metric: str) -> int:
    """Decimals a matrix prints for ``metric``: seconds to the ms, Ir/op to 0.01."""
    from hakbench.core.metrics import METRICS

    if metric == "ir_per_op":
        return 2
    return 3 if METRICS[metric].unit == "s" else 0


def fmt(value: float | None, digits: int) -> str:
    """Fixed formatting so regenerated files are byte-identical; '' for no value."""
    return "" if value is None else f"{value:.{digits}f}"


def summary_values(s: CellSummary, digits: int, reference: str) -> list:
    """The values of SUMMARY_STATS_FIELDS, the reference, the ratio and SUMMARY_RATIO_FIELDS
    of one summary, formatted (``digits`` for the metric's own values)."""
    return [
        s.metric,
        s.status,
        s.n,
        s.n_failed,
        fmt(s.median, digits),
        fmt(s.ci_low, digits),
        fmt(s.ci_high, digits),
        reference,
        fmt(s.ratio, 4),
        fmt(s.ratio_ci_low, 4),
        fmt(s.ratio_ci_high, 4),
        s.n_pairs,
        s.reason,
    ]


def write_summary_csv(path: Path, summaries: list[CellSummary]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(SUMMARY_FIELDS)
        for s in summaries:
            values = summary_values(s, metric_digits(s.metric), s.reference or "")
            w.writerow([s.key, s.label, s.coords["workload"], *values])
