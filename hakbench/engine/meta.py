"""Provenance: what produced a results directory (``meta.json``).

Every number in a report says where it came from: commit, variant, build flags, host,
kernel, compiler, glibc, THP and overcommit settings, perf availability, command line.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import shlex
import sys
from pathlib import Path

from hakbench import __version__
from hakbench.core import paths, suites
from hakbench.engine import process
from hakbench.engine.probes import probe_perf


def _run(argv: list[str], cwd: Path | None = None) -> str | None:
    out = process.output(argv, timeout=20, cwd=cwd)
    return out.strip() if out is not None else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def git_state(root: Path | None = None) -> dict:
    root = root or paths.repo_root()
    commit = _run(["git", "rev-parse", "HEAD"], root)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], root)
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def cpu_model() -> str | None:
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _selected(text: str | None) -> str | None:
    """``always [madvise] never`` -> ``madvise``."""
    if not text:
        return text
    if "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


# ---- the machine a measurement belongs to (calibrations, resumes) ----


def _mem_total_gib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine() -> dict:
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "mem_gib": _mem_total_gib(),
        "kernel": platform.release(),
    }


def fingerprint(m: dict | None = None) -> str:
    """12 hex digits naming a machine: host name, CPU model and count, memory. (Not the
    kernel: this VM's kernel build string changes from boot to boot.)"""
    m = m or machine()
    key = json.dumps([m.get(k) for k in ("hostname", "cpu", "cpu_count", "mem_gib")])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def reference_packages() -> dict:
    """Debian package -> installed version of every reference allocator (None: absent)."""
    from hakbench.core.allocators import REFERENCES

    pkgs = [pkg for _, pkg in REFERENCES.values()]
    # exit status 1 when one is not installed: the others are still printed
    argv = ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *pkgs]
    out = process.run(argv, timeout=20).stdout
    found = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {pkg: found.get(pkg) for pkg in pkgs}


def build_info(variant: str | None, build: Path | None = None) -> dict:
    """Flags the allocator's Makefile recorded for a variant, when it recorded them."""
    if not variant:
        return {}
    p = (build or paths.build_dir()) / variant / "buildinfo.txt"
    text = _read(str(p))
    return {"build_info": text} if text else {}


# The hakbench command line as the CLI received it (set by cli.main; sys.argv is a test
# runner's when the CLI is invoked in-process).
INVOCATION: list[str] | None = None


def command_line() -> list[str]:
    return list(INVOCATION) if INVOCATION is not None else list(sys.argv)


def collect_meta(command: list[str] | str | None = None, **extra) -> dict:
    """The provenance dict; ``extra`` keys are added verbatim (variant, profiles, ...)."""
    cmd = command if command is not None else command_line()
    if isinstance(cmd, list):
        cmd = shlex.join(cmd)
    gcc = _run(["gcc", "--version"])
    meta = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hakbench_version": __version__,
        "command": cmd,
        "cwd": os.getcwd(),
        "git": git_state(),
        "hostname": platform.node(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
        "compiler": gcc.splitlines()[0] if gcc else None,
        "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
        "python": platform.python_version(),
        "thp_enabled": _selected(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "thp_defrag": _selected(_read("/sys/kernel/mm/transparent_hugepage/defrag")),
        "overcommit_memory": _read("/proc/sys/vm/overcommit_memory"),
        "perf": probe_perf(),
        "valgrind": _run(["valgrind", "--version"]),
        "reference_packages": reference_packages(),
    }
    used = suites.used_suites()
    if used:  # the public suites whose programs this run's cells were bound to
        meta["suites"] = used
    meta.update(build_info(extra.get("variant")))
    meta.update(extra)
    return meta


def cell_meta(cell, kind: str, **extra) -> dict:
    """The provenance of a run of one cell (``run``, ``hotspots``): which cell, in which
    build variant and environment."""
    return collect_meta(
        kind=kind, variant=cell.variant, cell=cell.key, cell_label=cell.label, env=cell.env, **extra
    )
