"""Public benchmark suites (mimalloc-bench): where the checkout is, which commit, its build.

The suite's code never enters this repository. The user points at a checkout; the lab
builds it with cmake, out of tree, into a cache directory keyed by the checkout's commit,
and never writes into the checkout.

Stable API (other modules and the misuse probes rely on it; keep the signatures):

- ``resolve_suite_dir(explicit) -> Path``: the checkout to use. ``explicit`` (the
  ``--suite-dir`` option) wins, then ``$HAKBENCH_MIMALLOC_BENCH``, then the clone
  ``make suites`` leaves at ``build/suites/src/mimalloc-bench``; none of them:
  ``SuiteMissingError``. A path that is not a mimalloc-bench checkout (no
  ``bench/CMakeLists.txt``): ``SuiteMissingError`` too.
- ``suite_commit(path) -> str``: the checkout's git commit (40 hex digits, ``+dirty``
  appended when tracked files differ from it); a directory that is not the top of its own
  git checkout (the tests' stand-in, a tarball) is named by a digest of its ``bench/``
  tree: ``tree-<16 hex>``.
- ``ensure_built(suite_dir, cache_root=None) -> Path``: the build directory (programs at
  its top, the security probes in its ``security/``), built on first use with cmake and
  reused while the commit is the same. ``cache_root`` defaults to ``build/suites``. A
  failed configure or build raises ``SuiteBuildError`` naming the log.
- ``suite_info(suite_dir) -> dict``: what ``meta.json`` records (path, commit, build dir,
  targets skipped).
- ``configure(explicit)``: what the commands' ``--suite-dir`` option sets for the rest of
  the process; ``resolve_suite_dir(None)`` then returns it (an explicit argument still wins).
- ``bind_workload(workload) -> Workload``: a suite workload with ``{suite}`` and
  ``{suite_build}`` replaced by the checkout and its build (built here on first use);
  other workloads unchanged. ``used_suites()``: the suites bound so far, for meta.json.

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
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
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


def _git(path: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _tree_digest(path: Path) -> str:
    """A digest of every file under ``path/bench`` (names and contents)."""
    h = hashlib.sha256()
    bench = path / "bench"
    for f in sorted(p for p in bench.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(bench)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def suite_commit(path: str | os.PathLike) -> str:
    """The checkout's commit (``+dirty`` when tracked files changed), or ``tree-<digest>``
    for a directory that is not the top of its own git checkout."""
    path = Path(path).resolve()
    top = _git(path, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == path:
        commit = _git(path, "rev-parse", "HEAD")
        if commit:
            dirty = _git(path, "status", "--porcelain", "--untracked-files=no")
            return commit + ("+dirty" if dirty else "")
    return f"tree-{_tree_digest(path)}"


def build_dir_for(suite_dir: Path, cache_root: Path | None = None) -> Path:
    """The cache directory a checkout builds into (keyed by commit and the lab's recipe)."""
    commit = suite_commit(suite_dir)
    key = commit[:12] if not commit.startswith("tree-") else commit
    if commit.endswith("+dirty"):
        key += (
            "-dirty-"
            + hashlib.sha256((_git(suite_dir, "diff", "HEAD") or "").encode()).hexdigest()[:8]
        )
    return (cache_root or default_cache_root()) / f"{NAME}-{key}-r{RECIPE_VERSION}"


def _stamp(build: Path) -> dict | None:
    try:
        return json.loads((build / STAMP).read_text())
    except (OSError, ValueError):
        return None


def _run_logged(argv: list[str], log: Path, timeout: float, what: str) -> None:
    with open(log, "a") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        try:
            r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        except FileNotFoundError:
            raise SuiteBuildError(
                f"cannot {what} {NAME}: {argv[0]} not installed (run `make setup`)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SuiteBuildError(
                f"{what} of {NAME} timed out after {timeout:g} s; see {log}"
            ) from None
    if r.returncode != 0:
        raise SuiteBuildError(f"{what} of {NAME} failed (exit {r.returncode}); see {log}")


def ensure_built(suite_dir: str | os.PathLike, cache_root: str | os.PathLike | None = None) -> Path:
    """The built suite (programs at the top, probes in ``security/``); builds on first use.

    Concurrent callers wait for one build (a lock file beside the build directory). A build
    directory without its stamp (an interrupted build) is built again from scratch."""
    suite_dir = Path(suite_dir).resolve()
    cache_root = Path(cache_root) if cache_root else default_cache_root()
    build = build_dir_for(suite_dir, cache_root)
    if _stamp(build):
        return build
    if shutil.which("cmake") is None:
        raise SuiteBuildError(f"cannot build {NAME}: cmake not installed (run `make setup`)")
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / f"{build.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stamp(build):
            return build
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        include = build / "hakbench-skip-missing.cmake"
        include.write_text(SKIP_MISSING_CMAKE)
        log = build / "hakbench-build.log"
        jobs = str(len(os.sched_getaffinity(0)))
        _run_logged(
            [
                "cmake",
                "-S",
                str(suite_dir / "bench"),
                "-B",
                str(build),
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_PROJECT_INCLUDE={include}",
            ],
            log,
            CONFIGURE_TIMEOUT_S,
            "cmake configure",
        )
        _run_logged(
            ["cmake", "--build", str(build), "-j", jobs], log, BUILD_TIMEOUT_S, "cmake build"
        )
        stamp = {
            "suite": NAME,
            "suite_dir": str(suite_dir),
            "commit": suite_commit(suite_dir),
            "skipped": skipped_targets(build),
            "recipe": RECIPE_VERSION,
        }
        tmp = build / (STAMP + ".tmp")
        tmp.write_text(json.dumps(stamp, indent=1) + "\n")
        tmp.replace(build / STAMP)
    return build


def skipped_targets(build: Path) -> list[str]:
    """Targets the configure skipped because their sources are not in the checkout."""
    with contextlib.suppress(OSError):
        return [
            line.split()[0]
            for line in (build / SKIPPED_LIST).read_text().splitlines()
            if line.strip()
        ]
    return []


def suite_info(suite_dir: str | os.PathLike, build: Path | None = None) -> dict:
    """What meta.json records about the suite a run used."""
    suite_dir = Path(suite_dir).resolve()
    info = {"name": NAME, "path": str(suite_dir), "commit": suite_commit(suite_dir)}
    if build is not None:
        info["build_dir"] = str(build)
        info["skipped_targets"] = skipped_targets(build)
    return info


PLACEHOLDERS = ("{suite}", "{suite_build}")


def _expand(text: str | None, values: dict) -> str | None:
    if text is None:
        return None
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def bind_workload(workload):
    """``workload`` with its suite's paths filled in (the suite built on first use)."""
    cmd = workload.command
    if workload.suite is None or cmd is None:
        return workload
    texts = [*cmd.argv, cmd.stdin or "", cmd.cwd]
    if not any(p in t for t in texts for p in PLACEHOLDERS):
        return workload
    if workload.suite != NAME:
        raise SuiteMissingError(f"unknown suite '{workload.suite}' (known: {NAME})")
    suite_dir = resolve_suite_dir(None)
    build = ensure_built(suite_dir)
    values = {"suite_build": build, "suite": suite_dir}
    argv = tuple(_expand(a, values) for a in cmd.argv)
    if not Path(argv[0]).is_file():
        skipped = ", ".join(skipped_targets(build)) or "none"
        raise SuiteBuildError(
            f"{workload.name}: {argv[0]} was not built from {suite_dir} (targets skipped: "
            f"{skipped}); see {build / 'hakbench-build.log'}"
        )
    _USED[NAME] = suite_info(suite_dir, build)
    bound = dataclasses.replace(
        cmd, argv=argv, stdin=_expand(cmd.stdin, values), cwd=_expand(cmd.cwd, values)
    )
    return dataclasses.replace(workload, command=bound, program=argv[0], args=argv)


def used_suites() -> dict:
    """suite name -> suite_info of every suite a workload was bound to in this process."""
    return dict(_USED)


def clone_pinned(url: str | None = None, dest: Path | None = None) -> Path:
    """``make suites``: clone the suite at PINNED_COMMIT into ``default_clone_dir()`` (from
    ``url``, default REPO_URL: a local mirror or bundle works the same) unless a checkout
    is there. No network: SuiteMissingError saying how to point at an existing checkout."""
    dest = dest or default_clone_dir()
    if (dest / "bench" / "CMakeLists.txt").is_file():
        return dest
    url = url or REPO_URL
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", url, str(tmp)],
            check=True,
            capture_output=True,
            timeout=300,
            env=env,
        )
        subprocess.run(
            ["git", "-C", str(tmp), "checkout", "-q", PINNED_COMMIT],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        why = getattr(e, "stderr", b"") or b""
        first = why.decode(errors="replace").strip().splitlines()[:1] or [str(e)]
        raise SuiteMissingError(
            f"cannot clone {url} at {PINNED_COMMIT[:7]} ({first[0][:120]}); without network "
            f"to GitHub, point hakbench at an existing checkout: --suite-dir PATH or "
            f"{ENV_VAR}=PATH (or `make suites MIMALLOC_BENCH_URL=<a local mirror>`)"
        ) from None
    tmp.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m hakbench.core.suites [URL]`` (``make suites``): find the checkout (or
    clone it), build it, print where. One line and exit 5 when there is none."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    try:
        try:
            suite_dir = resolve_suite_dir(None)
        except SuiteMissingError:
            suite_dir = clone_pinned(argv[0] if argv else None)
        build = ensure_built(suite_dir)
    except SuiteError as e:
        print(f"make suites: {e}", file=sys.stderr)
        return e.exit_code
    print(f"{NAME} {suite_commit(suite_dir)[:12]} at {suite_dir}, built in {build}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
