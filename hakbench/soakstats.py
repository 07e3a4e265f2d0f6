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
