"""``perf stat -x,`` CSV: parse it (``hakbench.engine.probes.probe_perf`` asks perf which
events this machine supports).

Field order as perf's tools/perf/util/stat-display.c emits it: value, unit, event, [noise% with -r],
run time, percent running, metric value, metric unit. The value may be the literal
``<not supported>`` or ``<not counted>``: those are recorded as unavailable, never as 0.
The optional noise column is found by its trailing ``%``, not by position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOFTWARE_EVENTS = ("task-clock", "page-faults", "context-switches", "cpu-migrations")
HARDWARE_EVENTS = ("cycles", "instructions", "branch-misses")
UNAVAILABLE = ("<not supported>", "<not counted>")


@dataclass
class PerfCounter:
    event: str  # without the :u / :k modifier
    value: float | None  # None when unavailable
    unit: str = ""
    status: str = "ok"  # ok | not supported | not counted
    noise_pct: float | None = None
    running_pct: float | None = None


@dataclass
class PerfStat:
    counters: dict[str, PerfCounter] = field(default_factory=dict)

    def values(self) -> dict[str, float]:
        return {k: c.value for k, c in self.counters.items() if c.value is not None}

    def unavailable(self) -> list[str]:
        return sorted(k for k, c in self.counters.items() if c.value is None)


def _event_name(raw: str) -> str:
    return raw.split(":", 1)[0].strip()


def parse_perf_csv(text: str, sep: str = ",") -> PerfStat:
    """Parse ``perf stat -x<sep>`` output (stderr or ``-o`` file); other lines are skipped."""
    out = PerfStat()
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(sep)
        if len(f) < 3:
            continue
        raw_value, unit, event = f[0].strip(), f[1].strip(), f[2].strip()
        if not event or (raw_value not in UNAVAILABLE and not _is_number(raw_value)):
            continue
        rest = f[3:]
        noise = None
        if rest and rest[0].strip().endswith("%"):
            noise = _float(rest[0].strip().rstrip("%"))
            rest = rest[1:]
        running = _float(rest[1]) if len(rest) > 1 else None
        name = _event_name(event)
        if raw_value in UNAVAILABLE:
            status = raw_value.strip("<>")
            out.counters[name] = PerfCounter(name, None, unit, status, noise, running)
        else:
            out.counters[name] = PerfCounter(name, float(raw_value), unit, "ok", noise, running)
    return out


def _is_number(s: str) -> bool:
    return _float(s) is not None


def _float(s: str) -> float | None:
    try:
        return float(s)
    except (TypeError, ValueError):
        return None
