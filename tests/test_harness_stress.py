"""The stress programs (bench_churn, bench_prodcons_mem, bench_large, bench_larson,
bench_xmalloc, bench_cache_scratch, bench_leak_grow, and issue #30's bench_bigblock,
bench_larson_cxx, bench_thread_churn, bench_random_st; issue #38's bench_thread_chain)
beyond the common contract that test_harness.py checks for every program: what each one
claims to do shows in its output.

Every run is short and nothing here asserts on time."""

import time
import tomllib

import pytest
from test_harness import PRELOADS, parse_result, result_of, run_bench

from hakbench.core.profiles import load_workloads, resolve_profile

STRESS_PROGRAMS = {
    "bench_churn",
    "bench_prodcons_mem",
    "bench_large",
    "bench_larson",
    "bench_xmalloc",
    "bench_cache_scratch",
    "bench_leak_grow",
    "bench_bigblock",
    "bench_larson_cxx",
    "bench_thread_churn",
    "bench_random_st",
    "bench_thread_chain",
}


def kib(values, key):
    return int(values[key])


# ---- the op sequence does not depend on how the threads interleave ----


@pytest.mark.parametrize(
    "program,args",
    [
        # a tiny transfer array: the swaps collide all the time
        (
            "bench_churn",
            ["--threads", "4", "--rounds", "3", "--objects", "2000", "--transfer", "8"],
        ),
        ("bench_larson", ["--threads", "4", "--generations", "3", "--steps", "3000"]),
        # a one-batch queue: which consumer takes which batch changes from run to run
        ("bench_xmalloc", ["--pairs", "3", "--batches", "200", "--queue", "1"]),
        # a stack of batches: which batch a consumer takes depends on what was pushed last
        ("bench_xmalloc", ["--pairs", "3", "--batches", "200", "--queue", "8", "--stack", "1"]),
        ("bench_prodcons_mem", ["--pairs", "3", "--count", "2000", "--quiet-ms", "0"]),
        ("bench_cache_scratch", ["--mode", "thrash", "--threads", "4", "--iters", "100"]),
        ("bench_larson_cxx", ["--threads", "4", "--generations", "3", "--steps", "3000"]),
        # a tiny transfer array: every swap brings in another thread's block
        (
            "bench_thread_churn",
            ["--threads", "4", "--rounds", "3", "--scale", "2", "--transfer", "8"],
        ),
    ],
)
def test_threaded_checksums_do_not_depend_on_scheduling(bench_dir, program, args):
    checksums = {result_of(bench_dir, program, args)["checksum"] for _ in range(3)}
    assert len(checksums) == 1


def test_xmalloc_stack_changes_the_order_not_the_blocks(bench_dir):
    """--stack 1 (xmalloc-test's stack of batches) frees the same blocks as the FIFO queue."""
    args = ["--pairs", "2", "--batches", "100", "--batch-size", "64", "--queue", "8"]
    fifo = result_of(bench_dir, "bench_xmalloc", [*args, "--stack", "0"])
    stack = result_of(bench_dir, "bench_xmalloc", [*args, "--stack", "1"])
    assert (fifo["stack"], stack["stack"]) == ("0", "1")
    assert fifo["checksum"] == stack["checksum"]


def test_larson_checksum_covers_every_generation(bench_dir):
    args = ["--threads", "2", "--steps", "1000", "--slots", "100"]
    two = result_of(bench_dir, "bench_larson", [*args, "--generations", "2"])
    three = result_of(bench_dir, "bench_larson", [*args, "--generations", "3"])
    assert two["checksum"] != three["checksum"]
    assert int(three["ops"]) == 2 * 2 * 3 * 1000


def test_cache_scratch_modes_run_the_same_op_sequence(bench_dir):
    """The two modes differ only in where the first block comes from."""
    args = ["--threads", "2", "--iters", "50", "--writes", "500", "--size", "16"]
    scratch = result_of(bench_dir, "bench_cache_scratch", ["--mode", "scratch", *args])
    thrash = result_of(bench_dir, "bench_cache_scratch", ["--mode", "thrash", *args])
    assert (scratch["mode"], thrash["mode"]) == ("scratch", "thrash")
    assert scratch["checksum"] == thrash["checksum"]


# ---- memory: the blocks are really there while live ----


def test_prodcons_mem_reports_each_phase(bench_dir):
    count, pairs, max_size = 20000, 2, 1024
    args = ["--pairs", str(pairs), "--count", str(count), "--min", "512", "--max", str(max_size)]
    started = time.monotonic()
    values = result_of(bench_dir, "bench_prodcons_mem", [*args, "--quiet-ms", "300"])
    assert time.monotonic() - started >= 0.3  # the quiet phase happened
    # Every block is written at both ends, so each live one holds at least its 512 bytes.
    live_kb = pairs * count * 512 // 1024
    assert kib(values, "rss_after_produce_kb") >= live_kb
    # The kernel's RSS counters lag by up to 64 pages per thread, so VmHWM (maxrss_kb) can
    # trail a later reading by a little: compare with that slack.
    slack_kb = 64 * 4 * (2 * pairs + 1)
    assert kib(values, "maxrss_kb") + slack_kb >= kib(values, "rss_after_produce_kb")
    for key in ("rss_after_consume_kb", "rss_quiet_kb", "rss_end_kb"):
        assert 0 < kib(values, key) <= kib(values, "maxrss_kb") + slack_kb


def test_large_writes_every_page(bench_dir):
    """One 64 MiB block, freed at once: the peak holds all of its pages."""
    size = 64 << 20
    args = ["--ops", "1", "--live", "1", "--min", str(size), "--max", str(size)]
    values = result_of(bench_dir, "bench_large", args)
    assert (values["mallocs"], values["frees"]) == ("1", "1")
    assert kib(values, "maxrss_kb") >= size // 1024


def test_large_frees_everything_it_allocates(bench_dir):
    args = ["--ops", "60", "--live", "3", "--min", "32768", "--max", "1048576"]
    values = result_of(bench_dir, "bench_large", args)
    assert values["mallocs"] == values["frees"]
    assert int(values["reallocs"]) > 0


def test_leak_grow_keeps_the_leak_resident(bench_dir):
    args = ["--rounds", "10", "--steps", "20000", "--ws", "500", "--buffers", "2"]
    leaking = result_of(bench_dir, "bench_leak_grow", [*args, "--leak-permille", "200"])
    assert kib(leaking, "leaked_kb") > 1024
    assert kib(leaking, "rss_leaked_kb") >= kib(leaking, "leaked_kb")
    tight = result_of(bench_dir, "bench_leak_grow", [*args, "--leak-permille", "0"])
    assert (tight["leaked_kb"], tight["leaked_blocks"]) == ("0", "0")
    assert kib(tight, "rss_leaked_kb") < kib(leaking, "rss_leaked_kb")


def test_bigblock_writes_every_page_and_counts_its_faults(bench_dir):
    """One 8 MiB block, fresh from the OS under glibc (above its mmap threshold): every page
    written means at least one fault per page, and the peak holds them all."""
    size = 8 << 20
    args = ["--rounds", "1", "--min", str(size), "--max", str(size)]
    values = result_of(bench_dir, "bench_bigblock", args)
    assert (values["mallocs"], values["frees"]) == ("1", "1")
    assert int(values["minflt"]) >= size // 4096
    assert kib(values, "maxrss_kb") >= size // 1024


def test_bigblock_live_blocks_are_freed_out_of_order(bench_dir):
    args = ["--rounds", "20", "--live", "3", "--min", "65536", "--max", "1048576"]
    values = result_of(bench_dir, "bench_bigblock", [*args, "--stride", "64"])
    assert values["mallocs"] == values["frees"] == "20"
    assert values["stride"] == "64"


def test_thread_churn_handed_off_blocks_survive_their_thread(bench_dir):
    """Long-lived blocks left to the next round's thread are checked word by word when it
    frees them: a lost or overwritten block would be a runtime error (exit 1)."""
    args = ["--threads", "2", "--rounds", "4", "--scale", "3", "--transfer", "32"]
    kept = result_of(bench_dir, "bench_thread_churn", [*args, "--handoff-percent", "100"])
    plain = result_of(bench_dir, "bench_thread_churn", args)
    assert kept["mallocs"] == plain["mallocs"]
    assert kept["checksum"] != plain["checksum"]


def test_thread_churn_as_mstress_main_works_and_rounds_repeat(bench_dir):
    """--main-works 1: the main thread does thread 0's work, so one thread fewer is started
    each round, with the same choices; --same-rounds 1: every round repeats round 0's
    choices, as mstress seeds its threads by their index only."""
    args = ["--threads", "2", "--rounds", "3", "--scale", "2", "--transfer", "32"]
    plain = result_of(bench_dir, "bench_thread_churn", args)
    main = result_of(bench_dir, "bench_thread_churn", [*args, "--main-works", "1"])
    assert (plain["threads_started"], main["threads_started"]) == ("6", "3")
    assert main["checksum"] == plain["checksum"]  # the same work, run by main
    same = result_of(bench_dir, "bench_thread_churn", [*args, "--same-rounds", "1"])
    assert same["checksum"] != plain["checksum"]
    one = ["--threads", "2", "--rounds", "1", "--scale", "2", "--transfer", "32"]
    first = result_of(bench_dir, "bench_thread_churn", one)["checksum"]
    again = result_of(bench_dir, "bench_thread_churn", [*one, "--same-rounds", "1"])["checksum"]
    assert again == first  # round 0 is the round every round repeats


def test_thread_chain_peaks_at_its_waiting_threads_memory(bench_dir):
    """4 threads x 32 MiB, each waiting for the next with all of its blocks freed: the op
    sequence is the same under every allocator, the peak holds one thread's live data at
    least, and under libhakmem at most twice it, issue #38's bound (4.4 times before a waiting
    thread's empty medium pages went back, 2.8 with them; 1.7 since a heap that only gives pages
    back purges them at once)."""
    args = ["--depth", "4", "--mib", "32", "--max", "16384"]
    glibc = result_of(bench_dir, "bench_thread_chain", args)
    hakmem = result_of(bench_dir, "bench_thread_chain", args, preload=PRELOADS["hakmem"])
    assert glibc["checksum"] == hakmem["checksum"]
    assert (hakmem["depth"], hakmem["live_kib"]) == ("4", str(32 << 10))
    other = result_of(bench_dir, "bench_thread_chain", [*args, "--seed", "2"])
    assert other["checksum"] != glibc["checksum"]
    live = int(hakmem["live_kib"])
    assert kib(glibc, "maxrss_kb") >= live and kib(hakmem, "maxrss_kb") >= live
    assert kib(hakmem, "maxrss_kb") <= 2 * live


def test_churn_retained_blocks_survive_rounds(bench_dir):
    """Blocks kept across rounds are checked by the thread that frees them: a lost or
    overwritten block would be a runtime error (exit 1)."""
    args = ["--threads", "2", "--rounds", "6", "--objects", "4000", "--retain", "3000"]
    proc = run_bench(bench_dir, "bench_churn", args)
    assert proc.returncode == 0


# ---- every allocator runs every stress program at its workload's own arguments ----


@pytest.mark.parametrize(
    "library",
    [
        pytest.param(
            PRELOADS["hakmem"],
            marks=pytest.mark.skipif(
                not PRELOADS["hakmem"].exists(), reason="libhakmem.so not built"
            ),
        )
    ],
)
def test_stress_workloads_run_under_libhakmem_with_fewer_iterations(bench_dir, library):
    """The workloads.toml entries themselves (the group hakbench runs as @stress), with the
    iteration flag cut down, under glibc and libhakmem: same checksum, rss_end_kb."""
    stress = {n: w for n, w in load_workloads().items() if w.program in STRESS_PROGRAMS}
    assert {w.program for w in stress.values()} == STRESS_PROGRAMS
    for name, workload in stress.items():
        args = list(workload.args)
        flag = args.index(workload.iters_flag)
        args[flag + 1] = "1"
        if workload.program == "bench_churn":
            args[args.index("--objects") + 1] = "20000"
        if workload.program == "bench_larson":
            args[args.index("--steps") + 1] = "5000"
        if workload.program == "bench_prodcons_mem":
            args[args.index("--quiet-ms") + 1] = "0"
        if workload.program == "bench_larson_cxx":
            args[args.index("--steps") + 1] = "5000"
        if workload.program == "bench_thread_churn":
            args[args.index("--scale") + 1] = "2"
        if workload.program == "bench_thread_chain":
            args[args.index("--mib") + 1] = "4"
        system = result_of(bench_dir, workload.program, args)
        preloaded = parse_result(
            run_bench(bench_dir, workload.program, args, preload=library).stdout
        )[1]
        assert preloaded["malloc_impl"] == str(library.resolve()), name
        assert preloaded["checksum"] == system["checksum"], name
        assert int(preloaded["rss_end_kb"]) > 0, name


def test_stress_workloads_name_their_groups(repo_root):
    table = tomllib.loads((repo_root / "profiles" / "workloads.toml").read_text())
    stress = sorted(name for name, w in table.items() if "stress" in w.get("groups", []))
    assert stress == sorted(
        [
            "churn",
            "prodcons_mem",
            "large",
            "larson",
            "xmalloc",
            "cache_scratch",
            "cache_thrash",
            "leak_grow",
            "bigblock",
            "bigblock_live4",
            "larson_cxx",
            "thread_churn",
            "random_st",
        ]
    )
    single = {"large", "leak_grow", "bigblock", "bigblock_live4", "random_st"}
    for name in stress:
        workload = table[name]
        assert workload["iters_flag"] in workload["args"], name
        threads = workload.get("threads", 1)
        assert (threads > 1) == (name not in single), name


# ---- memory: libhakmem's peak RSS against the references, measured in the same run ----

# Issue #11's bounds on the three memory workloads: under BALANCED at most glibc's peak RSS,
# under C7_SAFE at most 1.2x mimalloc's. Each is the workload's own arguments (the quiet phase
# cut), the median of three runs taken in turn with the reference's; 5 % on top for what one
# short run's peak moves by from run to run (1-3 % here). results/memory_workloads.md has the
# measured ratios. Two exceptions, both from issue #38 (docs/notebook/2026-12-08.md):
# - churn under BALANCED: at most 1.2x glibc's. bench_churn was written to stand for mstress,
#   and the lean policy's superslabs per group of small classes, which kept it under glibc's
#   peak, held mstress itself (the public program) 1.19x above glibc's peak at 1.15x its time;
#   without them mstress is within 2 % of glibc's peak (undecided) at 0.78x its time, and churn
#   at 1.13x glibc's.
# - thread_churn, the lab's model that ranks allocators as mstress does (docs/stress.md), is
#   held to glibc's peak under BALANCED in churn's place.
MEMORY_CASES = {
    ("churn", "BALANCED"): ("system", 1.2),
    ("churn", "C7_SAFE"): ("mimalloc", 1.2),
    ("prodcons_mem", "BALANCED"): ("system", 1.0),
    ("prodcons_mem", "C7_SAFE"): ("mimalloc", 1.2),
    ("large", "BALANCED"): ("system", 1.0),
    ("large", "C7_SAFE"): ("mimalloc", 1.2),
    ("thread_churn", "BALANCED"): ("system", 1.0),
}
MEMORY_SLACK = 1.05


def peak_rss_kb(bench_dir, workload, preload, env):
    args = list(workload.args)
    if "--quiet-ms" in args:
        args[args.index("--quiet-ms") + 1] = "0"
    return int(result_of(bench_dir, workload.program, args, preload=preload, env=env)["maxrss_kb"])


@pytest.mark.slow
@pytest.mark.skipif(
    not (PRELOADS["hakmem"].exists() and PRELOADS["mimalloc"].exists()),
    reason="needs libhakmem.so and Debian's mimalloc",
)
@pytest.mark.parametrize("name,profile", sorted(MEMORY_CASES))
def test_memory_workloads_peak_rss_within_issue_11_bounds(bench_dir, name, profile):
    workload = load_workloads()[name]
    reference, bound = MEMORY_CASES[(name, profile)]
    ref_preload = None if reference == "system" else PRELOADS[reference]
    env = resolve_profile(profile).env
    ours, theirs = [], []
    for _ in range(3):
        theirs.append(peak_rss_kb(bench_dir, workload, ref_preload, {}))
        ours.append(peak_rss_kb(bench_dir, workload, PRELOADS["hakmem"], env))
    ratio = sorted(ours)[1] / sorted(theirs)[1]
    assert ratio <= bound * MEMORY_SLACK, (name, profile, reference, ours, theirs)
