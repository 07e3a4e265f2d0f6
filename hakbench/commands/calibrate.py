"""``hakbench calibrate``: the false-positive rate and detection rates of ``ab`` here."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench import calibrate as cal
from hakbench import stats as st
from hakbench.cell import make_cell
from hakbench.errors import EXIT_INTERRUPTED, UsageError
from hakbench.meta import collect_meta
from hakbench.progress import Progress
from hakbench.store import default_run_dir

EXTRA_WORK_PROGRAM = "bench_random_mixed"  # the harness program with --extra-work


@click.command("calibrate")
@click.option("--workload", "-w", default="mixed", show_default=True)
@click.option("--allocator", "-a", default="hakmem", show_default=True)
@click.option("--profile", "-p", default="C7_SAFE", show_default=True, help="ENV profile")
@click.option(
    "--runs",
    "-n",
    default=cal.DEFAULT_RUNS,
    show_default=True,
    type=click.IntRange(6, 10000),
    help="measured pairs per trial (ab's default)",
)
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(0, 100))
@click.option(
    "--trials",
    default=10,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="trials per condition (A/A and each K)",
)
@click.option(
    "--extra-work",
    "-k",
    "extra_work",
    multiple=True,
    type=float,
    help="injected cost K of side B (repeatable) [default: 0.25, 0.5, 1.25]",
)
@click.option(
    "--threshold",
    default=st.DEFAULT_THRESHOLD_PCT,
    show_default=True,
    help="ab's verdict threshold in %",
)
@click.option(
    "--perf", is_flag=True, help="wrap each process in perf stat, as `ab --perf each` does"
)
@click.option("--seed", default=1, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
def calibrate_cmd(
    workload, allocator, profile, runs, warmup, trials, extra_work, threshold, perf, seed, out
):
    """Run A/A trials and trials with a known injected cost; write calibration.json.

    Reports, per injected effect, how often ab detected it and how often the noise let it
    be seen at all (Wilson 95 % intervals). The defaults (10 trials x 4 conditions x 100
    pairs) took 5 minutes here at a load of 6. A complete calibration becomes this machine's
    (results/runs/calibration/<fingerprint>/latest.json, not tracked), where `ab` reads it.
    Ctrl-C keeps the finished trials (trials.jsonl, calibration.json) and exits 130.
    """
    ks = tuple(extra_work) or cal.DEFAULT_EXTRA_WORK
    if any(k <= 0 for k in ks):
        raise UsageError("--extra-work values must be > 0 (K=0 is the A/A condition)")
    cell = make_cell(allocator, workload, profile=profile)
    if cell.workload.program != EXTRA_WORK_PROGRAM:
        raise UsageError(
            f"calibrate injects cost with {EXTRA_WORK_PROGRAM} --extra-work; workload "
            f"'{workload}' runs {cell.workload.program}"
        )
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    out = out or default_run_dir(f"calibrate-{cell.allocator_label}-{cell.workload.name}")
    if (out / "trials.jsonl").exists():
        raise UsageError(f"{out} already holds trials.jsonl; choose another --out")
    progress = Progress(trials * (1 + len(ks)), f"calibrate {cell.label} {cell.workload.name}")

    def on_trial(t: cal.Trial, done: int, _total: int) -> None:
        cal.record_trial(out, t)
        progress.step(ok=t.failed == 0, note=f"{t.condition}: {t.verdict}")

    result, _ = cal.calibrate(
        cell,
        runs=runs,
        trials=trials,
        warmup=warmup,
        extra_work=ks,
        threshold_pct=threshold,
        seed=seed,
        perf=perf,
        on_trial=on_trial,
    )
    progress.close()
    meta = collect_meta(kind="calibrate", variant=cell.variant, cell=cell.key, env=cell.env)
    cal.write_calibration(result, out, meta)
    click.echo(cal.report_markdown(result))
    click.echo(f"results: {out}")
    if result["interrupted"]:
        click.echo(f"hakbench: interrupted; {result['trials_done']} trials kept", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    click.echo(f"this machine's calibration: {cal.machine_path(result['fingerprint'])}")


COMMANDS = [calibrate_cmd]
