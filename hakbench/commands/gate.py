"""``hakbench gate``: CI's instruction-count and page-fault regression gate (see
hakbench.experiments.gate)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import click

from hakbench.commands import resume_alone, resume_option
from hakbench.core import paths
from hakbench.core.errors import EXIT_GATE, MeasurementError, UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.meta import git_state
from hakbench.engine.progress import Progress
from hakbench.engine.store import default_run_dir, write_json, write_jsonl
from hakbench.experiments import gate as g
from hakbench.experiments import gate_verdict as gv


@click.command("gate")
@click.option("--refresh", is_flag=True, help="measure and write a new committed baseline")
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="matrix whose [gate] table to use (default profiles/matrices/scorecard.toml)",
)
@click.option(
    "--build",
    type=click.Path(file_okay=False, path_type=Path),
    help="measure the libhakmem and harness of another build directory (default build/)",
)
@click.option("--results", type=click.Path(file_okay=False, path_type=Path), help="results dir")
@click.option("--workload", "-w", "workloads", multiple=True, help="only these workloads")
@click.option("--profile", "-p", "profiles", multiple=True, help="only these profiles")
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 64))
@resume_option(
    "gate run in DIR (results/runs/...-gate): its finished runs and counts are kept, the "
    "others measured"
)
def gate_cmd(refresh, matrix_file, build, results, workloads, profiles, jobs, resume):
    """Exact instructions per op and minor page faults (median of 3 native runs) of
    libhakmem (fast build) under each shipping profile on every seed workload, against the
    baseline committed in results/scorecard/gate.json.

    Exit 1 when a cell's count rose above its tolerance (a regression) or dropped below it
    (an improvement: refresh the baseline so the committed figures stay true). Tolerances
    and the iteration scale are in the [gate] table of profiles/matrices/scorecard.toml.
    Every run and count is stored as it finishes; a stopped or killed gate continues with
    --resume DIR (130/143/129 on SIGINT/SIGTERM/SIGHUP).
    """
    resume_alone(resume, allowed=("jobs",))
    if resume is not None:
        meta = engine.stored_meta(resume, "gate")
        spec = g.resumed_spec(meta, resume)
        refresh, path, out = bool(meta.get("refresh")), Path(meta["baseline"]), resume
        build = Path(meta["build"]) if meta.get("build") else None
    else:
        spec = _chosen_spec(g.load_gate(matrix_file), workloads, profiles, refresh, results)
        path = g.baseline_path(results)
        out = (results or paths.results_dir()) / "runs" / default_run_dir("gate").name
    if refresh:
        baseline = None
    elif resume is not None and meta.get("baseline_document"):
        baseline = meta["baseline_document"]  # what the run started against
    else:
        baseline = g.read_baseline(path)  # no baseline: exit 2 before work
    cells = g.gate_cells(spec, build=build)
    store, _, stored = engine.open_run(
        out,
        g.gate_meta(spec, refresh=refresh, baseline=path, build=build, document=baseline),
        resume=resume is not None,
        ident=engine.identity(cells, out),
    )
    started = time.monotonic()
    rows = _measure(spec, cells, store, stored, out, jobs, baseline)
    seconds = time.monotonic() - started
    if refresh:
        _refresh(spec, rows, path, seconds)
    else:
        _judge(spec, baseline, rows, seconds)


def _measure(spec, cells, store, stored, out: Path, jobs: int, baseline) -> list[dict]:
    """Every cell's runs and counts (stored as they finish) -> its row. A stop signal writes
    and judges what finished, then exits 128 + the signal."""
    runs = len(cells) * g.FAULT_RUNS + sum(spec.ir_runs(c.workload.name) for c in cells)
    progress = Progress(runs, "gate")

    def step(sample: dict) -> None:
        ok = sample["status"] == "ok"
        note = f"{sample['profile']} {sample['workload']}: "
        if not ok:
            note += f"failed: {sample.get('error') or sample['status']}"
        elif sample["phase"] == g.COUNTS:
            note += f"{sample['metrics']['ir_per_op']:.2f} Ir/op"
        else:
            note += f"{sample['metrics']['minflt']} faults"
        progress.step(ok, note)

    click.echo(
        f"gate: {len(cells)} cells, page faults ({g.FAULT_RUNS} native runs each, one at a "
        f"time), then exact counts ({jobs} at a time; the lowest of several where threads "
        f"interleave); runs stored in {out}"
    )
    session = engine.Session(store, stored=stored, on_sample=step)
    try:
        rows = g.measure(cells, session, jobs=jobs, ir_runs=spec.ir_runs)
    except KeyboardInterrupt:
        progress.close()
        with interrupts.finishing():  # what finished, judged; a stop cuts nothing here
            done = g.rows_of(cells, session.finished, spec.ir_runs)
            write_jsonl(out / "cells.jsonl", done)
            if baseline is not None and done:
                click.echo(gv.table(gv.compare(spec, baseline["cells"], done)))
        interrupts.exit_stopped(
            f"{len(done)} of {len(cells)} cells measured, their runs and counts in {out}; "
            "the baseline was left as it was",
            f"hakbench gate --resume {out}",
        )
    write_jsonl(out / "cells.jsonl", rows)
    if session.reused:
        click.echo(f"resumed: {session.reused} runs and counts kept, {session.ran} run now")
    progress.close()
    return rows


def _refresh(spec, rows: list[dict], path: Path, seconds: float) -> None:
    """``--refresh``: the rows become the committed baseline (every cell must have run)."""
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        raise MeasurementError(
            f"gate --refresh: {bad[0]['profile']} {bad[0]['workload']} failed: "
            f"{bad[0]['error'] or bad[0]['status']}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, g.baseline_document(spec, rows, git_state().get("commit")))
    click.echo(f"wrote {path} ({len(rows)} cells, {seconds:.0f} s)")


def _judge(spec, baseline: dict, rows: list[dict], seconds: float) -> None:
    """The rows against the baseline: the table, then exit 1 (EXIT_GATE) with what moved."""
    judged = gv.compare(spec, baseline["cells"], rows)
    differences = gv.toolchain_differences(baseline.get("toolchain", {}), g.toolchain())
    if differences:
        click.echo("note: toolchain differs from the baseline's; counts may move for that reason:")
        for d in differences:
            click.echo(f"  {d}")
    click.echo(gv.table(judged))
    click.echo(gv.faults_rule(spec))
    failed = [r for r in judged if r.status == gv.FAILED]
    if failed:
        raise MeasurementError(
            f"gate: {failed[0].profile} {failed[0].workload} could not be measured: "
            f"{failed[0].error}"
        )
    bad = gv.failing(judged)
    if bad:
        parts = _failure_parts(bad) + (
            ["the toolchain changed too, see the note above"] if differences else []
        )
        click.echo(f"gate FAILED ({seconds:.0f} s): " + "; ".join(parts), err=True)
        sys.exit(EXIT_GATE)
    click.echo(f"gate passed: {len(judged)} cells within tolerance ({seconds:.0f} s)")


def _failure_parts(bad: list) -> list[str]:
    """What rose, what dropped (an improvement: refresh), what has no baseline."""
    rose = sorted({r.workload for r in bad if r.status == gv.ROSE})
    dropped = sorted({r.workload for r in bad if r.status == gv.DROPPED})
    faults_rose = sorted({r.workload for r in bad if r.faults_status == gv.ROSE})
    faults_dropped = sorted({r.workload for r in bad if r.faults_status == gv.DROPPED})
    new = sorted({r.workload for r in bad if r.status == gv.NEW})
    parts = []
    if rose:
        parts.append(f"instructions rose on {', '.join(rose)}")
    if faults_rose:
        parts.append(f"page faults rose on {', '.join(faults_rose)}")
    if dropped:
        parts.append(f"instructions dropped on {', '.join(dropped)}")
    if faults_dropped:
        parts.append(f"page faults dropped on {', '.join(faults_dropped)}")
    if dropped or faults_dropped:
        parts.append(
            "a drop is an improvement: run `hakbench gate --refresh` and commit "
            "results/scorecard/gate.json"
        )
    if new:
        parts.append(f"no comparable baseline for {', '.join(new)} (refresh it)")
    return parts


def _chosen_spec(spec, workloads, profiles, refresh, results) -> g.GateSpec:
    """The [gate] spec narrowed to ``--workload``/``--profile`` (names checked: exit 2)."""
    for flag, chosen, known in (
        ("--workload", workloads, spec.workloads),
        ("--profile", profiles, spec.profiles),
    ):
        wrong = [c for c in chosen if c.lower() not in known and c.upper() not in known]
        if wrong:
            raise UsageError(f"{flag} {wrong[0]!r} is not gated; gated: {', '.join(known)}")
    if refresh and (workloads or profiles) and results is None:
        raise UsageError(
            "--refresh of the committed baseline measures every gated cell; drop "
            "--workload/--profile (or write a partial baseline elsewhere with --results)"
        )
    if not (workloads or profiles):
        return spec
    return dataclasses.replace(
        spec,
        profiles=tuple(
            p for p in spec.profiles if not profiles or p in {x.upper() for x in profiles}
        ),
        workloads=tuple(
            w for w in spec.workloads if not workloads or w in {x.lower() for x in workloads}
        ),
    )


COMMANDS = [gate_cmd]
