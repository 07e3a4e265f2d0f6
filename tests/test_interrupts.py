"""Every command: Ctrl-C exits 130 having written what finished; corrupt input is one line
and exit 2. The interrupts are real SIGINTs sent to a real `hakbench` process."""

from __future__ import annotations

import glob
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths

needs_harness = pytest.mark.skipif(
    not paths.bench_binary("bench_random_mixed").exists(), reason="harness not built"
)
TINY_MATRIX = """
name = "tiny"
runs = 400
warmup = 0
seed = 3
[axes]
allocator = ["system"]
workload = ["mixed_short"]
"""


def has_lines(*paths: Path, lines: int = 1):
    """A readiness check: some file of ``paths`` (globs allowed) holds ``lines`` lines."""

    def ready() -> bool:
        files = [f for p in paths for f in glob.glob(str(p))]
        return any(Path(f).read_text().count("\n") >= lines for f in files)

    return ready


def interrupt_when(argv: list[str], ready) -> tuple[int, str]:
    """Run ``hakbench argv``; SIGINT once ``ready()``. -> (exit code, stderr)"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hakbench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    return proc.returncode, stderr


@needs_harness
def test_run_keeps_its_samples_and_exits_130(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "-a", "system", "-w", "mixed_short", "-n", "2000", "--out", str(out)]
    rc, _ = interrupt_when(argv, has_lines(out / "samples.jsonl", lines=3))
    assert rc == 130
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert 3 <= len(samples) < 2001 and all(s["status"] == "ok" for s in samples)


@needs_harness
def test_matrix_keeps_its_samples_and_summary_and_exits_130(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(TINY_MATRIX)
    out = tmp_path / "m"
    argv = ["matrix", str(f), "--out", str(out)]
    rc, stderr = interrupt_when(argv, has_lines(out / "samples.jsonl", lines=3))
    assert rc == 130 and "--resume" in stderr
    assert (out / "summary.csv").read_text().startswith("cell,")


@needs_harness
def test_scorecard_refresh_leaves_the_stored_scorecard_and_exits_130(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(TINY_MATRIX.replace("[axes]", 'reference = { allocator = "system" }\n[axes]'))
    results = tmp_path / "results"
    argv = ["scorecard", "--refresh", "--matrix", str(f), "--results", str(results)]
    rc, stderr = interrupt_when(argv, has_lines(results / "runs" / "*" / "samples.jsonl", lines=2))
    assert rc == 130
    assert "stored scorecard was left as it was" in stderr
    assert not (results / "scorecard").exists()
    [run] = results.glob("runs/*/samples.jsonl")
    assert len(run.read_text().splitlines()) >= 2  # the finished samples are kept


def test_a_command_without_its_own_handler_exits_130_in_one_line(monkeypatch):
    import hakbench.commands.profiles as cmd

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cmd, "load_profiles", interrupted)
    r = CliRunner().invoke(main, ["profiles", "list"])
    assert r.exit_code == 130
    assert r.output.strip() == "hakbench: interrupted" and "Aborted" not in r.output


# ---- corrupt input: one line, exit 2 ----


def _one_error_line(r) -> str:
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("hakbench: error: "), r.output
    return lines[0]


@needs_harness
def test_matrix_resume_of_a_corrupt_run_names_the_file_and_line(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(TINY_MATRIX.replace("runs = 400", "runs = 2"))
    out = tmp_path / "m"
    assert CliRunner().invoke(main, ["matrix", str(f), "--out", str(out)]).exit_code == 0
    samples = out / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text(lines[0] + '{"cell": "x", "rou\n' + "".join(lines[1:]))
    line = _one_error_line(CliRunner().invoke(main, ["matrix", str(f), "--resume", str(out)]))
    assert f"{samples}:2: corrupt JSON line" in line
    (out / "meta.json").write_text('{"matrix": ')
    line = _one_error_line(CliRunner().invoke(main, ["matrix", str(f), "--resume", str(out)]))
    assert "meta.json: corrupt JSON" in line


def test_scorecard_of_corrupt_stored_samples_names_the_line(tmp_path):
    stored = tmp_path / "scorecard"
    stored.mkdir()
    (stored / "meta.json").write_text("{}")
    (stored / "samples.jsonl").write_text('{"seq": 0}\n{"seq": 1\n{"seq": 2}\n')
    r = CliRunner().invoke(main, ["scorecard", "--results", str(tmp_path)])
    assert "samples.jsonl:2: corrupt JSON line" in _one_error_line(r)


def test_malformed_profile_toml_is_one_line(tmp_path, monkeypatch):
    real = paths.repo_root()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "Makefile").symlink_to(real / "Makefile")
    (tmp_path / "profiles" / "BROKEN.toml").write_text('description = "x"\n[env\n')
    monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
    line = _one_error_line(CliRunner().invoke(main, ["profiles", "list"]))
    assert "BROKEN.toml" in line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_outside_a_command_still_exits_128_plus_the_signal(sig):
    # the CLI's process between its command's end and its exit: nothing is left to write, and
    # the default action would report a kill (-15) where the policy says 143
    code = (
        "import os, signal, time\n"
        "from hakbench.engine import interrupts\n"
        "interrupts.exit_outside_commands()\n"
        f"os.kill(os.getpid(), {int(sig)})\n"
        "time.sleep(5)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert done.returncode == 128 + sig


def test_a_signal_before_the_process_registers_still_cuts_its_sample():
    """The race of a busy machine: the signal lands after a sample started but before its
    process registered its stopper. The process is stopped as it registers (and counted as
    cut, so the engine does not store its sample); the stop is raised at the section's end."""
    from hakbench.engine import interrupts

    stopped = []
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted):
            with interrupts.deferred():
                before = interrupts.stops()
                signal.raise_signal(signal.SIGINT)  # no process runs yet
                assert not stopped
                with interrupts.stopping(lambda: stopped.append(1)):
                    pass
                assert stopped == [1] and interrupts.stops() == before + 1
                with interrupts.stopping(lambda: stopped.append(2)):
                    pass  # only the process being started when it came
                assert stopped == [1]
        # while a report is written nothing is cut, however a signal comes
        with interrupts.finishing():
            signal.raise_signal(signal.SIGTERM)
            with interrupts.stopping(lambda: stopped.append(3)):
                pass
        assert stopped == [1]
