"""The sequential rule's error rates under optional stopping, on simulated paired data whose
noise has the shape of real A/A pairs (tests/data/aa_log_ratios_mixed_loaded.txt: 300
interleaved A/A pairs of `mixed` measured on the lab VM under load, robust-standardised)."""

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_calibrate_sequential import Clock

from hakbench.stats import sequential as sq
from hakbench.stats import stats as st
from hakbench.stats.stats import GO, NEUTRAL, NO_GO
from hakbench.stats.stopper import Stopper

DATA = Path(__file__).parent / "data" / "aa_log_ratios_mixed_loaded.txt"
DELTA = math.log(1.01)  # the default 1 % threshold
SIGMA = 0.04  # robust spread of one pair's log ratio: a loaded VM (quiet: 1-2 %)
BUDGET = 600  # pairs
RUNS = 1000


def shape() -> np.ndarray:
    x = np.loadtxt(DATA)
    x = x - np.median(x)
    return x / (1.4826 * np.median(np.abs(x)))


def simulate(
    effect: float,
    runs: int = RUNS,
    seed: int = 7,
    batch: int = 10,
    sigma: float = SIGMA,
    budget: int = BUDGET,
) -> list:
    """(verdict, pairs) of ``runs`` sequential A/Bs of a slowdown ``effect`` (log units),
    each driven by ``ab``'s own stopping rule (``Stopper``), a look every ``batch`` pairs."""
    rng = np.random.default_rng(seed)
    noise = shape()
    out = []
    for _ in range(runs):
        rule = Stopper({"w": False}, 1.0, max_time_s=math.inf, max_pairs=budget)
        while rule.running():
            for x in effect + sigma * rng.choice(noise, batch):
                rule.add("w", float(x))
            rule.end_round()
        out.append((rule.stops["w"].verdict, len(rule.stops["w"].logs)))
    return out


def test_boundary_is_a_valid_and_narrowing_band():
    assert sq.boundary(100) < 50  # bounds the median with 100 pairs
    assert sq.boundary(400) / 400 < sq.boundary(100) / 100 < sq.boundary(25) / 25
    lo, hi = sq.median_cs(list(range(1, 101)))
    assert 1 < lo < 50.5 < hi < 100
    assert sq.median_cs([0.1, 0.2]) == (-math.inf, math.inf)


def test_aa_false_go_or_no_go_at_most_5_percent():
    verdicts = Counter(v for v, _ in simulate(0.0))
    assert verdicts[GO] + verdicts[NO_GO] <= 0.05 * RUNS, verdicts


@pytest.mark.slow
def test_effect_of_one_and_a_half_thresholds_ends_no_go_within_budget():
    verdicts = Counter(v for v, _ in simulate(1.5 * DELTA, seed=8))
    assert verdicts[NO_GO] >= 0.95 * RUNS, verdicts
    assert verdicts[NEUTRAL] == 0, verdicts


@pytest.mark.slow
def test_effect_at_the_threshold_is_called_neutral_in_at_most_5_percent():
    """NEUTRAL is an equivalence test (TOST, each side at 5 %): a true change of exactly the
    threshold, the hardest case, may end NEUTRAL in at most 5 % of runs, however often the
    rule looks."""
    verdicts = Counter(v for v, _ in simulate(DELTA, seed=10))
    assert verdicts[NEUTRAL] <= 0.05 * RUNS, verdicts


@pytest.mark.slow
def test_equivalence_sequence_decides_an_aa_sooner_than_the_decision_sequence(monkeypatch):
    """Why NEUTRAL has its own sequence: at the pair counts an A/A needs on a loaded day (a
    spread of 0.1 was measured here with one core busy) it is narrower than the GO/NO-GO one,
    so the same simulated A/As end NEUTRAL after fewer pairs."""
    for n in (400, 800, 1600):
        assert sq.one_sided_boundary(n) < 0.93 * sq.boundary(n)
    loaded = {"runs": 200, "seed": 12, "sigma": 0.1, "budget": 5000}
    now = [n for v, n in simulate(0.0, **loaded) if v == NEUTRAL]
    # the rule before: NEUTRAL judged on the 95 % decision sequence itself
    monkeypatch.setattr(sq, "EQUIVALENCE_TIGHTEST_PAIRS", sq.DEFAULT_TIGHTEST_PAIRS)
    monkeypatch.setattr(sq, "equivalence_alpha", lambda alpha=sq.ALPHA: alpha)
    sq._equivalence_rho.cache_clear()
    try:
        before = [n for v, n in simulate(0.0, **loaded) if v == NEUTRAL]
    finally:
        sq._equivalence_rho.cache_clear()
    # every A/A ends NEUTRAL but the few (at most 1 %: hakbench.stats.drift) a drift check
    # stopped: i.i.d. pairs have no drift, its false alarms are all that can stop them
    assert min(len(now), len(before)) >= 0.99 * 200
    assert np.median(now) < 0.85 * np.median(before), (np.median(now), np.median(before))


@pytest.mark.slow
def test_effect_of_half_the_threshold_is_never_go_or_no_go():
    verdicts = Counter(v for v, _ in simulate(0.5 * DELTA, seed=9))
    assert verdicts[NEUTRAL] + verdicts[sq.INCONCLUSIVE] >= 0.95 * RUNS, verdicts


@pytest.mark.slow
def test_fixed_n_rule_rerun_after_every_batch_is_what_this_replaces():
    """The naive alternative, a fixed-n order-statistic CI checked after every batch, calls
    an A/A different far more often than 5 %: the reason for the confidence sequence."""
    from hakbench.stats.stats import median_ci

    rng = np.random.default_rng(3)
    noise = shape()
    wrong = 0
    for _ in range(300):
        x = []
        while len(x) < BUDGET:
            x.extend(SIGMA * rng.choice(noise, 10))
            _, lo, hi = median_ci(x)
            if lo > 0 or hi < 0:
                wrong += 1
                break
    assert wrong > 0.1 * 300


@pytest.mark.parametrize("estimate", [0.002, 0.02])
def test_pairs_to_decide_grows_as_the_decision_gets_harder(estimate):
    look = sq.Look(
        n=50, estimate=estimate, low=estimate - 0.01, high=estimate + 0.01, p_anytime=0.5
    )
    n = sq.pairs_to_decide(look, DELTA)
    assert n is not None and n > 50
    wider = sq.Look(
        n=50, estimate=estimate, low=estimate - 0.02, high=estimate + 0.02, p_anytime=0.5
    )
    assert sq.pairs_to_decide(wider, DELTA) > n


def test_stopper_holm_across_workloads_and_stops_each_when_decided():
    rng = np.random.default_rng(5)
    rule = Stopper(
        {"slow": True, "same": True}, 1.0, max_time_s=1e9, max_pairs=5000, clock=Clock(0.0)
    )
    rounds = 0
    while rule.running():
        for w, effect in (("slow", -0.05), ("same", 0.0)):
            if w in rule.running():
                rule.add(w, effect + 0.005 * rng.standard_normal(), seconds=0.01)
        rule.end_round()
        rounds += 1
    slow, same = rule.stops["slow"], rule.stops["same"]
    assert slow.verdict == NO_GO and slow.reason == "decided"
    assert same.verdict == NEUTRAL and same.reason == "decided"
    assert max(len(slow.logs), len(same.logs)) == rounds  # each stopped at its decision
    assert slow.pairs_needed is None  # decided: nothing more is needed
    assert slow.p_holm >= slow.state.last.p_anytime  # adjusted across the two


def test_stopper_budget_ends_inconclusive_with_pairs_and_seconds_needed():
    rng = np.random.default_rng(6)
    rule = Stopper({"w": True}, 1.0, max_time_s=10.0, max_pairs=10**6, clock=Clock(0.1))
    while rule.running():
        rule.add("w", 0.2 * rng.standard_normal(), seconds=0.05)
        rule.end_round()
    s = rule.stops["w"]
    assert s.verdict == sq.INCONCLUSIVE and s.reason == "budget"
    assert s.pairs_needed is not None and s.pairs_needed > len(s.logs)
    assert rule.seconds_needed("w") == pytest.approx((s.pairs_needed - len(s.logs)) * 0.05)
    rule = Stopper({"w": True}, 1.0, max_time_s=1e9, max_pairs=5, clock=Clock(0.0))
    rule.add("w", None)  # a failed pair counts as failed, not as data
    for _ in range(5):
        rule.add("w", 0.3 * rng.standard_normal())
        rule.end_round()
    assert rule.stops["w"].failed == 1 and rule.stops["w"].reason == "budget"


def test_a_drifting_effect_is_judged_on_the_current_interval_and_flagged():
    """Each look's verdict uses that look's interval, not the intersection of all looks,
    which would keep an early narrow interval that later data contradict; when the looks'
    intervals no longer overlap, the data drifted and nothing is decided."""
    rng = np.random.default_rng(11)
    state = sq.Sequence_()
    x = list(0.001 * rng.standard_normal(400))  # no change, very quiet
    early = state.look(x)
    assert sq.verdict(early, math.log(1.005), higher_is_better=True) == NEUTRAL
    x += list(-0.03 + 0.001 * rng.standard_normal(4000))  # then a 3 % slowdown
    late = state.look(x)
    assert late.high < early.low  # this look's interval, away from the early one
    assert late.drift and sq.verdict(late, math.log(1.005), higher_is_better=True) == (
        sq.INCONCLUSIVE
    )


def test_a_drift_stops_its_workload_at_once_with_no_promise_of_pairs():
    """Once the looks' intervals no longer overlap more pairs cannot decide: the workload
    stops INCONCLUSIVE, reason drift, without "~N pairs would likely decide"; the other
    workload of the call runs on. (Two looks: 400 quiet pairs of no change, undecided at a
    0.01 % threshold, then 4,000 of a 3 % slowdown.)"""
    rng = np.random.default_rng(11)
    rule = Stopper({"w": True, "v": True}, 0.01, max_time_s=math.inf, max_pairs=10**6)
    for mean, n in ((0.0, 400), (-0.03, 4000)):
        for x in mean + 0.001 * rng.standard_normal(n):
            rule.add("w", float(x))
            rule.add("v", float(0.2 * rng.standard_normal()))  # a noisy A/A: undecided
        running = rule.end_round()
        assert rule.stops["w"].verdict == sq.INCONCLUSIVE
    s = rule.stops["w"]
    assert s.reason == "drift" and s.pairs_needed is None and running == ["v"]


def test_neutral_is_controlled_across_the_workloads_of_a_call():
    """Each workload's one-sided bounds miss with probability alpha / k in a call of k
    workloads (Bonferroni): a false NEUTRAL anywhere in the call stays within alpha, so the
    same pairs that are NEUTRAL alone may not be NEUTRAL beside two other workloads."""
    one = Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=10**6)
    three = Stopper({w: True for w in "wuv"}, 1.0, max_time_s=math.inf, max_pairs=10**6)
    assert one.stops["w"].state.eq_alpha == pytest.approx(sq.equivalence_alpha(0.05))
    assert three.stops["w"].state.eq_alpha == pytest.approx(sq.equivalence_alpha(0.05 / 3))
    rng = np.random.default_rng(5)
    n_one = n_three = None
    for n, x in enumerate(0.004 * rng.standard_normal(3000), 1):  # A/A, spread 0.4 %
        for rule in (one, three):
            for w in rule.stops:
                rule.add(w, float(x))
            rule.end_round()
        n_one = n_one or (n if one.stops["w"].verdict == sq.NEUTRAL else None)
        n_three = n_three or (n if three.stops["w"].verdict == sq.NEUTRAL else None)
        if n_three:
            break
    assert n_one is not None and n_three is not None and n_one < n_three


def _pairs_to_decide_eighteen(effect: float, noise: float, seed: int) -> list:
    """Pairs each of 18 workloads (a call over mimalloc-bench's programs) took to stop, all
    with the same true change, a look after every pair."""
    rng = np.random.default_rng(seed)
    names = [f"p{i}" for i in range(18)]
    rule = Stopper(dict.fromkeys(names, False), 1.0, max_time_s=math.inf, max_pairs=200)
    while rule.running():
        for w in rule.running():
            rule.add(w, effect + noise * rng.standard_normal())
        rule.end_round()
    return [(rule.stops[w].verdict, len(rule.stops[w].logs)) for w in names]


def test_a_large_change_is_decided_in_few_pairs_in_a_call_of_eighteen_programs():
    """Each run of a public program costs seconds: a change far beyond the noise must not need
    the 23 pairs the normal mixture alone asked for (its Gaussian bound is loose when all the
    signs agree); the signs' own mixture decides it in 15."""
    stops = _pairs_to_decide_eighteen(0.2, 0.02, seed=21)
    assert all(v == NO_GO for v, _ in stops), stops
    assert max(n for _, n in stops) <= 15, stops
    same = _pairs_to_decide_eighteen(0.0, 0.001, seed=22)  # equal to a tenth of a percent
    assert all(v == NEUTRAL for v, _ in same), same
    assert max(n for _, n in same) <= 15, same


def test_looking_after_every_pair_from_the_first_keeps_an_aa_within_5_percent():
    """The signs' mixture decides at small n, where an A/A's signs are most often lopsided by
    chance: looked at after every pair from the first, an A/A still ends GO/NO-GO in at most 5 %
    of runs."""
    verdicts = Counter(v for v, _ in simulate(0.0, runs=600, seed=23, batch=1, budget=60))
    assert verdicts[GO] + verdicts[NO_GO] <= 0.05 * 600, verdicts


def test_a_stop_waits_for_the_guardrails_its_workload_names_holding_the_primary():
    """A public suite's program is asked for its peak RSS too: its stop waits for that
    guardrail's verdict (judged as the end of the call will), the primary held at the verdict
    it reached first; a workload that names none stops at its primary's decision."""
    rng = np.random.default_rng(24)

    def run(waits):
        rule = Stopper(
            {"w": False, "v": False},
            1.0,
            max_time_s=math.inf,
            max_pairs=400,
            waits=waits,
            guard_family=4,
        )
        rss = []
        while rule.running():
            for w in rule.running():
                x = 0.02 * rng.standard_normal()  # peak RSS: 3 % larger, noisy
                rss.append(x)
                rule.add(w, -0.2 + 0.01 * rng.standard_normal(), guards={"maxrss_kb": 0.03 + x})
            rule.end_round()
        return rule

    plain = run(None)
    assert all(s.verdict == GO and s.reason == "decided" for s in plain.stops.values())
    first = len(plain.stops["w"].logs)
    waiting = run({"w": {"maxrss_kb": False}})
    w, v = waiting.stops["w"], waiting.stops["v"]
    assert v.verdict == GO and len(v.logs) <= 15 and not v.guards  # no wait named
    assert w.verdict == GO and w.reason == "decided" and w.held
    assert len(w.logs) <= 15  # the primary's verdict and n: those of its decision
    assert len(w.guards["maxrss_kb"]) > max(first, len(w.logs))  # the pairs went on
    # and the guardrail is decisive as the end judges it: NO-GO (RSS grew 3 %)
    c = st.compare_paired("w", "maxrss_kb", [1.0] * 1, [1.0] * 1, False)
    c.ratios = [math.exp(x) for x in w.guards["maxrss_kb"]]
    sq.judge_anytime([c] * 1 + [dataclasses.replace(c) for _ in range(3)], 1.0)
    assert c.verdict == NO_GO
