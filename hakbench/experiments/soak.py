"""Soak runs (issue #7): one long ``bench_soak`` process per allocator/profile, sampled per epoch.

Each epoch line the harness prints is paired with the kernel's view of the process read the
moment the line arrives (VmRSS, VmHWM, RssAnon from ``/proc/PID/status``; minflt, majflt
from ``/proc/PID/stat``). At the end come the allocator's own counters (libhakmem's
``SS_OS_STATS``) and, on a short separate pass under ``strace -c`` so the soak's timing is
not disturbed, the syscall budget. Runs go one after another, never two at once: two soaks
sharing two cores would measure each other.

Nothing measured is lost, and the engine (``hakbench.engine.engine``) keeps it as it keeps
every command's samples: meta.json (with the plan) is written before the first process
starts, each process is one slot of ``Session.take`` whose epochs are its parts
(``Session.part``: ``epochs.jsonl``, each appended the moment its line arrives), and each
finished process (and its strace pass) is a sample of ``samples.jsonl``. A crash, or a stop signal
(SIGINT, SIGTERM, SIGHUP: ``hakbench.engine.interrupts``, which ends the running soak process
gently with SIGTERM so it prints its summary), ends the soak early with its report written
from what finished. After a SIGKILL (or any stop) ``soak --resume DIR`` continues: the
targets whose process finished are kept, and a target whose process was cut runs again from
its start (a soak is one process: its heap cannot be resumed), the cut attempt's epochs
staying in ``epochs.jsonl`` under their ``attempt`` number and named in the report.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.collect.allocstats import parse_alloc_stats
from hakbench.collect.harness import parse_epoch_line, parse_harness_output
from hakbench.core import paths
from hakbench.core.allocators import Allocator, resolve_allocator
from hakbench.core.cell import make_cell
from hakbench.core.errors import UsageError
from hakbench.core.procenv import clean_env
from hakbench.core.profiles import resolve_workload
from hakbench.engine import engine, interrupts
from hakbench.engine.load import LoadMonitor
from hakbench.engine.meta import collect_meta
from hakbench.engine.store import write_json
from hakbench.stats import soakstats

SOAK_PROGRAM = "bench_soak"
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

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``20s``, ``10m``, ``1h``, ``500ms`` or a bare number of seconds -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"bad duration '{text}'; use e.g. 20s, 10m, 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


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


# ---- what runs ----


@dataclass(frozen=True)
class SoakTarget:
    """One allocator (and, for hakmem, one profile) soaked by one process."""

    allocator: Allocator
    profile: str | None
    env: dict  # the profile's HAKMEM_* values; empty for references
    binary: Path
    args: tuple[str, ...]  # the workload's arguments; epochs and leak are added per run

    @property
    def label(self) -> str:
        return f"{self.allocator.label} {self.profile}" if self.profile else self.allocator.label


@dataclass(frozen=True)
class Thresholds:
    """The budgets a soak is judged against. Trends are per hour, so the same leak fails a
    short soak and a long one alike."""

    rss_pct_per_h: float = 5.0  # RSS may grow at most this fast
    ops_pct_per_h: float = 5.0  # ops/s may decline at most this fast
    # ops/s CV across epochs must stay <= this; None: reported, not judged. Off by default:
    # on a shared VM that flips between two speed modes every allocator's CV is 10-50 %
    # (measured here), so a default budget would fail every soak for the machine's sake.
    cv_pct: float | None = None
    # An RSS trend is judged only once the soak saw this much growth: in a short soak RSS
    # moves by a few pages as heaps settle (glibc: +12 KiB in 8 s = +125 %/h), which is no
    # leak; an injected 4 MiB/s leak grows by far more.
    rss_min_growth_kib: float = 1024.0
    syscalls_per_kop: float = 1.0  # mmap+munmap+madvise+brk+mremap per 1000 ops


@dataclass(frozen=True)
class SoakPlan:
    targets: tuple[SoakTarget, ...]
    epochs: int
    epoch_ms: int
    warmup_epochs: int
    leak_kb_per_s: int = 0
    syscall_pass_s: float = 10.0
    thresholds: Thresholds = Thresholds()
    workload: str = "soak"
    allocators: tuple = ()  # the names the targets came from (``plan_targets``): for --resume
    profiles: tuple = ()

    @property
    def duration_s(self) -> float:
        return self.epochs * self.epoch_ms / 1000.0

    def record(self) -> dict:
        """What meta.json keeps of the plan: enough to rebuild it (``plan_of``)."""
        return {
            "allocators": list(self.allocators),
            "profiles": list(self.profiles),
            "workload": self.workload,
            "epochs": self.epochs,
            "epoch_ms": self.epoch_ms,
            "warmup_epochs": self.warmup_epochs,
            "leak_kb_per_s": self.leak_kb_per_s,
            "syscall_pass_s": self.syscall_pass_s,
            "thresholds": vars(self.thresholds),
        }


def plan_of(record: dict) -> SoakPlan:
    """The plan a soak's meta.json recorded, its targets resolved again."""
    return SoakPlan(
        targets=plan_targets(record["allocators"], record["profiles"], record["workload"]),
        epochs=record["epochs"],
        epoch_ms=record["epoch_ms"],
        warmup_epochs=record["warmup_epochs"],
        leak_kb_per_s=record["leak_kb_per_s"],
        syscall_pass_s=record["syscall_pass_s"],
        thresholds=Thresholds(**record["thresholds"]),
        workload=record["workload"],
        allocators=tuple(record["allocators"]),
        profiles=tuple(record["profiles"]),
    )


def default_warmup_epochs(epochs: int) -> int:
    """5 % of the epochs, at least one: heaps grow and caches fill in the first epochs."""
    return max(1, round(epochs * 0.05))


def plan_epochs(duration_s: float, epoch_s: float) -> tuple[int, int]:
    """(number of epochs, epoch length in ms) for a soak of ``duration_s``."""
    epoch_ms = round(epoch_s * 1000)
    if epoch_ms < 10:
        raise UsageError(f"epoch {epoch_s:g}s is too short; use at least 10ms")
    if duration_s < epoch_s:
        raise UsageError(f"duration {duration_s:g}s is shorter than one epoch ({epoch_s:g}s)")
    return max(1, round(duration_s / epoch_s)), epoch_ms


def plan_targets(
    allocators: Sequence[str],
    profiles: Sequence[str],
    workload: str = "soak",
    build: Path | None = None,
) -> tuple[SoakTarget, ...]:
    """Resolve names to targets: hakmem once per profile, every reference once.

    Unknown or unbuilt allocators, unknown profiles, profile values the options table
    rejects and a workload that is not a bench_soak program are UsageErrors (exit 2).
    """
    wl = resolve_workload(workload)
    if wl.program != SOAK_PROGRAM:
        raise UsageError(f"workload '{wl.name}' runs {wl.program}; a soak needs {SOAK_PROGRAM}")
    binary = paths.bench_binary(SOAK_PROGRAM, build=build)
    if not binary.exists():
        raise UsageError(f"{binary} not built (run `make harness`)")
    targets = []
    for name in dict.fromkeys(allocators):
        alloc = resolve_allocator(name, build=build)
        if not alloc.available:
            raise UsageError(f"allocator {alloc.label}: {alloc.missing_reason}")
        # A reference runs once (profiles are libhakmem's); hakmem once per profile.
        names = dict.fromkeys(p.upper() for p in profiles) if alloc.name == "hakmem" else [None]
        for pname in names:
            cell = make_cell(name, wl, profile=pname, build=build)
            targets.append(SoakTarget(alloc, cell.profile, dict(cell.env), binary, wl.args))
    return tuple(targets)


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


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


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


class _StderrTail(threading.Thread):
    """Drains the child's stderr (so it never blocks on a full pipe), keeping all of it."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []

    def run(self):
        for line in self.stream:
            self.lines.append(line)


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM (the harness prints its summary and exits), SIGKILL if it lingers.

    Never blocks: it may run inside a signal handler or a timer thread.
    """
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    killer = threading.Timer(TERM_GRACE_S, lambda: proc.poll() is None and proc.kill())
    killer.daemon = True
    killer.start()


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
    stopped = threading.Event()
    with tempfile.TemporaryDirectory(prefix="hakbench-soak-") as tmp:
        stats_file = Path(tmp) / "stats.txt" if target.allocator.name == "hakmem" else None
        run.argv = _soak_args(target, epochs, epoch_ms, leak_kb_per_s)
        env = clean_env(_soak_env(target, stats_file), target.allocator.preload)
        started = time.monotonic()
        proc = subprocess.Popen(
            run.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        run.pid = proc.pid

        def stop() -> None:
            stopped.set()
            _terminate(proc)

        stderr = _StderrTail(proc.stderr)
        stderr.start()
        # A hung process must not hang the soak: the harness has its own clock, this is a net.
        limit_s = epochs * epoch_ms / 1000.0 * 1.5 + 60.0
        timed_out = threading.Event()

        def on_timeout():
            timed_out.set()
            _terminate(proc)

        watchdog = threading.Timer(limit_s, on_timeout)
        watchdog.daemon = True
        watchdog.start()
        stdout_lines: list[str] = []
        try:
            with interrupts.stopping(stop):
                for line in proc.stdout:
                    epoch = parse_epoch_line(line)
                    if epoch is None:
                        stdout_lines.append(line)
                        continue
                    # Read /proc first, while the line is fresh: the epoch and the kernel's view
                    # must describe the same moment.
                    kernel = read_proc(proc.pid)
                    row = _epoch_row(target, epoch, kernel)
                    run.epochs.append(row)
                    if on_epoch is not None:
                        on_epoch(run, row)
                run.returncode = proc.wait()
        finally:
            watchdog.cancel()
            if run.returncode is None:  # on_epoch raised: do not leave the child running
                _terminate(proc)
        stderr.join(TERM_GRACE_S)
        run.wall_s = time.monotonic() - started
        stderr_text = "".join(stderr.lines)
        run.stderr_tail = "".join(stderr.lines[-STDERR_TAIL_LINES:])
        run.harness = parse_harness_output("".join(stdout_lines))
        stats_text = stats_file.read_text() if stats_file and stats_file.exists() else ""
        run.alloc_stats = parse_alloc_stats(stats_text) or parse_alloc_stats(stderr_text)
    _judge_end(run, epochs, stopped.is_set(), timed_out.is_set())
    return run


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
        run.status, run.cause = "crashed", f"killed by {signal_name(rc)} {seen}"
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
        # its own session, so a stop signal or the timeout ends strace and the traced soak
        # together (killing strace alone would leave its tracee running on, detached)
        proc = subprocess.Popen(
            argv,
            env=clean_env(target.env, None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        try:
            with interrupts.stopping(kill):
                stdout, stderr = proc.communicate(timeout=epochs * pass_epoch_ms / 1000 * 5 + 60)
        except subprocess.TimeoutExpired:
            kill()
            proc.communicate()
            return budget_row(source, {}, 0, "strace pass timed out")
        except BaseException:
            kill()
            proc.communicate()
            raise
        ops = parse_harness_output(stdout).get("ops")
        if proc.returncode != 0 or not isinstance(ops, int):
            tail = stderr.strip().splitlines()[-1:] or [""]
            return budget_row(source, {}, 0, f"strace pass failed ({proc.returncode}): {tail[0]}")
        counts = parse_strace_summary(out.read_text() if out.exists() else "")
        return budget_row(source, {s: counts.get(s, 0) for s in TRACED_SYSCALLS}, ops)


# ---- figures ----


def epoch_rss_kb(row: dict) -> int | None:
    """The kernel's VmRSS at the epoch; when the process had already exited (it may after its
    last epoch), the harness's own reading of the same counter (/proc/self/statm)."""
    return row["rss_kb"] if row["rss_kb"] is not None else row.get("harness_rss_kb")


def steady_frame(run: SoakRun, warmup_epochs: int):
    """The epochs after warm-up as a DataFrame, ``rss`` being ``epoch_rss_kb``."""
    import pandas as pd

    df = pd.DataFrame(run.epochs[warmup_epochs:], columns=list(EPOCH_COLUMNS))
    df["rss"] = df["rss_kb"].fillna(df["harness_rss_kb"]).astype(float)
    df["ops_s"] = df["ops_s"].astype(float)
    return df


def judged_budget(rows: Sequence[dict]) -> dict | None:
    """The syscall-budget row a verdict is based on: libhakmem's own counters over the
    whole soak when there are any, else the strace pass."""
    usable = [b for b in rows if b.get("syscalls_per_op") is not None]
    counters = [b for b in usable if "SS_OS_STATS" in b["source"]]
    return (counters or usable or [None])[0]


def run_figures(run: SoakRun, warmup_epochs: int, thresholds: Thresholds) -> dict:
    """Trends (%/h, with 95 % CIs), drift, CV, the syscall budget and their verdicts over
    the epochs after warm-up."""
    df = steady_frame(run, warmup_epochs)
    rss_df = df.dropna(subset=["t", "rss"])
    ops_df = df.dropna(subset=["t", "ops_s"])
    rss, rss_t = rss_df["rss"].tolist(), rss_df["t"].tolist()
    ops_s, ops_t = ops_df["ops_s"].tolist(), ops_df["t"].tolist()
    rss_trend = soakstats.trend_pct_per_hour(rss_t, rss)
    ops_trend = soakstats.trend_pct_per_hour(ops_t, ops_s)
    cv = soakstats.cv_pct(ops_s)
    hwm = [e["hwm_kb"] for e in run.epochs if e["hwm_kb"] is not None]
    last = run.epochs[-1] if run.epochs else {}
    budget = judged_budget(run.syscall_budget)
    per_kop = 1000 * budget["syscalls_per_op"] if budget else None
    return {
        "label": run.target.label,
        "allocator": run.target.allocator.label,
        "profile": run.target.profile,
        "status": run.status,
        "cause": run.cause,
        "epochs": len(run.epochs),
        "steady_epochs": len(df),
        "window_epochs": soakstats.edge_window(len(df)) if len(df) else 0,
        "rss_first_kb": rss[0] if rss else None,
        "rss_last_kb": rss[-1] if rss else None,
        "peak_hwm_kb": max(hwm) if hwm else None,
        "rss_trend_pct_per_h": rss_trend and rss_trend["pct_per_h"],
        "rss_trend_ci95": rss_trend and rss_trend["ci"],
        "rss_drift_pct": soakstats.drift_pct(rss),
        "rss_drift_pct_per_h": soakstats.drift_pct_per_hour(rss_t, rss),
        "rss_slope_kib_per_h": soakstats.slope_per_hour(rss_t, rss),
        "ops_s_median": soakstats.median_or_none(ops_s),
        "ops_trend_pct_per_h": ops_trend and ops_trend["pct_per_h"],
        "ops_trend_ci95": ops_trend and ops_trend["ci"],
        "ops_drift_pct": soakstats.drift_pct(ops_s),
        "ops_drift_pct_per_h": soakstats.drift_pct_per_hour(ops_t, ops_s),
        "ops_cv_pct": cv,
        "syscalls_per_kop": per_kop,
        "syscalls_source": budget["source"] if budget else None,
        "minflt": last.get("minflt"),
        "majflt": last.get("majflt"),
        "total_ops": run.total_ops,
        "wall_s": round(run.wall_s, 3),
        "verdicts": {
            "rss_trend": soakstats.trend_verdict(
                rss_trend,
                thresholds.rss_pct_per_h,
                rising=True,
                resolved=_growth_kib(rss_t, rss) >= thresholds.rss_min_growth_kib,
            ),
            "ops_trend": soakstats.trend_verdict(ops_trend, thresholds.ops_pct_per_h, rising=False),
            "ops_cv": "n/a"
            if thresholds.cv_pct is None
            else soakstats.verdict(cv, thresholds.cv_pct, upper=True),
            "syscalls": soakstats.verdict(per_kop, thresholds.syscalls_per_kop, upper=True),
        },
        "syscall_budget": run.syscall_budget,
        "alloc_stats": run.alloc_stats,
        "stderr_tail": run.stderr_tail if run.status != "complete" else "",
        "argv": run.argv,
    }


def _growth_kib(times_s: list, rss_kb: list) -> float:
    """RSS growth over the steady epochs by the fitted trend (KiB; 0 with too few points)."""
    slope = soakstats.slope_per_hour(times_s, rss_kb)
    if slope is None or len(times_s) < 2:
        return 0.0
    return slope * (times_s[-1] - times_s[0]) / 3600.0


def failed_verdicts(summary: dict) -> list[str]:
    """``label: verdict`` for every FAIL of a soak's summary."""
    return [
        f"{f['label']}: {name}"
        for f in summary["runs"]
        for name, v in f["verdicts"].items()
        if v == "FAIL"
    ]


# ---- a whole soak ----

EPOCHS = "epochs"  # epochs.jsonl: every epoch as it arrives (a part of its process's sample)
# what a process's sample keeps: its end, its target and attempt; the epochs are its parts
RUN_FIELDS = ("status", "cause", "returncode", "stderr_tail", "harness", "alloc_stats")
RUN_FIELDS += ("argv", "wall_s", "pid")


@dataclass
class SoakSession:
    plan: SoakPlan
    out_dir: Path
    command: str
    runs: list[SoakRun] = field(default_factory=list)
    interrupted: bool = False
    skipped: list[str] = field(default_factory=list)  # labels never started (after a stop)
    summary: dict = field(default_factory=dict)  # what summary.json holds, once written
    load: dict | None = None  # hakbench.engine.load: how busy the machine was while it soaked
    meta: dict = field(default_factory=dict)
    cut: list = field(default_factory=list)  # attempts cut short earlier: {target, attempt, epochs}


def soak_identity(plan: SoakPlan, out: Path | None = None) -> dict:
    """``engine.identity_of`` the soak's programs, libraries and environments."""
    files = [f for t in plan.targets for f in (t.allocator.preload, t.binary)]
    return engine.identity_of(files, {t.label: t.env for t in plan.targets}, out)


def _restored(target: SoakTarget, record: dict, epochs: list[dict]) -> SoakRun:
    """A finished process, from its stored sample and epochs."""
    rows = [{k: e.get(k) for k in EPOCH_COLUMNS} for e in epochs]
    return _with_counters(SoakRun(target, epochs=rows, **{k: record.get(k) for k in RUN_FIELDS}))


def _with_counters(run: SoakRun) -> SoakRun:
    """libhakmem's own syscall counters as the run's first budget row (hakmem only)."""
    if run.target.allocator.name == "hakmem":
        run.syscall_budget.append(counter_budget(run))
    return run


def open_soak(plan: SoakPlan, out_dir: Path, command: str, *, resume: bool):
    """(store, meta, stored samples) of a soak directory through ``engine.open_run``:
    meta.json (with the plan and the identity) written before anything runs, or the stored
    one after ``engine.check_identity`` (resume)."""
    if not resume and (out_dir / f"{EPOCHS}.jsonl").exists():
        raise UsageError(f"{out_dir} already holds a soak; pass --resume {out_dir}")
    if resume and (out_dir / "runs.jsonl").exists():
        raise UsageError(f"--resume {out_dir}: a soak stored before its processes were samples")
    meta = collect_meta(
        command,
        kind="soak",
        variant="fast",
        workload=plan.workload,
        targets=[t.label for t in plan.targets],
        profiles={t.profile: t.env for t in plan.targets if t.profile},
        options_validated=paths.options_binary().exists(),
        soak_plan=plan.record(),
    )
    ident = soak_identity(plan, out_dir)
    return engine.open_run(out_dir, meta, resume=resume, ident=ident)


def run_soak(
    plan: SoakPlan,
    out_dir: Path,
    command: str,
    *,
    on_epoch: Callable[[SoakRun, dict], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    resume: bool = False,
) -> SoakSession:
    """Soak every target in turn through the engine, then write the results directory (also
    after a stop signal). Each target's process is one sample of ``samples.jsonl`` (its
    epochs the sample's parts in ``epochs.jsonl``, stored as they arrive), its strace pass
    another. ``resume``: the targets whose process finished are kept, the others run (a cut
    one again, as its next attempt)."""
    out_dir = Path(out_dir)
    session = SoakSession(plan, out_dir, command)
    store, session.meta, stored = open_soak(plan, out_dir, command, resume=resume)
    stored_epochs = store.parts(EPOCHS)
    take = engine.Session(store, stored=stored)
    monitor = LoadMonitor().start()
    live: dict = {}  # the process the engine is running: a cut one is reported too
    try:
        for target in plan.targets:
            tags = {"phase": "soak", "cell": target.label}
            old = take.stored(tags)
            mine = [e for e in stored_epochs if e["target"] == target.label]
            attempt = old["attempt"] if old else 1 + max((e["attempt"] for e in mine), default=0)
            for n in sorted({e["attempt"] for e in mine} - {attempt}):
                epochs = sum(e["attempt"] == n for e in mine)
                session.cut.append({"target": target.label, "attempt": n, "epochs": epochs})
            if old is None and on_phase:
                on_phase(f"soak {target.label}: {plan.epochs} epochs of {plan.epoch_ms} ms")
            live.clear()
            record = take.take(
                tags,
                lambda target=target, attempt=attempt: _soak_process(
                    plan, target, attempt, take, on_epoch, live
                ),
            )
            run = live.get("run") or _restored(
                target, record, [e for e in mine if e["attempt"] == attempt]
            )
            live.clear()
            session.runs.append(_with_counters(run))
            if plan.syscall_pass_s > 0 and run.status == "complete":
                row = _syscall_pass(plan, target, attempt, take, on_phase)
                run.syscall_budget.append(row)
    except KeyboardInterrupt:
        session.interrupted = True
        if live.get("run") is not None:  # the process the stop ended: on record as it stood
            session.runs.append(_with_counters(live["run"]))
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        session.load = monitor.stop()
        done = [r.target for r in session.runs]
        session.skipped = [t.label for t in plan.targets if t not in done]
        session.summary = write_results(session)
    return session


def _soak_process(plan, target, attempt, take, on_epoch, live) -> dict:
    """One soak process, every epoch stored as it arrives (``Session.part``); the sample
    the engine stores is its record."""
    tag = {"target": target.label, "attempt": attempt}

    def store_epoch(run: SoakRun, row: dict) -> None:
        live["run"] = run
        take.part(EPOCHS, {**row, **tag})
        if on_epoch is not None:
            on_epoch(run, row)

    run = run_target(
        target,
        epochs=plan.epochs,
        epoch_ms=plan.epoch_ms,
        leak_kb_per_s=plan.leak_kb_per_s,
        on_epoch=store_epoch,
    )
    live["run"] = run
    return {**tag, **{k: getattr(run, k) for k in RUN_FIELDS}}


def _syscall_pass(plan, target, attempt, take, on_phase) -> dict:
    """The strace pass of a finished target, a sample of its own (kept on --resume)."""
    tags = {"phase": "syscall_pass", "cell": target.label}
    if take.stored(tags) is None and on_phase:
        on_phase(f"syscall pass {target.label}: strace, {plan.syscall_pass_s:g} s")

    def run() -> dict:
        row = strace_budget(target, plan.syscall_pass_s, plan.epoch_ms)
        ok = row["syscalls_per_op"] is not None
        return {"status": "ok" if ok else "failed", "attempt": attempt, "row": row}

    return take.take(tags, run)["row"]


def write_epochs_csv(path: Path, epochs: Sequence[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=EPOCH_COLUMNS)
        w.writeheader()
        for row in epochs:
            w.writerow({k: "" if row.get(k) is None else row[k] for k in EPOCH_COLUMNS})


def write_results(session: SoakSession) -> dict:
    """epochs.csv, summary.json, meta.json, report.md and the plot; returns the summary."""
    from hakbench.report.soak import write_report

    plan = session.plan
    out = session.out_dir
    out.mkdir(parents=True, exist_ok=True)
    epochs = [e for r in session.runs for e in r.epochs]
    write_epochs_csv(out / "epochs.csv", epochs)
    summary = {
        "command": session.command,
        "workload": plan.workload,
        "epochs_planned": plan.epochs,
        "epoch_ms": plan.epoch_ms,
        "duration_s": plan.duration_s,
        "warmup_epochs": plan.warmup_epochs,
        "leak_kb_per_s": plan.leak_kb_per_s,
        "syscall_pass_s": plan.syscall_pass_s,
        "thresholds": vars(plan.thresholds),
        "interrupted": session.interrupted,
        "interrupted_by": interrupts.describe() if session.interrupted else None,
        "cut_attempts": session.cut,
        "skipped": session.skipped,
        "runs": [run_figures(r, plan.warmup_epochs, plan.thresholds) for r in session.runs],
    }
    write_json(out / "summary.json", summary)
    meta = {**session.meta, "load": session.load, "finished": not session.interrupted}
    write_json(out / "meta.json", meta)
    write_report(out, summary, meta, epochs)
    return summary


def default_out_dir() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return paths.results_dir() / "runs" / f"{stamp}-soak"
