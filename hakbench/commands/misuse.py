"""``hakbench misuse``: the heap-misuse probes under any allocator (issue #27)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from hakbench.commands import resume_alone, resume_option
from hakbench.core.errors import MeasurementError
from hakbench.engine import interrupts
from hakbench.engine.meta import collect_meta, command_line
from hakbench.engine.store import default_run_dir
from hakbench.experiments import misuse, misuse_suite
from hakbench.report import misuse_suite_md
from hakbench.report.misuse_md import counts_lines, matrix_lines, missed_lines


@click.command("misuse")
@click.option(
    "--allocator",
    "-a",
    "allocators",
    multiple=True,
    help="allocator name, PATH.so or NAME=PATH.so (repeatable) "
    f"[default: {', '.join(misuse.DEFAULT_ALLOCATORS)}; and {misuse.HARDENED_NAME} when "
    f"${misuse.HARDENED_ENV} names its library]",
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    help=f"libhakmem build (repeatable) [default: {', '.join(misuse.HAKMEM_VARIANTS)}]",
)
@click.option(
    "--pattern",
    "-p",
    "patterns",
    multiple=True,
    help="pattern name or shell glob, e.g. 'double-free-*' (repeatable) [default: all]",
)
@click.option(
    "--runs",
    "-n",
    default=misuse.RUNS,
    show_default=True,
    type=click.IntRange(1, 100),
    help="runs per allocator and pattern or probe (a few outcomes depend on randomisation; "
    "a suite probe counts as caught only when caught in every run)",
)
@click.option(
    "--set",
    "which",
    type=click.Choice(["all", "patterns", "suite"]),
    default="all",
    show_default=True,
    help="our patterns, the suite's security probes, or both (the suite's when found); "
    "-p alone means patterns, -P alone suite",
)
@click.option(
    "--probe",
    "-P",
    "probes",
    multiple=True,
    help="suite probe name or shell glob, e.g. 'double_free*' (repeatable) [default: all]",
)
@click.option("--list", "list_only", is_flag=True, help="print the patterns (probes) and exit")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="run directory")
@click.option(
    "--timeout",
    default=misuse.TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(1, 600),
    help="seconds per pattern's process (it ends itself after 2 s of CPU, 10 s of time; "
    f"a suite probe gets {misuse_suite.PROBE_TIMEOUT_S:g} s)",
)
@resume_option("misuse run in DIR with its own options: its probes are kept, the others run")
def misuse_cmd(
    allocators,
    variants,
    patterns,
    runs,
    which,
    probes,
    list_only,
    out,
    timeout,
    resume,
):
    """Run the heap-misuse probes: our patterns (each one process of
    build/bench/misuse_probe that performs one misuse and then ordinary malloc/free
    activity) and mimalloc-bench's security probes (each prints NOT_CAUGHT when the
    allocator let its misuse pass; counted only for an allocator that ran the suite's benign
    programs cleanly, and caught only when caught in every run). The tables say, per
    allocator, which it caught and how each process ended.

    Writes probes.jsonl (raw), misuse.csv and suite-probes.csv (tidy), misuse.md (counts,
    matrices, every probe) and meta.json into the run directory; prints the counts. A
    misuse not caught is a result, not a failure: the exit status is 0 unless nothing could
    run (3). Every process is stored as it ends; a stopped or killed run continues with
    --resume DIR (130/143/129 on SIGINT/SIGTERM/SIGHUP).
    """
    resume_alone(resume)
    if resume is not None:
        _report(misuse.run_misuse(**misuse.resumed(resume), out=resume, resume=True))
        return
    if which == "all" and bool(patterns) != bool(probes):  # -p alone: patterns; -P alone: suite
        which = "patterns" if patterns else "suite"
    chosen = []
    if which != "suite":
        chosen = misuse.select_patterns(misuse.list_patterns(), patterns)
    suite = None
    if which != "patterns":
        # --suite-dir (every command's option, hakbench.cli) given: the suite is wanted
        given = click.get_current_context().get_parameter_source("suite_dir")
        wanted = which == "suite" or bool(probes) or given is ParameterSource.COMMANDLINE
        suite, why_not = misuse.suite_probes(probes, required=wanted)
        if suite is None:
            click.echo(f"the suite's security probes skipped: {why_not}", err=True)
    if list_only:
        for p in [*chosen, *(suite.probes if suite else ())]:
            click.echo(p)
        return
    targets, skipped = misuse.resolve_targets(
        allocators or misuse.default_allocators(), variants or misuse.HAKMEM_VARIANTS
    )
    for s in skipped:
        click.echo(f"skipped {s['label']}: {s['reason']}", err=True)
    if not targets:
        raise MeasurementError("no allocator to run: every one asked for is unavailable")
    out = out or default_run_dir("misuse")
    meta = collect_meta(command_line())
    run = misuse.run_misuse(
        targets, chosen, out, runs=runs, skipped=skipped, meta=meta, suite=suite
    )
    _report(run)


def _report(run: misuse.MisuseRun) -> None:
    """Print a run's counts and our patterns' matrix (or, stopped, how to continue it)."""
    out = run.out
    if run.interrupted:
        interrupts.exit_stopped(f"{out} holds what finished", f"hakbench misuse --resume {out}")
    if run.rows:
        for line in [*counts_lines(run.rows), "", *missed_lines(run.rows), ""]:
            click.echo(line)
        for line in matrix_lines(run.rows):
            click.echo(line)
        click.echo("")
    if run.suite_rows:
        for line in [
            *misuse_suite_md.counts_lines(run.suite_rows, run.records),
            "",
            *misuse_suite_md.missed_lines(run.suite_rows),
        ]:
            click.echo(line)
    ran = [r for r in run.rows if r["outcome"] != "error"]
    ran += [r for r in run.suite_rows if r["outcome"] != "error"]
    if not ran:
        raise MeasurementError(f"every probe failed to run; see {out / 'misuse.md'}")
    click.echo(f"results in {out} (misuse.md, misuse.csv, suite-probes.csv, probes.jsonl)")


COMMANDS = [misuse_cmd]
