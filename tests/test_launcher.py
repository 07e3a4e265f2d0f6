"""One process launcher: nothing in hakbench starts, waits for or signals a process but the
engine's launcher (``hakbench.engine.process``), and the launcher's options do what they say
(a timeout kills the whole group, the exit status or signal and rusage come back, a stop
signal kills a measured process and spares a tool, the watchdog stops a streamed one gently).

The check reads every module with ast, so an import inside a function counts, and a word in
a docstring does not.
"""

from __future__ import annotations

import ast
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import hakbench
from hakbench.engine import interrupts, process

ROOT = Path(hakbench.__file__).parent

# Modules whose import starts processes; os functions that start, replace, wait for or
# signal one. (os.waitstatus_to_exitcode only decodes a status: not in the list.)
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "asyncio.subprocess"}
OS_FUNCTIONS = {"fork", "forkpty", "system", "popen", "kill", "killpg"}
OS_PREFIXES = ("exec", "spawn", "posix_spawn", "wait")
OS_NOT_PROCESS = {"waitstatus_to_exitcode"}

# The launcher. hakrun.py still compiles hakbench/native/ with subprocess: that file belongs
# to the branch reworking hakrun (issue #41's coordinator moves its one call onto
# process.run when the branches meet), and it is in the engine, as issue #41 asks.
LAUNCHER = {"engine/process.py"}
ENGINE_PENDING: set[str] = set()


def _os_call(name: str) -> bool:
    if name in OS_NOT_PROCESS:
        return False
    return name in OS_FUNCTIONS or name.startswith(OS_PREFIXES)


def process_uses(source: str) -> list[str]:
    """Where ``source`` starts, waits for or signals a process: ``"line: what"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in PROCESS_MODULES or alias.name.split(".")[0] in PROCESS_MODULES:
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in PROCESS_MODULES or node.module.split(".")[0] in PROCESS_MODULES:
                found.append(f"{node.lineno}: from {node.module} import")
            elif node.module == "os":
                found += [
                    f"{node.lineno}: from os import {a.name}"
                    for a in node.names
                    if _os_call(a.name)
                ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and _os_call(node.attr):
                found.append(f"{node.lineno}: os.{node.attr}")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def uses_in(root: Path) -> dict[str, list[str]]:
    """module path (relative to ``root``) -> its process uses, for every module with some."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        uses = process_uses(path.read_text())
        if uses:
            out[str(path.relative_to(root))] = uses
    return out


FIXTURE = '''
"""A docstring may say subprocess.run and os.fork(): words are not calls."""
import os
import subprocess
from os import posix_spawn, waitstatus_to_exitcode


def build():
    import multiprocessing.pool
    pid = os.fork()
    os.execvp("make", ["make"])
    _, status, _ = os.wait4(pid, 0)
    os.killpg(pid, 9)
    return waitstatus_to_exitcode(status), os.waitstatus_to_exitcode(status), os.getpid()
'''


def test_process_uses_are_found_and_words_are_not():
    assert process_uses(FIXTURE) == [
        "4: import subprocess",
        "5: from os import posix_spawn",
        "9: import multiprocessing.pool",
        "10: os.fork",
        "11: os.execvp",
        "12: os.wait4",
        "13: os.killpg",
    ]


def test_a_module_outside_the_engine_that_starts_a_process_fails_the_check(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x.py").write_text("import subprocess\nsubprocess.run(['true'])\n")
    (tmp_path / "experiments" / "y.py").write_text("from hakbench.engine import process\n")
    found = {p: u for p, u in uses_in(tmp_path).items() if not p.startswith("engine/")}
    assert found == {"experiments/x.py": ["1: import subprocess"]}


def test_no_process_is_started_outside_the_engine():
    outside = {p: u for p, u in uses_in(ROOT).items() if not p.startswith("engine/")}
    assert outside == {}, "start processes with hakbench.engine.process (run, streaming, spawn)"


def test_the_scripts_start_processes_through_the_launcher_too():
    assert uses_in(ROOT.parent / "scripts") == {}


def test_the_engine_starts_processes_in_its_launcher_only():
    engine = {p for p in uses_in(ROOT) if p.startswith("engine/")}
    assert engine - ENGINE_PENDING == LAUNCHER


# ---- the launcher's options, on real processes ----


def _gone(pid: int) -> bool:
    """``pid`` has exited (absent, or a zombie waiting for init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def test_a_timeout_kills_the_whole_process_group():
    # the shell's child outlives a kill of the shell alone; the group kill ends it too
    script = "sleep 30 & echo $!; wait"
    started = time.monotonic()
    ended = process.run(["sh", "-c", script], timeout=0.5)
    assert time.monotonic() - started < 5
    assert ended.timed_out and ended.returncode == -signal.SIGKILL and not ended.ok
    grandchild = int(ended.stdout.split()[0])
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild)


def test_exit_status_and_signal_are_reported():
    exited = process.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (exited.returncode, exited.signal, exited.timed_out) == (3, None, False)
    assert (exited.stdout, exited.stderr, exited.first_line()) == ("out\n", "err\n", "err")
    killed = process.run(["sh", "-c", "kill -SEGV $$"], timeout=30)
    assert (killed.returncode, killed.signal, killed.timed_out) == (-11, signal.SIGSEGV, False)
    missing = process.run(["/nonexistent/program"], timeout=30)
    assert missing.returncode is None and "cannot start /nonexistent/program" in missing.error


def test_rusage_and_wall_clock_come_from_wait4():
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    ended = process.run([sys.executable, "-c", spin], timeout=60)
    assert ended.ok
    cpu = ended.rusage.ru_utime + ended.rusage.ru_stime
    assert cpu >= 0.2 and ended.wall_s >= cpu * 0.5
    assert ended.rusage.ru_maxrss > 1000  # KiB: a Python interpreter's peak


def test_input_env_cwd_and_log(tmp_path):
    fed = process.run(["cat"], input="fed on stdin", timeout=30)
    assert fed.stdout == "fed on stdin"
    here = process.run(
        ["sh", "-c", "echo $ONLY; pwd"], env={"ONLY": "this"}, cwd=tmp_path, timeout=30
    )
    assert here.stdout.split() == ["this", str(tmp_path)]
    raw = process.run(["printf", "\\377"], timeout=30, text=False)
    assert raw.stdout == b"\xff"
    log = tmp_path / "build.log"
    with open(log, "w") as f:
        logged = process.run(["sh", "-c", "echo to-out; echo to-err >&2"], log=f, timeout=30)
    assert logged.ok and logged.stdout == "" and log.read_text().split() == ["to-out", "to-err"]


def _stop_signal_during(fn, after: float = 0.3):
    """Run ``fn`` while a stop signal arrives (the policy's handler, as the CLI installs it,
    inside a section a stop does not cut) -> (fn's result, seconds it took)."""
    interrupts.reset()
    timer = threading.Timer(after, interrupts._handle, (signal.SIGTERM, None))
    started = time.monotonic()
    try:
        with pytest.raises(interrupts.Interrupted), interrupts.deferred():
            timer.start()
            result = fn()
    finally:
        timer.cancel()
        interrupts.reset()
    return result, time.monotonic() - started


def test_a_stop_signal_kills_a_measured_process_and_spares_a_tool():
    measured, took = _stop_signal_during(
        lambda: process.run(["sleep", "5"], timeout=30, stoppable=True)
    )
    assert measured.returncode == -signal.SIGKILL and not measured.timed_out and took < 3
    tool, took = _stop_signal_during(lambda: process.run(["sleep", "1"], timeout=30))
    assert tool.ok and took >= 1


def test_streaming_reads_lines_and_its_watchdog_stops_gently():
    script = 'trap "echo summary; exit 7" TERM; echo ready; while :; do sleep 0.05; done'
    with process.streaming(["sh", "-c", script], dict(os.environ), watchdog_s=0.5, grace_s=5) as s:
        lines = [line.strip() for line in s.lines()]
        code = s.wait()
    assert lines == ["ready", "summary"] and code == 7
    assert s.timed_out.is_set() and not s.stopped.is_set()
    assert s.rusage is not None and s.wall_s >= 0.5


def test_streaming_kills_what_ignores_the_gentle_stop():
    script = 'trap "" TERM; echo ready; while :; do sleep 0.05; done'
    with process.streaming(
        ["sh", "-c", script], dict(os.environ), watchdog_s=0.3, grace_s=0.5
    ) as s:
        assert [line.strip() for line in s.lines()] == ["ready"]
        code = s.wait()
    assert code == -signal.SIGKILL and s.timed_out.is_set()
