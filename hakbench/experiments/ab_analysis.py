"""What an A/B's samples say: comparisons of every metric both sides have (the primary and
the guardrails judged, Holm across workloads), a sequential run's stop applied to its
primary comparison, the pairs a fixed count would need, failures and engagement overriding
the verdict, and ab's perf counter table (medians, never judged).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from hakbench.core.metrics import GUARDRAILS, METRICS, PERF_SOURCED
from hakbench.engine.schedule import complete_pairs
from hakbench.experiments.ab_spec import ABSpec, judged_metric
from hakbench.experiments.engagement import engagement
from hakbench.stats import sequential as seq
from hakbench.stats import stats as st
from hakbench.stats.layouts import (
    LayoutReport,
    layout_ci,
    layout_floor,
    layout_report,
    pairs_with_floor,
)
from hakbench.stats.stopper import Stopper

# the prefix of every warning libhakmem writes to stderr (allocator/src/options.c)
ALLOCATOR_PREFIX = "hakmem:"


def allocator_warnings(samples: list[dict]) -> dict:
    """side -> the distinct lines libhakmem wrote to the stderr of that side's processes
    (``hakmem: HAKMEM_X=banana is not a valid bool; using the default 0``), in order."""
    out: dict = {}
    for s in samples:
        for line in (s.get("stderr_tail") or "").splitlines():
            line = line.strip()
            if line.startswith(ALLOCATOR_PREFIX):
                seen = out.setdefault(s.get("side") or "-", [])
                if line not in seen:
                    seen.append(line)
    return out


def failures_by_workload(samples: list[dict], workloads: list[str], spec: ABSpec) -> dict:
    """workload -> stats.Failures of its judged samples (the measured pairs, or the
    instruction counts): FAILED when one side failed more or otherwise than the other."""
    phase = "instructions" if spec.metric == "instructions" else "measure"
    out = {}
    for w in workloads:
        judged = [s for s in samples if s["workload"] == w and s["phase"] == phase]
        out[w] = st.failures(*([s for s in judged if s.get("side") == x] for x in "AB"))
    return out


def apply_stop(c: st.Comparison, stopper) -> None:
    """The primary comparison of a sequential A/B as its stopping rule left it: the median
    and the confidence sequence (as ratios), the anytime p and its Holm adjustment, the
    verdict, why it stopped, and for INCONCLUSIVE the pairs (and seconds) that would decide."""
    s = stopper.stops[c.workload]
    look = s.look  # with the layout spread in, when the pairs drew layouts
    c.stop = s.reason or ""
    c.note = s.note  # a drift or load spike found (why it stopped, or a flag beside)
    if look is None:
        return
    c.ratio, c.ci_low, c.ci_high = (math.exp(x) for x in (look.estimate, look.low, look.high))
    c.decide_low, c.decide_high = (math.exp(x) for x in look.equivalence())
    c.p_value, c.p_holm, c.n_pairs = look.p_anytime, s.p_holm, look.n
    c.verdict = s.verdict
    if s.verdict == st.INCONCLUSIVE:
        c.pairs_needed = s.pairs_needed
        c.seconds_needed = _more_seconds(c)


def fixed_n_pairs_needed(c: st.Comparison, threshold_pct: float, floor: float = math.nan) -> bool:
    """For an INCONCLUSIVE fixed-count comparison: the pairs at which its CI, narrowing as
    1/sqrt(n), would likely decide (and the seconds that takes at this A/B's pace); with
    layouts, ``floor`` (log units) is the part no number of pairs narrows. True when only
    more layouts could decide."""
    low, high = (c.ci_low, c.ci_high) if c.decide_low is None else (c.decide_low, c.decide_high)
    if c.n_pairs < 2 or not all(x > 0 for x in (c.ratio, low, high)):
        return False
    # the interval NEUTRAL is judged on (with several workloads, wider than the CI)
    look = seq.Look(c.n_pairs, *(math.log(x) for x in (c.ratio, low, high)), 1.0)
    c.pairs_needed, more_layouts = pairs_with_floor(
        look, math.log1p(threshold_pct / 100), floor, near=0.0, rate=lambda n: 1 / math.sqrt(n)
    )
    c.seconds_needed = _more_seconds(c)
    return more_layouts


def _more_seconds(c: st.Comparison) -> float | None:
    if c.pairs_needed is None or not c.n_pairs or not c.seconds:
        return None
    return round(max(0, c.pairs_needed - c.n_pairs) * c.seconds / c.n_pairs, 1)


def unmeasured(samples: list[dict]) -> list[str]:
    """Metrics that no ok measured or perf run had (hardware counters here, for instance)."""
    ok = [s for s in samples if s["status"] == "ok" and s["phase"] in ("measure", "perf")]
    missing = {u for s in ok for u in s.get("unavailable", [])}
    return sorted(missing - {m for s in ok for m in s["metrics"]})


def perf_counter_table(samples: list[dict], workloads: list[str]) -> list:
    """Per workload and perf metric: the median of each side's perf runs and their ratio.
    Not paired and not judged: a few runs per side describe, they do not decide."""
    rows = []
    for w in workloads:
        runs = [s for s in samples if s["phase"] == "perf" and s["workload"] == w]
        runs = [s for s in runs if s["status"] == "ok" and s.get("launcher") == "perf"]
        for m in PERF_SOURCED:
            values = {
                x: [s["metrics"][m] for s in runs if s["side"] == x and m in s["metrics"]]
                for x in "AB"
            }
            if not (values["A"] and values["B"]):
                continue
            a, b = statistics.median(values["A"]), statistics.median(values["B"])
            ratio = b / a if a else math.nan
            n = min(len(values["A"]), len(values["B"]))
            row = st.Comparison(
                w, m, a, b, ratio, math.nan, math.nan, math.nan, n, METRICS[m].higher_is_better
            )
            row.verdict, row.source = "", "perf"
            rows.append(row)
    return rows


def primaries(cells: dict, metric: str) -> dict:
    """workload -> its judged metric when that is not the spec's ``metric``: a command
    workload's own time or rate (hakbench.core.commandspec), throughput for a threaded
    workload asked for CPU time (ab_spec.judged_metric)."""
    if metric == "instructions":
        return {}
    judged = {w: judged_metric(metric, a.workload) for w, (a, _) in cells.items()}
    return {w: m for w, m in judged.items() if m != metric}


def guardrails_of(cells: dict) -> dict:
    """workload -> the guardrails its definition states (command workloads that list
    ``guardrails``); the others are judged on every metric of GUARDRAILS."""
    return {
        w: a.workload.command.guardrails
        for w, (a, _) in cells.items()
        if a.workload.command is not None and a.workload.command.guardrails is not None
    }


def analyse(
    samples: list[dict], workloads: list[str], spec: ABSpec, own_primary=None, guardrails=None
):
    """Comparisons of every metric both sides have; primary and guardrails judged.

    ``own_primary``: workload -> metric for workloads judged on their own metric (command
    workloads); their roles are keyed ``(workload, metric)``, the others' by metric.
    ``guardrails``: workload -> its own guardrail metrics (``guardrails_of``)."""
    comparisons = []
    roles: dict = {}
    own_primary = own_primary or {}
    guardrails = guardrails or {}
    if spec.metric == "instructions":
        roles["ir_per_op"] = "primary"
        for w in workloads:
            vals = {
                s["side"]: s["metrics"]["ir_per_op"]
                for s in samples
                if s["workload"] == w and s["phase"] == "instructions" and s["status"] == "ok"
            }
            a, b = vals.get("A", math.nan), vals.get("B", math.nan)
            ratio = b / a if a and not math.isnan(a) else math.nan
            c = st.Comparison(
                w, "ir_per_op", a, b, ratio, ratio, ratio, math.nan, len(vals) // 2, False
            )
            c.source = "instructions"
            c.verdict = st.exact_verdict(
                ratio, threshold_pct=spec.threshold_pct, higher_is_better=False
            )
            comparisons.append(c)
        return comparisons, roles
    for w in workloads:
        primary = own_primary.get(w, spec.metric)
        pairs = complete_pairs(samples, w)
        names = [m for m in METRICS if any(m in a["metrics"] for a, _ in pairs)]
        for m in names:
            both = [
                (a["metrics"][m], b["metrics"][m])
                for a, b in pairs
                if m in a["metrics"] and m in b["metrics"]
            ]
            judged = guardrails.get(w, GUARDRAILS)
            role = "primary" if m == primary else "guardrail" if m in judged else "info"
            roles[(w, m) if w in own_primary else m] = role
            comparisons.append(
                st.compare_paired(
                    w, m, [x for x, _ in both], [y for _, y in both], METRICS[m].higher_is_better
                )
            )
        if not pairs:
            roles[(w, primary) if w in own_primary else primary] = "primary"
            comparisons.append(
                st.Comparison(w, primary, *([math.nan] * 6), 0, METRICS[primary].higher_is_better)
            )

    def role(c):
        return roles.get((c.workload, c.metric), roles.get(c.metric, "info"))

    judge_families(comparisons, role, spec)
    for c in comparisons:
        if role(c) == "info":
            c.verdict = ""
    return comparisons, roles


def judge_families(comparisons: list, role, spec: ABSpec) -> None:
    """Two families, each corrected across the whole call: every primary comparison (Holm
    and NEUTRAL's Bonferroni over all workloads, whatever metric each is judged on) and
    every guardrail (over all workloads and guardrail metrics). A sequential call's
    guardrails are judged on their confidence sequences (``sequential.judge_anytime``): their
    number of pairs was chosen by the primary's stopping rule, which a fixed-n CI does not
    allow for; its primaries are judged by the stopping rule (``apply_stop``)."""
    primary = [c for c in comparisons if role(c) == "primary"]
    guards = [c for c in comparisons if role(c) == "guardrail"]
    st.judge(primary, spec.threshold_pct, family=lambda c: "primary", alpha=spec.alpha)
    if spec.sequential:
        seq.judge_anytime(guards, spec.threshold_pct, alpha=spec.alpha)
    else:
        st.judge(guards, spec.threshold_pct, family=lambda c: "guardrail", alpha=spec.alpha)


def engagement_of(spec: ABSpec, cells: dict, harness: dict, observe: bool, observed: dict) -> dict:
    """workload -> its engagement (``hakbench.experiments.engagement``) from the counters of
    its stats runs (``observed[(workload, side)]``), or ``n/a`` and why none was taken."""
    out = {}
    for w, (a, b) in cells.items():
        if observe and w in harness:
            out[w] = engagement(a, b, {s: observed.get((w, s)) for s in "AB"})
        elif w not in harness:
            out[w] = {"status": "n/a", "detail": "command workload: no stats run"}
        else:
            why = "no hakmem side" if spec.observe else "not observed"
            out[w] = {"status": "n/a", "detail": why}
    return out


def judge_run(
    samples: list[dict],
    spec: ABSpec,
    cells: dict,
    engaged: dict,
    *,
    pair_seconds: dict,
    stopper: Stopper | None,
    layouts: tuple[int, int] = (1, 1),
) -> tuple[list, dict, dict]:
    """(comparisons, roles, failures by workload) of a run's samples: every metric
    compared, the primary one given its pairs' seconds and, sequential, the stop that
    ended it (else a fixed count judged with the layout spread in, when its pairs drew
    layouts, and its pairs needed); NOT-ENGAGED and FAILED override it."""
    own = primaries(cells, spec.metric)
    comparisons, roles = analyse(samples, list(cells), spec, own, guardrails_of(cells))
    failures = failures_by_workload(samples, list(cells), spec)
    k_primary = sum(
        roles.get((c.workload, c.metric), roles.get(c.metric)) == "primary" for c in comparisons
    )
    for c in comparisons:
        if roles.get((c.workload, c.metric), roles.get(c.metric)) != "primary":
            continue
        if c.source == "pairs":
            c.seconds = round(pair_seconds.get(c.workload, 0.0), 3)
            if stopper is not None:
                apply_stop(c, stopper)
            else:
                floor = math.nan
                if max(layouts) > 1 and c.n_pairs:
                    floor = _judge_with_layouts(c, samples, spec, layouts, k_primary)
                if c.verdict == st.INCONCLUSIVE:
                    fixed_n_pairs_needed(c, spec.threshold_pct, floor)
                _flag_drift(c, samples)
        if engaged[c.workload]["status"] == "not-engaged":
            c.verdict = st.NOT_ENGAGED
        if failures[c.workload].verdict:
            c.verdict = failures[c.workload].verdict  # survivors never decide
    return comparisons, roles, failures


def _flag_drift(c: st.Comparison, samples: list[dict]) -> None:
    """A fixed count's pairs checked after the fact for a gradual drift (the sequential
    rule's check, ``drift.gradual_drift``, at its level): the count was fixed, so a drift
    neither stops nor overrides it, but the verdict carries the flag (the note beside it),
    where a sequential call would have stopped INCONCLUSIVE."""
    from hakbench.stats import drift

    ratios, _, _ = _pair_layouts(samples, c.workload, c.metric)
    found = drift.gradual_drift([math.log(r) for r in ratios if r > 0])
    if found is not None:
        c.note = f"flag: {found.text} (a fixed count, judged as asked)"


def _pair_layouts(samples: list[dict], workload: str, metric: str) -> tuple[list, list, list]:
    """(ratios B/A, A's layout, B's layout) of a workload's complete pairs."""
    pairs = [
        (a, b)
        for a, b in complete_pairs(samples, workload)
        if metric in a["metrics"] and metric in b["metrics"]
    ]
    ratios = st.paired_ratios(
        [a["metrics"][metric] for a, _ in pairs], [b["metrics"][metric] for _, b in pairs]
    )
    return (
        [float(r) for r in ratios],
        [a.get("layout") or 0 for a, _ in pairs],
        [b.get("layout") or 0 for _, b in pairs],
    )


def _judge_with_layouts(c: st.Comparison, samples, spec: ABSpec, layouts, k: int) -> float:
    """A fixed count whose pairs drew layouts: its CI (and NEUTRAL's interval, Bonferroni
    over the ``k`` primary comparisons) become ``stats.layouts.layout_ci``'s, which include
    the layout spread, and the verdict is taken again on them. Returns the layout floor."""
    ratios, la, lb = _pair_layouts(samples, c.workload, c.metric)
    ks = {"k_a": layouts[0], "k_b": layouts[1]}
    _, c.ci_low, c.ci_high = layout_ci(ratios, la, lb, st.CONFIDENCE, ratios=True, **ks)
    eq = layout_ci(ratios, la, lb, 1 - spec.alpha / max(1, k), ratios=True, **ks)[1:]
    c.verdict = st.verdict(
        c.ratio,
        c.ci_low,
        c.ci_high,
        c.p_holm,
        threshold_pct=spec.threshold_pct,
        higher_is_better=c.higher_is_better,
        alpha=spec.alpha,
        equivalence=eq,
    )
    if k > 1 and c.verdict not in (st.GO, st.NO_GO):
        c.decide_low, c.decide_high = eq
    report = layout_report([math.log(r) for r in ratios], la, lb, **ks)
    return layout_floor(report.spread, (1 - st.CONFIDENCE) / 2)


@dataclass(frozen=True)
class LayoutSummary:
    """What the layouts did to one workload's primary comparison."""

    k_a: int
    k_b: int
    report: LayoutReport  # spread, random-effects interval (log units), LAYOUT-SENSITIVE
    floor: float  # the half-width no number of pairs narrows (log units)
    more_layouts: bool  # INCONCLUSIVE and only more layouts could decide


def layout_summaries(samples, spec: ABSpec, cells: dict, layouts, comparisons, stopper) -> dict:
    """workload -> LayoutSummary of its primary comparison; {} without layouts."""
    if max(layouts) <= 1:
        return {}
    ks = {"k_a": layouts[0], "k_b": layouts[1]}
    own = primaries(cells, spec.metric)
    out = {}
    for w in cells:
        ratios, la, lb = _pair_layouts(samples, w, own.get(w, spec.metric))
        report = layout_report([math.log(r) for r in ratios], la, lb, **ks)
        c = next((c for c in comparisons if c.workload == w and c.source == "pairs"), None)
        if stopper is not None:
            s = stopper.stops[w]
            floor, more = s.floor, s.more_layouts
        else:
            floor = layout_floor(report.spread, (1 - st.CONFIDENCE) / 2)
            more = (
                c is not None
                and c.verdict == st.INCONCLUSIVE
                and fixed_n_pairs_needed(dataclasses.replace(c), spec.threshold_pct, floor)
            )
        out[w] = LayoutSummary(layouts[0], layouts[1], report, floor, more)
    return out
