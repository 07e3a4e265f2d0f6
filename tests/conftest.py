"""Shared pytest fixtures: where the repository and its build outputs are."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def build_dir(repo_root: Path) -> Path:
    return repo_root / "build"


@pytest.fixture(scope="session")
def bench_dir(build_dir: Path) -> Path:
    """The harness programs, built by `make harness` (the top-level `make test` builds first)."""
    return build_dir / "bench"
