"""Matrices: cross axes into cells, run them interleaved round by round, resume, summarise.

A matrix file (``profiles/matrices/*.toml``)::

    name = "scorecard"
    runs = 7              # measured rounds; every round runs every cell once
    quick_runs = 3        # rounds for a quick refresh (optional)
    warmup = 1            # rounds run first and discarded
    seed = 1              # seeds the shuffled cell order of each round
    metric = "throughput" # or "instructions" (callgrind / perf Ir per op)
    instructions = true   # with throughput: also count Ir/op once per cell, after the rounds
    reference = { allocator = "mimalloc" }   # ratios are to this cell, same workload

    [axes]
    allocator = ["hakmem", "system", "mimalloc"]
    variant = ["fast"]
    profile = ["C7_SAFE", "BALANCED"]
    workload = ["mixed", "tiny_hot", "@apps"]   # @GROUP: every workload in that group
    HAKMEM_SOME_SWITCH = [0, 1]   # any HAKMEM_* key is an axis

Variant, profile and ``HAKMEM_*`` axes describe libhakmem only: for a reference allocator
they collapse, so it gets one cell per workload. Why rounds: on this VM the speed drifts
between two modes every few seconds (docs/measuring.md), so
each round runs every cell once in a fresh seeded order, and cells are compared round by
round rather than as one block after another. The summary table (medians, CIs, ratios to
the reference, summary.csv) is ``hakbench.tables.matrix_summary``.
"""

from __future__ import annotations

import datetime as _dt
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core.allocators import VARIANTS, is_path_spec, resolve_allocator
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.core.profiles import (
    expand_workloads,
    load_options,
    load_profiles,
    load_workloads,
    resolve_profile,
    validate_env,
)
from hakbench.engine import schedule
from hakbench.tables.matrix_summary import (
    CellSummary,
    reference_index,
    summarize,
    write_summary_csv,
)

METRIC_OF = {"throughput": "throughput", "instructions": "ir_per_op"}
NAMED_AXES = ("allocator", "variant", "profile", "workload")
TOP_KEYS = {
    "gate",  # read by hakbench gate, not by the matrix
    "name",
    "description",
    "runs",
    "quick_runs",
    "warmup",
    "seed",
    "metric",
    "reference",
    "axes",
    "instructions",
}


@dataclass(frozen=True)
class MatrixSpec:
    name: str
    description: str
    axes: dict  # axis -> tuple of values (strings), in file order
    runs: int
    warmup: int
    seed: int
    metric: str  # "throughput" | "instructions"
    reference: dict  # axis -> value selecting the reference cell of each workload
    quick_runs: int
    instructions: bool = False  # one instruction-count sample per cell after the timed rounds
    path: Path | None = None
    text: str = ""


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


def coords_label(coord: Mapping[str, str]) -> str:
    """``hakmem:fast/C7_SAFE[HAKMEM_X=1]`` or ``mimalloc`` (the workload is not part of it)."""
    label = coord["allocator"]
    if coord.get("variant"):
        label += f":{coord['variant']}"
    if coord.get("profile"):
        label += f"/{coord['profile']}"
    sets = [f"{k}={v}" for k, v in coord.items() if k.startswith("HAKMEM_")]
    if sets:
        label += "[" + ",".join(sets) + "]"
    return label


def _axis_value(axis: str, value) -> str:
    """TOML value -> the string a cell uses: booleans as 1/0 (like profiles), names in the
    case the lab spells them (profiles upper, workloads and allocators lower)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if axis == "profile":
        return text.upper()
    if axis == "allocator" and is_path_spec(text):
        return text  # a library path keeps its case
    return text.lower() if axis in ("allocator", "workload") else text


def _positive_int(data: dict, key: str, default: int, where: str, minimum: int = 1) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_matrix(text: str, where: str = "matrix", path: Path | None = None) -> MatrixSpec:
    """Parse and shape-check a matrix; names are checked against the lab by ``expand``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: malformed TOML: {e}") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(TOP_KEYS)}")
    raw_axes = data.get("axes")
    if not isinstance(raw_axes, dict) or not raw_axes:
        raise UsageError(f"{where}: needs an [axes] table")
    axes: dict = {}
    for axis, values in raw_axes.items():
        if axis not in NAMED_AXES and not axis.startswith("HAKMEM_"):
            raise UsageError(
                f"{where}: unknown axis '{axis}'; axes are {', '.join(NAMED_AXES)} or HAKMEM_* keys"
            )
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}: axis '{axis}' must be a non-empty list")
        norm = [_axis_value(axis, v) for v in values]
        if len(set(norm)) != len(norm):
            raise UsageError(f"{where}: axis '{axis}' repeats a value: {norm}")
        axes[axis] = tuple(norm)
    for axis in ("allocator", "workload"):
        if axis not in axes:
            raise UsageError(f"{where}: [axes] needs '{axis}'")
    metric = data.get("metric", "throughput")
    if metric not in METRIC_OF:
        raise UsageError(f"{where}: metric must be one of {', '.join(METRIC_OF)}, got {metric!r}")
    reference = data.get("reference", {"allocator": axes["allocator"][0]})
    if not isinstance(reference, dict) or "allocator" not in reference:
        raise UsageError(f"{where}: reference must be a table naming at least an allocator")
    reference = {str(k): _axis_value(str(k), v) for k, v in reference.items()}
    for axis, value in reference.items():
        if axis not in axes or value not in axes[axis]:
            raise UsageError(f"{where}: reference {axis}={value} is not a value of that axis")
    runs = _positive_int(data, "runs", 5, where)
    instructions = data.get("instructions", False)
    if not isinstance(instructions, bool):
        raise UsageError(f"{where}: instructions must be true or false")
    return MatrixSpec(
        name=str(data.get("name") or (path.stem if path else "matrix")),
        description=str(data.get("description", "")),
        axes=axes,
        runs=runs,
        warmup=_positive_int(data, "warmup", 1, where, minimum=0),
        seed=_positive_int(data, "seed", 1, where, minimum=0),
        metric=metric,
        reference=reference,
        quick_runs=_positive_int(data, "quick_runs", min(3, runs), where),
        instructions=instructions,
        path=path,
        text=text,
    )


def load_matrix(path: Path | str) -> MatrixSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read matrix {path}: {e.strerror}") from None
    return parse_matrix(text, str(path), path)


def expand_coords(spec: MatrixSpec, *, validate_options: bool = True) -> list[dict]:
    """Every cell's coordinates, workload outermost; unknown axis values raise UsageError.

    Reference allocators collapse the hakmem-only axes. ``validate_options`` checks the
    ``HAKMEM_*`` axes against the built options table (``make_cell`` checks profiles).
    """
    workloads = load_workloads()
    axes = {**spec.axes, "workload": tuple(expand_workloads(spec.axes["workload"], workloads))}
    for a in axes["allocator"]:
        resolve_allocator(a)  # unknown name -> UsageError naming it
    for v in axes.get("variant", ()):
        if v not in VARIANTS:
            raise UsageError(f"unknown variant '{v}' in axis variant; known: {', '.join(VARIANTS)}")
    profiles = load_profiles()
    for p in axes.get("profile", ()):
        resolve_profile(p, profiles)
    set_axes = [a for a in axes if a.startswith("HAKMEM_")]
    if validate_options and set_axes:
        options = load_options()
        for axis in set_axes:
            for value in axes[axis]:
                validate_env({axis: value}, options, f"axis {axis}")

    hakmem_combos: list[list[tuple]] = [[]]
    for axis, values in (
        ("variant", axes.get("variant", ("fast",))),
        ("profile", axes.get("profile", ())),
        *((a, axes[a]) for a in set_axes),
    ):
        if values:
            hakmem_combos = [[*c, (axis, v)] for c in hakmem_combos for v in values]

    out = []
    for workload in axes["workload"]:
        for alloc in axes["allocator"]:
            name = resolve_allocator(alloc).name
            combos = hakmem_combos if name == "hakmem" else [[]]
            for combo in combos:
                coord = {"workload": workload, "allocator": name, **dict(combo)}
                if coord not in out:
                    out.append(coord)
    return out


def make_matrix_cells(
    spec: MatrixSpec, *, build: Path | None = None
) -> tuple[list[MatrixCell], list[Skipped]]:
    """Runnable cells, and the ones skipped because their allocator is not installed/built."""
    from hakbench.core.cell import make_cell

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
        cells.append(MatrixCell(tuple(_ordered(coord)), cell))
    return cells, skipped


def _ordered(coord: Mapping[str, str]) -> list[tuple[str, str]]:
    first = [(a, coord[a]) for a in NAMED_AXES if a in coord]
    return first + [(k, v) for k, v in coord.items() if k not in NAMED_AXES]


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
    from hakbench.engine.meta import collect_meta
    from hakbench.engine.store import RunStore, read_json

    metric = metric or spec.metric
    if metric not in METRIC_OF:
        raise UsageError(f"metric must be one of {', '.join(METRIC_OF)}, got {metric!r}")
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
    shard_info = None
    if shard:
        from hakbench.experiments.shard import shard_cells

        picked = shard_cells(reference_index([c.coord for c in cells], spec.reference), *shard)
        shard_info = {"k": shard[0], "n": shard[1], "cells": picked, "of": len(cells)}
        cells = [cells[i] for i in picked]
    out_dir = Path(out_dir)
    samples_file = out_dir / "samples.jsonl"
    meta_file = out_dir / "meta.json"
    ident = engine.identity((c.cell for c in cells), out_dir)
    if resume:
        if not meta_file.exists():
            raise UsageError(f"--resume {out_dir}: no meta.json there, nothing to resume")
        meta = read_json(meta_file)
        _meta_cells_match(meta, cells, out_dir)
        if "identity" in meta:  # (runs before the identity was recorded resume unchecked)
            engine.check_identity(meta["identity"], ident, out_dir)
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
        runs = runs or meta["matrix"]["runs"]  # by default, finish the plan it started
        meta["matrix"]["runs"] = max(runs, meta["matrix"]["runs"])
        meta.setdefault("resumed", []).append(
            _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        )
    else:
        if samples_file.exists():
            raise UsageError(
                f"{out_dir} already holds samples; pass --resume {out_dir} or a new --out"
            )
        runs = runs or spec.runs
        warmup = spec.warmup if metric == "throughput" else 0
        if instructions is None:
            instructions = spec.instructions
        meta = collect_meta(
            command,
            kind="matrix",
            run_id=out_dir.name,
            matrix={
                "name": spec.name,
                "description": spec.description,
                "file": str(spec.path) if spec.path else None,
                "text": spec.text,
                "runs": runs,
                "warmup": warmup,
                "seed": spec.seed,
                "metric": metric,
                "reference": spec.reference,
                "instructions": bool(instructions and metric == "throughput"),
                "plan": PLAN_VERSION,
            },
            cells=cells_meta(cells),
            skipped=[{"label": s.label, "reason": s.reason} for s in skipped],
            shard=shard_info,
            identity=ident,
        )
    store = RunStore(out_dir)
    store.write_meta(meta)
    previous = store.samples() if samples_file.exists() else []
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

    done = {engine.key(tags(p)) for p in planned} & {engine.key(s) for s in previous}
    todo = [
        p
        for p in planned
        if engine.key(tags(p)) not in done
        # instruction counts are per harness op: a command workload (a real program) has none
        and not (p.phase == "instructions" and cells[p.index].cell.workload.command)
    ]
    # progress counts timed samples and instruction counts apart: they differ 50-fold in cost
    group_size = Counter(p.phase == "instructions" for p in todo)
    group_done: Counter = Counter()

    def step(sample: dict) -> None:
        group = sample["phase"] == "instructions"
        group_done[group] += 1
        if on_sample:
            on_sample(group_done[group], group_size[group], sample)

    session = engine.Session(store, on_sample=step)
    monitor = LoadMonitor().start()
    for p in todo:
        session.take(tags(p), lambda p=p: take_sample(cells[p.index].cell, p.phase))
    with interrupts.finishing():  # the summary of what finished: a stop cuts nothing here
        meta["load"] = monitor.stop()  # this session's (a resumed run records its last one)
        store.write_meta(meta)
        summaries = write_dir_summary(out_dir)
    return MatrixRun(spec, out_dir, cells, skipped, meta, summaries, len(todo), len(previous))


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
