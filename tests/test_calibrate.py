"""Calibration math on synthetic pairs, the noise warning, and the command end to end."""

import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import meta
from hakbench.engine.schedule import complete_pairs
from hakbench.experiments import calibrate as cal
from hakbench.experiments import calibration as noise
from hakbench.stats import stats as st
from hakbench.tables import calibration as calibration_table


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


def test_summary_rates_with_wilson_intervals_and_smallest_effects():
    rng = np.random.default_rng(1)
    sigma, pairs = 0.02, 30
    trials = (
        synthetic_trials(rng, "A/A", 0.0, 0.0, sigma, 40, pairs)
        + synthetic_trials(rng, "K=0.1", 0.1, 0.3, sigma, 20, pairs)
        + synthetic_trials(rng, "K=0.5", 0.5, 2.0, sigma, 20, pairs)
        + synthetic_trials(rng, "K=1.25", 1.25, 5.0, sigma, 20, pairs)
    )
    s = calibration_table.summarize(trials, runs=pairs, threshold_pct=1.0)
    by = {c["condition"]: c for c in s["conditions"]}
    assert list(by) == ["A/A", "K=0.1", "K=0.5", "K=1.25"]
    # Wilcoxon at alpha 0.05 plus the threshold rule: few A/A trials may pass
    assert s["false_positive_rate"] <= 0.1
    assert by["A/A"]["trials"] == 40 and by["A/A"]["pairs"] == 40 * pairs
    # the pooled paired median recovers the injected slowdown
    assert by["K=0.5"]["effect_pct"] == pytest.approx(2.0, abs=0.3)
    assert by["K=1.25"]["effect_pct"] == pytest.approx(5.0, abs=0.3)
    # the rates are counts of trials, each with its Wilson interval around it
    for c in by.values():
        low, high = c["detection_ci95"]
        assert low <= c["detection_rate"] <= high
        assert c["detection_rate"] * c["trials"] == pytest.approx(
            c["no_go"] + (c["go"] if c["extra_work"] == 0 else 0)
        )
    assert by["K=1.25"]["detection_rate"] == 1.0  # 5 % is far above the noise of 30 pairs
    # 0.3 % is under the 1 % threshold: rarely detected, and too small for 30 pairs to resolve
    assert by["K=0.1"]["detection_rate"] <= 0.1 and by["K=0.1"]["resolution_rate"] < 0.8
    # resolution ignores the threshold, so it is never below detection
    assert all(c["resolution_rate"] >= c["detection_rate"] for c in by.values() if c["extra_work"])
    assert s["smallest_detected_pct"] == by["K=0.5"]["effect_pct"]
    assert s["noise_floor_pct"] == by["K=0.5"]["effect_pct"]
    # the noise estimate is the per-pair log-ratio SD (the modes cancel within a pair)
    assert s["noise_log_sd"] == pytest.approx(sigma, rel=0.15)


def test_condition_table_is_a_dataframe_of_trials():
    rng = np.random.default_rng(3)
    trials = synthetic_trials(rng, "A/A", 0.0, 0.0, 0.01, 3, 12) + synthetic_trials(
        rng, "K=2", 2.0, 8.0, 0.01, 2, 12
    )
    table = calibration_table.condition_table(trials)
    assert list(table["condition"]) == ["A/A", "K=2"]
    assert list(table["trials"]) == [3, 2] and list(table["pairs"]) == [36, 24]
    assert list(table["detected"]) == [0, 2]


def test_wilson_ci_matches_the_research_note():
    low, high = st.wilson_ci(1, 30)  # 1/30 = 3.3 % (95 % CI 0.6-17), docs/measuring.md
    assert (round(100 * low, 1), round(100 * high)) == (0.6, 17)
    assert st.wilson_ci(0, 0)[0] != st.wilson_ci(0, 0)[0]  # nan


def test_calibrate_defaults_to_abs_pair_count():
    from hakbench.experiments.ab_spec import DEFAULT_PAIRS

    assert cal.DEFAULT_RUNS == DEFAULT_PAIRS


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


def calibration(conditions, runs=100, floor=None):
    return noise.Calibration(
        {
            "runs": runs,
            "trials": 10,
            "date": "2026-11-23",
            "conditions": conditions,
            "noise_floor_pct": floor,
            "machine": {"hostname": "lab"},
        },
        noise.reference_path(),
        own=False,
    )


def condition(k, effect, hits, trials=10):
    rate = hits / trials
    return {
        "extra_work": k,
        "effect_pct": effect,
        "trials": trials,
        "resolution_rate": rate,
        "resolution_ci95": list(st.wilson_ci(hits, trials)),
    }


def test_noise_warning_only_when_larger_effects_are_missed(scratch_root):
    assert noise.load_calibration() is None
    assert noise.noise_warning(1.0, 100) is None  # never calibrated: nothing to say
    # a quiet machine: 0.5 % is often missed, but it is below the threshold; 1 % and 2 % seen
    quiet = calibration(
        [condition(0.125, 0.5, 4), condition(0.25, 1.0, 10), condition(0.5, 2.0, 10)], floor=1.0
    )
    assert noise.noise_warning(1.0, 100, quiet) is None  # ab's defaults do not warn
    # at 20 pairs the 0.5 % slowdown is as visible as 1.1 %: above a 1 % threshold, and missed
    w = noise.noise_warning(1.0, 20, quiet)
    assert w and "0.50 % slowdown at 100 pairs" in w and "as visible as 1.12 % at 20 pairs" in w
    assert "--runs 100 for 1 %" in w and "at least 2.2 %" in w
    assert "the lab machine's reference (lab) calibration of 2026-11-23" in w
    # a noisy machine: 2 % resolved 3 times in 10 (Wilson interval below 80 %) warns at 100
    noisy = calibration(
        [condition(0.25, 1.0, 1), condition(0.5, 2.0, 3), condition(1.25, 5.0, 10)], floor=5.0
    )
    w = noise.noise_warning(1.0, 100, noisy)
    assert w and "2.00 % slowdown" in w and "30 % of 10 trials" in w and "--runs 2500" in w
    assert noise.noise_warning(6.0, 100, noisy) is None  # a threshold above the missed effects
    # 7 of 10 is short of 80 %, but its interval reaches it: not evidence enough to warn
    unsure = calibration([condition(0.5, 2.0, 7)])
    assert noise.noise_warning(1.0, 100, unsure) is None
    # nothing resolved at all (a busy machine): the warning says so instead of a pair count
    busy = calibration([condition(0.5, 1.1, 0), condition(1.25, 3.0, 2)])
    w = noise.noise_warning(1.0, 100, busy)
    assert "3.00 % slowdown at 100 pairs was resolved in only 20 % of 10 trials" in w
    assert "no injected effect was resolved" in w and "--runs" not in w


def test_noise_warning_compares_the_metric_ab_judges(scratch_root):
    from hakbench.experiments.ab_plan import noise_warning_for
    from hakbench.experiments.ab_spec import ABSpec

    missed = [condition(0.5, 2.0, 3), condition(1.25, 5.0, 10)]
    cpu = calibration(missed, floor=5.0)
    cpu.data["metric"] = "cpu_throughput"
    w = noise.noise_warning(1.0, 100, cpu, metrics={"cpu_throughput"})
    assert w and "below the noise floor of cpu_throughput" in w
    assert noise.noise_warning(1.0, 100, cpu, metrics={"throughput"}) is None
    old = calibration(missed, floor=5.0)  # written before a calibration said: throughput
    assert "noise floor of throughput" in noise.noise_warning(1.0, 100, old, metrics={"throughput"})
    assert noise.noise_warning(1.0, 100, old, metrics={"cpu_throughput"}) is None
    # what ab asks: a fixed count judged on CPU time (the default) is warned from a
    # calibration of CPU time, one judged on wall clock is not, nor a sequential A/B
    own = noise.machine_path()
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps({**cpu.data, "date": "2026-11-26"}))
    assert "noise floor of cpu_throughput" in noise_warning_for(ABSpec(pairs=100))
    assert noise_warning_for(ABSpec(pairs=100, metric="throughput")) is None
    assert noise_warning_for(ABSpec()) is None
    # a workload of several threads is judged on throughput: this calibration is not about it
    assert noise_warning_for(ABSpec(pairs=100, workloads=("mid_large_mt",))) is None
    assert "(pairs judged on cpu_throughput)" in noise.calibration_line({"cpu_throughput"})
    line = noise.calibration_line({"throughput"})
    assert "Noise check: none" in line and "measured cpu_throughput" in line


def test_the_committed_reference_does_not_warn_about_abs_defaults(scratch_root, repo_root):
    ref = noise.Calibration(
        json.loads((repo_root / noise.reference_path().relative_to(scratch_root)).read_text()),
        noise.reference_path(),
        own=False,
    )
    assert ref.data["format"] == calibration_table.FORMAT
    assert noise.noise_warning(st.DEFAULT_THRESHOLD_PCT, cal.DEFAULT_RUNS, ref) is None


def test_own_machine_calibration_wins_over_the_reference(scratch_root):
    ref = noise.reference_path()
    ref.parent.mkdir(parents=True)
    lab = {"runs": 30, "trials": 12, "date": "2026-11-22", "machine": {"hostname": "lab"}}
    ref.write_text(json.dumps({**lab, "conditions": [condition(0.5, 2.0, 9)]}))
    assert "the lab machine's reference (lab)" in noise.calibration_line()
    own = noise.machine_path()
    assert "runs/calibration" in str(own) and meta.fingerprint() in str(own)
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps({"runs": 100, "trials": 10, "date": "2026-11-23", "conditions": []}))
    assert noise.load_calibration().own
    assert (
        "this machine's calibration of 2026-11-23: 100 pairs x 10 trials"
        in noise.calibration_line()
    )
    assert meta.fingerprint() == meta.fingerprint(meta.machine())
    assert meta.fingerprint({**meta.machine(), "cpu_count": 64}) != meta.fingerprint()
    # a calibration of the old format (an analytic floor, no rates) is named, not half-read
    own.write_text(json.dumps({"runs": 30, "noise_log_sd": 0.05, "mde_pct": 2.0}))
    with pytest.raises(UsageError, match="not a calibration this hakbench reads"):
        noise.load_calibration()


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
        "smallest_detected_pct",
        "noise_floor_pct",
        "runs",
        "workload",
        "machine",
        "fingerprint",
        "date",
        "load_avg_1min",
    ):
        assert key in c, key
    assert c["runs"] == 6 and c["workload"] == "mixed" and c["trials"] == 1
    # judged on what a default ab judges mixed on: CPU time of the timed loop
    assert c["metric"] == "cpu_throughput"
    assert "judged on `cpu_throughput`" in (out / "report.md").read_text()
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    for t in map(json.loads, (out / "trials.jsonl").read_text().splitlines()):
        pairs = complete_pairs([x for x in samples if x["trial"] == t["trial"]], "mixed")
        logs = [math.log(y["metrics"][c["metric"]] / x["metrics"][c["metric"]]) for x, y in pairs]
        assert t["log_ratios"] == pytest.approx(logs)  # the trial judged those ratios
    assert not c["interrupted"] and c["trials_done"] == 2
    assert set(c["machine"]) >= {"hostname", "cpu", "kernel"}
    assert [x["condition"] for x in c["conditions"]] == ["A/A", "K=2.5"]
    assert all(x["pairs"] == 6 for x in c["conditions"])  # every sample succeeded
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2
    assert (out / "report.md").read_text().startswith("# Calibration")
    # the machine's own copy, where ab reads it; nothing tracked is written
    used = noise.load_calibration()
    assert used.own and used.data == c and used.path == noise.machine_path()
    assert not noise.reference_path().exists()


def test_ctrl_c_keeps_the_finished_trials_and_exits_130(scratch_root):
    if not paths.bench_binary("bench_random_mixed").exists():
        pytest.skip("harness not built")
    out = scratch_root / "cal"
    argv = [sys.executable, "-m", "hakbench", "calibrate", "-a", "system", "--runs", "6"]
    argv += ["--warmup", "0", "--trials", "50", "-k", "2.5", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trials = out / "trials.jsonl"
    deadline = time.monotonic() + 60
    while not (trials.exists() and trials.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    c = json.loads((out / "calibration.json").read_text())
    kept = len(trials.read_text().splitlines())
    assert c["interrupted"] and 1 <= c["trials_done"] == kept < 100
    assert "**Interrupted**" in (out / "report.md").read_text()
    assert not noise.machine_path().exists()  # a partial calibration is not the machine's


def test_corrupt_trials_line_is_named(tmp_path):
    from hakbench.engine.store import read_jsonl

    f = tmp_path / "trials.jsonl"
    f.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(UsageError, match=r"trials.jsonl:2: corrupt JSON line"):
        read_jsonl(f)


def test_calibrate_rejects_a_workload_without_extra_work(scratch_root):
    r = CliRunner().invoke(main, ["calibrate", "-a", "system", "-w", "tiny_hot"])
    assert r.exit_code == 2
    assert "--extra-work" in r.output
