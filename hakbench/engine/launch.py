"""``Launch`` is how a harness process is started beyond its command: the scheduling choices a
careful benchmarker makes on a shared machine (``--launch`` of ``ab``). The CPU, nice value,
real-time policy and ASLR are attributes of a thread that fork and exec pass on, so
``started_as`` gives them to the calling thread just for the fork and takes them back:
the child starts with them and no wrapper program (taskset, chrt, setarch) costs an exec per
process. The chunks and the spin-up are the harness's own (harness/common.h), passed in its
environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os

from hakbench.core.errors import UsageError

ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>
_PERSONALITY_QUERY = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Launch:
    """How to start a harness process: ``cpu`` pins it (sched_setaffinity; both sides of
    every pair then share that CPU), ``nice`` sets its nice value (below 0 needs root),
    ``fifo`` runs it SCHED_FIFO at that priority (1-99, root; the kernel's RT throttling
    still leaves the others 5 % of each second), ``no_aslr`` turns address-space
    randomisation off (personality ADDR_NO_RANDOMIZE), ``chunks`` times its loop in that many
    chunks (HB_CHUNKS) and ``spin_ms`` spins that long before the timed loop (HB_SPIN_MS).
    ``pin_threads`` (HB_PIN_THREADS, on unless ``pin-threads=0``) pins each thread the
    harness's main thread starts to the next allowed CPU, round-robin, so the scheduler does
    not put a producer and its consumer on one CPU in one run and on two in the next (measured
    on xthread: 15x between the two; docs/measuring.md)."""

    cpu: int | None = None
    nice: int | None = None
    fifo: int | None = None
    no_aslr: bool = False
    chunks: int | None = None
    spin_ms: int | None = None
    pin_threads: int | None = None  # None: on (1)

    KEYS = ("cpu", "nice", "fifo", "no-aslr", "chunks", "spin-ms", "pin-threads")

    @classmethod
    def parse(cls, text: str | None) -> Launch:
        """``"cpu=1,nice=-5,no-aslr,chunks=8"`` -> Launch; "" or None -> the default (none).
        A bad key or value is a UsageError."""
        fields: dict = {}
        for item in filter(None, (x.strip() for x in (text or "").split(","))):
            key, eq, value = item.partition("=")
            if key not in cls.KEYS:
                raise UsageError(f"--launch {item!r}: known keys {', '.join(cls.KEYS)}")
            if key == "no-aslr":
                if eq:
                    raise UsageError("--launch no-aslr takes no value")
                fields["no_aslr"] = True
                continue
            try:
                fields[key.replace("-", "_")] = int(value)
            except ValueError:
                raise UsageError(f"--launch {item!r}: {key} takes a whole number") from None
        launch = cls(**fields)
        launch.check()
        return launch

    def check(self) -> None:
        if self.cpu is not None and self.cpu not in os.sched_getaffinity(0):
            allowed = sorted(os.sched_getaffinity(0))
            raise UsageError(f"--launch cpu={self.cpu}: this process may run on CPUs {allowed}")
        if self.nice is not None and not -20 <= self.nice <= 19:
            raise UsageError(f"--launch nice={self.nice}: from -20 to 19")
        if self.fifo is not None and not 1 <= self.fifo <= 99:
            raise UsageError(f"--launch fifo={self.fifo}: a priority from 1 to 99")
        if self.chunks is not None and not 1 <= self.chunks <= 256:
            raise UsageError(f"--launch chunks={self.chunks}: from 1 to 256 (HB_MAX_CHUNKS)")
        if self.spin_ms is not None and not 0 <= self.spin_ms <= 10000:
            raise UsageError(f"--launch spin-ms={self.spin_ms}: from 0 to 10000")
        if self.pin_threads not in (None, 0, 1):
            raise UsageError(f"--launch pin-threads={self.pin_threads}: 0 or 1")

    def __str__(self) -> str:
        """The ``--launch`` text of this launch ("" for the default)."""
        parts = []
        for key in self.KEYS:
            value = getattr(self, key.replace("-", "_"))
            if value is True:
                parts.append(key)
            elif value is not None and value is not False:
                parts.append(f"{key}={value}")
        return ",".join(parts)

    def env(self) -> dict:
        """The harness's own settings, as environment variables."""
        out = {}
        if self.chunks is not None:
            out["HB_CHUNKS"] = str(self.chunks)
        if self.spin_ms is not None:
            out["HB_SPIN_MS"] = str(self.spin_ms)
        out["HB_PIN_THREADS"] = "0" if self.pin_threads == 0 else "1"
        return out


def _personality(value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.personality.argtypes = [ctypes.c_ulong]
    libc.personality.restype = ctypes.c_int
    old = libc.personality(value)
    if old == -1:
        raise OSError(ctypes.get_errno(), "personality")
    return old


@contextlib.contextmanager
def started_as(launch: Launch | None):
    """Give the calling thread ``launch``'s CPU, nice value, policy and personality for the
    body (a fork: the child inherits them), then take the old ones back. Raises OSError
    when the kernel refuses one (nice below 0 or SCHED_FIFO without the privilege)."""
    if launch is None or launch == Launch():
        yield
        return
    undo = []
    try:
        if launch.cpu is not None:
            old_cpus = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {launch.cpu})
            undo.append(lambda: os.sched_setaffinity(0, old_cpus))
        if launch.nice is not None:
            old_nice = os.getpriority(os.PRIO_PROCESS, 0)  # PRIO_PROCESS 0: this thread
            os.setpriority(os.PRIO_PROCESS, 0, launch.nice)
            undo.append(lambda: os.setpriority(os.PRIO_PROCESS, 0, old_nice))
        if launch.no_aslr:
            old_persona = _personality(_PERSONALITY_QUERY)
            _personality(old_persona | ADDR_NO_RANDOMIZE)
            undo.append(lambda: _personality(old_persona))
        if launch.fifo is not None:
            old_policy, old_param = os.sched_getscheduler(0), os.sched_getparam(0)
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(launch.fifo))
            undo.append(lambda: os.sched_setscheduler(0, old_policy, old_param))
        yield
    finally:
        for step in reversed(undo):
            step()
