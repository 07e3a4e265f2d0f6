"""LOCK_STATS: per lock, how often it was taken and how often and how long a thread waited
for another thread's hold (lock.h). Read from real runs of libhakmem under LD_PRELOAD: one
thread never waits; every block above the mid pool takes a shard of the large table at its
malloc and its free, and the shared large cache only when the thread's own regions cannot
serve; threads that share those locks wait, and their waits add up to a time; the fast build
counts the waits but not the takes."""

import os
import subprocess

import pytest

from hakbench.collect.allocstats import parse_alloc_stats
from hakbench.core import paths

BUILD = paths.build_dir()
LOCKS = ("heaps", "exited", "abandoned", "cache", "large_cache", "large_table", "init")
LARGE = ("large_cache", "large_table")
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


def waits(stats: dict[str, int]) -> int:
    return sum(stats[f"{lock}_contended"] for lock in LARGE)


def test_one_thread_takes_a_table_shard_for_every_block_and_never_waits():
    stats = lock_stats("stats", 1)
    # Every large malloc and free takes its table shard's lock at least once.
    assert stats["large_table_acquire"] >= ITERS
    # The thread's own regions serve part of its mallocs without the shared cache's lock.
    assert stats["large_cache_acquire"] < stats["large_table_acquire"]
    for lock in LOCKS:
        assert stats[f"{lock}_contended"] == 0
        assert stats[f"{lock}_sleeps"] == 0
        assert stats[f"{lock}_wait_us"] == 0


# Sixteen threads on this 2-core machine: a holder is preempted now and then, so the others find
# a lock held whatever the allocator does around it. (With four, the table's 16 shards and the
# threads' own regions left a run under make test's other jobs without a single wait.)
THREADS = 16


def test_many_threads_on_the_large_locks_wait_and_the_waits_are_consistent():
    stats = lock_stats("stats", THREADS)
    assert stats["large_table_acquire"] >= THREADS * ITERS
    assert 0 < waits(stats)
    for lock in LARGE:
        assert stats[f"{lock}_contended"] <= stats[f"{lock}_acquire"]
        assert stats[f"{lock}_sleeps"] <= stats[f"{lock}_contended"] * 64
    assert sum(stats[f"{lock}_wait_us"] for lock in LARGE) > 0
    for lock in LOCKS:
        if stats[f"{lock}_contended"] == 0:
            assert stats[f"{lock}_sleeps"] == 0 and stats[f"{lock}_wait_us"] == 0


def test_the_fast_build_counts_waits_but_not_takes():
    stats = lock_stats("fast", THREADS)
    assert not any(key.endswith("_acquire") for key in stats)
    assert {f"{lock}_contended" for lock in LOCKS} <= stats.keys()
    assert waits(stats) > 0
