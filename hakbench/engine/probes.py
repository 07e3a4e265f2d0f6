"""What the machine's tools say before anything is measured: which perf events work here
(``probe_perf``) and libhakmem's options table (``load_options``, from the built
``hakmem-options --json``). Both run a tool once (the engine's launcher) and keep the answer
for the process; the parsing is ``hakbench.collect.perfstat``'s."""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

from hakbench.collect.perfstat import HARDWARE_EVENTS, SOFTWARE_EVENTS, parse_perf_csv
from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import process

_PROBE: dict | None = None


def probe_perf() -> dict:
    """Which events work here: ``{"available": bool, "supported": [...], "unsupported": [...],
    "note": str}``. Runs ``perf stat`` once per process on ``true``."""
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe_perf()
    return _PROBE


def _probe_perf() -> dict:
    events = SOFTWARE_EVENTS + HARDWARE_EVENTS
    if shutil.which("perf") is None:
        return {
            "available": False,
            "supported": [],
            "unsupported": list(events),
            "note": "perf not installed (apt-get install linux-perf)",
        }
    ended = process.run(["perf", "stat", "-x,", "-e", ",".join(events), "true"], timeout=20)
    st = parse_perf_csv(ended.stderr)
    supported = [e for e in events if e in st.counters and st.counters[e].value is not None]
    unsupported = [e for e in events if e not in supported]
    if ended.error or ended.timed_out:
        note = f"perf failed: {ended.error or 'timed out'}"
    elif not unsupported:
        note = "all events supported"
    else:
        note = "not supported on this machine: " + ", ".join(unsupported)
    return {
        "available": bool(supported),
        "supported": supported,
        "unsupported": unsupported,
        "note": note,
    }


def load_options(binary: Path | None = None) -> tuple[dict, ...]:
    """The allocator's options table from ``build/bin/hakmem-options --json``."""
    binary = (binary or paths.options_binary()).resolve()
    if not binary.exists():
        raise UsageError(f"{binary} not built; run `make build`")
    return _options_of(binary, binary.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _options_of(binary: Path, _mtime_ns: int) -> tuple[dict, ...]:
    ended = process.run([str(binary), "--json"], timeout=30)
    if not ended.ok:
        raise UsageError(f"{binary} --json failed: {(ended.error or ended.stderr).strip()[:200]}")
    return tuple(json.loads(ended.stdout))
