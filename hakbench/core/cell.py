"""A cell: one (allocator + variant, profile, workload) combination, ready to run.

The profile's ``HAKMEM_*`` environment applies to libhakmem only: a reference allocator
(system, mimalloc, ...) gets no profile env, so the same profile name can label every row
of a comparison. ``--set`` values apply to the cell whatever its allocator, since the user
asked for them by name.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core import paths
from hakbench.core.allocators import Allocator, resolve_allocator
from hakbench.core.procenv import clean_env
from hakbench.core.profiles import Workload


@dataclass(frozen=True, eq=False)
class Cell:
    allocator: str
    variant: str | None  # hakmem only
    profile: str | None
    workload: Workload
    env: dict  # the cell's own variables (profile env + sets), before clean_env
    build: Path | None = None  # None: the work tree's build/
    sets: dict = field(default_factory=dict)

    def resolved_allocator(self) -> Allocator:
        return resolve_allocator(self.allocator, self.variant or "fast", self.build)

    @property
    def allocator_label(self) -> str:
        return f"{self.allocator}:{self.variant}" if self.variant else self.allocator

    @property
    def key(self) -> str:
        """Stable id: readable parts plus a digest of everything that changes the process."""
        digest = hashlib.sha1(
            json.dumps(
                [
                    sorted(self.env.items()),
                    self.workload.args,
                    str(self.build or ""),
                    *([self.workload.command.fingerprint()] if self.workload.command else []),
                ],
                default=str,
            ).encode()
        ).hexdigest()[:8]
        return f"{self.allocator_label}|{self.profile or '-'}|{self.workload.name}|{digest}"

    @property
    def label(self) -> str:
        parts = [self.allocator_label]
        if self.profile:
            parts.append(self.profile)
        parts.extend(f"{k}={v}" for k, v in sorted(self.sets.items()))
        if self.build:
            parts.append(f"@{Path(self.build).name}")
        return " ".join(parts)

    def command(self, args: tuple[str, ...] | list[str] | None = None) -> tuple[list, dict]:
        """argv and the clean environment of one process of this cell (for a command
        workload: its declared argv, placeholders unexpanded; hakbench.engine.command_run
        runs it)."""
        alloc = self.resolved_allocator()
        cmd = self.workload.command
        if cmd is not None:
            return list(cmd.server or cmd.argv), clean_env({**cmd.env, **self.env}, alloc.preload)
        binary = paths.bench_binary(self.workload.program, build=self.build)
        argv = [str(binary), *(self.workload.args if args is None else args)]
        return argv, clean_env(self.env, alloc.preload)

    def __eq__(self, other) -> bool:
        return isinstance(other, Cell) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)
