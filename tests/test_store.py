"""samples.jsonl durability, the tidy table, and pyperf files that pyperf itself accepts."""

import json
import subprocess
import sys

import pyperf

from hakbench.engine.pyperf_export import export_ab
from hakbench.engine.store import RunStore, load_samples, tidy


def sample(side, pair, tp, status="ok", workload="w", rss=4000):
    return {
        "side": side,
        "pair": pair,
        "round": pair,
        "phase": "measure",
        "workload": workload,
        "cell": f"cell-{side}",
        "allocator": "system",
        "status": status,
        "metrics": {"throughput": tp, "maxrss_kb": rss, "majflt": 0} if status == "ok" else {},
    }


def test_append_gives_seq_and_survives_a_torn_last_line(tmp_path):
    store = RunStore(tmp_path / "run")
    store.append(sample("A", 0, 100))
    store.append(sample("B", 0, 110))
    with open(store.samples_path, "a") as f:
        f.write('{"side": "A", "pa')  # the process that was interrupted mid-write
    got = load_samples(tmp_path / "run")
    assert [s["seq"] for s in got] == [0, 1]
    assert got[0]["run_id"] == "run"
    reopened = RunStore(tmp_path / "run")
    assert reopened.append(sample("A", 1, 100))["seq"] == 3  # never reuses a seq


def test_tidy_one_row_per_sample_and_metric():
    df = tidy([sample("A", 0, 100), sample("B", 0, 110)])
    assert len(df) == 6
    assert set(df.metric) == {"throughput", "maxrss_kb", "majflt"}
    assert df[(df.side == "B") & (df.metric == "throughput")].value.item() == 110


def test_pyperf_equal_counts_positive_values_and_compare_to(tmp_path):
    samples = []
    for pair in range(6):
        samples += [
            sample("A", pair, 100 + pair, rss=4000 + pair),
            sample("B", pair, 90 + pair, rss=4100 - pair),
        ]
    samples[5]["status"] = "failed"  # pair 2, side B: the whole pair must go
    paths = export_ab(samples, tmp_path / "pyperf")
    a = pyperf.BenchmarkSuite.load(str(tmp_path / "pyperf/w/a.json"))
    b = pyperf.BenchmarkSuite.load(str(tmp_path / "pyperf/w/b.json"))
    assert len(paths) == 2
    names = set(a.get_benchmark_names())
    assert names == {"w/seconds_per_op", "w/maxrss_kb"}  # majflt is 0: pyperf cannot hold it
    for name in names:
        assert a.get_benchmark(name).get_nvalue() == b.get_benchmark(name).get_nvalue() == 5
    assert a.get_benchmark("w/maxrss_kb").get_unit() == "byte"
    assert a.get_benchmark("w/seconds_per_op").get_values()[0] == 1 / 100
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyperf",
            "compare_to",
            str(tmp_path / "pyperf/w/a.json"),
            str(tmp_path / "pyperf/w/b.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    # (pyperf prints ERROR for a metric whose values are all equal: zero variance)
    assert "slower" in r.stdout and "ERROR" not in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "pyperf", "stats", str(tmp_path / "pyperf/w/b.json")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_meta_written_as_json(tmp_path):
    store = RunStore(tmp_path)
    store.write_meta({"command": "hakbench ab", "git": {"commit": None}})
    assert json.loads((tmp_path / "meta.json").read_text())["command"] == "hakbench ab"
