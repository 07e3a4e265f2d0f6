"""results/SCORECARD.md from a Scorecard: a pure function of the stored samples and history.

Nothing here reads the clock, the host or the work tree: every fact printed comes from
meta.json, the samples or history.csv, so regenerating gives the same bytes.
"""

from __future__ import annotations

import shlex

from hakbench.tables.matrix_summary import CellSummary
from hakbench.tables.scorecard_model import (
    MILESTONES,
    Scorecard,
    geomean,
    history_ratios,
    milestone_of,
)

DASH = "—"


def _mops(v: float | None) -> str:
    return DASH if v is None else f"{v / 1e6:.2f}"


def _ratio(s: CellSummary) -> str:
    if s.ratio is None:
        return DASH
    if s.reference == s.label:
        return "reference"
    text = f"{s.ratio:.3f}"
    if s.ratio_ci_low is not None and s.n_pairs > 1:
        text += f" ({s.ratio_ci_low:.3f}–{s.ratio_ci_high:.3f})"
    m = milestone_of(s.ratio)
    return text + (f" {m}" if m else "")


def _rss_mib(s: CellSummary | None) -> str:
    return DASH if s is None or s.median is None else f"{s.median / 1024:.1f}"


def _count(s: CellSummary | None) -> str:
    return DASH if s is None or s.median is None else f"{s.median:,.0f}"


def _ir(s: CellSummary | None) -> str:
    return DASH if s is None or s.median is None else f"{s.median:.1f}"


def _standing_section(card: Scorecard) -> list[str]:
    ref = card.reference
    names = ", ".join(f"**{n}** ≥ {t:.2f}" for n, t in MILESTONES)
    lines = [
        "## Where we stand",
        "",
        f"Milestones, as the ratio of median throughput to {ref}'s on the same workload: "
        f"{names} (M3 is parity).",
        "",
        f"| allocator | geomean ratio to {ref} | workloads matched | milestone (geomean) "
        f"| workloads at M1 · M2 · M3 | Ir/op vs {ref} (geomean) |",
        "|---|---:|---|---|---|---:|",
    ]
    notes = []
    total = len(card.workloads())
    for st in card.standings():
        geo = DASH if st.geomean is None else f"{st.geomean:.3f}"
        counts = " · ".join(str(st.at_least[m]) for m, _ in MILESTONES)
        label = f"**{st.label}**" if st.label.startswith("hakmem") else st.label
        ir = DASH if st.ir_geomean is None else f"{st.ir_geomean:.3f} ({st.ir_matched})"
        lines.append(
            f"| {label} | {geo} | {len(st.matched)} of {total} | {st.milestone or 'below M1'} "
            f"| {counts} | {ir} |"
        )
        if st.unmatched:
            why = "; ".join(f"{w} ({reason})" for w, reason in st.unmatched)
            notes.append(f"- {st.label} not counted on: {why}")
    lines += [
        "",
        "The geomean runs over matched workloads only — those where both the allocator and "
        f"{ref} have a per-round ratio — as benchstat does; a workload missing either side "
        "is listed below the table, never counted as 0 or 1. Milestones are read off point "
        "estimates: on a noisy machine the per-workload CIs below are wide, and a ratio whose "
        "CI straddles a threshold has not clearly reached it. The Ir/op column (instructions "
        f"per op relative to {ref}, lower is fewer; workloads counted in brackets) is exact "
        "and does not move with the machine's load.",
    ]
    if notes:
        lines += ["", *notes]
    return lines


def _workload_section(card: Scorecard, workload: str, description: str) -> list[str]:
    cell = next(c for c in card.cells if c["coords"]["workload"] == workload)
    lines = [f"### {workload}", ""]
    if description:
        lines.append(f"{description} · `{shlex.join(cell['argv'])}`")
        lines.append("")
    lines += [
        f"| allocator | Mops/s (median) | 95 % CI | ratio to {card.reference} (95 % CI) "
        "| peak RSS MiB | minor faults | Ir/op | n |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label in card.labels():
        s = card.summary("throughput", workload, label)
        if s is None:
            continue
        rss = card.summary("maxrss_kb", workload, label)
        flt = card.summary("minflt", workload, label)
        ir = card.summary("ir_per_op", workload, label)
        n = f"{s.n}" + (f" ({s.n_failed} failed)" if s.n_failed else "")
        if s.status != "ok":
            lines.append(f"| {label} | **{s.status}**: {s.reason or 'not run'} | | | | | | {n} |")
            continue
        ci = DASH if s.ci_low is None or s.n < 2 else f"{_mops(s.ci_low)}–{_mops(s.ci_high)}"
        lines.append(
            f"| {label} | {_mops(s.median)} | {ci} | {_ratio(s)} | {_rss_mib(rss)} "
            f"| {_count(flt)} | {_ir(ir)} | {n} |"
        )
    failed_notes = [
        f"- {s.label}: {s.n_failed} failed sample(s): {s.reason}"
        for s in card.throughput
        if s.coords["workload"] == workload and s.status == "ok" and s.n_failed
    ] + [
        f"- {s.label}: instruction count {s.status}: {s.reason}"
        for s in card.by_metric.get("ir_per_op", [])
        if s.coords["workload"] == workload and s.status == "failed"
    ]
    if failed_notes:
        lines += ["", *failed_notes]
    return lines


def _ir_tool(card: Scorecard) -> str:
    if "ir_per_op" not in card.by_metric:
        return "not measured in this refresh"
    return "counted with " + (" and ".join(card.ir_tools) or "no tool: every count failed")


def _calibration_section(card: Scorecard) -> list[str]:
    """The lab machine's noise floor of an A/B and, beside it, the layout spread per
    workload (``calibrate --layouts``): how small a difference these numbers can carry."""
    noise, layouts = card.calibration.get("noise"), card.calibration.get("layouts")
    if not noise and not layouts:
        return []
    lines = [
        "## Noise floor and layout spread",
        "",
        "From the lab machine's committed calibrations (`results/calibration/`): the noise "
        "floor is the smallest effect a fixed-count `ab` resolves there (`hakbench "
        "calibrate`); the layout spread is how much a workload's time moves when only the "
        "code layout changes (`hakbench calibrate --layouts K`: an A/A across K relinked "
        "layouts of identical code, the SD of the layouts' own effects, the pairs' noise "
        "removed). A difference between two builds smaller than the layout spread can be "
        "where the code landed: compare them with `ab --layouts K`.",
        "",
        "| workload | noise floor (ab, fixed count) | pair spread | layout spread | calibrated |",
        "|---|---:|---:|---:|---|",
    ]
    per = (layouts or {}).get("workloads", {})
    names = list(dict.fromkeys([*([noise["workload"]] if noise else []), *per]))
    for w in names:
        floor = (
            f"{noise['noise_floor_pct']:.2f} % ({noise['runs']} pairs)"
            if noise and noise.get("workload") == w and noise.get("noise_floor_pct") is not None
            else DASH
        )
        e = per.get(w, {})
        pct = [
            DASH if e.get(k) is None else f"{100 * e[k]:.2f} %"
            for k in ("pair_spread", "layout_spread")
        ]
        when = []
        if floor != DASH:
            when.append(f"noise {str(noise.get('date', '?'))[:10]}")
        if e:
            when.append(
                f"layouts {str(layouts.get('date', '?'))[:10]}, K = {layouts.get('layouts')}"
            )
        lines.append(f"| {w} | {floor} | {pct[0]} | {pct[1]} | {'; '.join(when)} |")
    return lines


def _provenance(card: Scorecard) -> list[str]:
    m = card.meta
    mx = m["matrix"]
    git = m.get("git") or {}
    commit = git.get("commit") or "unknown"
    dirty = " (work tree had uncommitted changes)" if git.get("dirty") else ""
    perf = m.get("perf") or {}
    no_counters = "instructions" in perf.get("unsupported", [])
    perf_text = perf.get("note") or ("available" if perf.get("available") else "not available")
    lines = [
        "## How these numbers were taken",
        "",
        f"- Refreshed {m['date']} at commit `{commit}`{dirty} by `{m.get('command', '?')}`"
        + (" — a **quick** refresh, fewer rounds than a full one" if m.get("quick") else "")
        + ".",
        f"- Host {m.get('hostname')}: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs, "
        f"kernel {m.get('kernel')}, {m.get('compiler')}, {m.get('glibc')}, "
        f"THP {m.get('thp_enabled')}; 1-min load average at start {m.get('load_avg_1min', 0):.2f}.",
        f"- perf: {perf_text}.",
        f"- Design: {mx['runs']} measured rounds, {mx['warmup']} warm-up round(s) discarded; "
        + (
            "each round runs every cell once, in an order shuffled per round with seed "
            if mx.get("plan", 1) == 1
            else "each round runs every cell once, back to back with the "
            f"{card.reference} cell of its workload (that cell runs once beside each cell "
            "compared with it; the order within a pair is random), the pairs shuffled per "
            "round with seed "
        )
        + f"{mx['seed']}, so every cell meets the VM's slow and fast phases alike. "
        f"{card.n_samples} samples stored in `results/scorecard/samples.jsonl`.",
        "- Statistics: median over rounds with a distribution-free 95 % CI of the median "
        "(order statistics); with fewer than 6 rounds that interval is the full min–max range "
        f"and covers less than 95 %. The ratio to {card.reference} is the median of "
        + (
            "per-round ratios (the two cells ran in the same round)"
            if mx.get("plan", 1) == 1
            else "the ratios of the adjacent pairs (the two processes ran one after the other)"
        )
        + ", with its CI the same way. A cell with a failed sample on either side of its "
        "pairs is FAILED, with no ratio. Peak RSS and "
        "minor faults are medians of the harness process's own figures.",
        "- Ir/op: instructions per harness op, start-up netted out, counted once per cell "
        f"after the timed rounds ({_ir_tool(card)}); exact, but blind to cache misses, "
        "the kernel and real thread timing. A quick refresh skips it."
        + (" This host has no hardware counters." if no_counters else ""),
    ]
    for s in card.skipped:
        lines.append(f"- Skipped {s['label']}: {s['reason']}.")
    return lines


def _history_section(card: Scorecard) -> list[str]:
    refreshes = list(dict.fromkeys((r["date"], r["commit"]) for r in card.history))
    ratio = history_ratios(card.history)
    workloads = [w for w, _ in card.workloads()]
    labels = [lbl for lbl in card.labels() if lbl.startswith("hakmem")]
    lines = [
        "## History",
        "",
        f"{len(refreshes)} refresh(es) in `results/history.csv`; geomean ratio to "
        f"{card.reference} over the workloads of this matrix each refresh has a ratio for "
        "(how many in brackets).",
        "",
        "| refreshed | commit | " + " | ".join(labels) + " |",
        "|---|---|" + "---:|" * len(labels),
    ]
    for date, commit in refreshes:
        cols = []
        for label in labels:
            rs = [ratio[k] for w in workloads if (k := (date, commit, label, w)) in ratio]
            cols.append(f"{geomean(rs):.3f} ({len(rs)})" if rs else DASH)
        lines.append(f"| {date} | `{commit}` | " + " | ".join(cols) + " |")
    return lines


def scorecard_markdown(card: Scorecard) -> str:
    ref = card.reference
    allocators = dict.fromkeys(c["coords"]["allocator"] for c in card.cells)
    others = ", ".join(a for a in allocators if a != "hakmem")
    lines = [
        f"# Scorecard: hakmem against {others}",
        "",
        "Generated by `hakbench scorecard` from the samples in `results/scorecard/`; do not "
        "edit. `hakbench scorecard --check` (run by `make test`) fails when this file, "
        "`scorecard.csv`, `history.csv` or the plots differ from what those samples give. "
        "Refresh on the benchmark machine with `hakbench scorecard --refresh`.",
        "",
        *_standing_section(card),
        "",
        "## Per workload",
        "",
        f"Median throughput over rounds; the ratio is to {ref} on the same workload and names "
        "the milestone it reaches. A cell that failed stays in the table with its reason.",
    ]
    for workload, description in card.workloads():
        lines += ["", *_workload_section(card, workload, description)]
    lines += [
        "",
        "## Plots",
        "",
        "![median throughput with 95 % CI, per workload](plots/throughput.png)",
        "",
        f"![ratio to {ref} per workload, with the milestones](plots/ratio_to_{ref}.png)",
        "",
        f"![ratio to {ref} over refreshes](plots/history.png)",
        "",
        "The plots are drawn with matplotlib's Agg backend at a fixed size and dpi, with "
        "default style and no timestamp. `--check` compares them byte for byte when the "
        "committed PNG was made by the same matplotlib and Pillow versions (recorded in the "
        "PNG's Software field); made by other versions, a PNG is not compared — the numbers "
        "it shows are checked exactly in the CSV files.",
        "",
        *_calibration_section(card),
        "",
        *_provenance(card),
        "",
        *_history_section(card),
    ]
    return "\n".join(lines) + "\n"
