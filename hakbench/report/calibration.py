"""A calibration's report.md: the summary (``hakbench.tables.calibration``) as Markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence


def _fmt(v, spec=".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _pct_ci(rate: float, ci: Sequence[float]) -> str:
    return f"{100 * rate:.0f} % ({100 * ci[0]:.0f}-{100 * ci[1]:.0f})"


def report_markdown(c: dict) -> str:
    m = c["machine"]
    fp = c["false_positive_rate"]
    fp_ci = _pct_ci(fp, c["false_positive_ci95"]) if fp is not None else "-"
    lines = [
        f"# Calibration of `hakbench ab` on {m['hostname']} (fingerprint {c.get('fingerprint')})",
        "",
    ]
    if c.get("interrupted"):
        lines += [
            f"**Interrupted** after {c.get('trials_done')} of {c.get('trials_planned')} "
            "trials: the figures cover those only, "
            "and this calibration did not become the machine's latest.",
            "",
        ]
    lines += [
        f"- {c['date']}, {m['cpu']} x{m['cpu_count']}, kernel {m['kernel']}; 1-min load "
        f"average {' -> '.join(str(x) for x in c.get('load_avg_1min', []))} (start -> end)",
        f"- workload `{c['workload']}` under {c['allocator']}, judged on "
        f"`{c.get('metric', 'throughput')}` (the metric a default `ab` judges it on); "
        f"{c['runs']} measured pairs "
        f"(+{c['warmup_pairs']} warm-up) per trial, {c['trials']} trials per condition; "
        f"verdict threshold {c['threshold_pct']:g} %; seed {c.get('seed')} (`--seed` replays "
        "the plan)",
        f"- **false-positive rate** (A/A not NEUTRAL): {fp_ci}",
        f"- **smallest injected effect detected** (NO-GO) in >= 80 % of trials: "
        f"{_fmt(c['smallest_detected_pct'])} %",
        f"- **noise floor** (smallest injected effect the CI and Wilcoxon legs resolve in "
        f">= 80 % of trials, threshold aside): {_fmt(c['noise_floor_pct'])} %",
        f"- pair noise (robust SD of log B/A in the A/A trials): {_fmt(c['noise_log_sd'], '.4f')}",
        f"- trials FAILED (a side failed where the other did not; not judged): "
        f"{c.get('failed_trials', 0)}",
        "",
        "| condition | effect here (paired median) | trials | NO-GO | GO | p<0.05 "
        "| detected (95 % CI) | resolved (95 % CI) |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in c["conditions"]:
        lines.append(
            f"| {r['condition']} | {_fmt(r['effect_pct'])} % | {r['trials']} | {r['no_go']} "
            f"| {r['go']} | {r['significant']} "
            f"| {_pct_ci(r['detection_rate'], r['detection_ci95'])} "
            f"| {_pct_ci(r['resolution_rate'], r['resolution_ci95'])} |"
        )
    lines += [
        "",
        "Detected: for A/A the share of trials with any GO/NO-GO (false positives); for K>0 "
        "the share judged NO-GO by ab's rule. Resolved: the same rule with threshold 0 (the "
        "CI excludes 1 and Wilcoxon's p < 0.05). K is the harness's `--extra-work` (side B; "
        "side A runs K=0); its effect is measured here from all pairs of its trials. "
        "Intervals are Wilson 95 % intervals.",
    ]
    return "\n".join(lines) + "\n"
