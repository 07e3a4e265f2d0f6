"""How often the sequential rule is wrong here, and how long it takes to say anything.

``hakbench calibrate --sequential`` drives ``hakbench.stats.sequential``'s rule with real pairs, the
way a sequential ``ab`` will: interleaved A/B pairs of one workload, a look after every
pair, a stop as soon as the verdict is decisive (GO, NO-GO, NEUTRAL) or when the time or
pair budget runs out (INCONCLUSIVE). Each condition is a known truth, given as ``K@T``: side
B runs the harness's ``--extra-ops K`` (a burst of K dependent multiply-adds every 1,024
ops; side A none, or ``--extra-ops KA`` given as ``KA:K@T``), judged at threshold T %.
Issue #17's three:

- ``0@1``: A/A. Any GO or NO-GO is a false verdict (wanted: <= 5 %).
- ``1:K@1`` with K making B ~1.7 % slower: NO-GO wanted in >= 95 %, NEUTRAL never.
- ``1:K@0.5`` with K making B ~0.7 % slower: NO-GO wanted in >= 90 %.

``--extra-ops`` and not the fractional ``--extra-work``: the latter dithers its fraction over
the ops, and the branch pattern that makes costs small K more than its share (K = 0.125 cost
3.4 %), so no K made a steady 0.7 %; one or two dependent operations on every op were tried
too and cost 0.7 % in one run and nothing in the next (out-of-order execution hides them
when it has room). A burst of hundreds is longer than the reorder window and cannot hide.
With ``--extra-ops`` the harness runs its loop in chunks of 1,024 ops, without it in one
piece, and the chunking costs more than a short burst (K = 200, 250, 300 against K = 0:
2.10 %, 1.98 %, 1.75 %, not in proportion to K). So the slowdowns' side A runs K = 1 and
only the burst differs: beside a busy loop 1:100 cost 0.73 % and 1:230 1.65 % (2026-11-23),
hence the defaults ``1:230@1`` and ``1:100@0.5``; each run measures the effect it really had.

The effect of a K depends on the machine, so each condition's effect is measured from all
its pairs (their paired median) and reported beside its verdicts. Per condition: the
verdict counts, the median and 90th percentile of the seconds and pairs to the stop.

Each real trial is one default ``hakbench ab`` (``hakbench.experiments.ab.run_ab``: the same
warm-ups, run length, engagement and perf runs, the same ``sequential.Stopper`` after every round),
with side B passing ``--extra-ops K``; its results directory is kept under ``trials/``.
``sequential_trial`` drives the same Stopper with a pair source and a clock, pure of
processes, so tests feed it simulated pairs.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from hakbench.core.errors import UsageError
from hakbench.engine.schedule import complete_pairs
from hakbench.experiments.ab_spec import DEFAULT_MAX_PAIRS, DEFAULT_MAX_TIME_S, ABSpec
from hakbench.stats import sequential as seq
from hakbench.stats.stats import GO, NEUTRAL, NO_GO, robust_sd, wilson_ci
from hakbench.stats.stopper import Stopper

# Side A of the slowdowns runs one op per burst, so both sides run the same chunked loop and
# B - A is the burst alone (docs/measuring.md, "The injected cost").
DEFAULT_CONDITIONS = ("0@1", "1:230@1", "1:100@0.5")
VERDICTS = (GO, NO_GO, NEUTRAL, seq.INCONCLUSIVE)


def parse_condition(text: str) -> tuple[int, float, int]:
    """``K@T`` -> (K, threshold %, 0): side B runs K extra ops, side A 0. ``KA:K@T`` -> (K,
    T, KA): side A runs KA, so B - A is the cost of K - KA ops on top of the same loop.
    K, KA: integers >= 0; T > 0."""
    try:
        ks, t = text.split("@")
        ka, k = (int(x) for x in ks.split(":")) if ":" in ks else (0, int(ks))
        t = float(t)
    except ValueError:
        raise UsageError(
            f"condition {text!r}: expected K@THRESHOLD with K a whole number of ops, e.g. 280@1"
        ) from None
    if k < 0 or ka < 0 or t <= 0:
        raise UsageError(f"condition {text!r}: K must be >= 0 and the threshold > 0")
    return k, t, ka


@dataclass
class SeqTrial:
    condition: str
    extra_ops: int
    threshold_pct: float
    index: int
    verdict: str
    n_pairs: int
    seconds: float
    estimate: float  # median log(B/A) of the judged metric at the stop
    low: float
    high: float
    failed: int = 0
    log_ratios: list = field(default_factory=list)
    baseline_extra_ops: int = 0  # K of side A
    call_seconds: float | None = None  # the whole ab call: + engagement and perf runs, report
    iterations: str = ""  # the run length the ab used, and why
    out: str = ""


def sequential_trial(
    pairs: Iterator[tuple[float, float] | None],
    *,
    threshold_pct: float,
    max_time_s: float = DEFAULT_MAX_TIME_S,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    clock: Callable[[], float] = time.monotonic,
) -> dict:
    """Look after every pair of throughputs (A, B) from ``pairs`` (None: a failed pair,
    skipped) until the verdict is decisive or a budget runs out; higher throughput is better.
    The rule is ``ab``'s own (``sequential.Stopper``, one workload, a round per pair).
    Returns verdict, n_pairs, seconds, estimate, low, high, failed and the log ratios."""
    rule = Stopper(
        {"w": True}, threshold_pct, max_time_s=max_time_s, max_pairs=max_pairs, clock=clock
    )
    for pair in pairs:
        rule.add("w", None if pair is None else math.log(pair[1] / pair[0]))
        if not rule.end_round():
            break
    s, look = rule.stops["w"], rule.stops["w"].state.last
    return {
        "verdict": s.verdict,
        "n_pairs": len(s.logs),
        "seconds": round(rule.elapsed(), 3),
        "estimate": look.estimate if look else math.nan,
        "low": look.low if look else -math.inf,
        "high": look.high if look else math.inf,
        "failed": s.failed,
        "log_ratios": s.logs,
    }


def plan(conditions: Sequence[str], trials: int, seed: int) -> list[tuple[str, int]]:
    """(condition, index) in run order: shuffled blocks holding every condition once."""
    rng = random.Random(seed)
    order = []
    for i in range(trials):
        block = list(conditions)
        rng.shuffle(block)
        order += [(c, i) for c in block]
    return order


def run(
    make_spec: Callable[[float, float, int, float], object],
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    *,
    trials: int,
    out: Path,
    seed: int = 1,
    trial_slots,
) -> tuple[list[SeqTrial], bool]:
    """Every trial of every condition, each a default ``ab`` built by ``make_spec(K,
    threshold, seed, KA)`` into ``out``/trials/, each a nested slot of the engine
    (``trial_slots``: ``calibrate.trial_session``): a stored trial is kept, the trial a stop
    or a kill cut is resumed in its own directory (``run_ab(resume=True)``: its pairs kept,
    its sequence replayed). (trials done, whether a stop ended it)."""
    from hakbench.experiments.ab import run_ab

    parsed = {c: parse_condition(c) for c in conditions}
    interrupted = False
    try:
        for n, (c, i) in enumerate(plan(list(conditions), trials, seed), 1):

            def one(c=c, i=i, n=n) -> dict:
                k, threshold, ka = parsed[c]
                where = out / "trials" / f"{n:03d}-{c.replace('@', 'at')}"
                t0 = time.monotonic()
                result = run_ab(
                    make_spec(k, threshold, seed * 100003 + n, ka),
                    where,
                    show_progress=False,
                    resume=(where / "meta.json").exists(),
                )
                if result.interrupted:
                    raise KeyboardInterrupt
                return asdict(trial_of(result, c, i, time.monotonic() - t0))

            trial_slots.take({"phase": "trial", "cell": c, "trial": n}, one, nested=True)
    except KeyboardInterrupt:
        interrupted = True
    done = [SeqTrial(**{f.name: r[f.name] for f in fields(SeqTrial)}) for r in trial_slots.finished]
    return done, interrupted


def run_calibration(cell, out: Path, params: dict, *, resume: bool, command=None) -> dict:
    """``calibrate --sequential`` of ``cell`` into ``out`` through the engine (``--resume``:
    the one ``out`` holds, with its own ``params``, finished): trials.jsonl, the trials'
    ab directories, sequential.json, meta.json and report.md. Returns sequential.json's
    document."""
    from hakbench.engine import engine, interrupts
    from hakbench.engine.load import LoadMonitor
    from hakbench.engine.meta import collect_meta, fingerprint, machine
    from hakbench.engine.progress import Progress
    from hakbench.engine.store import write_json
    from hakbench.experiments import calibrate as cal

    out = Path(out)
    if not resume and (out / cal.TRIALS_FILE).exists():
        raise UsageError(f"{out} already holds {cal.TRIALS_FILE}; choose another --out")
    meta = collect_meta(command, kind="calibrate-sequential", cell=cell.key, sequential=params)
    _, meta, _ = engine.open_run(out, meta, resume=resume, ident=engine.identity([cell], out))
    p = meta["sequential"]
    conditions = tuple(p["conditions"])
    progress = Progress(p["trials"] * len(conditions), f"calibrate --sequential {p['workload']}")

    def step(t: dict) -> None:
        note = f"{t['condition']}: {t['verdict']} in {t['seconds']:.0f} s"
        progress.step(ok=t["failed"] == 0, note=note)

    def make_spec(k, threshold, trial_seed, ka):
        """A default ``ab`` of the cell, side B with --extra-ops K, side A KA."""
        return ABSpec(
            profile=p["profile"],
            allocator=p["allocator"],
            workloads=(p["workload"],),
            threshold_pct=threshold,
            max_time_s=p["max_time_s"],
            warmup_pairs=p["warmup"],
            seed=trial_seed,
            extra_ops=k,
            baseline_extra_ops=ka,
        )

    with LoadMonitor() as load:
        done, interrupted = run(
            make_spec,
            conditions,
            trials=p["trials"],
            out=out,
            seed=p["seed"],
            trial_slots=cal.trial_session(out, step),
        )
    progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        rows = summarize(done)
        doc = {
            "workload": p["workload"],
            "allocator": cell.allocator_label,
            "profile": cell.profile,
            "max_time_s": p["max_time_s"],
            "max_pairs": DEFAULT_MAX_PAIRS,
            "iterations": sorted({t.iterations for t in done}),
            "trials": p["trials"],
            "trials_done": len(done),
            "seed": p["seed"],
            "interrupted": interrupted,
            "machine": machine(),
            "fingerprint": fingerprint(),
            "load": load.result,
            "conditions": rows,
        }
        write_json(out / "sequential.json", doc)
        lines = report_lines(rows, max_time_s=p["max_time_s"], max_pairs=DEFAULT_MAX_PAIRS)
        lines += ["", "Run length: " + "; ".join(doc["iterations"])]
        if interrupted:
            lines += [
                "",
                f"**Interrupted** by {interrupts.describe()} after {len(done)} of "
                f"{p['trials'] * len(conditions)} trials: finish with "
                f"`hakbench calibrate --resume {out}`",
            ]
        doc["report"] = cal.write_report(out, meta, lines, load.result)
    return doc


def trial_of(result, condition: str, index: int, call_seconds: float) -> SeqTrial:
    """A finished ``ab`` as a trial: its verdict, pairs, seconds and log ratios."""
    from hakbench.engine.store import read_jsonl

    k, threshold, ka = parse_condition(condition)
    (c,) = result.primary()
    w = c.workload
    pairs = complete_pairs(read_jsonl(result.out / "samples.jsonl"), w)
    m = c.metric  # the judged metric (the default: cpu_throughput)
    logs = [math.log(b["metrics"][m] / a["metrics"][m]) for a, b in pairs]
    return SeqTrial(
        condition,
        k,
        threshold,
        index,
        c.verdict,
        c.n_pairs,
        round(result.pairs_seconds, 3),
        math.log(c.ratio),
        math.log(c.ci_low) if c.ci_low > 0 else -math.inf,  # (an interval still unbounded)
        math.log(c.ci_high) if math.isfinite(c.ci_high) else math.inf,
        sum(s.get("phase") == "measure" for s in result.failed),
        logs,
        ka,
        round(call_seconds, 3),
        result.iterations.get(w, ""),
        str(result.out),
    )


def _quantile(xs: Sequence[float], q: float) -> float | None:
    import numpy as np

    return round(float(np.quantile(xs, q)), 3) if len(xs) else None


def summarize(trials: Sequence[SeqTrial]) -> list[dict]:
    """Per condition: verdict counts and rates (Wilson 95 %), the measured effect, the pair
    spread (the median over trials of each trial's robust SD of its paired log ratios: how
    noisy the machine's pairs were, which decides how many a verdict takes), and the median
    and 90th percentile of seconds and pairs to the stop."""
    import numpy as np

    rows = []
    for c in dict.fromkeys(t.condition for t in trials):
        ts = [t for t in trials if t.condition == c]
        n = len(ts)
        counts = Counter(t.verdict for t in ts)
        logs = [x for t in ts for x in t.log_ratios]
        k = ts[0].extra_ops
        aa = k == ts[0].baseline_extra_ops
        # A/A: GO or NO-GO is false; K > 0: NO-GO is the right answer
        hits = counts[GO] + counts[NO_GO] if aa else counts[NO_GO]
        secs = [t.seconds for t in ts]
        spreads = [robust_sd(t.log_ratios) for t in ts if len(t.log_ratios) >= 2]
        rows.append(
            {
                "condition": c,
                "extra_ops": k,
                "threshold_pct": ts[0].threshold_pct,
                "trials": n,
                "effect_pct": round(100 * (1 / math.exp(float(np.median(logs))) - 1), 3)
                if logs
                else None,
                "pair_spread": round(float(np.median(spreads)), 4) if spreads else None,
                "verdicts": {v: counts[v] for v in VERDICTS},
                "rate_name": "false GO/NO-GO" if aa else "NO-GO",
                "rate": hits / n,
                "rate_ci95": [round(x, 3) for x in wilson_ci(hits, n)],
                "seconds_median": _quantile(secs, 0.5),
                "seconds_p90": _quantile(secs, 0.9),
                "call_seconds_median": _quantile([t.call_seconds or 0 for t in ts], 0.5),
                "call_seconds_p90": _quantile([t.call_seconds or 0 for t in ts], 0.9),
                "pairs_median": _quantile([t.n_pairs for t in ts], 0.5),
                "pairs_p90": _quantile([t.n_pairs for t in ts], 0.9),
                "failed_pairs": sum(t.failed for t in ts),
            }
        )
    return rows


def report_lines(rows: Sequence[dict], *, max_time_s: float, max_pairs: int) -> list[str]:
    lines = [
        f"# Sequential verdicts with known truths (budget {max_time_s:g} s or {max_pairs} "
        "pairs per trial)",
        "",
        "| condition (K@threshold) | effect here | trials | GO | NO-GO | NEUTRAL | INCONCLUSIVE "
        "| rate (95 % CI) | s to verdict: median / p90 | whole ab call, s: median / p90 "
        "| pairs: median / p90 | pair spread |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|",
    ]
    for r in rows:
        v = r["verdicts"]
        effect = "-" if r["effect_pct"] is None else f"{r['effect_pct']:.2f} %"
        lo, hi = r["rate_ci95"]
        spread = "-" if r.get("pair_spread") is None else f"{100 * r['pair_spread']:.1f} %"
        lines.append(
            f"| {r['condition']} | {effect} | {r['trials']} | {v[GO]} | {v[NO_GO]} "
            f"| {v[NEUTRAL]} | {v[seq.INCONCLUSIVE]} "
            f"| {r['rate_name']} {100 * r['rate']:.0f} % ({100 * lo:.0f}-{100 * hi:.0f}) "
            f"| {r['seconds_median']} / {r['seconds_p90']} "
            f"| {r.get('call_seconds_median')} / {r.get('call_seconds_p90')} "
            f"| {r['pairs_median']:g} / {r['pairs_p90']:g} | {spread} |"
        )
    lines += [
        "",
        "s to verdict: from the first (warm-up) pair to the stop; the whole ab call adds its "
        "engagement and perf runs and writing its report. Pair spread: the median over trials "
        "of the robust SD (1.4826 x MAD) of a trial's paired log ratios; the pairs a verdict "
        "takes grow with its square.",
    ]
    return lines
