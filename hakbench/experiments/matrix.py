"""Matrices run: a matrix's cells (``make_matrix_cells``), run interleaved round by round
(``plan``: every round runs every cell once in a seeded shuffle, each cell back to back with
its reference) through the engine, resumed by cell, phase, round and pair, and summarised
(``write_dir_summary``). The file format is ``hakbench.experiments.matrix_spec``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core.allocators import resolve_allocator
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine import schedule
from hakbench.experiments.matrix_spec import (
    METRIC_OF,
    MatrixSpec,
    coords_label,
    expand_coords,
    ordered_coords,
)
from hakbench.tables.matrix_summary import (
    CellSummary,
    reference_index,
    summarize,
    write_summary_csv,
)


@dataclass(frozen=True)
class MatrixCell:
    """One cell of a matrix: its coordinates on the axes and the runnable
    ``hakbench.core.cell.Cell``.

    ``coords`` holds only the axes that apply: a reference allocator has no variant,
    profile or ``HAKMEM_*`` coordinate.
    """

    coords: tuple  # ((axis, value), ...) in axis order
    cell: object = field(compare=False, default=None)

    @property
    def coord(self) -> dict:
        return dict(self.coords)

    @property
    def key(self) -> str:
        return self.cell.key

    @property
    def label(self) -> str:
        return coords_label(self.coord)


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str


@dataclass(frozen=True)
class PlannedSample:
    round: int
    phase: str  # "warmup" | "measure" | "instructions"
    index: int  # into the matrix's cell list
    pair: int | None = None  # index of the compared cell when in a pair with its reference
    side: str | None = None  # "A" (the reference) or "B" (the compared cell) in a pair


# How the samples of a run are ordered: 1 ran each round's cells in one shuffle and paired
# a cell with its reference by round number; 2 runs each cell back to back with its
# reference (adjacent pairs, hakbench.engine.schedule) and records pair and side on the samples.
PLAN_VERSION = 2


def make_matrix_cells(
    spec: MatrixSpec, *, build: Path | None = None
) -> tuple[list[MatrixCell], list[Skipped]]:
    """Runnable cells, and the ones skipped because their allocator is not installed/built."""
    from hakbench.engine.cells import make_cell

    cells: list[MatrixCell] = []
    skipped: list[Skipped] = []
    for coord in expand_coords(spec):
        alloc = resolve_allocator(coord["allocator"], coord.get("variant", "fast"), build)
        label = coords_label(coord)
        if not alloc.available:
            if all(s.label != label for s in skipped):
                skipped.append(Skipped(label, alloc.missing_reason or "not available"))
            continue
        sets = {k: v for k, v in coord.items() if k.startswith("HAKMEM_")}
        cell = make_cell(
            coord["allocator"],
            coord["workload"],
            variant=coord.get("variant", "fast"),
            profile=coord.get("profile"),
            sets=sets or None,
            build=build,
        )
        cells.append(MatrixCell(tuple(ordered_coords(coord)), cell))
    return cells, skipped


def plan(
    n_cells: int,
    runs: int,
    warmup: int,
    seed: int,
    phase: str = "measure",
    instructions: bool = False,
    partner: list[int | None] | None = None,
) -> list[PlannedSample]:
    """Rounds 0..warmup-1 are warm-up (discarded), then ``runs`` measured rounds, each in a
    seeded shuffle (hakbench.engine.schedule) in which a cell with a reference (``partner[i]``, from
    ``reference_index``) runs back to back with it; with ``instructions`` one more round of
    instruction counts (phase "instructions", round 0, unpaired: a count is exact, so it
    needs neither warm-up, repeats nor a neighbour in time)."""
    out = [
        PlannedSample(s.round, s.phase, s.cell, s.pair, s.side)
        for s in schedule.plan(
            n_cells, runs, seed=seed, warmup=warmup, phase=phase, partner=partner
        )
    ]
    if instructions:
        counts = schedule.plan(n_cells, 1, seed=seed, phase="instructions", salt="instructions")
        out.extend(PlannedSample(0, s.phase, s.cell) for s in counts)
    return out


def take_sample(cell, phase: str) -> dict:
    """One sample of ``cell``: a timed process, or an instruction count for that phase.

    Timed rounds run the harness directly (rusage from wait4), never under ``perf stat``:
    wrapping every process in perf was measured to double the spread of paired throughput
    ratios on this VM (see ``hakbench ab --perf``).
    """
    from hakbench.engine.runner import instruction_sample, run_sample

    if phase == "instructions":
        return instruction_sample(cell, phase)
    return run_sample(cell, phase=phase, perf=False)


def cells_meta(cells: list[MatrixCell]) -> list[dict]:
    """What meta.json records per cell, enough to rebuild a report from samples alone."""
    out = []
    for mc in cells:
        argv, _ = mc.cell.command()
        out.append(
            {
                "key": mc.key,
                "label": mc.label,
                "coords": mc.coord,
                "workload_description": mc.cell.workload.description,
                "primary_metric": mc.cell.workload.primary_metric,
                "groups": list(mc.cell.workload.groups),
                "argv": [Path(argv[0]).name, *argv[1:]],
                "env": dict(sorted(mc.cell.env.items())),
            }
        )
    return out


@dataclass
class MatrixRun:
    spec: MatrixSpec
    out_dir: Path
    cells: list[MatrixCell]
    skipped: list[Skipped]
    meta: dict
    summaries: list[CellSummary]
    ran: int  # samples taken by this invocation
    reused: int  # samples found in the run directory (--resume)


def _meta_cells_match(meta: dict, cells: list[MatrixCell], where: Path) -> None:
    recorded = [c["key"] for c in meta.get("cells", [])]
    wanted = [c.key for c in cells]
    if recorded != wanted:
        missing = sorted(set(wanted) - set(recorded)) or sorted(set(recorded) - set(wanted))
        raise UsageError(
            f"{where} was run with other cells ({', '.join(missing[:3])} differ); "
            "resume it with the same matrix file, or start a new --out"
        )


def _runnable_cells(spec: MatrixSpec, metric: str, build, shard) -> tuple[list, list, dict | None]:
    """(the cells to run, the skipped ones, the shard record): bad input in one line."""
    cells, skipped = make_matrix_cells(spec, build=build)
    commands = sorted({c.cell.workload.name for c in cells if c.cell.workload.command})
    if metric == "instructions" and commands:
        raise UsageError(
            f"metric instructions counts harness ops; command workload(s) {', '.join(commands)} "
            "have none (use metric throughput: they are judged on their own time)"
        )
    if not cells:
        reasons = "; ".join(f"{s.label}: {s.reason}" for s in skipped)
        raise MeasurementError(f"matrix {spec.name}: no cell can run ({reasons})")
    if not shard:
        return cells, skipped, None
    from hakbench.experiments.shard import shard_cells

    picked = shard_cells(reference_index([c.coord for c in cells], spec.reference), *shard)
    shard_info = {"k": shard[0], "n": shard[1], "cells": picked, "of": len(cells)}
    return [cells[i] for i in picked], skipped, shard_info


def _matrix_record(spec: MatrixSpec, metric: str, runs: int, instructions: bool) -> dict:
    """What meta.json keeps of the matrix: its text and the plan this run follows."""
    return {
        "name": spec.name,
        "description": spec.description,
        "file": str(spec.path) if spec.path else None,
        "text": spec.text,
        "runs": runs,
        "warmup": spec.warmup if metric == "throughput" else 0,
        "seed": spec.seed,
        "metric": metric,
        "reference": spec.reference,
        "instructions": bool(instructions and metric == "throughput"),
        "plan": PLAN_VERSION,
    }


def _resumable(meta: dict, cells, shard_info, metric: str, out_dir: Path) -> None:
    """That a stored matrix run ran these cells, this shard, this metric and plan (one
    line, exit 2, otherwise); ``engine.open_run`` then checks tree, build and machine."""
    _meta_cells_match(meta, cells, out_dir)
    if meta.get("shard") != shard_info:
        raise UsageError(f"--resume {out_dir}: it ran shard {meta.get('shard')}, not this one")
    if meta["matrix"]["metric"] != metric:
        raise UsageError(f"--resume {out_dir}: it measured {meta['matrix']['metric']}")
    if meta["matrix"].get("plan", 1) != PLAN_VERSION:
        old = meta["matrix"].get("plan", 1)
        raise UsageError(
            f"--resume {out_dir}: it ran in plan {old}'s order, not plan {PLAN_VERSION}'s "
            "(adjacent pairs); start a new --out"
        )


def run_matrix(
    spec: MatrixSpec,
    out_dir: Path,
    *,
    runs: int | None = None,
    metric: str | None = None,
    resume: bool = False,
    build: Path | None = None,
    command: list[str] | str | None = None,
    on_sample: Callable[[int, int, dict], None] | None = None,
    instructions: bool | None = None,
    shard: tuple[int, int] | None = None,
) -> MatrixRun:
    """Run every cell ``runs`` times, round by round, appending each sample as it finishes.

    With ``resume`` the samples already in ``out_dir`` (by cell key and round) are kept and
    not run again; the round orders are seeded, so the rest of the plan is unchanged.
    ``on_sample(done, total, sample)`` reports progress, counting timed samples and
    instruction counts separately. ``instructions`` (default: the
    file's) adds a round of instruction counts to a throughput matrix. ``shard`` (K, N)
    runs only shard K of N (``hakbench.experiments.shard``). KeyboardInterrupt propagates after the
    finished samples are on disk.
    """
    from hakbench.engine import engine, interrupts
    from hakbench.engine.load import LoadMonitor

    metric = metric or spec.metric
    if metric not in METRIC_OF:
        raise UsageError(f"metric must be one of {', '.join(METRIC_OF)}, got {metric!r}")
    cells, skipped, shard_info = _runnable_cells(spec, metric, build, shard)
    out_dir = Path(out_dir)
    store, meta, previous = engine.open_run(
        out_dir,
        _fresh_meta(spec, out_dir, cells, skipped, shard_info, metric, runs, instructions, command),
        resume=resume,
        ident=engine.identity((c.cell for c in cells), out_dir),
        check=lambda stored: _resumable(stored, cells, shard_info, metric, out_dir),
    )
    runs = runs or meta["matrix"]["runs"]  # resumed: by default, finish the plan it started
    meta["matrix"]["runs"] = max(runs, meta["matrix"]["runs"])
    store.write_meta(meta)
    todo = _todo(cells, meta, runs, metric, previous)
    # progress counts timed samples and instruction counts apart: they differ 50-fold in cost
    group_size = Counter(p.phase == "instructions" for p, _ in todo)
    group_done: Counter = Counter()

    def step(sample: dict) -> None:
        group = sample["phase"] == "instructions"
        group_done[group] += 1
        if on_sample:
            on_sample(group_done[group], group_size[group], sample)

    session = engine.Session(store, on_sample=step)
    monitor = LoadMonitor().start()
    for p, tags in todo:
        session.take(tags, lambda p=p: take_sample(cells[p.index].cell, p.phase))
    with interrupts.finishing():  # the summary of what finished: a stop cuts nothing here
        meta["load"] = monitor.stop()  # this session's (a resumed run records its last one)
        store.write_meta(meta)
        summaries = write_dir_summary(out_dir)
    return MatrixRun(spec, out_dir, cells, skipped, meta, summaries, len(todo), len(previous))


def _fresh_meta(spec, out_dir, cells, skipped, shard_info, metric, runs, instructions, command):
    """meta.json of a new run of this matrix (a resumed run keeps its own)."""
    from hakbench.engine.meta import collect_meta

    if instructions is None:
        instructions = spec.instructions
    return collect_meta(
        command,
        kind="matrix",
        run_id=out_dir.name,
        matrix=_matrix_record(spec, metric, runs or spec.runs, instructions),
        cells=cells_meta(cells),
        skipped=[{"label": s.label, "reason": s.reason} for s in skipped],
        shard=shard_info,
    )


def _todo(cells, meta: dict, runs: int, metric: str, previous: list[dict]) -> list[tuple]:
    """The planned samples not yet stored, each with its tags: (PlannedSample, tags)."""
    from hakbench.engine import engine

    m = meta["matrix"]
    phase = "measure" if metric == "throughput" else "instructions"
    # timed rounds pair each cell with its reference; exact instruction counts need no pair
    partner = reference_index([c.coord for c in cells], m["reference"])
    planned = plan(
        len(cells),
        runs,
        m["warmup"],
        m["seed"],
        phase,
        m.get("instructions", False),
        partner=partner if phase == "measure" else None,
    )

    def tags(p: PlannedSample) -> dict:
        return {
            "cell": cells[p.index].key,
            "phase": p.phase,
            "round": p.round,
            "pair": _pair_key(cells, p),
            "side": p.side,
            "workload": cells[p.index].cell.workload.name,
            "run_id": meta["run_id"],
        }

    done = {engine.key(s) for s in previous}
    return [
        (p, tags(p))
        for p in planned
        if engine.key(tags(p)) not in done
        # instruction counts are per harness op: a command workload (a real program) has none
        and not (p.phase == "instructions" and cells[p.index].cell.workload.command)
    ]


def _pair_key(cells: list[MatrixCell], p: PlannedSample) -> str | None:
    """A sample's ``pair``: the key of the compared cell (keys, unlike indices, survive
    sharding and merging)."""
    return cells[p.pair].key if p.pair is not None else None


def write_dir_summary(out_dir: Path) -> list[CellSummary]:
    """summary.csv of a matrix run directory from what it holds (also after an interrupt)."""
    from hakbench.engine.store import load_samples, read_json

    meta = read_json(out_dir / "meta.json")
    m = meta["matrix"]
    samples = (
        load_samples(out_dir / "samples.jsonl") if (out_dir / "samples.jsonl").exists() else []
    )
    metrics = [METRIC_OF[m["metric"]]]
    if m.get("instructions") and "ir_per_op" not in metrics:
        metrics.append("ir_per_op")  # the once-per-cell counts taken after the timed rounds
    harness = [c for c in meta["cells"] if c.get("primary_metric", "throughput") == "throughput"]
    summaries = []
    for metric in metrics:
        summaries += summarize(samples, harness, metric, m["reference"])
    # command workloads: their own time or rate, and peak RSS (judged like time, see ab)
    own = [c for c in meta["cells"] if c not in harness]
    if m["metric"] == "throughput":
        for metric in sorted({c["primary_metric"] for c in own}):
            chosen = [c for c in own if c["primary_metric"] == metric]
            summaries += summarize(samples, chosen, metric, m["reference"])
        if own:
            summaries += summarize(samples, own, "maxrss_kb", m["reference"])
    write_summary_csv(out_dir / "summary.csv", summaries)
    return summaries
