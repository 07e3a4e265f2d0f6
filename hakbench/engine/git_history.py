"""Read committed files as they were at past commits, and the first-parent line of history.

The static site (``hakbench publish``) draws the scorecard across commits from the stored
samples each refresh committed (``results/scorecard/``): every commit that changed a file
is a version of it, read with ``git show`` without touching the work tree. A directory that
is not a git checkout has one version, the files on disk; the callers say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hakbench.engine import process


@dataclass(frozen=True)
class Version:
    commit: str  # full 40-hex commit that stored this version
    date: str  # its committer date (ISO 8601)


def _git(root: Path, *args: str) -> str | None:
    return process.output(["git", "-C", str(root), *args], timeout=60)


def repo_of(path: Path) -> Path | None:
    """The top of the git work tree ``path`` is in, or None."""
    top = _git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel")
    return Path(top.strip()) if top else None


def versions(root: Path, relpath: str) -> list[Version]:
    """Every commit reachable from HEAD that changed ``relpath``, oldest first."""
    out = _git(root, "log", "--format=%H %cI", "--reverse", "HEAD", "--", relpath)
    if not out:
        return []
    return [Version(*line.split(" ", 1)) for line in out.splitlines() if line.strip()]


def show(root: Path, commit: str, relpath: str) -> str | None:
    """The text of ``relpath`` at ``commit`` (None when it did not exist there)."""
    return _git(root, "show", f"{commit}:{relpath}")


def first_parent_line(root: Path) -> list[str]:
    """HEAD's first-parent history, oldest first: the order the main line saw commits in."""
    out = _git(root, "rev-list", "--first-parent", "--reverse", "HEAD")
    return out.split() if out else []


def resolve(root: Path, rev: str) -> str | None:
    out = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return out.strip() if out else None


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    argv = ["git", "-C", str(root), "merge-base", "--is-ancestor", older, newer]
    return process.run(argv, timeout=60).ok


def line_position(root: Path, line: list[str], commit: str) -> int | None:
    """Where ``commit`` entered the first-parent ``line``: its own index when it is on the
    line, else the index of the first line commit that contains it (the merge that brought
    it in); None when the line never contains it. The line's ancestry is monotone, so a
    binary search needs log2(len(line)) ancestry tests."""
    full = resolve(root, commit)
    if full is None or not line:
        return None
    if full in line:
        return line.index(full)
    lo, hi = 0, len(line)
    while lo < hi:
        mid = (lo + hi) // 2
        if is_ancestor(root, full, line[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < len(line) else None
