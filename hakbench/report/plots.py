"""paired_ratios.png: every measured pair's B/A ratio of the judged metric, per workload, in
run order, with the median, its CI and the threshold band, so a drift or a mode switch shows."""

from __future__ import annotations

import math
from pathlib import Path

from hakbench.engine.schedule import complete_pairs
from hakbench.stats.stats import median_ci, paired_ratios


def plot_paired_ratios(
    samples: list[dict],
    metric: str | dict,
    workloads: list[str],
    path: Path,
    *,
    threshold_pct: float = 1.0,
    bounds: dict | None = None,
) -> Path | None:
    """``metric``: the judged metric, or workload -> its judged metric. ``bounds``: workload
    -> (estimate, low, high) of a sequential run's verdict, drawn instead of a fixed-n CI
    (the interval that decided it: the confidence sequence's one-sided bounds)."""
    bounds = bounds or {}
    panels = []
    for w in workloads:
        m = metric.get(w) if isinstance(metric, dict) else metric
        pairs = complete_pairs(samples, w)
        pairs = [(x, y) for x, y in pairs if m in x["metrics"] and m in y["metrics"]]
        a = [x["metrics"][m] for x, _ in pairs]
        b = [y["metrics"][m] for _, y in pairs]
        panels.append((w, m, paired_ratios(a, b)))
    panels = [(w, m, r) for w, m, r in panels if len(r)]
    if not panels:
        return None
    import matplotlib  # heavy imports live where they are used: `hakbench --help` stays fast

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
    t = threshold_pct / 100
    for ax, (w, m, r) in zip(axes[:, 0], panels, strict=True):
        med, lo, hi = bounds.get(w) or median_ci(r)
        what = "sequence bounds that decide" if w in bounds else "95 % CI"
        ax.axhspan(1 - t, 1 + t, color="0.9", label=f"±{threshold_pct:g} % band")
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.plot(range(len(r)), r, "o", ms=3, color="tab:blue", label="pair B/A")
        ax.axhline(med, color="tab:red", lw=1.2, label=f"median {med:.4f}")
        if math.isfinite(lo) and math.isfinite(hi):
            ax.axhspan(lo, hi, color="tab:red", alpha=0.15, label=what)
        ax.set_title(f"{w}: {m} B/A per pair (n={len(r)})", fontsize=10)
        ax.set_xlabel("pair (run order)")
        ax.set_ylabel("B/A")
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
