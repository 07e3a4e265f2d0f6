"""The metrics a sample can carry: unit, direction, and how pyperf stores them.

One table, so the runner, the statistics, the reports and the pyperf export agree on what a
name means. ``pyperf_unit`` is one of pyperf's three units (second, byte, integer) with the
factor that converts our value into it; ``None`` means pyperf cannot hold the metric
(a rate such as ops/s or a ratio such as IPC).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    description: str
    pyperf_unit: str | None = None
    pyperf_scale: float = 1.0


_ROWS = (
    Metric("throughput", "ops/s", True, "harness Throughput line (timed loop only)"),
    Metric(
        "cpu_throughput",
        "ops/CPU-s",
        True,
        "ops per CPU second of the harness's timed loop (ops / loop_cpu_s): the time the "
        "program sat descheduled, waiting for a CPU, is not in it (`ab --metric cpu`); for a "
        "threaded program the CPU seconds of all its workers, spinning and yielding included",
    ),
    Metric(
        "active_throughput",
        "ops/active-s",
        True,
        "ops per active second of the timed loop: what `ab` judges a harness workload of "
        "several threads on. A thread's active time is its time in the loop less the time it "
        "waited for a CPU (schedstat run_delay) and less the CPU it burnt spinning for a "
        "partner thread: its work, and its sleeps on locks (contention), are in it. With 8 "
        "threads or more (larson's lifetimes) the median thread's rate (active_rate_median=), "
        "which the few threads a preempted lock holder kept asleep do not move; with fewer "
        "the run's ops / active_s",
    ),
    Metric(
        "chunk_throughput",
        "ops/s",
        True,
        "median over the chunks of the timed loop (HB_CHUNKS, `--launch chunks=K`) of each "
        "chunk's ops per wall second (chunk_rate=); with one chunk the loop's own rate",
    ),
    Metric(
        "chunk_cpu_throughput",
        "ops/CPU-s",
        True,
        "median over the chunks of the timed loop of each chunk's ops per CPU second "
        "(chunk_cpu_rate=)",
    ),
    Metric(
        "loop_cpu_s",
        "s",
        False,
        "CPU seconds of the harness's timed loop (cpu_seconds=): CLOCK_PROCESS_CPUTIME_ID "
        "around it, or the workers' CLOCK_THREAD_CPUTIME_ID summed (cpu_clock=thread); "
        "start-up and exit are not in it, unlike task_clock_ms and user_s",
        "second",
    ),
    Metric(
        "active_s",
        "s",
        False,
        "active seconds of the timed loop (active_seconds=): summed over the harness's threads, "
        "each thread's wall time in it less its run-queue wait and its spin-waits "
        "(harness/common.h, 'active time'); ops / active_s is the mean thread's rate",
        "second",
    ),
    Metric(
        "run_delay_s",
        "s",
        False,
        "seconds the harness's threads were runnable but waited for a CPU during the timed loop "
        "(schedstat run_delay, summed over threads; run_delay_seconds=)",
        "second",
    ),
    Metric(
        "wall_s",
        "s",
        False,
        "process wall time seen by hakbench, fork and exec included (under perf also perf's "
        "~20 ms start-up)",
        "second",
    ),
    Metric(
        "cpu_s",
        "s",
        False,
        "command workloads: user + system CPU time of the program and every child it reaped "
        "(wait4 through hakrun)",
        "second",
    ),
    Metric("app_rate", "/s", True, "command workloads: the rate the workload's regex read"),
    Metric(
        "app_time_s", "s", False, "command workloads: the time the workload's regex read", "second"
    ),
    Metric("user_s", "s", False, "user CPU time of the harness process", "second"),
    Metric("sys_s", "s", False, "system CPU time of the harness process", "second"),
    Metric(
        "maxrss_kb",
        "KiB",
        False,
        "peak RSS of the harness: its own VmHWM line, not wait4's ru_maxrss (which carries "
        "the launcher's high-water mark across exec); of a command workload: wait4's "
        "ru_maxrss through hakrun (largest process of the reaped tree)",
        "byte",
        1024.0,
    ),
    Metric(
        "rss_end_kb",
        "KiB",
        False,
        "resident set of the harness at its end, after its frees: what the allocator kept "
        "(its rss_end_kb= line; bench_burst's rss_kb=)",
        "byte",
        1024.0,
    ),
    Metric("minflt", "faults", False, "minor page faults of the harness process", "integer"),
    Metric("majflt", "faults", False, "major page faults of the harness process", "integer"),
    Metric("nvcsw", "switches", False, "voluntary context switches (wait4, no perf)", "integer"),
    Metric("nivcsw", "switches", False, "involuntary context switches (wait4, no perf)", "integer"),
    Metric("task_clock_ms", "ms", False, "perf task-clock", "second", 1e-3),
    Metric(
        "page_faults",
        "faults",
        False,
        "perf page-faults; without perf minflt + majflt from wait4",
        "integer",
    ),
    Metric(
        "context_switches",
        "switches",
        False,
        "perf context-switches; without perf nvcsw + nivcsw from wait4",
        "integer",
    ),
    Metric("cpu_migrations", "migrations", False, "perf cpu-migrations", "integer"),
    Metric("cycles", "cycles", False, "perf cycles (hardware)", "integer"),
    Metric("instructions", "instructions", False, "perf instructions (hardware)", "integer"),
    Metric("branch_misses", "misses", False, "perf branch-misses (hardware)", "integer"),
    Metric("ipc", "insn/cycle", True, "instructions per cycle (hardware)"),
    Metric("ir_per_op", "Ir/op", False, "callgrind instructions per harness op, start-up netted"),
)

METRICS: dict[str, Metric] = {m.name: m for m in _ROWS}

# perf event name -> metric name. user_time/system_time are perf's "tool" events: the
# workload's own rusage from perf's wait4 of it, so they are the harness's CPU times.
PERF_EVENTS = {
    "task-clock": "task_clock_ms",
    "page-faults": "page_faults",
    "minor-faults": "minflt",
    "major-faults": "majflt",
    "context-switches": "context_switches",
    "cpu-migrations": "cpu_migrations",
    "cycles": "cycles",
    "instructions": "instructions",
    "branch-misses": "branch_misses",
    "user_time": "user_s",
    "system_time": "sys_s",
}
# Metrics a perf-wrapped run adds or measures its own way: the table of ab's counter runs.
PERF_SOURCED = (*dict.fromkeys(PERF_EVENTS.values()), "ipc")

# perf reports these in ns; metrics are in seconds. (duration_time is not used: perf 6.1
# here printed 0.41 ms for a run with 1.68 ms of task-clock.)
PERF_NS_EVENTS = ("user_time", "system_time")

# Harness programs whose active_seconds= covers every thread of the timed loop (per-thread
# timers, or each worker accounted with hb_thread_begin/hb_thread_end): their workloads of
# several threads are judged on active_throughput. The others (churn, thread_churn,
# prodcons_mem: the main thread works and joins inside the loop) stay on wall clock.
ACTIVE_TIME_PROGRAMS = frozenset(
    {
        "bench_xthread",
        "bench_larson",
        "bench_larson_cxx",
        "bench_mid_large_mt",
        "bench_xmalloc",
        "bench_cache_scratch",
    }
)

# The primary metric and the guardrails every A/B judges (ISSUE 5: max RSS, page faults;
# issue 14: the RSS left at the end, where a memory policy shows).
PRIMARY = "throughput"
GUARDRAILS = ("maxrss_kb", "rss_end_kb", "page_faults")
