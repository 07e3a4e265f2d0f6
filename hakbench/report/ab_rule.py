"""The parts of an A/B report that state the rule that decided: the rule text with the metric
each workload was judged on, the corrections across the call (primaries and guardrails,
each one family whatever their metrics), and the allocator's own warnings from the stderr
of the measured processes (``ab_analysis.allocator_warnings``)."""

from __future__ import annotations

from hakbench.core.metrics import METRICS
from hakbench.stats.stats import RULE, neutral_correction
from hakbench.stats.stopper import RULE as SEQ_RULE

# what a judged metric is, in the words of the rule text
METRIC_WORDS = {
    "cpu_throughput": "ops per CPU second of the timed loop",
    "throughput": "wall clock of the timed loop",
    "active_throughput": "ops per active second of the timed loop, the median thread's rate "
    "with 8 threads or more",
    "task_clock_ms": "perf's CPU time of the process",
}


def share_text() -> str:
    """``1/3``: the share of its one-sided level at which a sequential look takes the
    layouts' random-effects interval (``stats.layouts.SEQUENTIAL_SHARE``)."""
    from fractions import Fraction

    from hakbench.stats.layouts import SEQUENTIAL_SHARE

    return str(Fraction(SEQUENTIAL_SHARE).limit_denominator(12))


def direction_text(result) -> str:
    """``higher cpu_throughput is better (ops per CPU second of the timed loop: mixed);
    higher throughput is better (wall clock of the timed loop: larson)``: the metric each
    workload of the call was judged on."""
    by_metric: dict = {}
    for c in result.primary():
        by_metric.setdefault(c.metric, []).append(c.workload)
    parts = []
    for metric, workloads in by_metric.items():
        m = METRICS.get(metric)
        better = "higher" if m is None or m.higher_is_better else "lower"
        words = f"{METRIC_WORDS[metric]}: " if metric in METRIC_WORDS else ""
        parts.append(f"{better} {metric} is better ({words}{', '.join(workloads)})")
    return "; ".join(parts) or "-"


def multiplicity_text(result) -> str:
    """How the call's verdicts are corrected for their number: one family of primaries
    across every workload (whatever metric judged each), one of guardrails."""
    spec = result.spec
    k = len(result.primary())
    metrics = sorted({c.metric for c in result.primary()})
    guards = [c for c in result.comparisons if result.role(c) == "guardrail"]
    text = neutral_correction(k, sequential=spec.sequential, alpha=spec.alpha)
    if k > 1:
        text += f" Holm's correction of GO/NO-GO runs across the same {k} workloads as one family"
        if len(metrics) > 1:
            text += f", though they are judged on {len(metrics)} metrics ({', '.join(metrics)})"
        text += "."
    if guards:
        how = (
            "on its confidence sequence at the pairs the primary's stopping rule chose (valid "
            "at any stop), anytime p"
            if spec.sequential
            else "by the fixed-count rule, Wilcoxon p"
        )
        text += (
            f" Guardrails: the {len(guards)} guardrail comparisons of the call are one family: "
            f"each judged {how} Holm-adjusted across them, NEUTRAL on the interval at "
            f"{spec.alpha:g}/{len(guards)} a side; the verdict table prints that interval."
        )
    return text


def rule_lines(result) -> list[str]:
    """The rule section's text for a timed A/B: the rule, its direction per judged metric,
    the corrections across the call, and which workloads have their own metric."""
    spec = result.spec
    rule = SEQ_RULE if spec.sequential else RULE
    text = rule.format(
        alpha=spec.alpha,
        threshold=spec.threshold_pct,
        direction=direction_text(result),
        max_time=spec.max_time_s,
        max_pairs=spec.max_pairs,
    )
    lines = [text, "", multiplicity_text(result), ""]
    own = {c.workload: c.metric for c in result.primary() if c.metric != spec.metric}
    commands = {w: m for w, m in own.items() if result.cells[w][0].workload.command}
    threaded = {w: m for w, m in own.items() if w not in commands}
    active = [w for w, m in threaded.items() if m == "active_throughput"]
    wall = [w for w, m in threaded.items() if m != "active_throughput"]
    if active:  # CPU time leaves out the time threads wait for each other
        lines += [
            f"Judged on active time (several threads): {', '.join(active)} (active_throughput: "
            "ops per second of the threads' time in the timed loop less the time each waited "
            "for a CPU; their sleeps on each other's locks are in it, which CPU time leaves "
            "out; threads pinned one per CPU).",
            "",
        ]
    if wall:
        lines += [
            f"Judged on throughput (several threads): {', '.join(wall)} (wall clock: their "
            "CPU time leaves out the time they wait for each other).",
            "",
        ]
    if commands:
        lines += [
            "Command workloads (real programs) are judged the same way on their own metric: "
            + ", ".join(f"{w}: {m}" for w, m in commands.items())
            + ". A sample whose output differs from glibc's (wrong_output), that crashed, "
            "timed out or whose preload never showed in /proc/PID/maps is a failed sample, "
            "never a number.",
            "",
        ]
    return lines


def warning_lines(warnings: dict) -> list[str]:
    """The report's section of the allocator's own warnings (none: nothing)."""
    if not warnings:
        return []
    lines = ["## Allocator warnings", "", "What libhakmem wrote to stderr while measured:", ""]
    for side, found in sorted(warnings.items()):
        lines += [f"- side {side}: `{line}`" for line in found]
    return [*lines, ""]
