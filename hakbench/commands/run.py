"""``hakbench run``: measure one cell N times and summarise it."""

from __future__ import annotations

import math
from pathlib import Path

import click

from hakbench.core.errors import MeasurementError, UsageError
from hakbench.core.metrics import METRICS
from hakbench.engine import interrupts
from hakbench.engine.cells import make_cell
from hakbench.engine.store import default_run_dir
from hakbench.experiments.ab_spec import DEFAULT_PERF_RUNS, DEFAULT_PROFILE, PERF_MODES
from hakbench.experiments.single import run_cell


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def _print_summary(rows: list[dict]) -> None:
    for r in rows:
        unit = METRICS[r["metric"]].unit
        click.echo(
            f"  {r['metric']:<16} {_fmt(r['median']):>14} {unit:<12} "
            f"95% CI [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]  n={r['n']}"
        )


@click.command("run")
@click.option("--profile", "-p", help=f"ENV profile (hakmem) [default: {DEFAULT_PROFILE}]")
@click.option("--workload", "-w", default="mixed", show_default=True)
@click.option("--allocator", "-a", default="hakmem", show_default=True)
@click.option("--variant", default="fast", show_default=True, help="hakmem build variant")
@click.option("--runs", "-n", default=10, show_default=True, type=click.IntRange(1, 10000))
@click.option("--warmups", default=1, show_default=True, type=click.IntRange(0, 100))
@click.option("--timeout", default=120.0, show_default=True, help="seconds per process")
@click.option(
    "--perf",
    "perf_mode",
    type=click.Choice(PERF_MODES),
    default="each",
    show_default=True,
    help="each: every run under perf stat; observe: runs without perf, then --perf-runs "
    "perf-wrapped ones summarised apart; off: no perf",
)
@click.option(
    "--perf-runs",
    default=DEFAULT_PERF_RUNS,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="perf-wrapped runs for --perf observe",
)
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
def run_cmd(
    profile, workload, allocator, variant, runs, warmups, timeout, perf_mode, perf_runs, out
):
    """Measure one cell: WARMUPS discarded runs, then RUNS measured ones."""
    if profile is None and allocator == "hakmem":
        profile = DEFAULT_PROFILE
    cell = make_cell(allocator, workload, variant=variant, profile=profile)
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    r = run_cell(
        cell,
        out or default_run_dir(f"run-{cell.allocator_label}-{cell.workload.name}"),
        runs=runs,
        warmups=warmups,
        timeout=timeout,
        perf_mode=perf_mode,
        perf_runs=perf_runs,
    )
    click.echo(
        f"{cell.label} on {cell.workload.name}: {len(r.ok)}/{len(r.measured)} runs ok "
        f"(perf {r.perf_mode})"
    )
    _print_summary(r.summaries["runs"])
    if r.perf_runs:
        click.echo(f"  perf counters, {len(r.perf_ok)}/{r.perf_runs} extra perf-wrapped runs ok:")
        _print_summary(r.summaries["perf"])
    for s in r.measured:
        if s["status"] != "ok":
            click.echo(f"  failed seq {s['seq']}: {s['status']}: {s['error']}")
    if r.unavailable():
        click.echo("  unavailable here: " + ", ".join(r.unavailable()))
    click.echo(str(r.out))
    if r.interrupted:
        interrupts.exit_stopped(f"finished samples are in {r.out}")
    if not r.ok:
        raise MeasurementError(f"no run of {cell.label} succeeded; see {r.out}")


COMMANDS = [run_cmd]
