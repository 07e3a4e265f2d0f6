"""Load on the record: how busy the machine was while a command measured.

A slow or undecided A/B on a shared VM usually has a plain cause: something else was
running. ``LoadMonitor`` measures it for the span of a measured loop, so the verdict can
say so ("other processes used 0.9 of a core while this ran"):

- **CPU time of other processes.** The kernel's ``cpu`` line of ``/proc/stat`` counts the
  ticks every CPU spent busy (user, nice, system, irq, softirq); the difference over the
  span is the CPU time everything used. Less our own: hakbench's process (``os.times()``,
  all its threads, this monitor's sampler included) and its children, which the kernel adds
  to our account when we wait for them (``os.times()``'s children fields, which also hold
  their waited-for descendants: the harness under ``perf`` or ``hakrun``). What remains,
  over the wall time, is the number of cores other processes kept busy. A child still
  running when the span ends has not been added to our account yet and counts as other.
- **Steal.** On a VM, ``steal`` is time the hypervisor gave a CPU of ours to another guest;
  it is reported apart, in cores too.
- **Run queue.** ``procs_running`` in ``/proc/stat`` is the number of tasks running or
  ready to run at the moment of reading, machine-wide. A background thread samples it
  every ``interval`` seconds; the sampler itself is one of them and is subtracted, our
  measured process is not. A mean above the number of cores means tasks waited for a CPU.

The arithmetic is pure (``parse_system_stat``, ``cpu_load``, ``run_queue``) and tested
on captured ``/proc/stat`` text; ``LoadMonitor`` only reads the files and the clock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
DEFAULT_INTERVAL_S = 0.2
# columns of the `cpu` line: user nice system idle iowait irq softirq steal guest guest_nice
# (guest time is already inside user and nice, so it is not added again)
_BUSY = (0, 1, 2, 5, 6)
_STEAL = 7


@dataclass(frozen=True)
class SystemStat:
    """The machine-wide figures of one reading of /proc/stat (CPU times in ticks)."""

    busy_ticks: int
    steal_ticks: int
    procs_running: int | None


@dataclass(frozen=True)
class OwnTimes:
    """CPU seconds of this process (all threads) and of its waited-for children."""

    self_s: float
    children_s: float

    @property
    def total_s(self) -> float:
        return self.self_s + self.children_s


def parse_system_stat(text: str) -> SystemStat:
    """The aggregate ``cpu`` line and ``procs_running`` of /proc/stat text."""
    busy = steal = None
    running = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:]]
            busy = sum(ticks[i] for i in _BUSY if i < len(ticks))
            steal = ticks[_STEAL] if len(ticks) > _STEAL else 0
        elif fields[0] == "procs_running" and len(fields) > 1:
            running = int(fields[1])
    if busy is None:
        raise ValueError("no aggregate 'cpu' line in /proc/stat text")
    return SystemStat(busy, steal, running)


def own_times() -> OwnTimes:
    t = os.times()
    return OwnTimes(t.user + t.system, t.children_user + t.children_system)


def cpu_load(
    before: SystemStat,
    after: SystemStat,
    own_before: OwnTimes,
    own_after: OwnTimes,
    wall_s: float,
    clk_tck: int,
) -> dict:
    """Cores used over ``wall_s``: by everything, by us (hakbench and its waited children),
    by other processes (the difference, never below 0: ticks and our times are sampled
    separately, so a quiet machine can come out a hair negative) and stolen by the
    hypervisor."""
    if wall_s <= 0:
        raise ValueError("wall time must be positive")
    all_s = (after.busy_ticks - before.busy_ticks) / clk_tck
    own_s = own_after.total_s - own_before.total_s
    steal_s = (after.steal_ticks - before.steal_ticks) / clk_tck
    return {
        "wall_s": round(wall_s, 3),
        "all_cores": round(all_s / wall_s, 3),
        "own_cores": round(own_s / wall_s, 3),
        "other_cores": round(max(0.0, all_s - own_s) / wall_s, 3),
        "steal_cores": round(steal_s / wall_s, 3),
    }


def run_queue(samples: Sequence[int], sampler_tasks: int = 1) -> dict:
    """Mean and max of the sampled ``procs_running``, the sampler itself taken out."""
    xs = [max(0, s - sampler_tasks) for s in samples]
    if not xs:
        return {"run_queue_mean": None, "run_queue_max": None, "run_queue_samples": 0}
    return {
        "run_queue_mean": round(sum(xs) / len(xs), 2),
        "run_queue_max": max(xs),
        "run_queue_samples": len(xs),
    }


def _of_a_core(cores: float) -> str:
    return f"{cores:.1f} of a core" if cores < 1.05 else f"{cores:.1f} cores"


def describe(load: dict | None) -> str:
    """One sentence for a report: what else ran while this measured."""
    if not load or load.get("other_cores") is None:
        return "Load: not recorded."
    text = f"Load: other processes used {_of_a_core(load['other_cores'])}"
    if load.get("run_queue_mean") is not None:
        text += (
            f" (run queue {load['run_queue_mean']:.1f} on average, "
            f"at most {load['run_queue_max']}, on {load.get('cpu_count', '?')} CPUs)"
        )
    text += f" while this ran ({load['wall_s']:.0f} s)"
    if load.get("steal_cores", 0) >= 0.05:
        text += f"; the hypervisor took {_of_a_core(load['steal_cores'])} (steal)"
    return text + "."


class LoadMonitor:
    """``start()`` before the measured loop, ``stop()`` after it (or ``with``): returns the
    load dict (``cpu_load`` and ``run_queue`` figures, the CPU count, the sample interval).
    A machine without /proc/stat gives ``{"available": False, ...}`` instead."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, stat_path: Path = PROC_STAT):
        self.interval_s = interval_s
        self.stat_path = stat_path
        self.result: dict | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: list[int] = []

    def _read(self) -> SystemStat | None:
        try:
            return parse_system_stat(self.stat_path.read_text())
        except (OSError, ValueError):
            return None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            s = self._read()
            if s and s.procs_running is not None:
                self._running.append(s.procs_running)

    def start(self) -> LoadMonitor:
        self._before = self._read()
        self._own_before = own_times()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="load-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        if self.result is not None:
            return self.result
        self._stop.set()
        if self._thread:
            self._thread.join()
        after, own_after = self._read(), own_times()
        wall = time.monotonic() - self._t0
        base = {"cpu_count": os.cpu_count(), "interval_s": self.interval_s}
        if self._before is None or after is None or wall <= 0:
            self.result = {**base, "available": False, "other_cores": None}
        else:
            tck = os.sysconf("SC_CLK_TCK")
            load = cpu_load(self._before, after, self._own_before, own_after, wall, tck)
            self.result = {**base, "available": True, **load, **run_queue(self._running)}
        return self.result

    def __enter__(self) -> LoadMonitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
