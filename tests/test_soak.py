"""hakbench soak (issue #7): the figures on synthetic series, the parsers on captured text,
and real soaks of build/bench/bench_soak: end to end, an injected leak, a crash, Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.experiments import soak, soak_figures, soak_plan, soak_process
from hakbench.report.soak import cv_noise_note, verdict_lines
from hakbench.stats import soakstats

BENCH_SOAK = paths.bench_binary(soak_plan.SOAK_PROGRAM)
needs_bench_soak = pytest.mark.skipif(
    not BENCH_SOAK.exists(), reason=f"{BENCH_SOAK} not built (make harness)"
)
# Every end-to-end soak here uses these, so the leak run and the clean run are the same run
# but for the leak.
SHORT_SOAK = ["--duration", "8s", "--epoch", "0.5s", "--warmup-epochs", "2"]


def hakbench(*args: str):
    """The real CLI, in this process (a fresh interpreter costs seconds on a busy VM)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ---- figures on synthetic series ----


def test_drift_compares_medians_of_the_first_and_last_tenth():
    flat_then_up = [100.0] * 10 + [110.0] * 10
    # 20 values: windows of 2; first median 100, last 110.
    assert soakstats.drift_pct(flat_then_up) == pytest.approx(10.0)
    # One fat epoch at the end moves a median of a window of 3 not at all.
    series = [100.0] * 27 + [100.0, 100.0, 500.0]
    assert soakstats.drift_pct(series) == pytest.approx(0.0)
    assert soakstats.drift_pct([200.0, 150.0]) == pytest.approx(-25.0)


def test_drift_without_enough_data_is_none_not_zero():
    assert soakstats.drift_pct([]) is None
    assert soakstats.drift_pct([5.0]) is None
    assert soakstats.drift_pct([0.0, 5.0]) is None


def test_slope_is_least_squares_per_hour():
    t = [0.0, 10.0, 20.0, 30.0]
    rss = [1000.0 + 2.0 * x for x in t]  # 2 KiB per second
    assert soakstats.slope_per_hour(t, rss) == pytest.approx(7200.0)
    # Endpoints alone would say 1 KiB/s; the least-squares fit over all four says 0.7.
    noisy = [1000.0, 1030.0, 1010.0, 1030.0]
    assert soakstats.slope_per_hour(t, noisy) == pytest.approx(0.7 * 3600)
    assert soakstats.slope_per_hour([5.0, 5.0], [1.0, 2.0]) is None
    assert soakstats.slope_per_hour([1.0], [1.0]) is None


def test_a_trend_below_the_resolution_floor_passes():
    rising = {"pct_per_h": 125.0, "ci": [21.0, 230.0]}  # glibc, +12 KiB over an 8 s soak
    assert soakstats.trend_verdict(rising, 5.0, rising=True) == "FAIL"
    assert soakstats.trend_verdict(rising, 5.0, rising=True, resolved=False) == "PASS"
    assert soak_plan.Thresholds().rss_min_growth_kib >= 256
    assert soak_plan.Thresholds().cv_pct is None  # the CV is reported, judged only when asked


def test_cv_is_sample_stdev_over_mean():
    assert soakstats.cv_pct([100.0, 100.0, 100.0]) == 0.0
    # mean 100, sample stdev sqrt(200/1)=14.142...
    assert soakstats.cv_pct([90.0, 110.0]) == pytest.approx(14.1421356, rel=1e-6)
    assert soakstats.cv_pct([1.0]) is None


def test_verdicts_bound_in_the_right_direction():
    assert soakstats.verdict(5.0, 5.0, upper=True) == "PASS"
    assert soakstats.verdict(5.1, 5.0, upper=True) == "FAIL"
    assert soakstats.verdict(-5.1, -5.0, upper=False) == "FAIL"
    assert soakstats.verdict(30.0, -5.0, upper=False) == "PASS"
    assert soakstats.verdict(None, 5.0, upper=True) == "n/a"


def _figure(label, profile, cv, verdict):
    return {
        "label": label,
        "profile": profile,
        "rss_trend_pct_per_h": 0.3,
        "rss_trend_ci95": [-0.1, 0.7],
        "rss_drift_pct": 0.05,
        "rss_drift_pct_per_h": 0.35,
        "ops_trend_pct_per_h": -1.25,
        "ops_trend_ci95": [-3.0, 0.5],
        "ops_drift_pct": -0.2,
        "ops_drift_pct_per_h": -1.5,
        "ops_cv_pct": cv,
        "syscalls_per_kop": 0.0123,
        "syscalls_source": "strace -f -c pass",
        "verdicts": {
            "rss_trend": "PASS",
            "ops_trend": "PASS",
            "ops_cv": verdict,
            "syscalls": "PASS",
        },
    }


def test_verdict_lines_state_figure_ci_verdict_and_budget():
    fig = _figure("hakmem:fast C7_SAFE", "C7_SAFE", 3.0, "FAIL")
    th = vars(soak_plan.Thresholds(cv_pct=2.0))
    lines = verdict_lines(fig, th)
    assert lines[0] == (
        "RSS trend: +0.3 %/h (95 % CI -0.1 to +0.7) PASS (budget ≤ +5.0 %/h; "
        "edge drift +0.1 % = +0.3 %/h)"
    )
    assert lines[1].startswith(
        "ops/s trend: -1.2 %/h (95 % CI -3.0 to +0.5) PASS (budget ≥ -5.0 %/h"
    )
    assert lines[2] == "ops/s CV: 3.0 % FAIL (limit ≤ 2.0 %)"
    assert lines[3] == "syscalls: 0.0123 per 1000 ops PASS (budget ≤ 1; strace -f -c pass)"
    fig = {**fig, "ops_cv_pct": None, "verdicts": {**fig["verdicts"], "ops_cv": "n/a"}}
    assert verdict_lines(fig, th)[2] == "ops/s CV: n/a (too few epochs after warm-up)"
    by_default = verdict_lines({**fig, "ops_cv_pct": 3.0}, vars(soak_plan.Thresholds()))
    assert by_default[2] == "ops/s CV: 3.0 % (reported, not judged)"


def _leaking(duration_s, epoch_s, kib_per_s, base_kib=20_000, noise_kib=8, seed=0):
    """RSS of a process leaking ``kib_per_s`` with allocator jitter, one value per epoch."""
    rng = random.Random(seed)
    t = [epoch_s * (i + 1) for i in range(int(duration_s / epoch_s))]
    return t, [base_kib + kib_per_s * x + rng.gauss(0, noise_kib) for x in t]


def test_the_same_leak_fails_a_short_soak_and_a_long_one_alike():
    # 2 KiB/s on 20 MiB is ~36 %/h: far over a 5 %/h budget, whatever the soak's length
    for duration_s, epoch_s in ((20, 0.5), (600, 10), (4 * 3600, 10)):
        t, rss = _leaking(duration_s, epoch_s, 2.0)
        trend = soakstats.trend_pct_per_hour(t, rss)
        assert trend["pct_per_h"] == pytest.approx(36.0, rel=0.25), duration_s
        assert soakstats.trend_verdict(trend, 5.0, rising=True) == "FAIL", duration_s
        drift = soakstats.drift_pct_per_hour(t, rss)
        assert drift == pytest.approx(36.0, rel=0.3), duration_s
    # the old figure, drift in % over the whole soak, says 0.2 % for 20 s and 144 % for 4 h
    short, long = _leaking(20, 0.5, 2.0, noise_kib=0), _leaking(4 * 3600, 10, 2.0, noise_kib=0)
    assert soakstats.drift_pct(short[1]) < 5 < soakstats.drift_pct(long[1])


def test_no_leak_passes_short_and_long_and_the_ci_covers_the_truth():
    covered = 0
    for seed in range(40):
        t, rss = _leaking(600, 10, 0.0, seed=seed)
        trend = soakstats.trend_pct_per_hour(t, rss)
        assert soakstats.trend_verdict(trend, 5.0, rising=True) == "PASS"
        low, high = trend["ci"]
        covered += low <= 0 <= high
    assert covered >= 34  # a 95 % interval: ~38 of 40
    t, rss = _leaking(20, 0.5, 0.0)
    assert soakstats.trend_verdict(soakstats.trend_pct_per_hour(t, rss), 5.0, rising=True) == "PASS"


def test_a_one_time_step_is_not_taken_for_a_leak():
    # the heap grows by one 64 KiB segment once, as bench_soak under libhakmem does at ~3 s
    t = [0.5 * i for i in range(3, 17)]
    rss = [3764.0] * 4 + [3828.0] * 10
    trend = soakstats.trend_pct_per_hour(t, rss)
    assert trend["pct_per_h"] > 500  # extrapolated, the step looks like a fast leak...
    assert trend["lag1_autocorrelation"] > 0.3  # ...but its residuals run in long blocks
    assert soakstats.trend_verdict(trend, 5.0, rising=True) == "PASS"
    # the same growth spread evenly over the epochs is a leak
    even = [3764.0 + 64 * i / 13 for i in range(14)]
    assert (
        soakstats.trend_verdict(soakstats.trend_pct_per_hour(t, even), 5.0, rising=True) == "FAIL"
    )


def test_a_slow_leak_under_budget_passes_and_a_decline_is_judged_downwards():
    t, rss = _leaking(3600, 10, 0.1, noise_kib=5)  # ~1.8 %/h: real but within 5 %/h
    trend = soakstats.trend_pct_per_hour(t, rss)
    assert trend["ci"][0] > 0 and soakstats.trend_verdict(trend, 5.0, rising=True) == "PASS"
    ops = [1e7 * (1 - 0.10 * x / 3600) for x in t]  # -10 %/h
    trend = soakstats.trend_pct_per_hour(t, ops)
    assert trend["pct_per_h"] == pytest.approx(-10.0, rel=0.01)
    assert soakstats.trend_verdict(trend, 5.0, rising=False) == "FAIL"
    assert soakstats.trend_verdict(trend, 5.0, rising=True) == "PASS"  # falling RSS is fine
    assert soakstats.trend_pct_per_hour([1.0, 2.0], [1.0, 2.0]) is None
    assert soakstats.trend_verdict(None, 5.0, rising=True) == "n/a"


def test_syscall_verdict_prefers_the_whole_soak_counters():
    strace = soak_process.budget_row("strace -f -c pass", {"mmap": 30}, 10_000)
    counters = soak_process.budget_row("libhakmem SS_OS_STATS counters", {"mmap": 5}, 1_000_000)
    assert soak_figures.judged_budget([strace, counters]) is counters
    assert soak_figures.judged_budget([strace]) is strace
    assert soak_figures.judged_budget([soak_process.budget_row("strace", {}, 0, "failed")]) is None


def test_cv_note_blames_the_machine_only_when_references_fail_too():
    hak = _figure("hakmem:fast C7_SAFE", "C7_SAFE", 9.0, "FAIL")
    ref_bad = _figure("system", None, 8.0, "FAIL")
    ref_ok = _figure("system", None, 1.0, "PASS")
    assert "machine noise" in cv_noise_note([hak, ref_bad])
    assert "does not explain" in cv_noise_note([hak, ref_ok])
    assert "No reference allocator" in cv_noise_note([hak])
    assert cv_noise_note([ref_ok]) is None


# ---- parsers on captured text ----


def test_durations():
    assert soak_plan.parse_duration("20s") == 20
    assert soak_plan.parse_duration("10m") == 600
    assert soak_plan.parse_duration("1h") == 3600
    assert soak_plan.parse_duration("0.5s") == 0.5
    assert soak_plan.parse_duration("90") == 90
    with pytest.raises(UsageError):
        soak_plan.parse_duration("ten minutes")
    assert soak_plan.plan_epochs(3600, 10) == (360, 10000)
    with pytest.raises(UsageError):
        soak_plan.plan_epochs(5, 10)


def test_proc_parsers_on_captured_text():
    status = "Name:\tbench_soak\nVmHWM:\t    7008 kB\nVmRSS:\t    6900 kB\nRssAnon:\t    4608 kB\n"
    assert soak_process.parse_proc_status(status) == {
        "rss_kb": 6900,
        "hwm_kb": 7008,
        "anon_kb": 4608,
    }
    # A command name with spaces and a ')' must not shift the fields.
    stat = "16138 (odd) name) R 16131 16131 5111 0 -1 4194304 99 0 7 0 0 0 0 0 20 0 1 0 61727"
    assert soak_process.parse_proc_stat(stat) == {"minflt": 99, "majflt": 7}
    me = soak_process.read_proc(os.getpid())
    assert me["rss_kb"] > 0 and me["minflt"] > 0


def test_strace_summary_parser_on_captured_text():
    text = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
  0.00    0.000000           0        18           mmap
  0.00    0.000000           0         1           munmap
 10.00    0.000010          10         3         1 madvise
  0.00    0.000000           0         1           brk
------ ----------- ----------- --------- --------- ----------------
100.00    0.000000           0        23         1 total
"""
    assert soak_process.parse_strace_summary(text) == {
        "mmap": 18,
        "munmap": 1,
        "madvise": 3,
        "brk": 1,
    }


def test_bad_input_exits_2():
    r = hakbench("soak", "--allocator", "nosuch", "--duration", "1s", "--epoch", "1s")
    assert r.exit_code == 2, r.output
    r = hakbench("soak", "--allocator", "system", "--duration", "soon")
    assert r.exit_code == 2, r.output
    r = hakbench("soak", "--allocator", "system", "--workload", "mixed")
    assert r.exit_code == 2 and "bench_soak" in r.output
    r = hakbench("soak", "--allocator", "system", "--duration", "2s", "--epoch", "1s")
    assert r.exit_code == 2 and "--warmup-epochs" in r.output


# ---- real soaks ----


def _csv_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@needs_bench_soak
def test_soak_end_to_end_with_hakmem_and_glibc(tmp_path):
    out = tmp_path / "soak"
    r = hakbench(
        "soak", "--allocator", "hakmem", "--allocator", "system", "--profile", "LEGACY",
        *SHORT_SOAK, "--syscall-pass", "1s", "--out", str(out), "--report-only",
    )  # fmt: skip
    assert r.exit_code == 0, r.output  # ops/s on this VM may FAIL its budgets: only report
    summary = json.loads((out / "summary.json").read_text())
    runs = {f["allocator"]: f for f in summary["runs"]}
    assert set(runs) == {"hakmem:fast", "system"}
    for fig in runs.values():
        assert fig["status"] == "complete" and fig["epochs"] == 16
        # No leak: RSS stays put (the same run with a leak must FAIL, see below).
        assert fig["verdicts"]["rss_trend"] == "PASS", fig
        assert fig["verdicts"]["syscalls"] == "PASS", fig
        assert fig["rss_first_kb"] > 0 and fig["ops_s_median"] > 0
    assert runs["hakmem:fast"]["profile"] == "LEGACY"
    sources = [b["source"] for b in runs["hakmem:fast"]["syscall_budget"]]
    assert any("SS_OS_STATS" in s for s in sources) and any("strace" in s for s in sources)
    strace_row = runs["system"]["syscall_budget"][0]
    assert strace_row["mmap"] > 0 and 0 < strace_row["syscalls_per_op"] < 1e-3

    rows = _csv_rows(out / "epochs.csv")
    assert list(rows[0]) == list(soak_process.EPOCH_COLUMNS)
    assert len(rows) == 32
    assert all(int(row["rss_kb"]) > 0 for row in rows[:15])  # the kernel's view, read live
    assert [int(r["epoch"]) for r in rows if r["allocator"] == "system"] == list(range(1, 17))

    report = (out / "report.md").read_text()
    assert "RSS trend: +" in report or "RSS trend: -" in report
    assert "hakmem:fast LEGACY" in report and "![RSS and ops/s over time](soak.png)" in report
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads((out / "meta.json").read_text())
    assert "soak" in meta["command"] and meta["kind"] == "soak"
    assert meta["load"]["own_cores"] > 0 and "Load: other processes used" in report
    assert "hakbench soak system: 16 epochs of 500 ms" in r.stderr  # the progress bar
    assert "16/16" in r.stderr


@needs_bench_soak
def test_injected_leak_is_reported_as_rss_drift_fail(tmp_path):
    # 4 s leaking 8 MiB a second: the RSS grows as much as in an 8 s soak leaking 4 MiB a second
    out = tmp_path / "leak"
    r = hakbench(
        "soak", "--allocator", "system", "--duration", "4s", "--epoch", "0.5s",
        "--warmup-epochs", "2", "--inject-leak", "8192", "--syscall-pass", "0",
        "--out", str(out),
    )  # fmt: skip
    assert r.exit_code == 1, r.output  # a FAIL is exit 1 by default
    assert "FAIL (system: rss_trend" in r.output
    fig = json.loads((out / "summary.json").read_text())["runs"][0]
    assert fig["status"] == "complete"
    assert fig["verdicts"]["rss_trend"] == "FAIL"
    assert fig["rss_trend_pct_per_h"] > 1000 and fig["rss_trend_ci95"][0] > 5
    assert fig["rss_drift_pct"] > 50 and fig["rss_slope_kib_per_h"] > 3600 * 1024
    report = (out / "report.md").read_text()
    assert "RSS trend: +" in report and "FAIL" in report and "injected on purpose" in report
    # --report-only: the same FAIL, exit 0 (a shorter soak: a leak this large fails in 4 s)
    r = hakbench(
        "soak", "--allocator", "system", "--duration", "4s", "--epoch", "0.5s",
        "--warmup-epochs", "2", "--inject-leak", "4096", "--syscall-pass", "0",
        "--out", str(tmp_path / "reported"), "--report-only",
    )  # fmt: skip
    assert r.exit_code == 0 and re.search(r"RSS trend: \+.* FAIL", r.output), r.output


@needs_bench_soak
def test_crash_mid_soak_still_writes_a_report_naming_the_cause(tmp_path):
    targets = soak_plan.plan_targets(["system"], [], "soak")
    plan = soak_plan.SoakPlan(targets, epochs=50, epoch_ms=100, warmup_epochs=1, syscall_pass_s=0)

    def kill_after_third(run, row):
        if row["epoch"] == 3:
            os.kill(run.pid, signal.SIGKILL)

    out = tmp_path / "crash"
    session = soak.run_soak(plan, out, "test crash", on_epoch=kill_after_third)
    run = session.runs[0]
    assert run.status == "crashed" and 3 <= len(run.epochs) < 50
    report = (out / "report.md").read_text()
    assert "killed by SIGKILL" in report and "incomplete" in report
    assert len(_csv_rows(out / "epochs.csv")) == len(run.epochs)


@needs_bench_soak
def test_ctrl_c_writes_the_report_and_exits_130(tmp_path):
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hakbench", "soak", "--allocator", "system",
         "--allocator", "mimalloc", "--duration", "60s", "--epoch", "0.2s",
         "--syscall-pass", "0", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=paths.repo_root(),
    )  # fmt: skip
    # Wait for the first epoch's progress line, then interrupt the way a terminal would.
    for line in proc.stderr:
        if "1/300" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["skipped"] == ["mimalloc"]
    fig = summary["runs"][0]
    assert fig["status"] == "interrupted" and fig["epochs"] >= 2
    assert "Interrupted by Ctrl-C" in (out / "report.md").read_text()
