"""Shared pytest fixtures: where the repository and its build outputs are; and, when the
CI environment variable is set, a skipped test fails."""

import os
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# A test skips when what it needs is missing (perf, valgrind, Debian's mimalloc, redis,
# chromium, the build). On a developer's machine that is a skip; in CI (CI set, as GitHub
# Actions and .ci/run set it) it fails: `make setup` must have installed everything, and a
# green run must not hide a missing install step. Two skips stay skips there: one whose
# reason starts with CHANCE (the machine was too quick for the test to interrupt the run),
# and one whose reason names a tool listed in HAKBENCH_MISSING_OK (space-separated: a tool
# known not to be installable on that machine, e.g. actionlint on Debian 12, whose Go is
# too old to build it).
CHANCE = "by chance: "


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def skip_fails_in_ci(reason: str) -> bool:
    """Whether a skip with this reason is a failure under CI."""
    reason = reason.removeprefix("Skipped: ")
    if reason.startswith(CHANCE):
        return False
    allowed = os.environ.get("HAKBENCH_MISSING_OK", "").split()
    return not any(re.search(rf"\b{re.escape(t)}\b", reason) for t in allowed)


def pytest_addoption(parser):
    parser.addoption(
        "--slurm",
        action="store_true",
        help="run the tests marked slurm (a one-node Slurm cluster; make test-slurm)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: needs a Slurm cluster of its own (--slurm)")
    config.addinivalue_line("markers", "slow: minutes long, run with HAKBENCH_SLOW=1 (.ci/run)")


def pytest_collection_modifyitems(config, items):
    """Tests marked slurm run with --slurm only (and then only they); tests marked slow run
    only with HAKBENCH_SLOW=1 (.ci/run sets it). Both are left out, not skipped, so that a
    skip under CI still means something missing."""
    want = config.getoption("--slurm")
    slow = bool(os.environ.get("HAKBENCH_SLOW"))
    kept = [
        i
        for i in items
        if (i.get_closest_marker("slurm") is not None) == want
        and (slow or i.get_closest_marker("slow") is None)
    ]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if skip_fails_in_ci(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"CI is set, so this skip fails: {reason}\n(make setup installs what the tests "
            "need; a missing tool here is a missing install step)"
        )


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def scratch(tmp_path):
    """A lab root whose results/ is private (a finished calibration becomes the machine's;
    a gate's runs go to results/runs): profiles, build and the Makefile are the real ones."""
    root = tmp_path / "root"
    root.mkdir()
    for name in ("profiles", "build", "Makefile"):
        (root / name).symlink_to(REPO_ROOT / name)
    return root


@pytest.fixture(scope="session")
def build_dir(repo_root: Path) -> Path:
    return repo_root / "build"


@pytest.fixture(scope="session")
def bench_dir(build_dir: Path) -> Path:
    """The harness programs, built by `make harness` (the top-level `make test` builds first)."""
    return build_dir / "bench"


@pytest.fixture
def make_lab(tmp_path, monkeypatch, bench_dir):
    """A lab in tmp_path: build/bench links the named real harness programs, profiles/
    holds the given workloads.toml and C7_SAFE, and HAKBENCH_ROOT points at it. Returns a
    function (workloads text, program names) -> the lab's root."""

    def make(workloads: str, programs=("bench_random_mixed",)) -> Path:
        bench = tmp_path / "build" / "bench"
        bench.mkdir(parents=True, exist_ok=True)
        for name in programs:
            (bench / name).symlink_to(bench_dir / name)
        (tmp_path / "profiles").mkdir(exist_ok=True)
        (tmp_path / "profiles" / "workloads.toml").write_text(workloads)
        (tmp_path / "profiles" / "c7_safe.toml").write_text('name = "C7_SAFE"\n')
        monkeypatch.setenv("HAKBENCH_ROOT", str(tmp_path))
        return tmp_path

    return make


HOT_WORKLOAD = """\
[hot]
program = "bench_tiny_hot"
args = ["--size", "64", "--batch", "100", "--cycles", "4000", "--seed", "42"]
"""


@pytest.fixture
def hakmem_lab(tmp_path, make_lab, build_dir):
    """A lab (``make_lab``) with one short workload ``hot`` and a copy of the real build's
    fast and secure libhakmem with their objects: what code layouts relink
    (hakbench.engine.layouts)."""
    import shutil

    make_lab(HOT_WORKLOAD, ("bench_tiny_hot",))
    for variant in ("fast", "secure"):
        shutil.copytree(build_dir / "obj" / variant, tmp_path / "build" / "obj" / variant)
        shutil.copytree(build_dir / variant, tmp_path / "build" / variant)
    return tmp_path
