"""``hakbench soak``: long runs that catch creeping RSS and sagging throughput (issue #7)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from hakbench import soak
from hakbench.errors import EXIT_GATE, EXIT_INTERRUPTED, MeasurementError, UsageError
from hakbench.meta import command_line
from hakbench.progress import Progress
from hakbench.report.soak import verdict_lines


class _SoakProgress:
    """One bar per soak process (epochs), a plain line for each other phase."""

    def __init__(self, plan: soak.SoakPlan):
        self.plan = plan
        self.bar: Progress | None = None

    def phase(self, text: str) -> None:
        self.finish()
        if text.startswith("soak "):
            self.bar = Progress(self.plan.epochs, f"hakbench {text}")
        else:
            click.echo(f"hakbench soak: {text}", err=True)

    def epoch(self, run: soak.SoakRun, row: dict) -> None:
        if self.bar is None:
            return
        rss_kb = soak.epoch_rss_kb(row)
        rss = "?" if rss_kb is None else f"{rss_kb / 1024:.1f} MiB"
        self.bar.step(True, f"RSS {rss}, {row['ops_s'] / 1e6:.2f}M ops/s")

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _pct_option(value: float, name: str) -> float:
    if value < 0:
        raise UsageError(f"{name} takes a size in percent, got {value:g}")
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
@click.option("--threshold-rss-drift", default=5.0, show_default=True, help="Max RSS drift, %.")
@click.option("--threshold-ops-drift", default=5.0, show_default=True, help="Max ops/s decline, %.")
@click.option("--threshold-cv", default=2.0, show_default=True, help="Max ops/s CV, %.")
@click.option(
    "--fail-on",
    type=click.Choice(["never", "fail"]),
    default="never",
    show_default=True,
    help="`fail`: exit 1 when any verdict is FAIL.",
)
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
    threshold_rss_drift,
    threshold_ops_drift,
    threshold_cv,
    fail_on,
):
    """Soak each allocator in one long bench_soak process and report RSS and throughput
    drift, ops/s CV and the syscall budget (report.md, epochs.csv, soak.png, meta.json).

    Exit 0 when every soak finished (verdicts are in the report; `--fail-on fail` makes a
    FAIL exit 1), 2 on bad input, 3 when a soak process crashed, 130 on Ctrl-C. The report
    is written in every case.
    """
    epochs, epoch_ms = soak.plan_epochs(soak.parse_duration(duration), soak.parse_duration(epoch))
    thresholds = soak.Thresholds(
        rss_drift_pct=_pct_option(threshold_rss_drift, "--threshold-rss-drift"),
        ops_drift_pct=-_pct_option(threshold_ops_drift, "--threshold-ops-drift"),
        cv_pct=_pct_option(threshold_cv, "--threshold-cv"),
    )
    if warmup_epochs is None:
        warmup_epochs = soak.default_warmup_epochs(epochs)
    if warmup_epochs > epochs - 2:
        raise UsageError(
            f"--warmup-epochs {warmup_epochs} leaves fewer than 2 of the {epochs} epochs "
            "to judge; lengthen --duration or shorten --epoch"
        )
    plan = soak.SoakPlan(
        targets=soak.plan_targets(allocators, profiles, workload),
        epochs=epochs,
        epoch_ms=epoch_ms,
        warmup_epochs=warmup_epochs,
        leak_kb_per_s=leak_kb_per_s,
        syscall_pass_s=soak.parse_duration(syscall_pass),
        thresholds=thresholds,
        workload=workload,
    )
    out = out_dir or soak.default_out_dir()
    progress = _SoakProgress(plan)
    session = soak.run_soak(
        plan,
        out,
        shlex.join(command_line()),
        on_epoch=progress.epoch,
        on_phase=progress.phase,
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
        sys.exit(EXIT_INTERRUPTED)
    broken = [r for r in session.runs if r.status != "complete"]
    if broken:
        raise MeasurementError(f"{broken[0].target.label}: {broken[0].cause}")
    if fail_on == "fail" and any(
        v == "FAIL" for f in summary["runs"] for v in f["verdicts"].values()
    ):
        sys.exit(EXIT_GATE)


COMMANDS = [soak_command]
