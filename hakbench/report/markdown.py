"""report.md of an A/B: the verdicts, the rule, the numbers behind them, what failed."""

from __future__ import annotations

import math
from pathlib import Path

from hakbench.core.metrics import METRICS, PERF_SOURCED
from hakbench.engine.instructions import BLIND_SPOTS
from hakbench.engine.load import describe as describe_load
from hakbench.report.ab_notes import ab_failure_lines, ab_notes_lines, ab_unavailable_lines
from hakbench.report.ab_rule import rule_lines, share_text, warning_lines
from hakbench.stats.stats import INCONCLUSIVE
from hakbench.stats.stopper import LAYOUT_LIMITED_PAIRS, LAYOUT_RULE

# Rows of the per-workload table, in the order of the existing notes.
TABLE_METRICS = (
    "throughput",
    "app_rate",
    "app_time_s",
    "cpu_s",
    "task_clock_ms",
    "user_s",
    "sys_s",
    "wall_s",
    "page_faults",
    "minflt",
    "majflt",
    "maxrss_kb",
    "rss_end_kb",
    "context_switches",
    "cpu_migrations",
    "cycles",
    "instructions",
    "ipc",
    "branch_misses",
    "ir_per_op",
)

# Why ab's measured pairs run without perf by default (hakbench.experiments.ab's PERF_MODES).
PERF_MODE_WHY = (
    "Measured pairs run without perf by default because on this VM wrapping every sample in "
    "`perf stat` roughly doubled the width of the throughput CI (4.9-7.5 % against 1.7-4.3 % "
    "without, same ~2 % A/B at load 2.6-3.6) and halved the detections (1/4 against 3/4)."
)


def fmt(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and abs(v) < 1e4:
        return f"{v:.{digits}g}"
    return f"{v:,.0f}"


def fmt_ratio(c, *, deciding: bool = False) -> str:
    """``ratio [low, high]``; ``deciding``: the interval the verdict was decided on (a
    sequential run's one-sided bounds; a fixed count's CI)."""
    if math.isnan(c.ratio):
        return "-"
    low, high = c.ci_low, c.ci_high
    if deciding and getattr(c, "decide_low", None) is not None:
        low, high = c.decide_low, c.decide_high
    ci = "" if low == high else f" [{low:.4f}, {high:.4f}]"
    return f"{c.ratio:.4f}{ci}"


def fmt_p(p) -> str:
    return "-" if p is None or math.isnan(p) else f"{p:.3g}"


def rss_verdict(result, workload: str, metric: str = "maxrss_kb") -> str:
    """``NEUTRAL 1.0321`` for the workload's peak-RSS guardrail (or ``metric``'s), ``-``
    when not measured."""
    g = next(
        (c for c in result.comparisons if c.workload == workload and c.metric == metric),
        None,
    )
    if g is None or math.isnan(g.ratio):
        return "-"
    return f"{g.verdict} {g.ratio:.4f}"


def stop_text(c) -> str:
    """How long a primary comparison's pairs took and why they stopped; for INCONCLUSIVE,
    the pairs in all (and the seconds more) that would likely decide."""
    why = {
        "decided": "decided",
        "budget": "budget ran out",
        "failed": "a side failed",
        "drift": "drifted (no single change fits its pairs: more pairs will not decide)",
        "load spike": "stopped by a load spike",
        "layout-limited": "layout-limited (only more code layouts, not more pairs, could "
        "decide: stopped)",
    }
    parts = [f"{c.seconds:.1f} s" if c.seconds is not None else ""]
    parts.append(why.get(c.stop, c.stop))
    if getattr(c, "note", ""):
        parts.append(c.note)
    if c.verdict == INCONCLUSIVE and c.stop not in ("drift", "load spike", "layout-limited"):
        if c.pairs_needed is None:
            parts.append("too few pairs to say how many would decide")
        else:
            more = "" if c.seconds_needed is None else f", ~{c.seconds_needed:.0f} s more"
            parts.append(f"~{c.pairs_needed} pairs would likely decide{more}")
    return ", ".join(p for p in parts if p) or "-"


def verdict_rows(result) -> list[list[str]]:
    """Workload, verdict, ratio, CI, p, p_holm, pairs, time and stop, engagement, guardrail
    verdicts."""
    rows = []
    layouts = getattr(result, "layouts", {}) or {}
    for c in result.primary():
        lay = layouts.get(c.workload)
        verdict = f"{c.verdict} {lay.report.label}".strip() if lay else c.verdict
        if c.stop == "layout-limited":  # the verdict says so, not only the stop column
            verdict += " (layout-limited)"
        stop = stop_text(c)
        if lay is not None and lay.more_layouts:  # no number of pairs would decide
            stop = stop.replace(", too few pairs to say how many would decide", "")
            stop += f", more layouts, not more pairs (layout floor +-{100 * lay.floor:.2f} %)"
        guards = [
            f"{g.metric} {g.verdict} ({fmt_ratio(g, deciding=True)})"
            for g in result.comparisons
            if g.workload == c.workload and result.role(g) == "guardrail"
        ]
        rows.append(
            [
                c.workload,
                verdict,
                fmt_ratio(c, deciding=True),
                fmt_p(c.p_value),
                fmt_p(c.p_holm),
                str(c.n_pairs),
                stop,
                result.engagement[c.workload]["status"],
                "; ".join(guards) or "-",
            ]
        )
    return rows


VERDICT_HEADER = [
    "workload",
    "verdict",
    "B/A [interval that decides]",
    "p",
    "p_holm",
    "pairs",
    "time, stop",
    "engaged",
    "guardrails",
]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def perf_mode_lines(result) -> list[str]:
    """Which perf mode measured the pairs, and why that is the default."""
    spec = result.spec
    if spec.metric == "instructions":
        return []
    text = {
        "observe": "the measured pairs ran the harness alone (rusage from hakbench's wait4 of "
        f"it); perf counters come from {spec.perf_runs} extra perf-wrapped runs per side, "
        "in their own table below, not part of the paired verdict",
        "each": "every process ran under `perf stat` (perf counters in the paired table)",
        "off": "no process ran under perf: no perf counters",
    }[spec.perf]
    lines = [f"perf mode: **{spec.perf}**: {text}. {PERF_MODE_WHY}"]
    if result.perf_note:
        lines[0] += f" Note: {result.perf_note}."
    return [*lines, ""]


def perf_counter_lines(result, workload: str) -> list[str]:
    rows = [c for c in result.perf_counters if c.workload == workload]
    if not rows:
        return []
    n = max(c.n_pairs for c in rows)
    out = [
        f"### perf counters, {result.spec.perf_runs} runs per side, not part of the paired verdict",
        "",
        f"Medians of each side's perf-wrapped runs ({n} ok per side at most) and their ratio; "
        "no CI or p-value: too few unpaired runs to judge.",
        "",
    ]
    table = []
    for m in (m for m in TABLE_METRICS if m in PERF_SOURCED):
        c = next((c for c in rows if c.metric == m), None)
        if c is not None:
            ratio = "-" if math.isnan(c.ratio) else f"{c.ratio:.4f}"
            table.append([m, METRICS[m].unit, fmt(c.a_median), fmt(c.b_median), ratio])
    return out + _table(["metric", "unit", "A median", "B median", "B/A"], table) + [""]


def layout_lines(result) -> list[str]:
    """The code layouts of the call: per workload the layout spread, the random-effects
    interval the verdict's interval includes, and LAYOUT-SENSITIVE; or the one line that
    says layout is not controlled."""
    note = getattr(result, "layout_note", "")
    layouts = getattr(result, "layouts", {}) or {}
    if note:
        return [f"**Code layout**: {note}.", ""]
    if not layouts:
        return []
    first = next(iter(layouts.values()))
    lines = [
        "## Code layouts",
        "",
        LAYOUT_RULE.format(
            k_a=first.k_a, k_b=first.k_b, share=share_text(), min_pairs=LAYOUT_LIMITED_PAIRS
        ),
        "",
    ]
    rows = []
    for w, lay in layouts.items():
        sp = lay.report.spread
        medians = "; ".join(
            f"{side}: " + " / ".join(f"{100 * math.expm1(m):+.2f}" for m in sd.medians)
            for side, sd in sp.sides.items()
        )
        rows.append(
            [
                w,
                "-" if math.isnan(sp.sd) else f"{100 * sp.sd:.2f} %",
                "-"
                if not math.isfinite(lay.report.low)
                else f"[{math.exp(lay.report.low):.4f}, {math.exp(lay.report.high):.4f}]",
                "-" if not math.isfinite(lay.floor) else f"+-{100 * lay.floor:.2f} %",
                medians or "-",
                lay.report.label or ("more layouts, not more pairs" if lay.more_layouts else "-"),
            ]
        )
    header = [
        "workload",
        "layout spread (SD)",
        "random-effects 95 % interval",
        "floor",
        "B/A median per layout, %",
        "flag",
    ]
    return lines + _table(header, rows) + [""]


def write_ab_report(result, samples: list[dict], path: Path, *, calibration: str = "") -> Path:
    lines = _ab_header_lines(result, calibration) + _ab_provenance_lines(result)
    lines += ["## Verdicts", ""]
    lines += _table(VERDICT_HEADER, verdict_rows(result))
    lines += [""] + layout_lines(result)
    lines += ["", "## The rule", ""] + _ab_rule_lines(result)
    for w in result.cells:
        lines += _ab_workload_lines(result, w)
    lines += ab_unavailable_lines(result)
    lines += warning_lines(getattr(result, "allocator_warnings", {}))
    lines += ab_failure_lines(result)
    lines += ab_notes_lines(samples)
    path.write_text("\n".join(lines))
    return path


def _ab_header_lines(result, calibration: str) -> list[str]:
    """The title and what to know before the verdicts: A/A, noise, interruption, load."""
    spec = result.spec
    lines = [f"# A/B: {spec.describe()}", ""]
    if spec.is_aa:
        lines += [
            "**A/A (no --baseline/--set): a noise check**, not an experiment: A and B are the "
            "same cell, so the verdict should be NEUTRAL (or INCONCLUSIVE when the noise "
            "here is too high to bound it) and the CI shows the noise here.",
            "",
        ]
    if result.noise_warning:
        lines += [f"**Noise floor**: {result.noise_warning}.", ""]
    if calibration:  # a fixed count's noise check: which calibration it used (ab)
        lines += [calibration, ""]
    if result.interrupted:
        by = f" by {result.stopped_by}" if getattr(result, "stopped_by", "") else ""
        lines += [
            f"**Interrupted**{by}: this report is made from the samples that finished; "
            f"`hakbench ab --resume {result.out}` finishes the run.",
            "",
        ]
    return lines + [describe_load(result.load), ""]


def _ab_design(spec) -> str:
    if spec.metric == "instructions":
        return "one callgrind run per side"
    if spec.sequential:
        return (
            f"sequential: pairs until each workload is decided, budget {spec.max_time_s:g} s "
            f"or {spec.max_pairs} pairs, after {spec.warmup_pairs} warm-up pairs; seed {spec.seed}"
        )
    return (
        f"{spec.pairs} measured pairs (fixed, --runs) + {spec.warmup_pairs} warm-up pairs "
        f"per workload, seed {spec.seed}"
    )


def _judged_metrics(result) -> str:
    """The metrics the verdicts were judged on (a public suite's programs and threaded
    workloads are judged on their own, not on the call's --metric)."""
    roles = result.roles or {}
    judged = sorted(
        {
            c.metric
            for c in result.comparisons
            if roles.get((c.workload, c.metric), roles.get(c.metric)) == "primary"
        }
    )
    return ", ".join(judged) if judged else result.spec.metric


def _ab_provenance_lines(result) -> list[str]:
    """Where the results are, how they were measured, which code and which calls."""
    spec = result.spec
    lines = [
        f"Results: `{result.out}` · metric: {_judged_metrics(result)} · variant: {spec.variant} · "
        f"{_ab_design(spec)} · threshold {spec.threshold_pct:g} %",
        "",
    ]
    lines += perf_mode_lines(result)
    if result.iterations:
        lines += [
            "Run length: " + "; ".join(f"{w}: {why}" for w, why in result.iterations.items()),
            "",
        ]
    if result.shas:
        lines += ["Revisions: " + ", ".join(f"{k} = `{v}`" for k, v in result.shas.items()), ""]
    for lib in result.changed_libraries:
        lines += [
            f"**Warning**: `{lib}` changed while this A/B ran (rebuilt?); samples before and "
            "after used different code.",
            "",
        ]
    if len(getattr(result, "history", [])) > 1:  # resumed or continued: every call says so
        lines += ["Calls that measured into this directory:", ""]
        lines += [f"- {h}" for h in result.history] + [""]
    return lines


def _ab_rule_lines(result) -> list[str]:
    spec = result.spec
    if spec.metric == "instructions":
        lines = [
            "Exact counts (callgrind Ir per harness op, start-up netted), one run per side: "
            f"GO when B/A <= 1 - {spec.threshold_pct:g} %, NO-GO when B/A >= 1 + "
            f"{spec.threshold_pct:g} %, else NEUTRAL. No p-value: the count does not vary.",
            "",
            f"Blind spots: {BLIND_SPOTS}",
            "",
        ]
    else:
        lines = rule_lines(result)
    return lines + [
        "Engagement: every HAKMEM_* switch that differs between A and B is checked against "
        "the counters its row of the options table names (allocator/src/options.h, "
        "`hakmem-options --json`) in one stats-build run per side: engaged when one of them "
        "differs between A and B. NOT-ENGAGED (no differing switch acted) overrides the "
        "timing verdict; PARTIAL (some acted, some did not) is reported beside it.",
        "",
    ]


def _ab_workload_lines(result, w: str) -> list[str]:
    """One workload's section: its cells, engagement, metric table and perf counters."""
    a, b = result.cells[w]
    lines = [f"## {w}", "", f"- A: `{a.label}` ({a.key})", f"- B: `{b.label}` ({b.key})"]
    lines += [
        f"- engagement: {result.engagement[w]['status']} — {result.engagement[w]['detail']}",
        "",
    ]
    rows = []
    by_metric = {c.metric: c for c in result.comparisons if c.workload == w}
    for m in TABLE_METRICS:
        c = by_metric.get(m)
        if c is None:
            continue
        meta = METRICS[m]
        rows.append(
            [
                m,
                meta.unit,
                "higher" if meta.higher_is_better else "lower",
                fmt(c.a_median),
                fmt(c.b_median),
                fmt_ratio(c),
                fmt_p(c.p_value),
                c.verdict or "(info)",
            ]
        )
    lines += _table(
        ["metric", "unit", "better", "A median", "B median", "B/A (95 % CI)", "p", "verdict"],
        rows,
    )
    lines.append("")
    return lines + perf_counter_lines(result, w)
