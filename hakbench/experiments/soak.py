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

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.load import LoadMonitor
from hakbench.engine.meta import collect_meta
from hakbench.engine.store import write_json
from hakbench.experiments.soak_figures import run_figures
from hakbench.experiments.soak_plan import SoakPlan, SoakTarget
from hakbench.experiments.soak_process import (
    EPOCH_COLUMNS,
    SoakRun,
    counter_budget,
    run_target,
    strace_budget,
)

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
                _syscall_pass(plan, target, attempt, take, on_phase)
    except KeyboardInterrupt:
        session.interrupted = True
        if live.get("run") is not None:  # the process the stop ended: on record as it stood
            session.runs.append(_with_counters(live["run"]))
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        passes = {p["cell"]: p["row"] for p in take.finished if p["phase"] == "syscall_pass"}
        for run in session.runs:  # (a pass a stop came right after is stored: it counts)
            if run.target.label in passes:
                run.syscall_budget.append(passes[run.target.label])
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
    """The strace pass of a finished target, a sample of its own (kept on --resume; its row
    joins the target's budget from ``take.finished``)."""
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
