"""Public benchmark suites (mimalloc-bench): where the checkout is, which commit, its build.

The suite's code never enters this repository. The user points at a checkout; the lab
builds it with cmake, out of tree, into a cache directory keyed by the checkout's commit,
and never writes into the checkout.

Where the checkout is (``resolve_suite_dir(explicit) -> Path``: ``explicit``, the
``--suite-dir`` option, wins, then ``$HAKBENCH_MIMALLOC_BENCH``, then the clone ``make
suites`` leaves at ``build/suites/src/mimalloc-bench``; none of them, or a path without
``bench/CMakeLists.txt``: ``SuiteMissingError``), what ``--suite-dir`` set for the rest of
the process (``configure``), the build recipe, and the suites bound so far
(``used_suites()``, for meta.json). Running git and cmake on it (its commit, its build,
binding a workload to them, the clone) is ``hakbench.engine.suite_build``'s.

Exceptions: ``SuiteError`` (base, a ``HakbenchError``); ``SuiteMissingError`` (exit code
5, ``EXIT_SUITE``: no usable checkout); ``SuiteBuildError`` (exit code 3: cmake failed).

Building what the checkout holds: mimalloc-bench's ``bench/CMakeLists.txt`` lists the
shbench sources (``shbench/sh6bench-new.c``, ``sh8bench-new.c``) that its own build script
downloads; they are not in the repository, and a plain ``cmake -S bench`` stops at
generation. The lab configures with ``CMAKE_PROJECT_INCLUDE`` set to a small CMake file
(``SKIP_MISSING_CMAKE`` below) that wraps ``add_executable`` and the ``target_*`` calls: a
target whose sources are not in the checkout is skipped and listed in
``hakbench-skipped.txt`` of the build directory; every other target is built exactly as
the suite declares it. (Passing ``-DAPPLE=ON``, which skips the block on macOS, would
also work but tells the suite's CMake it is on another platform.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import EXIT_RUNTIME, EXIT_SUITE, HakbenchError

NAME = "mimalloc-bench"
ENV_VAR = "HAKBENCH_MIMALLOC_BENCH"
REPO_URL = "https://github.com/daanx/mimalloc-bench"
PINNED_COMMIT = "ce5784f1cef3d48ddc931479e4899ffad5ab3943"
STAMP = "hakbench-built.json"
SKIPPED_LIST = "hakbench-skipped.txt"
CONFIGURE_TIMEOUT_S = 300
BUILD_TIMEOUT_S = 1800

# Included after the suite's project(): skip (and list) targets whose sources the
# checkout does not hold, instead of failing the whole generation.
SKIP_MISSING_CMAKE = r"""# written by hakbench.core.suites: build what the checkout has
file(WRITE "${CMAKE_BINARY_DIR}/hakbench-skipped.txt" "")
function(add_executable name)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "^(WIN32|MACOSX_BUNDLE|EXCLUDE_FROM_ALL|IMPORTED|ALIAS|GLOBAL)$"
       OR src MATCHES "^\\$<")
      continue()
    endif()
    if(IS_ABSOLUTE "${src}")
      set(path "${src}")
    else()
      set(path "${CMAKE_CURRENT_SOURCE_DIR}/${src}")
    endif()
    if(NOT EXISTS "${path}")
      message(STATUS "hakbench: skipping ${name}: ${src} is not in the checkout")
      file(APPEND "${CMAKE_BINARY_DIR}/hakbench-skipped.txt" "${name} ${src}\n")
      return()
    endif()
  endforeach()
  _add_executable(${name} ${ARGN})
endfunction()
foreach(fn IN ITEMS target_link_libraries target_compile_options target_compile_definitions
               target_include_directories)
  cmake_language(EVAL CODE "
    function(${fn} name)
      if(TARGET \${name})
        _${fn}(\${name} \${ARGN})
      endif()
    endfunction()")
endforeach()
"""
RECIPE_VERSION = hashlib.sha256(SKIP_MISSING_CMAKE.encode()).hexdigest()[:8]


class SuiteError(HakbenchError):
    """Something about the public suite: its checkout or its build."""

    exit_code = EXIT_SUITE


class SuiteMissingError(SuiteError):
    """No usable checkout: none given, or the path is not a mimalloc-bench checkout."""


class SuiteBuildError(SuiteError):
    """cmake could not configure or build the checkout (the message names the log)."""

    exit_code = EXIT_RUNTIME


def default_clone_dir() -> Path:
    """Where ``make suites`` clones the suite."""
    return paths.build_dir() / "suites" / "src" / NAME


def default_cache_root() -> Path:
    return paths.build_dir() / "suites"


def _check_checkout(path: Path, source: str) -> Path:
    if not path.is_dir():
        raise SuiteMissingError(
            f"{NAME} checkout not found: {path} ({source}) is not a directory; "
            f"run `make suites` or pass --suite-dir / set {ENV_VAR} to a checkout"
        )
    if not (path / "bench" / "CMakeLists.txt").is_file():
        raise SuiteMissingError(
            f"{path} ({source}) is not a {NAME} checkout: no bench/CMakeLists.txt"
        )
    return path.resolve()


_CONFIGURED: dict = {"explicit": None}
_USED: dict = {}  # suite name -> suite_info of the checkout bound in this process


def configure(explicit: str | os.PathLike | None) -> None:
    """Set the checkout ``--suite-dir`` names for the rest of the process (None: unset).
    Called as each command starts, it also forgets the suites bound before."""
    _CONFIGURED["explicit"] = str(explicit) if explicit else None
    _USED.clear()


def resolve_suite_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The checkout: ``explicit`` > ``--suite-dir`` (``configure``) > ``$HAKBENCH_MIMALLOC_BENCH``
    > ``make suites``' clone."""
    explicit = explicit or _CONFIGURED["explicit"]
    if explicit:
        return _check_checkout(Path(explicit).expanduser(), "--suite-dir")
    env = os.environ.get(ENV_VAR)
    if env:
        return _check_checkout(Path(env).expanduser(), f"${ENV_VAR}")
    clone = default_clone_dir()
    if (clone / "bench" / "CMakeLists.txt").is_file():
        return clone.resolve()
    raise SuiteMissingError(
        f"no {NAME} checkout: pass --suite-dir PATH or set {ENV_VAR}=PATH "
        f"(or run `make suites` to clone {REPO_URL} at {PINNED_COMMIT[:7]})"
    )


def _tree_digest(path: Path) -> str:
    """A digest of every file under ``path/bench`` (names and contents)."""
    h = hashlib.sha256()
    bench = path / "bench"
    for f in sorted(p for p in bench.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(bench)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def _stamp(build: Path) -> dict | None:
    try:
        return json.loads((build / STAMP).read_text())
    except (OSError, ValueError):
        return None


def skipped_targets(build: Path) -> list[str]:
    """Targets the configure skipped because their sources are not in the checkout."""
    with contextlib.suppress(OSError):
        return [
            line.split()[0]
            for line in (build / SKIPPED_LIST).read_text().splitlines()
            if line.strip()
        ]
    return []


PLACEHOLDERS = ("{suite}", "{suite_build}")


def _expand(text: str | None, values: dict) -> str | None:
    if text is None:
        return None
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def record_used(info: dict) -> None:
    """Note a suite a workload was bound to (``used_suites``)."""
    _USED[info["name"]] = info


def used_suites() -> dict:
    """suite name -> suite_info of every suite a workload was bound to in this process."""
    return dict(_USED)
