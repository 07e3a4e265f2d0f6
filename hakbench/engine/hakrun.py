"""The native helpers of command workloads (hakbench/native/): built on first use.

Command workloads run as ``hakrun REPORT PRELOAD -- program args...`` with PRELOAD =
"allocator:hakprobe.so"; the C files' headers say why: hakrun gives ru_maxrss untainted by
Python's high-water mark and the rusage of the whole reaped tree; hakprobe.so records which
library defines ``malloc`` in the program (the harness's malloc_impl= check, for any
program). Both live in ``build/tools/`` and are rebuilt when their source is newer.
"""

from __future__ import annotations

import os
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import MeasurementError
from hakbench.engine import process

NATIVE = Path(__file__).resolve().parents[1] / "native"


def _built(source: str, output: str, flags: tuple[str, ...] = ()) -> Path:
    """``build/tools/OUTPUT`` compiled from ``hakbench/native/SOURCE`` when missing or older."""
    src = NATIVE / source
    binary = paths.build_dir() / "tools" / output
    if binary.exists() and binary.stat().st_mtime_ns >= src.stat().st_mtime_ns:
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f".{output}.{os.getpid()}")
    cc = os.environ.get("CC", "gcc")
    r = process.run(
        [cc, "-std=c11", "-O2", "-Wall", "-Wextra", *flags, "-o", str(tmp), str(src), "-ldl"],
        timeout=120,
    )
    if r.returncode != 0:
        why = r.error or r.stderr.strip() or f"exit {r.returncode}, timed out: {r.timed_out}"
        raise MeasurementError(f"cannot build {binary}: {why[:300]}")
    os.replace(tmp, binary)
    return binary


def hakrun_binary() -> Path:
    return _built("hakrun.c", "hakrun")


def hakprobe_library() -> Path:
    return _built("hakprobe.c", "hakprobe.so", ("-shared", "-fPIC"))


def parse_report(text: str) -> dict:
    """``exit=0 signal=0 ... nivcsw=3`` -> dict of ints (empty when there is none)."""
    out = {}
    for tok in text.split():
        key, eq, value = tok.partition("=")
        if eq:
            try:
                out[key] = int(value)
            except ValueError:
                continue
    return out


def report_metrics(report: dict) -> dict:
    """Sample metrics from a hakrun report: the process tree's times, peak RSS, faults."""
    user, sys_ = report["user_us"] / 1e6, report["sys_us"] / 1e6
    return {
        "wall_s": report["wall_ns"] / 1e9,
        "cpu_s": user + sys_,
        "user_s": user,
        "sys_s": sys_,
        "maxrss_kb": report["maxrss_kb"],
        "minflt": report["minflt"],
        "majflt": report["majflt"],
        "page_faults": report["minflt"] + report["majflt"],
        "nvcsw": report["nvcsw"],
        "nivcsw": report["nivcsw"],
        "context_switches": report["nvcsw"] + report["nivcsw"],
    }
