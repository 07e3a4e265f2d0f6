"""``hakbench hotspots``: where one cell's time goes (perf record + report, grouped)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import click

from hakbench.collect.harness import parse_harness_output
from hakbench.core.cell import make_cell
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine.meta import cell_meta
from hakbench.engine.store import default_run_dir, write_json
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
def hotspots_cmd(
    profile, workload, allocator, variant, top, scale, frequency, percent_limit, call_graph, out
):
    """Profile one cell with perf and write hotspots.csv and hotspots.md, grouped by origin."""
    cell = make_cell(allocator, workload, variant=variant, profile=profile)
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    args = scaled_args(cell.workload, scale)
    argv, env = cell.command(args=list(args))
    out = out or default_run_dir(f"hotspots-{cell.allocator_label}-{cell.workload.name}")
    out.mkdir(parents=True, exist_ok=True)
    event = hotspots.pick_event()
    frequency = max(1, min(frequency, hotspots.max_sample_rate()))
    data = out / "perf.data"
    recorded = hotspots.record(
        argv, env, data, event=event, frequency=frequency, call_graph=call_graph
    )
    harness = parse_harness_output(recorded.stdout)
    impl = str(harness.get("malloc_impl", ""))
    if alloc.expect_impl not in impl:
        raise MeasurementError(f"malloc_impl={impl or '?'}, expected {alloc.expect_impl}")

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
        f"cell: {cell.label}, workload {cell.workload.name} x{scale}: `{shlex.join(argv)}`",
        f"event: {header.get('event', event)} at {frequency} Hz, "
        f"{header.get('samples', '?')} samples; self time only (no children)",
        f"symbols below {percent_limit:g} % hidden: {max(0.0, 100 - shown):.1f} % of samples",
        f"harness: {harness.get('throughput')} ops/s under perf (not a timing to compare)",
    ]
    if event != "cycles":
        notes.append("no hardware cycle counter here: sampled by the cpu-clock timer")
    if ours == {} and alloc.name == "hakmem":
        notes.append("libhakmem symbols unreadable (nm): front/backend split by name only")
    hotspots.write_csv(rows, out / "hotspots.csv")
    md = hotspots.markdown(rows, title=f"{cell.label} / {cell.workload.name}", top=top, notes=notes)
    (out / "hotspots.md").write_text(md)
    write_json(
        out / "meta.json",
        cell_meta(
            cell,
            "hotspots",
            argv=argv,
            perf_event=event,
            perf_frequency=frequency,
            scale=scale,
        ),
    )
    click.echo(md)
    click.echo(f"results: {out}")


COMMANDS = [hotspots_cmd]
