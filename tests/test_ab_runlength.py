"""``ab --run-length auto``: the count a call's probe chooses follows the spread it measured
(synthetic probe pairs), the option's parsing, and on the real harness a probe stored in
meta.json that a resumed call runs without probing again."""

import json
import math
import random

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.core.profiles import resolve_workload
from hakbench.experiments import ab_runlength as arl
from hakbench.experiments.ab import run_ab
from hakbench.experiments.ab_spec import ABSpec

BASE = 1_000_000  # mixed's own count


def probe_samples(spread_of, cost_of, pairs=16, seed=3):
    """Probe pairs of ``mixed`` at every probed count: log B/A normal with the count's
    spread (no effect), each process costing half the pair's seconds."""
    rng = random.Random(seed)
    out = []
    for n in arl.probe_counts(BASE):
        for p in range(pairs):
            x = rng.gauss(0, spread_of[n])
            for side, v in (("A", 1e7), ("B", 1e7 * math.exp(x))):
                out.append(
                    {
                        "phase": arl.PHASE,
                        "workload": "mixed",
                        "side": side,
                        "pair": p,
                        "round": p + 1,
                        "status": "ok",
                        "probe_iters": n,
                        "cost_s": cost_of[n] / 2,
                        "metrics": {"cpu_throughput": v, "throughput": v},
                    }
                )
    return out


def cost(n):
    return 0.004 + 0.03 * n / BASE  # start-up plus the loop


def test_probe_counts_are_quarter_to_twice_the_count():
    assert arl.probe_counts(BASE) == [250_000, 500_000, 1_000_000, 2_000_000]
    assert arl.probe_counts(3) == [1, 2, 3, 6]


def test_a_large_spread_at_short_runs_picks_a_longer_one():
    w = resolve_workload("mixed")
    spec = ABSpec(threshold_pct=1.0)
    costs = {n: cost(n) for n in arl.probe_counts(BASE)}
    # short runs are very noisy here: the quiet full count wins although it costs more
    noisy_short = {250_000: 0.20, 500_000: 0.12, 1_000_000: 0.012, 2_000_000: 0.011}
    e = arl.choice("mixed", probe_samples(noisy_short, costs), BASE, spec, w)
    assert e["chosen_iters"] == 1_000_000 and e["metric"] == "cpu_throughput"
    by = {p["iters"]: p for p in e["points"]}
    assert by[250_000]["spread"] > 5 * by[1_000_000]["spread"]
    assert all(p["pairs"] == 16 and p["failed"] == 0 for p in e["points"])
    assert "1000000 iterations, chosen by this call's probe" in e["why"]
    assert "spread 1." in e["why"] and "at 1 %" in e["why"]
    # the same costs, the spread the same at every count: the cheapest (shortest) wins
    flat = dict.fromkeys(costs, 0.02)
    e = arl.choice("mixed", probe_samples(flat, costs), BASE, spec, w)
    assert e["chosen_iters"] == 250_000
    assert "at 1000000 (the count otherwise): spread" in e["why"]
    # quiet only when long: twice the count
    long_quiet = {250_000: 0.3, 500_000: 0.2, 1_000_000: 0.08, 2_000_000: 0.01}
    e = arl.choice("mixed", probe_samples(long_quiet, costs), BASE, spec, w)
    assert e["chosen_iters"] == 2_000_000
    # a threshold twice as wide needs fewer pairs (~a quarter; fewer at these small counts,
    # where the sequence's boundary is relatively wider): same choice, less time expected
    wide = arl.choice("mixed", probe_samples(long_quiet, costs), BASE, ABSpec(threshold_pct=2), w)
    assert wide["chosen_iters"] == 2_000_000
    narrow_s = {p["iters"]: p["expected_s"] for p in e["points"]}[2_000_000]
    wide_s = {p["iters"]: p["expected_s"] for p in wide["points"]}[2_000_000]
    assert 2 < narrow_s / wide_s < 5


def test_no_usable_count_keeps_the_calls_own():
    w = resolve_workload("mixed")
    costs = {n: cost(n) for n in arl.probe_counts(BASE)}
    samples = probe_samples(dict.fromkeys(costs, 0.02), costs)
    for s in samples:
        s["status"] = "failed"
    e = arl.choice("mixed", samples, BASE, ABSpec(), w)
    assert e["chosen_iters"] == BASE and "could not choose" in e["why"]


def test_parse_and_bad_input():
    assert arl.parse("auto") == ("auto", None)
    assert arl.parse("calibrated") == ("calibrated", None)
    assert arl.parse("5000") == ("calibrated", 5000)
    for bad in ("0", "fast", "-3"):
        with pytest.raises(UsageError, match="auto, calibrated or an iteration count"):
            arl.parse(bad)
    r = CliRunner().invoke(main, ["ab", "--run-length", "auto", "--iters", "5"])
    assert r.exit_code == 2 and "give one" in r.output
    r = CliRunner().invoke(main, ["ab", "--run-length", "7", "--iters", "5"])
    assert r.exit_code == 2 and "give one" in r.output


LAB = """\
[mixed_tiny]
program = "bench_random_mixed"
args = ["--min", "16", "--max", "1024", "--ws", "64", "--iters", "8000", "--seed", "42"]
iters_flag = "--iters"
"""


@pytest.fixture
def lab(tmp_path, make_lab, bench_dir):
    if not (bench_dir / "bench_random_mixed").exists():
        pytest.skip("harness not built")
    return make_lab(LAB)


def _samples(out):
    return [json.loads(x) for x in open(out / "samples.jsonl")]


def test_auto_probes_then_a_resume_runs_the_stored_choice(lab, monkeypatch):
    spec = ABSpec(
        allocator="system",
        workloads=("mixed_tiny",),
        pairs=4,
        warmup_pairs=1,
        perf="off",
        seed=11,
        run_length="auto",
    )
    out = lab / "run"
    result = run_ab(spec, out, show_progress=False)
    meta = json.loads((out / "meta.json").read_text())
    entry = meta["run_length_auto"]["mixed_tiny"]
    assert entry["base_iters"] == 8000 and entry["metric"] == "cpu_throughput"
    assert [p["iters"] for p in entry["points"]] == [2000, 4000, 8000, 16000]
    chosen = entry["chosen_iters"]
    assert meta["iterations"]["mixed_tiny"] == entry["why"] == result.iterations["mixed_tiny"]
    assert f"{chosen} iterations, chosen by this call's probe" in entry["why"]
    assert "chosen by this call's probe" in (out / "report.md").read_text()
    samples = _samples(out)
    probes = [s for s in samples if s["phase"] == arl.PHASE]
    assert {s["probe_iters"] for s in probes} == {2000, 4000, 8000, 16000}
    assert len(probes) == 2 * 4 * arl.PROBE_PAIRS or entry["probe_s"] >= arl.PROBE_MAX_S
    measured = [s for s in samples if s["phase"] == "measure"]
    assert len(measured) == 8 and result.primary()[0].n_pairs == 4  # probes judge nothing
    assert all(s["argv"][s["argv"].index("--iters") + 1] == str(chosen) for s in measured)

    # A resumed call runs the count meta.json holds and never probes again: store another
    # probed count as the choice, drop the measured pairs, resume.
    other = 16000 if chosen != 16000 else 2000
    entry["chosen_iters"] = other
    (out / "meta.json").write_text(json.dumps(meta))
    kept = [s for s in samples if s["phase"] != "measure"]
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in kept))

    def no_probe(*a, **k):
        raise AssertionError("a resumed call probed again")

    monkeypatch.setattr(arl, "probe", no_probe)
    resumed = run_ab(spec, out, show_progress=False, resume=True)
    after = _samples(out)
    assert len([s for s in after if s["phase"] == arl.PHASE]) == len(probes)
    measured = [s for s in after if s["phase"] == "measure"]
    assert len(measured) == 8 and resumed.primary()[0].n_pairs == 4
    assert all(s["argv"][s["argv"].index("--iters") + 1] == str(other) for s in measured)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["run_length_auto"]["mixed_tiny"]["chosen_iters"] == other
    assert meta["cells"]["mixed_tiny"]["B"]["argv"][-3] == str(other)
