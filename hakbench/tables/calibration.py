"""What a calibration says: its trials as a tidy table, and per injected condition the
detection and resolution rates with their Wilson 95 % intervals, the measured effect, the
false-positive rate, the smallest effect detected and the noise floor
(``hakbench.experiments.calibrate`` runs the trials; ``report.calibration`` prints this).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from hakbench.stats import stats as st
from hakbench.stats.stats import robust_sd, wilson_ci

ALPHA = st.ALPHA
POWER = 0.8
FORMAT = 2  # calibration.json layout; 1 had an analytic MDE instead of resolution rates
TRIAL_COLUMNS = (
    *("condition", "extra_work", "index", "n_pairs", "ratio", "ci_low", "ci_high", "p_value"),
    *("verdict", "resolved", "log_ratios", "failed"),
)


def trials_frame(trials: Sequence):
    """The tidy table of trials (``hakbench.experiments.calibrate.Trial``): one row per trial
    (its pairs' log-ratios as a list)."""
    import pandas as pd

    rows = [dataclasses.asdict(t) for t in trials]
    return pd.DataFrame(rows, columns=list(TRIAL_COLUMNS))


def _rate(hits: int, n: int) -> dict:
    low, high = wilson_ci(hits, n)
    return {"hits": int(hits), "rate": hits / n if n else math.nan, "ci95": [low, high]}


def condition_table(trials: Sequence):
    """One row per condition: trials, measured effect, detection and resolution counts."""
    import numpy as np

    df = trials_frame(trials)
    df["no_go"] = df["verdict"] == st.NO_GO
    df["go"] = df["verdict"] == st.GO
    df["significant"] = df["p_value"] < ALPHA
    g = df.groupby(["extra_work", "condition"], sort=True)
    table = g.agg(
        trials=("index", "size"),
        no_go=("no_go", "sum"),
        go=("go", "sum"),
        significant=("significant", "sum"),
        resolved=("resolved", "sum"),
        failed_samples=("failed", "sum"),
    ).reset_index()
    pooled = g["log_ratios"].agg(lambda s: [x for row in s for x in row]).reset_index(drop=True)
    table["pairs"] = pooled.map(len)
    # the paired median of every pair of the condition, as a slowdown of B in percent
    table["effect_pct"] = pooled.map(
        lambda xs: 100 * (1 / math.exp(float(np.median(xs))) - 1) if xs else math.nan
    )
    # A/A: any GO/NO-GO is a false positive; K>0: NO-GO is a detection
    table["detected"] = np.where(
        table["extra_work"] == 0, table["no_go"] + table["go"], table["no_go"]
    )
    return table


def summarize(trials: list, runs: int, threshold_pct: float) -> dict:
    """Rates (with Wilson CIs) and effects per condition, the false-positive rate, the
    smallest effect detected and the smallest resolved in >= 80 % of trials. A FAILED trial
    (a side failed) is counted apart and judges nothing."""
    failed_trials = [t for t in trials if t.verdict == st.FAILED]
    trials = [t for t in trials if t.verdict != st.FAILED]
    if not trials:
        return {
            "format": FORMAT,
            "false_positive_rate": None,
            "false_positive_ci95": None,
            "smallest_detected_pct": None,
            "noise_floor_pct": None,
            "noise_log_sd": None,
            "runs": runs,
            "threshold_pct": threshold_pct,
            "alpha": ALPHA,
            "power": POWER,
            "conditions": [],
            "failed_trials": len(failed_trials),
        }
    table = condition_table(trials)
    conditions = []
    for r in table.to_dict("records"):
        n = int(r["trials"])
        det, res = _rate(int(r["detected"]), n), _rate(int(r["resolved"]), n)
        conditions.append(
            {
                "condition": r["condition"],
                "extra_work": float(r["extra_work"]),
                "trials": n,
                "pairs": int(r["pairs"]),
                "effect_pct": round(float(r["effect_pct"]), 3),
                "no_go": int(r["no_go"]),
                "go": int(r["go"]),
                "significant": int(r["significant"]),
                "detection_rate": det["rate"],
                "detection_ci95": [round(x, 3) for x in det["ci95"]],
                "resolution_rate": res["rate"],
                "resolution_ci95": [round(x, 3) for x in res["ci95"]],
                "failed_samples": int(r["failed_samples"]),
            }
        )
    aa = next((c for c in conditions if c["extra_work"] == 0), None)
    aa_logs = [x for t in trials if t.extra_work == 0 for x in t.log_ratios]
    sigma = robust_sd(aa_logs)
    return {
        "format": FORMAT,
        "false_positive_rate": aa["detection_rate"] if aa else None,
        "false_positive_ci95": aa["detection_ci95"] if aa else None,
        "smallest_detected_pct": smallest_effect(conditions, "detection_rate"),
        "noise_floor_pct": smallest_effect(conditions, "resolution_rate"),
        "noise_log_sd": round(sigma, 6) if not math.isnan(sigma) else None,
        "runs": runs,
        "threshold_pct": threshold_pct,
        "alpha": ALPHA,
        "power": POWER,
        "conditions": conditions,
        "failed_trials": len(failed_trials),
    }


def smallest_effect(conditions: Sequence[dict], rate: str) -> float | None:
    """The smallest injected effect whose ``rate`` reached ``POWER`` (80 %), or None."""
    hit = [c["effect_pct"] for c in conditions if c["extra_work"] > 0 and c[rate] >= POWER]
    return min(hit) if hit else None
