"""Soak figures as pure functions: series in, numbers out (issue #7).

Every function takes the epochs *after* warm-up; ``None`` means "not enough epochs to say",
never a made-up value. Drift compares medians of the first and last 10 % of the epochs, so a
single slow or fat epoch at either end cannot flip a verdict; the slope uses every epoch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

EDGE_FRACTION = 0.10


def edge_window(n: int, fraction: float = EDGE_FRACTION) -> int:
    """How many epochs each end window holds: 10 % of ``n``, at least one."""
    return max(1, math.ceil(n * fraction))


def drift_pct(values: Sequence[float], fraction: float = EDGE_FRACTION) -> float | None:
    """Median of the last ``fraction`` of ``values`` vs the first, in percent of the first.

    ``None`` with fewer than two values or a first window whose median is 0.
    """
    if len(values) < 2:
        return None
    w = edge_window(len(values), fraction)
    first = statistics.median(values[:w])
    last = statistics.median(values[-w:])
    if first == 0:
        return None
    return (last - first) / first * 100.0


def slope_per_hour(times_s: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of ``values`` over ``times_s`` (seconds), per hour.

    ``None`` with fewer than two points or when every time is the same.
    """
    n = len(values)
    if n < 2 or len(times_s) != n:
        return None
    mean_t = sum(times_s) / n
    mean_v = sum(values) / n
    sxx = sum((t - mean_t) ** 2 for t in times_s)
    if sxx == 0:
        return None
    sxy = sum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True))
    return sxy / sxx * 3600.0


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample standard deviation / mean) in percent."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean == 0:
        return None
    return statistics.stdev(values) / mean * 100.0


def verdict(value: float | None, limit: float, *, upper: bool) -> str:
    """``PASS``/``FAIL`` against ``limit`` (an upper bound when ``upper``), ``n/a`` without data."""
    if value is None:
        return "n/a"
    ok = value <= limit if upper else value >= limit
    return "PASS" if ok else "FAIL"


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _seconds_to_hours(pct_per_s: float) -> float:
    return pct_per_s * 3600.0


def trend_pct_per_hour(
    times_s: Sequence[float], values: Sequence[float], confidence: float = 0.95
) -> dict | None:
    """The least-squares trend of ``values`` in percent of its fitted start value per hour,
    with the ``confidence`` interval of the slope: ``{"pct_per_h", "ci": [low, high]}``.

    Per hour, so a leak of so many KiB/s gives the same figure in a short soak and a long
    one. The interval is Student t on ``linregress``'s standard error, widened for the lag-1
    autocorrelation of the residuals (effective sample size n(1-r)/(1+r)): a single step
    (a heap growing once, the VM switching speed mode) leaves long runs of residuals of one
    sign, which white noise around a real trend does not, so a step is not taken for a
    leak. ``None`` with fewer than three points, one time only, or a fitted start <= 0.
    """
    import numpy as np
    from scipy import stats  # heavy imports live where they are used

    n = len(values)
    if n < 3 or len(times_s) != n or len(set(times_s)) < 2:
        return None
    t = np.asarray(times_s, dtype=float)
    v = np.asarray(values, dtype=float)
    fit = stats.linregress(t, v)
    start = fit.intercept + fit.slope * t.min()
    if not start > 0:
        return None
    resid = v - (fit.intercept + fit.slope * t)
    r = 0.0
    if np.any(resid != 0):
        r = float(np.sum(resid[1:] * resid[:-1]) / np.sum(resid * resid))
    r = min(max(r, 0.0), 0.95)
    n_eff = n * (1 - r) / (1 + r)
    stderr = fit.stderr * math.sqrt((1 + r) / (1 - r))
    half = stats.t.ppf(0.5 + confidence / 2, max(n_eff - 2, 1)) * stderr

    def per_h(slope: float) -> float:
        return float(_seconds_to_hours(slope / start * 100.0))

    return {
        "pct_per_h": per_h(fit.slope),
        "ci": [per_h(fit.slope - half), per_h(fit.slope + half)],
        "lag1_autocorrelation": round(r, 3),
    }


def drift_pct_per_hour(
    times_s: Sequence[float], values: Sequence[float], fraction: float = EDGE_FRACTION
) -> float | None:
    """``drift_pct`` over the time between the middles of its two edge windows, per hour."""
    drift = drift_pct(values, fraction)
    if drift is None:
        return None
    w = edge_window(len(values), fraction)
    span_s = statistics.median(times_s[-w:]) - statistics.median(times_s[:w])
    return float(_seconds_to_hours(drift / span_s)) if span_s > 0 else None


def trend_verdict(
    trend: dict | None, budget_pct_per_h: float, *, rising: bool, resolved: bool = True
) -> str:
    """FAIL when the trend goes the bad way (``rising``: up) faster than the budget and its
    interval excludes zero (the trend is there, not noise); PASS otherwise; n/a without one.
    The rule of ``ab`` in small: a size beyond the threshold and an interval clear of none.
    ``resolved`` False (the change over the soak is below what the measurement can resolve,
    e.g. a few pages of RSS) is a PASS whatever the extrapolation per hour says."""
    if trend is None:
        return "n/a"
    if not resolved:
        return "PASS"
    low, high = trend["ci"]
    if rising:
        bad = trend["pct_per_h"] > budget_pct_per_h and low > 0
    else:
        bad = trend["pct_per_h"] < -budget_pct_per_h and high < 0
    return "FAIL" if bad else "PASS"
