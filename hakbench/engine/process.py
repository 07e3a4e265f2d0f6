"""Running one process and shaping its sample: the parts every runner shares.

``hakbench.engine.runner`` (harness programs) and ``hakbench.engine.command_run`` (real
programs through hakrun) both start a process in its own session, wait4 it with a timeout
that kills its whole process group, and fill in the same sample record; those pieces live
here so neither runner imports the other's module.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal as _signal
import subprocess
import threading

from hakbench.engine import interrupts

STDERR_TAIL_LINES = 15


def signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def tail(text: str, n: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def wait_group(proc: subprocess.Popen, timeout: float) -> tuple[int, object, bool]:
    """wait4 the process; on timeout kill its whole process group. -> (status, rusage, timed_out)"""
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
        with interrupts.stopping(stop_group):
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
