"""One soak process and the kernel's view of it: ``run_target`` runs a ``bench_soak`` process
to its end (or its crash, or a stop signal), pairing each epoch line with ``/proc/PID``'s
figures read the moment it arrives; and the syscall budget (libhakmem's own counters over
the whole soak, or a short separate ``strace -f -c`` pass).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.collect.allocstats import parse_alloc_stats
from hakbench.collect.harness import parse_epoch_line, parse_harness_output
from hakbench.core.procenv import clean_env
from hakbench.engine import interrupts, process
from hakbench.experiments.soak_plan import SoakTarget

EPOCH_COLUMNS = (
    "allocator",
    "profile",
    "t",
    "epoch",
    "ops",
    "ops_s",
    "rss_kb",
    "hwm_kb",
    "anon_kb",
    "minflt",
    "majflt",
    "harness_rss_kb",
)
TRACED_SYSCALLS = ("mmap", "munmap", "madvise", "brk", "mremap")
# libhakmem's OS counters (always compiled in) -> the syscall each one counts.
HAKMEM_SYSCALL_COUNTERS = {"mmap": "mmap_total", "munmap": "munmap", "madvise": "madvise"}
STDERR_TAIL_LINES = 20
# After SIGTERM the harness prints its summary and exits; give it this long before SIGKILL.
TERM_GRACE_S = 10.0


# ---- the kernel's view of a process ----


def parse_proc_status(text: str) -> dict:
    """``/proc/PID/status`` -> ``{"rss_kb", "hwm_kb", "anon_kb"}`` (None when absent)."""
    wanted = {"VmRSS": "rss_kb", "VmHWM": "hwm_kb", "RssAnon": "anon_kb"}
    out = dict.fromkeys(wanted.values())
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in wanted:
            out[wanted[key]] = int(rest.split()[0])
    return out


def parse_proc_stat(text: str) -> dict:
    """``/proc/PID/stat`` -> ``{"minflt", "majflt"}``.

    The command name (field 2) may hold spaces and parentheses, so fields are counted from
    the last ``)``: field 3 (state) is the first after it, minflt is field 10, majflt 12.
    """
    rest = text[text.rindex(")") + 1 :].split()
    return {"minflt": int(rest[7]), "majflt": int(rest[9])}


def read_proc(pid: int) -> dict:
    """The kernel's view of ``pid`` now; every value None once the process is gone."""
    out = {"rss_kb": None, "hwm_kb": None, "anon_kb": None, "minflt": None, "majflt": None}
    try:
        out.update(parse_proc_status(Path(f"/proc/{pid}/status").read_text()))
        out.update(parse_proc_stat(Path(f"/proc/{pid}/stat").read_text()))
    except (OSError, ValueError, IndexError):
        pass
    return out


# ---- one soak process ----


@dataclass
class SoakRun:
    target: SoakTarget
    epochs: list[dict] = field(default_factory=list)
    status: str = "running"  # complete | crashed | interrupted | timeout | wrong_allocator
    cause: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""
    harness: dict = field(default_factory=dict)
    alloc_stats: dict = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    pid: int | None = None
    syscall_budget: list[dict] = field(default_factory=list)

    @property
    def total_ops(self) -> int:
        ops = self.harness.get("ops")
        return int(ops) if isinstance(ops, int) else sum(int(e["ops"] or 0) for e in self.epochs)


def _soak_env(target: SoakTarget, stats_file: Path | None) -> dict:
    env = dict(target.env)
    if stats_file is not None:
        # OS counters are always compiled in, so the timed fast build reports them too.
        env["HAKMEM_SS_OS_STATS"] = "1"
        env["HAKMEM_STATS_FILE"] = str(stats_file)
    return env


def _soak_args(target: SoakTarget, epochs: int, epoch_ms: int, leak_kb_per_s: int) -> list[str]:
    argv = [str(target.binary), *target.args, "--epochs", str(epochs), "--epoch-ms", str(epoch_ms)]
    if leak_kb_per_s:
        argv += ["--leak-kb-per-s", str(leak_kb_per_s)]
    return argv


def run_target(
    target: SoakTarget,
    *,
    epochs: int,
    epoch_ms: int,
    leak_kb_per_s: int = 0,
    on_epoch: Callable[[SoakRun, dict], None] | None = None,
) -> SoakRun:
    """Run one soak process to the end (or its crash, or a stop signal) and return what it
    showed.

    Never raises for a failed process. A stop signal (``hakbench.engine.interrupts``) sends the
    process SIGTERM, so it prints its summary and exits; the run ends with status
    ``interrupted`` and the caller, inside an ``interrupts.deferred`` section, stops the soak.
    """
    run = SoakRun(target)
    with tempfile.TemporaryDirectory(prefix="hakbench-soak-") as tmp:
        stats_file = Path(tmp) / "stats.txt" if target.allocator.name == "hakmem" else None
        run.argv = _soak_args(target, epochs, epoch_ms, leak_kb_per_s)
        env = clean_env(_soak_env(target, stats_file), target.allocator.preload)
        # A hung process must not hang the soak: the harness has its own clock, this is a net.
        limit_s = epochs * epoch_ms / 1000.0 * 1.5 + 60.0
        with process.streaming(run.argv, env, watchdog_s=limit_s, grace_s=TERM_GRACE_S) as proc:
            run.pid = proc.pid
            stdout = _read_epochs(run, proc, on_epoch)
            run.returncode = proc.wait()
        run.wall_s = proc.wall_s
        stderr_text = "".join(proc.stderr_lines)
        run.stderr_tail = "".join(proc.stderr_lines[-STDERR_TAIL_LINES:])
        run.harness = parse_harness_output(stdout)
        stats_text = stats_file.read_text() if stats_file and stats_file.exists() else ""
        run.alloc_stats = parse_alloc_stats(stats_text) or parse_alloc_stats(stderr_text)
    _judge_end(run, epochs, proc.stopped.is_set(), proc.timed_out.is_set())
    return run


def _read_epochs(run: SoakRun, proc, on_epoch) -> str:
    """Each epoch line of ``proc``'s stdout into ``run.epochs`` (with /proc's figures read
    as it arrives); the other lines (the harness's summary), as text."""
    other: list[str] = []
    for line in proc.lines():
        epoch = parse_epoch_line(line)
        if epoch is None:
            other.append(line)
            continue
        # Read /proc first, while the line is fresh: the epoch and the kernel's view
        # must describe the same moment.
        row = _epoch_row(run.target, epoch, read_proc(proc.pid))
        run.epochs.append(row)
        if on_epoch is not None:
            on_epoch(run, row)
    return "".join(other)


def _epoch_row(target: SoakTarget, epoch: dict, kernel: dict) -> dict:
    return {
        "allocator": target.allocator.label,
        "profile": target.profile or "",
        "t": epoch.get("t"),
        "epoch": epoch.get("epoch"),
        "ops": epoch.get("ops"),
        "ops_s": epoch.get("ops_s"),
        **kernel,
        "harness_rss_kb": epoch.get("rss_kb"),
    }


def _judge_end(run: SoakRun, planned: int, interrupted: bool, timed_out: bool) -> None:
    """Set ``status`` and a one-line ``cause`` from how the process ended."""
    rc = run.returncode
    seen = f"after {len(run.epochs)} of {planned} epochs"
    if interrupted:
        run.status, run.cause = "interrupted", f"interrupted by {interrupts.describe()} {seen}"
    elif timed_out:
        run.status, run.cause = "timeout", f"did not finish in time and was stopped {seen}"
    elif rc is not None and rc < 0:
        run.status, run.cause = "crashed", f"killed by {process.signal_name(-rc)} {seen}"
    elif rc:
        run.status, run.cause = "crashed", f"exited with status {rc} {seen}"
    elif run.harness.get("throughput") is None:
        run.status, run.cause = "crashed", f"exited without its summary line {seen}"
    elif len(run.epochs) < planned:
        run.status, run.cause = "crashed", f"exited early {seen}"
    else:
        impl = str(run.harness.get("malloc_impl", ""))
        expect = run.target.allocator.expect_impl
        if expect not in impl:
            run.status = "wrong_allocator"
            run.cause = f"malloc_impl={impl or '?'} does not contain {expect}"
        else:
            run.status = "complete"


# ---- the syscall budget ----


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c`` table -> ``{syscall: calls}``; strace leaves out syscalls never made."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] in TRACED_SYSCALLS and f[3].isdigit():
            counts[f[-1]] = int(f[3])
    return counts


def budget_row(source: str, counts: dict[str, int | None], ops: int, note: str = "") -> dict:
    """One syscall-budget row: counts, total per op, where they came from."""
    known = [v for v in counts.values() if v is not None]
    total = sum(known) if known else None
    per_op = total / ops if total is not None and ops else None
    return {
        "source": source,
        **{s: counts.get(s) for s in TRACED_SYSCALLS},
        "ops": ops,
        "syscalls_per_op": per_op,
        "note": note,
    }


def counter_budget(run: SoakRun) -> dict:
    """libhakmem's own OS counters over the whole soak (brk: libhakmem never calls it)."""
    group = run.alloc_stats.get("SS_OS_STATS")
    source = "libhakmem SS_OS_STATS counters (whole soak)"
    if group is None:
        note = "no SS_OS_STATS line (the process died before exit, or the library printed none)"
        return budget_row(source, {}, run.total_ops, note)
    counts: dict[str, int | None] = {s: group.get(k) for s, k in HAKMEM_SYSCALL_COUNTERS.items()}
    counts["brk"] = 0
    counts["mremap"] = None
    note = "brk: libhakmem never calls it; mremap: not counted"
    return budget_row(source, counts, run.total_ops, note)


def strace_budget(target: SoakTarget, seconds: float, epoch_ms: int) -> dict:
    """Count the syscalls of a short separate run under ``strace -f -c``.

    ``-E LD_PRELOAD=`` gives the allocator to the traced program only, not to strace.
    The pass includes process start-up (the loader's own mmaps), so on a short pass it
    overstates the steady state; the report says so.
    """
    pass_epoch_ms = min(epoch_ms, 1000)
    epochs = max(1, math.ceil(seconds * 1000 / pass_epoch_ms))
    source = f"strace -f -c pass ({epochs * pass_epoch_ms / 1000:g} s, start-up included)"
    strace = shutil.which("strace")
    if strace is None:
        return budget_row(source, {}, 0, "strace not installed (run `make setup`)")
    with tempfile.TemporaryDirectory(prefix="hakbench-strace-") as tmp:
        out = Path(tmp) / "strace.txt"
        argv = [strace, "-f", "-c", "-o", str(out), "-e", "trace=" + ",".join(TRACED_SYSCALLS)]
        if target.allocator.preload is not None:
            argv += ["-E", f"LD_PRELOAD={target.allocator.preload}"]
        argv += _soak_args(target, epochs, pass_epoch_ms, 0)
        # the launcher's own session and stop policy: a stop signal or the timeout ends
        # strace and the traced soak together (killing strace alone would leave its tracee
        # running on, detached)
        timeout = epochs * pass_epoch_ms / 1000 * 5 + 60
        r = process.run(argv, env=clean_env(target.env, None), timeout=timeout, stoppable=True)
        if r.timed_out:
            return budget_row(source, {}, 0, "strace pass timed out")
        stdout, stderr = r.stdout, r.stderr or r.error or ""
        ops = parse_harness_output(stdout).get("ops")
        if r.returncode != 0 or not isinstance(ops, int):
            tail = stderr.strip().splitlines()[-1:] or [""]
            return budget_row(source, {}, 0, f"strace pass failed ({r.returncode}): {tail[0]}")
        counts = parse_strace_summary(out.read_text() if out.exists() else "")
        return budget_row(source, {s: counts.get(s, 0) for s in TRACED_SYSCALLS}, ops)
