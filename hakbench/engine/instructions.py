"""Exact instruction counts per harness op: the metric for changes wall-clock cannot see.

On this noisy VM a paired wall-clock A/B resolves about 2 % (docs/measuring.md).
Instruction counts are exact and repeatable, so one run per side decides, and an A/A gives a
ratio of exactly 1. Two tools, best first:

- ``perf stat -e instructions:u`` where the machine exposes hardware counters (keeps real
  threads and the real kernel; counts user-space instructions only);
- ``valgrind --tool=callgrind`` everywhere else (simulated: exact, about 50x slower).

The count of a run includes process start-up (ld.so, libc, allocator init), so the same cell
is run a second time with zero iterations and that count is subtracted before dividing by the
harness's ``ops``. Each counting process runs in its own session under the one signal policy
(``process.run_captured``): a stop signal ends it and the count is a cut sample, never
stored. The harness's result printer (``hb_print_result``) is left out of the
callgrind count: it formats timings whose digits, and so instructions, vary run to run.

Exact means exact for a single-threaded workload under a deterministic allocator (glibc,
mimalloc, libhakmem's speed-first profiles here: A/A = 1.0). Where threads interleave
(mid_large_mt, xthread) the count depends on the interleaving; jemalloc purges on a timer, and
libhakmem's lean policy (BALANCED) makes an idle-purge pass when 10 ms have passed, so identical
runs differ by ~0.02 % now and then (one pass more or less); ``perf stat`` counts vary
slightly with interrupts and skid.

Blind spots (say them next to every number, see ``BLIND_SPOTS``): instructions are not time
(cache misses, branch mispredicts and lock contention cost cycles, not instructions); the
kernel is not counted (mmap, munmap, madvise and page faults, often an allocator's biggest
costs); under valgrind threads run one at a time, so contention and remote-free timing are
not those of the real program.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hakbench.collect.harness import parse_harness_output
from hakbench.collect.perfstat import parse_perf_csv
from hakbench.engine.probes import probe_perf
from hakbench.engine.process import TimeoutExpired, run_captured

BLIND_SPOTS = (
    "Instruction counts are not time: cache misses, branch mispredicts and lock waits cost "
    "cycles, not instructions. Kernel work (mmap, munmap, madvise, page faults) is not "
    "counted. Under callgrind threads are serialised, so contention and cross-thread frees "
    "do not behave as in a real run."
)

CALLGRIND = "callgrind"
PRINT_FUNCTION = "hb_print_result"
PERF_INSTRUCTIONS = "perf instructions:u"


def pick_tool() -> str | None:
    """The exact counter this machine offers: perf's hardware counter, else callgrind."""
    if "instructions" in probe_perf().get("supported", []):
        return PERF_INSTRUCTIONS
    if shutil.which("valgrind"):
        return CALLGRIND
    return None


def parse_callgrind_total(text: str) -> int | None:
    """Total Ir of a callgrind.out file: its ``totals:`` line, else ``summary:``."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        for key in ("totals:", "summary:"):
            if line.startswith(key):
                fields = line[len(key) :].split()
                if fields:
                    found[key] = int(fields[0])
    return found.get("totals:", found.get("summary:"))


def _count_callgrind(argv, env, timeout, workdir: Path) -> tuple[int | None, str, str, int]:
    out_file = workdir / "callgrind.out"
    out_file.unlink(missing_ok=True)
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=no",
        # Threads take turns by a ticket lock: 2-thread counts then vary by ~0.001 % between
        # identical runs instead of ~0.05 % (xthread, glibc). A thread that spins while it
        # waits still adds a varying count (xthread under libhakmem: up to 0.5 %).
        "--fair-sched=yes",
        # The harness prints its timings (digits vary run to run) in hb_print_result; leave
        # that function out so an A/A is exact. --toggle-collect switches collection off at
        # start unless --collect-atstart=yes comes after it.
        f"--toggle-collect={PRINT_FUNCTION}",
        "--collect-atstart=yes",
        f"--callgrind-out-file={out_file}",
        *argv,
    ]
    rc, stdout, stderr = run_captured(cmd, env, timeout)
    ir = parse_callgrind_total(out_file.read_text()) if out_file.exists() else None
    return ir, stdout, stderr, rc


def _count_perf(argv, env, timeout, workdir: Path) -> tuple[int | None, str, str, int]:
    out_file = workdir / "perf.csv"
    cmd = ["perf", "stat", "-x,", "-o", str(out_file), "-e", "instructions:u", "--", *argv]
    rc, stdout, stderr = run_captured(cmd, env, timeout)
    value = None
    if out_file.exists():
        counter = parse_perf_csv(out_file.read_text()).counters.get("instructions")
        if counter is not None and counter.value is not None:
            value = int(counter.value)
    return value, stdout, stderr, rc


_COUNTERS = {CALLGRIND: _count_callgrind, PERF_INSTRUCTIONS: _count_perf}


def _result(tool, status, error=None, **values) -> dict:
    out = {
        "status": status,
        "ir_total": None,
        "ir_startup": None,
        "ops": None,
        "ir_per_op": None,
        "tool": tool,
        "error": error,
    }
    out.update(values)
    return out


def measure_instructions(cell, *, net_startup: bool = True, timeout: float = 900) -> dict:
    """Instructions per harness op of ``cell``, net of a zero-iteration run of the same cell.

    Returns ``{"status", "ir_total", "ir_startup", "ops", "ir_per_op", "tool", "error"}``;
    ``status`` is ``ok``, ``failed`` (non-zero exit or no count), ``wrong_allocator``,
    ``timeout`` or ``error`` (no tool). Never raises for a failed run.
    """
    tool = pick_tool()
    if tool is None:
        return _result(
            None,
            "error",
            "no instruction counter: hardware counters unavailable and "
            "valgrind not installed (apt-get install valgrind)",
        )
    runs = [("measure", cell.workload.args)]
    if net_startup:
        runs.append(("startup", cell.workload.zero_args()))
    expect = cell.resolved_allocator().expect_impl
    counts: dict[str, int] = {}
    ops = None
    with tempfile.TemporaryDirectory(prefix="hakbench-ir-") as tmp:
        for phase, args in runs:
            argv, env = cell.command(args=list(args))
            try:
                ir, stdout, stderr, rc = _COUNTERS[tool](argv, env, timeout, Path(tmp))
            except TimeoutExpired:
                return _result(tool, "timeout", f"{phase} run exceeded {timeout:g} s")
            harness = parse_harness_output(stdout)
            if rc != 0 or ir is None:
                tail = " | ".join(stderr.strip().splitlines()[-3:])
                return _result(tool, "failed", f"{phase} run: exit {rc}: {tail}")
            impl = str(harness.get("malloc_impl", ""))
            if expect not in impl:
                return _result(
                    tool,
                    "wrong_allocator",
                    f"{phase} run: malloc_impl={impl or '?'}, expected {expect}",
                )
            counts[phase] = ir
            if phase == "measure":
                ops = harness.get("ops")
    if not isinstance(ops, int) or ops <= 0:
        return _result(tool, "failed", f"harness reported ops={ops}", ir_total=counts["measure"])
    startup = counts.get("startup", 0)
    return _result(
        tool,
        "ok",
        ir_total=counts["measure"],
        ir_startup=startup if net_startup else None,
        ops=ops,
        ir_per_op=(counts["measure"] - startup) / ops,
    )


# Where threads interleave, a count depends on the schedule: 20 callgrind counts of
# ``xthread`` at the gate's scale gave 96.27-99.64 Ir/op, half within 0.1 % of 96.53 and the
# rest above it (an unlucky interleaving only adds work: larger batches of remote frees,
# rings found empty). The lowest of a few counts is the undisturbed interleaving, which a
# real regression raises as well.
THREADED_RUNS = 5


def default_runs(workload) -> int:
    """How many counts an instruction sample takes (``ab --metric instructions`` per side,
    the matrix and scorecard per cell): ``THREADED_RUNS`` for a workload whose threads
    interleave, one for a single-threaded one (exact)."""
    return THREADED_RUNS if workload.threads > 1 else 1


def lowest_count(results: Sequence[dict]) -> dict:
    """One cell's result from several ``measure_instructions`` results: the lowest count
    (that run's fields), with every run's Ir/op in ``ir_runs`` (empty for a single run). Any
    failed run fails the cell, its error kept: a cell that crashes one time in five is not
    a pass."""
    bad = next((r for r in results if r["status"] != "ok"), None)
    if bad is not None or not results:
        bad = bad or _result(None, "failed", "no run")
        return {**bad, "ir_per_op": None, "ir_runs": []}
    best = min(results, key=lambda r: r["ir_per_op"])
    runs = [r["ir_per_op"] for r in results]
    return {**best, "ir_runs": runs if len(runs) > 1 else []}


def measure_lowest(cell, runs: int = 1, **kwargs) -> dict:
    """``measure_instructions`` up to ``runs`` times (stopping at a failure); the lowest."""
    results = []
    for _ in range(max(1, runs)):
        results.append(measure_instructions(cell, **kwargs))
        if results[-1]["status"] != "ok":
            break
    return lowest_count(results)
