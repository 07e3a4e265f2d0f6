"""``hakbench calibrate``: the false-positive rate and detection rates of ``ab`` here."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench import calibrate as cal
from hakbench import runlength
from hakbench import stats as st
from hakbench.cell import make_cell
from hakbench.errors import EXIT_INTERRUPTED, UsageError
from hakbench.load import LoadMonitor
from hakbench.load import describe as describe_load
from hakbench.meta import collect_meta
from hakbench.progress import Progress
from hakbench.store import default_run_dir, write_json, write_text

EXTRA_WORK_PROGRAM = "bench_random_mixed"  # the harness program with --extra-work


@click.command("calibrate")
@click.option(
    "--workload",
    "-w",
    "workloads",
    multiple=True,
    help="[default: mixed; with --run-length: the seed workloads of the gate] (repeatable "
    "with --run-length)",
)
@click.option("--allocator", "-a", default="hakmem", show_default=True)
@click.option("--profile", "-p", default="C7_SAFE", show_default=True, help="ENV profile")
@click.option(
    "--runs",
    "-n",
    type=click.IntRange(6, 10000),
    help=f"measured pairs per trial [default: {cal.DEFAULT_RUNS}, ab's; with --run-length: "
    f"{runlength.DEFAULT_PAIRS} per iteration count]",
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
@click.option(
    "--run-length",
    is_flag=True,
    help="instead: measure A/A noise and cost per pair at fractions of each workload's "
    "iterations and record the count that decides soonest",
)
@click.option(
    "--fraction",
    "fractions",
    multiple=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="with --run-length: fraction of the workload's iterations to try (repeatable) "
    "[default: 1/8, 1/4, 1/2, 1]",
)
def calibrate_cmd(
    workloads,
    allocator,
    profile,
    runs,
    warmup,
    trials,
    extra_work,
    threshold,
    perf,
    seed,
    out,
    run_length,
    fractions,
):
    """Run A/A trials and trials with a known injected cost; write calibration.json.

    Reports, per injected effect, how often ab detected it and how often the noise let it
    be seen at all (Wilson 95 % intervals). The defaults (10 trials x 4 conditions x 100
    pairs) took 5 minutes here at a load of 6. A complete calibration becomes this machine's
    (results/runs/calibration/<fingerprint>/latest.json, not tracked), where `ab` reads it.
    Ctrl-C keeps the finished trials (trials.jsonl, calibration.json) and exits 130.

    With --run-length: A/A pairs at a few iteration counts of each workload, interleaved;
    per count the pair spread and wall seconds per pair, and the count with the shortest
    expected time to a sequential verdict, recorded for this machine (run_length.json).
    """
    if run_length:
        if extra_work or perf:
            raise UsageError("--run-length measures A/A pairs: no --extra-work or --perf")
        _run_length(workloads, allocator, profile, runs, warmup, threshold, seed, out, fractions)
        return
    if fractions:
        raise UsageError("--fraction belongs to --run-length")
    if len(workloads) > 1:
        raise UsageError("calibrate measures one workload (several only with --run-length)")
    workload = workloads[0] if workloads else "mixed"
    runs = runs or cal.DEFAULT_RUNS
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


def _run_length(workloads, allocator, profile, pairs, warmup, threshold, seed, out, fractions):
    from hakbench.gate import load_gate
    from hakbench.profiles import resolve_workload

    names = workloads or load_gate().workloads
    wls = [resolve_workload(w) for w in names]
    for w in wls:
        runlength.iterations(w)  # a workload without an iteration count is bad input
    pairs = pairs or runlength.DEFAULT_PAIRS
    fractions = fractions or runlength.DEFAULT_FRACTIONS
    first = make_cell(allocator, wls[0], profile=profile)
    alloc = first.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    out = out or default_run_dir(f"calibrate-run-length-{first.allocator_label}")
    plans = [(w, runlength.counts(w, fractions)) for w in wls]
    total = sum(2 * (pairs + warmup) * len(c) for _, c in plans)
    progress = Progress(total, "calibrate --run-length")
    entries = []
    with LoadMonitor() as load:
        for w, counts in plans:
            points = runlength.measure_workload(
                lambda wl: make_cell(allocator, wl, profile=profile),
                w,
                counts,
                pairs=pairs,
                warmup=warmup,
                seed=seed,
                on_sample=lambda s: progress.step(s["status"] == "ok", s.get("error") or ""),
            )
            entries.append(runlength.workload_entry(w, points, threshold))
    progress.close()
    doc = runlength.document(
        entries,
        threshold_pct=threshold,
        pairs=pairs,
        cell={"allocator": first.allocator_label, "profile": first.profile},
    )
    doc["load"] = load.result
    path = runlength.write(doc, out)
    write_json(out / "meta.json", collect_meta(kind="calibrate-run-length", load=load.result))
    text = "\n".join([*runlength.report_lines(doc), "", describe_load(load.result)]) + "\n"
    write_text(out / "report.md", text)
    click.echo(text)
    click.echo(f"results: {path}")
    click.echo(f"this machine's run lengths: {runlength.machine_path(doc['fingerprint'])}")


COMMANDS = [calibrate_cmd]
