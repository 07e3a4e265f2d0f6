"""calibrate --sequential: the stopping loop on simulated pairs (verdicts, budgets, failed
pairs), the per-condition summary, and one short real run."""

import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.experiments import calibrate_sequential as cs


def pairs(effect_pct: float, sd: float, seed: int, failed_every: int = 0):
    """Endless simulated (A, B) throughputs: B slower by ``effect_pct``; t-distributed
    (3 degrees of freedom) log noise, heavy-tailed like this VM's pairs."""
    rng = random.Random(seed)
    i = 0
    while True:
        i += 1
        if failed_every and i % failed_every == 0:
            yield None
            continue
        z = rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3)
        yield (1e7, 1e7 / (1 + effect_pct / 100) * math.exp(sd * z))


class Clock:
    """A clock that advances by ``step`` seconds at every reading (one reading per pair)."""

    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_a_clear_slowdown_stops_early_with_no_go():
    r = cs.sequential_trial(pairs(5.0, 0.01, 1), threshold_pct=1.0, max_pairs=2000)
    assert r["verdict"] == "NO-GO"
    assert r["n_pairs"] < 200  # stopped as soon as it was decided, far inside the budget
    assert r["high"] < -math.log1p(0.005)  # the interval lies beyond half the threshold


def test_aa_ends_neutral_and_a_change_never_ends_on_the_wrong_side():
    r = cs.sequential_trial(pairs(0.0, 0.005, 2), threshold_pct=1.0)
    assert r["verdict"] == "NEUTRAL"
    wrong = [
        cs.sequential_trial(pairs(1.5, 0.01, s), threshold_pct=1.0, max_pairs=500)["verdict"]
        for s in range(20)
    ]
    assert "GO" not in wrong and "NEUTRAL" not in wrong


def test_the_time_budget_ends_it_inconclusive():
    clock = Clock(0.5)  # each pair "takes" 0.5 s
    r = cs.sequential_trial(
        pairs(0.0, 0.2, 3), threshold_pct=1.0, max_time_s=10.0, max_pairs=10**6, clock=clock
    )
    assert r["verdict"] == "INCONCLUSIVE"
    assert r["n_pairs"] <= 21 and r["seconds"] >= 10.0
    r = cs.sequential_trial(pairs(0.0, 0.2, 3), threshold_pct=1.0, max_pairs=50)
    assert r["verdict"] == "INCONCLUSIVE" and r["n_pairs"] == 50


def test_failed_pairs_are_counted_and_left_out():
    r = cs.sequential_trial(pairs(5.0, 0.01, 4, failed_every=4), threshold_pct=1.0)
    assert r["verdict"] == "NO-GO" and r["failed"] > 0
    assert len(r["log_ratios"]) == r["n_pairs"]


def trial(condition, verdict, seconds, n=10, logs=(-0.017,)):
    k, t, ka = cs.parse_condition(condition)
    return cs.SeqTrial(condition, k, t, 0, verdict, n, seconds, 0.0, 0.0, 0.0, 0, list(logs), ka)


def test_summary_rates_and_times():
    ts = [trial("0@1", "NEUTRAL", s, logs=(0.0,)) for s in (1, 2, 3, 4)]
    ts += [trial("0@1", "NO-GO", 5, logs=(0.0,))]
    ts += [trial("2@1", "NO-GO", s) for s in range(1, 11)]
    ts += [trial("1:1@1", "NEUTRAL", 3, logs=(0.0,))]  # KA = K: an A/A too
    rows = {r["condition"]: r for r in cs.summarize(ts)}
    assert rows["1:1@1"]["rate_name"] == "false GO/NO-GO"
    aa, k = rows["0@1"], rows["2@1"]
    assert aa["rate_name"] == "false GO/NO-GO" and aa["rate"] == pytest.approx(0.2)
    assert aa["verdicts"] == {"GO": 0, "NO-GO": 1, "NEUTRAL": 4, "INCONCLUSIVE": 0}
    assert k["rate"] == 1.0 and k["seconds_median"] == 5.5 and k["seconds_p90"] == 9.1
    assert k["effect_pct"] == pytest.approx(100 * (math.exp(0.017) - 1), abs=1e-3)
    text = "\n".join(cs.report_lines(list(rows.values()), max_time_s=60, max_pairs=2000))
    assert "| 2@1 | 1.72 % | 10 | 0 | 10 | 0 | 0 | NO-GO 100 %" in text
    assert aa["pair_spread"] is None  # one pair a trial: no spread


def test_summary_pair_spread_is_the_median_trials_robust_sd():
    noisy = [0.0, 0.02, -0.02, 0.04, -0.04, 0.01, -0.01]
    quiet = [x / 4 for x in noisy]
    ts = [trial("0@1", "NEUTRAL", 1, logs=logs) for logs in (noisy, quiet, quiet)]
    (row,) = cs.summarize(ts)
    assert row["pair_spread"] == pytest.approx(1.4826 * 0.005, abs=1e-4)
    # a constant shift of a trial (its effect) is not spread
    ts = [trial("2@1", "NO-GO", 1, logs=[x - 0.02 for x in noisy])]
    assert cs.summarize(ts)[0]["pair_spread"] == pytest.approx(1.4826 * 0.02, abs=1e-4)
    text = "\n".join(cs.report_lines(cs.summarize(ts), max_time_s=60, max_pairs=2000))
    assert text.splitlines()[4].endswith("| 3.0 % |")


def test_conditions_are_checked():
    assert cs.parse_condition("1@0.5") == (1, 0.5, 0)
    assert cs.parse_condition("1:3@0.5") == (3, 0.5, 1)
    for bad in ("1", "x@1", "-1@1", "1@0", "1:2:3@1", "-1:1@1", "0.5@1"):
        with pytest.raises(UsageError):
            cs.parse_condition(bad)


def test_sequential_calibration_real_run(tmp_path, bench_dir):
    if not (bench_dir / "bench_random_mixed").exists():
        pytest.skip("harness not built")
    out = tmp_path / "seq"
    r = CliRunner().invoke(
        main,
        [
            "calibrate", "--sequential", "-a", "system", "-w", "mixed_short",
            "--condition", "0@1", "--condition", "5000@1", "--trials", "1", "--max-time", "2",
            "--warmup", "1", "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "sequential.json").read_text())
    rows = {c["condition"]: c for c in doc["conditions"]}
    assert set(rows) == {"0@1", "5000@1"}
    for c in rows.values():
        assert c["trials"] == 1 and sum(c["verdicts"].values()) == 1
        assert 0 < c["seconds_median"] < 10 and c["pairs_median"] >= 1
    assert rows["5000@1"]["effect_pct"] > rows["0@1"]["effect_pct"]  # real injected work
    lines = (out / "trials.jsonl").read_text().splitlines()
    assert len(lines) == 2
    for t in map(json.loads, lines):  # each trial is a whole default ab, kept
        assert (Path(t["out"]) / "report.md").exists() and "Sequential:" in Path(
            t["out"], "report.md"
        ).read_text()
        assert t["call_seconds"] >= t["seconds"] > 0
    assert "Load: other processes used" in (out / "report.md").read_text()
    bad = CliRunner().invoke(main, ["calibrate", "--sequential", "--condition", "1"])
    assert bad.exit_code == 2 and "K@THRESHOLD" in bad.output
