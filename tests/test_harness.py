"""The harness programs (build/bench/*): output contract, determinism across allocators,
malloc_impl, argument handling, the positional form, bench_soak's epochs, leak and signals.

Every run is short (well under a second) and nothing here asserts on time."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

SYSTEM_LIBS = Path("/usr/lib/x86_64-linux-gnu")
PRELOADS = {
    "mimalloc": SYSTEM_LIBS / "libmimalloc.so.2",
    "jemalloc": SYSTEM_LIBS / "libjemalloc.so.2",
    "tcmalloc": SYSTEM_LIBS / "libtcmalloc_minimal.so.4",
    "hakmem": Path(__file__).resolve().parent.parent / "build" / "fast" / "libhakmem.so",
}
STRESS_KEYS = {"rss_end_kb", "seed"}

# program -> (short arguments, expected ops (a number, or a function of the printed values
# where the count comes from the random sequence), program-specific keys)
WORKLOADS = {
    "bench_random_mixed": (
        ["--iters", "20000", "--ws", "64", "--seed", "3"],
        20000,
        {"iters", "ws", "min", "max", "seed", "extra_work", "extra_ops"},
    ),
    "bench_tiny_hot": (
        ["--cycles", "200", "--batch", "50", "--size", "48"],
        2 * 200 * 50,
        {"cycles", "size", "batch", "seed"},
    ),
    "bench_mid_large_mt": (
        ["--threads", "2", "--iters", "2000", "--ws", "32"],
        2 * 2000,
        {"threads", "iters", "ws", "min", "max", "seed"},
    ),
    "bench_xthread": (
        ["--pairs", "2", "--count", "5000", "--max", "256"],
        2 * 2 * 5000,
        {"pairs", "count", "min", "max", "seed", "threads"},
    ),
    "bench_burst": (
        ["--mb", "4", "--seed", "5"],
        lambda v: 2 * int(v["blocks"]),  # blocks until 4 MiB are live, then one free each
        {"mb", "min", "max", "seed", "blocks", "rss_kb", "rss_peak_kb"},
    ),
    "bench_churn": (
        ["--threads", "3", "--rounds", "3", "--objects", "3000", "--window", "100"]
        + ["--retain", "500", "--transfer", "64", "--grow-kb", "4"],
        # per thread and round: each block's malloc and free, the pointer array's reallocs
        # (512 pointers a step) and its free
        3 * 3 * (2 * 3000 + 6 + 1),
        STRESS_KEYS | {"threads", "rounds", "objects", "window", "retain", "transfer"},
    ),
    "bench_prodcons_mem": (
        ["--pairs", "2", "--rounds", "2", "--count", "5000", "--quiet-ms", "20"],
        2 * 2 * 2 * 5000,
        STRESS_KEYS
        | {"rss_after_produce_kb", "rss_after_consume_kb", "rss_quiet_kb", "pairs", "threads"},
    ),
    "bench_large": (
        ["--ops", "40", "--live", "4", "--min", "32768", "--max", "4194304", "--seed", "3"],
        lambda v: int(v["mallocs"]) + int(v["reallocs"]) + int(v["frees"]),
        STRESS_KEYS | {"mallocs", "reallocs", "frees", "live", "min", "max"},
    ),
    "bench_larson": (
        ["--threads", "3", "--generations", "4", "--steps", "2000", "--slots", "200"],
        2 * 3 * 4 * 2000,
        STRESS_KEYS | {"threads", "generations", "steps", "slots", "min", "max"},
    ),
    "bench_xmalloc": (
        ["--pairs", "2", "--batches", "300", "--batch-size", "50", "--queue", "4"],
        2 * 2 * 300 * 50,
        STRESS_KEYS | {"pairs", "threads", "batches", "batch_size", "queue", "stack"},
    ),
    "bench_cache_scratch": (
        ["--mode", "scratch", "--threads", "2", "--iters", "200", "--writes", "1000"],
        2 * 200 * 1000,  # the writes
        STRESS_KEYS | {"mode", "threads", "iters", "writes", "size"},
    ),
    "bench_leak_grow": (
        ["--rounds", "5", "--steps", "4000", "--ws", "200", "--leak-permille", "50"],
        lambda v: int(v["mallocs"]) + int(v["frees"]) + int(v["reallocs"]),
        STRESS_KEYS
        | {
            "mallocs",
            "frees",
            "reallocs",
            "rss_leaked_kb",
            "leaked_kb",
            "leaked_blocks",
            "rounds",
            "steps",
        },
    ),
    "bench_bigblock": (
        ["--rounds", "6", "--live", "2", "--min", "65536", "--max", "2097152", "--seed", "3"],
        lambda v: int(v["mallocs"]) + int(v["frees"]),
        STRESS_KEYS | {"minflt", "mallocs", "frees", "rounds", "live", "min", "max", "stride"},
    ),
    "bench_larson_cxx": (
        ["--threads", "3", "--generations", "3", "--steps", "2000", "--slots", "200"],
        2 * 3 * 3 * 2000,
        STRESS_KEYS | {"threads", "generations", "steps", "slots", "min", "max"},
    ),
    "bench_thread_churn": (
        ["--threads", "3", "--rounds", "3", "--scale", "2", "--transfer", "64"]
        + ["--handoff-percent", "30"],
        # every block's malloc and free, and per thread and round: the keep array's malloc and
        # free, the pointer array's realloc and free (one step of 100000 entries)
        lambda v: 2 * int(v["mallocs"]) + 3 * 3 * 4,
        STRESS_KEYS | {"mallocs", "threads", "rounds", "scale", "transfer", "big_percent"},
    ),
    "bench_random_st": (
        ["--steps", "20000", "--short", "16", "--medium", "200", "--long", "500", "--seed", "3"],
        lambda v: 2 * int(v["mallocs"]),
        STRESS_KEYS | {"mallocs", "frees", "steps", "short", "medium", "long", "min", "max"},
    ),
}
DETERMINISTIC = sorted(WORKLOADS)
CONTRACT_KEYS = {"ops", "seconds", "checksum", "maxrss_kb", "malloc_impl"}
THROUGHPUT_LINE = re.compile(r"^Throughput = (\d+) ops/s$")
KEY_VALUE_LINE = re.compile(r"^([a-z_][a-z0-9_]*)=(\S+)$")
EPOCH_LINE = re.compile(r"^epoch=(\d+) t=(\d+\.\d{3}) ops=(\d+) ops_s=(\d+) rss_kb=(\d+)$")


def run_bench(bench_dir, program, args, env=None, preload=None, check=True):
    """Runs a harness program in a clean environment (no stray HAKMEM_* from the caller)."""
    clean_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
    clean_env.update(env or {})
    if preload is not None:
        clean_env["LD_PRELOAD"] = str(preload)
    binary = bench_dir / program
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make harness` first")
    proc = subprocess.run(
        [str(binary), *args], env=clean_env, capture_output=True, text=True, timeout=60
    )
    if check:
        assert proc.returncode == 0, f"{program} {args}: rc={proc.returncode} {proc.stderr}"
    return proc


def parse_result(stdout):
    """Returns (throughput, {key: value}) from the contract lines, checking their shape."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Throughput")]
    assert len(starts) == 1, stdout
    match = THROUGHPUT_LINE.match(lines[starts[0]])
    assert match, lines[starts[0]]
    values = {}
    for line in lines[starts[0] + 1 :]:
        kv = KEY_VALUE_LINE.match(line)
        assert kv, f"not a key=value line: {line!r}"
        assert kv.group(1) not in values, f"duplicate key {kv.group(1)}"
        values[kv.group(1)] = kv.group(2)
    return int(match.group(1)), values


def result_of(bench_dir, program, args, **kwargs):
    return parse_result(run_bench(bench_dir, program, args, **kwargs).stdout)[1]


def available_preloads():
    return [
        pytest.param(
            name,
            path,
            marks=pytest.mark.skipif(not path.exists(), reason=f"{path} not installed"),
        )
        for name, path in PRELOADS.items()
    ]


# ---- output contract ----


@pytest.mark.parametrize("program", DETERMINISTIC)
def test_output_contract(bench_dir, program):
    args, expected_ops, extra_keys = WORKLOADS[program]
    proc = run_bench(bench_dir, program, args)
    assert proc.stdout.splitlines()[0].startswith("Throughput = ")
    assert proc.stderr == ""
    throughput, values = parse_result(proc.stdout)
    assert CONTRACT_KEYS | extra_keys <= values.keys()
    if callable(expected_ops):
        expected_ops = expected_ops(values)
    assert int(values["ops"]) == expected_ops > 0
    assert re.fullmatch(r"\d+\.\d{6}", values["seconds"])
    seconds = float(values["seconds"])
    assert seconds > 0
    # Throughput is ops/seconds of the printed figures, up to the 6-decimal rounding.
    assert throughput == pytest.approx(expected_ops / seconds, rel=0.01)
    assert re.fullmatch(r"[0-9a-f]{16}", values["checksum"])
    assert int(values["maxrss_kb"]) > 0
    assert Path(values["malloc_impl"]).is_absolute()
    assert Path(values["malloc_impl"]).exists()


@pytest.mark.parametrize(
    "program,args",
    [
        ("bench_random_mixed", ["--iters", "0"]),
        ("bench_tiny_hot", ["--cycles", "0"]),
        ("bench_mid_large_mt", ["--threads", "2", "--iters", "0"]),
        ("bench_xthread", ["--pairs", "1", "--count", "0"]),
        ("bench_soak", ["--epochs", "0", "--epoch-ms", "10"]),
        ("bench_burst", ["--mb", "0"]),
        ("bench_churn", ["--threads", "2", "--rounds", "0"]),
        ("bench_prodcons_mem", ["--count", "0", "--quiet-ms", "0"]),
        ("bench_large", ["--ops", "0"]),
        ("bench_larson", ["--generations", "0"]),
        ("bench_xmalloc", ["--batches", "0"]),
        ("bench_cache_scratch", ["--mode", "thrash", "--iters", "0"]),
        ("bench_leak_grow", ["--rounds", "0"]),
        ("bench_bigblock", ["--rounds", "0"]),
        ("bench_larson_cxx", ["--generations", "0"]),
        ("bench_thread_churn", ["--rounds", "0"]),
        ("bench_random_st", ["--steps", "0"]),
    ],
)
def test_zero_iterations_measure_start_up_only(bench_dir, program, args):
    throughput, values = parse_result(run_bench(bench_dir, program, args).stdout)
    assert throughput == 0
    assert values["ops"] == "0"
    assert CONTRACT_KEYS <= values.keys()


@pytest.mark.parametrize("program", [*DETERMINISTIC, "bench_soak"])
def test_help_prints_usage_and_exits_0(bench_dir, program):
    proc = run_bench(bench_dir, program, ["--help"])
    assert proc.stdout.startswith(f"usage: {program}")


def test_flag_equals_form_is_the_same_as_separate_value(bench_dir):
    separate = result_of(bench_dir, "bench_random_mixed", ["--iters", "5000", "--ws", "50"])
    joined = result_of(bench_dir, "bench_random_mixed", ["--iters=5000", "--ws=50"])
    assert separate["checksum"] == joined["checksum"]


# ---- determinism: the op sequence is the same under every allocator ----


@pytest.mark.parametrize("allocator,library", available_preloads())
@pytest.mark.parametrize("program", DETERMINISTIC)
def test_checksum_identical_under_preloaded_allocators(bench_dir, program, allocator, library):
    args = WORKLOADS[program][0]
    system = result_of(bench_dir, program, args)
    preloaded = result_of(bench_dir, program, args, preload=library)
    assert allocator in preloaded["malloc_impl"]
    assert preloaded["checksum"] == system["checksum"]
    assert preloaded["ops"] == system["ops"]


@pytest.mark.parametrize("program", DETERMINISTIC)
def test_hakmem_twin_same_checksum_and_names_itself(bench_dir, program):
    twin = bench_dir / f"{program}_hakmem"
    if not twin.exists():
        pytest.skip(f"{twin.name} not built (no allocator sources yet)")
    args = WORKLOADS[program][0]
    plain = result_of(bench_dir, program, args)
    linked = result_of(bench_dir, twin.name, args)
    assert linked["checksum"] == plain["checksum"]
    assert linked["malloc_impl"] == str(twin.resolve())


@pytest.mark.parametrize(
    "program,changed",
    [
        ("bench_random_mixed", ["--seed", "4"]),
        ("bench_random_mixed", ["--max", "512"]),
        ("bench_tiny_hot", ["--size", "64"]),
        ("bench_mid_large_mt", ["--seed", "9"]),
        ("bench_xthread", ["--seed", "9"]),
        ("bench_churn", ["--seed", "9"]),
        ("bench_prodcons_mem", ["--seed", "9"]),
        ("bench_large", ["--seed", "4"]),
        ("bench_larson", ["--seed", "9"]),
        ("bench_xmalloc", ["--seed", "9"]),
        ("bench_cache_scratch", ["--seed", "9"]),
        ("bench_leak_grow", ["--seed", "9"]),
        ("bench_bigblock", ["--seed", "9"]),
        ("bench_larson_cxx", ["--seed", "9"]),
        ("bench_thread_churn", ["--seed", "9"]),
        ("bench_random_st", ["--seed", "9"]),
    ],
)
def test_checksum_follows_the_op_sequence(bench_dir, program, changed):
    """A different sequence gives a different checksum (it is not a constant)."""
    args = WORKLOADS[program][0]
    base = result_of(bench_dir, program, args)
    flag = changed[0]
    if flag in args:
        index = args.index(flag)
        args = args[:index] + changed + args[index + 2 :]
    else:
        args = args + changed
    assert result_of(bench_dir, program, args)["checksum"] != base["checksum"]


def test_thread_checksums_do_not_depend_on_scheduling(bench_dir):
    args = ["--pairs", "3", "--count", "3000"]
    checksums = {result_of(bench_dir, "bench_xthread", args)["checksum"] for _ in range(3)}
    assert len(checksums) == 1


# ---- malloc_impl ----


def test_malloc_impl_is_libc_without_preload(bench_dir):
    values = result_of(bench_dir, "bench_tiny_hot", ["--cycles", "1"])
    assert Path(values["malloc_impl"]).name.startswith("libc.so")


@pytest.mark.parametrize("allocator,library", available_preloads())
def test_malloc_impl_names_the_preloaded_library(bench_dir, allocator, library):
    values = result_of(bench_dir, "bench_tiny_hot", ["--cycles", "1"], preload=library)
    assert values["malloc_impl"] == str(library.resolve())


# ---- bad arguments: one line on stderr, exit status 2 ----

BAD_ARGUMENTS = [
    ("bench_random_mixed", ["--iters", "100", "--bogus", "1"]),
    ("bench_random_mixed", ["--iters"]),
    ("bench_random_mixed", []),
    ("bench_random_mixed", ["--iters", "abc"]),
    ("bench_random_mixed", ["--iters", "12x"]),
    ("bench_random_mixed", ["--iters", "-5"]),
    ("bench_random_mixed", ["--iters", "99999999999999999999999"]),
    ("bench_random_mixed", ["--iters", "10", "--min", "100", "--max", "10"]),
    ("bench_random_mixed", ["--iters", "10", "--min", "0"]),
    ("bench_random_mixed", ["--iters", "10", "--ws", "0"]),
    ("bench_random_mixed", ["--iters", "10", "--iters", "20"]),
    ("bench_random_mixed", ["--iters", "10", "stray"]),
    ("bench_random_mixed", ["--iters", "10", "--extra-work", "-1"]),
    ("bench_random_mixed", ["--iters", "10", "--extra-work", "nan"]),
    ("bench_random_mixed", ["--iters", "10", "--extra-ops", "0.5"]),
    ("bench_random_mixed", ["--iters", "10", "--extra-ops", "-1"]),
    ("bench_random_mixed", ["--iters", "10", "--extra-ops", "1000001"]),
    ("bench_random_mixed", ["100", "10"]),
    ("bench_random_mixed", ["100", "0", "1"]),
    ("bench_tiny_hot", ["--cycles", "10", "--batch", "0"]),
    ("bench_tiny_hot", ["--cycles", "10", "--size", "0"]),
    ("bench_tiny_hot", ["--cycles", " 10"]),
    ("bench_mid_large_mt", ["--threads", "0", "--iters", "10"]),
    ("bench_mid_large_mt", ["--iters", "10"]),
    ("bench_mid_large_mt", ["--threads", "2", "--iters", "10", "--min", "9000", "--max", "8"]),
    ("bench_xthread", ["--pairs", "0", "--count", "10"]),
    ("bench_xthread", ["--pairs", "1", "--count", "1.5"]),
    ("bench_soak", ["--epoch-ms", "10"]),
    ("bench_soak", ["--seconds", "1", "--epochs", "2", "--epoch-ms", "10"]),
    ("bench_soak", ["--epochs", "2", "--epoch-ms", "0"]),
    ("bench_soak", ["--epochs", "2"]),
    ("bench_soak", ["--epochs", "2", "--epoch-ms", "10", "--leak-kb-per-s", "x"]),
    ("bench_burst", ["--mb", "-1"]),
    ("bench_burst", ["--mb", "4", "--min", "64", "--max", "8"]),
    ("bench_burst", ["--mb", "4", "--bogus"]),
    ("bench_churn", ["--threads", "0"]),
    ("bench_churn", ["--min", "4"]),
    ("bench_churn", ["--swap-percent", "101"]),
    ("bench_churn", ["--window", "0"]),
    ("bench_churn", ["--max", "1024", "--big-max", "512"]),
    ("bench_prodcons_mem", ["--pairs", "0"]),
    ("bench_prodcons_mem", ["--rounds", "0"]),
    ("bench_large", ["--live", "0"]),
    ("bench_large", ["--min", "65536", "--max", "100"]),
    ("bench_larson", ["--slots", "0"]),
    ("bench_larson", ["--threads", "abc"]),
    ("bench_xmalloc", ["--batch-size", "0"]),
    ("bench_xmalloc", ["--stack", "2"]),
    ("bench_xmalloc", ["--pairs", "1", "--threads", "2"]),
    ("bench_cache_scratch", ["--iters", "10"]),
    ("bench_cache_scratch", ["--mode", "bogus"]),
    ("bench_cache_scratch", ["--mode"]),
    ("bench_cache_scratch", ["--mode", "scratch", "--mode", "thrash"]),
    ("bench_cache_scratch", ["--mode", "thrash", "--size", "0"]),
    ("bench_leak_grow", ["--leak-permille", "1001"]),
    ("bench_leak_grow", ["--ws", "0"]),
    ("bench_bigblock", ["--live", "0"]),
    ("bench_bigblock", ["--stride", "4"]),
    ("bench_bigblock", ["--min", "4", "--max", "64"]),
    ("bench_larson_cxx", ["--slots", "0"]),
    ("bench_larson_cxx", ["--min", "100", "--max", "10"]),
    ("bench_thread_churn", ["--threads", "0"]),
    ("bench_thread_churn", ["--big-percent", "101"]),
    ("bench_thread_churn", ["--handoff-percent", "101"]),
    ("bench_thread_churn", ["--main-works", "2"]),
    ("bench_thread_churn", ["--same-rounds", "2"]),
    ("bench_random_st", ["--long", "0"]),
    ("bench_random_st", ["--max", "99999999"]),
]


@pytest.mark.parametrize("program,args", BAD_ARGUMENTS)
def test_bad_arguments_exit_2_with_one_line(bench_dir, program, args):
    proc = run_bench(bench_dir, program, args, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{program}: ")


@pytest.mark.parametrize(
    "env",
    [
        {"HAKMEM_BENCH_MIN_SIZE": "abc"},
        {"HAKMEM_BENCH_MIN_SIZE": "2000", "HAKMEM_BENCH_MAX_SIZE": "100"},
        {"HAKMEM_BENCH_C7_ONLY": "yes"},
    ],
)
def test_positional_form_rejects_bad_environment(bench_dir, env):
    proc = run_bench(bench_dir, "bench_random_mixed", ["100", "10", "1"], env=env, check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1


# ---- bench_random_mixed: positional form and extra work ----


@pytest.mark.parametrize(
    "env,flags",
    [
        ({}, ["--min", "16", "--max", "1024"]),
        (
            {"HAKMEM_BENCH_MIN_SIZE": "32", "HAKMEM_BENCH_MAX_SIZE": "512"},
            ["--min", "32", "--max", "512"],
        ),
        ({"HAKMEM_BENCH_C7_ONLY": "1"}, ["--min", "1024", "--max", "1024"]),
    ],
)
def test_positional_form_matches_flag_form(bench_dir, env, flags):
    positional = result_of(bench_dir, "bench_random_mixed", ["30000", "100", "7"], env=env)
    flagged = result_of(
        bench_dir,
        "bench_random_mixed",
        ["--iters", "30000", "--ws", "100", "--seed", "7", *flags],
    )
    assert positional["checksum"] == flagged["checksum"]
    assert (positional["min"], positional["max"]) == (flags[1], flags[3])


@pytest.mark.parametrize(
    "flag,value,printed",
    [
        # --extra-work's mean is exact to the 16.16 fixed-point resolution
        *(
            ("--extra-work", u, pytest.approx(float(u), abs=1 / 65536))
            for u in ("0.0156", "1.25", "3")
        ),
        *(("--extra-ops", n, float(n)) for n in ("0", "1", "0002", "40")),
    ],
)
def test_extra_work_keeps_the_op_sequence(bench_dir, flag, value, printed):
    args = ["--iters", "20000", "--ws", "64"]
    plain = result_of(bench_dir, "bench_random_mixed", args)
    worked = result_of(bench_dir, "bench_random_mixed", [*args, flag, value])
    assert worked["checksum"] == plain["checksum"]
    assert float(worked[flag[2:].replace("-", "_")]) == printed
    assert float(plain["extra_work"]) == float(plain["extra_ops"]) == 0


# ---- bench_soak ----


def parse_soak(stdout):
    epochs = [EPOCH_LINE.match(line) for line in stdout.splitlines() if line.startswith("epoch=")]
    assert all(epochs), stdout
    return [tuple(float(g) for g in m.groups()) for m in epochs], parse_result(stdout)[1]


def test_soak_epoch_lines(bench_dir):
    proc = run_bench(bench_dir, "bench_soak", ["--epochs", "3", "--epoch-ms", "30", "--ws", "50"])
    epochs, values = parse_soak(proc.stdout)
    assert [e[0] for e in epochs] == [1, 2, 3]
    times = [e[1] for e in epochs]
    assert times == sorted(times) and times[0] >= 0.030
    assert all(e[2] > 0 and e[3] > 0 and e[4] > 0 for e in epochs)
    assert int(values["ops"]) == sum(int(e[2]) for e in epochs)
    assert values["epochs"] == "3"
    # Epoch lines come first, the contract lines after them.
    assert proc.stdout.splitlines()[3].startswith("Throughput = ")


def test_soak_by_seconds_stops_at_the_deadline(bench_dir):
    proc = run_bench(bench_dir, "bench_soak", ["--seconds", "0.1", "--epoch-ms", "40"])
    epochs, values = parse_soak(proc.stdout)
    # 40 + 40 + the 20 ms left, or fewer epochs when the VM stalled one past the deadline.
    assert 1 <= len(epochs) <= 3
    assert epochs[-1][1] >= 0.1
    assert float(values["seconds"]) >= 0.1


def test_soak_leak_makes_rss_grow(bench_dir):
    leak_kb_per_s = 200_000
    args = ["--epochs", "4", "--epoch-ms", "50", "--leak-kb-per-s", str(leak_kb_per_s)]
    epochs, values = parse_soak(run_bench(bench_dir, "bench_soak", args).stdout)
    rss = [e[4] for e in epochs]
    assert rss == sorted(rss)
    leaked_between = leak_kb_per_s * (epochs[-1][1] - epochs[0][1])
    assert rss[-1] - rss[0] >= 0.8 * leaked_between
    assert int(values["leaked_kb"]) >= leak_kb_per_s * float(values["seconds"]) * 0.9


def test_soak_without_leak_keeps_rss_flat(bench_dir):
    args = ["--epochs", "4", "--epoch-ms", "50"]
    epochs, values = parse_soak(run_bench(bench_dir, "bench_soak", args).stdout)
    assert epochs[-1][4] - epochs[0][4] < 2048
    assert values["leaked_kb"] == "0"


def test_soak_sigterm_finishes_the_epoch_and_prints_the_result(bench_dir):
    proc = subprocess.Popen(
        [str(bench_dir / "bench_soak"), "--seconds", "60", "--epoch-ms", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        first = proc.stdout.readline()  # the program is running its loop
        assert EPOCH_LINE.match(first.rstrip("\n")), first
        proc.send_signal(signal.SIGTERM)
        rest, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    epochs, values = parse_soak(first + rest)
    assert values["stopped_by_signal"] == "1"
    assert int(values["epochs"]) == len(epochs)
    assert int(values["ops"]) == sum(int(e[2]) for e in epochs)


NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


@pytest.fixture
def reserved_huge_pages():
    """16 huge pages reserved for the test (root only), the machine's setting restored after."""
    if os.geteuid() != 0 or not os.access(NR_HUGEPAGES, os.W_OK):
        pytest.skip("reserving huge pages needs root")
    before = NR_HUGEPAGES.read_text().strip()
    try:
        NR_HUGEPAGES.write_text("16")
        if int(NR_HUGEPAGES.read_text()) < 4:
            pytest.skip("the kernel reserved no huge pages")
        yield
    finally:
        NR_HUGEPAGES.write_text(before)


@pytest.mark.slow
@pytest.mark.xdist_group("huge_pages")
def test_peak_memory_counts_huge_pages(bench_dir, reserved_huge_pages):
    """RSS leaves HugeTLB pages out: an allocator whose memory is huge pages (mimalloc with its
    large OS pages) must not read as holding almost nothing. maxrss_kb and rss_end_kb add the
    huge pages mapped at the end."""
    if not PRELOADS["mimalloc"].exists():
        pytest.skip("Debian's mimalloc is not installed")
    args = ["--iters", "20000", "--ws", "2000", "--min", "16", "--max", "1024", "--seed", "3"]
    env = {"MIMALLOC_LARGE_OS_PAGES": "1"}
    proc = run_bench(bench_dir, "bench_random_mixed", args, env=env, preload=PRELOADS["mimalloc"])
    _, values = parse_result(proc.stdout)
    huge = int(values["hugetlb_kb"])
    assert huge >= 2048  # at least one 2 MiB page
    assert int(values["maxrss_kb"]) >= huge
    plain = run_bench(bench_dir, "bench_random_mixed", args, preload=PRELOADS["mimalloc"])
    assert int(parse_result(plain.stdout)[1]["hugetlb_kb"]) == 0
