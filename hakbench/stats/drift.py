"""Drift and load spikes in a sequential A/B: when the pairs of one workload stop looking
like one fixed change, pure of processes (``hakbench.stats.stopper`` asks, after a look).

The sequential rule assumes every pair measures the same change, whatever its noise. Two
ways that fails here, besides the looks' intervals no longer overlapping (``Look.drift``):

- **A gradual drift**: the ratio moves steadily during the call (the machine warms up, a
  neighbour's working set grows). Test: Spearman's rank correlation of the log ratios with
  their order. Ranks, like the rest of the rule, so the heavy tails of the pairs do not
  decide it.
- **A load spike**: other processes take the CPUs for a stretch of the call. The pairing
  cancels what both sides of a pair share, so a spike alone changes nothing but the noise;
  it matters when the ratio itself is different while the machine is busy (the change
  depends on the load: caches shared with a neighbour) or when the pairs' spread grows so
  much that the budget is spent on noise. The load of each pair is the other processes'
  cores over the window of rounds that ran it (``load_per_round``, from cumulative readings
  of their CPU seconds); pairs at least ``SPIKE_CORES`` above the quiet level of the call
  (its lower quartile) are the spike's, those within half of it the quiet ones (the ramps
  between are neither). Test: Mann-Whitney's rank sum of the spike's log
  ratios against the others' (the ratio moved), or their robust spreads (``SPREAD_FACTOR``
  times wider). A spike that moves neither is flagged in the report, not stopped.

Both are tested at looks spaced by a factor ``CHECK_GROWTH`` in pairs from ``MIN_PAIRS`` on,
each at ``ALPHA / MAX_CHECKS`` (Bonferroni over the checks a call can reach), so a call whose
pairs are one fixed change is stopped for drift in at most ``ALPHA`` of calls, and for a
spike likewise: ``tests/test_sequential.py`` checks both on synthetic series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.01  # the chance that pairs of one fixed change are stopped for drift (per test)
MIN_PAIRS = 40
CHECK_GROWTH = 1.5
MAX_CHECKS = 16  # 40 * 1.5^15 > 20,000 pairs, the sequential cap
SPIKE_CORES = 0.75  # other processes' cores above the call's quiet level
SPIKE_MIN_PAIRS = 12  # pairs a side of the split before a spike is judged
SPREAD_FACTOR = 3.0
LOAD_WINDOW_S = 1.0  # a round's load is over at least this much wall time (ticks are 10 ms)


@dataclass(frozen=True)
class Finding:
    """What a check found: ``reason`` (``drift`` or ``load spike``), whether it stops the
    workload while undecided (a spike that moved nothing is only flagged), whether it
    overrides a decision (the pairs are no single change: a drift, a spike that moved the
    ratio; not a spike that only widened the spread, which a decided sequence has allowed
    for), and the sentence for the report."""

    reason: str
    stops: bool
    text: str
    overrides: bool = True


def check_due(n: int, last_checked: int) -> bool:
    """Whether a look at ``n`` pairs is a check: the first at MIN_PAIRS, each next one
    CHECK_GROWTH times as many pairs as the last."""
    return n >= MIN_PAIRS and (last_checked == 0 or n >= last_checked * CHECK_GROWTH)


def _level() -> float:
    return ALPHA / MAX_CHECKS


def _pct(logs) -> str:
    import numpy as np

    return f"{100 * math.expm1(float(np.median(logs))):+.2f} %"


def gradual_drift(x: Sequence[float]) -> Finding | None:
    """A steady move of the log ratios ``x`` (in run order) with their order, or None."""
    import numpy as np
    from scipy import stats as _st

    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < MIN_PAIRS or np.all(x == x[0]):
        return None
    rho, p = _st.spearmanr(np.arange(n), x)
    if not (p < _level()):
        return None
    third = n // 3
    return Finding(
        "drift",
        True,
        f"the ratio drifted during the call (Spearman rho {rho:+.2f} with the pair order, "
        f"p {p:.2g}): B/A {_pct(x[:third])} in its first third, {_pct(x[-third:])} in its "
        "last; no single change fits its pairs",
    )


def load_per_round(readings: Sequence[tuple[float, float]]) -> list[float]:
    """Other processes' cores per round from cumulative readings (wall seconds, other
    processes' CPU seconds), one taken at the end of each round: over the window that ends
    with the round and reaches back at least LOAD_WINDOW_S (or to the first reading)."""
    out = []
    for i, (t, cpu) in enumerate(readings):
        j = i - 1
        while j > 0 and t - readings[j][0] < LOAD_WINDOW_S:
            j -= 1
        if j < 0 or t <= readings[j][0]:
            out.append(math.nan)
            continue
        out.append(max(0.0, (cpu - readings[j][1]) / (t - readings[j][0])))
    return out


def load_spike(x: Sequence[float], loads: Sequence[float]) -> Finding | None:
    """A load spike among the pairs (log ratios ``x``, each with the other processes' cores
    while it ran, ``loads``): None when there is none (or too few pairs to tell)."""
    import numpy as np
    from scipy import stats as _st

    from hakbench.stats.stats import robust_sd

    x = np.asarray(x, dtype=float)
    load = np.asarray(loads, dtype=float)
    known = ~np.isnan(load)
    if known.sum() < 2 * SPIKE_MIN_PAIRS:
        return None
    quiet_level = float(np.quantile(load[known], 0.25))
    busy = known & (load >= quiet_level + SPIKE_CORES)
    quiet = known & (load < quiet_level + SPIKE_CORES / 2)  # the ramps between: neither
    if busy.sum() < SPIKE_MIN_PAIRS or quiet.sum() < SPIKE_MIN_PAIRS:
        return None
    where = (
        f"a load spike: other processes used {float(np.median(load[busy])):.1f} cores during "
        f"{int(busy.sum())} pairs, {float(np.median(load[quiet])):.1f} during the other "
        f"{int(quiet.sum())}"
    )
    p = float(_st.mannwhitneyu(x[busy], x[quiet], alternative="two-sided").pvalue)
    if p < _level():
        return Finding(
            "load spike",
            True,
            f"{where}; B/A was {_pct(x[busy])} then against {_pct(x[quiet])} (rank sum p "
            f"{p:.2g}): the change depends on the load, no single verdict fits",
        )
    s_busy, s_quiet = robust_sd(x[busy]), robust_sd(x[quiet])
    if s_quiet > 0 and s_busy >= SPREAD_FACTOR * s_quiet:
        return Finding(
            "load spike",
            True,
            f"{where}; the pairs' spread grew {s_busy / s_quiet:.1f} times in it ("
            f"{100 * s_busy:.1f} % against {100 * s_quiet:.1f} %): rerun when it is quieter",
            overrides=False,
        )
    return Finding(
        "load spike", False, f"{where}; it moved neither the ratio nor its spread", False
    )
