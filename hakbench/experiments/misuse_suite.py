"""mimalloc-bench's security probes as a misuse family (issue #36): the suite's
``security/`` programs, each one process under the allocator, and a few of its benchmark
programs run shortly as the check that the allocator runs real programs at all.

The suite is found and built by ``hakbench.core.suites`` (``--suite-dir``,
``$HAKBENCH_MIMALLOC_BENCH`` or ``make suites``' clone; cmake out of tree, cached by
commit); its probes are the executables of the build's ``security/`` directory, as
``bench.sh`` takes them. ``hakbench.tables.misuse_suite_model`` says what a record means;
``hakbench.experiments.misuse`` runs these beside the lab's own patterns through one engine
session (one run directory, one progress bar, resume, the stop signals).
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import suites
from hakbench.core.allocators import Allocator
from hakbench.core.errors import UsageError
from hakbench.core.procenv import clean_env
from hakbench.core.profiles import closest
from hakbench.engine import process, suite_build
from hakbench.engine.hakrun import hakprobe_library
from hakbench.tables.misuse_model import compact_stderr
from hakbench.tables.misuse_suite_model import (
    BENIGN,
    Benign,
    compact_output,
    probe_order,
)

# The probes end in milliseconds; the slowest (zero_on_malloc_large: 4096 x 256 KiB blocks
# filled) took 1.3 s under glibc at load 5. bench.sh gives each 1 s; on a shared 2-core
# machine that would call a slow allocator "hung".
PROBE_TIMEOUT_S = 10.0
BENIGN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SuiteProbes:
    """A built suite: what ``meta.json`` records of it, its build directory, the probes
    chosen (names of ``security/``'s executables) and the benign programs."""

    info: dict
    build: Path
    probes: tuple[str, ...]
    benign: tuple[Benign, ...] = BENIGN

    def probe_path(self, probe: str) -> Path:
        return self.build / "security" / probe

    def program_path(self, program: str) -> Path:
        return self.build / program

    def files(self) -> list[Path]:
        """Every program a run executes (for a resumed run's identity)."""
        return [
            *(self.probe_path(p) for p in self.probes),
            *(self.program_path(b.program) for b in self.benign),
        ]

    def record(self) -> dict:
        return {
            **self.info,
            "build_dir": str(self.build),
            "probes": list(self.probes),
            "benign": [{"program": b.program, "args": list(b.args)} for b in self.benign],
            "probe_timeout": PROBE_TIMEOUT_S,
            "benign_timeout": BENIGN_TIMEOUT_S,
        }


def list_probes(build: Path) -> list[str]:
    """The executables of ``build/security`` (what ``bench.sh`` runs), in the probes' order."""
    security = build / "security"
    if not security.is_dir():
        return []
    found = [p.name for p in security.iterdir() if p.is_file() and os.access(p, os.X_OK)]
    return probe_order(found)


def select_names(known: list[str], wanted: Iterable[str], what: str, listing: str) -> list[str]:
    """Names or shell globs -> the known names they match, in ``known``'s order; one that
    matches nothing is a UsageError naming the closest (``what``: "misuse pattern",
    ``listing``: the command that lists them)."""
    wanted = list(wanted)
    if not wanted:
        return list(known)
    chosen: set[str] = set()
    for w in wanted:
        hits = [p for p in known if fnmatch.fnmatchcase(p, w)]
        if not hits:
            hint = closest(w, known)
            raise UsageError(
                f"unknown {what} '{w}'" + (f"; closest: {hint}" if hint else "") + f" ({listing})"
            )
        chosen.update(hits)
    return [p for p in known if p in chosen]


def open_suite(
    explicit: str | os.PathLike | None = None,
    wanted: Iterable[str] = (),
    cache_root: Path | None = None,
) -> SuiteProbes:
    """The suite's probes, built on first use (``hakbench.core.suites``'s errors pass
    through: no checkout, exit 5; a failed build, exit 3). A build without probes, or a
    benign program missing from it, is a SuiteError too."""
    suite_dir = suites.resolve_suite_dir(explicit)
    build = suite_build.ensure_built(suite_dir, cache_root)
    known = list_probes(build)
    if not known:
        raise suites.SuiteError(f"{build / 'security'} holds no probe programs")
    missing = [b.program for b in BENIGN if not (build / b.program).is_file()]
    if missing:
        raise suites.SuiteError(
            f"{build} lacks the benign programs {', '.join(missing)} the probes are judged by"
        )
    chosen = select_names(known, wanted, "suite probe", "hakbench misuse --list names them")
    return SuiteProbes(suite_build.suite_info(suite_dir, build), build, tuple(chosen))


def resumed_suite(record: dict | None) -> SuiteProbes | None:
    """The ``SuiteProbes`` a run's ``meta.json`` recorded (``SuiteProbes.record``)."""
    if not record:
        return None
    own = ("build_dir", "probes", "benign", "probe_timeout", "benign_timeout")
    info = {k: v for k, v in record.items() if k not in own}
    benign = {b.program: b for b in BENIGN}
    chosen = tuple(benign[b["program"]] for b in record["benign"] if b["program"] in benign)
    return SuiteProbes(info, Path(record["build_dir"]), tuple(record["probes"]), chosen)


# ---- running ----


def run_ended(argv: list[str], env: dict, timeout: float) -> dict:
    """One process in its own session, however it ends: exit code (negative: the signal),
    whether hakbench's timeout ended it, wall time, stdout and stderr (raw text). A
    program that cannot start has returncode None and the reason on stderr. A stop signal
    kills it (the engine's launcher, stoppable: it is a measured process)."""
    r = process.run(argv, env=env, timeout=timeout, stoppable=True)
    if r.error is not None:
        return {
            **{"returncode": None, "signal": None, "timed_out": False, "wall_s": None},
            **{"stdout": "", "stderr": r.error + "\n"},
        }
    return {
        "returncode": r.returncode,
        "signal": r.signal,
        "timed_out": r.timed_out,
        "wall_s": round(r.wall_s, 4),
        "stdout": r.stdout,
        "stderr": r.stderr,
    }


def _identity(alloc: Allocator) -> dict:
    return {
        "label": alloc.label,
        "allocator": alloc.name,
        "variant": alloc.variant or "",
        "expect_impl": alloc.expect_impl,
    }


def run_suite_probe(
    alloc: Allocator, suite: SuiteProbes, probe: str, *, timeout: float = PROBE_TIMEOUT_S
) -> dict:
    """One security probe under ``alloc``: the raw record (a process that died is the
    result, never an exception)."""
    ended = run_ended([str(suite.probe_path(probe))], clean_env({}, alloc.preload), timeout)
    return {
        "set": "suite",
        **_identity(alloc),
        "probe": probe,
        **ended,
        "stdout": compact_output(ended["stdout"]),
        "stderr": compact_stderr(ended["stderr"]),
    }


def run_benign(
    alloc: Allocator, suite: SuiteProbes, benign: Benign, *, timeout: float = BENIGN_TIMEOUT_S
) -> dict:
    """One benign program under ``alloc``, with hakprobe.so preloaded ahead of it to record
    which library defines the program's ``malloc`` (the proof the preload took effect)."""
    with tempfile.TemporaryDirectory(prefix="hakbench-benign-") as tmp:
        env = clean_env({}, None)
        env["LD_PRELOAD"] = ":".join(str(p) for p in (hakprobe_library(), alloc.preload) if p)
        env["HAKPROBE_OUT"] = str(Path(tmp) / "malloc_impl")
        argv = [str(suite.program_path(benign.program)), *benign.args]
        ended = run_ended(argv, env, timeout)
        impl_file = Path(tmp) / "malloc_impl"
        impl = impl_file.read_text() if impl_file.exists() else None
    return {
        "set": "benign",
        **_identity(alloc),
        "program": benign.program,
        "args": list(benign.args),
        "preload": str(alloc.preload) if alloc.preload else "",
        "malloc_impl": impl,
        **ended,
        "stdout": compact_output(ended["stdout"]),
        "stderr": compact_stderr(ended["stderr"]),
    }
