"""Code layout as a random factor of an A/B: an interval for the effect that includes the
spread between layouts, the spread itself, and whether the effect's sign depends on the
layout. Pure: arrays in, numbers out (hakbench.engine.layouts makes the layouts).

The model. Each side runs in K code layouts of the same code (K_A, K_B; a side with one,
e.g. a reference allocator, is taken as the fixed thing it is), and each pair draws one
layout per side. The log ratio of a pair with layouts (a, b) is

    x = mu + beta_b - alpha_a + e,

where alpha and beta are the layouts' own effects, drawn once per call from each side's
population of layouts (spread sigma_A, sigma_B), and e is the pair's noise (heavy tailed,
2-11 % here). The question is mu: the change averaged over layouts, not over the K that
happened to be drawn. Whatever the number of pairs, the data pin down only
theta = mu + mean(beta) - mean(alpha); the difference between theta and mu has variance
sigma_A^2 / K_A + sigma_B^2 / K_B, which more pairs never shrink. A plain interval is for
theta: it says "GO" to a lucky draw of layouts as readily as to a real change.

The interval (``layout_look``, ``layout_ci``). A random-effects interval for mu from the
layout means, the standard analysis of a nested design ("analyse the cluster means"): per
side with K > 1, the median log ratio of each layout's pairs (for A's layout a: the pairs
that drew a; ``hakbench.engine.layouts.draw_layouts`` pairs it with every layout of B
alike). Their sample variance s^2 holds the layouts' own spread plus the noise of a median
of n / K pairs, and s^2 / K is the variance of their mean, so

    median +- t_df * sqrt(sum over sides of s^2 / K),   df by Welch-Satterthwaite (K - 1 a side)

is a t-interval of the familiar kind: with 4 layouts a side, df <= 6. K is the layouts a
side that have MIN_PAIRS_PER_LAYOUT pairs so far: the draw takes a side's layouts in by
blocks (2, then 4, 8, ... up to all of them), so a call whose pairs take seconds has an
interval from a few layouts (wide: few layouts, few degrees of freedom) instead of none
while its pairs are too few to give every layout of 16 its three. The noise is counted
once per side (so twice when both sides have layouts: on the safe side) rather than
estimated and subtracted: the difference of two noisy variances has no good degrees of
freedom (Satterthwaite's collapse towards 1 while the noise dominates, or claim infinity
once the estimate is cut at 0), and the noise part vanishes as pairs accumulate anyway; the
interval then settles at the layouts' own spread, which more pairs never narrow.

The verdict's interval is the hull of this one and the plain one (the sign-based confidence
sequence of ``hakbench.stats.sequential`` at each look, or the order-statistic CI of a fixed
count): it contains the plain interval, so layouts never make a verdict bolder, and it covers
mu whenever the random-effects interval does. While the pairs' noise dominates, the
confidence sequence is the wider and keeps the looks honest; once the layouts dominate, the
random-effects interval keeps a lucky draw of layouts from deciding. It is a fixed-n
interval, though, and the sequential rule looks after every round: each look that can end
the call is another chance for a momentarily small s^2, so a look takes its bounds at
``SEQUENTIAL_SHARE`` (a third) of the one-sided level; at half, an A/A between layouts
with effects of normal spread 0.7 % was GO/NO-GO in 6.7 % of simulated calls
(docs/measuring.md, "Code layout", has the simulations that chose it). Why not the
sequential rule with an inflated variance: that rule works on signs, not a variance, and
the layout term is no noise that more pairs average away. Checked by simulation
(tests/test_layouts_stats.py): an A/A between two codes whose K = 4 layouts a side have
effects uniform in +-0.7 %, with pair noise of 2-5 %, is GO/NO-GO in at most 5 % of calls
at threshold 0.5 (the plain rule with one layout a side, as ab runs today: ~45 %), and a
1.5 % slowdown is still NO-GO in at least 90 %. Such an A/A is seldom NEUTRAL at threshold
0.5 either: with 4 layouts a side of that spread, equivalence within 0.5 % cannot be shown;
the floor narrows as 1 / sqrt(K).

The spread (``layout_spread``), for the report and ``calibrate --layouts``: the SD of the
layouts' own effects in log units, the method of moments (s^2 minus the noise of a layout
median, v * n / n_layout with v the variance of the all-pair median from its order-statistic
95 % interval, at least 0) pooled over the sides (K - 1 degrees of freedom each); ``sd_raw``
keeps the SD of the layout medians as measured.

LAYOUT-SENSITIVE (``layout_cells``): the effect's sign depends on the layout when one
combination of layouts (a, b) is beyond 0 on one side and another one on the other, each by
its order-statistic interval of the median at level 1 - alpha / (K_A K_B) (Bonferroni over
the combinations, so an effect that does not depend on the layout is called
LAYOUT-SENSITIVE in at most alpha of calls). A combination judges only once it has enough
pairs for its level (the whole range of its pairs would otherwise pass for an interval).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hakbench.stats.sequential import Look
from hakbench.stats.stats import ALPHA, CONFIDENCE, median_ci

LAYOUT_SENSITIVE = "LAYOUT-SENSITIVE"
Z95 = 1.959963984540054  # the order-statistic 95 % interval of the median is ~ +-Z95 SE
MIN_PAIRS_PER_LAYOUT = 3  # below this a layout's median says nothing: the interval is open
# the share of the one-sided level at which a look takes the random-effects bounds (the
# module doc: a fixed-n interval looked at after every round)
SEQUENTIAL_SHARE = 1 / 3


@dataclass(frozen=True)
class SideSpread:
    """The layouts of one side."""

    k: int
    medians: tuple[float, ...]  # per layout (0..k-1), the median log ratio of its pairs
    pairs: tuple[int, ...]
    sd_raw: float  # SD of the medians of the layouts used
    sd: float  # sigma_hat: the same with the pairs' noise removed (>= 0)
    # the layouts with MIN_PAIRS_PER_LAYOUT pairs, which the interval is from (all k once the
    # pairs have met every layout: engine.layouts.draw_layouts takes them in by blocks)
    used: int


@dataclass(frozen=True)
class LayoutSpread:
    """What the layouts do to one comparison (log-ratio units)."""

    n: int
    estimate: float  # the median log ratio of all pairs
    noise_se: float  # SE of that median from the pairs' noise alone
    layout_se: float  # sqrt(sum sigma_hat^2 / K): what the draw of layouts adds
    interval_se: float  # the random-effects interval's SE: sqrt(sum s_raw^2 / K)
    df: float  # its degrees of freedom (Welch-Satterthwaite; inf: no side has layouts)
    sd: float  # sigma_hat pooled over the sides with more than one layout
    sd_raw: float  # the SD of the layout medians, pooled likewise, noise included
    sides: dict = field(default_factory=dict)  # "A" / "B" -> SideSpread (k > 1 only)
    # every side with layouts has two or more with MIN_PAIRS_PER_LAYOUT pairs (the interval
    # is from those; open until then)
    complete: bool = True


@dataclass(frozen=True)
class CellEffect:
    """One combination of layouts (A's a, B's b)."""

    layout_a: int
    layout_b: int
    n: int
    median: float
    low: float  # at the Bonferroni level of ``layout_cells``
    high: float
    judged: bool  # enough pairs for that level


def _arrays(x, layout_a, layout_b):
    import numpy as np

    x = np.asarray(x, dtype=float)
    la = np.asarray(layout_a, dtype=int)
    lb = np.asarray(layout_b, dtype=int)
    if not (len(x) == len(la) == len(lb)):
        raise ValueError("log ratios and layouts must have the same length")
    return x, la, lb


def _ks(la, lb, k_a, k_b) -> tuple[int, int]:
    return (
        k_a if k_a is not None else int(la.max()) + 1 if len(la) else 1,
        k_b if k_b is not None else int(lb.max()) + 1 if len(lb) else 1,
    )


def _median_and_se(x) -> tuple[float, float]:
    """The median and its SE from the order-statistic 95 % interval (normal approximation
    of its ranks, n/2 -+ Z95 sqrt(n)/2: the interval ~ +-Z95 SE whatever the distribution)."""
    import numpy as np

    n = len(x)
    xs = np.sort(x)
    med = float(np.median(xs))
    if n < 2:
        return med, math.inf
    k = max(1, math.floor((n - Z95 * math.sqrt(n)) / 2))  # 1-based rank of the lower bound
    return med, float(xs[n - k] - xs[k - 1]) / (2 * Z95)


def _group_medians(x, labels, k: int) -> tuple[list[float], list[int]]:
    """The median of ``x`` and the count per label 0..k-1 (NaN for an empty label)."""
    import numpy as np

    counts = np.bincount(labels, minlength=k)[:k]
    xs = x[np.lexsort((x, labels))]  # by label, then value
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    medians = [
        float(xs[s + (c - 1) // 2] + xs[s + c // 2]) / 2 if c else math.nan
        for s, c in zip(starts.tolist(), counts.tolist(), strict=True)
    ]
    return medians, counts.tolist()


@functools.lru_cache(maxsize=4096)
def _quantile(p: float, df: float) -> float:
    """t quantile (normal for infinite df); ``df`` comes rounded down to 1/100 (on the safe
    side), so repeated looks reuse it."""
    from scipy import stats as _st

    return float(_st.norm.ppf(p)) if math.isinf(df) else float(_st.t.ppf(p, df))


def layout_spread(
    x: Sequence[float],
    layout_a: Sequence[int],
    layout_b: Sequence[int],
    *,
    k_a: int | None = None,
    k_b: int | None = None,
) -> LayoutSpread:
    """The layout spread of one comparison: per-pair log ratios ``x`` with each pair's
    layout on side A and side B (0..K-1; ``k_a``/``k_b`` default to the largest seen + 1)."""
    import numpy as np

    x, la, lb = _arrays(x, layout_a, layout_b)
    k_a, k_b = _ks(la, lb, k_a, k_b)
    n = len(x)
    if n == 0:
        return LayoutSpread(
            0, math.nan, math.inf, math.inf, math.inf, math.inf, math.nan, math.nan, {}, False
        )
    est, noise_se = _median_and_se(x)
    v = noise_se**2
    sides, complete = {}, True
    for name, labels, k in (("A", la, k_a), ("B", lb, k_b)):
        if k < 2:
            continue
        medians, counts = _group_medians(x, labels, k)
        # the layouts the pairs have met enough: which ones depends on the draw's order only
        # (engine.layouts.draw_layouts), never on the values, so leaving the others out of
        # this look biases nothing; it only has fewer layouts (a wider t) until they come in
        used = [i for i, c in enumerate(counts) if c >= MIN_PAIRS_PER_LAYOUT]
        if len(used) < 2:
            complete = False
            continue
        raw = float(np.var([medians[i] for i in used], ddof=1))
        noise = v * n * float(np.mean([1 / counts[i] for i in used]))
        sides[name] = SideSpread(
            k,
            tuple(medians),
            tuple(counts),
            math.sqrt(raw),
            math.sqrt(max(0.0, raw - noise)),
            len(used),
        )
    # the random-effects interval's variance: the layout medians' own variance (noise
    # included: a cluster-mean interval, exact in form, which counts the noise once per side)
    terms = [s.sd_raw**2 / s.used for s in sides.values()]
    df_denominator = sum(t * t / (s.used - 1) for t, s in zip(terms, sides.values(), strict=True))
    interval_var = sum(terms) if terms else v
    df = interval_var**2 / df_denominator if df_denominator > 0 else math.inf
    dofs = sum(s.used - 1 for s in sides.values())
    pooled = (
        (lambda f: math.sqrt(sum((s.used - 1) * f(s) ** 2 for s in sides.values()) / dofs))
        if dofs
        else (lambda f: math.nan)
    )
    return LayoutSpread(
        n,
        est,
        noise_se,
        math.sqrt(sum(s.sd**2 / s.used for s in sides.values())),
        math.sqrt(interval_var),
        df,
        pooled(lambda s: s.sd),
        pooled(lambda s: s.sd_raw),
        sides,
        complete,
    )


def random_effects_bounds(spread: LayoutSpread, alpha: float) -> tuple[float, float]:
    """(low, high) of the random-effects interval for mu, each bound missing its side with
    probability ``alpha`` (so a two-sided interval at 1 - 2 alpha); open (+-inf) while a
    side has fewer than two layouts with their pairs. Without layouts: a normal interval
    from the noise alone."""
    if not spread.complete or spread.n < 2 or not math.isfinite(spread.interval_se):
        return (-math.inf, math.inf)
    df = spread.df if math.isinf(spread.df) else max(1.0, math.floor(spread.df * 100) / 100)
    half = _quantile(1 - alpha, df) * spread.interval_se
    return (spread.estimate - half, spread.estimate + half)


def layout_floor(spread: LayoutSpread, alpha: float) -> float:
    """The half-width, at one-sided level ``alpha``, that the random-effects interval tends
    to as pairs accumulate: the layouts' own term (noise removed) over all k layouts a side
    (the pairs meet every one in time), which no number of pairs narrows. An INCONCLUSIVE
    call whose distance to a decision is below it needs more layouts, not more pairs. NaN
    when the spread is not known yet."""
    terms = [s.sd**2 / s.k for s in spread.sides.values()]
    if not spread.complete or not terms:
        return math.nan if not spread.complete else 0.0
    denominator = sum(t * t / (s.k - 1) for t, s in zip(terms, spread.sides.values(), strict=True))
    df = sum(terms) ** 2 / denominator if denominator > 0 else math.inf
    df = df if math.isinf(df) else max(1.0, math.floor(df * 100) / 100)
    return _quantile(1 - alpha, df) * math.sqrt(sum(terms))


def layout_look(
    look: Look,
    x: Sequence[float],
    layout_a: Sequence[int],
    layout_b: Sequence[int],
    *,
    one_sided: float = ALPHA,
    alpha: float = ALPHA,
    k_a: int | None = None,
    k_b: int | None = None,
) -> Look:
    """``look`` (the sequential rule's look at the same ``x``) with its intervals widened to
    include the layout spread: the two-sided one (low, high) to the hull with the
    random-effects interval at ``alpha``, the one-sided bounds that decide (eq_low, eq_high)
    to the hull with its bounds at ``one_sided`` each (both times ``SEQUENTIAL_SHARE``).
    ``sequential.verdict`` then judges it as any look; the estimate, the anytime p and the
    drift flag are the look's own. Without layouts (one a side) the look is returned as is.
    The Stopper's ``one_sided`` (alpha / workloads) is the level to pass."""
    spread = layout_spread(x, layout_a, layout_b, k_a=k_a, k_b=k_b)
    if spread.complete and not spread.sides:
        return look
    lo2, hi2 = random_effects_bounds(spread, alpha / 2 * SEQUENTIAL_SHARE)
    lo1, hi1 = random_effects_bounds(spread, one_sided * SEQUENTIAL_SHARE)
    eq_low, eq_high = look.equivalence()
    return replace(
        look,
        low=min(look.low, lo2),
        high=max(look.high, hi2),
        eq_low=min(eq_low, lo1),
        eq_high=max(eq_high, hi1),
    )


def layout_ci(
    x: Sequence[float],
    layout_a: Sequence[int],
    layout_b: Sequence[int],
    confidence: float = CONFIDENCE,
    *,
    k_a: int | None = None,
    k_b: int | None = None,
    ratios: bool = False,
) -> tuple[float, float, float]:
    """(median, low, high) of the log ratios ``x`` for a fixed count: the hull of the
    order-statistic CI (``stats.median_ci``) and the random-effects interval, both at
    ``confidence``. In place of ``median_ci`` for a comparison whose pairs drew layouts;
    ``ratios``: ``x`` are the ratios B/A themselves and so is the answer (what
    ``stats.compare_paired`` takes from ``median_ci(paired_ratios(a, b))``)."""
    import numpy as np

    logs = np.log(np.asarray(x, dtype=float)) if ratios else x
    med, lo, hi = median_ci(logs, confidence)
    spread = layout_spread(logs, layout_a, layout_b, k_a=k_a, k_b=k_b)
    if not (spread.complete and not spread.sides):
        r_lo, r_hi = random_effects_bounds(spread, (1 - confidence) / 2)
        lo, hi = min(lo, r_lo), max(hi, r_hi)
    if not ratios:
        return med, lo, hi
    return tuple(math.exp(v) if v < 700 else math.inf for v in (med, lo, hi))  # no overflow


def _judged_at(n: int, level_alpha: float) -> bool:
    """Whether an order-statistic interval of the median of n values reaches level 1 -
    level_alpha (the interval between the extremes covers with 1 - 2 / 2^n at best)."""
    return n > 0 and 2 * 0.5**n <= level_alpha


def layout_cells(
    x: Sequence[float],
    layout_a: Sequence[int],
    layout_b: Sequence[int],
    *,
    alpha: float = ALPHA,
    k_a: int | None = None,
    k_b: int | None = None,
) -> list[CellEffect]:
    """The effect per combination of layouts, each with its order-statistic interval of the
    median at 1 - alpha / (K_A K_B)."""
    x, la, lb = _arrays(x, layout_a, layout_b)
    k_a, k_b = _ks(la, lb, k_a, k_b)
    level = alpha / (k_a * k_b)
    cells = []
    for a in range(k_a):
        for b in range(k_b):
            values = x[(la == a) & (lb == b)]
            n = len(values)
            if n == 0:
                cells.append(CellEffect(a, b, 0, math.nan, -math.inf, math.inf, False))
                continue
            med, lo, hi = median_ci(values, 1 - level)
            judged = _judged_at(n, level)
            if not judged:
                lo, hi = -math.inf, math.inf
            cells.append(CellEffect(a, b, n, med, lo, hi, judged))
    return cells


def is_layout_sensitive(cells: Sequence[CellEffect]) -> bool:
    """True when one combination is beyond 0 above and another below (``layout_cells``)."""
    return any(c.judged and c.low > 0 for c in cells) and any(
        c.judged and c.high < 0 for c in cells
    )


@dataclass(frozen=True)
class LayoutReport:
    """What a report shows of the layouts of one comparison."""

    spread: LayoutSpread
    low: float  # the random-effects interval at ``confidence`` (log units)
    high: float
    cells: tuple[CellEffect, ...]
    sensitive: bool  # LAYOUT-SENSITIVE

    @property
    def label(self) -> str:
        return LAYOUT_SENSITIVE if self.sensitive else ""


def layout_report(
    x: Sequence[float],
    layout_a: Sequence[int],
    layout_b: Sequence[int],
    *,
    alpha: float = ALPHA,
    k_a: int | None = None,
    k_b: int | None = None,
) -> LayoutReport:
    """The spread, the random-effects interval at 1 - alpha, the effect per combination of
    layouts and the LAYOUT-SENSITIVE flag of one comparison."""
    spread = layout_spread(x, layout_a, layout_b, k_a=k_a, k_b=k_b)
    low, high = random_effects_bounds(spread, alpha / 2)
    cells = tuple(layout_cells(x, layout_a, layout_b, alpha=alpha, k_a=k_a, k_b=k_b))
    return LayoutReport(spread, low, high, cells, is_layout_sensitive(cells))


def pairs_with_floor(
    look: Look,
    delta: float,
    floor: float,
    alpha: float = ALPHA,
    *,
    near: float | None = None,
    rate=None,
) -> tuple[int | None, bool]:
    """(pairs in all that would likely decide, whether only more layouts can): the plain
    look's ``sequential.pairs_to_decide`` once the layout floor is taken off the distance
    left to a decision (the floor is the part of the interval no number of pairs narrows).
    (None, True) when the floor alone is at least that distance: more layouts, not more
    pairs. A NaN floor (the spread not known yet) adds nothing."""
    from hakbench.stats.sequential import pairs_to_decide

    if not math.isfinite(floor) or floor <= 0:
        return pairs_to_decide(look, delta, alpha, near=near, rate=rate), False
    est = abs(look.estimate)
    needed = est - (delta / 2 if near is None else near) if est >= delta else delta - est
    if needed <= floor:
        return None, True
    if est >= delta:  # the near bound must pass ``near`` plus the floor
        return pairs_to_decide(
            look, delta, alpha, near=(delta / 2 if near is None else near) + floor, rate=rate
        ), False
    # towards NEUTRAL: the far bound within the threshold less the floor
    return pairs_to_decide(look, delta - floor, alpha, near=near, rate=rate), False
