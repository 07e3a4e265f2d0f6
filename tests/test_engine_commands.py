"""The last commands brought under the engine: gate, hotspots and misuse.

The gate's exact counts run two at a time through ``Session.take_concurrent``; a real
SIGTERM or SIGKILL of `hakbench gate` while they run must keep every stored run and count,
and `gate --resume DIR` must measure only the rest and reach the verdict of an
uninterrupted run. A stopped `hotspots` records again on --resume, a finished one is
reported without recording again; a stopped or killed `misuse` run keeps its probes and
--resume completes it. Each --resume elsewhere (another machine or tree) is one line,
exit 2."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hakbench.core import paths
from hakbench.engine import engine, interrupts, process
from hakbench.engine.store import RunStore

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
