"""Run length for speed to a decision: the choice on synthetic noise/cost tables, the pairs
the sequential rule needs checked against simulation, and a short real run."""

import dataclasses
import json
import math
import random

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.profiles import resolve_workload
from hakbench.experiments import calibration
from hakbench.experiments import runlength as rl
from hakbench.stats import sequential as seq


def test_pairs_needed_grows_with_the_square_of_spread_over_threshold():
    n1 = rl.pairs_needed(0.01, 1.0)
    n2 = rl.pairs_needed(0.02, 1.0)
    assert 3 < n2 / n1 < 5  # ~4: the square of the spread (the boundary's shape moves it a little)
    assert rl.pairs_needed(0.02, 2.0) == pytest.approx(n1, rel=0.05)  # only spread/threshold
    # the smallest n: one pair fewer is not enough
    target = math.log1p(0.01) / 2
    assert rl.half_width(0.01, n1) <= target < rl.half_width(0.01, n1 - 1)
    assert rl.pairs_needed(0.0, 1.0) == 1
    assert rl.pairs_needed(math.nan, 1.0) is None
    assert rl.pairs_needed(10.0, 0.01) is None  # beyond MAX_PAIRS


def test_at_pairs_needed_the_sequence_is_about_half_the_threshold_wide():
    """Simulated normal pairs of the spread: the real confidence sequence after
    pairs_needed(spread) pairs has a half-width close to half the threshold."""
    spread, threshold = 0.015, 1.0
    n = rl.pairs_needed(spread, threshold)
    rng = random.Random(7)
    widths = []
    for _ in range(200):
        lo, hi = seq.one_sided_cs([rng.gauss(0, spread) for _ in range(n)])
        widths.append((hi - lo) / 2)
    widths.sort()
    median_width = widths[len(widths) // 2]
    assert median_width == pytest.approx(math.log1p(threshold / 100) / 2, rel=0.2)


def point(iters, spread, cost, failed=0):
    return {"iters": iters, "spread": spread, "seconds_per_pair": cost, "failed": failed}


def test_choose_trades_noise_against_cost():
    # start-up dominates short runs: 1/8 is cheap but noisy, 1x quiet but 8x dearer
    table = [
        point(125_000, 0.060, 0.020),
        point(250_000, 0.030, 0.030),
        point(500_000, 0.025, 0.050),
        point(1_000_000, 0.022, 0.090),
    ]
    best = rl.choose(table, 1.0)
    assert best["iters"] == 250_000
    by_iters = {p["iters"]: p["expected_s"] for p in table}
    assert by_iters[250_000] == min(by_iters.values())
    assert all(p["pairs_needed"] for p in table)
    # pure noise floor (spread does not fall with length): the shortest run wins
    flat = [point(i, 0.02, 0.01 + i / 1e7) for i in (125_000, 250_000, 1_000_000)]
    assert rl.choose(flat, 1.0)["iters"] == 125_000
    # a run length that costs nothing more: the quietest wins
    free = [point(i, 0.02 * math.sqrt(1e6 / i), 0.05) for i in (250_000, 1_000_000)]
    assert rl.choose(free, 1.0)["iters"] == 1_000_000
    # a count with failed runs is never chosen; no usable count gives None
    failing = [point(125_000, 0.001, 0.01, failed=2), point(1_000_000, 0.02, 0.1)]
    assert rl.choose(failing, 1.0)["iters"] == 1_000_000
    assert rl.choose([point(1, math.nan, 0.1)], 1.0) is None


def test_counts_and_with_iterations():
    w = resolve_workload("mixed")
    assert rl.counts(w) == [125_000, 250_000, 500_000, 1_000_000]
    short = rl.with_iterations(w, 250_000)
    assert rl.iterations(short) == 250_000
    assert [a for a in short.args if a != "250000"] == [a for a in w.args if a != "1000000"]
    with pytest.raises(Exception, match="iters_flag"):
        rl.iterations(resolve_workload("soak"))


def _doc(workload, chosen, args=None):
    return {
        "date": "2026-11-23T09:00:00+00:00",
        "workloads": {
            workload.name: {
                "workload": workload.name,
                "argv_base": list(args or workload.args),
                "chosen_iters": chosen,
            }
        },
    }


def test_chosen_iterations_prefers_this_machine_and_checks_the_arguments(tmp_path, monkeypatch):
    mine, ref = tmp_path / "mine" / rl.FILE, tmp_path / "ref" / rl.FILE
    monkeypatch.setattr(rl, "machine_path", lambda fp=None: mine)
    monkeypatch.setattr(rl, "reference_path", lambda: ref)
    w = resolve_workload("mixed")
    assert rl.chosen_iterations(w) is None
    ref.parent.mkdir()
    ref.write_text(json.dumps(_doc(w, 500_000)))
    iters, source = rl.chosen_iterations("mixed")
    assert iters == 500_000 and "the reference" in source
    mine.parent.mkdir()
    mine.write_text(json.dumps(_doc(w, 250_000)))
    iters, source = rl.chosen_iterations(w)
    assert iters == 250_000 and "this machine's" in source and "2026-11-23" in source
    # workloads.toml changed the workload since: this machine's figures no longer apply
    changed = dataclasses.replace(w, args=tuple(a if a != "400" else "500" for a in w.args))
    assert rl.chosen_iterations(changed) is None


def test_run_length_real_run_on_two_counts(tmp_path, monkeypatch, bench_dir):
    if not (bench_dir / "bench_random_mixed").exists():
        pytest.skip("harness not built")
    mine = tmp_path / "machine" / rl.FILE
    monkeypatch.setattr(rl, "machine_path", lambda fp=None: mine)
    # (the record is written beside this machine's calibration: calibration.write_record)
    monkeypatch.setattr(calibration, "machine_path", lambda fp=None: mine.with_name("latest.json"))
    out = tmp_path / "run"
    r = CliRunner().invoke(
        main,
        [
            "calibrate",
            "--run-length",
            "-a",
            "system",
            "-w",
            "mixed",
            "--fraction",
            "0.0625",
            "--fraction",
            "0.5",
            "-n",
            "8",
            "--warmup",
            "1",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((out / rl.FILE).read_text())
    entry = doc["workloads"]["mixed"]
    assert [p["iters"] for p in entry["points"]] == [62_500, 500_000]
    assert entry["metric"] == "cpu_throughput"  # the spread of what a default ab judges
    for p in entry["points"]:
        assert p["pairs"] == 8 and p["failed"] == 0
        assert p["spread"] > 0 and p["seconds_per_pair"] > 0 and p["pairs_needed"] > 0
    # eight times the iterations cost more per pair (the work is real); the choice is the
    # minimum
    a, b = entry["points"]
    assert b["seconds_per_pair"] > a["seconds_per_pair"]
    best = min(entry["points"], key=lambda p: (p["expected_s"], -p["iters"]))
    assert entry["chosen_iters"] == best["iters"]
    assert json.loads(mine.read_text()) == doc  # this machine's copy, read by ab
    assert rl.chosen_iterations("mixed")[0] == best["iters"]
    assert "Load: other processes used" in (out / "report.md").read_text()
    assert doc["load"]["available"]


def test_run_length_bad_input_exits_2():
    r = CliRunner().invoke(main, ["calibrate", "--run-length", "-w", "soak"])
    assert r.exit_code == 2 and "iters_flag" in r.output
    r = CliRunner().invoke(main, ["calibrate", "-w", "mixed", "-w", "tiny_hot"])
    assert r.exit_code == 2 and "one workload" in r.output
