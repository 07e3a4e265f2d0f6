"""The hakrun exec wrapper (hakbench/native/hakrun.c): built on first use, report parsed.

Command workloads run as ``hakrun REPORT PRELOAD -- program args...``; the C file's header
says why (ru_maxrss untainted by Python's high-water mark, rusage of the whole reaped
tree, the preload proven by /proc/PID/maps). The binary lives in ``build/tools/hakrun``
and is rebuilt when the source is newer.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hakbench import paths
from hakbench.errors import MeasurementError

SOURCE = Path(__file__).resolve().parent / "native" / "hakrun.c"


def hakrun_binary() -> Path:
    """Path of the built wrapper, compiling it with the system C compiler when needed."""
    binary = paths.build_dir() / "tools" / "hakrun"
    if binary.exists() and binary.stat().st_mtime_ns >= SOURCE.stat().st_mtime_ns:
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f".hakrun.{os.getpid()}")
    cc = os.environ.get("CC", "gcc")
    r = subprocess.run(
        [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-o", str(tmp), str(SOURCE)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise MeasurementError(f"cannot build {binary}: {r.stderr.strip()[:300]}")
    os.replace(tmp, binary)
    return binary


def parse_report(text: str) -> dict:
    """``exit=0 signal=0 ... preload_mapped=1`` -> dict of ints (empty when there is none)."""
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
