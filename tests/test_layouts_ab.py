"""``ab --layouts K`` and ``calibrate --layouts K`` end to end on a real libhakmem build
copied into a tmp lab: samples carry their layouts, the fixed count is judged with the
layout spread in, the sequential rule too, the report and summary.csv show the spread, a
reference allocator is refused, a resumed run draws the same layouts, two binaries in one
layout each are said to be uncontrolled; calibrate --layouts writes its record and resumes."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.engine.schedule import complete_pairs
from hakbench.experiments import ab_plan
from hakbench.experiments import calibrate_layouts as callay
from hakbench.experiments.ab import run_ab
from hakbench.experiments.ab_spec import ABSpec
from hakbench.stats import stats as st
from hakbench.stats.layouts import layout_ci

BUILD = Path(__file__).resolve().parents[1] / "build"

pytestmark = [
    pytest.mark.skipif(not (BUILD / "fast" / "libhakmem.so").exists(), reason="make build first"),
    pytest.mark.xdist_group("layouts"),
]


@pytest.fixture
def lab(hakmem_lab):
    return hakmem_lab


def spec(**kw) -> ABSpec:
    base = dict(
        workloads=("hot",), pairs=8, warmup_pairs=1, perf="off", observe=False, seed=7, layouts=2
    )
    return ABSpec(**{**base, **kw})


def measured(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    return [s for s in rows if s["phase"] == "measure"]


def test_fixed_count_stores_layouts_and_widens_the_interval(lab):
    result = run_ab(spec(), lab / "run", show_progress=False)
    samples = measured(lab / "run")
    assert len(samples) == 16
    for side in "AB":  # each side ran both of its layouts, balanced per block of 4 pairs
        got = [s["layout"] for s in samples if s["side"] == side]
        assert sorted(got) == [0] * 4 + [1] * 4
    libs = {s["layout"]: s["cell"] for s in samples}
    assert libs[0] != libs[1]  # a layout is another cell (its own library)
    c = result.primary()[0]
    pairs = complete_pairs(samples, "hot")
    ratios = [b["metrics"][c.metric] / a["metrics"][c.metric] for a, b in pairs]
    _, plain_lo, plain_hi = st.median_ci(ratios)
    assert c.ci_low <= plain_lo and c.ci_high >= plain_hi  # the hull: never bolder
    layouts = ([a["layout"] for a, _ in pairs], [b["layout"] for _, b in pairs])
    _, lo, hi = layout_ci(ratios, *layouts, ratios=True, k_a=2, k_b=2)
    assert (c.ci_low, c.ci_high) == pytest.approx((lo, hi))  # judged on layout_ci
    _, re_lo, re_hi = layout_ci(ratios, *layouts, 0.999, ratios=True, k_a=2, k_b=2)
    _, p_lo, p_hi = st.median_ci(ratios, 0.999)
    assert re_hi - re_lo > p_hi - p_lo  # and it widens (t with ~2 df at 99.9 %)
    rows = csv.DictReader(open(lab / "run" / "summary.csv"))
    row = next(r for r in rows if r["metric"] == c.metric)  # the judged metric's row
    assert row["layouts"] == "2/2" and row["layout_spread"] not in ("", "nan")
    report = (lab / "run" / "report.md").read_text()
    assert "## Code layouts" in report and "layout spread" in report


def test_sequential_judges_the_layout_look(lab):
    result = run_ab(
        spec(pairs=None, max_time_s=2.0, threshold_pct=0.5), lab / "seq", show_progress=False
    )
    c = result.primary()[0]
    lay = result.layouts["hot"]
    assert c.stop in ("decided", "budget", "drift", "load spike", "layout-limited")
    assert {s["layout"] for s in measured(lab / "seq")} == {0, 1}
    bounded = 0 < c.decide_low and math.isfinite(c.decide_high)  # (a stop may come earlier)
    if lay.report.spread.complete and c.n_pairs >= 12 and bounded:  # the look has the spread
        assert math.log(c.decide_low) <= lay.report.spread.estimate <= math.log(c.decide_high)
    assert "## Code layouts" in (lab / "seq" / "report.md").read_text()


def test_reference_allocator_is_refused_in_one_line(lab):
    for args in (["-a", "mimalloc"], ["--baseline-allocator", "system"]):
        r = CliRunner().invoke(main, ["ab", "--layouts", "2", "-w", "hot", "--runs", "6", *args])
        assert r.exit_code == 2, r.output
        assert "no code layouts" in r.output and len(r.output.strip().splitlines()) == 1


def test_resume_draws_the_same_layouts(lab):
    out = lab / "res"
    run_ab(spec(pairs=6), out, show_progress=False)
    lines = (out / "samples.jsonl").read_text().splitlines()
    cut = 5  # the last 5 samples "never ran"
    lost = [json.loads(x) for x in lines[-cut:]]
    (out / "samples.jsonl").write_text("\n".join(lines[:-cut]) + "\n")
    meta = json.loads((out / "meta.json").read_text())
    meta["finished"] = False
    (out / "meta.json").write_text(json.dumps(meta))
    again = ab_plan.resume_spec(out)
    assert again.layouts == 2
    run_ab(again, out, show_progress=False, resume=True)
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len(lines)
    key = ("phase", "round", "side", "layout", "cell")
    assert sorted(tuple(s[k] for k in key) for s in rows[-cut:]) == sorted(
        tuple(s[k] for k in key) for s in lost
    )


def test_two_binaries_in_one_layout_are_uncontrolled_and_in_k_layouts_each_their_own(lab):
    one = run_ab(
        spec(layouts=1, pairs=3, baseline_variant="secure"), lab / "one", show_progress=False
    )
    assert "not controlled" in one.layout_note
    assert "code layout is not controlled" in (lab / "one" / "report.md").read_text()
    two = run_ab(spec(pairs=4, baseline_variant="secure"), lab / "two", show_progress=False)
    assert two.layout_note == ""
    cells = {(s["side"], s["layout"]): s["cell"] for s in measured(lab / "two")}
    assert len(set(cells.values())) == 4  # A's two layouts of secure, B's two of fast


def calibrate(*args):
    return CliRunner().invoke(main, ["calibrate", *args])


def test_layouts_records_the_spread_per_workload(lab):
    out = lab / "cal"
    r = calibrate("--layouts", "2", "-w", "hot", "-n", "12", "--warmup", "0", "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "layouts.json").read_text())
    e = doc["workloads"]["hot"]
    assert doc["layouts"] == 2 and e["pairs"] == 12
    assert e["layout_spread"] is not None and e["layout_spread"] >= 0
    assert len(e["effects"]) == 2 and set(e["floor"]) == {"4", "8"}
    mine = callay.machine_path(doc["fingerprint"])
    assert str(mine).startswith(str(lab)) and json.loads(mine.read_text()) == doc
    samples = [json.loads(x) for x in (out / "ab" / "samples.jsonl").read_text().splitlines()]
    assert {s["layout"] for s in samples if s["phase"] == "measure"} == {0, 1}
    assert "layout spread" in (out / "report.md").read_text()


def test_resume_finishes_the_same_pairs(lab):
    out = lab / "cal"
    r = calibrate("--layouts", "2", "-w", "hot", "-n", "8", "--warmup", "0", "--out", str(out))
    assert r.exit_code == 0, r.output
    path = out / "ab" / "samples.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-6]) + "\n")  # as if killed 3 pairs before the end
    meta = json.loads((out / "ab" / "meta.json").read_text())
    meta["finished"] = False
    (out / "ab" / "meta.json").write_text(json.dumps(meta))
    r = calibrate("--resume", str(out))
    assert r.exit_code == 0, r.output
    assert len(path.read_text().splitlines()) == len(lines)
    assert json.loads((out / "layouts.json").read_text())["workloads"]["hot"]["pairs"] == 8


def test_layouts_refuses_a_reference_allocator(lab):
    r = calibrate("--layouts", "2", "-a", "system", "-w", "hot")
    assert r.exit_code == 2 and "no code layouts" in r.output


def test_continue_keeps_drawing_layouts(lab):
    out = lab / "cont"
    # a budget short of 12 pairs per layout: with that many the first call may already stop
    # layout-limited (make test's load made it so in three fresh clones), which no
    # continuation extends
    first = run_ab(spec(pairs=None, max_time_s=0.2, threshold_pct=0.1), out, show_progress=False)
    assert first.primary()[0].stop != "layout-limited"
    # the new budget counts the first call's pairs too: a loaded machine can spend more than
    # 1 s on them (make test did once), so it gives a second past what the first one took
    again = ab_plan.resume_spec(out, max_time_s=first.pairs_seconds + 1.0)
    assert again.layouts == 2 and again.seed == first.spec.seed
    second = run_ab(again, out, show_progress=False, continued=True)
    assert second.primary()[0].n_pairs > first.primary()[0].n_pairs
    rows = measured(out)
    by_round = {(s["round"], s["side"]): s["layout"] for s in rows}
    draws = ab_plan.LayoutDraws(again, {"hot": {"A": [0, 1], "B": [0, 1]}})
    assert all(by_round[(r, side)] == draws.of("hot", r)["AB".index(side)] for r, side in by_round)


def test_two_binaries_get_layouts_by_default_and_one_binary_none(lab):
    """Between two builds (here two variants; two revisions alike) the default is
    DEFAULT_BUILD_LAYOUTS layouts a side: a verdict between builds includes where their
    code landed. An A/A of one build has nothing to relayout."""
    from hakbench.experiments.ab_spec import DEFAULT_BUILD_LAYOUTS

    builds = run_ab(
        spec(layouts=None, pairs=2, warmup_pairs=0, baseline_variant="secure"),
        lab / "builds",
        show_progress=False,
    )
    assert builds.spec.layouts == DEFAULT_BUILD_LAYOUTS and builds.layout_note == ""
    meta = json.loads((lab / "builds" / "meta.json").read_text())
    assert meta["spec"]["layouts"] == DEFAULT_BUILD_LAYOUTS
    same = run_ab(spec(layouts=None, pairs=2, warmup_pairs=0), lab / "same", show_progress=False)
    assert same.spec.layouts == 1


def test_only_more_layouts_could_decide_stops_the_call_layout_limited():
    """Two codes whose 4 layouts a side differ by +-2 % and no real change, threshold 0.5 %:
    no number of pairs can decide, so the rule stops as soon as every layout has its pairs
    (before issue 42 it spent the whole budget on them)."""
    import numpy as np

    from hakbench.stats.stopper import LAYOUT_LIMITED_PAIRS, Stopper

    rng = np.random.default_rng(3)
    effect_a, effect_b = (0.02 * rng.uniform(-1, 1, 4) for _ in range(2))
    rule = Stopper({"w": True}, 0.5, max_time_s=math.inf, max_pairs=4000, layouts=(4, 4))
    from hakbench.engine.layouts import draw_layouts

    draws = draw_layouts(4, 4, 5)
    while rule.running():
        for _ in range(16):
            a, b = next(draws)
            x = effect_b[b] - effect_a[a] + 0.01 * rng.standard_normal()
            rule.add("w", float(x), layouts=(a, b))
        rule.end_round()
    s = rule.stops["w"]
    assert s.reason == "layout-limited" and s.verdict == st.INCONCLUSIVE, (s.reason, s.verdict)
    assert 4 * LAYOUT_LIMITED_PAIRS <= len(s.logs) < 1000  # every layout of a side has its pairs
    assert s.more_layouts
