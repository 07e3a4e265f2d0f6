"""The environment a measured process gets: only what the cell says.

ARCHITECTURE.md: never let the caller's environment leak into a measured process. The
caller's ``HAKMEM_*``, ``LD_*``, ``MALLOC_*`` and everything else stay out; the child gets a
minimal PATH and LANG, the cell's variables and the allocator's ``LD_PRELOAD``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def clean_env(cell_env: Mapping[str, str] | None = None, preload: Path | None = None) -> dict:
    """A fresh environment: BASE_ENV, then the cell's variables, then LD_PRELOAD."""
    env = dict(BASE_ENV)
    for k, v in (cell_env or {}).items():
        env[str(k)] = str(v)
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    return env
