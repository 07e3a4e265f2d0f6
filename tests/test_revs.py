"""Builds at a git revision: in a throwaway worktree, cached by SHA, reused without rebuilding."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import revs
from hakbench.engine.revs import LOG, STAMP, build_at_rev, resolve_rev, rev_build_dir

ROOT = paths.repo_root()


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def has_file(rev: str, path: str) -> bool:
    return git("cat-file", "-e", f"{rev}:{path}").returncode == 0


def worktrees() -> set:
    """The repository's worktree paths (not their HEADs: other sessions commit meanwhile)."""
    out = git("worktree", "list", "--porcelain").stdout
    return {
        line.removeprefix("worktree ") for line in out.splitlines() if line.startswith("worktree ")
    }


@pytest.fixture
def made_worktrees(monkeypatch) -> list:
    """The temporary worktree directories build_at_rev makes in this test, recorded as it
    makes them: a test of the other worker may build a revision of this repository at the
    same time, so 'no worktree left' is asked of these, not of the repository's whole list."""
    made = []
    real = revs.tempfile.mkdtemp

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(revs.tempfile, "mkdtemp", recording)
    return made


def assert_gone(made: list) -> None:
    assert made, "build_at_rev made no worktree"
    listed = worktrees()
    for path in made:
        assert path not in listed and not Path(path).exists(), f"worktree {path} left behind"


pytestmark = [
    pytest.mark.skipif(
        git("rev-parse", "--verify", "HEAD").returncode != 0, reason="repository has no commit"
    ),
    # One worker builds and reuses revisions (make test runs pytest -n 2 --dist loadgroup).
    pytest.mark.xdist_group("revs"),
]


def test_resolve_rev_gives_the_full_sha():
    head = git("rev-parse", "HEAD").stdout.strip()
    assert resolve_rev("HEAD") == head
    assert resolve_rev(head[:10]) == head
    with pytest.raises(UsageError, match="unknown git revision"):
        resolve_rev("no-such-branch-xyz")


@pytest.mark.slow
def test_failed_build_raises_and_leaves_no_stamp_or_worktree(made_worktrees):
    root_commit = git("rev-list", "--max-parents=0", "HEAD").stdout.split()[0]
    if has_file(root_commit, "allocator/allocator.mk"):
        pytest.skip("the root commit builds; no known-broken revision to try")
    build_dir = rev_build_dir(root_commit)
    try:
        with pytest.raises(MeasurementError, match="build at .* failed"):
            build_at_rev(root_commit)
        assert not (build_dir / STAMP).exists()
        assert (build_dir / LOG).exists()  # kept for diagnosis
        assert_gone(made_worktrees)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(
    not (has_file("HEAD", "allocator/allocator.mk") and has_file("HEAD", "harness/harness.mk")),
    reason="HEAD does not contain the allocator and harness yet",
)
def test_head_is_built_once_and_reused(made_worktrees):
    first = build_at_rev("HEAD")
    assert first.sha == resolve_rev("HEAD")
    assert first.build_dir == ROOT / "build" / f"rev-{first.sha}"
    assert paths.bench_binary("bench_random_mixed", build=first.build_dir).exists()
    assert (first.build_dir / "fast" / "libhakmem.so").exists()
    stamp, log = first.build_dir / STAMP, first.build_dir / LOG
    stamp_mtime, log_mtime = stamp.stat().st_mtime_ns, log.stat().st_mtime_ns

    second = build_at_rev(first.sha[:12])
    assert second == first
    assert stamp.stat().st_mtime_ns == stamp_mtime  # no rebuild: nothing rewritten
    assert log.stat().st_mtime_ns == log_mtime
    if made_worktrees:  # built here (not already built by an earlier test): its worktree is gone
        assert_gone(made_worktrees)


@pytest.mark.skipif(
    not (has_file("HEAD", "allocator/allocator.mk") and has_file("HEAD", "harness/harness.mk")),
    reason="HEAD does not contain the allocator and harness yet",
)
def test_ab_against_head_records_both_sides(tmp_path):
    """``ab --baseline-rev HEAD`` end to end: A built at HEAD, B the working tree."""
    head = resolve_rev("HEAD")
    out = tmp_path / "ab"
    args = ["ab", "-p", "LEGACY", "-w", "mixed_short", "--metric", "instructions"]
    r = CliRunner().invoke(main, [*args, "--baseline-rev", "HEAD", "--out", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["rev_shas"] == {"A": head}
    cells = meta["cells"]["mixed_short"]
    assert cells["A"] != cells["B"]  # same profile, different build: A ran from build/rev-<sha>
    row = (out / "summary.csv").read_text().splitlines()[1]
    assert row.startswith("mixed_short,ir_per_op,instructions,primary,")


def test_a_revision_is_built_for_what_the_call_runs():
    # both sides' variants, the stats one for the engagement check, the options tool and the
    # harness programs: not make build, whose PGO training run alone takes most of a minute
    from hakbench.experiments.ab_plan import rev_targets
    from hakbench.experiments.ab_spec import ABSpec

    spec = ABSpec(variant="pgo", baseline_variant="fast", workloads=("mixed", "xthread"))
    assert rev_targets(spec) == (
        "fast/libhakmem.so",
        "pgo/libhakmem.so",
        "stats/libhakmem.so",
        "bin/hakmem-options",
        "bench/bench_random_mixed",
        "bench/bench_xthread",
    )
    # bisect's steps observe nothing; rev_build full is make build
    assert "stats/libhakmem.so" not in rev_targets(ABSpec(rev_build="fast", observe=False))
    assert rev_targets(ABSpec(rev_build="full")) is None


def test_a_revision_side_runs_the_profiles_of_its_revision(tmp_path):
    """A commit that changes a profile's setting: the side built at the commit before it runs
    the old setting, the working tree's side the new one (else the A/B compares nothing)."""
    from hakbench.engine.cells import make_cell
    from hakbench.engine.revs import rev_profiles_dir

    repo = tmp_path / "repo"
    (repo / "profiles").mkdir(parents=True)
    old = '[env]\nHAKMEM_SMALL_HEAP_V3_CLASSES = "0x1f7f"\n'
    (repo / "profiles" / "c7_safe.toml").write_text('name = "C7_SAFE"\n' + old)
    run = dict(cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "add", "."], **run)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], **run
    )
    sha = subprocess.run(["git", "rev-parse", "HEAD"], text=True, **run).stdout.strip()
    new = (repo / "profiles" / "c7_safe.toml").read_text().replace("0x1f7f", "0xff7f")
    (repo / "profiles" / "c7_safe.toml").write_text(new)  # the working tree moved on

    build = repo / "build" / f"rev-{sha}"
    profiles = rev_profiles_dir(build)
    assert profiles == build / "profiles"
    assert (profiles / "c7_safe.toml").read_text() == 'name = "C7_SAFE"\n' + old
    assert rev_profiles_dir(build) == profiles  # written once, then read from there
    assert rev_profiles_dir(repo / "build") is None  # no revision's build
    cell = make_cell("hakmem", "mixed", profile="C7_SAFE", build=build, validate=False)
    assert cell.env["HAKMEM_SMALL_HEAP_V3_CLASSES"] == "0x1f7f"
    with pytest.raises(UsageError, match="unknown profile 'BALANCED'"):
        make_cell("hakmem", "mixed", profile="BALANCED", build=build, validate=False)


@pytest.mark.slow
@pytest.mark.skipif(
    not has_file("HEAD", "allocator/allocator.mk"), reason="HEAD does not build the allocator"
)
def test_a_build_in_use_is_added_to_never_rebuilt(made_worktrees, tmp_path):
    """Two calls at one revision asking for different targets (an ab of one workload beside an
    ab of another): the second adds its targets; the first's files stay the very same files,
    so a call running from them meanwhile never finds them gone."""
    sha = resolve_rev("HEAD")
    build_dir = rev_build_dir(sha)
    first_targets = ("bin/hakmem-options",)
    second_targets = ("bin/hakmem-options", "fast/libhakmem.so")
    shutil.rmtree(build_dir, ignore_errors=True)
    try:
        build_at_rev(sha, targets=first_targets)
        tool = build_dir / "bin" / "hakmem-options"
        inode = tool.stat().st_ino
        assert not (build_dir / "fast" / "libhakmem.so").exists()

        build_at_rev(sha, targets=second_targets)
        assert tool.stat().st_ino == inode  # not removed, not rewritten
        assert (build_dir / revs.partial_stamp(first_targets)).is_file()
        assert (build_dir / revs.partial_stamp(second_targets)).is_file()
        lib = build_dir / "fast" / "libhakmem.so"
        assert lib.is_file() and lib.stat().st_size > 0
        assert not list(build_dir.parent.glob(f".rev-{sha[:12]}-*"))  # its staging is gone
        assert_gone(made_worktrees)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
