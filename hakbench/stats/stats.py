"""Statistics for paired A/B runs: ratios, a distribution-free CI, Wilcoxon, Holm, verdicts.

Why these: on this VM whole stretches of runs go fast or slow together (a +30 % slow mode,
docs/measuring.md), so A and B are run as interleaved pairs and judged
on the per-pair ratio B/A, which cancels the mode both runs share. The ratios are heavy
tailed (pairs that straddle a mode switch), so the summary is the median with an
order-statistic confidence interval, and the test is Wilcoxon's signed-rank on log-ratios,
whose ranks absorb those tails (A/A false positives 1/30 there, against 17-21/30 for the
unpaired t-tests of pyperf and hyperfine).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ALPHA = 0.05
CONFIDENCE = 0.95
DEFAULT_THRESHOLD_PCT = 1.0

GO, NO_GO, NEUTRAL, NOT_ENGAGED, NO_DATA = "GO", "NO-GO", "NEUTRAL", "NOT-ENGAGED", "NO-DATA"
FAILED = "FAILED"
INCONCLUSIVE = "INCONCLUSIVE"
DECISIVE = (GO, NO_GO, NEUTRAL)

RULE = (
    "Per pair r = B/A. Summary: median r with a distribution-free 95 % CI (order statistics "
    "of the binomial). Test: two-sided Wilcoxon signed-rank on log r, p adjusted by Holm "
    "across the workloads of the call. Verdict: GO when p_holm < {alpha} and the median "
    "improves on A by at least the threshold ({threshold:g} %) and the CI excludes 1; NO-GO "
    "the same for a regression; NEUTRAL only when the whole equivalence interval lies within "
    "+-threshold (equivalent): the 95 % CI for one workload, for k workloads of the call the "
    "CI at 1 - {alpha}/k (Bonferroni: each bound misses with probability <= {alpha}/(2k), so "
    "a false NEUTRAL anywhere in the call has probability <= {alpha}/2, as for one "
    "workload); else INCONCLUSIVE (the data cannot tell yet), with the pairs that would "
    "likely decide. Direction: {direction}; lower RSS and page "
    "faults are better (guardrails are judged by the same rule, as a family of their own). "
    "Failures are results: a "
    "failed, timed-out, wrong-checksum or wrong-allocator measured sample on one side makes "
    "the verdict FAILED (counts per side, first error); only the same failures on both "
    "sides leave the verdict to the complete pairs, and the report says so."
)


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """B/A per pair; pairs where either value is not > 0 are dropped (0/0 counts as 1)."""
    import numpy as np  # heavy imports live where they are used: `hakbench --help` stays fast

    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    both_zero = (a == 0) & (b == 0)
    ok = (a > 0) & (b > 0)
    return np.concatenate([b[ok] / a[ok], np.ones(int(both_zero.sum()))])


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple:
    """(median, low, high): the order-statistic CI of the median (exact, distribution-free).

    With n values, the interval [x_(k), x_(n-k+1)] covers the median with probability
    1 - 2 P(Bin(n, 1/2) < k); k is the largest with that probability >= ``confidence``.
    Too few values for the level (n < 6 at 95 %) gives the full range.
    """
    import numpy as np
    from scipy import stats as _st

    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    med = float(np.median(x))
    alpha = 1 - confidence
    # smallest k with P(X <= k) >= alpha/2, so P(X < k) < alpha/2: the largest valid k
    k = int(_st.binom.ppf(alpha / 2, n, 0.5))
    if k < 1:
        return (med, float(x[0]), float(x[-1]))
    return (med, float(x[k - 1]), float(x[n - k]))


def median_ratio_ci(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE):
    """(median, low, high) of the paired ratios B/A."""
    return median_ci(paired_ratios(a, b), confidence)


def wilcoxon_p(ratios: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p on log ratios; all-equal pairs give 1.0."""
    import numpy as np
    from scipy import stats as _st

    logs = np.log(np.asarray(ratios, dtype=float))
    logs = logs[np.abs(logs) > 1e-12]
    if len(logs) < 2:
        return 1.0
    return float(_st.wilcoxon(logs, alternative="two-sided").pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given); NaN stays NaN."""
    p = list(pvalues)
    idx = [i for i, v in enumerate(p) if v is not None and not math.isnan(v)]
    order = sorted(idx, key=lambda i: p[i])
    m = len(order)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def verdict(
    ratio: float,
    ci_low: float,
    ci_high: float,
    p: float,
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    higher_is_better: bool = True,
    alpha: float = ALPHA,
    equivalence: tuple[float, float] | None = None,
) -> str:
    """GO / NO-GO / NEUTRAL / INCONCLUSIVE by the rule in RULE. NEUTRAL means equivalent
    (the whole ``equivalence`` interval, by default the CI, within +-threshold), never
    "could not tell": that is INCONCLUSIVE."""
    if any(v is None or math.isnan(v) for v in (ratio, ci_low, ci_high, p)):
        return NO_DATA
    t = threshold_pct / 100.0
    if p < alpha and ratio >= 1 + t and ci_low > 1:
        return GO if higher_is_better else NO_GO
    if p < alpha and ratio <= 1 - t and ci_high < 1:
        return NO_GO if higher_is_better else GO
    eq_low, eq_high = equivalence or (ci_low, ci_high)
    if 1 - t < eq_low and eq_high < 1 + t:
        return NEUTRAL
    return INCONCLUSIVE


def exact_verdict(
    ratio: float, *, threshold_pct: float = DEFAULT_THRESHOLD_PCT, higher_is_better: bool
) -> str:
    """For exact counts (callgrind Ir): no noise, so the threshold alone decides."""
    if ratio is None or math.isnan(ratio):
        return NO_DATA
    t = threshold_pct / 100.0
    if ratio >= 1 + t:
        return GO if higher_is_better else NO_GO
    if ratio <= 1 - t:
        return NO_GO if higher_is_better else GO
    return NEUTRAL


@dataclass(frozen=True)
class Failures:
    """What failed on the two sides of a comparison, and what it does to the verdict."""

    verdict: str | None  # FAILED, or None: judge the complete pairs (with ``note`` beside)
    note: str  # "" when nothing failed


def failures(a: Sequence[dict], b: Sequence[dict]) -> Failures:
    """Judge the failed samples (any status but "ok": failed, timeout, wrong checksum,
    wrong allocator) of the measured samples ``a`` and ``b`` of one comparison.

    Survivors never decide alone: a failure on one side makes the verdict FAILED, with the
    counts per side and the first error. Only the same failures on both sides (as many, of
    the same statuses) leave the verdict to the complete pairs, with a note saying so.
    """
    bad = {
        side: [s for s in samples if s.get("status") != "ok"]
        for side, samples in (("A", a), ("B", b))
    }
    if not bad["A"] and not bad["B"]:
        return Failures(None, "")
    counts = f"A {len(bad['A'])}/{len(a)} failed, B {len(bad['B'])}/{len(b)} failed"
    first = min(bad["A"] + bad["B"], key=lambda s: s.get("seq", 0))  # first in run order
    error = first.get("error") or first.get("status")
    kinds = {side: sorted(str(s.get("status")) for s in bad[side]) for side in bad}
    if kinds["A"] == kinds["B"]:
        return Failures(None, f"the same failures on both sides ({counts}; first: {error})")
    return Failures(FAILED, f"{counts}; first: {error}")


@dataclass
class Comparison:
    """The judged comparison of one metric of one workload."""

    workload: str
    metric: str
    a_median: float
    b_median: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    n_pairs: int
    higher_is_better: bool
    p_holm: float = math.nan
    verdict: str = NO_DATA
    # "pairs": judged from the paired runs; "perf": medians of ab's perf counter runs, not
    # paired and never judged; "instructions": one exact count per side.
    source: str = "pairs"
    seconds: float | None = None  # wall time of the measured pairs (primary only)
    stop: str = ""  # sequential: decided | drift | budget | failed | interrupted
    # sequential: the one-sided bounds (as ratios) the verdict was decided on, each missing
    # its side with probability <= alpha (hakbench.stats.sequential.Look.equivalence); None for a
    # fixed count, whose CI (ci_low, ci_high) is what decides
    decide_low: float | None = None
    decide_high: float | None = None
    pairs_needed: int | None = None  # INCONCLUSIVE: the pairs in all that would likely decide
    seconds_needed: float | None = None  # ... and the seconds those still to run would take
    ratios: tuple = field(default=(), repr=False)  # the paired ratios B/A it summarises
    note: str = ""  # sequential: a drift or load spike found (its stop's reason, or a flag)


def compare_paired(
    workload: str, metric: str, a: Sequence[float], b: Sequence[float], higher_is_better: bool
) -> Comparison:
    """Summary and p of one metric; the verdict is set after Holm (``judge``)."""
    import numpy as np

    r = paired_ratios(a, b)
    med, lo, hi = median_ci(r)
    return Comparison(
        workload,
        metric,
        float(np.median(a)) if len(a) else math.nan,
        float(np.median(b)) if len(b) else math.nan,
        med,
        lo,
        hi,
        wilcoxon_p(r) if len(r) else math.nan,
        len(r),
        higher_is_better,
        ratios=tuple(float(x) for x in r),
    )


def equivalence_ci(ratios: Sequence[float], k: int, alpha: float = ALPHA) -> tuple:
    """(low, high): the interval NEUTRAL is judged on when ``k`` workloads are judged at once
    (Bonferroni): the order-statistic CI at 1 - alpha / k, each bound missing its side with
    probability <= alpha / (2k), so a false NEUTRAL anywhere in the call has probability
    <= alpha / 2, as for one workload (k = 1: the 95 % CI itself)."""
    _, low, high = median_ci(ratios, 1 - alpha / max(1, k))
    return low, high


def neutral_correction(k: int, *, sequential: bool, alpha: float = ALPHA) -> str:
    """The sentence a report prints on how NEUTRAL is controlled across its ``k`` workloads."""
    if k <= 1:
        return "NEUTRAL: one workload, no correction across workloads needed."
    if sequential:
        return (
            f"NEUTRAL: Bonferroni across the {k} workloads of this call: each one-sided bound "
            f"misses with probability <= {alpha:g}/{k}, so a false NEUTRAL anywhere in the "
            f"call has probability <= {alpha:g}."
        )
    return (
        f"NEUTRAL: Bonferroni across the {k} workloads of this call: each is judged on its "
        f"{100 * (1 - alpha / k):.2f} % CI (1 - {alpha:g}/{k}), so a false NEUTRAL anywhere in "
        f"the call has probability <= {alpha / 2:g}, as for one workload's 95 % CI."
    )


def judge(
    comparisons: list[Comparison],
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    *,
    family=None,
    alpha: float = ALPHA,
) -> None:
    """Holm across each family of comparisons, then the verdict of each comparison (in
    place): GO/NO-GO on the Holm-adjusted p and the CI, NEUTRAL on ``equivalence_ci`` with k
    the comparisons of its family (Bonferroni). ``family(c)`` names a comparison's family
    (default: its metric); ``ab`` passes one family for every primary comparison of the
    call, whatever metric each workload is judged on, and one for the guardrails. A
    comparison not judged GO/NO-GO gets the interval NEUTRAL was judged on as
    ``decide_low``/``decide_high``."""
    family = family or (lambda c: c.metric)
    groups: dict = {}
    for c in comparisons:
        groups.setdefault(family(c), []).append(c)
    for group in groups.values():
        for c, ph in zip(group, holm([c.p_value for c in group]), strict=True):
            c.p_holm = ph
            eq = equivalence_ci(c.ratios, len(group), alpha) if len(c.ratios) else None
            c.verdict = verdict(
                c.ratio,
                c.ci_low,
                c.ci_high,
                ph,
                threshold_pct=threshold_pct,
                higher_is_better=c.higher_is_better,
                alpha=alpha,
                equivalence=eq,
            )
            if eq is not None and len(group) > 1 and c.verdict not in (GO, NO_GO):
                c.decide_low, c.decide_high = eq


def cell_summary(values_by_metric: dict[str, Sequence[float]]) -> list[dict]:
    """Per metric of one cell: n, median and its 95 % CI, min and max."""
    rows = []
    for metric in sorted(values_by_metric):
        v = [x for x in values_by_metric[metric] if x is not None]
        med, lo, hi = median_ci(v)
        rows.append(
            {
                "metric": metric,
                "n": len(v),
                "median": med,
                "ci_low": lo,
                "ci_high": hi,
                "min": min(v) if v else math.nan,
                "max": max(v) if v else math.nan,
            }
        )
    return rows


def wilson_ci(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (float(max(0.0, mid - half)), float(min(1.0, mid + half)))


def robust_sd(values: Sequence[float]) -> float:
    """1.4826 x MAD: the SD of the bulk, not of the pairs that straddle a speed-mode switch."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan
    return float(1.4826 * np.median(np.abs(x - np.median(x))))
