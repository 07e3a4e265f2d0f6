"""``hakbench scorecard``: rebuild, check or refresh the committed scorecard (issue #6)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hakbench.core import paths
from hakbench.core.errors import EXIT_GATE, UsageError
from hakbench.engine import interrupts
from hakbench.engine.meta import command_line
from hakbench.engine.progress import progress_reporter
from hakbench.experiments import scorecard, scorecard_refresh


@click.command("scorecard")
@click.option("--refresh", is_flag=True, help="measure again: run the scorecard matrix first")
@click.option("--quick", is_flag=True, help="with --refresh: the matrix's quick_runs rounds")
@click.option(
    "--apps",
    is_flag=True,
    help="with --refresh: the applications-and-stress section (profiles/matrices/apps.toml)",
)
@click.option(
    "--suite",
    is_flag=True,
    help="with --refresh: the public-suites section (mimalloc-bench's programs, "
    "profiles/matrices/mimalloc-bench.toml, into results/scorecard-suite/)",
)
@click.option(
    "-a",
    "--allocator",
    "allocators",
    multiple=True,
    help="with --refresh: one more allocator for the matrix's allocator axis "
    "(NAME=PATH.so, e.g. hardened_malloc=.../libhardened_malloc.so); repeatable",
)
@click.option(
    "--misuse",
    is_flag=True,
    help="with --refresh: the heap-misuse section (hakbench misuse's probes, into results/misuse/)",
)
@click.option("--runs", type=click.IntRange(1, 1000), help="with --refresh: measured rounds")
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="with --refresh: matrix file (default profiles/matrices/scorecard.toml)",
)
@click.option(
    "--from",
    "from_run",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="with --refresh: store this finished run of the scorecard matrix instead of running "
    "it (e.g. `hakbench merge` of its shards)",
)
@click.option("--check", is_flag=True, help="exit 1 with a diff when committed files are stale")
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    help="results directory (default: results/)",
)
def scorecard_cmd(
    refresh, quick, apps, suite, allocators, misuse, runs, matrix_file, from_run, check, results
):
    """Rebuild results/scorecard.csv, SCORECARD.md, history.csv and plots/ from the samples
    stored in results/scorecard/ (and, for the applications-and-stress section,
    results/scorecard-apps/) alone.

    --refresh runs the scorecard matrix on this machine first and replaces the stored
    samples (history.csv gains one block of rows); with --apps it runs
    profiles/matrices/apps.toml into results/scorecard-apps/ instead, with --suite
    mimalloc-bench's programs into results/scorecard-suite/. --check regenerates
    into a temporary directory and exits 1 when the committed files differ. With no stored
    samples, exit 2 and say how to make them.
    """
    results = results or paths.results_dir()
    if check and refresh:
        raise UsageError("--check compares the committed files; it does not refresh")
    if not refresh and (
        quick or runs or matrix_file or apps or misuse or suite or allocators or from_run
    ):
        raise UsageError(
            "--quick, --runs, --matrix, --apps, --suite, -a, --misuse and --from go with --refresh"
        )
    if from_run and (quick or runs or apps or misuse or suite or allocators):
        raise UsageError(
            "--from stores a finished run: no --quick, --runs, --apps, --misuse, --suite, -a"
        )
    if apps and suite:
        raise UsageError("--apps and --suite are two sections: refresh one at a time")
    if misuse and (quick or runs or matrix_file or apps or suite or allocators):
        raise UsageError(
            "--misuse runs the probes, not a matrix: no --quick, --runs, --matrix, --apps, "
            "--suite, -a"
        )
    if check:
        problems = scorecard.check(results)
        if problems:
            for p in problems:
                click.echo(p, err=True)
            click.echo(
                f"scorecard --check: {len(problems)} file(s) differ from what "
                f"{results / scorecard.STORED_DIR} gives; run `hakbench scorecard` and commit",
                err=True,
            )
            sys.exit(EXIT_GATE)
        click.echo(f"scorecard --check: {results} matches its stored samples")
        return
    if refresh:
        started = time.monotonic()
        try:
            if from_run:
                run_dir = scorecard_refresh.adopt_finished(from_run, results, matrix=matrix_file)
            elif misuse:
                run_dir = scorecard_refresh.refresh_misuse(results, command=command_line())
            else:
                run_dir = scorecard_refresh.refresh(
                    results,
                    matrix=matrix_file,
                    quick=quick,
                    runs=runs,
                    command=command_line(),
                    on_sample=progress_reporter("scorecard"),
                    apps=apps,
                    suite=suite,
                    allocators=allocators,
                )
        except KeyboardInterrupt:
            interrupts.exit_stopped("the stored scorecard was left as it was")
        if from_run:
            click.echo(f"stored the samples of {run_dir}")
        else:
            click.echo(f"measured in {time.monotonic() - started:.0f} s; full run in {run_dir}")
    else:
        scorecard.render(results)
    click.echo(f"wrote {results / scorecard.MD_NAME} and the files beside it")


COMMANDS = [scorecard_cmd]
