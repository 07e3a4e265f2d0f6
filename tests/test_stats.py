"""Statistics on synthetic data shaped like this VM: two speed modes ~30 % apart that both
runs of a pair share, plus a few per-run outliers."""

import math

import numpy as np
import pytest

from hakbench.stats import stats as st


def paired_runs(n, effect, seed, noise=0.01):
    """Throughputs of n pairs: a shared mode per pair, B = A * effect, per-run noise."""
    rng = np.random.default_rng(seed)
    mode = np.where(rng.random(n) < 0.37, 1 / 1.3, 1.0) * 75e6
    a = mode * np.exp(rng.normal(0, noise, n))
    b = mode * effect * np.exp(rng.normal(0, noise, n))
    spikes = rng.random(n) < 0.1  # a pair straddling a mode switch
    b[spikes] *= 1.3
    return a, b


def judged(a, b, threshold=1.0):
    c = st.compare_paired("w", "throughput", a, b, True)
    st.judge([c], threshold)
    return c


def test_aa_is_never_go_or_no_go_in_nearly_every_trial():
    verdicts = [judged(*paired_runs(30, 1.0, seed)).verdict for seed in range(200)]
    false_calls = sum(v in (st.GO, st.NO_GO) for v in verdicts)
    assert false_calls <= 10  # alpha is 5 %, and the threshold must also be passed
    assert st.INCONCLUSIVE in verdicts  # 30 noisy pairs often cannot bound it within 1 %
    quiet = [judged(*paired_runs(60, 1.0, s, noise=0.002)).verdict for s in range(20)]
    assert quiet.count(st.NEUTRAL) >= 19  # quiet pairs bound the change within 1 %


def test_a_wide_ci_is_inconclusive_never_neutral():
    # p >= alpha and the estimate inside the threshold, but the CI reaches past it
    assert st.verdict(1.002, 0.98, 1.03, 0.6) == st.INCONCLUSIVE
    assert st.verdict(1.002, 0.995, 1.006, 0.6) == st.NEUTRAL
    # significant, beyond the threshold, but the CI still holds 1: not decided
    assert st.verdict(0.97, 0.95, 1.01, 0.01) == st.INCONCLUSIVE


def test_known_slowdown_is_no_go_and_speedup_go():
    c = judged(*paired_runs(30, 0.95, 1))
    assert c.verdict == st.NO_GO
    assert c.ci_low <= 0.95 <= c.ci_high
    assert judged(*paired_runs(30, 1.05, 2)).verdict == st.GO


def test_significant_but_below_threshold_is_neutral():
    a, b = paired_runs(60, 0.995, 3, noise=0.001)
    c = judged(a, b, threshold=1.0)
    assert c.p_value < 0.05
    assert c.verdict == st.NEUTRAL


def test_lower_is_better_metric_direction():
    a = np.full(30, 1000.0)
    b = a * np.linspace(1.09, 1.11, 30)
    c = st.compare_paired("w", "maxrss_kb", a, b, False)
    st.judge([c])
    assert c.verdict == st.NO_GO
    c = st.compare_paired("w", "maxrss_kb", b, a, False)
    st.judge([c])
    assert c.verdict == st.GO


def test_identical_values_give_p_one():
    assert st.wilcoxon_p(np.ones(20)) == 1.0
    c = judged(np.full(20, 5.0), np.full(20, 5.0))
    assert c.ratio == 1.0 and c.verdict == st.NEUTRAL


def test_median_ci_order_statistics():
    x = np.arange(1, 31, dtype=float)  # n = 30: the classic interval is [x_10, x_21]
    med, lo, hi = st.median_ci(x)
    assert (med, lo, hi) == (15.5, 10.0, 21.0)
    med, lo, hi = st.median_ci([3.0, 1.0, 2.0])  # too few for 95 %: the full range
    assert (lo, hi) == (1.0, 3.0)
    assert all(math.isnan(v) for v in st.median_ci([]))


def test_median_ci_covers_at_the_stated_rate():
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        _, lo, hi = st.median_ci(rng.standard_cauchy(25))
        covered += lo <= 0.0 <= hi
    assert covered / 400 >= 0.93


def test_holm_adjustment():
    assert st.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert st.holm([0.5]) == [0.5]
    adjusted = st.holm([0.2, float("nan"), 0.01])
    assert adjusted[0] == pytest.approx(0.2) and math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.02)


def test_holm_turns_a_marginal_result_inconclusive_across_workloads():
    comps = []
    for w in ("x", "y", "z"):
        c = st.Comparison(w, "throughput", 1, 1, 0.97, 0.95, 0.99, 0.03, 30, True)
        comps.append(c)
    st.judge(comps)
    assert all(c.p_holm == pytest.approx(0.09) for c in comps)
    assert all(c.verdict == st.INCONCLUSIVE for c in comps)
    st.judge(comps[:1])
    assert comps[0].verdict == st.NO_GO


def test_paired_ratios_drop_nonpositive_and_keep_zero_zero():
    r = st.paired_ratios([1, 0, 0, 2], [2, 0, 5, 0])
    assert sorted(r) == [1.0, 2.0]


def test_exact_verdict_for_instruction_counts():
    assert st.exact_verdict(0.98, higher_is_better=False) == st.GO
    assert st.exact_verdict(1.02, higher_is_better=False) == st.NO_GO
    assert st.exact_verdict(1.005, higher_is_better=False) == st.NEUTRAL


def _runs(n, bad=(), status="failed", error="killed by signal 6 (SIGABRT)"):
    return [
        {"seq": i, "status": status if i in bad else "ok", "error": error if i in bad else None}
        for i in range(n)
    ]


def test_a_side_that_fails_makes_the_verdict_failed_whatever_the_survivors_say():
    from hakbench.stats.stats import FAILED, failures

    clean = failures(_runs(30), _runs(30))
    assert clean.verdict is None and clean.note == ""
    # B aborts in a third of its runs: FAILED, with the counts per side and the first error
    third = failures(_runs(30), _runs(30, bad=range(0, 30, 3)))
    assert third.verdict == FAILED
    assert third.note == "A 0/30 failed, B 10/30 failed; first: killed by signal 6 (SIGABRT)"
    # a single timeout on one side is enough
    one = failures(_runs(30, bad={7}, status="timeout", error="timed out after 120 s"), _runs(30))
    assert one.verdict == FAILED and "A 1/30 failed, B 0/30" in one.note
    # the same failures on both sides: judged on the complete pairs, and said so
    both = failures(_runs(30, bad={4}), _runs(30, bad={9}))
    assert both.verdict is None and both.note.startswith("the same failures on both sides")
    # as many failures, but of other kinds, are not the same failure
    mixed = failures(_runs(30, bad={4}), _runs(30, bad={9}, status="wrong_checksum"))
    assert mixed.verdict == FAILED


@pytest.mark.slow
def test_fixed_count_neutral_is_controlled_across_the_workloads_of_a_call():
    """The family-wise false-NEUTRAL rate of a fixed-count call: every one of k = 8
    workloads truly changed by exactly the threshold (the hardest case for NEUTRAL). Judged
    alone, each ends NEUTRAL in up to 2.5 % of calls, so the call has a false NEUTRAL
    somewhere far more often; judged together (Bonferroni, ``equivalence_ci``), the call's
    rate stays within alpha / 2, as one workload's does."""
    k, calls, n = 8, 400, 40
    rng = np.random.default_rng(7)
    alone = together = 0
    for _ in range(calls):
        group = []
        for w in range(k):
            a = 75e6 * np.exp(rng.normal(0, 0.004, n))
            b = a * 1.01 * np.exp(rng.standard_t(3, n) * 0.004)  # heavy tails, median 1.01
            group.append(st.compare_paired(f"w{w}", "throughput", a, b, True))
        alone += any(
            st.verdict(c.ratio, c.ci_low, c.ci_high, c.p_value, threshold_pct=1.0) == st.NEUTRAL
            for c in group
        )
        st.judge(group, 1.0)
        together += any(c.verdict == st.NEUTRAL for c in group)
    assert alone / calls > 0.06  # uncorrected: the call's false NEUTRALs add up
    assert together / calls <= st.ALPHA / 2 + 0.01  # held (Monte Carlo slack of ~2 SE)
    # the verdict's interval is the one NEUTRAL was judged on, wider than the 95 % CI
    c = next(c for c in group if c.verdict not in (st.GO, st.NO_GO))
    assert c.decide_low <= c.ci_low and c.decide_high >= c.ci_high
    assert "Bonferroni across the 8 workloads" in st.neutral_correction(8, sequential=False)
    assert "one workload" in st.neutral_correction(1, sequential=False)
