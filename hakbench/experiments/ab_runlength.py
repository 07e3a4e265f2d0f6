"""``ab --run-length auto``: each workload's run length chosen at the start of the call from
the noise measured then (issue #29), not only by an earlier ``calibrate --run-length``.

For each harness workload with an iteration count, before the call's warm-ups: one warm-up
round, then ``PROBE_PAIRS`` pairs of its two cells (A and B as the call compares them) at each
of ``PROBE_FRACTIONS`` of the count the call would otherwise run (``ab_plan.run_length``:
the calibrated one, else the workload's own), interleaved round by round so a noisy stretch
of the machine hits every count alike, and cut after the round in which the probe has spent
``PROBE_MAX_S`` seconds (at least ``MIN_PROBE_PAIRS`` pairs a count). Per count: the robust
spread of the paired log ratios of the judged metric (``ab_spec.judged_metric``) and the
wall seconds a pair cost; the count with the shortest expected time to a verdict
(``runlength.choose``: the pairs the sequential rule needs at that spread and the call's
threshold, times the seconds a pair) is the one the call runs. A real effect moves the
median of the log ratios, not their robust spread, so probing A against B is as good as an
A/A for this.

The probe samples are stored like every other (phase ``probe`` / ``probe-warmup``, tagged
``probe_iters``) and judge nothing. The choice, with every count's figures, goes into
meta.json (``run_length_auto``) before the first pair, so ``--resume`` and ``--continue``
run the stored count and never probe again; a call stopped during its probe re-takes the
same slots (the stored ones are kept) and so makes the choice those samples give.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

from hakbench.core.errors import UsageError
from hakbench.engine.process import Launch
from hakbench.engine.runner import run_sample
from hakbench.engine.schedule import ab_schedule
from hakbench.experiments import runlength
from hakbench.experiments.ab_spec import TIMED_METRICS, ABSpec, judged_metric

MODES = ("auto", "calibrated")
PROBE_FRACTIONS = (0.25, 0.5, 1.0, 2.0)  # of the count the call would otherwise run
PROBE_PAIRS = 16  # per count, after PROBE_WARMUP rounds
PROBE_WARMUP = 1
MIN_PROBE_PAIRS = 8  # per count, before PROBE_MAX_S may cut the probe
PROBE_MAX_S = 4.0  # wall seconds of a workload's probe (its processes as ab runs them)
PHASE = "probe"
META_KEY = "run_length_auto"


def parse(text: str) -> tuple[str, int | None]:
    """``--run-length`` text -> (mode, iterations): auto, calibrated, or a count N (the
    same as ``--iters N``)."""
    if text in MODES:
        return text, None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--run-length {text}: auto, calibrated or an iteration count >= 1")
    return "calibrated", n


def active(spec: ABSpec) -> bool:
    """Does this call choose its run lengths by probing?"""
    return spec.run_length == "auto" and spec.iters is None and spec.metric in TIMED_METRICS


def adjustable(cell) -> bool:
    w = cell.workload
    return w.command is None and bool(w.iters_flag) and w.iters_flag in w.args


def probe_counts(base: int, fractions=PROBE_FRACTIONS) -> list[int]:
    return sorted({max(1, round(base * f)) for f in fractions})


def at(cell, iters: int):
    """``cell`` running ``iters`` iterations (its layout, environment and build kept)."""
    return dataclasses.replace(cell, workload=runlength.with_iterations(cell.workload, iters))


def planned(spec: ABSpec, cells: dict) -> int:
    """The probe's processes at most, for the progress bar's total."""
    if not active(spec):
        return 0
    n = 0
    for a, _ in cells.values():
        if adjustable(a):
            counts = probe_counts(runlength.iterations(a.workload))
            n += 2 * (PROBE_PAIRS + PROBE_WARMUP) * len(counts)
    return n


def choose_all(spec: ABSpec, cells: dict, session, meta: dict, store) -> dict:
    """workload -> its choice (``choice``), for every workload this call's run length is
    chosen for: the one meta.json holds (a resumed or continued call), else probed now and
    written to meta.json at once."""
    if not active(spec):
        return {}
    chosen = meta.setdefault(META_KEY, {})
    for i, (w, (a, b)) in enumerate(cells.items()):
        if w in chosen or not adjustable(a):
            continue
        samples = probe(spec, w, a, b, session, seed=spec.seed + 7919 * (i + 1))
        chosen[w] = choice(w, samples, runlength.iterations(a.workload), spec, a.workload)
        store.write_meta(meta)
    return chosen


def probe(spec: ABSpec, w: str, a, b, session, *, seed: int) -> list[dict]:
    """The probe pairs of one workload, through ``session`` (stored ones reused)."""
    counts = probe_counts(runlength.iterations(a.workload))
    sides = {str(n): {"A": at(a, n), "B": at(b, n)} for n in counts}
    launch = Launch.parse(spec.launch)

    def run(cell, slot) -> dict:
        from hakbench.experiments import ab_plan

        t0 = time.perf_counter()
        s = run_sample(
            cell,
            phase=PHASE,
            perf=spec.perf == "each",
            timeout=spec.timeout,
            args=ab_plan.slot_args(spec, cell, slot),
            launch=launch,
        )
        return {**s, "cost_s": time.perf_counter() - t0}

    samples: list[dict] = []
    spent = 0.0
    slots = ab_schedule(list(sides), PROBE_PAIRS, PROBE_WARMUP, seed)
    for rnd, group in itertools.groupby(slots, key=lambda slot: slot.round):
        if spent >= PROBE_MAX_S and rnd >= PROBE_WARMUP + MIN_PROBE_PAIRS:
            break  # (the seconds are the stored samples' own: a resume cuts at the same round)
        for slot in group:
            cell = sides[slot.workload][slot.side]
            tags = {
                "phase": PHASE if slot.phase == "measure" else f"{PHASE}-warmup",
                "cell": cell.key,
                "workload": w,
                "side": slot.side,
                "pair": slot.pair,
                "round": slot.round,
                "probe_iters": int(slot.workload),
            }
            s = session.take(tags, lambda cell=cell, slot=slot: run(cell, slot))
            spent += s.get("cost_s") or 0.0
            samples.append(s)
    return samples


def choice(w: str, samples: list[dict], base: int, spec: ABSpec, workload) -> dict:
    """The count with the shortest expected time to a verdict among the probed ones (the
    call's own count when none is usable), with every count's figures and why."""
    metric = judged_metric(spec.metric, workload)
    points = [
        runlength.point(
            w,
            n,
            [s for s in samples if s.get("probe_iters") == n],
            metric=metric,
            key=w,
            phase=PHASE,
        )
        for n in probe_counts(base)
    ]
    best = runlength.choose(points, spec.threshold_pct)
    entry = {
        "base_iters": base,
        "chosen_iters": best["iters"] if best else base,
        "metric": metric,
        "threshold_pct": spec.threshold_pct,
        "probe_s": round(sum(s.get("cost_s") or 0.0 for s in samples), 3),
        "points": points,
    }
    entry["why"] = describe(entry)
    return entry


def describe(entry: dict) -> str:
    """One line for the report: the count chosen, its figures and the otherwise-count's."""
    by = {p["iters"]: p for p in entry["points"]}
    n, base = entry["chosen_iters"], entry["base_iters"]
    pairs = max((p["pairs"] for p in entry["points"]), default=0)
    head = f"{n} iterations, chosen by this call's probe (--run-length auto; {entry['metric']}"
    tail = f"{pairs} probe pairs a count, {entry['probe_s']:.1f} s)"

    def figures(p) -> str:
        if p.get("expected_s") is None:
            return f"spread {100 * p['spread']:.2f} %, no estimate"
        return (
            f"spread {100 * p['spread']:.2f} %, {p['seconds_per_pair']:.3f} s a pair, "
            f"~{p['pairs_needed']} pairs, ~{p['expected_s']:.1f} s expected at "
            f"{entry['threshold_pct']:g} %"
        )

    if n not in by or by[n].get("expected_s") is None:
        return f"{base} iterations: this call's probe could not choose (no usable count; {tail}"
    text = f"{head}, {tail}: {figures(by[n])}"
    if n != base and base in by:
        text += f"; at {base} (the count otherwise): {figures(by[base])}"
    return text


def apply(cells: dict, layouts: dict, chosen: dict, meta: dict) -> tuple[dict, dict]:
    """(cells, layout cells) at the chosen counts; meta.json's iterations and argv say so."""
    if not chosen:
        return cells, layouts
    cells, layouts = dict(cells), dict(layouts)
    for w, e in chosen.items():
        n = e["chosen_iters"]
        cells[w] = tuple(at(c, n) for c in cells[w])
        layouts[w] = {side: [at(c, n) for c in cs] for side, cs in layouts[w].items()}
        meta["iterations"][w] = e["why"]
        for side, c in zip("AB", cells[w], strict=True):
            meta["cells"][w][side]["argv"] = c.command()[0]
    return cells, layouts
