"""The stopping rule of a sequential A/B (``ab`` and ``calibrate --sequential``), pure of
processes: after each round of pairs, a look at every running workload through its
confidence sequence (``hakbench.stats.sequential``), the anytime p-values adjusted by Holm
across the call's workloads, NEUTRAL's one-sided bounds at alpha / k (Bonferroni), and a
stop at a decisive verdict, at drift, or when the budget runs out. ``RULE`` is the sentence
the report prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hakbench.stats import drift
from hakbench.stats.layouts import (
    MIN_PAIRS_PER_LAYOUT,
    SEQUENTIAL_SHARE,
    layout_floor,
    layout_look,
    layout_spread,
    pairs_with_floor,
)
from hakbench.stats.sequential import Look, Sequence_, pairs_to_decide, verdict
from hakbench.stats.stats import ALPHA, DECISIVE, INCONCLUSIVE, holm

# pairs every layout of a side needs before a workload may stop as layout-limited
LAYOUT_LIMITED_PAIRS = 12

RULE = (
    "Sequential: pairs run in rounds (every running workload once a round, random order "
    "within a pair); after each round, per running workload, a confidence sequence for the "
    "median of log r (from the signs of the pairs; it holds at every look at once, so "
    "looking after every round does not raise the error rate: hakbench.stats.sequential) and its "
    "anytime-valid p, adjusted by Holm across the workloads of the call. A workload stops "
    "GO when p_holm < {alpha}, the median improves on A by at least the threshold "
    "({threshold:g} %) and the near bound of a one-sided sequence (each bound misses with "
    "probability <= {alpha} / k, k the workloads of the call) lies beyond half the "
    "threshold; NO-GO the same for a regression; NEUTRAL when both one-sided bounds lie "
    "within +-threshold (equivalent: two one-sided tests at {alpha} / k each, so a false "
    "NEUTRAL anywhere in the call has probability <= {alpha}). The verdict table and the "
    "plot show these one-sided bounds, the interval that decides; summary.csv keeps the "
    "two-sided sequence too (ci_low, ci_high). "
    "A workload whose looks' intervals no longer overlap, or whose ratio moves steadily with "
    "the pair order (Spearman, checked at looks 1.5 times apart from 40 pairs on, 1 % over "
    "all checks: hakbench.stats.drift), stops INCONCLUSIVE at once, reason drift: no single "
    "change fits its pairs, so no number of pairs is promised. The other processes' load is "
    "read after every round; when the pairs run during a load spike (0.75 of a core above "
    "the call's quiet level) have another ratio than the rest (rank sum), the workload stops "
    "INCONCLUSIVE, reason load spike (the change depends on the load), and likewise, while "
    "undecided, when their spread is 3 times the rest's; a spike that moved neither is noted "
    "beside the verdict. "
    "A workload whose definition names guardrails to wait for (a public suite's peak RSS) "
    "is held at its decided verdict while its pairs go on until those are decisive too, "
    "each judged as at the end (its own sequence, one-sided bounds at {alpha} / k and the "
    "anytime p times k, k the call's guardrail comparisons). "
    "When the budget ({max_time:g} s for the call, or {max_pairs} pairs) runs out first: "
    "INCONCLUSIVE, with the pairs that would likely decide. Direction: {direction}. "
    "Guardrails (RSS, page faults) are judged once, at the stop, on confidence sequences of "
    "the same kind (their number of pairs was chosen by the primary's stop, which a fixed-n "
    "CI would not allow for)."
)
LAYOUT_RULE = (
    "Code layouts ({k_a} of A, {k_b} of B): each pair drew one layout a side (every "
    "combination once per block, shuffled; the first blocks take 2, 4, 8, ... layouts a "
    "side, and an interval is from the layouts with " + str(MIN_PAIRS_PER_LAYOUT) + " pairs "
    "or more so far); every interval "
    "above is the hull of the plain one and a random-effects interval from the layout "
    "medians (hakbench.stats.layouts), so the "
    "verdict holds for the change averaged over layouts, not for the ones drawn, and an "
    "effect within the layouts' spread is never GO/NO-GO. A sequential workload stops "
    "INCONCLUSIVE, reason layout-limited, as soon as the layouts' floor alone (the part of "
    "the interval no number of pairs narrows, once every layout has {min_pairs} pairs) is "
    "as wide as what is left to decide: more layouts, not more pairs, could decide it. The "
    "random-effects interval is a fixed-n t-interval, not anytime-valid like the sequence: a "
    "sequential look takes it at {share} of its one-sided level, a share calibrated by "
    "simulating whole sequential calls (A/A between codes of 4 and of 16 layouts a side, "
    "layout effects of 0.7 %: GO/NO-GO in at most 5 % of calls; tests/test_layouts_stats.py, "
    'docs/measuring.md "Code layout").'
)


@dataclass
class Stop:
    """Where one workload of a sequential A/B stands: its verdict so far and, once stopped,
    why (``decided``, ``drift``, ``budget``, ``failed``, ``interrupted``)."""

    higher_is_better: bool
    state: Sequence_
    logs: list = field(default_factory=list)
    failed: int = 0
    verdict: str = INCONCLUSIVE
    p_holm: float = 1.0
    reason: str | None = None  # None while it runs
    seconds: float = 0.0  # wall time of its own processes
    pairs_needed: int | None = None
    layout_a: list = field(default_factory=list)  # each logged pair's layouts (--layouts)
    layout_b: list = field(default_factory=list)
    widened: Look | None = None  # the last look with the layout spread in (--layouts)
    floor: float = math.nan  # the layout floor of the one-sided bounds (log units)
    more_layouts: bool = False  # INCONCLUSIVE and only more layouts could decide
    rounds: list = field(default_factory=list)  # the round of each logged pair
    checked: int = 0  # the pairs at the last drift / load-spike check (hakbench.stats.drift)
    note: str = ""  # what a drift or load-spike check found (a stop's reason, or a flag)
    # guardrails whose verdict the stop waits for (metric -> higher is better), their log
    # ratios, and whether the primary is decided and held while they are not yet
    waits: dict = field(default_factory=dict)
    guards: dict = field(default_factory=dict)
    held: bool = False

    @property
    def look(self) -> Look | None:
        """The last look the verdict judged: with the layout spread in, when there are
        layouts."""
        return self.widened if self.widened is not None else self.state.last


class Stopper:
    """The stopping rule of a sequential A/B, pure of processes: feed it each round's pairs
    (``add``), then ``end_round``; it looks at every running workload, adjusts the anytime
    p-values by Holm across all workloads of the call, and stops a workload at a decisive
    verdict (GO, NO-GO, NEUTRAL), or all of them when the time or pair budget runs out
    (INCONCLUSIVE, with the pairs that would likely decide)."""

    def __init__(
        self,
        higher_is_better: dict,
        threshold_pct: float,
        *,
        max_time_s: float,
        max_pairs: int,
        alpha: float = ALPHA,
        clock: Callable[[], float] = time.monotonic,
        layouts: tuple[int, int] = (1, 1),
        waits: dict | None = None,
        guard_family: int = 0,
    ):
        """``waits``: workload -> {guardrail metric: higher is better} whose verdicts its
        stop waits for (a public suite's programs wait for peak RSS); ``guard_family``: the
        guardrail comparisons the call judges in all (the correction they are judged under
        at the end, ``sequential.judge_anytime``)."""
        self.delta = math.log1p(threshold_pct / 100)
        self.alpha, self.max_time_s, self.max_pairs, self.clock = (
            alpha,
            max_time_s,
            max_pairs,
            clock,
        )
        # NEUTRAL (and GO/NO-GO's half-threshold bound) controlled across the call's
        # workloads: each one-sided bound misses with probability <= alpha / k (Bonferroni),
        # as the anytime p of GO/NO-GO is Holm-adjusted across them
        self.one_sided = alpha / max(1, len(higher_is_better))
        self.stops = {
            w: Stop(h, Sequence_(alpha, one_sided=self.one_sided))
            for w, h in higher_is_better.items()
        }
        for w, wanted in (waits or {}).items():
            self.stops[w].waits = dict(wanted)
            self.stops[w].guards = {m: [] for m in wanted}
        self.guard_family = max(guard_family, sum(len(s.waits) for s in self.stops.values()), 1)
        self.t0 = clock()
        self.k_a, self.k_b = layouts  # code layouts a side (hakbench.stats.layouts)
        # per round: (wall s, other processes' CPU s), cumulative (end_round's ``load``)
        self.readings: list = []

    def running(self) -> list:
        return [w for w, s in self.stops.items() if s.reason is None]

    def elapsed(self) -> float:
        return self.clock() - self.t0

    @property
    def layered(self) -> bool:
        return max(self.k_a, self.k_b) > 1

    def add(
        self,
        workload: str,
        log_ratio: float | None,
        seconds: float = 0.0,
        layouts: tuple[int, int] = (0, 0),
        guards: dict | None = None,
    ) -> None:
        """One pair of ``workload``: its log ratio B/A, or None for a pair with a failed side;
        ``layouts``: the pair's layout of A and of B; ``guards``: the log ratios of the
        guardrails its stop waits for."""
        s = self.stops[workload]
        s.seconds += seconds
        for m, x in (guards or {}).items():
            if m in s.guards and x is not None:
                s.guards[m].append(x)
        if log_ratio is None:
            s.failed += 1
        elif not s.held:  # once decided (held), its pairs serve its guardrails only
            s.logs.append(log_ratio)
            s.rounds.append(len(self.readings))
            s.layout_a.append(layouts[0])
            s.layout_b.append(layouts[1])

    def _look(self, s: Stop) -> None:
        s.state.look(s.logs)
        if not self.layered:
            return
        ks = {"k_a": self.k_a, "k_b": self.k_b}
        s.widened = layout_look(
            s.state.last,
            s.logs,
            s.layout_a,
            s.layout_b,
            one_sided=self.one_sided,
            alpha=self.alpha,
            **ks,
        )
        spread = layout_spread(s.logs, s.layout_a, s.layout_b, **ks)
        s.floor = layout_floor(spread, self.one_sided * SEQUENTIAL_SHARE)

    def stop(self, workload: str, reason: str, verdict: str | None = None) -> None:
        s = self.stops[workload]
        s.reason = reason
        s.verdict = verdict or s.verdict

    def _check(self, s: Stop) -> drift.Finding | None:
        """A gradual drift or a load spike in ``s``'s pairs, at the looks ``drift.check_due``
        names (the last finding stays in ``s.note``)."""
        n = len(s.logs)
        if not drift.check_due(n, s.checked):
            return None
        s.checked = n
        found = None
        if self.readings:  # the more specific cause first: a spike also looks like a drift
            loads = drift.load_per_round(self.readings)
            per_pair = [loads[r] if r < len(loads) else math.nan for r in s.rounds]
            found = drift.load_spike(s.logs, per_pair)
        if found is None or not found.stops:
            found = drift.gradual_drift(s.logs) or found
        if found is not None:
            s.note = found.text
        return found

    def end_round(self, load: tuple[float, float] | None = None) -> list:
        """Look at every running workload; returns the ones still running. ``load``: (wall
        seconds, other processes' CPU seconds) read now, cumulative, for the load-spike
        check of the pairs of this round."""
        if load is not None:
            self.readings.append(load)
        for s in self.stops.values():
            if (
                s.reason is None
                and not s.held
                and s.logs
                and (s.state.last is None or s.state.last.n < len(s.logs))
            ):
                self._look(s)
        looked = [w for w, s in self.stops.items() if s.state.last is not None]
        for w, p in zip(looked, holm([self.stops[w].look.p_anytime for w in looked]), strict=True):
            s = self.stops[w]
            if s.reason is not None:
                continue
            if s.held:
                if self._guards_decided(s):
                    s.reason = "decided"
                continue
            s.p_holm = p
            s.verdict = verdict(
                s.look,
                self.delta,
                higher_is_better=s.higher_is_better,
                p_adjusted=p,
                alpha=self.alpha,
            )
            found = self._check(s)
            if found is not None and found.stops and (found.overrides or s.verdict not in DECISIVE):
                s.verdict, s.reason = INCONCLUSIVE, found.reason
            elif s.verdict in DECISIVE and not self._guards_decided(s):
                s.held = True  # decided, held at this look while its guardrails are not
            elif s.verdict in DECISIVE:
                s.reason = "decided"
            elif s.look.drift:  # no single change fits the looks: more will not decide
                s.reason = "drift"
        out_of_budget = self.elapsed() >= self.max_time_s
        for w in self.running():
            if out_of_budget or len(self.stops[w].logs) >= self.max_pairs:
                self.stop(w, "budget")
        for s in self.stops.values():
            s.pairs_needed, s.more_layouts = None, False
            no_promise = s.reason in ("drift", "load spike") or (
                s.state.last is not None and s.state.last.drift
            )
            if s.verdict == INCONCLUSIVE and s.state.last is not None and not no_promise:
                if self.layered:  # the plain look, less the floor no pairs narrow
                    s.pairs_needed, s.more_layouts = pairs_with_floor(
                        s.state.last, self.delta, s.floor, self.one_sided
                    )
                else:
                    s.pairs_needed = pairs_to_decide(s.state.last, self.delta, self.one_sided)
        for w in self.running():  # only more layouts could decide: no pair is spent on it
            if self.stops[w].more_layouts and self._layouts_known(self.stops[w]):
                self.stop(w, "layout-limited")
        return self.running()

    def _guards_decided(self, s: Stop) -> bool:
        """Whether every guardrail ``s`` waits for is decisive as the end of the call will
        judge it: its own confidence sequence, the one-sided bounds at alpha / k and the
        anytime p times k (Bonferroni, which the end's Holm adjustment never exceeds), k the
        guardrail comparisons of the call."""
        k = self.guard_family
        for m, higher in s.waits.items():
            logs = s.guards[m]
            if not logs:
                return False
            look = Sequence_(self.alpha, one_sided=self.alpha / k).look(logs)
            p = min(1.0, look.p_anytime * k)
            v = verdict(look, self.delta, higher_is_better=higher, p_adjusted=p, alpha=self.alpha)
            if v not in DECISIVE:
                return False
        return True

    def _layouts_known(self, s: Stop) -> bool:
        """Whether every layout of a side with several has LAYOUT_LIMITED_PAIRS pairs: a
        floor estimated from fewer is too rough to stop on."""
        from collections import Counter

        for k, drawn in ((self.k_a, s.layout_a), (self.k_b, s.layout_b)):
            counts = Counter(drawn)
            if k > 1 and min(counts.get(i, 0) for i in range(k)) < LAYOUT_LIMITED_PAIRS:
                return False
        return True

    def seconds_needed(self, workload: str) -> float | None:
        """The seconds the pairs still needed would likely take, at this workload's pace."""
        s = self.stops[workload]
        n = len(s.logs)
        if s.pairs_needed is None or not n:
            return None
        return max(0, s.pairs_needed - n) * s.seconds / (n + s.failed)
