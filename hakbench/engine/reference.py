"""The result a workload must give under any allocator: the one it gives under glibc.

A harness program's operation sequence is fixed by its arguments (``--seed`` included), so
its ``checksum=`` line is the same under every allocator; a command workload's checked
output likewise (hakbench.engine.command_run). A sample whose result differs from glibc's for the
same program and arguments is a failure (``wrong_checksum``, ``wrong_output``), never a
number. Each reference is computed by one run under glibc, once, and cached in
``build/reference/`` under a key made of the definition and the program's identity (path,
size, mtime), so rebuilding the program computes it again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from hakbench.core import paths
from hakbench.core.procenv import clean_env
from hakbench.engine.store import read_json, write_json


def program_identity(program: str) -> str:
    """``path:size:mtime`` of the program a name or path resolves to (clean PATH)."""
    path = shutil.which(program, path=clean_env()["PATH"])
    if path is None:
        return f"{program}:missing"
    resolved = Path(path).resolve()
    st = resolved.stat()
    return f"{resolved}:{st.st_size}:{st.st_mtime_ns}"


def cache_key(name: str, parts: list) -> str:
    digest = hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:16]
    return f"{name}-{digest}"


def cached(key: str, compute: Callable[[], tuple[dict | None, str | None]]):
    """(reference, None) from the cache or from ``compute()``; (None, why) when the glibc
    run that should give it failed (not cached: the next sample tries again)."""
    path = paths.build_dir() / "reference" / f"{key}.json"
    if path.exists():
        return read_json(path), None
    value, error = compute()
    if error or value is None:
        return None, error or "no reference"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, value)
    return value, None
