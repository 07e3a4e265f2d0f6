"""Build libhakmem and the harness as they were at a git revision, for commit-vs-commit A/B.

The revision is checked out into a temporary detached worktree (the caller's working tree
and index are never touched), built there with ``make build BUILD=<repo>/build/rev-<sha>``,
and the worktree is removed. A stamp file marks a finished build, so the same SHA is built
once and reused; a failed build leaves no stamp (its log stays) and is retried next time.
Concurrent callers serialise on a lock of the ``build/`` directory, and a build that other
callers may be running from is only ever added to, never removed or rewritten.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import process

STAMP = ".rev-build-stamp"
LOG = "rev-build.log"


@dataclass(frozen=True)
class RevBuild:
    sha: str  # full 40-hex commit
    build_dir: Path  # what Cell.build / paths.bench_binary(build=...) take

    @property
    def short(self) -> str:
        return self.sha[:12]


def _git(args: list[str], root: Path, timeout: float = 60) -> process.Ended:
    return process.run(["git", "-C", str(root), *args], timeout=timeout)


def resolve_rev(rev: str, root: Path | None = None) -> str:
    """The full commit SHA that ``rev`` names (branch, tag, short SHA, ``HEAD~2``...)."""
    root = root or paths.repo_root()
    r = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root)
    if r.returncode != 0 or not r.stdout.strip():
        raise UsageError(f"unknown git revision '{rev}' in {root}")
    return r.stdout.strip()


def rev_build_dir(sha: str, root: Path | None = None) -> Path:
    return (root or paths.repo_root()) / "build" / f"rev-{sha}"


def is_built(build_dir: Path, targets: tuple[str, ...] | None = None) -> bool:
    """Whether ``build_dir`` holds a finished build: the whole ``make build``, or (``targets``)
    at least those targets (a whole build has them all)."""
    if (build_dir / STAMP).is_file():
        return True
    return targets is not None and (build_dir / partial_stamp(targets)).is_file()


def partial_stamp(targets: tuple[str, ...]) -> str:
    """The stamp of a build of only ``targets`` (paths under the build directory)."""
    digest = hashlib.sha256("\n".join(sorted(targets)).encode()).hexdigest()[:12]
    return f"{STAMP}-{digest}"


def fast_targets(
    programs: tuple[str, ...], variants: tuple[str, ...] = ("fast",)
) -> tuple[str, ...]:
    """What an A/B or an instruction count needs of a build: the ``variants``' libraries
    (their objects come with them, for code layouts), the options table's tool, and the
    harness ``programs``. A fraction of ``make build`` (no PGO training run unless ``pgo`` is
    asked for, no sanitizer build)."""
    libs = tuple(f"{v}/libhakmem.so" for v in sorted(set(variants)))
    return (*libs, "bin/hakmem-options", *(f"bench/{p}" for p in programs))


def rev_profiles_dir(build_dir: Path) -> Path | None:
    """The ``profiles/`` of the revision that ``build_dir`` (``<repo>/build/rev-<sha>``) was
    built from, written beside the build the first time it is asked for; None for a build
    that is no revision's, or a revision without profiles.

    A profile is part of the allocator's configuration: a commit that changes a default in
    ``options.h`` and the profile that sets it changes both, and an A/B of that commit must
    run each side with its own (with the working tree's profile on both sides, the change
    measures nothing)."""
    name = build_dir.name
    sha = name.removeprefix("rev-")
    if name == sha or len(sha) != 40:
        return None
    out = build_dir / "profiles"
    if out.is_dir():
        return out
    root = build_dir.parent.parent
    listed = _git(["ls-tree", "--name-only", sha, "profiles/"], root)
    names = [n for n in listed.stdout.split() if n.endswith(".toml")]
    if listed.returncode != 0 or not names:
        return None
    build_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".profiles-", dir=build_dir))
    for path in names:
        shown = _git(["show", f"{sha}:{path}"], root)
        if shown.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise MeasurementError(f"git show {sha[:12]}:{path} failed: {shown.stderr.strip()}")
        (staging / Path(path).name).write_text(shown.stdout)
    try:
        staging.rename(out)  # whole or not at all; a concurrent caller's copy may win
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def build_at_rev(
    rev: str,
    *,
    root: Path | None = None,
    jobs: int | None = None,
    targets: tuple[str, ...] | None = None,
) -> RevBuild:
    """Build (or reuse) the allocator and harness at ``rev``; raise MeasurementError on failure.
    ``targets`` (paths under the build directory, e.g. ``fast_targets``): build only those,
    unless a whole build of the revision is there already.

    The build log is kept in ``<build_dir>/rev-build.log``; a cached build writes nothing.
    """
    root = root or paths.repo_root()
    sha = resolve_rev(rev, root)
    build_dir = rev_build_dir(sha, root)
    if is_built(build_dir, targets):
        return RevBuild(sha, build_dir)
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(build_dir.parent, os.O_RDONLY)  # one rev build at a time per build/
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_built(build_dir, targets):  # another process may have built it meanwhile
            _build(sha, build_dir, root, jobs or os.cpu_count() or 1, targets)
    finally:
        os.close(lock)
    return RevBuild(sha, build_dir)


def _own_make_env() -> dict:
    """The caller's environment minus an enclosing make's flags (``make test`` runs pytest):
    its jobserver descriptors are not inherited, and its variables are not ours."""
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "BUILD")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _stamped(build_dir: Path) -> bool:
    """Whether ``build_dir`` holds a finished build of some targets (callers may run from it)."""
    return build_dir.is_dir() and any(p.name.startswith(STAMP) for p in build_dir.iterdir())


def _build(
    sha: str, build_dir: Path, root: Path, jobs: int, targets: tuple[str, ...] | None = None
) -> None:
    stamp = build_dir / (STAMP if targets is None else partial_stamp(targets))
    if _stamped(build_dir):
        # Another call may be running from this build now (an ab of other workloads at the same
        # revision): the new targets are built beside it and only what it lacks is added, each
        # file renamed into place whole; nothing it has is deleted or rewritten. Before, the
        # directory was removed and rebuilt, and the other call's runs failed with "not built".
        staging = Path(tempfile.mkdtemp(prefix=f".rev-{sha[:12]}-", dir=build_dir.parent))
        try:
            _make(sha, staging, root, jobs, targets, build_dir / f"{stamp.name}.log")
            _add_missing(staging, build_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    else:
        if build_dir.exists():  # leftovers of a failed or interrupted build
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True)
        _make(sha, build_dir, root, jobs, targets, build_dir / LOG)
    stamp.write_text(sha + "\n")


def _add_missing(source: Path, dest: Path) -> None:
    """Every file under ``source`` that ``dest`` lacks, copied there (through a temporary name
    and a rename, so a reader never sees half a file)."""
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir() or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        shutil.copy2(path, partial)
        os.replace(partial, target)


def _make(
    sha: str,
    build_dir: Path,
    root: Path,
    jobs: int,
    targets: tuple[str, ...] | None,
    log_path: Path,
) -> None:
    """``make`` of ``targets`` (None: ``build``) at ``sha`` into ``build_dir``, in a throwaway
    worktree; MeasurementError when it fails (its log kept at ``log_path``)."""
    goals = ["build"] if targets is None else [str(build_dir / t) for t in targets]
    worktree = Path(tempfile.mkdtemp(prefix=f"hakbench-rev-{sha[:12]}-"))
    try:
        r = _git(["worktree", "add", "--detach", str(worktree), sha], root)
        if r.returncode != 0:
            raise MeasurementError(f"git worktree add {sha[:12]} failed: {r.stderr.strip()}")
        with open(log_path, "w") as log:
            log.write(f"# make build at {sha} in {worktree}\n")
            log.flush()
            argv = ["make", "-C", str(worktree), f"-j{jobs}", *goals, f"BUILD={build_dir}"]
            made = process.run(argv, env=_own_make_env(), log=log, timeout=1800)
        if made.error is not None:
            raise MeasurementError(f"build at {sha[:12]}: {made.error}")
        if made.returncode != 0:
            tail = log_path.read_text().strip().splitlines()[-5:]
            raise MeasurementError(
                f"build at {sha[:12]} failed (exit {made.returncode}); log {log_path}: "
                + " | ".join(tail)
            )
    finally:
        _git(["worktree", "remove", "--force", str(worktree)], root)
        shutil.rmtree(worktree, ignore_errors=True)
        _git(["worktree", "prune"], root)
