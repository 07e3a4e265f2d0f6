"""Calibration math on synthetic pairs, the noise warning, and the command end to end."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from hakbench import calibrate as cal
from hakbench import paths
from hakbench import stats as st
from hakbench.cli import main


def synthetic_trials(rng, condition, k, slowdown_pct, sigma, trials, pairs):
    """Pairs whose machine speed drifts a lot (shared by A and B) plus per-run noise."""
    out = []
    for i in range(trials):
        mode = rng.choice([1.0, 1 / 1.3], size=pairs)  # the VM's two speed modes
        a = 1e7 * mode * np.exp(rng.normal(0, sigma / math.sqrt(2), pairs))
        b = 1e7 * mode * np.exp(rng.normal(0, sigma / math.sqrt(2), pairs))
        b /= 1 + slowdown_pct / 100
        out.append(cal.judge_trial(condition, k, i, a, b, threshold_pct=1.0))
    return out


def test_trial_verdicts_follow_the_ab_rule():
    rng = np.random.default_rng(7)
    [same] = synthetic_trials(rng, "A/A", 0.0, 0.0, 0.0, 1, 30)
    assert same.verdict == st.NEUTRAL and same.ratio == 1.0
    [slow] = synthetic_trials(rng, "K=1.25", 1.25, 5.0, 0.01, 1, 30)
    assert slow.verdict == st.NO_GO
    assert slow.ratio == pytest.approx(1 / 1.05, rel=0.01)
    assert slow.n_pairs == 30 and len(slow.log_ratios) == 30


def test_summary_rates_effects_and_noise_floor():
    rng = np.random.default_rng(1)
    sigma, pairs = 0.02, 30
    trials = (
        synthetic_trials(rng, "A/A", 0.0, 0.0, sigma, 40, pairs)
        + synthetic_trials(rng, "K=0.5", 0.5, 2.0, sigma, 20, pairs)
        + synthetic_trials(rng, "K=1.25", 1.25, 5.0, sigma, 20, pairs)
    )
    s = cal.summarize(trials, runs=pairs, threshold_pct=1.0)
    by = {c["condition"]: c for c in s["conditions"]}
    assert list(by) == ["A/A", "K=0.5", "K=1.25"]
    # Wilcoxon at alpha 0.05 plus the threshold rule: few A/A trials may pass
    assert s["false_positive_rate"] <= 0.1
    assert by["A/A"]["trials"] == 40 and by["A/A"]["pairs"] == 40 * pairs
    # the pooled paired median recovers the injected slowdown
    assert by["K=0.5"]["effect_pct"] == pytest.approx(2.0, abs=0.3)
    assert by["K=1.25"]["effect_pct"] == pytest.approx(5.0, abs=0.3)
    assert by["K=1.25"]["rate"] == 1.0  # 5 % is far above the noise of 30 pairs
    assert by["K=0.5"]["research_effect_pct"] == 2.26
    # the noise estimate is the per-pair log-ratio SD (the modes cancel within a pair)
    assert s["noise_log_sd"] == pytest.approx(sigma, rel=0.15)
    assert s["mde_pct"] == pytest.approx(cal.mde_pct(s["noise_log_sd"], pairs), abs=1e-3)
    # 2 % is above the floor (~1.1 %), so the smallest effect found in >= 80 % of trials is it
    assert s["mde_pct"] < 2.0 and by["K=0.5"]["rate"] >= 0.8
    assert s["mde_empirical_pct"] == by["K=0.5"]["effect_pct"]


def test_mde_and_runs_needed_are_inverse():
    sigma = 0.05
    for n in (10, 30, 60, 200):
        mde = cal.mde_pct(sigma, n)
        assert cal.runs_needed(sigma, mde) in (n, n + 1)
    assert cal.mde_pct(sigma, 120) == pytest.approx(cal.mde_pct(sigma, 30) / 2, rel=0.02)
    assert math.isnan(cal.mde_pct(float("nan"), 30))
    assert cal.runs_needed(sigma, 0) is None


def test_wilson_ci_matches_the_research_note():
    low, high = cal.wilson_ci(1, 30)  # note: 1/30 = 3.3 % (95 % CI 0.6-17)
    assert (round(100 * low, 1), round(100 * high)) == (0.6, 17)
    assert cal.wilson_ci(0, 0)[0] != cal.wilson_ci(0, 0)[0]  # nan


def test_plan_interleaves_conditions_in_blocks():
    order = cal.plan((0.5, 1.25), trials=4, seed=3)
    assert len(order) == 12
    for block in range(4):
        assert sorted(k for k, _ in order[3 * block : 3 * block + 3]) == [0.0, 0.5, 1.25]


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """A lab root whose results/ is private to the test (profiles and build are the real ones)."""
    real = paths.repo_root()
    for name in ("profiles", "build", "Makefile"):
        (tmp_path / name).symlink_to(real / name)
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    return tmp_path


def test_noise_warning_suggests_a_run_count(scratch_root):
    assert cal.load_latest() is None
    assert cal.noise_warning(1.0, 30) is None  # never calibrated: nothing to say
    latest = cal.latest_path()
    latest.parent.mkdir(parents=True)
    latest.write_text(json.dumps({"noise_log_sd": 0.05, "date": "2026-11-22T12:00:00+00:00"}))
    floor_30 = cal.mde_pct(0.05, 30)
    warning = cal.noise_warning(1.0, 30)
    assert warning and f"{floor_30:.1f} %" in warning
    assert f"--runs {cal.runs_needed(0.05, 1.0)}" in warning
    assert cal.noise_warning(floor_30 + 0.1, 30) is None  # threshold above the floor
    assert cal.noise_warning(1.0, cal.runs_needed(0.05, 1.0)) is None


def test_calibrate_command_end_to_end(scratch_root):
    if not paths.bench_binary("bench_random_mixed").exists():
        pytest.skip("harness not built")
    out = scratch_root / "cal"
    args = ["calibrate", "-a", "system", "--runs", "6", "--warmup", "0", "--trials", "1"]
    r = CliRunner().invoke(main, [*args, "-k", "2.5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    c = json.loads((out / "calibration.json").read_text())
    for key in (
        "false_positive_rate",
        "mde_pct",
        "runs",
        "workload",
        "machine",
        "date",
        "load_avg_1min",
    ):
        assert key in c, key
    assert c["runs"] == 6 and c["workload"] == "mixed" and c["trials"] == 1
    assert set(c["machine"]) >= {"hostname", "cpu", "kernel"}
    assert [x["condition"] for x in c["conditions"]] == ["A/A", "K=2.5"]
    assert all(x["pairs"] == 6 for x in c["conditions"])  # every sample succeeded
    assert (out / "report.md").read_text().startswith("# Calibration")
    assert cal.load_latest() == c  # ab reads this copy


def test_calibrate_rejects_a_workload_without_extra_work(scratch_root):
    r = CliRunner().invoke(main, ["calibrate", "-a", "system", "-w", "tiny_hot"])
    assert r.exit_code == 2
    assert "--extra-work" in r.output
