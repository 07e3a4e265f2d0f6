"""Making a cell from names (``make_cell``): the allocator, workload and profile resolved,
a public suite's program bound to its checkout and build, and the ``HAKMEM_*`` settings
checked against the built options table. Binding and checking run tools (cmake, git,
``hakmem-options``), so this lives in the engine; ``hakbench.core.cell`` is the cell itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hakbench.core import paths
from hakbench.core.allocators import resolve_allocator
from hakbench.core.cell import Cell
from hakbench.core.errors import UsageError
from hakbench.core.profiles import (
    Workload,
    load_profiles,
    resolve_profile,
    resolve_workload,
    validate_env,
)
from hakbench.engine.probes import load_options
from hakbench.engine.revs import rev_profiles_dir
from hakbench.engine.suite_build import bind_workload


def make_cell(
    allocator: str,
    workload: str | Workload,
    *,
    variant: str = "fast",
    profile: str | None = None,
    sets: Mapping[str, str] | None = None,
    build: Path | None = None,
    validate: bool = True,
) -> Cell:
    """Resolve names into a Cell; unknown names and unknown ``HAKMEM_*`` raise UsageError."""
    alloc = resolve_allocator(allocator, variant, build)
    wl = workload if isinstance(workload, Workload) else resolve_workload(workload)
    wl = bind_workload(wl)  # a public suite's program: its checkout and build filled in
    profile_env: dict = {}
    profile_name = None
    if profile:
        # A side built at a revision runs that revision's profile (revs.rev_profiles_dir).
        rev_profiles = rev_profiles_dir(build) if build else None
        known = load_profiles(rev_profiles) if rev_profiles else None
        resolved = resolve_profile(profile, known)  # for references too: names are checked
        if alloc.name == "hakmem":
            profile_name = resolved.name
            profile_env = dict(resolved.env)
    sets = dict(sets or {})
    if validate:
        for part, where in ((profile_env, f"profile {profile_name}"), (sets, "--set")):
            if any(k.startswith("HAKMEM_") for k in part):
                validate_env(part, load_options(paths.options_binary(build)), where)
    env = {**profile_env, **sets}
    if alloc.name == "hakmem" and not alloc.available and validate:
        raise UsageError(alloc.missing_reason or "libhakmem not built")
    return Cell(alloc.name, alloc.variant, profile_name, wl, env, build, sets)
