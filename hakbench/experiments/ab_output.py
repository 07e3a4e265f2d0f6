"""What an A/B leaves in its directory besides samples.jsonl and meta.json: summary.csv
(every comparison, with the interval that decided it), engagement.json, pyperf JSON,
paired_ratios.png and report.md; and the history of the calls that measured into it.
"""

from __future__ import annotations

import csv

from hakbench.engine.store import write_json, write_pyperf
from hakbench.experiments.ab_analysis import primaries
from hakbench.experiments.ab_spec import TIMED_METRICS, ABResult

SUMMARY_FIELDS = (
    "workload",
    "metric",
    "source",
    "role",
    "a_median",
    "b_median",
    "ratio",
    "ci_low",
    "ci_high",
    "decide_low",
    "decide_high",
    "p_value",
    "p_holm",
    "n_pairs",
    "verdict",
    "seconds",
    "stop",
    "stop_note",
    "pairs_needed",
    "seconds_needed",
    # --layouts K (the primary comparison): layouts a side (A/B), the layout spread (SD of
    # the layouts' own effects, log units), the random-effects interval (as ratios) the
    # verdict's interval includes, LAYOUT-SENSITIVE, and "more layouts" when only more
    # layouts (not more pairs) could decide
    "layouts",
    "layout_spread",
    "layout_low",
    "layout_high",
    "layout_sensitive",
    "more_layouts",
)


def history_lines(meta: dict) -> list[str]:
    """One line per call that measured into the directory: the start, each resume and each
    continuation (its budget and the verdicts before and after)."""
    spec = meta.get("spec", {})
    lines = [f"{meta.get('date')}: started, seed {spec.get('seed')}"]
    conts = iter(meta.get("continuations", []))
    for r in meta.get("resumed", []):
        if r.get("how") != "--continue":
            lines.append(f"{r['date']}: resumed (--resume), the stored samples kept")
            continue
        c = next(conts, {})
        before = ", ".join(f"{w} {v['verdict']}" for w, v in c.get("before", {}).items())
        after = ", ".join(
            f"{w} {v['verdict']} at {v['n_pairs']} pairs" for w, v in c.get("after", {}).items()
        )
        lines.append(
            f"{r['date']}: continued (--continue, budget {c.get('max_time_s')} s) from "
            f"{before or 'an unfinished run'} to {after or 'an interrupted continuation'}"
        )
    return lines


def _layout_fields(result: ABResult, c) -> dict:
    lay = result.layouts.get(c.workload)
    if lay is None or c.source != "pairs" or result.role(c) != "primary":
        return {}
    import math

    return {
        "layouts": f"{lay.k_a}/{lay.k_b}",
        "layout_spread": lay.report.spread.sd,
        "layout_low": math.exp(lay.report.low),
        "layout_high": math.exp(lay.report.high),
        "layout_sensitive": lay.report.label,
        "more_layouts": "more layouts, not more pairs" if lay.more_layouts else "",
    }


def write_outputs(result: ABResult, samples: list[dict]) -> None:
    from hakbench.experiments.ab_plan import judged_metrics
    from hakbench.experiments.calibration import calibration_line
    from hakbench.report.markdown import write_ab_report
    from hakbench.report.plots import plot_paired_ratios

    out = result.out
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        for c in (*result.comparisons, *result.perf_counters):
            w.writerow(
                {
                    "workload": c.workload,
                    "metric": c.metric,
                    "source": c.source,
                    "role": result.role(c) if c.source != "perf" else "info",
                    "a_median": c.a_median,
                    "b_median": c.b_median,
                    "ratio": c.ratio,
                    "ci_low": c.ci_low,
                    "ci_high": c.ci_high,
                    # the interval the verdict was decided on: sequential, its one-sided
                    # bounds; a fixed count, its CI
                    "decide_low": c.ci_low if c.decide_low is None else c.decide_low,
                    "decide_high": c.ci_high if c.decide_high is None else c.decide_high,
                    "p_value": c.p_value,
                    "p_holm": c.p_holm,
                    "n_pairs": c.n_pairs,
                    "verdict": c.verdict,
                    "seconds": c.seconds,
                    "stop": c.stop,
                    "stop_note": c.note,
                    "pairs_needed": c.pairs_needed,
                    "seconds_needed": c.seconds_needed,
                    **_layout_fields(result, c),
                }
            )
    write_json(out / "engagement.json", result.engagement)
    if result.spec.metric in TIMED_METRICS:
        write_pyperf(samples, out / "pyperf")
        plot_paired_ratios(
            samples,
            {
                w: primaries(result.cells, result.spec.metric).get(w, result.spec.metric)
                for w in result.cells
            },
            list(result.cells),
            out / "paired_ratios.png",
            threshold_pct=result.spec.threshold_pct,
            bounds={
                c.workload: (c.ratio, c.decide_low, c.decide_high)
                for c in result.primary()
                if c.decide_low is not None
            },
        )
    fixed_count = result.spec.metric in TIMED_METRICS and not result.spec.sequential
    # a fixed count's noise check, against a calibration of the metric it judges
    calibration = calibration_line(judged_metrics(result.spec)) if fixed_count else ""
    write_ab_report(result, samples, out / "report.md", calibration=calibration)
