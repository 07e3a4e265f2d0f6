"""Sequential A/B judgement: a confidence sequence for the median paired ratio, so that an
A/B may look at its data after every round and stop as soon as the data decide, without
the false-verdict rate growing with the number of looks.

Why a confidence sequence. A fixed-n test re-run after every batch of pairs is wrong more
often the more often it looks (with 20 looks a 5 % test says "different" for an A/A far more
than 5 % of the time). A confidence sequence is a sequence of intervals that contain the
true value at *every* n at once with probability at least 1 - alpha, so the interval at a
data-dependent stopping point is still a valid (1 - alpha) interval.

Which one. Pairs are heavy-tailed on a shared VM (a pair that straddles a speed-mode switch
is 30 % off), so, like the fixed-n rule, this one is about the median of the per-pair log
ratios and uses only signs. For a candidate median m, S_n(m) = #{i <= n : x_i <= m} minus
n/2 is a sum of independent +-1/2 steps when m is the true median (whatever the
distribution of the x_i); such a sum is 1/2-sub-Gaussian, and Robbins' normal-mixture
martingale for it,

    M_n = sqrt(rho / (V_n + rho)) * exp(D_n^2 / (2 (V_n + rho))),   V_n = n/4,  D_n = S_n - n/2,

is a nonnegative martingale with mean 1, so by Ville's inequality P(some n has
M_n >= 1/alpha) <= alpha. Inverting M_n < 1/alpha gives, for every n at once,

    |S_n(m) - n/2| < b_n = sqrt((V_n + rho) * log((V_n + rho) / (rho * alpha^2))),

an interval between two order statistics of the data: a time-uniform version of the
order-statistic CI of the median. ``1 / max M_n`` over the looks so far is an anytime-valid
p-value for "no change" (m = 0); Holm's correction across workloads applies to it as to any
p-value. ``rho`` sets the n at which the boundary is tightest (``rho_for``).

The normal mixture bounds the signs by a Gaussian, which is loose when they are all on one
side: it needs 13 pairs of one sign to call anything at 5 % (19 at 5 % / 18, a call of
eighteen programs), where the signs' own likelihood ratio 2^n needs 6. So M_n is a weighted
mixture of two: (1 - w) times the normal mixture, plus w times the Krichevsky-Trofimov
mixture of the signs' likelihood ratios, 2^n B(k + 1/2, n - k + 1/2) / B(1/2, 1/2) with k =
#{x_i <= m} (an exact martingale under the median m; a weighted sum of a nonnegative
supermartingale and a martingale, both starting at 1, is one too, so Ville's inequality
holds). With w = 0.1, 10 pairs of one sign decide at 5 % (15 at 5 % / 18), and at hundreds of
pairs the boundary is about 1 % wider than the normal mixture's alone (its 1 / alpha becomes
1 / (0.9 alpha)). The boundary b_n (``boundary``) is where M_n, increasing in |D_n|, reaches
1 / alpha, found by bisection; the interval is still between two order statistics.

Verdicts (in log-ratio units, delta = log(1 + threshold)):
- GO / NO-GO: p_holm < alpha, the median is beyond the threshold, and the one-sided
  interval below lies beyond half the threshold on that side. The p-value keeps an A/A from
  being called GO or NO-GO (two-sided, alpha in all); the last condition keeps a real change
  of at most half the threshold from it, whatever the number of looks (it would need the
  bound on that side to miss the true value: probability <= alpha).
- NEUTRAL: that interval lies within +-delta (equivalent within the threshold): the two
  one-sided tests of an equivalence test (TOST), each at alpha.

The one-sided interval is a second confidence sequence of the same kind, at
``equivalence_alpha(alpha)`` and tightest at ``EQUIVALENCE_TIGHTEST_PAIRS``. Each claim it
backs fails only when the bound on one side misses the true median at some look (a false
NEUTRAL needs a true change of at least the threshold and the bound on its side below it);
for the symmetric mixture that one-sided miss has probability at most alpha' / (2 - alpha')
(the mixture's other half is at most 1 there), which ``equivalence_alpha`` sets to alpha. It
is narrower than the two-sided sequence at alpha, which guards against a false GO/NO-GO in
either direction, and it is tightest a little later: an A/A's NEUTRAL takes hundreds of pairs
here.
- INCONCLUSIVE: anything else; the data so far cannot tell. The estimate of how many more
  pairs would decide comes from how the boundary narrows with n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hakbench.stats.stats import ALPHA, DECISIVE, GO, INCONCLUSIVE, NEUTRAL, NO_GO

__all__ = ["DECISIVE", "INCONCLUSIVE"]

# the mixture's second part: a Krichevsky-Trofimov (Beta(1/2, 1/2)) mixture of the signs'
# likelihood ratios, for the short calls (a program run of seconds, a pair precious)
BETA_WEIGHT = 0.1
BETA_SHAPE = 0.5
DEFAULT_TIGHTEST_PAIRS = 100  # where the boundary is tightest: typical decisive n here
# where the one-sided sequence is tightest: between a clear NO-GO (~100 pairs here) and an
# A/A's NEUTRAL (hundreds)
EQUIVALENCE_TIGHTEST_PAIRS = 300


def equivalence_alpha(alpha: float = ALPHA) -> float:
    """The level of the two-sided sequence whose one-sided miss is at most ``alpha``:
    alpha' / (2 - alpha') = alpha."""
    return 2 * alpha / (1 + alpha)


def rho_for(n_opt: int = DEFAULT_TIGHTEST_PAIRS, alpha: float = ALPHA) -> float:
    """The mixture parameter whose boundary, relative to sqrt(n), is smallest at ``n_opt``
    (a one-dimensional search; the boundary is flat near its minimum)."""
    v = n_opt / 4
    best, best_rho = math.inf, v
    for i in range(1, 400):
        rho = v * i / 100
        b = (v + rho) * math.log((v + rho) / (rho * alpha**2))
        if b < best:
            best, best_rho = b, rho
    return best_rho


@functools.lru_cache(maxsize=8)
def _default_rho(alpha: float) -> float:
    return rho_for(alpha=alpha)


@functools.lru_cache(maxsize=8)
def _equivalence_rho(alpha: float) -> float:
    return rho_for(EQUIVALENCE_TIGHTEST_PAIRS, equivalence_alpha(alpha))


def boundary(n: int, alpha: float = ALPHA, rho: float | None = None) -> float:
    """b_n: |#{x_i <= median} - n/2| stays below this for all n, w.p. >= 1 - alpha (the |D|
    at which the mixture reaches 1 / alpha; more than n/2 when no imbalance of n signs
    reaches it)."""
    return _boundary(n, alpha, rho if rho is not None else _default_rho(alpha))


@functools.lru_cache(maxsize=65536)
def _boundary(n: int, alpha: float, rho: float) -> float:
    target = math.log(1 / alpha)
    if n == 0 or _log_mixture(n / 2, n, rho) < target:
        return n / 2 + 1
    lo, hi = 0.0, n / 2
    for _ in range(50):  # M is increasing in |D|: bisection to ~n 2^-50
        mid = (lo + hi) / 2
        if _log_mixture(mid, n, rho) < target:
            lo = mid
        else:
            hi = mid
    return hi


def _log_mixture(d: float, n: int, rho: float) -> float:
    """log M_n at D_n = d: the normal mixture (weight 1 - BETA_WEIGHT) plus the
    Krichevsky-Trofimov mixture of the signs' likelihood ratios (weight BETA_WEIGHT)."""
    v = n / 4
    normal = 0.5 * math.log(rho / (v + rho)) + d * d / (2 * (v + rho))
    k = n / 2 + d
    a = BETA_SHAPE
    beta = n * math.log(2) + _log_beta(k + a, n - k + a) - _log_beta(a, a)
    x, y = math.log1p(-BETA_WEIGHT) + normal, math.log(BETA_WEIGHT) + beta
    return max(x, y) + math.log1p(math.exp(-abs(x - y)))


def _log_beta(x: float, y: float) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def one_sided_boundary(n: int, alpha: float = ALPHA) -> float:
    """b_n of the sequence whose bound on each side misses with probability <= alpha (the
    one NEUTRAL and GO/NO-GO's half-threshold condition use)."""
    return boundary(n, equivalence_alpha(alpha), _equivalence_rho(alpha))


def one_sided_cs(x: Sequence[float], alpha: float = ALPHA) -> tuple:
    """(low, high) of that sequence at n = len(x): each bound misses with probability <=
    alpha."""
    return median_cs(x, equivalence_alpha(alpha), _equivalence_rho(alpha))


def median_cs(x: Sequence[float], alpha: float = ALPHA, rho: float | None = None) -> tuple:
    """(low, high) of the confidence sequence for the median at n = len(x); +-inf where the
    data are still too few to bound a side."""
    import numpy as np

    return _cs_of_sorted(np.sort(np.asarray(x, dtype=float)), alpha, rho)


def _cs_of_sorted(xs, alpha: float, rho: float | None) -> tuple:
    n = len(xs)
    if n == 0:
        return (-math.inf, math.inf)
    b = boundary(n, alpha, rho)
    k1 = math.ceil(n / 2 - b)  # S(m) >= n/2 - b  <=>  m >= x_(k1)
    k2 = math.floor(n / 2 + b) + 1  # S(m) <= n/2 + b  <=>  m < x_(k2)
    lo = float(xs[k1 - 1]) if k1 >= 1 else -math.inf
    hi = float(xs[k2 - 1]) if k2 <= n else math.inf
    return (lo, hi)


def mixture_evidence(x: Sequence[float], rho: float | None = None, alpha: float = ALPHA) -> float:
    """M_n at m = 0 ("no change"): large when the signs of the log ratios are lopsided."""
    import numpy as np

    xs = np.sort(np.asarray(x, dtype=float))
    return _evidence_of_sorted(xs, rho if rho is not None else _default_rho(alpha))


def _evidence_of_sorted(xs, rho: float) -> float:
    import numpy as np

    n = len(xs)
    if n == 0:
        return 1.0
    below = np.searchsorted(xs, 0.0, "left")
    below += 0.5 * (np.searchsorted(xs, 0.0, "right") - below)
    return math.exp(min(_log_mixture(abs(float(below) - n / 2), n, rho), 700.0))


@dataclass
class Look:
    """What the data of one workload say after one look (log-ratio units)."""

    n: int
    estimate: float  # median log ratio
    low: float  # the confidence sequence at this look
    high: float
    p_anytime: float  # 1 / max M over the looks so far
    # the one-sided sequence at this look (NEUTRAL's and the half-threshold bound's); None:
    # the same as (low, high), as for a fixed-n CI
    eq_low: float | None = None
    eq_high: float | None = None
    # the intervals of the looks so far have no point in common: the data do not fit one
    # fixed change (the machine drifted), so nothing is decided
    drift: bool = False

    def equivalence(self) -> tuple[float, float]:
        """The one-sided interval: NEUTRAL and GO/NO-GO's half-threshold bound."""
        if self.eq_low is None or self.eq_high is None:
            return self.low, self.high
        return self.eq_low, self.eq_high


class Sequence_:
    """The running state of one workload: call ``look(x)`` with all its log ratios so far."""

    def __init__(
        self, alpha: float = ALPHA, rho: float | None = None, *, one_sided: float | None = None
    ):
        """``one_sided``: the miss probability of each one-sided bound (default ``alpha``;
        a call of k workloads gives each alpha / k, so that a false NEUTRAL anywhere in the
        call has probability at most alpha)."""
        self.alpha = alpha
        self.rho = rho if rho is not None else _default_rho(alpha)
        side = alpha if one_sided is None else one_sided
        self.eq_alpha, self.eq_rho = equivalence_alpha(side), _equivalence_rho(side)
        self.low, self.high = -math.inf, math.inf
        self.max_evidence = 1.0
        self.last: Look | None = None

    def look(self, x: Sequence[float]) -> Look:
        import numpy as np

        xs = np.sort(np.asarray(x, dtype=float))
        lo, hi = _cs_of_sorted(xs, self.alpha, self.rho)
        # The running intersection would be a valid, tighter interval if the pairs were
        # identically distributed; on this VM the effect itself can drift within a run (a
        # 2026-11-23 trial: median -0.3 % in its first half, -1.8 % in its second), and the
        # intersection then keeps an early, narrow interval the later data contradict: it
        # called a 1 % slowdown NEUTRAL at 0.5 %. So the verdict uses this look's interval,
        # and an empty intersection only says the data drifted.
        self.low, self.high = max(self.low, lo), min(self.high, hi)
        self.max_evidence = max(self.max_evidence, _evidence_of_sorted(xs, self.rho))
        n = len(xs)
        est = float(xs[(n - 1) // 2] + xs[n // 2]) / 2 if n else math.nan
        p = min(1.0, 1.0 / self.max_evidence)
        eq_lo, eq_hi = _cs_of_sorted(xs, self.eq_alpha, self.eq_rho)
        self.last = Look(n, est, lo, hi, p, eq_lo, eq_hi, drift=self.low > self.high)
        return self.last


def verdict(
    look: Look,
    delta: float,
    *,
    higher_is_better: bool,
    p_adjusted: float | None = None,
    alpha: float = ALPHA,
) -> str:
    """GO / NO-GO / NEUTRAL / INCONCLUSIVE for one look (see the module doc)."""
    p = look.p_anytime if p_adjusted is None else p_adjusted
    est = look.estimate
    if look.drift or look.low > look.high:  # the looks' intervals no longer overlap: drift
        return INCONCLUSIVE
    lo, hi = look.equivalence()  # each bound misses its side with probability <= alpha
    if p < alpha and est >= delta and lo > delta / 2:
        return GO if higher_is_better else NO_GO
    if p < alpha and est <= -delta and hi < -delta / 2:
        return NO_GO if higher_is_better else GO
    if -delta < lo and hi < delta:
        return NEUTRAL
    return INCONCLUSIVE


def pairs_to_decide(
    look: Look,
    delta: float,
    alpha: float = ALPHA,
    *,
    near: float | None = None,
    rate: Callable[[int], float] | None = None,
):
    """How many pairs in all would likely decide an INCONCLUSIVE look: the n at which an
    interval of today's shape, centred on today's estimate, would be decisive. The interval
    (the one-sided sequence the verdict bounds, ``Look.equivalence``) narrows like
    ``rate(n)`` (default: its b_n / n, its half-width in ranks over n), scaled from today's
    width. ``near``: how far past zero the near bound must lie for a GO/NO-GO (this rule:
    half the threshold; a fixed-n rule: 0). None when today's interval is not finite yet (too
    few pairs to scale from)."""
    est = look.estimate
    low, high = look.equivalence()
    if abs(est) >= delta:  # towards GO/NO-GO: the near bound must pass ``near``
        needed = abs(est) - (delta / 2 if near is None else near)
    else:  # towards NEUTRAL: the far bound must come inside the threshold
        needed = delta - abs(est)
    if rate is None:

        def rate(n: int) -> float:
            return one_sided_boundary(n, alpha) / n

    if look.n < 2 or not (math.isfinite(low) and math.isfinite(high)) or needed <= 0:
        return None
    half = (high - low) / 2
    rate_now = rate(look.n)
    n = look.n
    while n < 10**7:
        n = max(n + 1, int(n * 1.05))
        if half * rate(n) / rate_now <= needed:
            return n
    return None


def judge_anytime(comparisons: list, threshold_pct: float, *, alpha: float = ALPHA) -> None:
    """Judge, in place, one family of paired comparisons whose number of pairs a stopping
    rule chose (the guardrails of a sequential A/B, stopped by its primary): each on the
    confidence sequence of its log ratios at that n (valid at any stopping time, unlike a
    fixed-n CI), its anytime p Holm-adjusted across the family, NEUTRAL and the
    half-threshold bound on the one-sided sequence at alpha / k (``verdict``). ``ci_low``/
    ``ci_high`` become the two-sided sequence, ``decide_low``/``decide_high`` the one-sided
    bounds the verdict was decided on (as ratios)."""
    from hakbench.stats.stats import NO_DATA, holm

    k = max(1, len(comparisons))
    delta = math.log1p(threshold_pct / 100)
    looks = []
    for c in comparisons:
        logs = [math.log(r) for r in c.ratios if r > 0]
        looks.append(Sequence_(alpha, one_sided=alpha / k).look(logs) if logs else None)
    p_holm = holm([lk.p_anytime if lk else math.nan for lk in looks])
    for c, lk, ph in zip(comparisons, looks, p_holm, strict=True):
        if lk is None:
            c.verdict = NO_DATA
            continue
        c.p_value, c.p_holm = lk.p_anytime, ph
        c.ci_low, c.ci_high = (math.exp(x) for x in (lk.low, lk.high))
        c.decide_low, c.decide_high = (math.exp(x) for x in lk.equivalence())
        c.verdict = verdict(
            lk, delta, higher_is_better=c.higher_is_better, p_adjusted=ph, alpha=alpha
        )
