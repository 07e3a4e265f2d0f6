"""How small a change can ``ab`` see on this machine, and how often does it cry wolf?

Trials of the ``ab`` design (interleaved pairs, random order within a pair, warm-ups
discarded, verdict by ``hakbench.stats.stats.verdict`` on the per-pair ratio of the metric a
default ``ab`` judges the workload on, ``ab_spec.judged_metric``: CPU time of the timed
loop, wall-clock throughput for a workload of several threads) where the truth is known: A/A
(no change: any GO/NO-GO is a false positive) and A against the same cell with a known
injected cost (the harness's ``--extra-work K``, a real dependent multiply chain per op).
The effect of each K is measured here, from every pair of its trials, since it depends on
the harness and the machine.

Two rates per injected effect, each with its Wilson 95 % interval
(``hakbench.tables.calibration``):

- **detection**: the share of trials judged NO-GO by the whole rule (threshold included);
- **resolution**: the share where the noise let the rule see the effect at all (the CI and
  Wilcoxon legs, threshold 0). The smallest effect resolved in >= 80 % of trials is the
  machine's noise floor at that pair count.

Through the engine: every sample of a trial is a slot of the run directory's
``samples.jsonl`` (tagged ``trial``) and every finished trial a slot of ``trials.jsonl``
(``Session.take(..., nested=True)``), so a stopped or killed calibration resumes with its
finished trials and the cut trial's samples kept. What ``ab`` makes of a calibration is
``hakbench.experiments.calibration``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hakbench.core.errors import UsageError
from hakbench.engine import engine, interrupts
from hakbench.engine.meta import collect_meta, fingerprint, machine
from hakbench.engine.progress import Progress
from hakbench.engine.runner import run_sample
from hakbench.engine.schedule import ab_schedule, complete_pairs
from hakbench.engine.store import RunStore, write_json, write_text
from hakbench.experiments.ab_spec import DEFAULT_METRIC, judged_metric
from hakbench.experiments.calibration import machine_path
from hakbench.stats import stats as st
from hakbench.tables.calibration import summarize

# ab's default pair count (hakbench.experiments.ab_spec.DEFAULT_PAIRS; a test keeps them equal):
# calibrating at the pair count ab runs by default lets ab read its figures without scaling.
DEFAULT_RUNS = 100
# K of --extra-work around ab's 1 % threshold. On `mixed` the lab machine's reference
# calibration measured K=0.5 at 1.84 % and K=1.25 at 4.1 %; the effect of a K is not linear
# (below 0.25 the dithered loop's branch mispredicts), so each calibration measures it.
DEFAULT_EXTRA_WORK = (0.25, 0.5, 1.25)
AA = "A/A"
TRIALS_FILE = "trials.jsonl"  # the finished trials, one slot each (the engine's samples file)


@dataclass
class Trial:
    condition: str  # "A/A" or "K=<k>"
    extra_work: float  # K of side B (side A is always 0)
    index: int
    n_pairs: int
    ratio: float  # median B/A throughput
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str  # the ab rule with the calibration's threshold
    resolved: bool = False  # the ab rule with threshold 0 found a slowdown (A/A: any change)
    log_ratios: list = field(default_factory=list)
    failed: int = 0


def metric_of(cell) -> str:
    """The metric a default ``ab`` judges ``cell``'s workload on, which a calibration
    measures the noise of (so ``ab``'s noise warning compares like with like)."""
    return judged_metric(DEFAULT_METRIC, cell.workload)


def condition_name(k: float) -> str:
    return AA if k == 0 else f"K={k:g}"


def extra_work_arg(k: float) -> tuple[str, str]:
    """Fixed width (``0.0000``), so argv and stack layout are the same size on both sides."""
    return ("--extra-work", f"{k:.4f}")


def extra_ops_arg(k: int) -> tuple[str, str]:
    """``--extra-ops``, fixed width (``0002``) like ``extra_work_arg``."""
    return ("--extra-ops", f"{k:04d}")


def run_trial(
    cell,
    k: float,
    *,
    index: int,
    runs: int,
    warmup: int,
    seed: int,
    threshold_pct: float,
    perf: bool = False,
    timeout: float = 120.0,
    session: engine.Session,
    trial: int | None = None,
    metric: str | None = None,
) -> Trial:
    """One A/B exactly as ``ab`` schedules and judges it: A = K 0, B = K ``k``. Each sample
    goes through ``session`` (``hakbench.engine.engine.Session``: stored as it finishes, tagged
    ``trial``, reused when a resumed calibration holds it). A side that failed where the
    other did not (``stats.failures``) makes the trial FAILED, as it makes an ab's verdict.
    ``metric``: the one judged [default: ``metric_of(cell)``, a default ab's]."""
    metric = metric or metric_of(cell)
    base = tuple(cell.workload.args)
    args = {"A": [*base, *extra_work_arg(0.0)], "B": [*base, *extra_work_arg(k)]}

    def run(cell, slot) -> dict:
        return run_sample(cell, phase=slot.phase, perf=perf, timeout=timeout, args=args[slot.side])

    slots = ab_schedule([cell.workload.name], runs, warmup, seed)
    samples = engine.take_slots(session, slots, lambda slot: cell, run, trial=trial)
    failed = sum(s["status"] != "ok" for s in samples)
    pairs = complete_pairs(samples, cell.workload.name)
    pairs = [(x, y) for x, y in pairs if metric in x["metrics"] and metric in y["metrics"]]
    a = [float(x["metrics"][metric]) for x, _ in pairs]
    b = [float(y["metrics"][metric]) for _, y in pairs]
    t = judge_trial(condition_name(k), k, index, a, b, threshold_pct, failed, metric=metric)
    measured = [s for s in samples if s["phase"] == "measure"]
    if st.failures(*([s for s in measured if s["side"] == x] for x in "AB")).verdict:
        t.verdict, t.resolved = st.FAILED, False  # survivors never decide
    return t


def judge_trial(
    condition: str,
    k: float,
    index: int,
    a: Sequence[float],
    b: Sequence[float],
    threshold_pct: float,
    failed: int = 0,
    *,
    metric: str = "throughput",
) -> Trial:
    """The ab verdict of one trial's pairs of ``metric`` (one workload, so Holm changes
    nothing; every metric a calibration judges is higher-is-better)."""
    import numpy as np  # heavy imports live where they are used: `hakbench --help` stays fast

    c = st.compare_paired("cal", metric, a, b, higher_is_better=True)
    v = st.verdict(c.ratio, c.ci_low, c.ci_high, c.p_value, threshold_pct=threshold_pct)
    v0 = st.verdict(c.ratio, c.ci_low, c.ci_high, c.p_value, threshold_pct=0.0)
    resolved = v0 != st.NEUTRAL and v0 != st.NO_DATA if k == 0 else v0 == st.NO_GO
    logs = [float(x) for x in np.log(st.paired_ratios(a, b))]
    return Trial(
        condition,
        k,
        index,
        c.n_pairs,
        c.ratio,
        c.ci_low,
        c.ci_high,
        c.p_value,
        v,
        resolved,
        logs,
        failed,
    )


def plan(extra_work: Sequence[float], trials: int, seed: int) -> list[tuple[float, int]]:
    """(K, index) in run order: blocks holding every condition once, shuffled within each
    block, so a noisy stretch of the machine hits every condition alike."""
    rng = random.Random(seed)
    ks = [0.0, *extra_work]
    order = []
    for i in range(trials):
        block = list(ks)
        rng.shuffle(block)
        order.extend((k, i) for k in block)
    return order


def trial_session(out: Path, on_trial: Callable[[dict], None] | None = None) -> engine.Session:
    """The finished trials of a calibration in ``out``/trials.jsonl, one engine slot each
    (``{"phase": "trial", "cell": condition, "trial": n}``): stored the moment a trial ends,
    kept by ``--resume``. ``on_trial(record)``: the progress of each, kept ones included."""
    store = RunStore(out, name=TRIALS_FILE)
    return engine.Session(store, stored=store.samples(), on_sample=on_trial)


def trial_of(record: dict) -> Trial:
    """A stored trial record (the engine's tags and seq aside) as a Trial."""
    return Trial(**{f.name: record[f.name] for f in dataclasses.fields(Trial)})


def calibrate(
    cell,
    *,
    runs: int,
    trials: int,
    warmup: int,
    extra_work: Sequence[float] = DEFAULT_EXTRA_WORK,
    threshold_pct: float = st.DEFAULT_THRESHOLD_PCT,
    seed: int = 1,
    perf: bool = False,
    session: engine.Session,
    trial_slots: engine.Session,
) -> tuple[dict, list[Trial]]:
    """Run every trial and summarise. ``session``: the run directory's samples, ``trial_slots``
    its trials (``trial_session``): each trial is a nested slot of the engine whose samples
    are slots of ``session``; a stored one is not run again.

    A stop signal ends the calibration after the finished trials: the summary covers them
    and says ``"interrupted": true``.
    """
    order = plan(extra_work, trials, seed)
    load_before = os.getloadavg()[0]
    interrupted = False
    try:
        for n, (k, i) in enumerate(order, 1):

            def run(k=k, i=i, n=n) -> dict:
                t = run_trial(
                    cell,
                    k,
                    index=i,
                    runs=runs,
                    warmup=warmup,
                    seed=seed * 100003 + n,
                    threshold_pct=threshold_pct,
                    perf=perf,
                    session=session,
                    trial=n,
                )
                return asdict(t)

            tags = {"phase": "trial", "cell": condition_name(k), "trial": n}
            trial_slots.take(tags, run, nested=True)
    except KeyboardInterrupt:
        interrupted = True
    with interrupts.finishing():  # the summary of what finished: a stop cuts nothing here
        done = [trial_of(t) for t in trial_slots.finished]
        result = summarize(done, runs, threshold_pct)
        result.update(
            {
                "workload": cell.workload.name,
                "metric": metric_of(cell),
                "argv_base": list(cell.workload.args),
                "allocator": cell.allocator_label,
                "profile": cell.profile,
                "trials": trials,
                "trials_done": len(done),
                "trials_planned": len(order),
                "interrupted": interrupted,
                "warmup_pairs": warmup,
                "perf_wrapped": perf,
                "seed": seed,
                "machine": machine(),
                "fingerprint": fingerprint(),
                # the noise floor is the machine's *and* its neighbours': say how busy it was
                "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            }
        )
    return result, done


def run_calibration(cell, out: Path, params: dict, *, resume: bool, command=None) -> dict:
    """A whole calibration of ``cell`` into ``out`` through the engine (``--resume``: the
    one ``out`` holds, with its own ``params``, finished), its files written; the summary."""
    out = Path(out)
    if not resume and (out / TRIALS_FILE).exists():
        raise UsageError(f"{out} already holds {TRIALS_FILE}; choose another --out")
    meta = collect_meta(
        command,
        kind="calibrate",
        variant=cell.variant,
        cell=cell.key,
        env=cell.env,
        calibration=params,
    )
    store, meta, stored = engine.open_run(
        out, meta, resume=resume, ident=engine.identity([cell], out)
    )
    p = meta["calibration"]
    label = f"calibrate {cell.label} {cell.workload.name}"
    progress = Progress(p["trials"] * (1 + len(p["extra_work"])), label)

    def step(t: dict) -> None:
        progress.step(ok=t["failed"] == 0, note=f"{t['condition']}: {t['verdict']}")

    try:
        result, _ = calibrate(
            cell,
            runs=p["runs"],
            trials=p["trials"],
            warmup=p["warmup"],
            extra_work=tuple(p["extra_work"]),
            threshold_pct=p["threshold_pct"],
            seed=p["seed"],
            perf=p["perf"],
            session=engine.Session(store, stored=stored),
            trial_slots=trial_session(out, step),
        )
    finally:
        progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        write_calibration(result, out, meta)
    return result


def write_calibration(result: dict, out: Path, meta: dict) -> Path:
    """calibration.json, report.md and meta.json in ``out``; a complete calibration also
    becomes this machine's latest (never a tracked file)."""
    from hakbench.report.calibration import report_markdown

    path = write_json(out / "calibration.json", result)
    write_json(out / "meta.json", meta)
    write_text(out / "report.md", report_markdown(result))
    if not result.get("interrupted"):
        write_json(machine_path(result.get("fingerprint")), result)
    return path


def write_report(out: Path, meta: dict, lines: list[str], load: dict | None) -> str:
    """meta.json (with the load the run measured under) and report.md (the lines and that
    load); the report's text."""
    from hakbench.engine.load import describe as describe_load

    write_json(out / "meta.json", {**meta, "load": load})
    text = "\n".join([*lines, "", describe_load(load)]) + "\n"
    write_text(out / "report.md", text)
    return text
