"""``hakbench run``: measure one cell N times and summarise it."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import click

from hakbench.ab import DEFAULT_PERF_RUNS, DEFAULT_PROFILE, PERF_MODES
from hakbench.cell import make_cell
from hakbench.errors import EXIT_INTERRUPTED, MeasurementError, UsageError
from hakbench.meta import collect_meta
from hakbench.metrics import METRICS, PERF_SOURCED
from hakbench.progress import Progress
from hakbench.runner import perf_usable, run_sample
from hakbench.stats import cell_summary
from hakbench.store import RunStore, default_run_dir

SUMMARY_FIELDS = (
    "workload",
    "cell",
    "source",
    "metric",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "min",
    "max",
)


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def _values(samples: list[dict], names) -> dict:
    return {m: [s["metrics"][m] for s in samples if m in s["metrics"]] for m in names}


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
    store = RunStore(
        out or default_run_dir(f"run-{cell.allocator_label}-{cell.workload.name}"), fresh=True
    )
    perf_phase_runs = perf_runs if perf_mode == "observe" and perf_usable() else 0
    if cell.workload.command is not None:  # a real program never runs under perf
        perf_mode, perf_phase_runs = "off", 0
    store.write_meta(
        collect_meta(
            kind="run",
            variant=cell.variant,
            cell=cell.key,
            cell_label=cell.label,
            env=cell.env,
            perf_mode=perf_mode,
            perf_used=perf_mode != "off" and perf_usable(),
        )
    )
    n_total = warmups + runs + perf_phase_runs
    progress = Progress(n_total, f"run {cell.label} {cell.workload.name}")
    samples = []
    interrupted = False
    try:
        for i in range(n_total):
            phase = "warmup" if i < warmups else "measure" if i < warmups + runs else "perf"
            perf = phase == "perf" or perf_mode == "each"
            s = run_sample(cell, phase=phase, perf=perf, timeout=timeout)
            s.update(side=None, pair=None, round=i)
            samples.append(store.append(s))
            progress.step(s["status"] == "ok", s["status"] if s["status"] != "ok" else "")
    except KeyboardInterrupt:
        interrupted = True
    progress.close()
    measured = [s for s in samples if s["phase"] == "measure"]
    ok = [s for s in measured if s["status"] == "ok"]
    perf_ok = [s for s in samples if s["phase"] == "perf" and s["status"] == "ok"]
    summaries = {
        source: [r for r in cell_summary(_values(group, names)) if r["n"]]
        for source, group, names in (
            ("runs", ok, METRICS),
            ("perf", perf_ok, PERF_SOURCED),
        )
    }
    with open(store.path / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        for source, rows in summaries.items():
            for r in rows:
                w.writerow(
                    {"workload": cell.workload.name, "cell": cell.key, "source": source, **r}
                )
    click.echo(
        f"{cell.label} on {cell.workload.name}: {len(ok)}/{len(measured)} runs ok "
        f"(perf {perf_mode})"
    )
    _print_summary(summaries["runs"])
    if perf_phase_runs:
        click.echo(f"  perf counters, {len(perf_ok)}/{perf_phase_runs} extra perf-wrapped runs ok:")
        _print_summary(summaries["perf"])
    for s in measured:
        if s["status"] != "ok":
            click.echo(f"  failed seq {s['seq']}: {s['status']}: {s['error']}")
    measured_ok = ok + perf_ok
    unavailable = sorted(
        {u for s in measured_ok for u in s["unavailable"]}
        - {m for s in measured_ok for m in s["metrics"]}
    )
    if unavailable:
        click.echo("  unavailable here: " + ", ".join(unavailable))
    click.echo(str(store.path))
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if not ok:
        raise MeasurementError(f"no run of {cell.label} succeeded; see {store.path}")


COMMANDS = [run_cmd]
