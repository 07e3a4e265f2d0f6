"""Every claim an A/B prints is the rule that decided (issue 42): Holm and NEUTRAL's
Bonferroni across the whole call whatever metric each workload is judged on, guardrails
judged (and printed) on the interval that decided them, the metric of each workload in the
rule text, drift and load spikes as stop reasons, ``--set`` values checked against the
options table's types, libhakmem's own warnings in the report, both revisions in the
header. Pure where the claim is arithmetic; the warnings come from a real libhakmem run."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.experiments.ab_analysis import allocator_warnings, analyse, judge_families
from hakbench.experiments.ab_spec import ABResult, ABSpec
from hakbench.report.ab_rule import direction_text, multiplicity_text, warning_lines
from hakbench.report.markdown import verdict_rows
from hakbench.stats import drift
from hakbench.stats import stats as st
from hakbench.stats.stopper import Stopper

BUILD = Path(__file__).resolve().parents[1] / "build"


def pair_samples(workload: str, metric: str, ratios, extra: dict | None = None) -> list[dict]:
    """The samples of complete pairs whose B/A of ``metric`` are ``ratios`` (A = 1000);
    ``extra``: other metrics with their own ratios."""
    out = []
    for i, r in enumerate(ratios):
        a = {metric: 1000.0, **{m: 1000.0 for m in extra or {}}}
        b = {metric: 1000.0 * r, **{m: 1000.0 * rs[i] for m, rs in (extra or {}).items()}}
        for side, metrics in (("A", a), ("B", b)):
            out.append(
                {
                    "workload": workload,
                    "phase": "measure",
                    "side": side,
                    "round": i,
                    "pair": i,
                    "status": "ok",
                    "metrics": metrics,
                }
            )
    return out


def slowdown(n: int, effect: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(effect + 0.01 * rng.standard_normal(n))


def test_holm_corrects_across_workloads_judged_on_different_metrics():
    """``ab --runs N -w mixed -w xthread``: mixed is judged on cpu_throughput, xthread on
    throughput; before issue 42 Holm ran per metric, so neither p was corrected."""
    spec = ABSpec(pairs=12, workloads=("mixed", "xthread"))
    samples = pair_samples("mixed", "cpu_throughput", slowdown(12, -0.03, 1))
    samples += pair_samples("xthread", "throughput", slowdown(12, -0.03, 2))
    comps, roles = analyse(samples, ["mixed", "xthread"], spec, {"xthread": "throughput"})
    primary = {
        c.workload: c
        for c in comps
        if roles.get((c.workload, c.metric), roles.get(c.metric)) == "primary"
    }
    assert set(primary) == {"mixed", "xthread"}
    ps = [primary[w].p_value for w in ("mixed", "xthread")]
    assert all(p < 0.05 for p in ps)
    assert [primary[w].p_holm for w in ("mixed", "xthread")] == pytest.approx(st.holm(ps))
    assert max(primary[w].p_holm for w in primary) == pytest.approx(2 * min(ps), rel=1e-9) or (
        max(p.p_holm for p in primary.values()) >= max(ps)
    )
    # and the report says the same: one family of 2 across the two metrics
    result = ABResult(Path("."), spec, {}, comps, roles, {}, [], [])
    text = multiplicity_text(result)
    assert "Bonferroni across the 2 workloads" in text
    assert "one family, though they are judged on 2 metrics (cpu_throughput, throughput)" in text
    direction = direction_text(result)
    assert (
        "higher cpu_throughput is better (ops per CPU second of the timed loop: mixed)" in direction
    )
    assert "higher throughput is better (wall clock of the timed loop: xthread)" in direction


def test_neutral_bonferroni_counts_every_workload_of_the_call():
    """A NEUTRAL in a call of 2 workloads on 2 metrics is judged on the CI at 1 - 0.05/2."""
    spec = ABSpec(pairs=60, workloads=("mixed", "xthread"))
    samples = pair_samples("mixed", "cpu_throughput", slowdown(60, 0.0, 3))
    samples += pair_samples("xthread", "throughput", slowdown(60, 0.0, 4))
    comps, roles = analyse(samples, ["mixed", "xthread"], spec, {"xthread": "throughput"})
    mixed = next(c for c in comps if c.workload == "mixed" and c.metric == "cpu_throughput")
    assert mixed.verdict == st.NEUTRAL
    assert (mixed.decide_low, mixed.decide_high) == pytest.approx(
        st.equivalence_ci(mixed.ratios, 2)
    )


def guarded_result(spec: ABSpec) -> ABResult:
    """Two workloads, each with a NEUTRAL-ish peak RSS guardrail beside its primary."""
    samples = []
    for i, w in enumerate(("mixed", "tiny_hot")):
        n = 80
        samples += pair_samples(
            w, "cpu_throughput", slowdown(n, 0.0, 10 + i), {"maxrss_kb": slowdown(n, 0.0, 20 + i)}
        )
    comps, roles = analyse(samples, ["mixed", "tiny_hot"], spec)
    return ABResult(
        Path("."),
        spec,
        {},
        comps,
        roles,
        {w: {"status": "n/a"} for w in ("mixed", "tiny_hot")},
        [],
        [],
    )


def test_guardrails_are_printed_with_the_interval_that_decided_them():
    result = guarded_result(ABSpec(pairs=80, workloads=("mixed", "tiny_hot")))
    guards = [c for c in result.comparisons if result.role(c) == "guardrail"]
    assert len(guards) == 2
    for g in guards:
        assert g.verdict == st.NEUTRAL
        # NEUTRAL of 2 guardrails: the CI at 1 - 0.05/2, wider than the 95 % one
        assert (g.decide_low, g.decide_high) == pytest.approx(st.equivalence_ci(g.ratios, 2))
        assert g.decide_low < g.ci_low and g.decide_high > g.ci_high
    rows = verdict_rows(result)
    for g, row in zip(guards, rows, strict=True):
        assert (
            f"maxrss_kb NEUTRAL ({g.ratio:.4f} [{g.decide_low:.4f}, {g.decide_high:.4f}])"
            in row[-1]
        )
    assert "the 2 guardrail comparisons of the call are one family" in multiplicity_text(result)


def test_sequential_guardrails_are_judged_on_a_confidence_sequence():
    """The number of pairs of a sequential call is chosen by its primary's stopping rule; a
    guardrail judged there on a fixed-n CI would not be valid at that stop. It is judged
    on the confidence sequence, which is (and is printed) wider."""
    result = guarded_result(ABSpec(workloads=("mixed", "tiny_hot")))  # sequential
    for g in (c for c in result.comparisons if result.role(c) == "guardrail"):
        _, lo95, hi95 = st.median_ci(g.ratios)
        assert g.ci_low < lo95 and g.ci_high > hi95
        assert g.decide_low is not None
        assert "confidence sequence" in multiplicity_text(result)
    fixed = guarded_result(ABSpec(pairs=80, workloads=("mixed", "tiny_hot")))
    seq_g = [c for c in result.comparisons if result.role(c) == "guardrail"]
    fix_g = [c for c in fixed.comparisons if fixed.role(c) == "guardrail"]
    assert all(s.decide_low < f.decide_low for s, f in zip(seq_g, fix_g, strict=True))


def test_judge_families_keeps_primaries_and_guardrails_apart():
    spec = ABSpec(pairs=12)
    a = st.compare_paired("w", "cpu_throughput", [1] * 12, list(slowdown(12, -0.03, 5)), True)
    g = st.compare_paired("w", "maxrss_kb", [1] * 12, list(slowdown(12, -0.03, 6)), False)
    judge_families([a, g], lambda c: "primary" if c is a else "guardrail", spec)
    assert a.p_holm == pytest.approx(a.p_value) and g.p_holm == pytest.approx(g.p_value)


def run_rounds(rule: Stopper, series, *, load=None, per_round: int = 4) -> None:
    """Feed ``series`` (log ratios, in order) to ``rule`` ``per_round`` pairs a round;
    ``load(i)``: the other processes' cores during round i (cumulative readings built from
    it, a round taking 0.25 s)."""
    t = cpu = 0.0
    for i in range(0, len(series), per_round):
        for x in series[i : i + per_round]:
            rule.add("w", float(x))
        reading = None
        if load is not None:
            t += 0.25
            cpu += 0.25 * load(i // per_round)
            reading = (t, cpu)
        if not rule.end_round(load=reading):
            return


def test_a_drift_stops_the_call_with_its_reason():
    """B/A is 1.00 for the first 200 pairs and 0.98 from then on (the effect moved during
    the call, as in a 2026-11-23 trial): the rule before issue 42 saw no disjoint looks and
    said NO-GO at ~330 pairs for a change the first 200 pairs did not have; now the rank
    correlation with the pair order stops it, reason drift."""
    rng = np.random.default_rng(0)
    n = 3000
    series = np.where(np.arange(n) < 200, 0.0, -0.02) + 0.03 * rng.standard_normal(n)
    rule = Stopper({"w": True}, 0.5, max_time_s=math.inf, max_pairs=n)
    run_rounds(rule, series)
    s = rule.stops["w"]
    assert s.reason == "drift" and s.verdict == st.INCONCLUSIVE, (s.reason, s.verdict)
    assert len(s.logs) < 400
    assert "Spearman" in s.note and s.pairs_needed is None


def test_a_load_spike_that_moves_the_ratio_stops_the_call_with_its_reason():
    """Rounds 40-90 run beside 1.6 cores of other load, and B/A is 3 % lower then (a change
    that depends on the load): the call stops, reason load spike, instead of NO-GO or
    running to the budget."""
    rng = np.random.default_rng(6)
    n = 2000
    rounds = np.arange(n) // 4
    spike = (rounds >= 40) & (rounds < 90)
    series = np.where(spike, -0.03, 0.0) + 0.02 * rng.standard_normal(n)
    rule = Stopper({"w": True}, 0.5, max_time_s=math.inf, max_pairs=n)
    run_rounds(rule, series, load=lambda r: 1.6 if 40 <= r < 90 else 0.1)
    s = rule.stops["w"]
    assert s.reason == "load spike" and s.verdict == st.INCONCLUSIVE, (s.reason, s.note)
    assert "1.6 cores" in s.note and "depends on the load" in s.note


def test_a_load_spike_that_moves_nothing_is_flagged_not_stopped():
    rng = np.random.default_rng(7)
    n = 3000
    series = 0.03 * rng.standard_normal(n)
    rule = Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=n)
    run_rounds(rule, series, load=lambda r: 1.6 if 10 <= r < 60 else 0.1)
    s = rule.stops["w"]
    assert s.verdict == st.NEUTRAL and s.reason == "decided", (s.verdict, len(s.logs))
    assert "load spike" in s.note and "moved neither" in s.note


def test_load_per_round_spans_a_second_of_readings():
    readings = [(0.25 * (i + 1), 0.25 * (i + 1) * (2.0 if i >= 8 else 0.5)) for i in range(12)]
    loads = drift.load_per_round(readings)
    assert math.isnan(loads[0])
    assert loads[3] == pytest.approx(0.5)  # readings 0..3 span 0.75 s: from the first


def test_set_of_a_bad_boolean_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "never"
    r = CliRunner().invoke(
        main, ["ab", "--set", "HAKMEM_SS_MEM_LEAN=banana", "-w", "mixed", "--out", str(out)]
    )
    assert r.exit_code == 2, r.output
    assert "HAKMEM_SS_MEM_LEAN=banana in --set: not a valid bool" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()
    # between revisions too, before any is built (or even looked up)
    args = ["ab", "--set", "HAKMEM_SS_MEM_LEAN=banana", "--rev", "no-such-rev-xyz"]
    r = CliRunner().invoke(main, [*args, "-w", "mixed", "--out", str(out)])
    assert r.exit_code == 2 and "not a valid bool" in r.output, r.output


@pytest.mark.parametrize(
    ("setting", "ok"),
    [
        ("HAKMEM_SS_MEM_LEAN=on", True),
        ("HAKMEM_SS_CACHE_SIZE=32MiB", True),
        ("HAKMEM_SS_CACHE_SIZE=1.5M", False),
        ("HAKMEM_SS_MEM_LEAN_TARGET_MB=0x10", True),
        ("HAKMEM_SS_MEM_LEAN_TARGET_MB=eight", False),
        ("HAKMEM_TINY_HEAP_PROFILE=c7_safe", True),
    ],
)
def test_set_values_are_checked_against_the_options_table_type(setting, ok):
    from hakbench.core.errors import UsageError
    from hakbench.core.profiles import parse_sets, validate_env
    from hakbench.engine.probes import load_options

    if not (BUILD / "bin" / "hakmem-options").exists():
        pytest.skip("make build first")
    if ok:
        validate_env(parse_sets([setting]), load_options(), "--set")
    else:
        with pytest.raises(UsageError, match="not a valid"):
            validate_env(parse_sets([setting]), load_options(), "--set")


@pytest.mark.skipif(not (BUILD / "fast" / "libhakmem.so").exists(), reason="make build first")
def test_the_allocators_own_warnings_reach_the_report():
    """What libhakmem writes to stderr when it refuses a value (a profile or a stray
    environment could still carry one) is collected per side and printed in the report."""
    env = {
        "PATH": os.environ["PATH"],
        "LD_PRELOAD": str(BUILD / "fast" / "libhakmem.so"),
        "HAKMEM_SS_MEM_LEAN": "banana",
    }
    argv = [str(BUILD / "bench" / "bench_random_mixed"), "--iters", "1000", "--seed", "1"]
    stderr = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30).stderr
    assert "banana" in stderr  # the real allocator's line
    samples = [
        {"side": "B", "phase": "measure", "stderr_tail": stderr},
        {"side": "B", "phase": "measure", "stderr_tail": stderr},
        {"side": "A", "phase": "measure", "stderr_tail": "Throughput = 1 ops/s\n"},
    ]
    found = allocator_warnings(samples)
    assert list(found) == ["B"] and len(found["B"]) == 1
    assert "HAKMEM_SS_MEM_LEAN=banana is not a valid bool" in found["B"][0]
    assert any("banana" in line for line in warning_lines(found))


def test_the_header_names_both_revisions():
    text = ABSpec(rev="HEAD", baseline_rev="HEAD~1").describe()
    assert text == "A = hakmem C7_SAFE @ HEAD~1, B = hakmem C7_SAFE @ HEAD"
    assert "@ the working tree" in ABSpec(baseline_rev="v1").describe()


def _fixed_samples(ratios) -> list[dict]:
    """The measured pairs of a fixed-count call of workload w: A at 1.0, B at each ratio."""
    out = []
    for i, r in enumerate(ratios):
        for side, value in (("A", 1.0), ("B", float(r))):
            metrics = {"cpu_throughput": value}
            out.append({"workload": "w", "phase": "measure", "round": i, "pair": 0,
                        "side": side, "status": "ok", "metrics": metrics})  # fmt: skip
    return out


def test_a_fixed_count_that_drifted_is_flagged_beside_its_verdict():
    """--runs N stops at N whatever the pairs do, so a drift cannot stop it; it is checked
    after the fact with the sequential rule's test and named beside the verdict, which the
    pairs' count decided as asked. Pairs that do not drift get no flag."""
    from hakbench.experiments.ab_analysis import _flag_drift

    rng = np.random.default_rng(3)
    n = 100
    drifting = np.exp(np.where(np.arange(n) < 50, 0.0, -0.03) + 0.01 * rng.standard_normal(n))
    steady = np.exp(-0.03 + 0.01 * rng.standard_normal(n))
    for ratios, flagged in ((drifting, True), (steady, False)):
        c = st.Comparison("w", "cpu_throughput", 1.0, 0.97, 0.97, 0.96, 0.98, 1e-6, n, True)
        c.verdict = st.NO_GO
        _flag_drift(c, _fixed_samples(ratios))
        assert ("Spearman" in getattr(c, "note", "")) is flagged, getattr(c, "note", "")
        assert c.verdict == st.NO_GO  # judged as asked
    # the report's "time, stop" column shows it
    from hakbench.report.markdown import stop_text

    _flag_drift(c, _fixed_samples(drifting))
    c.seconds = 1.0
    assert "Spearman" in stop_text(c) and "a fixed count" in stop_text(c)


def test_the_rule_says_what_active_throughput_is():
    # larson (8 threads and more) is judged on the median thread's rate, not on summed time
    c = st.Comparison("larson", "active_throughput", 1.0, 1.0, 1.0, 0.99, 1.01, 0.5, 40, True)
    result = ABResult(Path("."), ABSpec(), {}, [c], {"active_throughput": "primary"}, {}, [], [])
    assert direction_text(result) == (
        "higher active_throughput is better (ops per active second of the timed loop, the "
        "median thread's rate with 8 threads or more: larson)"
    )
