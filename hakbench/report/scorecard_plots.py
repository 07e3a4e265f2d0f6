"""results/plots/*.png from a Scorecard, byte-identical when regenerated.

What makes the bytes repeat: the Agg backend; matplotlib's default style (a user's
matplotlibrc is ignored) with the bundled DejaVu Sans; fixed figure size and dpi; and no
timestamp or version-dependent text beyond the Software field, which names the matplotlib
and Pillow versions so ``--check`` knows when bytes are comparable at all.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import PIL  # noqa: E402
from PIL import Image  # noqa: E402

from hakbench.tables.scorecard_model import MILESTONES, Scorecard, geomean, history_ratios  # noqa: E402

DPI = 100
STYLE = [
    "default",
    {
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "svg.hashsalt": "hakbench-scorecard",
        "figure.dpi": DPI,
        "savefig.dpi": DPI,
    },
]
# hakmem in reds, each reference allocator in its own colour, the same in every plot.
HAKMEM_COLOURS = ("#d62728", "#f4a3a3", "#8b1a1a", "#e377c2")
REFERENCE_COLOURS = {
    "system": "#7f7f7f",
    "mimalloc": "#1f77b4",
    "jemalloc": "#2ca02c",
    "tcmalloc": "#9467bd",
}


def software_tag() -> str:
    return f"hakbench scorecard; matplotlib {matplotlib.__version__}; Pillow {PIL.__version__}"


def same_maker(a: Path, b: Path) -> bool:
    """Were both PNGs written by the same matplotlib and Pillow versions?"""
    try:
        with Image.open(a) as ia, Image.open(b) as ib:
            return ia.text.get("Software") == ib.text.get("Software")
    except OSError:
        return False


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": software_tag()})
    plt.close(fig)
    return path


def _colours(card: Scorecard) -> dict[str, str]:
    hakmem = [lbl for lbl in card.labels() if lbl.startswith("hakmem")]
    out = {lbl: HAKMEM_COLOURS[i % len(HAKMEM_COLOURS)] for i, lbl in enumerate(hakmem)}
    for lbl in card.labels():
        out.setdefault(lbl, REFERENCE_COLOURS.get(lbl.split(":")[0], "#bcbd22"))
    return out


def _throughput(card: Scorecard, path: Path) -> Path:
    workloads = card.workloads()
    labels = card.labels()
    colour = _colours(card)
    ncols = 2
    nrows = math.ceil(len(workloads) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(12, 0.35 * len(labels) * nrows + 1.2 * nrows), squeeze=False
    )
    for ax, (workload, _) in zip(axes.flat, workloads, strict=False):
        y, width, err_lo, err_hi, colours, names = [], [], [], [], [], []
        for i, label in enumerate(labels):
            s = card.summary("throughput", workload, label)
            if s is None:
                continue
            y.append(i)
            names.append(label)
            colours.append(colour[label])
            med = (s.median or 0.0) / 1e6
            width.append(med)
            if s.median is not None and s.ci_low is not None and s.n > 1:
                err_lo.append(med - s.ci_low / 1e6)
                err_hi.append(s.ci_high / 1e6 - med)
            else:
                err_lo.append(0.0)
                err_hi.append(0.0)
            if s.status != "ok":
                ax.text(0, i, f"  {s.status}", va="center")
        ax.barh(y, width, xerr=[err_lo, err_hi], color=colours, capsize=3)
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_title(workload)
        ax.set_xlabel("Mops/s (median, 95 % CI)")
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(workloads) :]:
        ax.set_visible(False)
    fig.suptitle("Throughput per workload")
    fig.tight_layout()
    return _save(fig, path)


def _milestone_lines(ax) -> None:
    for name, threshold in MILESTONES:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=0.8, alpha=0.6)
        ax.annotate(
            name,
            (1.0, threshold),
            xycoords=("axes fraction", "data"),
            xytext=(3, -3),
            textcoords="offset points",
            fontsize=8,
        )


def _ratio(card: Scorecard, path: Path) -> Path:
    workloads = [w for w, _ in card.workloads()]
    standings = card.standings()
    labels = [st.label for st in standings]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / max(len(labels), 1)
    colour = _colours(card)
    for k, label in enumerate(labels):
        xs, ys, lo, hi = [], [], [], []
        for i, workload in enumerate(workloads):
            s = card.summary("throughput", workload, label)
            x = i - 0.4 + width * (k + 0.5)
            if s is not None and s.status != "ok":
                ax.text(x, 0.02, s.status, rotation=90, ha="center", va="bottom", fontsize=7)
            if s is None or s.ratio is None:
                continue
            xs.append(x)
            ys.append(s.ratio)
            both = s.ratio_ci_low is not None and s.n_pairs > 1
            lo.append(s.ratio - s.ratio_ci_low if both else 0.0)
            hi.append(s.ratio_ci_high - s.ratio if both else 0.0)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colour[label], label=label)
    _milestone_lines(ax)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel(f"throughput / {card.reference} (median of per-round ratios)")
    ax.set_title(f"Ratio to {card.reference} per workload (95 % CI)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.03, 1.0))
    fig.tight_layout()
    return _save(fig, path)


MAX_HISTORY_TICKS = 14  # commit labels per panel of history.png; past that, every k-th


def _history(card: Scorecard, path: Path) -> Path:
    refreshes = list(dict.fromkeys((r["date"], r["commit"]) for r in card.history))
    ratio = history_ratios(card.history)
    labels = [lbl for lbl in card.labels() if lbl.startswith("hakmem")]
    workloads = [w for w, _ in card.workloads()]
    # Panels two to a row, and ticks that name the commit alone (* when the tree had
    # uncommitted changes), slanted and thinned, so a long history never smears them.
    cols = min(max(len(labels), 1), 2)
    rows = -(-max(len(labels), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.6 * rows + 0.6), squeeze=False)
    cmap = plt.get_cmap("tab10")
    step = max(1, -(-len(refreshes) // MAX_HISTORY_TICKS))
    shown = range(0, len(refreshes), step)
    ticks = [refreshes[i][1][:7] + ("*" if "+dirty" in refreshes[i][1] else "") for i in shown]
    for ax, label in zip(axes.flat, labels, strict=False):
        for k, workload in enumerate(workloads):
            points = [
                (i, ratio[(*rid, label, workload)])
                for i, rid in enumerate(refreshes)
                if (*rid, label, workload) in ratio
            ]
            xs, ys = zip(*points, strict=True) if points else ((), ())
            ax.plot(
                xs, ys, marker="o", markersize=3, linewidth=1, color=cmap(k % 10), label=workload
            )
        geo = []
        for i, rid in enumerate(refreshes):
            rs = [ratio[k] for w in workloads if (k := (*rid, label, w)) in ratio]
            if rs:
                geo.append((i, geomean(rs)))
        xs, ys = zip(*geo, strict=True) if geo else ((), ())
        ax.plot(xs, ys, marker="s", linewidth=2.5, color="black", label="geomean")
        _milestone_lines(ax)
        ax.set_xticks(shown, ticks, fontsize=7, rotation=40, ha="right")
        ax.set_xlim(-0.5, max(len(refreshes) - 0.5, 0.5))
        ax.set_title(label)
        ax.set_ylabel(f"ratio to {card.reference}")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(labels) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="best", ncol=2)
    fig.suptitle(
        f"Throughput ratio to {card.reference} over refreshes (commit measured; "
        "* = uncommitted changes)"
    )
    fig.tight_layout()
    return _save(fig, path)


def draw_plots(card: Scorecard, out_dir: Path) -> list[Path]:
    with plt.style.context(STYLE):
        return [
            _throughput(card, out_dir / "throughput.png"),
            _ratio(card, out_dir / f"ratio_to_{card.reference}.png"),
            _history(card, out_dir / "history.png"),
        ]
