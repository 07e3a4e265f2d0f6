"""``hakbench hotspots``: where one cell's time goes (perf record + report, grouped)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import click

from hakbench.commands import resume_alone, resume_option
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.cells import make_cell
from hakbench.engine.meta import cell_meta
from hakbench.engine.store import default_run_dir
from hakbench.experiments import hotspots


def scaled_args(workload, scale: int) -> tuple[str, ...]:
    """The workload's arguments with its iteration count multiplied by ``scale``."""
    if scale == 1:
        return workload.args
    flag = workload.iters_flag
    if not flag or flag not in workload.args:
        raise UsageError(f"workload '{workload.name}' has no iters_flag; use --scale 1")
    args = list(workload.args)
    i = args.index(flag) + 1
    args[i] = str(int(args[i]) * scale)
    return tuple(args)


@click.command("hotspots")
@click.option("--profile", "-p", default="C7_SAFE", show_default=True, help="ENV profile")
@click.option("--workload", "-w", default="mixed", show_default=True)
@click.option("--allocator", "-a", default="hakmem", show_default=True)
@click.option("--variant", default="fast", show_default=True, help="hakmem build variant")
@click.option("--top", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--scale",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="multiply the workload's iterations, so a ~15 ms run gives enough samples",
)
@click.option("--frequency", "-F", default=4999, show_default=True, help="samples per second")
@click.option(
    "--percent-limit", default=0.5, show_default=True, help="hide symbols below this self %"
)
@click.option("--call-graph", "-g", is_flag=True, help="also record call chains (perf.data)")
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@resume_option(
    "hotspots run in DIR with its own options: a finished recording is reported, not "
    "recorded again; a cut one is recorded"
)
def hotspots_cmd(out, resume, **options):
    """Profile one cell with perf and write hotspots.csv and hotspots.md, grouped by origin.

    The recording is stored as it finishes (samples.jsonl); a stopped or killed run
    continues with --resume DIR (130/143/129 on SIGINT/SIGTERM/SIGHUP)."""
    resume_alone(resume)
    if resume is not None:
        options = engine.stored_meta(resume, "hotspots").get("options")
        if not isinstance(options, dict):
            raise UsageError(f"--resume {resume}: a hotspots run made before it could resume")
    o = options
    cell = make_cell(o["allocator"], o["workload"], variant=o["variant"], profile=o["profile"])
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    args = scaled_args(cell.workload, o["scale"])
    hotspots.require_perf()
    out = resume or out or default_run_dir(f"hotspots-{cell.allocator_label}-{cell.workload.name}")
    event = hotspots.pick_event()
    frequency = max(1, min(o["frequency"], hotspots.max_sample_rate()))
    argv = cell.command(args=list(args))[0]
    meta = cell_meta(cell, "hotspots", argv=argv, perf_event=event, perf_frequency=frequency)
    meta.update(scale=o["scale"], options=options)
    ident = engine.identity([cell], out)
    store, _, stored = engine.open_run(out, meta, resume=resume is not None, ident=ident)
    session = engine.Session(store, stored=stored)
    tags = {"phase": hotspots.PHASE, "cell": cell.key, "workload": cell.workload.name}
    try:
        sample = session.take(
            tags,
            lambda: hotspots.profile_sample(
                cell, args, out / "perf.data", event=event, frequency=frequency,
                call_graph=o["call_graph"],
            ),
        )  # fmt: skip
    except KeyboardInterrupt:
        what = "the recording is stored" if session.finished else "no recording finished"
        interrupts.exit_stopped(f"{what} in {out}", f"hakbench hotspots --resume {out}")
    if sample["status"] != "ok":
        raise MeasurementError(sample["error"] or sample["status"])
    with interrupts.finishing():  # the report of a finished recording: a stop cuts nothing
        md = _report(cell, sample, out, o)
    click.echo(md)
    click.echo(f"results: {out}")


def _report(cell, sample: dict, out: Path, options: dict) -> str:
    """perf_report.txt, hotspots.csv and hotspots.md of a stored recording; the Markdown."""
    alloc = cell.resolved_allocator()
    data, event, frequency = (
        Path(sample["perf_data"]),
        sample["perf_event"],
        sample["perf_frequency"],
    )
    percent_limit, scale, ops = options["percent_limit"], options["scale"], sample["harness"]
    text = hotspots.report(data, percent_limit)
    (out / "perf_report.txt").write_text(text)
    header = hotspots.parse_report_header(text)
    ours = hotspots.hakmem_symbols(alloc.preload if alloc.name == "hakmem" else None)
    harness_dsos = {cell.workload.program, f"{cell.workload.program}_hakmem"}
    rows = [
        dataclasses.replace(r, group=hotspots.classify(r, ours, harness_dsos))
        for r in hotspots.parse_perf_report(text)
    ]
    if not rows:
        raise MeasurementError(f"perf recorded no samples above {percent_limit} % ({data})")
    shown = sum(r.self_pct for r in rows)
    notes = [
        f"cell: {cell.label}, workload {cell.workload.name} x{scale}: "
        f"`{shlex.join(sample['argv'])}`",
        f"event: {header.get('event', event)} at {frequency} Hz, "
        f"{header.get('samples', '?')} samples; self time only (no children)",
        f"symbols below {percent_limit:g} % hidden: {max(0.0, 100 - shown):.1f} % of samples",
        f"harness: {ops.get('throughput')} ops/s under perf (not a timing to compare)",
    ]
    if event != "cycles":
        notes.append("no hardware cycle counter here: sampled by the cpu-clock timer")
    if ours == {} and alloc.name == "hakmem":
        notes.append("libhakmem symbols unreadable (nm): front/backend split by name only")
    hotspots.write_csv(rows, out / "hotspots.csv")
    title = f"{cell.label} / {cell.workload.name}"
    md = hotspots.markdown(rows, title=title, top=options["top"], notes=notes)
    (out / "hotspots.md").write_text(md)
    return md


COMMANDS = [hotspots_cmd]
