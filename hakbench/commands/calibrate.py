"""``hakbench calibrate``: the false-positive rate and detection rates of ``ab`` here."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from hakbench.core.cell import make_cell
from hakbench.core.errors import UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.load import LoadMonitor
from hakbench.engine.load import describe as describe_load
from hakbench.engine.meta import collect_meta
from hakbench.engine.progress import Progress
from hakbench.engine.store import (
    append_jsonl,
    default_run_dir,
    read_json,
    read_jsonl,
    write_json,
    write_text,
)
from hakbench.experiments import calibrate as cal
from hakbench.experiments import calibrate_sequential as calseq
from hakbench.experiments import runlength
from hakbench.experiments.ab_spec import DEFAULT_MAX_PAIRS, DEFAULT_WARMUP_PAIRS, ABSpec
from hakbench.stats import stats as st

EXTRA_WORK_PROGRAM = "bench_random_mixed"  # the harness program with --extra-work/--extra-ops


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
@click.option(
    "--warmup",
    type=click.IntRange(0, 100),
    help="warm-up pairs [default: 2; with --sequential: ab's 3]",
)
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
@click.option("--seed", type=int, help="[default: a fresh one, recorded: --seed replays it]")
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@click.option(
    "--resume",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="finish a stopped or killed calibration in DIR with its own options: finished "
    "trials and samples are kept",
)
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
@click.option(
    "--sequential",
    is_flag=True,
    help="instead: the sequential rule's verdicts on real pairs with known truths (A/A, "
    "injected slowdowns), stopping each trial at a decisive verdict or the budget",
)
@click.option(
    "--condition",
    "conditions",
    multiple=True,
    metavar="K@THRESHOLD",
    help="with --sequential: --extra-ops K of side B (KA:K@THRESHOLD: side A runs KA) "
    "judged at THRESHOLD % (repeatable) "
    f"[default: {', '.join(calseq.DEFAULT_CONDITIONS)}]",
)
@click.option(
    "--max-time",
    type=click.FloatRange(0, min_open=True),
    default=calseq.DEFAULT_MAX_TIME_S,
    show_default=True,
    help="with --sequential: seconds per trial before it ends INCONCLUSIVE",
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
    sequential,
    conditions,
    max_time,
    resume,
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

    With --sequential: each trial is a default (sequential) ab with side B running
    --extra-ops K, stopping at GO/NO-GO/NEUTRAL or at --max-time; per condition the verdict
    counts and the median and 90th-percentile time to a verdict (sequential.json).
    """
    if resume is not None:
        if out is not None:
            raise UsageError("--resume writes into its own directory; drop --out")
        _resume(resume)
        return
    if seed is None:  # a fresh seed per call, recorded in meta.json and the results
        seed = engine.new_seed()
    if sequential:
        if extra_work or perf or run_length or fractions or runs:
            raise UsageError("--sequential takes --condition and --max-time, not -k, -n, --perf")
        _sequential(workloads, allocator, profile, warmup, trials, seed, out, conditions, max_time)
        return
    if conditions:
        raise UsageError("--condition belongs to --sequential")
    warmup = 2 if warmup is None else warmup
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
    cell = _extra_work_cell(allocator, workload, profile)
    out = out or default_run_dir(f"calibrate-{cell.allocator_label}-{cell.workload.name}")
    if (out / "trials.jsonl").exists():
        raise UsageError(f"{out} already holds trials.jsonl; choose another --out")
    params = {
        "allocator": allocator,
        "workload": workload,
        "profile": profile,
        "runs": runs,
        "trials": trials,
        "warmup": warmup,
        "extra_work": list(ks),
        "threshold_pct": threshold,
        "seed": seed,
        "perf": perf,
    }
    meta = collect_meta(
        kind="calibrate", variant=cell.variant, cell=cell.key, env=cell.env, calibration=params
    )
    _calibrate(cell, out, meta, params, resume=False)


def _resume(out: Path) -> None:
    """``calibrate --resume DIR``: the calibration DIR's meta.json describes, finished."""
    meta = engine.stored_meta(out, "calibrate")
    if "calibration" not in meta:
        raise UsageError(f"--resume {out}: a calibration made before calibrate could resume")
    p = meta["calibration"]
    cell = _extra_work_cell(p["allocator"], p["workload"], p["profile"])
    _calibrate(cell, out, meta, p, resume=True)


def _calibrate(cell, out: Path, meta: dict, p: dict, *, resume: bool) -> None:
    """Run (or finish) the trials of a calibration through the engine and report them."""
    ident = engine.identity([cell], out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident)
    trials_file = out / "trials.jsonl"
    kept = read_jsonl(trials_file) if resume and trials_file.exists() else []
    finished = [cal.Trial(**t) for t in kept]
    label = f"calibrate {cell.label} {cell.workload.name}"
    progress = Progress(p["trials"] * (1 + len(p["extra_work"])), label)
    for t in finished:
        progress.step(ok=t.failed == 0, note=f"{t.condition}: {t.verdict} (kept)")

    def on_trial(t: cal.Trial, done: int, _total: int) -> None:
        cal.record_trial(out, t)
        progress.step(ok=t.failed == 0, note=f"{t.condition}: {t.verdict}")

    result, _ = cal.calibrate(
        cell,
        runs=p["runs"],
        trials=p["trials"],
        warmup=p["warmup"],
        extra_work=tuple(p["extra_work"]),
        threshold_pct=p["threshold_pct"],
        seed=p["seed"],
        perf=p["perf"],
        on_trial=on_trial,
        session=engine.Session(store, stored=stored),
        finished=finished,
    )
    progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        cal.write_calibration(result, out, meta)
    click.echo(cal.report_markdown(result))
    click.echo(f"results: {out}")
    if result["interrupted"]:
        click.echo(
            f"hakbench: interrupted by {interrupts.describe()}; {result['trials_done']} trials "
            f"kept; finish with: hakbench calibrate --resume {out}",
            err=True,
        )
        raise SystemExit(interrupts.exit_code())
    click.echo(f"this machine's calibration: {cal.machine_path(result['fingerprint'])}")


def _run_length(workloads, allocator, profile, pairs, warmup, threshold, seed, out, fractions):
    from hakbench.core.profiles import resolve_workload
    from hakbench.experiments.gate import load_gate

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
    meta = collect_meta(kind="calibrate-run-length", seed=seed)
    store, _, _ = engine.open_run(out, meta, resume=False, ident=engine.identity([first]))
    session = engine.Session(store, on_sample=engine.progress_step(progress))
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
                session=session,
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
    _write_report(out, "calibrate-run-length", runlength.report_lines(doc), load.result)
    click.echo(f"results: {path}")
    click.echo(f"this machine's run lengths: {runlength.machine_path(doc['fingerprint'])}")


def _sequential(workloads, allocator, profile, warmup, trials, seed, out, conditions, max_time):
    if len(workloads) > 1:
        raise UsageError("--sequential measures one workload")
    conditions = conditions or calseq.DEFAULT_CONDITIONS
    for c in conditions:
        calseq.parse_condition(c)
    cell = _extra_work_cell(allocator, workloads[0] if workloads else "mixed", profile)
    out = out or default_run_dir(f"calibrate-sequential-{cell.allocator_label}")
    if (out / "trials.jsonl").exists():
        raise UsageError(f"{out} already holds trials.jsonl; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress(trials * len(conditions), f"calibrate --sequential {cell.workload.name}")

    def make_spec(k, threshold, trial_seed, ka):
        """A default ``ab`` of the cell, side B with --extra-ops K, side A KA."""
        return ABSpec(
            profile=profile,
            allocator=allocator,
            workloads=(cell.workload.name,),
            threshold_pct=threshold,
            max_time_s=max_time,
            warmup_pairs=DEFAULT_WARMUP_PAIRS if warmup is None else warmup,
            seed=trial_seed,
            extra_ops=k,
            baseline_extra_ops=ka,
        )

    def on_trial(t, done, total):
        append_jsonl(out / "trials.jsonl", asdict(t))
        progress.step(ok=t.failed == 0, note=f"{t.condition}: {t.verdict} in {t.seconds:.0f} s")

    with LoadMonitor() as load:
        done = calseq.run(
            make_spec, conditions, trials=trials, out=out, seed=seed, on_trial=on_trial
        )
    progress.close()
    rows = calseq.summarize(done)
    interrupted = len(done) < trials * len(conditions)
    doc = {
        "workload": cell.workload.name,
        "allocator": cell.allocator_label,
        "profile": cell.profile,
        "max_time_s": max_time,
        "max_pairs": DEFAULT_MAX_PAIRS,
        "iterations": sorted({t.iterations for t in done}),
        "trials": trials,
        "trials_done": len(done),
        "seed": seed,
        "interrupted": interrupted,
        "machine": cal.machine(),
        "fingerprint": cal.fingerprint(),
        "load": load.result,
        "conditions": rows,
    }
    write_json(out / "sequential.json", doc)
    lines = calseq.report_lines(rows, max_time_s=max_time, max_pairs=DEFAULT_MAX_PAIRS)
    lines += ["", "Run length: " + "; ".join(doc["iterations"])]
    _write_report(out, "calibrate-sequential", lines, load.result)
    click.echo(f"results: {out}")
    if interrupted:
        click.echo(f"hakbench: interrupted; {len(done)} trials kept", err=True)
        raise SystemExit(interrupts.exit_code())


def _write_report(out: Path, kind: str, lines: list[str], load: dict) -> None:
    """meta.json and report.md (the lines and the load they were measured under); echo it."""
    meta = read_json(out / "meta.json") if (out / "meta.json").exists() else {}
    write_json(out / "meta.json", {**collect_meta(kind=kind), **meta, "load": load})
    text = "\n".join([*lines, "", describe_load(load)]) + "\n"
    write_text(out / "report.md", text)
    click.echo(text)


def _extra_work_cell(allocator, workload, profile):
    """A cell of a workload whose harness program takes --extra-work and --extra-ops, its
    allocator ready."""
    cell = make_cell(allocator, workload, profile=profile)
    if cell.workload.program != EXTRA_WORK_PROGRAM:
        raise UsageError(
            f"calibrate injects cost with {EXTRA_WORK_PROGRAM} --extra-work/--extra-ops; workload "
            f"'{workload}' runs {cell.workload.program}"
        )
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    return cell


COMMANDS = [calibrate_cmd]
