"""A soak process's figures and verdicts: trends (%/h, with 95 % CIs), drift, CV and the
syscall budget of the epochs after warm-up, judged against the plan's ``Thresholds``
(the pure figures are ``hakbench.stats.soakstats``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hakbench.experiments.soak_plan import Thresholds
from hakbench.experiments.soak_process import EPOCH_COLUMNS, SoakRun
from hakbench.stats import soakstats


def epoch_rss_kb(row: dict) -> int | None:
    """The kernel's VmRSS at the epoch; when the process had already exited (it may after its
    last epoch), the harness's own reading of the same counter (/proc/self/statm)."""
    return row["rss_kb"] if row["rss_kb"] is not None else row.get("harness_rss_kb")


def steady_frame(run: SoakRun, warmup_epochs: int):
    """The epochs after warm-up as a DataFrame, ``rss`` being ``epoch_rss_kb``."""
    import pandas as pd

    df = pd.DataFrame(run.epochs[warmup_epochs:], columns=list(EPOCH_COLUMNS))
    df["rss"] = df["rss_kb"].fillna(df["harness_rss_kb"]).astype(float)
    df["ops_s"] = df["ops_s"].astype(float)
    return df


def judged_budget(rows: Sequence[dict]) -> dict | None:
    """The syscall-budget row a verdict is based on: libhakmem's own counters over the
    whole soak when there are any, else the strace pass."""
    usable = [b for b in rows if b.get("syscalls_per_op") is not None]
    counters = [b for b in usable if "SS_OS_STATS" in b["source"]]
    return (counters or usable or [None])[0]


def run_figures(run: SoakRun, warmup_epochs: int, thresholds: Thresholds) -> dict:
    """Trends (%/h, with 95 % CIs), drift, CV, the syscall budget and their verdicts over
    the epochs after warm-up."""
    df = steady_frame(run, warmup_epochs)
    rss_df = df.dropna(subset=["t", "rss"])
    ops_df = df.dropna(subset=["t", "ops_s"])
    rss, rss_t = rss_df["rss"].tolist(), rss_df["t"].tolist()
    ops_s, ops_t = ops_df["ops_s"].tolist(), ops_df["t"].tolist()
    rss_trend = soakstats.trend_pct_per_hour(rss_t, rss)
    ops_trend = soakstats.trend_pct_per_hour(ops_t, ops_s)
    cv = soakstats.cv_pct(ops_s)
    hwm = [e["hwm_kb"] for e in run.epochs if e["hwm_kb"] is not None]
    last = run.epochs[-1] if run.epochs else {}
    budget = judged_budget(run.syscall_budget)
    per_kop = 1000 * budget["syscalls_per_op"] if budget else None
    return {
        "label": run.target.label,
        "allocator": run.target.allocator.label,
        "profile": run.target.profile,
        "status": run.status,
        "cause": run.cause,
        "epochs": len(run.epochs),
        "steady_epochs": len(df),
        "window_epochs": soakstats.edge_window(len(df)) if len(df) else 0,
        "rss_first_kb": rss[0] if rss else None,
        "rss_last_kb": rss[-1] if rss else None,
        "peak_hwm_kb": max(hwm) if hwm else None,
        "rss_trend_pct_per_h": rss_trend and rss_trend["pct_per_h"],
        "rss_trend_ci95": rss_trend and rss_trend["ci"],
        "rss_drift_pct": soakstats.drift_pct(rss),
        "rss_drift_pct_per_h": soakstats.drift_pct_per_hour(rss_t, rss),
        "rss_slope_kib_per_h": soakstats.slope_per_hour(rss_t, rss),
        "ops_s_median": soakstats.median_or_none(ops_s),
        "ops_trend_pct_per_h": ops_trend and ops_trend["pct_per_h"],
        "ops_trend_ci95": ops_trend and ops_trend["ci"],
        "ops_drift_pct": soakstats.drift_pct(ops_s),
        "ops_drift_pct_per_h": soakstats.drift_pct_per_hour(ops_t, ops_s),
        "ops_cv_pct": cv,
        "syscalls_per_kop": per_kop,
        "syscalls_source": budget["source"] if budget else None,
        "minflt": last.get("minflt"),
        "majflt": last.get("majflt"),
        "total_ops": run.total_ops,
        "wall_s": round(run.wall_s, 3),
        "verdicts": {
            "rss_trend": soakstats.trend_verdict(
                rss_trend,
                thresholds.rss_pct_per_h,
                rising=True,
                resolved=_growth_kib(rss_t, rss) >= thresholds.rss_min_growth_kib,
            ),
            "ops_trend": soakstats.trend_verdict(ops_trend, thresholds.ops_pct_per_h, rising=False),
            "ops_cv": "n/a"
            if thresholds.cv_pct is None
            else soakstats.verdict(cv, thresholds.cv_pct, upper=True),
            "syscalls": soakstats.verdict(per_kop, thresholds.syscalls_per_kop, upper=True),
        },
        "syscall_budget": run.syscall_budget,
        "alloc_stats": run.alloc_stats,
        "stderr_tail": run.stderr_tail if run.status != "complete" else "",
        "argv": run.argv,
    }


def _growth_kib(times_s: list, rss_kb: list) -> float:
    """RSS growth over the steady epochs by the fitted trend (KiB; 0 with too few points)."""
    slope = soakstats.slope_per_hour(times_s, rss_kb)
    if slope is None or len(times_s) < 2:
        return 0.0
    return slope * (times_s[-1] - times_s[0]) / 3600.0


def failed_verdicts(summary: dict) -> list[str]:
    """``label: verdict`` for every FAIL of a soak's summary."""
    return [
        f"{f['label']}: {name}"
        for f in summary["runs"]
        for name, v in f["verdicts"].items()
        if v == "FAIL"
    ]
