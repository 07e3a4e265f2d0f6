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
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import math
import os
import statistics
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from hakbench.core.cell import Cell, make_cell
from hakbench.core.errors import UsageError
from hakbench.core.metrics import GUARDRAILS, METRICS, PERF_SOURCED
from hakbench.core.profiles import expand_workloads, resolve_workload
from hakbench.engine import engine, interrupts
from hakbench.engine.load import LoadMonitor
from hakbench.engine.meta import collect_meta
from hakbench.engine.process import Launch
from hakbench.engine.progress import Progress
from hakbench.engine.runner import instruction_sample, perf_usable, run_sample
from hakbench.engine.schedule import ab_schedule, complete_pairs, iter_ab_schedule
from hakbench.engine.store import write_json, write_pyperf
from hakbench.experiments.ab_spec import (
    DEFAULT_PAIRS,
    DEFAULT_WORKLOADS,
    PERF_MODES,
    TIMED_METRICS,
    ABResult,
    ABSpec,
    judged_metric,
)
from hakbench.experiments.engagement import engagement
from hakbench.stats import sequential as seq
from hakbench.stats import stats as st

SUMMARY_FIELDS = (
    "workload",
    "metric",
    "source",
    "role",
    "a_median",
    "b_median",
    "ratio",
    "ci_low",
    "ci_high",
    "decide_low",
    "decide_high",
    "p_value",
    "p_holm",
    "n_pairs",
    "verdict",
    "seconds",
    "stop",
    "pairs_needed",
    "seconds_needed",
)


def run_length(spec: ABSpec, name: str):
    """(workload, what its iteration count is and why): ``--iters`` when given; for a timed
    metric, this machine's run-length choice (hakbench.experiments.runlength) when it has one;
    else the workload's own count. Command workloads and workloads without an iters_flag keep
    theirs."""
    from hakbench.experiments import runlength

    w = resolve_workload(name)
    if w.command is not None or not w.iters_flag or w.iters_flag not in w.args:
        return w, "fixed length"
    own = runlength.iterations(w)
    if spec.iters is not None:
        return runlength.with_iterations(w, spec.iters), f"{spec.iters} iterations (--iters)"
    chosen = runlength.chosen_iterations(w) if spec.metric in TIMED_METRICS else None
    if chosen is not None:
        n, whose = chosen
        return runlength.with_iterations(w, n), f"{n} iterations, from {whose}"
    why = "no run-length calibration" if spec.metric in TIMED_METRICS else "counted exactly"
    return w, f"{own} iterations (the workload's own; {why})"


def build_cells(spec: ABSpec, builds: dict) -> dict:
    """workload -> (A, B); names, profiles and HAKMEM_* keys are validated here."""
    return {w: ab for w, (ab, _) in build_cells_why(spec, builds).items()}


def build_cells_why(spec: ABSpec, builds: dict) -> dict:
    """workload -> ((A, B), what its iteration count is and why)."""
    cells = {}
    for name in expand_workloads(spec.workloads):
        w, why = run_length(spec, name)
        b = make_cell(
            spec.allocator,
            w,
            variant=spec.variant,
            profile=spec.profile,
            sets=spec.sets,
            build=builds.get("B"),
        )
        a = make_cell(
            spec.baseline_allocator or spec.allocator,
            w,
            variant=spec.baseline_variant or spec.variant,
            profile=spec.baseline or spec.profile,
            build=builds.get("A"),
        )
        for c in (a, b):
            alloc = c.resolved_allocator()
            if not alloc.available:
                raise UsageError(f"allocator {alloc.label} unavailable: {alloc.missing_reason}")
        cells[b.workload.name] = ((a, b), why)
    return cells


def _resolve_builds(spec: ABSpec) -> tuple[dict, dict]:
    builds, shas = {}, {}
    for side, rev in (("B", spec.rev), ("A", spec.baseline_rev)):
        if rev:
            from hakbench.engine.revs import build_at_rev  # issue 8's module, needed only here

            rb = build_at_rev(rev)
            builds[side], shas[side] = Path(rb.build_dir), rb.sha
    return builds, shas


def check_spec(spec: ABSpec, builds: dict | None = None) -> dict:
    """Validate everything a spec names (UsageError on the first problem); its cells."""
    return {w: ab for w, (ab, _) in check_spec_why(spec, builds).items()}


def check_spec_why(spec: ABSpec, builds: dict | None = None) -> dict:
    """``check_spec`` with each workload's iteration count and why (``build_cells_why``)."""
    known = (*TIMED_METRICS, "instructions")
    if spec.metric not in known:
        raise UsageError(f"unknown metric '{spec.metric}'; known: {', '.join(known)}")
    if spec.perf not in PERF_MODES:
        raise UsageError(f"unknown perf mode '{spec.perf}'; known: {', '.join(PERF_MODES)}")
    Launch.parse(spec.launch)
    if spec.metric == "task_clock_ms" and not (spec.perf == "each" and perf_usable()):
        raise UsageError(
            "--metric task-clock needs perf stat on every process (--perf each; perf missing?)"
        )
    if spec.metric not in ("throughput", "cpu_throughput"):
        for w in expand_workloads(spec.workloads):
            if resolve_workload(w).command is not None:
                raise UsageError(
                    f"--metric {spec.metric} measures harness programs; command workload {w} "
                    f"is judged on its own {resolve_workload(w).primary_metric} (drop --metric)"
                )
    if spec.extra_ops is not None and any(
        resolve_workload(w).command is not None for w in expand_workloads(spec.workloads)
    ):
        raise UsageError("--extra-ops is a harness option: harness workloads only")
    return build_cells_why(spec, builds or {})


def spec_of(meta: dict) -> ABSpec:
    """The spec a run directory's meta.json recorded (for --resume and --continue)."""
    fields = {f.name for f in dataclasses.fields(ABSpec)}
    data = {k: v for k, v in meta["spec"].items() if k in fields}
    data["workloads"] = tuple(data.get("workloads") or DEFAULT_WORKLOADS)
    return ABSpec(**data)


def resume_spec(out: Path, *, max_time_s: float | None = None) -> ABSpec:
    """The spec of the run in ``out``, for ``ab --resume`` (as recorded) or ``ab --continue``
    (a sequential run, with a new budget ``max_time_s``): a run that cannot be continued
    is one line (UsageError)."""
    meta = engine.stored_meta(out, "ab", "--resume" if max_time_s is None else "--continue")
    spec = spec_of(meta)
    if max_time_s is None:
        return spec
    if not spec.sequential:
        raise UsageError(
            f"--continue {out}: it ran a fixed count (--runs) or exact counts; only a "
            "sequential run continues under its confidence sequence"
        )
    verdicts = meta.get("verdicts") or {}
    if meta.get("finished") and verdicts and seq.INCONCLUSIVE not in verdicts.values():
        raise UsageError(f"--continue {out}: every workload is decided already ({verdicts})")
    return dataclasses.replace(spec, max_time_s=max_time_s)


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
    resume = resume or continued
    if spec.seed is None:
        spec = dataclasses.replace(spec, seed=engine.new_seed())
    builds, shas = _resolve_builds(spec)
    with_why = check_spec_why(spec, builds)
    cells = {w: ab for w, (ab, _) in with_why.items()}
    meta = collect_meta(
        command,
        kind="ab",
        variant=spec.variant,
        spec=asdict(spec),
        description=spec.describe(),
        cells={
            w: {
                side: {
                    "key": c.key,
                    "label": c.label,
                    "env": c.env,
                    "preload": str(c.resolved_allocator().preload or ""),
                    "preload_sha256": _sha256(c.resolved_allocator().preload),
                    "argv": c.command()[0],
                }
                for side, c in (("A", a), ("B", b))
            }
            for w, (a, b) in cells.items()
        },
        rev_shas=shas,
    )
    meta["iterations"] = {w: why for w, (_, why) in with_why.items()}
    flag = "--continue" if continued else "--resume"
    ident = engine.identity((c for ab in cells.values() for c in ab), out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident, flag=flag)
    if continued:
        before = {w: {"verdict": v} for w, v in (meta.get("verdicts") or {}).items()}
        meta.setdefault("continuations", []).append(
            {"max_time_s": spec.max_time_s, "before": before, "date": meta["resumed"][-1]["date"]}
        )
        meta["spec"]["max_time_s"] = spec.max_time_s
        store.write_meta(meta)  # a continuation killed in its turn is still on record
    noise_warning = noise_warning_for(spec)
    interrupted = False
    pairs_seconds = 0.0
    observed: dict = {}
    slots, perf_slots, perf_note = [], [], ""
    if spec.metric in TIMED_METRICS:
        if not spec.sequential:
            slots = ab_schedule(list(cells), spec.pairs, spec.warmup_pairs, spec.seed)
        harness = [w for w, (a, _) in cells.items() if a.workload.command is None]
        if spec.perf == "observe" and spec.perf_runs > 0 and harness:
            if (
                perf_usable()
            ):  # command workloads never run under perf (hakbench.engine.command_run)
                perf_slots = [
                    dataclasses.replace(s, phase="perf")
                    for s in ab_schedule(harness, spec.perf_runs, 0, spec.seed + 1)
                ]
            else:
                perf_note = "perf is not usable here: no perf counter runs"
    # the stats-variant runs read the harness's counter dump: harness workloads only
    observed_cells = {w: ab for w, ab in cells.items() if ab[0].workload.command is None}
    observe = spec.observe and any(
        "hakmem" in (a.allocator, b.allocator) for a, b in observed_cells.values()
    )
    n_obs = (
        sum(c.allocator == "hakmem" for ab in observed_cells.values() for c in ab) if observe else 0
    )
    n_total = n_obs + len(slots) + len(perf_slots)
    n_total += 2 * len(cells) if spec.metric == "instructions" else 0
    if spec.sequential:  # the count is not known: estimate DEFAULT_PAIRS a workload
        n_total += 2 * len(cells) * (spec.warmup_pairs + DEFAULT_PAIRS)
    progress = Progress(n_total, "ab") if show_progress else None
    own = primaries(cells, spec.metric)
    # the budget's clock: live seconds, plus (--resume) the stored pairs' own seconds, counted
    # once the replay is over, so no stored pair is left out of the verdict by the budget
    replayed = {"s": 0.0, "pending": 0.0}
    stopper = (
        seq.Stopper(
            {w: METRICS[own.get(w, spec.metric)].higher_is_better for w in cells},
            spec.threshold_pct,
            max_time_s=spec.max_time_s,
            max_pairs=spec.max_pairs,
            clock=lambda: time.monotonic() + replayed["s"],
        )
        if spec.sequential
        else None
    )
    pair_seconds: dict = defaultdict(float)  # workload -> wall seconds of its measured pairs
    launch = Launch.parse(spec.launch)
    session = engine.Session(
        store, stored=stored, on_sample=engine.progress_step(progress) if progress else None
    )

    def take(cell, tags: dict, run) -> dict:
        return session.take({"cell": cell.key, "workload": cell.workload.name, **tags}, run)

    monitor = LoadMonitor().start()
    try:
        for w, (a, b) in observed_cells.items() if observe else ():
            for side, cell in (("A", a), ("B", b)):
                if cell.allocator != "hakmem":
                    continue
                tags = {"phase": "observe", "side": side, "pair": None, "round": None}
                s = take(cell, tags, lambda cell=cell: _observe(cell, spec))
                observed[(w, side)] = s["alloc_stats"] if s["status"] == "ok" else None
        if spec.metric == "instructions":
            for a, b in cells.values():
                for side, cell in (("A", a), ("B", b)):
                    tags = {"phase": "instructions", "side": side, "pair": 0, "round": 0}
                    take(cell, tags, lambda cell=cell: instruction_sample(cell))

        def run_slot(slot) -> dict:
            a, b = cells[slot.workload]
            cell = a if slot.side == "A" else b
            perf = slot.phase == "perf" or spec.perf == "each"
            tags = {"phase": slot.phase, "side": slot.side, "pair": slot.pair, "round": slot.round}
            old = session.stored({"cell": cell.key, "workload": slot.workload, **tags})
            if old is not None and slot.phase in ("warmup", "measure") and not continued:
                replayed["pending"] += old.get("wall_s") or 0.0
            elif old is None:
                replayed["s"] += replayed.pop("pending", 0.0)
            t0 = time.monotonic()
            s = take(
                cell,
                tags,
                lambda: run_sample(
                    cell,
                    phase=slot.phase,
                    perf=perf,
                    timeout=spec.timeout,
                    args=_args(spec, cell, slot),
                    launch=launch,
                ),
            )
            if slot.phase == "measure":
                live = time.monotonic() - t0
                pair_seconds[slot.workload] += (s.get("wall_s") or 0.0) if old else live
            return s

        t_pairs = time.monotonic()
        if stopper is not None:
            stopper.t0 = time.monotonic()  # the budget counts from the first pair
            _sequential_pairs(spec, cells, run_slot, stopper, own)
        for slot in slots:
            run_slot(slot)
        pairs_seconds = time.monotonic() - t_pairs
        for slot in perf_slots:
            run_slot(slot)
    except KeyboardInterrupt:
        interrupted = True
        for w in stopper.running() if stopper is not None else ():
            stopper.stop(w, "interrupted")
    finally:
        meta["load"] = monitor.stop()
        if progress:
            progress.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        samples = store.samples()
        engaged = {
            w: engagement(a, b, {s: observed.get((w, s)) for s in "AB"})
            if observe and w in observed_cells
            else {
                "status": "n/a",
                "detail": "command workload: no stats run"
                if w not in observed_cells
                else "no hakmem side"
                if spec.observe
                else "not observed",
            }
            for w, (a, b) in cells.items()
        }
        comparisons, roles = analyse(samples, list(cells), spec, own)
        for c in comparisons:
            role = roles.get((c.workload, c.metric), roles.get(c.metric))
            if role == "primary" and c.source == "pairs":
                c.seconds = round(pair_seconds.get(c.workload, 0.0), 3)
                if stopper is not None:
                    apply_stop(c, stopper)
                elif c.verdict == st.INCONCLUSIVE:
                    fixed_n_pairs_needed(c, spec.threshold_pct)
        failures = failures_by_workload(samples, list(cells), spec)
        for c in comparisons:
            role = roles.get((c.workload, c.metric), roles.get(c.metric))
            if role == "primary" and engaged[c.workload]["status"] == "not-engaged":
                c.verdict = st.NOT_ENGAGED
            if role == "primary" and failures[c.workload].verdict:
                c.verdict = failures[c.workload].verdict  # survivors never decide
        result = ABResult(
            out=store.path,
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
            noise_warning=noise_warning,
            load=meta["load"],
            iterations=meta["iterations"],
            pairs_seconds=pairs_seconds,
            interrupted=interrupted,
            stopped_by=interrupts.describe() if interrupted else "",
            shas=shas,
            changed_libraries=sorted(
                {
                    side["preload"]
                    for per_workload in meta["cells"].values()
                    for side in per_workload.values()
                    if side["preload"] and _sha256(Path(side["preload"])) != side["preload_sha256"]
                }
            ),
        )
        meta["changed_libraries"] = result.changed_libraries
        meta["finished"] = not interrupted
        meta["load_avg_1min_end"] = os.getloadavg()[0]  # noise context: other work on the VM
        meta["n_samples"] = len(samples)
        meta["pairs_seconds"] = round(pairs_seconds, 3)
        meta["verdicts"] = result.verdicts()
        if continued:
            meta["continuations"][-1]["after"] = {
                c.workload: {"verdict": c.verdict, "n_pairs": c.n_pairs, "stop": c.stop}
                for c in result.primary()
            }
        result.history = _history(meta)
        write_outputs(result, samples)
        store.write_meta(meta)
    return result


def _history(meta: dict) -> list[str]:
    """One line per call that measured into the directory: the start, each resume and each
    continuation (its budget and the verdicts before and after)."""
    spec = meta.get("spec", {})
    lines = [f"{meta.get('date')}: started, seed {spec.get('seed')}"]
    conts = iter(meta.get("continuations", []))
    for r in meta.get("resumed", []):
        if r.get("how") != "--continue":
            lines.append(f"{r['date']}: resumed (--resume), the stored samples kept")
            continue
        c = next(conts, {})
        before = ", ".join(f"{w} {v['verdict']}" for w, v in c.get("before", {}).items())
        after = ", ".join(
            f"{w} {v['verdict']} at {v['n_pairs']} pairs" for w, v in c.get("after", {}).items()
        )
        lines.append(
            f"{r['date']}: continued (--continue, budget {c.get('max_time_s')} s) from "
            f"{before or 'an unfinished run'} to {after or 'an interrupted continuation'}"
        )
    return lines


def failures_by_workload(samples: list[dict], workloads: list[str], spec: ABSpec) -> dict:
    """workload -> stats.Failures of its judged samples (the measured pairs, or the
    instruction counts): FAILED when one side failed more or otherwise than the other."""
    phase = "instructions" if spec.metric == "instructions" else "measure"
    out = {}
    for w in workloads:
        judged = [s for s in samples if s["workload"] == w and s["phase"] == phase]
        out[w] = st.failures(*([s for s in judged if s.get("side") == x] for x in "AB"))
    return out


def _args(spec: ABSpec, cell: Cell, slot) -> list | None:
    """The harness arguments of a slot: the cell's own, or with calibration's --extra-ops."""
    if spec.extra_ops is None:
        return None
    from hakbench.experiments.calibrate import extra_ops_arg

    k = spec.extra_ops if slot.side == "B" else spec.baseline_extra_ops
    return [*cell.workload.args, *extra_ops_arg(k)]


def _sequential_pairs(spec: ABSpec, cells: dict, run_slot, stopper, own: dict) -> None:
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
            stopper.add(w, math.log(r[0]) if len(r) else None)
            if not ok and st.failures(measured[w]["A"], measured[w]["B"]).verdict:
                stopper.stop(w, "failed", st.FAILED)
        if not stopper.end_round():
            return


STOP_WHY = {
    "decided": "decided",
    "drift": "the looks' intervals stopped overlapping (drift): more pairs will not decide",
    "budget": "the budget ran out",
    "failed": "a side failed",
    "interrupted": "interrupted",
}


def apply_stop(c: st.Comparison, stopper) -> None:
    """The primary comparison of a sequential A/B as its stopping rule left it: the median
    and the confidence sequence (as ratios), the anytime p and its Holm adjustment, the
    verdict, why it stopped, and for INCONCLUSIVE the pairs (and seconds) that would decide."""
    s = stopper.stops[c.workload]
    look = s.state.last
    c.stop = s.reason or ""
    if look is None:
        return
    c.ratio, c.ci_low, c.ci_high = (math.exp(x) for x in (look.estimate, look.low, look.high))
    c.decide_low, c.decide_high = (math.exp(x) for x in look.equivalence())
    c.p_value, c.p_holm, c.n_pairs = look.p_anytime, s.p_holm, look.n
    c.verdict = s.verdict
    if s.verdict == st.INCONCLUSIVE:
        c.pairs_needed = s.pairs_needed
        c.seconds_needed = _more_seconds(c)


def fixed_n_pairs_needed(c: st.Comparison, threshold_pct: float) -> None:
    """For an INCONCLUSIVE fixed-count comparison: the pairs at which its CI, narrowing as
    1/sqrt(n), would likely decide (and the seconds that takes at this A/B's pace)."""
    if c.n_pairs < 2 or not all(x > 0 for x in (c.ratio, c.ci_low, c.ci_high)):
        return
    look = seq.Look(c.n_pairs, math.log(c.ratio), math.log(c.ci_low), math.log(c.ci_high), 1.0)
    c.pairs_needed = seq.pairs_to_decide(
        look, math.log1p(threshold_pct / 100), near=0.0, rate=lambda n: 1 / math.sqrt(n)
    )
    c.seconds_needed = _more_seconds(c)


def _more_seconds(c: st.Comparison) -> float | None:
    if c.pairs_needed is None or not c.n_pairs or not c.seconds:
        return None
    return round(max(0, c.pairs_needed - c.n_pairs) * c.seconds / c.n_pairs, 1)


def noise_warning_for(spec: ABSpec) -> str | None:
    """The latest calibration's warning when the threshold is below what the pairs can see.
    Calibration measures the noise of throughput pairs, so other metrics get no warning."""
    if spec.metric != "throughput" or spec.sequential:
        return None  # a sequential A/B says INCONCLUSIVE itself when the noise is too high
    from hakbench.experiments.calibrate import noise_warning

    return noise_warning(spec.threshold_pct, spec.pairs)


def unmeasured(samples: list[dict]) -> list[str]:
    """Metrics that no ok measured or perf run had (hardware counters here, for instance)."""
    ok = [s for s in samples if s["status"] == "ok" and s["phase"] in ("measure", "perf")]
    missing = {u for s in ok for u in s.get("unavailable", [])}
    return sorted(missing - {m for s in ok for m in s["metrics"]})


def perf_counter_table(samples: list[dict], workloads: list[str]) -> list:
    """Per workload and perf metric: the median of each side's perf runs and their ratio.
    Not paired and not judged: a few runs per side describe, they do not decide."""
    rows = []
    for w in workloads:
        runs = [s for s in samples if s["phase"] == "perf" and s["workload"] == w]
        runs = [s for s in runs if s["status"] == "ok" and s.get("launcher") == "perf"]
        for m in PERF_SOURCED:
            values = {
                x: [s["metrics"][m] for s in runs if s["side"] == x and m in s["metrics"]]
                for x in "AB"
            }
            if not (values["A"] and values["B"]):
                continue
            a, b = statistics.median(values["A"]), statistics.median(values["B"])
            ratio = b / a if a else math.nan
            n = min(len(values["A"]), len(values["B"]))
            row = st.Comparison(
                w, m, a, b, ratio, math.nan, math.nan, math.nan, n, METRICS[m].higher_is_better
            )
            row.verdict, row.source = "", "perf"
            rows.append(row)
    return rows


def _sha256(path: Path | None) -> str | None:
    """Identity of a preloaded library: a rebuild during a run shows up as a changed hash."""
    if path is None or not Path(path).exists():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _observe(cell: Cell, spec: ABSpec) -> dict:
    """The stats-variant run of a hakmem cell: its counter groups, not timed."""
    stats_cell = Cell(
        cell.allocator, "stats", cell.profile, cell.workload, cell.env, cell.build, cell.sets
    )
    return run_sample(stats_cell, phase="observe", perf=False, stats=True, timeout=spec.timeout)


def primaries(cells: dict, metric: str) -> dict:
    """workload -> its judged metric when that is not the spec's ``metric``: a command
    workload's own time or rate (hakbench.core.commandspec), throughput for a threaded
    workload asked for CPU time (ab_spec.judged_metric)."""
    if metric == "instructions":
        return {}
    judged = {w: judged_metric(metric, a.workload) for w, (a, _) in cells.items()}
    return {w: m for w, m in judged.items() if m != metric}


def analyse(samples: list[dict], workloads: list[str], spec: ABSpec, own_primary=None):
    """Comparisons of every metric both sides have; primary and guardrails judged.

    ``own_primary``: workload -> metric for workloads judged on their own metric (command
    workloads); their roles are keyed ``(workload, metric)``, the others' by metric."""
    comparisons = []
    roles: dict = {}
    own_primary = own_primary or {}
    if spec.metric == "instructions":
        roles["ir_per_op"] = "primary"
        for w in workloads:
            vals = {
                s["side"]: s["metrics"]["ir_per_op"]
                for s in samples
                if s["workload"] == w and s["phase"] == "instructions" and s["status"] == "ok"
            }
            a, b = vals.get("A", math.nan), vals.get("B", math.nan)
            ratio = b / a if a and not math.isnan(a) else math.nan
            c = st.Comparison(
                w, "ir_per_op", a, b, ratio, ratio, ratio, math.nan, len(vals) // 2, False
            )
            c.source = "instructions"
            c.verdict = st.exact_verdict(
                ratio, threshold_pct=spec.threshold_pct, higher_is_better=False
            )
            comparisons.append(c)
        return comparisons, roles
    for w in workloads:
        primary = own_primary.get(w, spec.metric)
        pairs = complete_pairs(samples, w)
        names = [m for m in METRICS if any(m in a["metrics"] for a, _ in pairs)]
        for m in names:
            both = [
                (a["metrics"][m], b["metrics"][m])
                for a, b in pairs
                if m in a["metrics"] and m in b["metrics"]
            ]
            role = "primary" if m == primary else "guardrail" if m in GUARDRAILS else "info"
            roles[(w, m) if w in own_primary else m] = role
            comparisons.append(
                st.compare_paired(
                    w, m, [x for x, _ in both], [y for _, y in both], METRICS[m].higher_is_better
                )
            )
        if not pairs:
            roles[(w, primary) if w in own_primary else primary] = "primary"
            comparisons.append(
                st.Comparison(w, primary, *([math.nan] * 6), 0, METRICS[primary].higher_is_better)
            )

    def role(c):
        return roles.get((c.workload, c.metric), roles.get(c.metric, "info"))

    st.judge([c for c in comparisons if role(c) != "info"], spec.threshold_pct)
    for c in comparisons:
        if role(c) == "info":
            c.verdict = ""
    return comparisons, roles


def write_outputs(result: ABResult, samples: list[dict]) -> None:
    from hakbench.experiments.calibrate import calibration_line
    from hakbench.report.markdown import write_ab_report
    from hakbench.report.plots import plot_paired_ratios

    out = result.out
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        for c in (*result.comparisons, *result.perf_counters):
            w.writerow(
                {
                    "workload": c.workload,
                    "metric": c.metric,
                    "source": c.source,
                    "role": result.role(c) if c.source != "perf" else "info",
                    "a_median": c.a_median,
                    "b_median": c.b_median,
                    "ratio": c.ratio,
                    "ci_low": c.ci_low,
                    "ci_high": c.ci_high,
                    # the interval the verdict was decided on: sequential, its one-sided
                    # bounds; a fixed count, its CI
                    "decide_low": c.ci_low if c.decide_low is None else c.decide_low,
                    "decide_high": c.ci_high if c.decide_high is None else c.decide_high,
                    "p_value": c.p_value,
                    "p_holm": c.p_holm,
                    "n_pairs": c.n_pairs,
                    "verdict": c.verdict,
                    "seconds": c.seconds,
                    "stop": c.stop,
                    "pairs_needed": c.pairs_needed,
                    "seconds_needed": c.seconds_needed,
                }
            )
    write_json(out / "engagement.json", result.engagement)
    if result.spec.metric in TIMED_METRICS:
        write_pyperf(samples, out / "pyperf")
        plot_paired_ratios(
            samples,
            {
                w: primaries(result.cells, result.spec.metric).get(w, result.spec.metric)
                for w in result.cells
            },
            list(result.cells),
            out / "paired_ratios.png",
            threshold_pct=result.spec.threshold_pct,
            bounds={
                c.workload: (c.ratio, c.decide_low, c.decide_high)
                for c in result.primary()
                if c.decide_low is not None
            },
        )
    fixed_count = result.spec.metric == "throughput" and not result.spec.sequential
    calibration = calibration_line() if fixed_count else ""  # a fixed count's noise check
    write_ab_report(result, samples, out / "report.md", calibration=calibration)
