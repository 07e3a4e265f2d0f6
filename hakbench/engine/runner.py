"""Run one sample: one process of one cell, in a clean environment, measured and parsed.

What the numbers mean (ISSUE 5 asks for the harness's own rusage, not perf's):

- With perf (``perf=True`` when perf works: ``run``'s default and ``ab``'s counter runs)
  the process is ``perf stat -x, -o FILE -e ... -- harness``. perf is the harness's parent
  and reaps it with wait4; its tool events
  ``user_time``/``system_time`` are that rusage (the harness's own CPU times), and the
  software events (task-clock, page-faults, minor/major-faults, context-switches) count the
  harness only. perf's own start-up is outside every counter. Voluntary/involuntary switches
  are not split by perf, so nvcsw/nivcsw are unavailable there (context_switches has their
  sum). wall_s is what hakbench saw, perf's start-up included.
- Without perf the harness is hakbench's own child (no wrapper process) and os.wait4 on its
  pid gives its rusage directly: user/sys, minor/major faults, voluntary/involuntary switches
  (context_switches is their sum). wall_s is fork + exec + run as hakbench saw it. This is
  how `ab` measures its pairs by default (``--perf observe``): a perf wrapper per process
  doubled the width of the throughput CI on this VM (see hakbench.experiments.ab).
- The timed loop's own figures come from the harness's lines: ``throughput`` (its
  Throughput line, wall clock), ``cpu_throughput`` (ops over ``loop_cpu_s``, its
  ``cpu_seconds=``: CPU time of the loop alone, without start-up and without the time it
  waited for a CPU) and the medians over the loop's chunks ``chunk_throughput`` and
  ``chunk_cpu_throughput`` (harness/common.h; one chunk unless ``launch.chunks``).
- ``launch`` (hakbench.engine.process.Launch) starts the process pinned, niced, SCHED_FIFO,
  without ASLR, with chunks or a spin-up; the sample records it as ``launch``.
- Max RSS, in every mode, is the harness's own ``maxrss_kb=`` line, VmHWM of its own
  address space. Not wait4's ru_maxrss: Linux carries the replaced image's RSS high-water
  mark across exec into it, so a harness exec'd from this Python process would report
  Python's ~70 MB and one forked by perf perf's image.

perf exits 0 when its workload dies of a signal and only prints ``argv0: <strsignal>`` on
stderr (tools/perf/builtin-stat.c psignal), so the signal is read back from that line. perf
6.1 also has a race: its SIGCHLD handler (skip_signal) sets child_pid = -1, and if the child
is already dead when perf reaches ``if (child_pid != -1) wait4(...)`` it never reaps it: no
status, no rusage. 1 in 100 runs of a program that crashes at once lost its signal here.
So a perf sample that ended with status 0 and no Throughput line is run again without perf
to learn how it really ended, and perf's tool times count only when perf did reap the child.
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
import tempfile
import time
from pathlib import Path

from hakbench.collect.allocstats import parse_alloc_stats
from hakbench.collect.harness import parse_harness_output
from hakbench.collect.perfstat import HARDWARE_EVENTS, SOFTWARE_EVENTS, parse_perf_csv
from hakbench.core.metrics import PERF_EVENTS, PERF_NS_EVENTS
from hakbench.engine.probes import probe_perf
from hakbench.engine.process import Launch, new_sample, signal_name, spawn, tail, wait_group
from hakbench.engine.reference import cache_key, cached, program_identity

# Events beyond probe_perf's list: the split fault counts and perf's rusage tool events.
EXTRA_PERF_EVENTS = ("minor-faults", "major-faults", "user_time", "system_time")
_SIGNAL_BY_TEXT = {_signal.strsignal(s): int(s) for s in _signal.valid_signals() if s < 65}


def perf_usable() -> bool:
    return bool(probe_perf().get("available"))


def perf_events() -> list[str]:
    return [*SOFTWARE_EVENTS, *EXTRA_PERF_EVENTS, *HARDWARE_EVENTS]


def signal_from_perf_stderr(stderr: str, argv0: str) -> int | None:
    """The signal perf reported for its workload (``<argv0>: Segmentation fault``)."""
    prefix = f"{argv0}: "
    for line in reversed(stderr.splitlines()):
        if line.startswith(prefix) and line[len(prefix) :].strip() in _SIGNAL_BY_TEXT:
            return _SIGNAL_BY_TEXT[line[len(prefix) :].strip()]
    return None


def perf_metrics(text: str) -> tuple[dict, list[str]]:
    """Metrics and unavailable names from a ``perf stat -x,`` output file."""
    st = parse_perf_csv(text)
    metrics: dict = {}
    unavailable: list[str] = []
    # perf prints a tool time of 0 as "<not counted>" (its run time is the value itself); its
    # own footer says "0.000000000 seconds sys" for the same run: a measured zero. But when
    # both are missing perf did not reap the child (see above) and nothing was measured.
    reaped = any(
        st.counters.get(e) is not None and st.counters[e].value is not None for e in PERF_NS_EVENTS
    )
    for event, name in PERF_EVENTS.items():
        c = st.counters.get(event)
        if c is None:
            continue
        value = c.value
        if value is None and event in PERF_NS_EVENTS and c.status == "not counted" and reaped:
            value = 0.0
        if value is None:
            unavailable.append(name)
            continue
        metrics[name] = value * 1e-9 if event in PERF_NS_EVENTS else value
    if "cycles" in metrics and "instructions" in metrics and metrics["cycles"] > 0:
        metrics["ipc"] = metrics["instructions"] / metrics["cycles"]
    elif "cycles" in unavailable or "instructions" in unavailable:
        unavailable.append("ipc")
    return metrics, sorted(set(unavailable))


def rusage_metrics(ru) -> dict:
    """Metrics from a wait4 rusage of the harness (not its ru_maxrss: see the module doc)."""
    return {
        "user_s": ru.ru_utime,
        "sys_s": ru.ru_stime,
        "minflt": ru.ru_minflt,
        "majflt": ru.ru_majflt,
        "nvcsw": ru.ru_nvcsw,
        "nivcsw": ru.ru_nivcsw,
        "page_faults": ru.ru_minflt + ru.ru_majflt,
        "context_switches": ru.ru_nvcsw + ru.ru_nivcsw,
    }


# From this many threads on, a run's active rate is its median thread's (bench_larson's
# hundreds of short lifetimes); below, the run's ops over its threads' summed active time (2
# threads: the mean of two rates is the faster thread's).
MEDIAN_THREADS = 8


def active_rate(harness: dict) -> float | None:
    """Ops per active second (harness/common.h, "active time"): the median thread's with
    MEDIAN_THREADS threads or more, else the run's ops over its summed active seconds."""
    ops, active = harness.get("ops"), harness.get("active_seconds")
    median, threads = harness.get("active_rate_median"), harness.get("active_threads", 1)
    if isinstance(threads, int) and threads >= MEDIAN_THREADS and isinstance(median, (int, float)):
        return float(median) if median > 0 else None
    if isinstance(ops, int) and ops > 0 and isinstance(active, (int, float)) and active > 0:
        return ops / active
    return None


def loop_metrics(harness: dict) -> dict:
    """The timed loop's CPU time and the rates beside its Throughput line: ops per CPU second
    and the chunk medians (only what the harness printed, and only when an op ran)."""
    out: dict = {}
    ops, cpu = harness.get("ops"), harness.get("cpu_seconds")
    if isinstance(cpu, (int, float)) and cpu > 0:
        out["loop_cpu_s"] = float(cpu)
        if isinstance(ops, int) and ops > 0:
            out["cpu_throughput"] = ops / cpu
    active = harness.get("active_seconds")
    if isinstance(active, (int, float)) and active > 0:
        out["active_s"] = float(active)
        out["run_delay_s"] = float(harness.get("run_delay_seconds", 0.0))
        rate = active_rate(harness)
        if rate:
            out["active_throughput"] = rate
    if harness.get("chunks"):
        for key, name in (
            ("chunk_rate", "chunk_throughput"),
            ("chunk_cpu_rate", "chunk_cpu_throughput"),
        ):
            value = harness.get(key)
            if isinstance(value, (int, float)) and value > 0:
                out[name] = value
    return out


# What a direct run cannot measure: perf's own counters.
DIRECT_UNAVAILABLE = (
    "task_clock_ms",
    "cpu_migrations",
    "cycles",
    "instructions",
    "branch_misses",
    "ipc",
)


def instruction_sample(cell, phase: str = "instructions", runs: int | None = None) -> dict:
    """The exact instruction count of ``cell`` (hakbench.engine.instructions) as a sample: the
    lowest of ``runs`` counts, by default several where threads interleave, else one
    (``default_runs``; the gate takes each count as a sample of its own, ``runs=1``)."""
    from hakbench.engine.instructions import (  # valgrind only when asked
        default_runs,
        measure_lowest,
    )

    sample = new_sample(cell, phase)
    sample["argv"] = cell.command()[0]
    r = measure_lowest(cell, runs or default_runs(cell.workload))
    ok = r.get("status") == "ok" and bool(r.get("ir_per_op"))
    sample.update(status="ok" if ok else "failed", error=r.get("error"), tool=r.get("tool"))
    sample["instructions"] = r
    if ok:
        sample["metrics"] = {"ir_per_op": r["ir_per_op"], "instructions": r["ir_total"]}
    return sample


def _read_back(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def run_sample(
    cell,
    *,
    phase: str = "measure",
    perf: bool = True,
    stats: bool = False,
    timeout: float = 120.0,
    args=None,
    launch: Launch | None = None,
) -> dict:
    """One process of ``cell``; never raises for a failed process: the sample says so.
    ``launch``: how the harness is started (pinned, niced, ...; process.Launch).

    A command workload (a real program) is run by hakbench.engine.command_run, never under
    perf, and as always (``launch`` is for harness programs)."""
    if cell.workload.command is not None:
        from hakbench.engine.command_run import run_command_sample

        return run_command_sample(cell, phase=phase, timeout=timeout, stats=stats)
    alloc = cell.resolved_allocator()
    sample = new_sample(cell, phase)
    if not alloc.available:
        sample["error"] = alloc.missing_reason
        return sample
    argv, env = cell.command(args)
    if stats:
        env["HAKMEM_STATS"] = "1"
    sample["argv"] = argv
    sample["launcher"] = None
    if launch is not None and launch != Launch():
        sample["launch"] = str(launch)
    if not Path(argv[0]).exists():
        sample["error"] = f"{argv[0]} not built (run `make build`)"
        return sample
    use_perf = perf and perf_usable()
    ran = _run_process(sample, argv, env, launch, use_perf, timeout)
    if ran is None:
        return sample
    status, ru, timed_out, stdout, stderr, perf_text = ran
    sample["stderr_tail"] = tail(stderr)
    code = os.waitstatus_to_exitcode(status)
    sig = -code if code < 0 else None
    if use_perf and sig is None:
        sig = signal_from_perf_stderr(stderr, argv[0])
    sample["returncode"] = code
    sample["signal"] = sig
    harness = parse_harness_output(stdout)
    sample["harness"] = harness
    sample["alloc_stats"] = parse_alloc_stats(stderr)
    _fill_metrics(sample, harness, perf_text if use_perf else None, ru)
    if use_perf and code == 0 and sig is None and harness.get("throughput") is None:
        rerun = run_sample(
            cell, phase=phase, perf=False, stats=stats, timeout=timeout, args=args, launch=launch
        )
        rerun["error"] = (
            "perf lost the exit status (its SIGCHLD race); re-run without perf: "
            f"{rerun['error'] or rerun['status']}"
        )
        rerun["perf_lost_status"] = True
        return rerun
    _judge(sample, alloc, harness, (code, sig, timed_out), timeout)
    if sample["status"] == "ok" and phase != "reference" and harness.get("checksum"):
        check_checksum(sample, cell, args, timeout)
    return sample


def _run_process(sample: dict, argv, env, launch, use_perf: bool, timeout: float):
    """Start the harness (under ``perf stat`` when ``use_perf``) and wait4 it. -> (status,
    rusage, timed out, stdout, stderr, perf's CSV), or None when it could not start (the
    sample says why)."""
    # stdout and stderr go to anonymous files: no directory to make and remove per process,
    # a sizeable share of a short pair's overhead; only perf's CSV needs a name
    with contextlib.ExitStack() as files:
        out, err = (files.enter_context(tempfile.TemporaryFile()) for _ in range(2))
        full, perf_path = argv, None
        if use_perf:
            tmp = files.enter_context(tempfile.TemporaryDirectory(prefix="hakbench-"))
            perf_path = Path(tmp) / "perf.csv"
            full = ["perf", "stat", "-x,", "-o", str(perf_path), "-e", ",".join(perf_events())]
            full += ["--", *argv]
        sample["launcher"] = "perf" if use_perf else "direct"
        t0 = time.perf_counter()
        try:
            proc = spawn(full, env, launch, stdout=out, stderr=err)
        except OSError as e:
            sample["error"] = f"cannot start {full[0]}: {e}"
            return None
        status, ru, timed_out = wait_group(proc, timeout)
        sample["wall_s"] = time.perf_counter() - t0
        stdout, stderr = (_read_back(f) for f in (out, err))
        perf_text = perf_path.read_text(errors="replace") if use_perf and perf_path.exists() else ""
    return status, ru, timed_out, stdout, stderr, perf_text


def _fill_metrics(sample: dict, harness: dict, perf_text: str | None, ru) -> None:
    """The sample's metrics and what was not measured: perf's counts (``perf_text``) or
    wait4's rusage, the wall clock, and the harness's own lines."""
    if perf_text is not None:
        metrics, unavailable = perf_metrics(perf_text)
        unavailable += ["nvcsw", "nivcsw"]
    else:
        metrics, unavailable = rusage_metrics(ru), list(DIRECT_UNAVAILABLE)
    metrics["wall_s"] = sample["wall_s"]
    if isinstance(harness.get("maxrss_kb"), int) and harness["maxrss_kb"] > 0:
        metrics["maxrss_kb"] = harness["maxrss_kb"]
    else:
        unavailable.append("maxrss_kb")
    rss_end = harness.get("rss_end_kb", harness.get("rss_kb"))  # bench_burst says rss_kb=
    if isinstance(rss_end, int) and rss_end > 0:
        metrics["rss_end_kb"] = rss_end
    if harness.get("throughput"):
        metrics["throughput"] = harness["throughput"]
        metrics.update(loop_metrics(harness))
    sample["metrics"] = metrics
    sample["unavailable"] = sorted(set(unavailable))


def _judge(sample: dict, alloc, harness: dict, ended: tuple, timeout: float) -> None:
    """The sample's status and error from how the process ended (exit code, signal, timed
    out) and what the harness printed."""
    code, sig, timed_out = ended
    if timed_out:
        sample["status"] = "timeout"
        sample["error"] = f"timed out after {timeout:g} s (process group killed)"
    elif sig is not None:
        sample["status"] = "failed"
        sample["error"] = f"killed by signal {sig} ({signal_name(sig)})"
    elif code != 0:
        sample["status"] = "failed"
        sample["error"] = f"exit status {code}"
    elif harness.get("throughput") is None:
        sample["error"] = "no 'Throughput = N ops/s' line on stdout"
    elif alloc.expect_impl not in str(harness.get("malloc_impl", "")):
        sample["status"] = "wrong_allocator"
        sample["error"] = (
            f"malloc_impl={harness.get('malloc_impl')!r} does not name {alloc.expect_impl}"
        )
    else:
        sample["status"] = "ok"


def reference_checksum(cell, args, timeout: float) -> tuple[str | None, str | None]:
    """(the checksum ``cell``'s program prints under glibc with these arguments, error);
    computed once per program build and arguments (hakbench.engine.reference)."""
    from hakbench.engine.cells import make_cell

    argv, _ = cell.command(args)
    key = cache_key(f"harness-{cell.workload.name}", [program_identity(argv[0]), argv[1:]])

    def under_glibc():
        system = make_cell("system", cell.workload, build=cell.build)
        s = run_sample(system, phase="reference", perf=False, timeout=timeout, args=args)
        if s["status"] != "ok" or not s["harness"].get("checksum"):
            return None, f"reference run under glibc failed: {s['error'] or s['status']}"
        return {"checksum": s["harness"]["checksum"], "seconds": s["wall_s"]}, None

    ref, error = cached(key, under_glibc)
    return (ref["checksum"] if ref else None), error


def check_checksum(sample: dict, cell, args, timeout: float) -> None:
    """Mark an ok sample ``wrong_checksum`` when its checksum is not glibc's for the same
    program and arguments. Without a reference (glibc's run failed) the sample keeps its
    status and says why nothing was checked."""
    ref, why = reference_checksum(cell, args, timeout)
    sample["reference_checksum"] = ref
    if why:
        sample["checksum_note"] = f"checksum not checked: {why}"
    elif ref != sample["harness"]["checksum"]:
        sample["status"] = "wrong_checksum"
        sample["error"] = f"checksum {sample['harness']['checksum']}, under glibc {ref}"
