"""The execution engine: one signal policy, nothing measured lost, --resume completes a run.

The kill test is real: a `hakbench` process of each measuring command (ab, matrix, soak,
and calibrate of all three kinds) is sent SIGKILL, SIGTERM or SIGHUP at a random moment of
its run; every line of every JSONL file of the run directory (samples, trials, epochs, a
trial's own samples) stored when the signal was sent must still be there, unchanged, the
exit code must say which signal it was, a TERM or HUP must leave the report written from
what finished, and `--resume DIR` must complete the run (same kind of result, no slot
measured twice): after every SIGKILL, and after the SIGTERM of a soak (its process stopped
gently is on record, and runs again) and of a sequential calibration (the cut trial's ab
goes on from its own report)."""

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
from conftest import CHANCE

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
    # each trial a whole sequential ab: the stop lands inside one (or between two)
    "calibrate-sequential": (
        ["--sequential", "-a", "system", "-w", "mixed_short", "--condition", "0@1"]
        + ["--condition", "5000@1", "--trials", "1", "--max-time", "0.4", "--warmup", "1"],
        "trials.jsonl",
    ),
    "calibrate-run-length": (
        ["--run-length", "-a", "system", "-w", "mixed_short", "--runs", "RL_PAIRS"]
        + ["--warmup", "0", "--fraction", "0.5", "--fraction", "1"],
        "samples.jsonl",
    ),
}
RL_PAIRS = 40  # pairs per count of the run-length case: 160 samples, ~1.5 s
RESUMED_AFTER_TERM = ("soak", "calibrate-sequential")


def _hakbench(argv: list[str], root: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "HAKBENCH_ROOT": str(root)}
    return subprocess.Popen(
        [str(HAKBENCH), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
    )


def _complete_lines(path: Path) -> str:
    """The file's complete lines (a line being written has no newline yet)."""
    text = path.read_text() if path.exists() else ""
    return text[: text.rfind("\n") + 1]


SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP]


def signal_cases():
    """Every command under every signal; make test takes one signal per command, in turn (each
    signal and each command covered), the rest are marked slow (.ci/run)."""
    for i, command in enumerate(COMMANDS):
        for j, sig in enumerate(SIGNALS):
            marks = () if j == i % len(SIGNALS) else (pytest.mark.slow,)
            yield pytest.param(command, sig, marks=marks, id=f"{command}-{sig.name}")


@needs_harness
@pytest.mark.parametrize(("command", "sig"), list(signal_cases()))
def test_a_signal_at_a_random_moment_loses_nothing_and_resume_completes(
    command, sig, scratch, tmp_path
):
    args, grows = COMMANDS[command]
    args = [str(RL_PAIRS) if a == "RL_PAIRS" else a for a in args]
    name = command.split("-")[0]  # calibrate-sequential: calibrate --sequential
    out = tmp_path / "out"
    if command == "matrix":
        (tmp_path / "m.toml").write_text(MATRIX)
        args = [str(tmp_path / "m.toml")]
    proc = _hakbench([name, *args, "--out", str(out)], scratch, text=True)
    deadline = time.monotonic() + 60
    ready = 1 if command == "calibrate-sequential" else 3  # lines that mean "running"
    while _complete_lines(out / grows).count("\n") < ready:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    delay = random.uniform(0, 0.3)
    time.sleep(delay)
    before = _stored_lines(out)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    why = f"{command} {sig.name} after {delay:.2f} s: {stderr[-2000:]}"
    if proc.returncode == 0:
        pytest.skip(f"{CHANCE}the run finished before the signal ({why})")  # too quick a machine
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), why
    assert "Traceback" not in stderr, why
    _check_kept(out, before, why)  # every line stored at the signal is still there
    stored = read_jsonl(out / grows)
    if sig != signal.SIGKILL:  # the report, written from what finished
        _check_interrupted_report(command, out, stored, sig, why)

    # the resume after a HUP takes the path it takes after a TERM, and after a TERM the one
    # after a KILL, but for a soak (its process stopped gently, on record) and a sequential
    # calibration (the cut trial's ab wrote its report, and goes on from it)
    if sig == signal.SIGHUP or (sig == signal.SIGTERM and command not in RESUMED_AFTER_TERM):
        return
    # (a 1 s soak on a busy machine may judge its ops/s trend FAIL: not what is tested here)
    extra = ["--report-only"] if command == "soak" else []
    resumed = _hakbench([name, "--resume", str(out), *extra], scratch, text=True)
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, f"{why}\nresume: {stderr[-2000:]}"
    _check_kept(out, before, why)
    _check_complete(command, out, why)


def _stored_lines(out: Path) -> dict:
    """The complete lines of every JSONL file of a run directory (and of its trials' own)."""
    return {p: _complete_lines(p) for p in out.rglob("*.jsonl")}


def _check_kept(out: Path, before: dict, why: str) -> None:
    for path, lines in before.items():
        assert path.read_text().startswith(lines), f"{path.relative_to(out)} lost lines; {why}"


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
    elif command == "calibrate-sequential":
        doc = json.loads((out / "sequential.json").read_text())
        assert doc["trials_done"] == len(stored), why
        assert sum(c["trials"] for c in doc["conditions"]) == len(stored), why
        assert not doc["interrupted"] or f"**Interrupted** by {name}" in _report(out), why
    elif command == "calibrate-run-length":
        doc = json.loads((out / "run_length.json").read_text())
        assert not doc["interrupted"] or f"**Interrupted** by {name}" in _report(out), why
    else:
        summary = json.loads((out / "summary.json").read_text())
        assert summary["runs"][0]["epochs"] == len(stored), why
        if summary["interrupted"]:
            assert f"Interrupted by {name}" in (out / "report.md").read_text(), why


def _report(out: Path) -> str:
    return (out / "report.md").read_text()


def _check_complete(command, out: Path, why: str) -> None:
    for path in out.rglob("*.jsonl"):  # samples, trials, a trial's own samples
        if path.name == "epochs.jsonl":
            continue
        samples = read_jsonl(path)
        keys = [engine.key(s) for s in samples]
        assert len(keys) == len(set(keys)), f"{path}: a slot measured twice; {why}"
        assert [s["seq"] for s in samples] == list(range(len(samples))), why
    samples = read_jsonl(out / "samples.jsonl") if (out / "samples.jsonl").exists() else []
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
    elif command == "calibrate-sequential":
        doc = json.loads((out / "sequential.json").read_text())
        assert not doc["interrupted"] and doc["trials_done"] == 2, why
        trials = read_jsonl(out / "trials.jsonl")
        assert sorted(t["trial"] for t in trials) == [1, 2], why
        for t in trials:  # each trial's ab finished (a cut one resumed in its own directory)
            assert json.loads((Path(t["out"]) / "meta.json").read_text())["finished"], why
    elif command == "calibrate-run-length":
        doc = json.loads((out / "run_length.json").read_text())
        assert not doc["interrupted"], why
        [entry] = doc["workloads"].values()
        assert [p["pairs"] for p in entry["points"]] == [RL_PAIRS, RL_PAIRS], why
        assert len(samples) == 2 * 2 * RL_PAIRS, why
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


def test_a_sample_stored_just_before_the_stop_is_among_the_finished(tmp_path):
    """A stop that arrives while a finished sample is being stored comes after it: the
    sample is on disk, ``take`` raises, and ``Session.finished`` (what the report is made
    from) holds it (a calibration once reported 0 trials with one in trials.jsonl)."""
    session = engine.Session(RunStore(tmp_path))

    def finished_then_signal() -> dict:  # no process to stop: the signal waits for the store
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        return {"status": "ok"}

    with interrupts.installed(), pytest.raises(interrupts.Interrupted):
        session.take({"phase": "trial", "trial": 1}, finished_then_signal)
    assert len(session.store.samples()) == 1 and session.finished[0]["trial"] == 1


def test_parts_of_a_killed_sample_are_kept_and_a_torn_one_cut(tmp_path):
    """A soak's epochs are parts of its running sample: each stored as it arrives, so a kill
    keeps them; the line a kill tore is cut before the next part is appended."""
    (tmp_path / "epochs.jsonl").write_text('{"epoch": 1}\n{"epo')  # killed mid-write
    seen = []
    session = engine.Session(RunStore(tmp_path), on_part=seen.append)
    session.part("epochs", {"epoch": 2})
    assert read_jsonl(tmp_path / "epochs.jsonl") == [{"epoch": 1}, {"epoch": 2}]
    assert seen == [{"epoch": 2}] and session.store.parts("epochs")[-1] == {"epoch": 2}


def test_a_nested_slot_is_stored_once_and_not_when_cut(tmp_path):
    """A slot whose run is itself a run of the engine (a calibration trial): the stop reaches
    its own samples, and a cut one is not stored; a finished one is reused on resume."""
    trials = engine.Session(RunStore(tmp_path, name="trials.jsonl"))
    inner = engine.Session(RunStore(tmp_path))
    tags = {"phase": "trial", "cell": "A/A", "trial": 1}

    def trial() -> dict:
        inner.take({"phase": "measure", "round": 0}, lambda: {"status": "ok"})
        raise KeyboardInterrupt  # the stop came during its second sample

    with pytest.raises(KeyboardInterrupt):
        trials.take(tags, trial, nested=True)
    assert not (tmp_path / "trials.jsonl").exists() and len(inner.store.samples()) == 1
    trials.take(tags, lambda: {"verdict": "NEUTRAL"}, nested=True)
    again = engine.Session(RunStore(tmp_path, name="trials.jsonl"), stored=trials.store.samples())
    assert again.take(tags, lambda: pytest.fail("run again"), nested=True)["verdict"] == "NEUTRAL"


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
    from hakbench.stats.stopper import Stopper

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / "ab"
    aa = ["ab", "-a", "system", "-w", "mixed_short", "--perf", "off", "--warmup", "1"]
    r = CliRunner().invoke(main, [*aa, "--max-time", "0.3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    first = json.loads((out / "meta.json").read_text())
    if first["verdicts"]["mixed_short"] != "INCONCLUSIVE":
        pytest.skip(CHANCE + "the A/A decided in 0.3 s")
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
    rule = Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=10**6)
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


def _refused_elsewhere(argv: list[str], monkeypatch) -> None:
    """``argv`` (a --resume) on another machine, then another source tree: one line, exit 2."""
    from click.testing import CliRunner

    from hakbench.cli import main

    for name, patch in (
        ("machine", lambda: "0123456789ab"),
        ("source tree", lambda exclude=None: {"commit": "elsewhere", "dirty": "0"}),
    ):
        with monkeypatch.context() as m:
            m.setattr(engine, "fingerprint" if name == "machine" else "tree_state", patch)
            r = CliRunner().invoke(main, argv)
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and f"the {name}" in lines[0], r.output


@needs_harness
def test_a_resume_on_another_machine_or_tree_is_one_line_exit_2(scratch, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from hakbench.cli import main

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / "ab"
    argv = ["ab", "-a", "system", "-w", "mixed_short", "--runs", "2", "--perf", "off"]
    assert CliRunner().invoke(main, [*argv, "--out", str(out)]).exit_code == 0
    _refused_elsewhere(["ab", "--resume", str(out)], monkeypatch)


@needs_harness
@pytest.mark.parametrize("kind", ["calibrate-sequential", "calibrate-run-length"])
def test_a_calibration_resume_elsewhere_is_one_line_exit_2(kind, scratch, tmp_path, monkeypatch):
    """calibrate --sequential and --run-length resume like the others: refused in one line,
    exit 2, on another machine or tree (the stored run is made as the command makes it)."""
    from hakbench.engine.cells import make_cell

    monkeypatch.setenv("HAKBENCH_ROOT", str(scratch))
    out = tmp_path / kind
    cell = make_cell("system", "mixed_short")
    key, params = {
        "calibrate-sequential": (
            "sequential",
            {"allocator": "system", "workload": "mixed_short", "profile": "C7_SAFE",
             "warmup": 1, "trials": 1, "seed": 1, "conditions": ["0@1"], "max_time_s": 1.0},
        ),
        "calibrate-run-length": (
            "run_length",
            {"allocator": "system", "workloads": ["mixed_short"], "profile": "C7_SAFE",
             "pairs": 6, "warmup": 0, "threshold": 1.0, "seed": 1, "fractions": [1.0]},
        ),
    }[kind]  # fmt: skip
    engine.open_run(out, {"kind": kind, key: params}, resume=False, ident=engine.identity([cell]))
    _refused_elsewhere(["calibrate", "--resume", str(out)], monkeypatch)
    assert not (out / "samples.jsonl").exists() and not (out / "trials.jsonl").exists()


@needs_harness
def test_a_killed_sequential_ab_resumes_the_same_sequence(scratch, tmp_path):
    """SIGKILL in the middle of a sequential ab; --resume replays the stored rounds look by
    look and goes on under the rest of the budget: the verdict is the one a single
    uninterrupted sequence over the same pairs gives."""
    import math

    from hakbench.engine.schedule import complete_pairs
    from hakbench.stats.stopper import Stopper

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
    rule = Stopper({"w": True}, 1.0, max_time_s=math.inf, max_pairs=10**6)
    for a, b in complete_pairs(samples, "mixed_short"):
        rule.add("w", math.log(b["metrics"]["cpu_throughput"] / a["metrics"]["cpu_throughput"]))
        rule.end_round()
    look = rule.stops["w"].state.last
    assert look.n == int(row["n_pairs"]) and float(row["p_value"]) == pytest.approx(look.p_anytime)
