"""The execution engine: one signal policy, nothing measured lost, --resume completes a run.

The kill test is real: a `hakbench` process of each measuring command is sent SIGKILL,
SIGTERM or SIGHUP at a random moment of its run; every sample (or epoch) stored when the
signal was sent must still be there, unchanged, the exit code must say which signal it was,
a TERM or HUP must leave the report written from what finished, and `--resume DIR` must
complete the run (same kind of result, no slot measured twice): after every SIGKILL, and
after a soak's SIGTERM (a soak process stopped gently is on record, and runs again)."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.store import RunStore, read_jsonl

HAKBENCH = Path(sys.executable).parent / "hakbench"
needs_harness = pytest.mark.skipif(
    not paths.bench_binary("bench_random_mixed").exists()
    or not paths.bench_binary("bench_soak").exists(),
    reason="harness not built",
)
MATRIX_RUNS = 200  # ~1.5 s of glibc runs: long enough for the signal to land mid-run
MATRIX = f"""
name = "kill"
runs = {MATRIX_RUNS}
warmup = 0
seed = 3
[axes]
allocator = ["system"]
workload = ["mixed_short"]
"""
AB_RUNS = 40
# command -> (argv after the command, the file that grows, a line count that means "running")
COMMANDS = {
    "ab": (
        ["-a", "system", "-w", "mixed_short", "--runs", str(AB_RUNS), "--warmup", "1"]
        + ["--perf", "off"],
        "samples.jsonl",
    ),
    "matrix": ([], "samples.jsonl"),
    "calibrate": (
        ["-a", "system", "-w", "mixed_short", "--runs", "6", "--warmup", "0", "--trials", "4"]
        + ["-k", "2.5"],
        "samples.jsonl",
    ),
    "soak": (
        ["--allocator", "system", "--duration", "0.8s", "--epoch", "0.1s", "--syscall-pass", "0"]
        + ["--warmup-epochs", "1"],
        "epochs.jsonl",
    ),
}


@pytest.fixture
def scratch(tmp_path):
    """A lab root whose results/ is private (a finished calibration becomes the machine's)."""
    real = paths.repo_root()
    root = tmp_path / "root"
    root.mkdir()
    for name in ("profiles", "build", "Makefile"):
        (root / name).symlink_to(real / name)
    return root


def _hakbench(argv: list[str], root: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "HAKBENCH_ROOT": str(root)}
    return subprocess.Popen(
        [str(HAKBENCH), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
    )


def _complete_lines(path: Path) -> str:
    """The file's complete lines (a line being written has no newline yet)."""
    text = path.read_text() if path.exists() else ""
    return text[: text.rfind("\n") + 1]


@needs_harness
@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_signal_at_a_random_moment_loses_nothing_and_resume_completes(
    command, sig, scratch, tmp_path
):
    args, grows = COMMANDS[command]
    out = tmp_path / "out"
    if command == "matrix":
        (tmp_path / "m.toml").write_text(MATRIX)
        args = [str(tmp_path / "m.toml")]
    proc = _hakbench([command, *args, "--out", str(out)], scratch, text=True)
    deadline = time.monotonic() + 60
    while _complete_lines(out / grows).count("\n") < 3:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    delay = random.uniform(0, 0.3)
    time.sleep(delay)
    before = _complete_lines(out / grows)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    why = f"{command} {sig.name} after {delay:.2f} s: {stderr[-2000:]}"
    if proc.returncode == 0:
        pytest.skip(f"the run finished before the signal ({why})")  # too quick a machine
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), why
    assert "Traceback" not in stderr, why
    after = (out / grows).read_text()
    assert after.startswith(before), why  # every line stored at the signal is still there
    stored = read_jsonl(out / grows)
    if sig != signal.SIGKILL:  # the report, written from what finished
        _check_interrupted_report(command, out, stored, sig, why)

    if sig == signal.SIGHUP or (sig == signal.SIGTERM and command != "soak"):
        return  # (the resume after a TERM or HUP takes the path it takes after a KILL)
    # (a 1 s soak on a busy machine may judge its ops/s trend FAIL: not what is tested here)
    extra = ["--report-only"] if command == "soak" else []
    resumed = _hakbench([command, "--resume", str(out), *extra], scratch, text=True)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, f"{why}\nresume: {stderr[-2000:]}"
    assert (out / grows).read_text().startswith(before), why
    _check_complete(command, out, why)


def _check_interrupted_report(command, out: Path, stored: list, sig, why: str) -> None:
    name = sig.name
    # (a signal that lands after the last sample, while the report is written, leaves a
    # complete report: what finished was everything)
    if command == "ab":
        meta = json.loads((out / "meta.json").read_text())
        assert meta["n_samples"] == len(stored), why
        if not meta["finished"]:
            assert f"Interrupted** by {name}" in (out / "report.md").read_text(), why
    elif command == "matrix":
        with open(out / "summary.csv") as f:
            [row] = list(csv.DictReader(f))
        assert int(row["n"]) + int(row["n_failed"]) == len(stored), why
    elif command == "calibrate":
        c = json.loads((out / "calibration.json").read_text())
        trials = out / "trials.jsonl"
        kept = len(read_jsonl(trials)) if trials.exists() else 0
        assert c["trials_done"] == kept, why
        assert not c["interrupted"] or "**Interrupted**" in (out / "report.md").read_text(), why
    else:
        summary = json.loads((out / "summary.json").read_text())
        assert summary["runs"][0]["epochs"] == len(stored), why
        if summary["interrupted"]:
            assert f"Interrupted by {name}" in (out / "report.md").read_text(), why


def _check_complete(command, out: Path, why: str) -> None:
    samples = read_jsonl(out / "samples.jsonl") if command != "soak" else []
    keys = [engine.key(s) for s in samples]
    assert len(keys) == len(set(keys)), why  # no slot measured twice
    assert [s["seq"] for s in samples] == list(range(len(samples))), why
    if command == "ab":
        assert len(samples) == 2 * (AB_RUNS + 1), why
        meta = json.loads((out / "meta.json").read_text())
        assert meta["finished"] and meta["resumed"], why
        assert "Calls that measured into this directory" in (out / "report.md").read_text()
    elif command == "matrix":
        assert len(samples) == MATRIX_RUNS, why
    elif command == "calibrate":
        c = json.loads((out / "calibration.json").read_text())
        assert not c["interrupted"] and c["trials_done"] == 8, why
        assert len(samples) == 8 * 12, why
    else:
        summary = json.loads((out / "summary.json").read_text())
        assert not summary["interrupted"] and summary["runs"][0]["status"] == "complete", why
        assert summary["runs"][0]["epochs"] == 8, why


# ---- the pieces, in this process ----


def test_the_policy_maps_each_signal_to_its_exit_code_and_defers_inside_a_section():
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        with interrupts.installed():
            with pytest.raises(interrupts.Interrupted):
                with interrupts.deferred():
                    os.kill(os.getpid(), sig)
                    time.sleep(0.01)
                    done = True  # the section ran to its end before the stop
            assert done and interrupts.exit_code() == code
            # a second signal while the report is written raises nothing
            os.kill(os.getpid(), sig)
            time.sleep(0.01)


def test_session_reuses_stored_samples_and_never_stores_a_cut_one(tmp_path):
    store = RunStore(tmp_path)
    session = engine.Session(store)
    tags = {"phase": "measure", "cell": "c", "round": 0, "side": "A", "pair": 0}
    session.take(tags, lambda: {"status": "ok", "metrics": {}})
    again = engine.Session(RunStore(tmp_path), stored=store.samples())
    ran = []
    assert again.take(tags, lambda: ran.append(1) or {})["seq"] == 0 and not ran

    def cut() -> dict:  # a stop signal lands while the process runs: it is stopped
        with interrupts.stopping(lambda: None):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
        return {"status": "failed"}

    with interrupts.installed(), pytest.raises(interrupts.Interrupted):
        again.take({**tags, "round": 1}, cut)
    assert len(store.samples()) == 1  # the cut sample was not stored


def test_resume_refuses_another_tree_build_profile_or_machine(tmp_path):
    ident = {"tree": {"commit": "a"}, "build": {"lib": "1"}, "profile": "p", "machine": "m"}
    run, meta = tmp_path / "run", {"kind": "t"}
    store, _, _ = engine.open_run(run, dict(meta), resume=False, ident=ident)
    for what, value in (("tree", {"commit": "b"}), ("build", {"lib": "2"}), ("machine", "x")):
        with pytest.raises(UsageError, match=what):
            engine.open_run(run, dict(meta), resume=True, ident={**ident, what: value})
    with pytest.raises(UsageError, match="not a u run directory"):
        engine.open_run(run, {"kind": "u"}, resume=True, ident=ident)
    _, stored, samples = engine.open_run(run, dict(meta), resume=True, ident=ident)
    assert stored["resumed"] and samples == []
    with pytest.raises(UsageError, match="already holds"):
        store.append({"status": "ok"})
        engine.open_run(run, dict(meta), resume=False, ident=ident)


@needs_harness
def test_ab_continue_extends_the_same_sequence_and_seed_replays(scratch, tmp_path, monkeypatch):
    """An undecided sequential ab goes on under the same confidence sequence: its final
    look is the one a single uninterrupted sequence over the same pairs gives (the same
    looks: the anytime p is a maximum over all of them). A fresh seed per call, recorded;
    --seed replays the pair order."""
    import math

    from click.testing import CliRunner

    from hakbench.cli import main
    from hakbench.engine.schedule import complete_pairs
    from hakbench.stats import sequential as seq

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / "ab"
    aa = ["ab", "-a", "system", "-w", "mixed_short", "--perf", "off", "--warmup", "1"]
    r = CliRunner().invoke(main, [*aa, "--max-time", "0.3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    first = json.loads((out / "meta.json").read_text())
    if first["verdicts"]["mixed_short"] != "INCONCLUSIVE":
        pytest.skip("the A/A decided in 0.3 s")
    before = _complete_lines(out / "samples.jsonl")
    r = CliRunner().invoke(main, ["ab", "--continue", str(out), "--max-time", "0.6"])
    assert r.exit_code == 0, r.output
    assert (out / "samples.jsonl").read_text().startswith(before)
    meta = json.loads((out / "meta.json").read_text())
    [cont] = meta["continuations"]
    assert cont["before"]["mixed_short"]["verdict"] == "INCONCLUSIVE"
    assert meta["spec"]["seed"] == first["spec"]["seed"]
    with open(out / "summary.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["role"] == "primary")
    assert int(row["n_pairs"]) > before.count('"phase": "measure"') // 2
    # one uninterrupted sequence over the same pairs, a look per round
    samples = read_jsonl(out / "samples.jsonl")
    rule = seq.Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=10**6)
    for a, b in complete_pairs(samples, "mixed_short"):
        rule.add("w", math.log(b["metrics"]["cpu_throughput"] / a["metrics"]["cpu_throughput"]))
        rule.end_round()
    look = rule.stops["w"].state.last
    assert look.n == int(row["n_pairs"])
    assert float(row["p_value"]) == pytest.approx(look.p_anytime)
    assert float(row["ci_low"]) == pytest.approx(math.exp(look.low))
    assert "continued (--continue, budget 0.6 s)" in (out / "report.md").read_text()
    # a decided run and a fixed count refuse in one line
    fixed = tmp_path / "fixed"
    r = CliRunner().invoke(main, [*aa, "--runs", "3", "--out", str(fixed)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["ab", "--continue", str(fixed)])
    assert r.exit_code == 2 and "only a sequential run continues" in r.output
    # --seed replays the order of a fixed count: the same sides first in every pair
    seed = json.loads((fixed / "meta.json").read_text())["spec"]["seed"]
    again = tmp_path / "again"
    r = CliRunner().invoke(main, [*aa, "--runs", "3", "--seed", str(seed), "--out", str(again)])
    assert r.exit_code == 0, r.output

    def order(d):
        return [(s["phase"], s["round"], s["side"]) for s in read_jsonl(d / "samples.jsonl")]

    assert order(fixed) == order(again) and f"seed {seed}" in r.output


@needs_harness
@pytest.mark.skipif(not paths.options_binary().exists(), reason="hakmem not built")
def test_an_interrupted_gate_keeps_and_judges_what_it_measured(scratch, tmp_path):
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    results = tmp_path / "results"
    (results / "scorecard").mkdir(parents=True)
    shutil.copy(paths.repo_root() / "results" / "scorecard" / "gate.json", results / "scorecard")
    argv = ["gate", "-p", "C7_SAFE", "-w", "mixed", "-w", "tiny_hot", "-w", "c7_only"]
    proc = _hakbench([*argv, "-j", "1", "--results", str(results)], scratch, text=True)
    runs = results / "runs"
    deadline = time.monotonic() + 60
    while not any(_complete_lines(f).count("\n") >= 2 for f in runs.glob("*/samples.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    [run] = runs.glob("*-gate")
    before = _complete_lines(run / "samples.jsonl")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert "interrupted by SIGTERM" in stderr and "baseline was left as it was" in stderr
    assert (run / "samples.jsonl").read_text().startswith(before)  # the runs are kept
    cells = read_jsonl(run / "cells.jsonl") if (run / "cells.jsonl").exists() else []
    assert len(cells) < 3
    for c in cells:  # what finished is judged and printed
        assert f"| C7_SAFE | {c['workload']} |" in stdout
    assert json.loads((results / "scorecard" / "gate.json").read_text())  # untouched


@needs_harness
def test_a_resume_on_another_machine_or_tree_is_one_line_exit_2(scratch, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from hakbench.cli import main

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / "ab"
    argv = ["ab", "-a", "system", "-w", "mixed_short", "--runs", "2", "--perf", "off"]
    assert CliRunner().invoke(main, [*argv, "--out", str(out)]).exit_code == 0
    for name, patch in (
        ("machine", lambda: "0123456789ab"),
        ("source tree", lambda exclude=None: {"commit": "elsewhere", "dirty": "0"}),
    ):
        with monkeypatch.context() as m:
            m.setattr(engine, "fingerprint" if name == "machine" else "tree_state", patch)
            r = CliRunner().invoke(main, ["ab", "--resume", str(out)])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and f"the {name}" in lines[0], r.output


@needs_harness
def test_a_killed_sequential_ab_resumes_the_same_sequence(scratch, tmp_path):
    """SIGKILL in the middle of a sequential ab; --resume replays the stored rounds look by
    look and goes on under the rest of the budget: the verdict is the one a single
    uninterrupted sequence over the same pairs gives."""
    import math

    from hakbench.engine.schedule import complete_pairs
    from hakbench.stats import sequential as seq

    out = tmp_path / "seq"
    argv = ["ab", "-a", "system", "-w", "mixed_short", "--perf", "off", "--warmup", "1"]
    proc = _hakbench([*argv, "--max-time", "1.5", "--out", str(out)], scratch, text=True)
    deadline = time.monotonic() + 60
    while _complete_lines(out / "samples.jsonl").count("\n") < 20:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    before = _complete_lines(out / "samples.jsonl")
    proc.kill()
    proc.communicate(timeout=60)
    resumed = _hakbench(["ab", "--resume", str(out)], scratch, text=True)
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert (out / "samples.jsonl").read_text().startswith(before)
    samples = read_jsonl(out / "samples.jsonl")
    assert len({engine.key(s) for s in samples}) == len(samples)
    with open(out / "summary.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["role"] == "primary")
    rule = seq.Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=10**6)
    for a, b in complete_pairs(samples, "mixed_short"):
        rule.add("w", math.log(b["metrics"]["cpu_throughput"] / a["metrics"]["cpu_throughput"]))
        rule.end_round()
    look = rule.stops["w"].state.last
    assert look.n == int(row["n_pairs"]) and float(row["p_value"]) == pytest.approx(look.p_anytime)
