"""``hakbench matrix``: cross axes into cells and run them interleaved, round by round."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench.commands import resume_alone
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import interrupts
from hakbench.engine.load import describe as describe_load
from hakbench.engine.meta import command_line
from hakbench.engine.progress import progress_reporter
from hakbench.engine.store import default_run_dir, read_json
from hakbench.experiments import matrix, matrix_spec
from hakbench.experiments.shard import parse_shard
from hakbench.report.apps import write_apps_report
from hakbench.tables import matrix_summary


def print_summaries(summaries: list[matrix_summary.CellSummary]) -> None:
    """One line per cell: median, CI, n and the ratio to the reference cell."""
    width = max((len(s.label) for s in summaries), default=10)
    heading = None
    for s in summaries:
        if (s.coords["workload"], s.metric) != heading:
            heading = (s.coords["workload"], s.metric)
            click.echo(f"{heading[0]} ({s.metric}):")
        if s.median is None:
            click.echo(f"  {s.label:<{width}}  {s.status}" + (f": {s.reason}" if s.reason else ""))
            continue
        digits = matrix_summary.metric_digits(s.metric)
        ratio = ""
        if s.ratio is not None:
            ratio = f"  x{s.ratio:.3f} [{s.ratio_ci_low:.3f}, {s.ratio_ci_high:.3f}]"
            ratio += " (reference)" if s.reference == s.label else f" vs {s.reference}"
        failed = f"  ({s.n_failed} failed: {s.reason})" if s.n_failed else ""
        if s.status != "ok":  # FAILED: a side failed, so no ratio (stats.failures)
            failed = f"  {s.status}: {s.reason}"
        click.echo(
            f"  {s.label:<{width}}  {s.median:>14,.{digits}f} {s.metric}"
            f"  95% CI [{s.ci_low:,.{digits}f}, {s.ci_high:,.{digits}f}]  n={s.n}{ratio}{failed}"
        )


@click.command("matrix")
@click.argument("matrix_file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="run directory")
@click.option(
    "--resume",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="continue a run directory: samples already there (cell, round) are not run again",
)
@click.option("--runs", type=click.IntRange(1, 10000), help="measured rounds (default: file's)")
@click.option(
    "--metric",
    type=click.Choice(sorted(matrix_spec.METRIC_OF)),
    help="throughput (timed runs) or instructions (Ir per op; default: file's)",
)
@click.option(
    "--shard",
    metavar="K/N",
    help="run only shard K of N (cells with their reference); join with `hakbench merge`",
)
def matrix_cmd(matrix_file, out, resume, runs, metric, shard):
    """Run every cell of MATRIX_FILE (profiles/matrices/*.toml), interleaved round by round;
    with --resume DIR and no MATRIX_FILE, the matrix DIR recorded.

    Each round runs every cell once in a seeded shuffled order; warm-up rounds are
    discarded. Writes samples.jsonl, meta.json and summary.csv (median, 95 % CI, n and the
    ratio to the reference cell). --shard K/N runs a deterministic part of the cells, each
    with the cells it is compared with, for `hakbench merge`. Exit 2 on an unknown axis
    value, 3 when no sample succeeded, 130/143/129 on SIGINT/SIGTERM/SIGHUP (resume with
    --resume DIR).
    """
    if out and resume and out.resolve() != resume.resolve():
        raise UsageError("--out and --resume name different directories; give one")
    # a resumed matrix keeps its metric and shard (--runs may extend it)
    resume_alone(resume, allowed=("matrix_file", "out", "runs"))
    shard_kn = parse_shard(shard) if shard else None
    if matrix_file is None and resume is None:
        raise UsageError("name a MATRIX_FILE (or --resume DIR)")
    if matrix_file is None:  # the matrix the run directory recorded
        meta = read_json(resume / "meta.json")
        recorded = meta.get("matrix") or {}
        where = f"{resume}/meta.json"
        spec = matrix_spec.parse_matrix(
            recorded.get("text", ""), where, Path(recorded.get("file") or where)
        )
        shard_kn = shard_kn or (
            tuple(meta["shard"][k] for k in "kn") if meta.get("shard") else None
        )
    else:
        spec = matrix_spec.load_matrix(matrix_file)
    suffix = f"-shard{shard_kn[0]}of{shard_kn[1]}" if shard_kn else ""
    out_dir = resume or out or default_run_dir(f"matrix-{spec.name}{suffix}")
    try:
        run = matrix.run_matrix(
            spec,
            out_dir,
            runs=runs,
            metric=metric,
            resume=resume is not None,
            command=command_line(),
            on_sample=progress_reporter(f"matrix {spec.name}"),
            shard=shard_kn,
        )
    except KeyboardInterrupt:
        click.echo("", err=True)
        if (out_dir / "meta.json").exists():
            print_summaries(matrix.write_dir_summary(out_dir))
        interrupts.exit_stopped(
            f"finished samples are in {out_dir}", f"hakbench matrix --resume {out_dir}"
        )
    for s in run.skipped:
        click.echo(f"note: skipped {s.label}: {s.reason}", err=True)
    if run.reused:
        click.echo(f"resumed: {run.reused} samples kept, {run.ran} run now", err=True)
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        print_summaries(run.summaries)
        click.echo(describe_load(run.meta.get("load")))
        apps = write_apps_report(out_dir)
        if apps:
            click.echo(f"applications and stress: {apps}")
        click.echo(str(out_dir))
    if not any(s.status == "ok" for s in run.summaries):
        raise MeasurementError(f"no sample of matrix {spec.name} succeeded; see {out_dir}")


COMMANDS = [matrix_cmd]
