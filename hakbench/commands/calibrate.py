"""``hakbench calibrate``: the false-positive rate and detection rates of ``ab`` here."""

from __future__ import annotations

from pathlib import Path

import click

from hakbench.commands import resume_alone
from hakbench.core.errors import UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.cells import make_cell
from hakbench.engine.meta import command_line
from hakbench.engine.store import default_run_dir, read_json
from hakbench.experiments import calibrate as cal
from hakbench.experiments import calibrate_layouts as callay
from hakbench.experiments import calibrate_sequential as calseq
from hakbench.experiments import calibration, runlength
from hakbench.experiments.ab_spec import DEFAULT_WARMUP_PAIRS
from hakbench.report.calibration import report_markdown
from hakbench.stats import stats as st

EXTRA_WORK_PROGRAM = "bench_random_mixed"  # the harness program with --extra-work/--extra-ops
# --sequential injects --extra-ops only: these threaded programs take it too (every thread)
EXTRA_OPS_PROGRAMS = (EXTRA_WORK_PROGRAM, "bench_xthread", "bench_larson")


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
    help="finish a stopped or killed calibration in DIR (any kind: --sequential and "
    "--run-length too) with its own options: finished trials and samples are kept",
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
@click.option(
    "--layouts",
    type=click.IntRange(2, 64),
    help="instead: an A/A across K code layouts of the current tree per workload (-w, "
    "repeatable; default mixed, tiny_hot, c6_heavy), -n pairs each "
    f"[default: {callay.DEFAULT_PAIRS}]; records this machine's layout spread (layouts.json)",
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
    layouts,
):
    """Run A/A trials and trials with a known injected cost; write calibration.json.

    Reports, per injected effect, how often ab detected it and how often the noise let it
    be seen at all (Wilson 95 % intervals). The defaults (10 trials x 4 conditions x 100
    pairs) took 5 minutes here at a load of 6. A complete calibration becomes this machine's
    (results/runs/calibration/<fingerprint>/latest.json, not tracked), where `ab` reads it.
    Every sample and finished trial is stored as it ends (samples.jsonl, trials.jsonl); a
    stop signal writes the report of what finished and exits 130/143/129 (SIGINT/SIGTERM/
    SIGHUP), and --resume DIR finishes any kind of calibration, also after a kill.

    With --run-length: A/A pairs at a few iteration counts of each workload, interleaved;
    per count the pair spread and wall seconds per pair, and the count with the shortest
    expected time to a sequential verdict, recorded for this machine (run_length.json).

    With --sequential: each trial is a default (sequential) ab with side B running
    --extra-ops K, stopping at GO/NO-GO/NEUTRAL or at --max-time; per condition the verdict
    counts and the median and 90th-percentile time to a verdict (sequential.json).
    """
    o = dict(locals())
    if resume is not None:
        if out is not None:
            raise UsageError("--resume writes into its own directory; drop --out")
        resume_alone(resume)
        _resume(resume)
        return
    if seed is None:  # a fresh seed per call, recorded in meta.json and the results
        o["seed"] = engine.new_seed()
    if layouts is not None:
        _start_layouts(o)
    elif sequential:
        _start_sequential(o)
    elif conditions:
        raise UsageError("--condition belongs to --sequential")
    elif run_length:
        _start_run_length(o)
    else:
        _start_fixed(o)


def _start_layouts(o: dict) -> None:
    """``--layouts K``: an A/A across K code layouts per workload."""
    if o["extra_work"] or o["perf"] or o["run_length"] or o["fractions"] or o["conditions"]:
        raise UsageError("--layouts measures an A/A: no -k, --perf, --run-length, --sequential")
    params = {
        "workloads": list(o["workloads"] or callay.DEFAULT_WORKLOADS),
        "profile": o["profile"],
        "pairs": o["runs"] or callay.DEFAULT_PAIRS,
        "warmup": 2 if o["warmup"] is None else o["warmup"],
        "seed": o["seed"],
        "layouts": o["layouts"],
    }
    if o["allocator"] != "hakmem":
        raise UsageError(f"--layouts relinks libhakmem; {o['allocator']} has no code layouts")
    from hakbench.experiments.ab_plan import check_spec

    check_spec(callay.spec_of(params))  # names and profiles: one line before anything
    _layouts(o["out"] or default_run_dir("calibrate-layouts"), params, resume=False)


def _start_sequential(o: dict) -> None:
    """``--sequential``: the sequential rule's verdicts on pairs with known truths."""
    if o["extra_work"] or o["perf"] or o["run_length"] or o["fractions"] or o["runs"]:
        raise UsageError("--sequential takes --condition and --max-time, not -k, -n, --perf")
    workloads = o["workloads"]
    if len(workloads) > 1:
        raise UsageError("--sequential measures one workload")
    conditions = o["conditions"] or calseq.DEFAULT_CONDITIONS
    for c in conditions:
        calseq.parse_condition(c)
    cell = _extra_work_cell(
        o["allocator"], workloads[0] if workloads else "mixed", o["profile"], EXTRA_OPS_PROGRAMS
    )
    params = {
        "allocator": o["allocator"],
        "workload": cell.workload.name,
        "profile": o["profile"],
        "warmup": DEFAULT_WARMUP_PAIRS if o["warmup"] is None else o["warmup"],
        "trials": o["trials"],
        "seed": o["seed"],
        "conditions": list(conditions),
        "max_time_s": o["max_time"],
    }
    out = o["out"] or default_run_dir(f"calibrate-sequential-{cell.allocator_label}")
    _sequential(cell, out, params, resume=False)


def _start_run_length(o: dict) -> None:
    """``--run-length``: A/A pairs at fractions of each workload's iterations."""
    if o["extra_work"] or o["perf"]:
        raise UsageError("--run-length measures A/A pairs: no --extra-work or --perf")
    from hakbench.experiments.gate import load_gate

    params = {
        "workloads": list(o["workloads"] or load_gate().workloads),
        "allocator": o["allocator"],
        "profile": o["profile"],
        "pairs": o["runs"] or runlength.DEFAULT_PAIRS,
        "warmup": 2 if o["warmup"] is None else o["warmup"],
        "threshold": o["threshold"],
        "seed": o["seed"],
        "fractions": list(o["fractions"] or runlength.DEFAULT_FRACTIONS),
    }
    first = _run_length_cell(params, params["workloads"][0])
    out = o["out"] or default_run_dir(f"calibrate-run-length-{first.allocator_label}")
    _run_length(out, params, resume=False)


def _start_fixed(o: dict) -> None:
    """The default: fixed-count A/B trials, A/A and with a known injected cost."""
    if o["fractions"]:
        raise UsageError("--fraction belongs to --run-length")
    if len(o["workloads"]) > 1:
        raise UsageError("calibrate measures one workload (several only with --run-length)")
    workload = o["workloads"][0] if o["workloads"] else "mixed"
    ks = tuple(o["extra_work"]) or cal.DEFAULT_EXTRA_WORK
    if any(k <= 0 for k in ks):
        raise UsageError("--extra-work values must be > 0 (K=0 is the A/A condition)")
    cell = _extra_work_cell(o["allocator"], workload, o["profile"])
    params = {
        "allocator": o["allocator"],
        "workload": workload,
        "profile": o["profile"],
        "runs": o["runs"] or cal.DEFAULT_RUNS,
        "trials": o["trials"],
        "warmup": 2 if o["warmup"] is None else o["warmup"],
        "extra_work": list(ks),
        "threshold_pct": o["threshold"],
        "seed": o["seed"],
        "perf": o["perf"],
    }
    out = o["out"] or default_run_dir(f"calibrate-{cell.allocator_label}-{cell.workload.name}")
    _calibrate(cell, out, params, resume=False)


# the kind of each calibration's meta.json -> where its options are kept
KINDS = {
    "calibrate": "calibration",
    "calibrate-sequential": "sequential",
    "calibrate-run-length": "run_length",
    callay.KIND: "layouts",
}


def _resume(out: Path) -> None:
    """``calibrate --resume DIR``: the calibration DIR's meta.json describes (any kind),
    finished."""
    kind = read_json(out / "meta.json").get("kind") if (out / "meta.json").exists() else None
    meta = engine.stored_meta(out, kind if kind in KINDS else "calibrate")
    p = meta.get(KINDS[meta["kind"]])
    if p is None:
        raise UsageError(f"--resume {out}: a calibration made before calibrate could resume")
    if meta["kind"] == "calibrate-run-length":
        _run_length(out, p, resume=True)
        return
    if meta["kind"] == callay.KIND:
        _layouts(out, p, resume=True)
        return
    seq_kind = meta["kind"] == "calibrate-sequential"
    programs = EXTRA_OPS_PROGRAMS if seq_kind else (EXTRA_WORK_PROGRAM,)
    cell = _extra_work_cell(p["allocator"], p["workload"], p["profile"], programs)
    if seq_kind:
        _sequential(cell, out, p, resume=True)
    else:
        _calibrate(cell, out, p, resume=True)


def _interrupted(out: Path, what: str) -> None:
    interrupts.exit_stopped(what, f"hakbench calibrate --resume {out}")


def _calibrate(cell, out: Path, params: dict, *, resume: bool) -> None:
    result = cal.run_calibration(cell, out, params, resume=resume, command=command_line())
    click.echo(report_markdown(result))
    click.echo(f"results: {out}")
    if result["interrupted"]:
        _interrupted(out, f"{result['trials_done']} trials kept")
    click.echo(f"this machine's calibration: {calibration.machine_path(result['fingerprint'])}")


def _run_length_cell(params: dict, workload: str):
    from hakbench.core.profiles import resolve_workload

    w = resolve_workload(workload)
    runlength.iterations(w)  # a workload without an iteration count is bad input
    cell = make_cell(params["allocator"], w, profile=params["profile"])
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    return cell


def _run_length(out: Path, params: dict, *, resume: bool) -> None:
    for w in params["workloads"]:
        _run_length_cell(params, w)

    def make(wl):
        return make_cell(params["allocator"], wl, profile=params["profile"])

    doc = runlength.run_calibration(make, params, out, resume=resume, command=command_line())
    click.echo(doc["report"])
    click.echo(f"results: {out / runlength.FILE}")
    if doc["interrupted"]:
        _interrupted(out, "the finished samples are kept")
    click.echo(f"this machine's run lengths: {runlength.machine_path(doc['fingerprint'])}")


def _layouts(out: Path, params: dict, *, resume: bool) -> None:
    doc = callay.run_calibration(out, params, resume=resume, command=command_line())
    click.echo(doc["report"])
    click.echo(f"results: {out / callay.FILE}")
    if doc["interrupted"]:
        _interrupted(out, "the finished pairs are kept")
    click.echo(f"this machine's layout spread: {callay.machine_path(doc['fingerprint'])}")


def _sequential(cell, out: Path, params: dict, *, resume: bool) -> None:
    doc = calseq.run_calibration(cell, out, params, resume=resume, command=command_line())
    click.echo(doc["report"])
    click.echo(f"results: {out}")
    if doc["interrupted"]:
        _interrupted(out, f"{doc['trials_done']} trials kept")


def _extra_work_cell(allocator, workload, profile, programs=(EXTRA_WORK_PROGRAM,)):
    """A cell of a workload whose harness program (one of ``programs``) takes the injected
    cost, its allocator ready."""
    cell = make_cell(allocator, workload, profile=profile)
    if cell.workload.program not in programs:
        raise UsageError(
            f"calibrate injects cost with {'/'.join(programs)} --extra-work/--extra-ops; "
            f"workload '{workload}' runs {cell.workload.program}"
        )
    alloc = cell.resolved_allocator()
    if not alloc.available:
        raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
    return cell


COMMANDS = [calibrate_cmd]
