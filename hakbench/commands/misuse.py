"""``hakbench misuse``: the heap-misuse probes under any allocator (issue #27)."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench.commands import resume_alone, resume_option
from hakbench.core.errors import MeasurementError
from hakbench.engine import interrupts
from hakbench.engine.meta import collect_meta, command_line
from hakbench.engine.store import default_run_dir
from hakbench.experiments import misuse
from hakbench.report.misuse_md import counts_lines, matrix_lines, missed_lines
from hakbench.tables.misuse_model import counts


@click.command("misuse")
@click.option(
    "--allocator",
    "-a",
    "allocators",
    multiple=True,
    help="allocator name, PATH.so or NAME=PATH.so (repeatable) "
    f"[default: {', '.join(misuse.DEFAULT_ALLOCATORS)}]",
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
    help="runs per allocator and pattern (a few outcomes depend on address randomisation)",
)
@click.option("--list", "list_only", is_flag=True, help="print the patterns and exit")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="run directory")
@click.option(
    "--timeout",
    default=misuse.TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(1, 600),
    help="seconds per probe process (the probe ends itself after 2 s of CPU, 10 s of time)",
)
@resume_option("misuse run in DIR with its own options: its probes are kept, the others run")
def misuse_cmd(allocators, variants, patterns, runs, list_only, out, timeout, resume):
    """Run the heap-misuse probes: each pattern is one process of build/bench/misuse_probe
    that performs one misuse and then ordinary malloc/free activity; the table says, per
    allocator and pattern, whether the allocator caught it (stopped the process), the
    process crashed or hung, or it finished (and what the corruption led to).

    Writes probes.jsonl (raw), misuse.csv (tidy), misuse.md (matrix, counts, every probe)
    and meta.json into the run directory; prints the counts and the matrix. A pattern not
    caught is a result, not a failure: the exit status is 0 unless nothing could run (3).
    Every probe is stored as its process ends; a stopped or killed run continues with
    --resume DIR (130/143/129 on SIGINT/SIGTERM/SIGHUP).
    """
    resume_alone(resume)
    if resume is not None:
        _report(misuse.run_misuse(**misuse.resumed(resume), out=resume, resume=True))
        return
    known = misuse.list_patterns()
    chosen = misuse.select_patterns(known, patterns)
    if list_only:
        for p in chosen:
            click.echo(p)
        return
    targets, skipped = misuse.resolve_targets(
        allocators or misuse.DEFAULT_ALLOCATORS, variants or misuse.HAKMEM_VARIANTS
    )
    for s in skipped:
        click.echo(f"skipped {s['label']}: {s['reason']}", err=True)
    if not targets:
        raise MeasurementError("no allocator to run: every one asked for is unavailable")
    out = out or default_run_dir("misuse")
    meta = collect_meta(command_line())
    _report(misuse.run_misuse(targets, chosen, out, runs=runs, skipped=skipped, meta=meta))


def _report(run: misuse.MisuseRun) -> None:
    """Print a run's counts and matrix (or, stopped, how to continue it)."""
    out = run.out
    if run.interrupted:
        interrupts.exit_stopped(f"{out} holds what finished", f"hakbench misuse --resume {out}")
    for line in [*counts_lines(run.rows), "", *missed_lines(run.rows)]:
        click.echo(line)
    click.echo("")
    for line in matrix_lines(run.rows):
        click.echo(line)
    if all(c.by_outcome["error"] == c.total for c in counts(run.rows)):
        raise MeasurementError(f"every probe failed to run; see {out / 'misuse.md'}")
    click.echo(f"results in {out} (misuse.md, misuse.csv, probes.jsonl)")


COMMANDS = [misuse_cmd]
