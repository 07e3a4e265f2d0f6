"""Run length chosen for speed to a decision: how many iterations one process of a workload
should run so that an A/B decides soonest.

Every pair costs two process start-ups plus two runs. Short runs are cheap but noisy (the
start-up and the machine's jitter are a larger share of each), long runs are quiet but slow.
The expected time to a decision is the pairs the sequential rule needs times the seconds a
pair costs, and the pairs needed grow with the square of the pair spread over the threshold.
So ``hakbench calibrate --run-length`` measures, for a few iteration counts of each
workload, the spread of A/A paired log ratios of the metric ``ab`` judges it on
(``robust_sd``: the bulk, not the pairs that straddle a speed-mode switch) and the wall
seconds per pair, and picks the count with the shortest expected time.

Pairs needed. ``hakbench.stats.sequential``'s confidence sequence for the median lies between
the order statistics at ranks n/2 -+ b_n. For pairs of spread s around their median, the
order statistic at quantile 1/2 + b_n/n sits about (b_n / n) / f(0) from the median, where
f(0) = 1 / (s sqrt(2 pi)) is the density there (taken as normal: the robust SD describes
the bulk, and the bulk decides the middle order statistics). The count wanted is the
smallest n with that half-width at most half the threshold (in log units): then an A/A
ends NEUTRAL and a change of 1.5 x threshold NO-GO with room to spare.

The figures belong to a machine: they are kept next to its calibration
(``results/runs/calibration/<fingerprint>/run_length.json``, git-ignored), with the lab
machine's committed as ``results/calibration/run_length.json``; ``chosen_iterations``
reads this machine's, else the reference.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hakbench.core.errors import UsageError
from hakbench.core.profiles import Workload, resolve_workload, scaled_workload
from hakbench.engine import engine
from hakbench.engine.meta import fingerprint, machine
from hakbench.engine.process import Launch
from hakbench.engine.runner import run_sample
from hakbench.engine.schedule import ab_schedule, complete_pairs
from hakbench.engine.store import read_json
from hakbench.experiments import calibration
from hakbench.experiments.ab_spec import DEFAULT_METRIC, judged_metric
from hakbench.stats import sequential as seq
from hakbench.stats import stats as st
from hakbench.stats.stats import robust_sd

FILE = "run_length.json"
DEFAULT_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
DEFAULT_PAIRS = 30  # per count: enough for a robust SD to within ~20 %
MAX_PAIRS = 10**7
_SQRT_2PI = math.sqrt(2 * math.pi)


def log_delta(threshold_pct: float) -> float:
    return math.log1p(threshold_pct / 100)


def half_width(spread: float, n: int, alpha: float = st.ALPHA) -> float:
    """Expected half-width (log units) of the one-sided sequence whose near bound decides a
    GO/NO-GO, after ``n`` pairs of this spread: (b_n / n) / f(0) with f the density of the
    pairs at their median."""
    return spread * _SQRT_2PI * seq.one_sided_boundary(n, alpha) / n


def pairs_needed(spread: float, threshold_pct: float, alpha: float = st.ALPHA) -> int | None:
    """The fewest pairs whose confidence sequence is expected to be at most half the
    threshold wide on each side; None when the spread is unknown or no n up to MAX_PAIRS
    would do."""
    if not (spread >= 0 and math.isfinite(spread)):
        return None
    target = log_delta(threshold_pct) / 2
    if spread == 0:
        return 1
    lo, hi = 1, 2
    while half_width(spread, hi, alpha) > target:  # b_n / n falls for all n past ~1
        lo, hi = hi, hi * 2
        if hi > MAX_PAIRS:
            return None
    while lo < hi:  # smallest n in (lo, hi] that meets the target
        mid = (lo + hi) // 2
        if half_width(spread, mid, alpha) <= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


def expected_seconds(spread: float, seconds_per_pair: float, threshold_pct: float) -> float | None:
    n = pairs_needed(spread, threshold_pct)
    return None if n is None else n * seconds_per_pair


def choose(points: Sequence[dict], threshold_pct: float) -> dict | None:
    """The point (``iters``, ``spread``, ``seconds_per_pair``) with the shortest expected
    time to a decision, each point given its ``pairs_needed`` and ``expected_s``; on a tie
    the longer run (fewer processes, less start-up in each figure). None if none is usable."""
    best = None
    for p in points:
        n = pairs_needed(p["spread"], threshold_pct)
        p["pairs_needed"] = n
        p["expected_s"] = None if n is None else round(n * p["seconds_per_pair"], 3)
        if p["expected_s"] is None or p.get("failed"):
            continue
        key = (p["expected_s"], -p["iters"])
        if best is None or key < (best["expected_s"], -best["iters"]):
            best = p
    return best


def iterations(workload: Workload) -> int:
    """The workload's own iteration count (the value after its ``iters_flag``)."""
    if not workload.iters_flag or workload.iters_flag not in workload.args:
        raise UsageError(f"workload '{workload.name}' has no iters_flag: its length is fixed")
    return int(workload.args[list(workload.args).index(workload.iters_flag) + 1])


def with_iterations(workload: Workload, iters: int) -> Workload:
    """The workload with ``iters`` iterations (its ``iters_flag`` value replaced)."""
    return scaled_workload(workload, iters / iterations(workload))


def counts(workload: Workload, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> list[int]:
    """The distinct iteration counts to try: ``fractions`` of the workload's own, >= 1."""
    base = iterations(workload)
    return sorted({max(1, round(base * f)) for f in fractions})


def measure_workload(
    make: Callable[[Workload], object],
    workload: Workload,
    iters: Sequence[int],
    *,
    pairs: int = DEFAULT_PAIRS,
    warmup: int = 1,
    seed: int = 1,
    timeout: float = 120.0,
    session,
) -> list[dict]:
    """A/A pairs of every count, interleaved round by round (so a noisy stretch of the
    machine hits every count alike): per count its spread and wall seconds per pair (the
    two processes as ``ab`` runs them, hakbench's own work per process included).
    ``make(workload)`` builds the cell. ``session`` (``hakbench.engine.engine.Session``): each
    sample stored in the run directory the moment it finishes (``workload`` = the count).
    The spread is that of the metric a default ``ab`` judges the workload on
    (``ab_spec.judged_metric``: CPU time of the timed loop, wall clock for several threads)."""
    cells = {str(i): make(with_iterations(workload, i)) for i in iters}

    def run(cell, slot) -> dict:
        t0 = time.perf_counter()
        s = run_sample(cell, phase=slot.phase, perf=False, timeout=timeout, launch=Launch())
        return {**s, "cost_s": time.perf_counter() - t0}

    slots = ab_schedule(list(cells), pairs, warmup, seed)
    samples = engine.take_slots(session, slots, lambda slot: cells[slot.workload], run)
    metric = judged_metric(DEFAULT_METRIC, workload)
    return [point(workload.name, int(k), samples, metric=metric) for k in cells]


def run_calibration(make, params: dict, out: Path, *, resume: bool, command=None) -> dict:
    """``calibrate --run-length`` into ``out`` through the engine: the pairs of every
    workload's counts, each sample stored as it finishes (``--resume``: the run ``out``
    holds, with its own ``params``, finished from its stored samples); run_length.json
    (and this machine's copy), meta.json and report.md. ``make(workload)`` builds a cell.
    Returns the document, with ``interrupted`` when a stop ended it (then no choice is
    recorded for the machine)."""
    from hakbench.engine import interrupts
    from hakbench.engine.load import LoadMonitor
    from hakbench.engine.meta import collect_meta
    from hakbench.engine.progress import Progress
    from hakbench.experiments import calibrate as cal

    meta = collect_meta(command, kind="calibrate-run-length", run_length=params)
    ident = engine.identity([make(resolve_workload(w)) for w in params["workloads"]], out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident)
    p = meta["run_length"]
    wls = [resolve_workload(w) for w in p["workloads"]]
    plans = [(w, counts(w, p["fractions"])) for w in wls]
    total = sum(2 * (p["pairs"] + p["warmup"]) * len(c) for _, c in plans)
    progress = Progress(total, "calibrate --run-length")
    session = engine.Session(store, stored=stored, on_sample=engine.progress_step(progress))
    entries = []
    interrupted = False
    with LoadMonitor() as load:
        try:
            for w, iters in plans:
                points = measure_workload(
                    make, w, iters, pairs=p["pairs"], warmup=p["warmup"], seed=p["seed"],
                    session=session,
                )  # fmt: skip
                entries.append(workload_entry(w, points, p["threshold"]))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        first = make(wls[0])
        doc = document(
            entries,
            threshold_pct=p["threshold"],
            pairs=p["pairs"],
            cell={"allocator": first.allocator_label, "profile": first.profile},
        )
        doc["load"], doc["interrupted"] = load.result, interrupted
        write(doc, out)
        lines = report_lines(doc)
        if interrupted:
            lines += [
                "",
                f"**Interrupted** by {interrupts.describe()}: nothing recorded for the machine; "
                f"finish with `hakbench calibrate --resume {out}`",
            ]
        doc["report"] = cal.write_report(out, meta, lines, load.result)
    return doc


def point(
    workload: str,
    iters: int,
    samples: Sequence[dict],
    *,
    metric: str = "throughput",
    key: str | None = None,
    phase: str = "measure",
) -> dict:
    """Spread (of ``metric``'s paired log ratios) and cost of one count from its samples of
    ``phase`` whose ``workload`` field is ``key`` (default: the count, as calibrate tags
    them)."""
    import numpy as np

    key = str(iters) if key is None else key
    pairs = complete_pairs(samples, key, phase=phase)
    measured = [s for s in samples if s["workload"] == key and s["phase"] == phase]
    pairs = [(x, y) for x, y in pairs if metric in x["metrics"] and metric in y["metrics"]]
    a = [float(x["metrics"][metric]) for x, _ in pairs]
    b = [float(y["metrics"][metric]) for _, y in pairs]
    logs = np.log(st.paired_ratios(a, b)) if pairs else []
    cost = [x["cost_s"] + y["cost_s"] for x, y in pairs]
    return {
        "workload": workload,
        "iters": iters,
        "pairs": len(pairs),
        "failed": sum(s["status"] != "ok" for s in measured),
        "spread": round(robust_sd(logs), 6) if len(pairs) >= 2 else math.nan,
        "seconds_per_pair": round(float(np.median(cost)), 4) if cost else math.nan,
    }


def workload_entry(workload: Workload, points: list[dict], threshold_pct: float) -> dict:
    best = choose(points, threshold_pct)
    return {
        "workload": workload.name,
        "argv_base": list(workload.args),
        "iters_flag": workload.iters_flag,
        "default_iters": iterations(workload),
        "chosen_iters": best["iters"] if best else None,
        "metric": judged_metric(DEFAULT_METRIC, workload),
        "points": points,
    }


def document(entries: list[dict], *, threshold_pct: float, pairs: int, cell: dict) -> dict:
    return {
        "format": 1,
        "threshold_pct": threshold_pct,
        "pairs_per_count": pairs,
        "cell": cell,
        "machine": machine(),
        "fingerprint": fingerprint(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "workloads": {e["workload"]: e for e in entries},
    }


def machine_path(fp: str | None = None) -> Path:
    return calibration.machine_path(fp).with_name(FILE)


def reference_path() -> Path:
    return calibration.reference_path().with_name(FILE)


def write(doc: dict, out: Path) -> Path:
    """``out``/run_length.json, and (a finished run) this machine's copy."""
    return calibration.write_record(doc, out, FILE)


def chosen_iterations(workload: Workload | str) -> tuple[int, str] | None:
    """The iteration count this machine's run-length calibration (else the lab machine's
    reference) chose for ``workload``, and a phrase saying where it comes from. None when
    neither has the workload, or the workload's arguments changed since it was measured."""
    w = workload if isinstance(workload, Workload) else resolve_workload(workload)
    for path, whose in ((machine_path(), "this machine's"), (reference_path(), "the reference")):
        if not path.exists():
            continue
        doc = read_json(path)
        entry = (doc.get("workloads") or {}).get(w.name) if isinstance(doc, dict) else None
        if not entry or entry.get("chosen_iters") is None:
            continue
        if entry.get("argv_base") != list(w.args):
            continue  # measured on other arguments: its figures do not describe this run
        date = str(doc.get("date", "?"))[:10]
        return int(entry["chosen_iters"]), f"{whose} run-length calibration of {date} ({path})"
    return None


def report_lines(doc: dict) -> list[str]:
    """The run-length table as Markdown."""
    lines = [
        f"# Run length for the shortest time to a decision (threshold {doc['threshold_pct']:g} %)",
        "",
        f"- {doc['date']}, {doc['machine']['hostname']} (fingerprint {doc['fingerprint']}); "
        f"{doc['pairs_per_count']} A/A pairs per count, counts interleaved round by round",
        "- spread: robust SD of the paired log ratios of the metric ab judges (its column); "
        "pairs needed: the sequential rule's "
        "interval within half the threshold; expected: pairs needed x seconds per pair",
        "",
        "| workload | metric | iterations | pairs | failed | spread | s/pair | pairs needed "
        "| expected s | chosen |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for e in doc["workloads"].values():
        for p in e["points"]:
            mark = "**chosen**" if p["iters"] == e["chosen_iters"] else ""
            if p["iters"] == e["default_iters"]:
                mark = f"{mark} (default)".strip()
            lines.append(
                f"| {e['workload']} | {e.get('metric', 'throughput')} | {p['iters']} "
                f"| {p['pairs']} | {p['failed']} "
                f"| {p['spread']:.4f} | {p['seconds_per_pair']:.3f} | {p['pairs_needed'] or '-'} "
                f"| {p['expected_s'] if p['expected_s'] is not None else '-'} | {mark} |"
            )
    return lines
