"""The last commands brought under the engine: gate, hotspots and misuse.

The gate's exact counts run two at a time through ``Session.take_concurrent``; a real
SIGTERM or SIGKILL of `hakbench gate` while they run must keep every stored run and count,
and `gate --resume DIR` must measure only the rest and reach the verdict of an
uninterrupted run. A stopped `hotspots` records again on --resume, a finished one is
reported without recording again; a stopped or killed `misuse` run keeps its probes and
--resume completes it. Each --resume elsewhere (another machine or tree) is one line,
exit 2."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time

import pytest
from conftest import CHANCE, REPO_ROOT
from test_engine import _complete_lines, _hakbench, _refused_elsewhere

from hakbench.core import paths
from hakbench.engine import engine, interrupts, process
from hakbench.engine.store import RunStore, read_jsonl

needs_build = pytest.mark.skipif(
    not paths.bench_binary("bench_random_mixed").exists() or not paths.options_binary().exists(),
    reason="harness or hakmem not built",
)


# ---- take_concurrent, in this process ----


def _slot(name: str, run) -> tuple[dict, object]:
    return {"phase": "t", "cell": name}, run


def _quick(name: str):
    return lambda: {"status": "ok", "name": name}


def _sleeper() -> dict:
    """A real process the stop must end (its stopper registered from a worker thread)."""
    code, _, _ = process.run_captured(["sleep", "5"], dict(os.environ), 30)
    return {"status": "ok" if code == 0 else "failed"}


def test_concurrent_slots_keep_what_finished_and_a_stop_cuts_the_running_ones(tmp_path):
    slots = [_slot("q0", _quick("q0")), _slot("s1", _sleeper), _slot("s2", _sleeper)]
    slots.append(_slot("q3", _quick("q3")))
    session = engine.Session(RunStore(tmp_path, fresh=True))
    with interrupts.installed():
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(interrupts.Interrupted):
            session.take_concurrent(slots, jobs=2)
        # both sleepers were stopped at once, not waited for; q3 never started
        assert time.monotonic() - started < 3
    assert [s["cell"] for s in RunStore(tmp_path).samples()] == ["q0"]

    again = engine.Session(RunStore(tmp_path), stored=RunStore(tmp_path).samples())
    samples = again.take_concurrent([_slot(n, _quick(n)) for n in ("q0", "s1", "s2", "q3")], 2)
    assert [s["cell"] for s in samples] == ["q0", "s1", "s2", "q3"]
    assert (again.reused, again.ran) == (1, 3)
    stored = RunStore(tmp_path).samples()
    assert sorted(s["cell"] for s in stored) == ["q0", "q3", "s1", "s2"]
    assert [s["seq"] for s in stored] == [0, 1, 2, 3]


# ---- gate ----

GATE = ["gate", "-p", "C7_SAFE", "-w", "mixed", "-w", "tiny_hot", "-w", "c7_only"]
GATE += ["-w", "tiny_only"]
GATE_SLOTS = 4 * 3 + 4  # 3 native runs and one count per cell


def _gate_results(tmp_path):
    results = tmp_path / "results"
    (results / "scorecard").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "results" / "scorecard" / "gate.json", results / "scorecard")
    return results


def _counting(runs) -> bool:
    """A gate run has stored an exact count."""
    files = runs.glob("*/samples.jsonl")
    return any('"phase": "instructions"' in _complete_lines(f) for f in files)


@needs_build
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL],
    ids=lambda s: s.name,
)
def test_a_gate_stopped_among_its_counts_keeps_them_and_resume_passes(sig, scratch, tmp_path):
    results = _gate_results(tmp_path)
    baseline = (results / "scorecard" / "gate.json").read_text()
    proc = _hakbench([*GATE, "--results", str(results)], scratch, text=True)
    deadline = time.monotonic() + 90
    while not _counting(results / "runs"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    time.sleep(random.uniform(0, 0.2))
    [run] = (results / "runs").glob("*-gate")
    before = _complete_lines(run / "samples.jsonl")
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip(CHANCE + "the gate finished before the signal")  # too quick a machine
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), stderr
    assert (run / "samples.jsonl").read_text().startswith(before)  # nothing stored is lost
    kept = len(read_jsonl(run / "samples.jsonl"))
    if sig == signal.SIGTERM:
        assert "Traceback" not in stderr and "baseline was left as it was" in stderr
        assert f"continue with: hakbench gate --resume {run}" in stderr
        for c in read_jsonl(run / "cells.jsonl"):  # what finished is judged and printed
            assert f"| C7_SAFE | {c['workload']} |" in stdout
    assert (results / "scorecard" / "gate.json").read_text() == baseline

    resumed = _hakbench(["gate", "--resume", str(run)], scratch, text=True)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stdout + stderr
    assert "gate passed: 4 cells" in stdout and f"resumed: {kept} runs and counts kept" in stdout
    assert (run / "samples.jsonl").read_text().startswith(before)
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == GATE_SLOTS == len({engine.key(s) for s in samples})
    assert [s["seq"] for s in samples] == list(range(GATE_SLOTS))
    assert len(read_jsonl(run / "cells.jsonl")) == 4
    assert (results / "scorecard" / "gate.json").read_text() == baseline


@needs_build
def test_a_gate_resume_elsewhere_or_with_other_cells_is_one_line_exit_2(
    scratch, tmp_path, monkeypatch
):
    from click.testing import CliRunner

    from hakbench.cli import main
    from hakbench.experiments import gate as g

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    results = _gate_results(tmp_path)
    spec = g.load_gate()
    cells = g.gate_cells(spec)
    out = results / "runs" / "stopped-gate"
    meta = g.gate_meta(spec, refresh=False, baseline=g.baseline_path(results), build=None)
    engine.open_run(out, meta, resume=False, ident=engine.identity(cells, out))
    _refused_elsewhere(["gate", "--resume", str(out)], monkeypatch)
    r = CliRunner().invoke(main, ["gate", "--resume", str(out), "-w", "mixed"])
    assert r.exit_code == 2 and "drop --workload" in r.output
    assert not (out / "samples.jsonl").exists()


# ---- hotspots ----


@pytest.mark.slow
@needs_build
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf not installed")
def test_a_stopped_hotspots_records_again_on_resume_and_a_finished_one_does_not(scratch, tmp_path):
    out = tmp_path / "hot"
    proc = _hakbench(["hotspots", "-a", "system", "--scale", "20", "--out", str(out)], scratch)
    deadline = time.monotonic() + 60
    while not (out / "perf.data").exists():  # perf is recording
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    stderr = stderr.decode()
    if proc.returncode == 0:
        pytest.skip(CHANCE + "perf finished before the signal")
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert f"continue with: hakbench hotspots --resume {out}" in stderr
    assert not (out / "samples.jsonl").exists()  # a cut recording is not a sample

    for _ in range(2):  # the cut recording is made again; then it is reused
        resumed = _hakbench(["hotspots", "--resume", str(out)], scratch, text=True)
        stdout, stderr = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, stderr
        [sample] = read_jsonl(out / "samples.jsonl")
        assert sample["status"] == "ok" and sample["perf_data"] == str(out / "perf.data")
        assert "## By group" in (out / "hotspots.md").read_text()
    assert len(json.loads((out / "meta.json").read_text())["resumed"]) == 2


# ---- misuse ----

MISUSE = ["misuse", "-a", "system", "-p", "double-free-tiny", "-p", "free-p+1-mid", "-n", "15"]


@needs_build
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stopped_misuse_run_keeps_its_probes_and_resume_completes(sig, scratch, tmp_path):
    out = tmp_path / "misuse"
    proc = _hakbench([*MISUSE, "--out", str(out)], scratch, text=True)
    deadline = time.monotonic() + 60
    while _complete_lines(out / "probes.jsonl").count("\n") < 3:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    before = _complete_lines(out / "probes.jsonl")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip(CHANCE + "the run finished before the signal")
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), stderr
    assert (out / "probes.jsonl").read_text().startswith(before)
    if sig == signal.SIGTERM:  # the report of what finished
        meta = json.loads((out / "meta.json").read_text())
        assert meta["interrupted"] and meta["probes_run"] == len(read_jsonl(out / "probes.jsonl"))
        assert f"continue with: hakbench misuse --resume {out}" in stderr

    resumed = _hakbench(["misuse", "--resume", str(out)], scratch, text=True)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert (out / "probes.jsonl").read_text().startswith(before)
    records = read_jsonl(out / "probes.jsonl")
    assert len(records) == 30 == len({engine.key(r) for r in records})
    meta = json.loads((out / "meta.json").read_text())
    assert not meta["interrupted"] and meta["probes_run"] == 30 and meta["resumed"]
    assert "| double-free-tiny | ✔ |" in stdout


@needs_build
def test_a_misuse_resume_elsewhere_is_one_line_exit_2(scratch, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from hakbench.cli import main

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / "misuse"
    argv = ["misuse", "-a", "system", "-p", "double-free-tiny", "-n", "1", "--out", str(out)]
    assert CliRunner().invoke(main, argv).exit_code == 0
    _refused_elsewhere(["misuse", "--resume", str(out)], monkeypatch)
    r = CliRunner().invoke(main, ["misuse", "--resume", str(out), "-n", "2"])
    assert r.exit_code == 2 and "drop --runs" in r.output


@pytest.mark.parametrize(
    "argv, dropped",
    [
        ("ab --resume {d} --max-time 5", "--max-time"),
        ("ab --resume {d} -w tiny_hot", "--workload"),
        ("ab --continue {d} --runs 20", "--runs"),
        ("calibrate --resume {d} -n 10", "--runs"),
        ("matrix --resume {d} --metric instructions", "--metric"),
        ("matrix --resume {d} --shard 1/2", "--shard"),
    ],
)
def test_an_option_beside_resume_is_refused_not_ignored(tmp_path, argv, dropped):
    """--resume (and ab's --continue) go on with the options the run recorded: another
    option beside it would be silently ignored, so it is one line and exit 2 instead."""
    from click.testing import CliRunner

    from hakbench.cli import main

    r = CliRunner().invoke(main, argv.format(d=tmp_path).split())
    assert r.exit_code == 2, r.output
    assert f"drop {dropped}" in r.output and len(r.output.strip().splitlines()) == 1


def test_continue_takes_a_new_budget_and_an_exit_rule(tmp_path):
    from click.testing import CliRunner

    from hakbench.cli import main

    # allowed beside --continue: the run directory's own check speaks next (no meta.json)
    r = CliRunner().invoke(
        main, ["ab", "--continue", str(tmp_path), "--max-time", "5", "--fail-on", "no-go"]
    )
    assert r.exit_code == 2 and "drop" not in r.output, r.output
