"""The A/B engine as a library: an ABSpec in, an ABResult (and a results directory) out.

Side B is ``profile`` (+ ``sets``) under ``allocator``; side A is ``baseline`` (default:
the same profile without the sets) under ``baseline_allocator`` (default: the same). Every
workload gets interleaved pairs in random order within each pair (hakbench.engine.schedule), the
first ``warmup_pairs`` discarded; one observe run per side with the ``stats`` variant shows
whether the switch that differs actually routed anything (NOT-ENGAGED otherwise).

perf modes (``ABSpec.perf``): ``observe`` (default) runs the measured pairs as the harness
alone and takes perf counters from ``perf_runs`` extra perf-wrapped runs per side (phase
"perf", interleaved A/B, after the pairs), reported apart from the verdict; ``each`` wraps
every process in ``perf stat`` (needed for ``--metric task-clock``); ``off`` runs no perf.

This module drives the run through the engine (``hakbench.engine.engine.Session``); what it
runs is ``ab_plan``, what the samples say ``ab_analysis``, the files it writes ``ab_output``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections import defaultdict
from pathlib import Path

from hakbench.core.cell import Cell
from hakbench.core.metrics import GUARDRAILS, METRICS
from hakbench.engine import engine, interrupts
from hakbench.engine.launch import Launch
from hakbench.engine.load import PROC_STAT, LoadMonitor, own_times, parse_system_stat
from hakbench.engine.progress import Progress
from hakbench.engine.runner import instruction_sample, run_sample
from hakbench.engine.schedule import ab_schedule, iter_ab_schedule
from hakbench.experiments import ab_plan
from hakbench.experiments.ab_analysis import (
    allocator_warnings,
    engagement_of,
    guardrails_of,
    judge_run,
    layout_summaries,
    perf_counter_table,
    primaries,
    unmeasured,
)
from hakbench.experiments.ab_output import history_lines, write_outputs
from hakbench.experiments.ab_spec import TIMED_METRICS, ABResult, ABSpec
from hakbench.stats import stats as st
from hakbench.stats.stopper import Stopper


def run_ab(
    spec: ABSpec,
    out: Path,
    *,
    show_progress: bool = True,
    command=None,
    resume: bool = False,
    continued: bool = False,
) -> ABResult:
    """Run the whole A/B and write every output file into ``out``.

    ``resume`` (``ab --resume``; ``spec`` from ``resume_spec``): the samples in ``out`` are
    kept and their slots not run again; the schedule is the seeded one the run started, so
    the rest of it is unchanged, and a sequential run replays its looks round by round
    from the stored pairs (the same looks, the same stops) before it runs new pairs, its
    budget counting the stored pairs' seconds. ``continued`` (``ab --continue``): the same,
    but the budget (``spec.max_time_s``) counts from now: a sequential run extended under
    the same anytime-valid sequence (its looks are the ones it had, and go on from there)."""
    if spec.seed is None:
        spec = dataclasses.replace(spec, seed=engine.new_seed())
    spec, cells, layouts, meta, shas = _plan(spec, command)
    store, meta, stored = _open(spec, out, meta, layouts, resume or continued, continued)
    slots = []
    if spec.metric in TIMED_METRICS and not spec.sequential:
        slots = ab_schedule(list(cells), spec.pairs, spec.warmup_pairs, spec.seed)
    perf_slots, perf_note = ab_plan.perf_slots(spec, cells)
    harness, observe = ab_plan.observation(spec, cells)
    n_total = ab_plan.planned_samples(
        spec, cells, harness if observe else {}, len(slots) + len(perf_slots)
    )
    progress = Progress(n_total, "ab", eta=not spec.sequential) if show_progress else None
    session = engine.Session(
        store, stored=stored, on_sample=engine.progress_step(progress) if progress else None
    )
    run = _Run(spec, cells, session, continued, layouts)
    run.progress = progress
    monitor = LoadMonitor().start()
    try:
        interrupted, pairs_seconds = _measure(run, slots, perf_slots, harness if observe else None)
    finally:
        meta["load"] = monitor.stop()
        if progress:
            progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        samples = store.samples()
        engaged = engagement_of(spec, cells, harness, observe, run.observed)
        result = _result(run, samples, engaged, meta, shas, perf_note)
        result.pairs_seconds, result.interrupted = pairs_seconds, interrupted
        result.stopped_by = interrupts.describe() if interrupted else ""
        _finish_meta(meta, result, samples, continued)
        result.history = history_lines(meta)
        write_outputs(result, samples)
        store.write_meta(meta)
    return result


def _plan(spec: ABSpec, command) -> tuple:
    """The spec resolved: its builds, cells and layouts, and the run's meta.json.
    -> (spec with its layouts, cells, layouts, meta, shas)"""
    ab_plan.check_layouts(spec)  # before any revision is built
    wls = ab_plan.workloads_of(spec)  # resolved once, handed down
    builds, shas = ab_plan.resolve_builds(spec, wls)
    with_why = ab_plan.check_spec_why(spec, builds, wls)
    cells = {w: ab for w, (ab, _) in with_why.items()}
    spec = ab_plan.resolve_layouts(spec, cells)  # K a side, before anything is recorded
    layouts = ab_plan.layout_cells(spec, cells)
    meta = ab_plan.run_meta(spec, with_why, shas, command)
    meta["layouts"] = {  # every layout's library is in the identity too
        side: [str(c.resolved_allocator().preload) for c in cs]
        for side, cs in next(iter(layouts.values())).items()
    }
    return spec, cells, layouts, meta, shas


def _open(spec: ABSpec, out: Path, meta: dict, layouts: dict, resume: bool, continued: bool):
    """The run directory (``engine.open_run``), a continuation recorded in its meta.json.
    -> (store, meta, stored samples)"""
    flag = "--continue" if continued else "--resume"
    ident = engine.identity((c for s in layouts.values() for cs in s.values() for c in cs), out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident, flag=flag)
    if continued:
        before = {w: {"verdict": v} for w, v in (meta.get("verdicts") or {}).items()}
        meta.setdefault("continuations", []).append(
            {"max_time_s": spec.max_time_s, "before": before, "date": meta["resumed"][-1]["date"]}
        )
        meta["spec"]["max_time_s"] = spec.max_time_s
        store.write_meta(meta)  # a continuation killed in its turn is still on record
    return store, meta, stored


def _measure(run: _Run, slots: list, perf_slots: list, harness: dict | None) -> tuple[bool, float]:
    """Every sample of the call: the observation runs, the counts or the pairs, the perf
    runs. A stop ends it early. -> (interrupted, seconds the pairs took)"""
    spec, cells = run.spec, run.cells
    pairs_seconds = 0.0
    try:
        if harness is not None:
            run.observe(harness)
        if spec.metric == "instructions":
            run.count_instructions()
        t_pairs = time.monotonic()
        if run.stopper is not None:
            run.stopper.t0 = time.monotonic()  # the budget counts from the first pair
            _sequential_pairs(
                spec,
                cells,
                run.slot,
                run.stopper,
                primaries(cells, spec.metric),
                lambda: _budget_note(run),
            )
        for slot in slots:
            run.slot(slot)
        pairs_seconds = time.monotonic() - t_pairs
        for slot in perf_slots:
            run.slot(slot)
    except KeyboardInterrupt:
        for w in run.stopper.running() if run.stopper is not None else ():
            run.stopper.stop(w, "interrupted")
        return True, pairs_seconds
    return False, pairs_seconds


def _result(run: _Run, samples: list[dict], engaged: dict, meta: dict, shas, perf_note) -> ABResult:
    """The verdicts of what finished (``judge_run``) and everything the report shows."""
    spec, cells, ks = run.spec, run.cells, (run.k_a, run.k_b)
    comparisons, roles, failures = judge_run(
        samples,
        spec,
        cells,
        engaged,
        pair_seconds=run.pair_seconds,
        stopper=run.stopper,
        layouts=ks,
    )
    return ABResult(
        out=run.session.store.path,
        spec=spec,
        cells=cells,
        comparisons=comparisons,
        roles=roles,
        engagement=engaged,
        failures={w: f.note for w, f in failures.items()},
        failed=[s for s in samples if s["status"] != "ok"],
        unavailable=unmeasured(samples),
        perf_counters=perf_counter_table(samples, list(cells)),
        perf_note=perf_note,
        noise_warning=ab_plan.noise_warning_for(
            spec, {w: b.workload for w, (_, b) in cells.items()}
        ),
        load=meta["load"],
        iterations=meta["iterations"],
        shas=shas,
        changed_libraries=ab_plan.changed_libraries(meta),
        layouts=layout_summaries(samples, spec, cells, ks, comparisons, run.stopper),
        layout_note=ab_plan.layout_note(spec, cells),
        allocator_warnings=allocator_warnings(samples),
    )


def _finish_meta(meta: dict, result: ABResult, samples: list[dict], continued: bool) -> None:
    meta["changed_libraries"] = result.changed_libraries
    meta["finished"] = not result.interrupted
    meta["load_avg_1min_end"] = os.getloadavg()[0]  # noise context: other work on the VM
    meta["n_samples"] = len(samples)
    meta["pairs_seconds"] = round(result.pairs_seconds, 3)
    meta["verdicts"] = result.verdicts()
    if continued:
        meta["continuations"][-1]["after"] = {
            c.workload: {"verdict": c.verdict, "n_pairs": c.n_pairs, "stop": c.stop}
            for c in result.primary()
        }


class _Run:
    """The samples of one A/B call, each taken through the engine's ``Session``: the stats
    runs, the instruction counts and the slots of the schedule; with the sequential stop
    rule and the wall seconds of each workload's measured pairs."""

    def __init__(
        self, spec: ABSpec, cells: dict, session: engine.Session, continued: bool, layouts: dict
    ):
        self.spec, self.cells, self.session, self.continued = spec, cells, session, continued
        self.progress = None  # the call's progress bar (run_ab sets it)
        self.layouts, self.draws = layouts, ab_plan.LayoutDraws(spec, layouts)
        first = next(iter(layouts.values()))
        self.k_a, self.k_b = len(first["A"]), len(first["B"])
        self.observed: dict = {}  # (workload, side) -> its stats run's counter groups
        self.pair_seconds: dict = defaultdict(float)  # workload -> its measured pairs' seconds
        # the budget's clock: live seconds, plus (--resume) the stored pairs' own seconds,
        # counted once the replay is over, so no stored pair is left out by the budget
        self.replayed = {"s": 0.0, "pending": 0.0}
        own = primaries(cells, spec.metric)
        self.stopper = (
            Stopper(
                {w: METRICS[own.get(w, spec.metric)].higher_is_better for w in cells},
                spec.threshold_pct,
                max_time_s=spec.max_time_s,
                max_pairs=spec.max_pairs,
                clock=lambda: time.monotonic() + self.replayed["s"],
                layouts=(self.k_a, self.k_b),
                alpha=spec.alpha,
                **_waits(cells),
            )
            if spec.sequential
            else None
        )

    def take(self, cell: Cell, tags: dict, run) -> dict:
        return self.session.take({"cell": cell.key, "workload": cell.workload.name, **tags}, run)

    def observe(self, harness: dict) -> None:
        """One stats-variant run per hakmem side: the counters engagement reads."""
        for w, (a, b) in harness.items():
            for side, cell in (("A", a), ("B", b)):
                if cell.allocator != "hakmem":
                    continue
                tags = {"phase": "observe", "side": side, "pair": None, "round": None}
                s = self.take(cell, tags, lambda cell=cell: _observe(cell, self.spec))
                self.observed[(w, side)] = s["alloc_stats"] if s["status"] == "ok" else None

    def count_instructions(self) -> None:
        for a, b in self.cells.values():
            for side, cell in (("A", a), ("B", b)):
                tags = {"phase": "instructions", "side": side, "pair": 0, "round": 0}
                self.take(cell, tags, lambda cell=cell: instruction_sample(cell))

    def slot(self, slot) -> dict:
        """The sample of one slot of the schedule (a pair's side, a warm-up, a perf run)."""
        spec = self.spec
        a, b = self.cells[slot.workload]
        cell = a if slot.side == "A" else b
        perf = slot.phase == "perf" or spec.perf == "each"
        tags = {"phase": slot.phase, "side": slot.side, "pair": slot.pair, "round": slot.round}
        if slot.phase in ("warmup", "measure"):  # the pair's layout of this side
            layout = self.draws.of(slot.workload, slot.round)["AB".index(slot.side)]
            cell, tags["layout"] = self.layouts[slot.workload][slot.side][layout], layout
        old = self.session.stored({"cell": cell.key, "workload": slot.workload, **tags})
        if old is not None and slot.phase in ("warmup", "measure") and not self.continued:
            self.replayed["pending"] += old.get("wall_s") or 0.0
        elif old is None:
            self.replayed["s"] += self.replayed["pending"]
            self.replayed["pending"] = 0.0
        t0 = time.monotonic()
        s = self.take(
            cell,
            tags,
            lambda: run_sample(
                cell,
                phase=slot.phase,
                perf=perf,
                timeout=spec.timeout,
                args=ab_plan.slot_args(spec, cell, slot),
                launch=Launch.parse(spec.launch),
            ),
        )
        if slot.phase == "measure":
            live = time.monotonic() - t0
            self.pair_seconds[slot.workload] += (s.get("wall_s") or 0.0) if old else live
        return s


def _budget_note(run: _Run) -> None:
    """The progress line of a sequential A/B: how many workloads still run and how much of
    the budget is spent (its bar's total is only a guess, so it shows no ETA)."""
    if run.progress is None or run.stopper is None:
        return
    s = run.stopper
    run.progress.status = (
        f"{len(s.running())} of {len(s.stops)} running, "
        f"{s.elapsed() / 60:.1f} of {s.max_time_s / 60:.1f} min"
    )
    run.progress.refresh()


def _sequential_pairs(
    spec: ABSpec, cells: dict, run_slot, stopper, own: dict, after_round=None
) -> None:
    """Rounds of interleaved pairs (hakbench.engine.schedule, endless) until ``stopper`` has stopped
    every workload; after each measured round it looks at each running workload. The slots
    of a stopped workload are skipped. A side failing where the other did not (or otherwise)
    stops its workload FAILED at once: survivors never decide."""
    measured: dict = {w: {"A": [], "B": []} for w in cells}
    rounds = iter_ab_schedule(list(cells), None, spec.warmup_pairs, spec.seed)
    for rnd, slots in itertools.groupby(rounds, key=lambda slot: slot.round):
        running = set(stopper.running())
        got: dict = defaultdict(dict)
        for slot in slots:
            if slot.workload in running:
                got[slot.workload][slot.side] = run_slot(slot)
        if rnd < spec.warmup_pairs:
            continue
        for w, sides in got.items():
            m = own.get(w, spec.metric)
            a, b = sides["A"], sides["B"]
            measured[w]["A"].append(a)
            measured[w]["B"].append(b)
            ok = a["status"] == "ok" and b["status"] == "ok"
            r = st.paired_ratios([a["metrics"].get(m, 0)], [b["metrics"].get(m, 0)]) if ok else []
            layouts = (a.get("layout") or 0, b.get("layout") or 0)
            stopper.add(
                w, math.log(r[0]) if len(r) else None, layouts=layouts, guards=_guards(w, a, b)
            )
            if not ok and st.failures(measured[w]["A"], measured[w]["B"]).verdict:
                stopper.stop(w, "failed", st.FAILED)
        running = stopper.end_round(load=_other_cpu())
        if after_round is not None:
            after_round()
        if not running:
            return


def _waits(cells: dict) -> dict:
    """The stopper's ``waits`` (the guardrails each command workload's stop waits for) and
    ``guard_family`` (the guardrail comparisons the call will judge at its end)."""
    stated = guardrails_of(cells)
    waits = {
        w: {m: METRICS[m].higher_is_better for m in a.workload.command.wait_for}
        for w, (a, _) in cells.items()
        if a.workload.command is not None and a.workload.command.wait_for
    }
    family = sum(len(stated.get(w, GUARDRAILS)) for w in cells)
    return {"waits": waits, "guard_family": family} if waits else {}


def _guards(w: str, a: dict, b: dict) -> dict:
    """A pair's log ratios B/A of every guardrail metric both sides measured (the stopper
    keeps those its workload waits for)."""
    if a["status"] != "ok" or b["status"] != "ok":
        return {}
    out = {}
    for m in GUARDRAILS:
        x, y = a["metrics"].get(m), b["metrics"].get(m)
        if x and y and x > 0 and y > 0:
            out[m] = math.log(y / x)
    return out


def _other_cpu() -> tuple[float, float] | None:
    """(monotonic seconds, CPU seconds every process but hakbench and its waited children
    used so far): the Stopper's cumulative reading for its load-spike check."""
    try:
        system = parse_system_stat(PROC_STAT.read_text())
    except (OSError, ValueError):
        return None
    busy_s = system.busy_ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic(), busy_s - own_times().total_s


def _observe(cell: Cell, spec: ABSpec) -> dict:
    """The stats-variant run of a hakmem cell: its counter groups, not timed."""
    stats_cell = Cell(
        cell.allocator, "stats", cell.profile, cell.workload, cell.env, cell.build, cell.sets
    )
    return run_sample(stats_cell, phase="observe", perf=False, stats=True, timeout=spec.timeout)
