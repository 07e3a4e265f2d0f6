"""Where things live: the repository root and its fixed sub-directories."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The lab's root: $HAKBENCH_ROOT, else the nearest parent holding profiles/ and a Makefile."""
    env = os.environ.get("HAKBENCH_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for d in (start, *start.parents):
            if (d / "profiles").is_dir() and (d / "Makefile").is_file():
                return d
    return Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    return repo_root() / "build"


def profiles_dir() -> Path:
    return repo_root() / "profiles"


def results_dir() -> Path:
    return repo_root() / "results"


def bench_binary(program: str, *, static_hakmem: bool = False, build: Path | None = None) -> Path:
    """Path of a harness program; ``static_hakmem`` selects the ``*_hakmem`` twin."""
    name = f"{program}_hakmem" if static_hakmem else program
    return (build or build_dir()) / "bench" / name


def options_binary(build: Path | None = None) -> Path:
    return (build or build_dir()) / "bin" / "hakmem-options"
