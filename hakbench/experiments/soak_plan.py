"""What a soak runs: its targets (an allocator, and for hakmem a profile, soaked by one
``bench_soak`` process each), the epochs, the budgets it is judged against, and the plan as
meta.json records it (so ``soak --resume`` rebuilds it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.allocators import Allocator, resolve_allocator
from hakbench.core.errors import UsageError
from hakbench.core.profiles import resolve_workload
from hakbench.engine.cells import make_cell

SOAK_PROGRAM = "bench_soak"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``20s``, ``10m``, ``1h``, ``500ms`` or a bare number of seconds -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"bad duration '{text}'; use e.g. 20s, 10m, 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


# ---- what runs ----


@dataclass(frozen=True)
class SoakTarget:
    """One allocator (and, for hakmem, one profile) soaked by one process."""

    allocator: Allocator
    profile: str | None
    env: dict  # the profile's HAKMEM_* values; empty for references
    binary: Path
    args: tuple[str, ...]  # the workload's arguments; epochs and leak are added per run

    @property
    def label(self) -> str:
        return f"{self.allocator.label} {self.profile}" if self.profile else self.allocator.label


@dataclass(frozen=True)
class Thresholds:
    """The budgets a soak is judged against. Trends are per hour, so the same leak fails a
    short soak and a long one alike."""

    rss_pct_per_h: float = 5.0  # RSS may grow at most this fast
    ops_pct_per_h: float = 5.0  # ops/s may decline at most this fast
    # ops/s CV across epochs must stay <= this; None: reported, not judged. Off by default:
    # on a shared VM that flips between two speed modes every allocator's CV is 10-50 %
    # (measured here), so a default budget would fail every soak for the machine's sake.
    cv_pct: float | None = None
    # An RSS trend is judged only once the soak saw this much growth: in a short soak RSS
    # moves by a few pages as heaps settle (glibc: +12 KiB in 8 s = +125 %/h), which is no
    # leak; an injected 4 MiB/s leak grows by far more.
    rss_min_growth_kib: float = 1024.0
    syscalls_per_kop: float = 1.0  # mmap+munmap+madvise+brk+mremap per 1000 ops


@dataclass(frozen=True)
class SoakPlan:
    targets: tuple[SoakTarget, ...]
    epochs: int
    epoch_ms: int
    warmup_epochs: int
    leak_kb_per_s: int = 0
    syscall_pass_s: float = 10.0
    thresholds: Thresholds = Thresholds()
    workload: str = "soak"
    allocators: tuple = ()  # the names the targets came from (``plan_targets``): for --resume
    profiles: tuple = ()

    @property
    def duration_s(self) -> float:
        return self.epochs * self.epoch_ms / 1000.0

    def record(self) -> dict:
        """What meta.json keeps of the plan: enough to rebuild it (``plan_of``)."""
        return {
            "allocators": list(self.allocators),
            "profiles": list(self.profiles),
            "workload": self.workload,
            "epochs": self.epochs,
            "epoch_ms": self.epoch_ms,
            "warmup_epochs": self.warmup_epochs,
            "leak_kb_per_s": self.leak_kb_per_s,
            "syscall_pass_s": self.syscall_pass_s,
            "thresholds": vars(self.thresholds),
        }


def plan_of(record: dict) -> SoakPlan:
    """The plan a soak's meta.json recorded, its targets resolved again."""
    return SoakPlan(
        targets=plan_targets(record["allocators"], record["profiles"], record["workload"]),
        epochs=record["epochs"],
        epoch_ms=record["epoch_ms"],
        warmup_epochs=record["warmup_epochs"],
        leak_kb_per_s=record["leak_kb_per_s"],
        syscall_pass_s=record["syscall_pass_s"],
        thresholds=Thresholds(**record["thresholds"]),
        workload=record["workload"],
        allocators=tuple(record["allocators"]),
        profiles=tuple(record["profiles"]),
    )


def default_warmup_epochs(epochs: int) -> int:
    """5 % of the epochs, at least one: heaps grow and caches fill in the first epochs."""
    return max(1, round(epochs * 0.05))


def plan_epochs(duration_s: float, epoch_s: float) -> tuple[int, int]:
    """(number of epochs, epoch length in ms) for a soak of ``duration_s``."""
    epoch_ms = round(epoch_s * 1000)
    if epoch_ms < 10:
        raise UsageError(f"epoch {epoch_s:g}s is too short; use at least 10ms")
    if duration_s < epoch_s:
        raise UsageError(f"duration {duration_s:g}s is shorter than one epoch ({epoch_s:g}s)")
    return max(1, round(duration_s / epoch_s)), epoch_ms


def plan_targets(
    allocators: Sequence[str],
    profiles: Sequence[str],
    workload: str = "soak",
    build: Path | None = None,
) -> tuple[SoakTarget, ...]:
    """Resolve names to targets: hakmem once per profile, every reference once.

    Unknown or unbuilt allocators, unknown profiles, profile values the options table
    rejects and a workload that is not a bench_soak program are UsageErrors (exit 2).
    """
    wl = resolve_workload(workload)
    if wl.program != SOAK_PROGRAM:
        raise UsageError(f"workload '{wl.name}' runs {wl.program}; a soak needs {SOAK_PROGRAM}")
    binary = paths.bench_binary(SOAK_PROGRAM, build=build)
    if not binary.exists():
        raise UsageError(f"{binary} not built (run `make harness`)")
    targets = []
    for name in dict.fromkeys(allocators):
        alloc = resolve_allocator(name, build=build)
        if not alloc.available:
            raise UsageError(f"allocator {alloc.label}: {alloc.missing_reason}")
        # A reference runs once (profiles are libhakmem's); hakmem once per profile.
        names = dict.fromkeys(p.upper() for p in profiles) if alloc.name == "hakmem" else [None]
        for pname in names:
            cell = make_cell(name, wl, profile=pname, build=build)
            targets.append(SoakTarget(alloc, cell.profile, dict(cell.env), binary, wl.args))
    return tuple(targets)
