"""LOCK_STATS: per lock, how often it was taken and how often and how long a thread waited
for another thread's hold (lock.h). Read from real runs of libhakmem under LD_PRELOAD: one
thread never waits; threads that take the large lock for every block above the mid pool
wait, and their waits add up to a time; the fast build counts the waits but not the takes."""

import os
import subprocess

import pytest

from hakbench.collect.allocstats import parse_alloc_stats
from hakbench.core import paths

BUILD = paths.build_dir()
LOCKS = ("heaps", "exited", "abandoned", "cache", "large", "init")
ITERS = 40_000

pytestmark = pytest.mark.skipif(
    not (BUILD / "stats" / "libhakmem.so").exists()
    or not (BUILD / "bench" / "bench_mid_large_mt").exists(),
    reason="make build first",
)


def lock_stats(variant: str, threads: int) -> dict[str, int]:
    """LOCK_STATS of bench_mid_large_mt with blocks of 256 KiB-1 MiB (each a malloc or free on
    the large path) in `threads` threads of ITERS operations each."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_PRELOAD": str(BUILD / variant / "libhakmem.so"),
        "HAKMEM_LOCK_STATS": "1",
    }
    argv = [str(BUILD / "bench" / "bench_mid_large_mt"), "--threads", str(threads)]
    argv += ["--iters", str(ITERS), "--ws", "64", "--seed", "42"]
    argv += ["--min", "262144", "--max", "1048576"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return parse_alloc_stats(proc.stderr)["LOCK_STATS"]


def test_one_thread_takes_the_large_lock_for_every_block_and_never_waits():
    stats = lock_stats("stats", 1)
    # Every malloc and free of a large block takes it at least once.
    assert stats["large_acquire"] >= ITERS
    for lock in LOCKS:
        assert stats[f"{lock}_contended"] == 0
        assert stats[f"{lock}_sleeps"] == 0
        assert stats[f"{lock}_wait_us"] == 0


def test_four_threads_on_the_large_lock_wait_and_the_waits_are_consistent():
    # Four threads on this 2-core machine: a holder is preempted now and then, so the others
    # find the lock held whatever the allocator does around it.
    stats = lock_stats("stats", 4)
    assert stats["large_acquire"] >= 4 * ITERS
    assert 0 < stats["large_contended"] <= stats["large_acquire"]
    assert stats["large_sleeps"] <= stats["large_contended"] * 64
    assert stats["large_wait_us"] > 0
    for lock in LOCKS:
        if stats[f"{lock}_contended"] == 0:
            assert stats[f"{lock}_sleeps"] == 0 and stats[f"{lock}_wait_us"] == 0


def test_the_fast_build_counts_waits_but_not_takes():
    stats = lock_stats("fast", 4)
    assert not any(key.endswith("_acquire") for key in stats)
    assert {f"{lock}_contended" for lock in LOCKS} <= stats.keys()
    assert stats["large_contended"] > 0
