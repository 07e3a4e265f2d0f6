"""``hakbench publish OUT``: the scorecard, its history across commits and the run
directories named, as a static site (issue #40)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from hakbench.experiments.publish import publish


@click.command("publish")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("more_runs", nargs=-1, type=click.Path(path_type=Path), metavar="[RUN_DIR]...")
@click.option(
    "--runs",
    "runs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="a run directory, or a folder of them (results/runs); repeatable",
)
@click.option(
    "--repo-url",
    help="the repository's web address: each commit page links <URL>/commit/<sha>",
)
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    help="results directory (default: results/)",
)
def publish_cmd(out, more_runs, runs, repo_url, results):
    """Write a static site into OUT from the stored samples alone (nothing is measured):
    the scorecard (sortable tables: ratios with their intervals, milestones, Ir/op; the
    applications-and-stress, public-suites and heap-misuse sections), the scorecard across
    commits (one chart per workload and metric, a line per machine, each point a link to
    its commit's page), and a page per run directory given with --runs or after OUT
    (--runs A B C works too; a folder of runs, results/runs, counts as each of them): an
    ab's verdicts, pairs and paired ratios, engagement and guardrails; a soak's trends; a
    gate's cells. Open OUT/index.html from disk; no server is needed. Exit 2 on bad input."""
    started = time.monotonic()
    written = publish(out, results=results, runs=[*runs, *more_runs], repo_url=repo_url)
    pages = sum(p.suffix == ".html" for p in written)
    click.echo(f"wrote {pages} pages into {out} in {time.monotonic() - started:.1f} s")
    click.echo(f"open {out / 'index.html'}")


COMMANDS = [publish_cmd]
