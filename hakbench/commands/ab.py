"""``hakbench ab``: interleaved paired A/B of two cells per workload, judged and reported."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hakbench.commands import resume_alone
from hakbench.core.errors import (
    EXIT_GATE,
    EXIT_INCONCLUSIVE,
    MeasurementError,
    UsageError,
)
from hakbench.core.profiles import parse_sets
from hakbench.engine import interrupts
from hakbench.engine.store import default_run_dir
from hakbench.experiments import ab, ab_plan, ab_spec
from hakbench.report.markdown import VERDICT_HEADER, fmt_ratio, rss_verdict, verdict_rows
from hakbench.stats.stats import FAILED, INCONCLUSIVE, NO_GO

RSS = ("maxrss_kb", "rss_end_kb")  # the memory guardrails beside each verdict


def _print_table(header, rows) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for r in (header, *rows):
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())


@click.command("ab")
@click.option(
    "--profile", "-p", default=ab_spec.DEFAULT_PROFILE, show_default=True, help="side B's profile"
)
@click.option("--baseline", help="side A's profile [default: --profile without the --set]")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="applied to B")
@click.option("--allocator", "-a", default="hakmem", show_default=True, help="B's allocator")
@click.option("--baseline-allocator", help="A's allocator [default: --allocator]")
@click.option("--variant", default="fast", show_default=True, help="B's hakmem build variant")
@click.option("--baseline-variant", help="A's hakmem build variant [default: --variant]")
@click.option(
    "--workload",
    "-w",
    "workloads",
    multiple=True,
    help=f"repeatable [default: {', '.join(ab_spec.DEFAULT_WORKLOADS)}]",
)
@click.option(
    "--runs",
    "-n",
    type=click.IntRange(1, 100000),
    help="a fixed count of measured pairs per workload (reproducible) [default: sequential: "
    "pairs until each workload's verdict is decisive, or --max-time]",
)
@click.option(
    "--max-time",
    type=click.FloatRange(min=0, min_open=True),
    help="sequential: seconds for the call's pairs (warm-ups included); workloads still "
    f"undecided then end INCONCLUSIVE [default: {ab_spec.DEFAULT_MAX_TIME_S:g}, or the "
    "sum of the workloads' own budgets when larger (profiles/suites/)]",
)
@click.option(
    "--iters",
    type=click.IntRange(1),
    help="iterations of every harness workload [default: this machine's run-length choice "
    "(calibrate --run-length), else the workload's own]",
)
@click.option(
    "--warmup",
    type=click.IntRange(0, 1000),
    help=f"discarded warm-up pairs [default: {ab_spec.DEFAULT_WARMUP_PAIRS}, or what the "
    "workloads state when all do (profiles/suites/)]",
)
@click.option(
    "--threshold",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 100),
    help="smallest change in % that counts",
)
@click.option(
    "--metric",
    type=click.Choice(["cpu", "throughput", "task-clock", "instructions"]),
    default="cpu",
    show_default=True,
    help="judged metric: cpu (ops per CPU second of the harness's timed loop: without the "
    "time spent waiting for a CPU; a workload of several threads on its threads' active time, "
    "waits for a CPU left out, waits for each other kept); "
    "throughput (wall clock of the timed loop); task-clock (perf's CPU time of the whole "
    "process); instructions (callgrind Ir/op: one count per side, the lowest of 5 where "
    "threads interleave)",
)
@click.option(
    "--launch",
    default="",
    metavar="KEY[=N],...",
    help="how harness processes start: cpu=N (pin both sides to CPU N), nice=N, fifo=PRIO "
    "(SCHED_FIFO), no-aslr, chunks=K (time the loop in K chunks), spin-ms=N (spin before it)",
)
@click.option(
    "--seed", type=int, help="pair order seed [default: a fresh one, recorded: --seed replays it]"
)
@click.option("--rev", help="build B at this git revision")
@click.option("--baseline-rev", help="build A at this git revision")
@click.option("--timeout", default=120.0, show_default=True, help="seconds per process")
@click.option(
    "--layouts",
    type=click.IntRange(1, 64),
    help="code layouts a side: each libhakmem side relinked in K layouts of its own code, "
    "drawn at random per pair; the verdict includes the layout spread (1: the build as is) "
    f"[default: {ab_spec.DEFAULT_BUILD_LAYOUTS} when A and B are different libhakmem "
    "binaries (revisions, variants), else 1]",
)
@click.option(
    "--perf",
    "perf_mode",
    type=click.Choice(ab_spec.PERF_MODES),
    help="observe: pairs run without perf, counters from --perf-runs extra runs per side; "
    "each: every process under perf stat; off: no perf "
    f"[default: {ab_spec.DEFAULT_PERF_MODE}; each for --metric task-clock]",
)
@click.option(
    "--perf-runs",
    default=ab_spec.DEFAULT_PERF_RUNS,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="perf-wrapped runs per side for --perf observe",
)
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@click.option(
    "--resume",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="finish an interrupted (or killed) ab in DIR with its own options: its samples are "
    "kept and not run again",
)
@click.option(
    "--continue",
    "continue_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="extend the undecided workloads of a sequential ab in DIR by --max-time more "
    "seconds, under the same confidence sequence",
)
@click.option(
    "--fail-on",
    type=click.Choice(["no-go"]),
    help="exit 1 on a NO-GO or a FAILED verdict; else exit 4 on an INCONCLUSIVE one",
)
def ab_cmd(
    profile,
    baseline,
    sets,
    allocator,
    baseline_allocator,
    variant,
    baseline_variant,
    workloads,
    runs,
    max_time,
    iters,
    warmup,
    threshold,
    metric,
    launch,
    seed,
    rev,
    baseline_rev,
    timeout,
    layouts,
    perf_mode,
    perf_runs,
    out,
    resume,
    continue_dir,
    fail_on,
):
    """Is B better than A? Interleaved randomised pairs, sampled until decided (or --runs N),
    Holm across workloads: GO / NO-GO / NEUTRAL (equivalent) / INCONCLUSIVE."""
    if resume or continue_dir:
        _resume(resume, continue_dir, out, max_time, fail_on)
        return
    if runs is not None and max_time is not None:
        raise UsageError("--max-time is the sequential default's budget; --runs N is a fixed count")
    spec = _spec(dict(locals()))
    ab_plan.check_layouts(spec)  # a reference allocator has no layouts: before any build
    if not (rev or baseline_rev):  # bad names fail in one line, before anything is printed
        ab_plan.check_spec(spec)  # (with revisions, each side is checked against its own build)
    else:
        ab_plan.check_set_types(spec)  # and a bad value before any revision is built
    out = out or default_run_dir(f"ab-{profile}")
    click.echo(spec.describe(), err=True)
    if spec.sequential:
        click.echo(
            f"sequential: pairs until decided, at most {spec.max_time_s:g} s (--runs N: fixed)",
            err=True,
        )
    noise = ab_plan.noise_warning_for(spec)
    if noise:
        click.echo(f"warning: {noise}", err=True)
    _measure_and_print(spec, out, fail_on)


def _resume(resume, continue_dir, out, max_time, fail_on) -> None:
    """``--resume DIR`` / ``--continue DIR``: the stored run's options (a new budget for
    --continue), then measure into it."""
    if resume and continue_dir:
        raise UsageError("--resume and --continue: give one")
    if out:
        raise UsageError("--resume/--continue write into their own directory; drop --out")
    # the stored run's options hold; --continue takes a new budget, either an exit rule
    resume_alone(resume, allowed=("fail_on",))
    resume_alone(continue_dir, allowed=("max_time", "fail_on"), flag="--continue")
    where = resume or continue_dir
    spec = ab_plan.resume_spec(
        where,
        max_time_s=None
        if resume
        else (ab_spec.DEFAULT_MAX_TIME_S if max_time is None else max_time),
    )
    _measure_and_print(spec, where, fail_on, resume=bool(resume), continued=bool(continue_dir))


def _spec(o: dict) -> ab_spec.ABSpec:
    """The command line's options -> the spec (metric aliases and perf's default filled in)."""
    metric = {"task-clock": "task_clock_ms", "cpu": "cpu_throughput"}.get(o["metric"], o["metric"])
    perf_mode = o["perf_mode"]
    if perf_mode is None:  # task-clock is a perf counter: it needs perf on every process
        perf_mode = "each" if metric == "task_clock_ms" else ab_spec.DEFAULT_PERF_MODE
    max_time = o["max_time"]
    return ab_spec.ABSpec(
        profile=o["profile"],
        baseline=o["baseline"],
        sets=parse_sets(o["sets"]),
        allocator=o["allocator"],
        baseline_allocator=o["baseline_allocator"],
        variant=o["variant"],
        baseline_variant=o["baseline_variant"],
        workloads=tuple(o["workloads"]) or ab_spec.DEFAULT_WORKLOADS,
        pairs=o["runs"],
        max_time_s=ab_plan.default_max_time(o["workloads"]) if max_time is None else max_time,
        iters=o["iters"],
        warmup_pairs=ab_plan.default_warmup(o["workloads"]) if o["warmup"] is None else o["warmup"],
        threshold_pct=o["threshold"],
        seed=o["seed"],
        metric=metric,
        rev=o["rev"],
        baseline_rev=o["baseline_rev"],
        timeout=o["timeout"],
        perf=perf_mode,
        perf_runs=o["perf_runs"],
        layouts=o["layouts"],
        launch=o["launch"],
    )


def _measure_and_print(spec, out, fail_on, *, resume=False, continued=False) -> None:
    """Run the A/B (fresh, resumed or continued), print its verdicts, exit by the rule."""
    result = ab.run_ab(spec, out, resume=resume, continued=continued)
    if spec.is_aa:
        click.echo("A/A (no --baseline/--set): a noise check, not an experiment")
    judged = {c.workload: c.metric for c in result.primary()}
    _print_table(
        [VERDICT_HEADER[0], "judged", *VERDICT_HEADER[1:-1], "peak RSS B/A", "end RSS B/A"],
        [
            [r[0], judged[r[0]], *r[1:-1], *(rss_verdict(result, r[0], m) for m in RSS)]
            for r in verdict_rows(result)
        ],
    )
    for g in result.comparisons:
        if result.role(g) == "guardrail" and g.verdict not in ("NEUTRAL", "INCONCLUSIVE", ""):
            ratio = fmt_ratio(g, deciding=True)
            click.echo(f"guardrail {g.workload} {g.metric}: {g.verdict} (B/A {ratio})")
    for side, lines in sorted(result.allocator_warnings.items()):
        for line in lines:
            click.echo(f"allocator warning (side {side}): {line}")
    for lib in result.changed_libraries:
        click.echo(f"warning: {lib} changed while the A/B ran (rebuilt?)")
    for w, e in result.engagement.items():
        if e["status"] != "n/a":
            click.echo(f"{w}: {e['status'].upper()}: {e['detail']}")
    for w, note in result.failures.items():
        if note:
            click.echo(f"{w}: {result.verdicts().get(w)}: {note}")
    if result.failed:
        click.echo(f"{len(result.failed)} sample(s) failed; see report.md")
    if result.noise_warning:  # the full text was printed before the run, and is in report.md
        click.echo("warning: the threshold is below this machine's calibrated noise floor")
    if result.perf_note:
        click.echo(f"note: {result.perf_note}")
    if result.layout_note:
        click.echo(f"note: {result.layout_note}")
    for w, lay in result.layouts.items():
        sd = lay.report.spread.sd
        click.echo(
            f"{w}: {lay.k_a}/{lay.k_b} code layouts: layout spread "
            + ("-" if sd != sd else f"{100 * sd:.2f} %")
            + " (in the interval that decides)"
            + (f", {lay.report.label}" if lay.report.label else "")
            + (", more layouts, not more pairs, would decide" if lay.more_layouts else "")
        )
    if result.unavailable:
        click.echo("unavailable here: " + ", ".join(result.unavailable))
    for w, why in result.iterations.items():
        click.echo(f"{w}: run length {why}")
    click.echo(f"seed {result.spec.seed} (--seed {result.spec.seed} replays the pair order)")
    click.echo(str(result.out))
    if result.interrupted:
        interrupts.exit_stopped(
            f"finished samples are in {result.out}", f"hakbench ab --resume {result.out}"
        )
    if all(c.n_pairs == 0 for c in result.primary()):
        raise MeasurementError(f"no complete pair for any workload; see {result.out}/report.md")
    verdicts = {c.verdict for c in result.primary()}
    if fail_on == "no-go" and verdicts & {NO_GO, FAILED}:
        sys.exit(EXIT_GATE)
    if fail_on == "no-go" and INCONCLUSIVE in verdicts:
        sys.exit(EXIT_INCONCLUSIVE)


COMMANDS = [ab_cmd]
