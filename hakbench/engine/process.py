"""hakbench's one process launcher, and the sample record every runner fills in.

Nothing else in hakbench starts a process (tests/test_launcher.py keeps it so): builds,
git, perf, valgrind, strace and the measured programs all start here. ``run`` runs a
program to its end: in its own session (a Ctrl-C at the terminal reaches hakbench only),
a timeout that kills its whole process group, its exit status or signal, wall clock and
rusage (wait4), stdout and stderr captured or written to a log, and, for a measured
process (``stoppable``), the one signal policy (``hakbench.engine.interrupts``: a stop
signal kills its group). ``streaming`` reads a process's stdout line by line while it runs,
with a watchdog and a gentle stop (SIGTERM, then SIGKILL after a grace). ``spawn`` and
``wait_group`` are the two steps beneath both; the sample runners use them directly.

``hakbench.engine.runner`` (harness programs) and ``hakbench.engine.command_run`` (real
programs through hakrun) both start a process in its own session, wait4 it with a timeout
that kills its whole process group, and fill in the same sample record; those pieces live
here so neither runner imports the other's module.

``Launch`` (``hakbench.engine.launch``) is how a harness process is started beyond its
command: pinned, niced, real-time, without ASLR.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import signal as _signal
import subprocess
import tempfile
import threading
import time

from hakbench.engine import interrupts
from hakbench.engine.launch import Launch, started_as

DEVNULL = subprocess.DEVNULL
TimeoutExpired = subprocess.TimeoutExpired  # what run_captured raises


def spawn(argv: list, env: dict, launch: Launch | None = None, **popen) -> subprocess.Popen:
    """Popen ``argv`` in its own session (so a timeout can kill its process group), started
    as ``launch`` says: its environment gets the harness settings, the fork the thread's."""
    if launch is not None:
        env = {**env, **launch.env()}
    with started_as(launch):
        return subprocess.Popen(argv, env=env, start_new_session=True, **popen)


STDERR_TAIL_LINES = 15


def signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def tail(text: str, n: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s whole process group and reap it (a started process that must not
    outlive an error)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, _signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, 0)
    proc.returncode = -_signal.SIGKILL


def wait_group(
    proc: subprocess.Popen, timeout: float, *, stoppable: bool = True
) -> tuple[int, object, bool]:
    """wait4 the process; on timeout kill its whole process group; a stop signal kills it
    too unless the process is not ``stoppable`` (a tool that finishes a report: the stop
    waits for it). -> (status, rusage, timed_out)"""
    timed_out = threading.Event()

    def stop_group():
        try:
            os.killpg(proc.pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass

    def kill_group():
        timed_out.set()
        stop_group()

    timer = threading.Timer(timeout, kill_group)
    timer.daemon = True  # Ctrl-C can land in start() itself: never let the timer hold exit
    timer.start()
    try:
        # a stop signal (hakbench.engine.interrupts) ends the process group at once
        with interrupts.stopping(stop_group) if stoppable else contextlib.nullcontext():
            _, status, ru = os.wait4(proc.pid, 0)
    except KeyboardInterrupt:
        kill_group()
        try:
            os.wait4(proc.pid, 0)
        except ChildProcessError:  # Ctrl-C landed just after wait4 had reaped it
            pass
        proc.returncode = -1
        raise
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, ru, timed_out.is_set()


@dataclasses.dataclass
class Ended:
    """How a process started by ``run`` ended. ``returncode`` is its exit code (negative: the
    signal that ended it; None: it could not start, ``error`` says why); ``rusage`` is
    wait4's (None when it did not start)."""

    argv: list
    returncode: int | None = None
    timed_out: bool = False
    wall_s: float | None = None
    rusage: object = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    @property
    def ok(self) -> bool:
        """Exited 0 within its time."""
        return self.returncode == 0 and not self.timed_out

    def first_line(self, of: str = "stderr") -> str:
        """The last non-empty line of ``of`` (what a failing tool said last), or ""."""
        lines = getattr(self, of).strip().splitlines()
        return lines[-1].strip() if lines else ""


def _stdin_file(stack: contextlib.ExitStack, input: str | bytes | None, stdin):
    if input is None:
        return subprocess.DEVNULL if stdin is None else stdin
    f = stack.enter_context(tempfile.TemporaryFile())
    f.write(input.encode() if isinstance(input, str) else input)
    f.seek(0)
    return f


def run(
    argv: list,
    *,
    timeout: float,
    env: dict | None = None,
    cwd=None,
    input: str | bytes | None = None,
    stdin=None,
    log=None,
    stoppable: bool = False,
    launch: Launch | None = None,
    text: bool = True,
) -> Ended:
    """Run ``argv`` to its end in its own session and say how it ended (never raises for a
    process that failed, timed out or could not start).

    ``timeout`` kills its whole process group (``Ended.timed_out``). ``env`` defaults to
    hakbench's own environment. ``input`` is fed on stdin (else ``stdin``, a file, or
    /dev/null). ``log``, an open file, takes stdout and stderr both (``Ended.stdout`` and
    ``stderr`` are then empty); otherwise both are captured as text. A ``stoppable``
    process (a measured one) is killed by a stop signal, the one signal policy of
    ``hakbench.engine.interrupts``; any other finishes while the stop waits. A Ctrl-C
    without hakbench's handler (a library call) kills its group and raises, as always.
    ``launch`` starts it as a harness process is started (``Launch``). ``text=False`` keeps
    stdout and stderr as bytes (an output whose digest is checked)."""
    argv = [str(a) for a in argv]
    env = dict(os.environ) if env is None else env
    with contextlib.ExitStack() as stack:
        if log is None:
            out = stack.enter_context(tempfile.TemporaryFile())
            err = stack.enter_context(tempfile.TemporaryFile())
        else:
            out, err = log, subprocess.STDOUT
        t0 = time.perf_counter()
        try:
            proc = spawn(
                argv,
                env,
                launch,
                cwd=cwd,
                stdin=_stdin_file(stack, input, stdin),
                stdout=out,
                stderr=err,
            )
        except OSError as e:
            return Ended(argv, error=f"cannot start {argv[0]}: {e}", stderr=f"{e}\n")
        status, ru, timed_out = wait_group(proc, timeout, stoppable=stoppable)
        ended = Ended(
            argv, os.waitstatus_to_exitcode(status), timed_out, time.perf_counter() - t0, ru
        )
        if log is None:
            ended.stdout, ended.stderr = (_read(f, text) for f in (out, err))
    return ended


def _read(f, text: bool = True) -> str | bytes:
    f.seek(0)
    data = f.read()
    return data.decode(errors="replace") if text else data


def output(argv: list, *, timeout: float = 60, cwd=None, env: dict | None = None) -> str | None:
    """The stdout of a tool that exited 0 (``run``), else None: it failed, timed out or is
    not installed. For questions to git, dpkg-query, a compiler."""
    ended = run(argv, timeout=timeout, cwd=cwd, env=env)
    return ended.stdout if ended.ok else None


def run_captured(argv: list, env: dict, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a process run like a sample's (``run``, stoppable:
    a stop signal kills its group and the caller's sample is cut); a timeout raises
    ``subprocess.TimeoutExpired``. For tools measured like a sample (callgrind,
    ``perf record``)."""
    ended = run(argv, env=env, timeout=timeout, stoppable=True)
    if ended.error is not None:
        raise OSError(ended.error)
    if ended.timed_out:
        raise subprocess.TimeoutExpired(argv, timeout)
    return ended.returncode, ended.stdout, ended.stderr


class Streaming:
    """A process read line by line while it runs (``streaming``): ``lines()`` yields its
    stdout, its stderr is drained meanwhile (it never blocks on a full pipe) into
    ``stderr_lines``; ``stop()`` ends it gently (SIGTERM, SIGKILL after ``grace_s``) and
    never blocks, so a signal handler or a timer may call it."""

    def __init__(self, argv: list, env: dict, grace_s: float):
        self.argv, self.grace_s = argv, grace_s
        self.started = time.monotonic()
        self.proc = spawn(
            argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.pid = self.proc.pid
        self.stderr_lines: list[str] = []
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        self.stopped = threading.Event()  # a stop signal ended it
        self.timed_out = threading.Event()  # the watchdog ended it
        self.returncode: int | None = None
        self.rusage = None

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def lines(self):
        yield from self.proc.stdout

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(_signal.SIGTERM)
        killer = threading.Timer(
            self.grace_s, lambda: self.proc.poll() is None and self.proc.kill()
        )
        killer.daemon = True
        killer.start()

    def wait(self) -> int:
        """wait4 it: its exit code (negative: the signal), its rusage kept."""
        _, status, self.rusage = os.wait4(self.pid, 0)
        self.returncode = self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started


@contextlib.contextmanager
def streaming(argv: list, env: dict, *, watchdog_s: float, grace_s: float):
    """Start ``argv`` (its own session) for the body to read (``Streaming``). A stop signal
    (the one signal policy) sets ``stopped`` and stops it gently, so it can print its
    summary; after ``watchdog_s`` the watchdog sets ``timed_out`` and stops it the same way.
    Leaving the body before ``wait()`` (an exception) stops it too; the stderr drain is
    joined on the way out (at most ``grace_s``)."""
    s = Streaming(argv, env, grace_s)

    def stop_signal() -> None:
        s.stopped.set()
        s.stop()

    def watchdog() -> None:
        s.timed_out.set()
        s.stop()

    timer = threading.Timer(watchdog_s, watchdog)
    timer.daemon = True
    timer.start()
    try:
        with interrupts.stopping(stop_signal):
            yield s
    finally:
        timer.cancel()
        if s.returncode is None:
            s.stop()
        s._drain.join(grace_s)


def new_sample(cell, phase: str) -> dict:
    """A sample of ``cell`` with nothing measured yet (status "error" until filled in)."""
    return {
        "cell": cell.key,
        "phase": phase,
        "allocator": cell.allocator_label,
        "variant": cell.variant,
        "profile": cell.profile,
        "workload": cell.workload.name,
        "env": dict(cell.env),
        "argv": None,
        "status": "error",
        "returncode": None,
        "signal": None,
        "error": None,
        "stderr_tail": "",
        "metrics": {},
        "unavailable": [],
        "harness": {},
        "alloc_stats": {},
        "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
        "wall_s": None,
    }
