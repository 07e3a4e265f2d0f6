"""``hakbench soak``: long runs that catch creeping RSS and sagging throughput (issue #7)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from hakbench.commands import resume_option
from hakbench.core.errors import EXIT_GATE, MeasurementError, UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.meta import command_line
from hakbench.engine.progress import Progress
from hakbench.experiments import soak, soak_figures, soak_plan, soak_process
from hakbench.report.soak import verdict_lines


class _SoakProgress:
    """One bar per soak process (epochs), a plain line for each other phase."""

    def __init__(self, plan: soak_plan.SoakPlan):
        self.plan = plan
        self.bar: Progress | None = None

    def phase(self, text: str) -> None:
        self.finish()
        if text.startswith("soak "):
            self.bar = Progress(self.plan.epochs, f"hakbench {text}")
        else:
            click.echo(f"hakbench soak: {text}", err=True)

    def epoch(self, run: soak_process.SoakRun, row: dict) -> None:
        if self.bar is None:
            return
        rss_kb = soak_figures.epoch_rss_kb(row)
        rss = "?" if rss_kb is None else f"{rss_kb / 1024:.1f} MiB"
        self.bar.step(True, f"RSS {rss}, {row['ops_s'] / 1e6:.2f}M ops/s")

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _pct_option(value: float, name: str) -> float:
    if value < 0:
        raise UsageError(f"{name} takes a budget >= 0, got {value:g}")
    return value


@click.command("soak")
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    default=("C7_SAFE",),
    show_default=True,
    help="libhakmem profile (repeatable; references run without one).",
)
@click.option(
    "--allocator",
    "allocators",
    multiple=True,
    default=("hakmem", "system"),
    show_default=True,
    help="Allocator to soak (repeatable): hakmem, system, mimalloc, jemalloc, tcmalloc.",
)
@click.option("--workload", default="soak", show_default=True, help="A bench_soak workload.")
@click.option("--duration", default="60m", show_default=True, help="Per allocator: 20s, 10m, 1h.")
@click.option("--epoch", "epoch", default="10s", show_default=True, help="Sampling interval.")
@click.option(
    "--inject-leak",
    "leak_kb_per_s",
    type=click.IntRange(min=0),
    default=0,
    metavar="KB_PER_S",
    help="Make the harness leak this many KiB per second (proves the detector works).",
)
@click.option(
    "--warmup-epochs",
    type=click.IntRange(min=0),
    default=None,
    help="Epochs left out of the figures. [default: 5 % of the epochs, at least 1]",
)
@click.option(
    "--syscall-pass",
    default="10s",
    show_default=True,
    help="Length of the separate strace pass that counts syscalls per op; 0 skips it.",
)
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), help="[default: results/runs/<ts>-soak]"
)
@click.option(
    "--rss-budget",
    default=soak_plan.Thresholds.rss_pct_per_h,
    show_default=True,
    help="Max RSS growth, %/h (FAIL beyond it when the trend's CI excludes 0).",
)
@click.option(
    "--ops-budget",
    default=soak_plan.Thresholds.ops_pct_per_h,
    show_default=True,
    help="Max ops/s decline, %/h (same rule).",
)
@click.option(
    "--cv-budget",
    type=float,
    default=None,
    help="Max ops/s CV, %% [default: reported, not judged: a shared VM's speed modes alone "
    "give every allocator 10-50 %%]",
)
@click.option(
    "--syscall-budget",
    default=soak_plan.Thresholds.syscalls_per_kop,
    show_default=True,
    help="Max mmap+munmap+madvise+brk+mremap per 1000 ops.",
)
@click.option("--report-only", is_flag=True, help="Exit 0 even when a verdict is FAIL.")
@resume_option("soak in DIR with its own plan: finished processes are kept, a cut one runs again")
def soak_command(
    profiles,
    allocators,
    workload,
    duration,
    epoch,
    leak_kb_per_s,
    warmup_epochs,
    syscall_pass,
    out_dir,
    rss_budget,
    ops_budget,
    cv_budget,
    syscall_budget,
    report_only,
    resume,
):
    """Soak each allocator in one long bench_soak process and judge its RSS and ops/s
    trends (%/h, with 95 % CIs), ops/s CV and syscalls per op against budgets (report.md,
    summary.json, epochs.csv, soak.png, meta.json).

    Exit 0 when every verdict is PASS, 1 when one is FAIL (unless --report-only), 2 on bad
    input, 3 when a soak process crashed, 130/143/129 on SIGINT/SIGTERM/SIGHUP. Every epoch
    is stored as it arrives (epochs.jsonl) and the report is written in every case;
    --resume DIR continues a stopped or killed soak.
    """
    if resume is not None:
        if out_dir is not None:
            raise UsageError("--resume writes into its own directory; drop --out")
        meta = engine.stored_meta(resume, "soak")
        if "soak_plan" not in meta:
            raise UsageError(f"--resume {resume}: a soak made before soak could resume")
        plan = soak_plan.plan_of(meta["soak_plan"])
        _soak_and_report(plan, resume, report_only, resume=True)
        return
    epochs, epoch_ms = soak_plan.plan_epochs(
        soak_plan.parse_duration(duration), soak_plan.parse_duration(epoch)
    )
    thresholds = soak_plan.Thresholds(
        rss_pct_per_h=_pct_option(rss_budget, "--rss-budget"),
        ops_pct_per_h=_pct_option(ops_budget, "--ops-budget"),
        cv_pct=None if cv_budget is None else _pct_option(cv_budget, "--cv-budget"),
        syscalls_per_kop=_pct_option(syscall_budget, "--syscall-budget"),
    )
    if warmup_epochs is None:
        warmup_epochs = soak_plan.default_warmup_epochs(epochs)
    if warmup_epochs > epochs - 2:
        raise UsageError(
            f"--warmup-epochs {warmup_epochs} leaves fewer than 2 of the {epochs} epochs "
            "to judge; lengthen --duration or shorten --epoch"
        )
    plan = soak_plan.SoakPlan(
        targets=soak_plan.plan_targets(allocators, profiles, workload),
        epochs=epochs,
        epoch_ms=epoch_ms,
        warmup_epochs=warmup_epochs,
        leak_kb_per_s=leak_kb_per_s,
        syscall_pass_s=soak_plan.parse_duration(syscall_pass),
        thresholds=thresholds,
        workload=workload,
        allocators=tuple(allocators),
        profiles=tuple(profiles),
    )
    _soak_and_report(plan, out_dir or soak.default_out_dir(), report_only)


def _soak_and_report(
    plan: soak_plan.SoakPlan, out: Path, report_only: bool, *, resume=False
) -> None:
    progress = _SoakProgress(plan)
    session = soak.run_soak(
        plan,
        out,
        shlex.join(command_line()),
        on_epoch=progress.epoch,
        on_phase=progress.phase,
        resume=resume,
    )
    progress.finish()
    summary = session.summary
    for fig in summary["runs"]:
        click.echo(
            f"{fig['label']}: {fig['status']}" + (f" ({fig['cause']})" if fig["cause"] else "")
        )
        for line in verdict_lines(fig, summary["thresholds"]):
            click.echo(f"  {line}")
    click.echo(f"report: {out / 'report.md'}")
    if session.interrupted:
        interrupts.exit_stopped(
            f"the report is {out / 'report.md'}", f"hakbench soak --resume {out}"
        )
    broken = [r for r in session.runs if r.status != "complete"]
    if broken:
        raise MeasurementError(f"{broken[0].target.label}: {broken[0].cause}")
    failed = soak_figures.failed_verdicts(summary)
    if failed and not report_only:
        click.echo(f"hakbench soak: FAIL ({'; '.join(failed)})", err=True)
        sys.exit(EXIT_GATE)


COMMANDS = [soak_command]
