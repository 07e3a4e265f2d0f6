"""The applications-and-stress report of a matrix run: time and peak RSS per workload and
allocator, as ratios to the reference allocator (mimalloc in the lab's matrices).

Written by ``hakbench matrix`` next to summary.csv when the matrix has a command workload
or a workload of the ``apps`` or ``stress`` groups: ``apps.md`` (the table and the two
geomeans per allocator), ``apps_time.png`` and ``apps_memory.png`` (grouped bars of the
ratios with their 95 % CIs; a cell with no good run is drawn as a red cross labelled with
why: crash, timeout, wrong output, wrong allocator).

Time: a command workload's own time metric (wall_s, cpu_s, app_time_s) as is; a rate
(harness throughput, app_rate) is turned into time as reference/cell. Every ratio is the
median of the ratios of adjacent pairs (each cell runs back to back with its reference; a
stored run of plan 1 is paired by round), with a distribution-free 95 % CI
(hakbench.tables.matrix_summary.summarize).
Memory: ``maxrss_kb`` the same way (for a command workload wait4's ru_maxrss through
hakrun, for a harness program its own VmHWM).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hakbench.core.metrics import METRICS
from hakbench.engine.load import describe as describe_load
from hakbench.tables.matrix_summary import CellSummary, summarize

REPORT_GROUPS = {"apps", "stress"}
FAILURE_WORDS = {
    "failed": "crash",
    "timeout": "timeout",
    "wrong_output": "wrong output",
    "wrong_allocator": "wrong allocator",
    "error": "error",
}


@dataclass
class Row:
    workload: str
    label: str
    allocator: str
    time_metric: str
    time: CellSummary
    memory: CellSummary
    time_ratio: tuple | None  # (ratio, ci_low, ci_high) to the reference, lower is better
    memory_ratio: tuple | None
    failures: str  # "wrong output 3/5", "" when every measured run was ok


def wants_report(cells: list[dict]) -> bool:
    return any(
        c.get("primary_metric", "throughput") != "throughput"
        or REPORT_GROUPS & set(c.get("groups", ()))
        for c in cells
    )


def _time_ratio(s: CellSummary) -> tuple | None:
    if s.ratio is None:
        return None
    if METRICS[s.metric].higher_is_better:  # a rate: time is its inverse
        return (1 / s.ratio, 1 / s.ratio_ci_high, 1 / s.ratio_ci_low)
    return (s.ratio, s.ratio_ci_low, s.ratio_ci_high)


def _failures(samples: list[dict], key: str) -> str:
    runs = [s for s in samples if s.get("cell") == key and s.get("phase") == "measure"]
    bad = Counter(FAILURE_WORDS.get(s["status"], s["status"]) for s in runs if s["status"] != "ok")
    return ", ".join(f"{why} {n}/{len(runs)}" for why, n in bad.most_common())


def apps_rows(samples: list[dict], meta: dict) -> list[Row]:
    cells = meta["cells"]
    reference = meta["matrix"]["reference"]
    rows = []
    for metric in sorted({c.get("primary_metric", "throughput") for c in cells}):
        chosen = [c for c in cells if c.get("primary_metric", "throughput") == metric]
        times = summarize(samples, chosen, metric, reference)
        memory = summarize(samples, chosen, "maxrss_kb", reference)
        for c, t, m in zip(chosen, times, memory, strict=True):
            rows.append(
                Row(
                    c["coords"]["workload"],
                    c["label"],
                    c["coords"]["allocator"],
                    metric,
                    t,
                    m,
                    _time_ratio(t),
                    (m.ratio, m.ratio_ci_low, m.ratio_ci_high) if m.ratio is not None else None,
                    _failures(samples, c["key"]),
                )
            )
    order = {c["key"]: i for i, c in enumerate(cells)}
    return sorted(rows, key=lambda r: order[r.time.key])


def geomeans(rows: list[Row], attr: str) -> dict[str, tuple[float, int]]:
    """label -> (geomean of the ratios, workloads it covers)."""
    logs: dict[str, list[float]] = {}
    for r in rows:
        ratio = getattr(r, attr)
        if ratio is not None and ratio[0] > 0:
            logs.setdefault(r.label, []).append(math.log(ratio[0]))
    return {k: (math.exp(sum(v) / len(v)), len(v)) for k, v in logs.items()}


def _ratio_text(ratio) -> str:
    if ratio is None:
        return "-"
    return f"{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}]"


def _value_text(s: CellSummary) -> str:
    if s.median is None:
        return "-"
    unit = METRICS[s.metric].unit
    if s.metric == "maxrss_kb":
        return f"{s.median / 1024:.1f} MiB"
    return f"{s.median:.3f} {unit}" if unit == "s" else f"{s.median:,.0f} {unit}"


def linkage_notes(samples: list[dict], meta: dict) -> list[str]:
    """Cells without a preload whose program's malloc is not glibc's (it links another
    allocator itself: Debian's redis-server links libjemalloc)."""
    notes = []
    for c in meta["cells"]:
        if c["coords"]["allocator"] != "system":
            continue
        impls = {
            (s.get("process") or {}).get("malloc_impl")
            for s in samples
            if s.get("cell") == c["key"] and s.get("status") == "ok"
        } - {None}
        other = sorted(i for i in impls if "libc.so" not in i)
        if other:
            notes.append(
                f"{c['coords']['workload']}: the system row is not glibc's malloc: the program "
                f"links {', '.join(other)} itself."
            )
    return notes


def ratio_table(rows: list[Row], ref: str, name: str = "workload") -> list[str]:
    """The table of time and peak RSS per workload and allocator, with their ratios to
    ``ref`` and CIs."""
    lines = [
        f"| {name} | allocator | time | time ÷ {ref} | peak RSS | RSS ÷ {ref} | n | failed runs |",
        "|---|---|---:|---|---:|---|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.workload} | {r.label} | {_value_text(r.time)} | {_ratio_text(r.time_ratio)} "
            f"| {_value_text(r.memory)} | {_ratio_text(r.memory_ratio)} | {r.time.n} "
            f"| {r.failures or '-'} |"
        )
    return lines


def geomean_table(rows: list[Row], name: str = "workloads") -> list[str]:
    """Per allocator the geomeans of its time and memory ratios, and what they cover."""
    gt, gm = geomeans(rows, "time_ratio"), geomeans(rows, "memory_ratio")
    n_workloads = len({r.workload for r in rows})
    lines = [
        f"| allocator | time | memory | {name} with a ratio |",
        "|---|---:|---:|---:|",
    ]
    for label in dict.fromkeys(r.label for r in rows):
        t = gt.get(label)
        mm = gm.get(label)
        lines.append(
            f"| {label} | {f'{t[0]:.3f}' if t else '-'} | {f'{mm[0]:.3f}' if mm else '-'} "
            f"| {t[1] if t else 0} of {n_workloads} |"
        )
    return lines + [
        "",
        f"A {name[:-1]} without a ratio for an allocator (every run failed, or the "
        "reference's did) is left out of that allocator's geomeans, and the table says why.",
    ]


def apps_markdown(rows: list[Row], meta: dict, notes: list[str] = ()) -> str:
    ref = meta["matrix"]["reference"]["allocator"]
    m = meta["matrix"]
    lines = [
        f"# Applications and stress: {m['name']}",
        "",
        f"{m['runs']} measured rounds (+{m['warmup']} warm-up), every cell once per round in a "
        + (
            f"seeded shuffled order. Ratios are to {ref}: the median of per-round ratios with a "
            if m.get("plan", 1) == 1
            else f"seeded shuffled order, each cell back to back with {ref}. Ratios are to "
            f"{ref}: the median of the ratios of those adjacent pairs with a "
        )
        + "95 % CI; time ratio < 1 and memory ratio < 1 are better. Time is the workload's own "
        "judged metric (" + ", ".join(sorted({r.time_metric for r in rows})) + "); a rate "
        "counts as reference rate / rate.",
        "",
        describe_load(meta.get("load")),
        "",
        *ratio_table(rows, ref),
    ]
    lines += [""] + [f"Note: {n}" for n in notes]
    lines += ["", f"## Geometric means over the workloads (ratio to {ref})", ""]
    lines += [*geomean_table(rows), ""]
    lines += [
        "![time](apps_time.png)",
        "",
        "![memory](apps_memory.png)",
        "",
    ]
    return "\n".join(lines)


def plot_ratios(rows: list[Row], attr: str, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    labels = list(dict.fromkeys(r.label for r in rows))
    width = 0.8 / max(len(labels), 1)
    n_bars = len(workloads) * len(labels)
    fig, ax = plt.subplots(figsize=(min(14, max(6, 0.28 * n_bars + 2)), 4.5))
    top = 1.0
    for j, label in enumerate(labels):
        for i, w in enumerate(workloads):
            r = next((x for x in rows if x.workload == w and x.label == label), None)
            if r is None:
                continue
            x = i + (j - (len(labels) - 1) / 2) * width
            ratio = getattr(r, attr)
            if ratio is None:
                ax.plot([x], [1.0], "x", color="red", ms=8, mew=2)
                why = r.failures.split(",")[0].rsplit(" ", 1)[0] if r.failures else "no ratio"
                ax.text(
                    x, 1.03, why, rotation=90, fontsize=7, color="red", ha="center", va="bottom"
                )
                continue
            err = [[ratio[0] - ratio[1]], [ratio[2] - ratio[0]]]
            ax.bar(x, ratio[0], width, color=f"C{j}")
            ax.errorbar(x, ratio[0], yerr=err, fmt="none", ecolor="black", lw=0.8)
            top = max(top, ratio[2])
            if r.failures:
                ax.text(x, ratio[2] * 1.01, "!", color="red", ha="center", fontsize=8)
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, max(top, 1.5) * 1.15)
    ax.set_ylabel("ratio to reference (lower is better)")
    ax.set_title(title, fontsize=10)
    from matplotlib.patches import Patch

    handles = [Patch(color=f"C{j}", label=label) for j, label in enumerate(labels)]
    ax.legend(handles=handles, fontsize=7, ncol=min(len(labels), 4), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_apps_report(out_dir: Path) -> Path | None:
    """apps.md and its two charts in a matrix run directory; None when it has no command
    or apps/stress workload."""
    from hakbench.engine.store import load_samples

    meta = json.loads((out_dir / "meta.json").read_text())
    if not wants_report(meta["cells"]):
        return None
    samples_file = out_dir / "samples.jsonl"
    samples = load_samples(samples_file) if samples_file.exists() else []
    rows = apps_rows(samples, meta)
    ref = meta["matrix"]["reference"]["allocator"]
    plot_ratios(rows, "time_ratio", f"time relative to {ref}", out_dir / "apps_time.png")
    plot_ratios(rows, "memory_ratio", f"peak RSS relative to {ref}", out_dir / "apps_memory.png")
    path = out_dir / "apps.md"
    path.write_text(apps_markdown(rows, meta, linkage_notes(samples, meta)))
    return path
