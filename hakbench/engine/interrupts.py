"""The one signal policy of every hakbench command: SIGINT, SIGTERM and SIGHUP alike.

A Ctrl-C, a ``kill`` (SIGTERM: a cancelled CI job, systemd, a batch scheduler) and a closed
terminal (SIGHUP) all mean "stop now, keep what finished". The CLI installs one handler for
the three (``installed``), and on the first of them:

- the process a sample is waiting for is stopped (its process group killed: a stopper
  registered by ``stopping``, e.g. ``hakbench.engine.process.wait_group``); a sample cut this way
  is not a finished sample and is never stored (``hakbench.engine.engine.take``);
- inside a ``deferred`` section (storing a finished sample; a soak process, whose stopper
  sends it SIGTERM so it prints its summary) nothing is cut: the stop waits for the
  section's end;
- elsewhere ``Interrupted`` (a ``KeyboardInterrupt``) is raised at once, so every command's
  ``except KeyboardInterrupt`` writes its report from what finished;
- the exit code is 128 + the signal: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP)
  (``exit_code``).

Once the measuring is over the report is written inside ``finishing``: a stop signal there
is recorded and the CLI exits with its code when the command returns. Later signals are
recorded but raise nothing: the report being written from what finished
is not cut off by an impatient second Ctrl-C (SIGKILL still ends everything, and every
finished sample is on disk already). Without the CLI (a library call, a test) no handler is
installed and a Ctrl-C is Python's own KeyboardInterrupt, exit code 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

from hakbench.core.errors import EXIT_INTERRUPTED

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal turned into the exception every command already handles."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    received: int | None = None  # the first stop signal of this command
    depth = 0  # nested deferred sections
    pending = False  # a signal arrived inside a deferred section
    stops: dict = {}  # thread id -> how many of its running processes a signal stopped
    stoppers: list = []  # (thread id, callback that stops its running process gently)
    uncut = False  # the first signal came while no process ran (one is about to start)
    finishing = 0  # nested finishing sections (nothing is cut there)


_state = _State()


def _handle(signum, frame) -> None:
    first = _state.received is None
    if first:
        _state.received = signum
    for thread, stop in list(_state.stoppers):
        _count_stop(thread)
        stop()
    if first and _state.depth and not _state.stoppers and not _state.finishing:
        _state.uncut = True  # a process being started now is stopped as it registers
    if _state.depth:
        _state.pending = True
        return
    if first:
        raise Interrupted(signum)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The policy for one command (the CLI wraps every command in it; main thread only)."""
    reset()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handle) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def exit_outside_commands() -> None:
    """Outside a command (before it starts, and after it returned while the process winds down)
    a stop signal ends the process at once with 128 + the signal, as within one: there is
    nothing left to write, and the default action would report a kill instead (-15)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        signal.signal(s, lambda signum, frame: os._exit(128 + signum))


def _count_stop(thread: int) -> None:
    _state.stops[thread] = _state.stops.get(thread, 0) + 1


def reset() -> None:
    _state.received, _state.depth, _state.pending, _state.stops = None, 0, False, {}
    _state.uncut, _state.finishing = False, 0
    _state.stoppers = []


class deferred:
    """A section no stop signal cuts: the stop (``Interrupted``) comes at its end, when the
    body finished without an exception of its own (``then_raise``; else the stop is only
    recorded: see ``finishing``)."""

    def __init__(self, *, then_raise: bool = True):
        self.then_raise = then_raise

    def __enter__(self):
        _state.depth += 1
        _state.finishing += not self.then_raise
        return self

    def __exit__(self, exc_type, exc, tb):
        _state.depth -= 1
        _state.finishing -= not self.then_raise
        _state.uncut = False
        if _state.depth == 0 and _state.pending:
            _state.pending = False
            if exc_type is None and self.then_raise:
                raise Interrupted(_state.received or signal.SIGINT)
        return False


def finishing() -> deferred:
    """The section that writes the report of what finished: a stop signal arriving there
    cuts nothing and raises nothing (the CLI exits 128 + the signal once the command
    returns, ``received()`` says it came)."""
    return deferred(then_raise=False)


@contextlib.contextmanager
def stopping(stop: Callable[[], None]) -> Iterator[None]:
    """While the body runs a process, a stop signal calls ``stop`` (from the handler: it
    must not block) to end that process gently. A signal that came while no process ran
    yet (between a sample's start and its process's launch) stops it as it registers: the
    sample is cut, as if the signal had come a moment later. Any thread may register one
    (``hakbench.engine.engine.Session.take_concurrent`` runs samples in worker threads);
    the stop is counted for that thread (``stops``)."""
    entry = (threading.get_ident(), stop)
    _state.stoppers.append(entry)
    if _state.uncut:
        _state.uncut = False
        _count_stop(entry[0])
        stop()
    try:
        yield
    finally:
        _state.stoppers.remove(entry)


def received() -> int | None:
    """The stop signal this command received, if any."""
    return _state.received


def stops() -> int:
    """How many processes the calling thread waited for that a stop signal has ended so far
    (a counter: a sample whose run saw it move was cut). Per thread, so a sample run beside
    others (``Session.take_concurrent``) counts only the stops of its own process."""
    return _state.stops.get(threading.get_ident(), 0)


def signal_name(signum: int | None = None) -> str:
    signum = signum or _state.received or signal.SIGINT
    return signal.Signals(signum).name


def exit_code() -> int:
    """128 + the stop signal received (130 when none was seen: a plain KeyboardInterrupt)."""
    return 128 + _state.received if _state.received else EXIT_INTERRUPTED


def exit_stopped(what: str, resume: str | None = None) -> NoReturn:
    """End a command that a stop signal cut, once its report of what finished is written:
    one line on stderr, ``hakbench: interrupted by SIGTERM; <what>[; continue with:
    <resume>]``, and exit 128 + the signal (every measuring command ends so)."""
    line = f"hakbench: interrupted by {describe()}; {what}"
    print(line + (f"; continue with: {resume}" if resume else ""), file=sys.stderr, flush=True)
    raise SystemExit(exit_code())


def describe() -> str:
    """``Ctrl-C (SIGINT)``, ``SIGTERM``, ``SIGHUP (terminal closed)``: for reports."""
    return {
        signal.SIGINT: "Ctrl-C (SIGINT)",
        signal.SIGTERM: "SIGTERM",
        signal.SIGHUP: "SIGHUP (terminal closed)",
    }.get(_state.received or signal.SIGINT, signal_name())
