"""The public suite's checkout and build (mimalloc-bench): its commit, the cmake build into a
cache keyed by it, binding a suite workload to them, and ``make suites``' clone.

``hakbench.core.suites`` says where the checkout is and what the recipe is; this is the part
that runs git and cmake (the engine's launcher). Stable API (the misuse probes and the
suite workloads rely on it; keep the signatures):

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
- ``bind_workload(workload) -> Workload``: a suite workload with ``{suite}`` and
  ``{suite_build}`` replaced by the checkout and its build (built here on first use);
  other workloads unchanged.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from hakbench.core import suites
from hakbench.core.suites import (
    BUILD_TIMEOUT_S,
    CONFIGURE_TIMEOUT_S,
    ENV_VAR,
    NAME,
    PINNED_COMMIT,
    PLACEHOLDERS,
    RECIPE_VERSION,
    REPO_URL,
    SKIP_MISSING_CMAKE,
    STAMP,
    SuiteBuildError,
    SuiteError,
    SuiteMissingError,
    _expand,
    _stamp,
    _tree_digest,
    record_used,
    resolve_suite_dir,
    skipped_targets,
)
from hakbench.engine import process


def _git(path: Path, *args: str) -> str | None:
    out = process.output(["git", "-C", str(path), *args], timeout=30)
    return out.strip() if out is not None else None


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
    return (cache_root or suites.default_cache_root()) / f"{NAME}-{key}-r{RECIPE_VERSION}"


def _run_logged(argv: list[str], log: Path, timeout: float, what: str) -> None:
    with open(log, "a") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        r = process.run(argv, timeout=timeout, log=f)
    if r.error is not None:
        raise SuiteBuildError(f"cannot {what} {NAME}: {argv[0]} not installed (run `make setup`)")
    if r.timed_out:
        raise SuiteBuildError(f"{what} of {NAME} timed out after {timeout:g} s; see {log}")
    if r.returncode != 0:
        raise SuiteBuildError(f"{what} of {NAME} failed (exit {r.returncode}); see {log}")


def ensure_built(suite_dir: str | os.PathLike, cache_root: str | os.PathLike | None = None) -> Path:
    """The built suite (programs at the top, probes in ``security/``); builds on first use.

    Concurrent callers wait for one build (a lock file beside the build directory). A build
    directory without its stamp (an interrupted build) is built again from scratch."""
    suite_dir = Path(suite_dir).resolve()
    cache_root = Path(cache_root) if cache_root else suites.default_cache_root()
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


def suite_info(suite_dir: str | os.PathLike, build: Path | None = None) -> dict:
    """What meta.json records about the suite a run used."""
    suite_dir = Path(suite_dir).resolve()
    info = {"name": NAME, "path": str(suite_dir), "commit": suite_commit(suite_dir)}
    if build is not None:
        info["build_dir"] = str(build)
        info["skipped_targets"] = skipped_targets(build)
    return info


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
    record_used(suite_info(suite_dir, build))
    bound = dataclasses.replace(
        cmd, argv=argv, stdin=_expand(cmd.stdin, values), cwd=_expand(cmd.cwd, values)
    )
    return dataclasses.replace(workload, command=bound, program=argv[0], args=argv)


def _clone_at(url: str, tmp: Path, env: dict) -> str | None:
    """Clone ``url`` into ``tmp`` and check out the pinned commit: None, or why not."""
    steps = (
        (["git", "clone", "-q", "--no-checkout", url, str(tmp)], 300),
        (["git", "-C", str(tmp), "checkout", "-q", PINNED_COMMIT], 120),
    )
    for argv, timeout in steps:
        r = process.run(argv, timeout=timeout, env=env)
        if not r.ok:
            return r.error or r.first_line() or f"{argv[1]} ended with {r.returncode}"
    return None


def clone_pinned(url: str | None = None, dest: Path | None = None) -> Path:
    """``make suites``: clone the suite at PINNED_COMMIT into ``default_clone_dir()`` (from
    ``url``, default REPO_URL: a local mirror or bundle works the same) unless a checkout
    is there. No network: SuiteMissingError saying how to point at an existing checkout."""
    dest = dest or suites.default_clone_dir()
    if (dest / "bench" / "CMakeLists.txt").is_file():
        return dest
    url = url or REPO_URL
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    why = _clone_at(url, tmp, env)
    if why is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SuiteMissingError(
            f"cannot clone {url} at {PINNED_COMMIT[:7]} ({why[:120]}); without network "
            f"to GitHub, point hakbench at an existing checkout: --suite-dir PATH or "
            f"{ENV_VAR}=PATH (or `make suites MIMALLOC_BENCH_URL=<a local mirror>`)"
        ) from None
    tmp.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m hakbench.engine.suite_build [URL]`` (``make suites``): find the checkout (or
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
