"""``hakbench bisect``: the first bad commit between a good and a bad revision."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench.commands import resume_alone, resume_option
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.store import default_run_dir
from hakbench.experiments import bisect
from hakbench.experiments.ab_spec import DEFAULT_MAX_TIME_S, DEFAULT_PROFILE


@click.command("bisect")
@click.option("--good", help="a revision where the workload was fine")
@click.option("--bad", help="a later revision (on --good's first-parent line) where it is not")
@click.option("--workload", "-w", help="the harness workload that got worse")
@click.option(
    "--from-history",
    metavar="WORKLOAD",
    help="take --good/--bad (and -w) from the scorecard's results/history.csv: the last "
    "commit it measured WORKLOAD at, and the latest earlier one at least --threshold better",
)
@click.option(
    "--metric",
    type=click.Choice(bisect.METRICS),
    default="auto",
    show_default=True,
    help="auto: exact instruction counts where the regression shows in them, else paired "
    "sequential A/Bs of the CPU time of the timed loop",
)
@click.option("--profile", "-p", default=DEFAULT_PROFILE, show_default=True)
@click.option(
    "--threshold",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 100, min_open=True),
    help="smallest regression in % that counts",
)
@click.option(
    "--max-time",
    default=DEFAULT_MAX_TIME_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="seconds of pairs per timed A/B step",
)
@click.option("--iters", type=click.IntRange(1), help="iterations of the workload")
@click.option("--seed", type=int, help="the steps' pair-order seed [default: fresh, recorded]")
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@resume_option("bisect in DIR from its stored counts and steps")
def bisect_cmd(
    good,
    bad,
    workload,
    from_history,
    metric,
    profile,
    threshold,
    max_time,
    iters,
    seed,
    out,
    resume,
):
    """Which commit made WORKLOAD worse? Binary search over the first-parent history between
    --good and --bad: exact instruction counts where the regression shows in them, else
    paired sequential A/Bs (the error rate over all steps held at 5 %)."""
    if resume:
        resume_alone(resume)
        spec = bisect.BisectSpec(**engine.stored_meta(resume, "bisect")["spec"])
        _run_and_print(spec, resume, resume=True)
        return
    if from_history:
        if good or bad:
            raise UsageError("--from-history picks --good and --bad itself: give one or the other")
        good, bad, why = bisect.range_from_history(from_history, threshold_pct=threshold)
        workload = workload or from_history
        click.echo(f"range from {why}", err=True)
    if not (good and bad and workload):
        raise UsageError("bisect needs --good, --bad and -w WORKLOAD (or --from-history W)")
    spec = bisect.BisectSpec(
        good=good,
        bad=bad,
        workload=workload,
        metric=metric,
        profile=profile,
        threshold_pct=threshold,
        max_time_s=max_time,
        seed=seed,
        iters=iters,
    )
    _run_and_print(spec, out or default_run_dir(f"bisect-{workload}"))


def _run_and_print(spec, out: Path, *, resume: bool = False) -> None:
    result = bisect.run_bisect(spec, out, resume=resume)
    for i, s in enumerate(result.steps, 1):
        against = f" against {s.against[:12]}" if s.against else ""
        click.echo(
            f"{i:>2} {s.kind:<7} {s.commit[:12]}{against}: {s.verdict}"
            + (f" -> {s.classified}" if s.classified else "")
            + f" ({s.detail})"
        )
    if result.found:
        state = "confirmed" if result.confirmed else "NOT confirmed"
        subject = result.subjects.get(result.found, "")
        click.echo(f"first bad commit: {result.found[:12]} {subject} ({state} against its parent)")
    elif result.candidates:
        click.echo("first bad commit is one of: " + ", ".join(c[:12] for c in result.candidates))
    if result.message:
        click.echo(f"note: {result.message}")
    click.echo(f"{result.probes} commits judged of {len(result.commits)} (how: {result.how})")
    click.echo(str(result.out))
    if result.interrupted:
        interrupts.exit_stopped(
            f"finished steps are in {result.out}", f"hakbench bisect --resume {result.out}"
        )
    if not (result.found or result.candidates):
        raise MeasurementError(f"no commit found; see {result.out}/report.md")


COMMANDS = [bisect_cmd]
