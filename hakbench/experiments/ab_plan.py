"""What an A/B runs: its cells (names, profiles and ``HAKMEM_*`` keys validated), each
workload's run length and why, the revisions it builds, the meta.json it starts with, the
spec a stored run recorded (``--resume``, ``--continue``), its perf-run slots and the harness
arguments of a slot. ``hakbench.experiments.ab`` runs the plan.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import asdict
from pathlib import Path

from hakbench.core.cell import Cell
from hakbench.core.errors import UsageError
from hakbench.core.profiles import Workload, expand_workloads, resolve_workload
from hakbench.engine import engine
from hakbench.engine.cells import make_cell
from hakbench.engine.launch import Launch
from hakbench.engine.meta import collect_meta
from hakbench.engine.runner import perf_usable
from hakbench.engine.schedule import ab_schedule
from hakbench.experiments.ab_spec import (
    DEFAULT_BUILD_LAYOUTS,
    DEFAULT_MAX_TIME_S,
    DEFAULT_PAIRS,
    DEFAULT_WARMUP_PAIRS,
    DEFAULT_WORKLOADS,
    PERF_MODES,
    TIMED_METRICS,
    ABSpec,
)
from hakbench.stats import sequential as seq


def workloads_of(spec: ABSpec) -> dict[str, Workload]:
    """The spec's workloads, groups expanded, each resolved once: name -> Workload. ``run_ab``
    resolves them here and hands them down (the builds, the checks, the cells)."""
    return {name: resolve_workload(name) for name in expand_workloads(spec.workloads)}


def run_length(spec: ABSpec, w: Workload):
    """(workload, what its iteration count is and why): ``--iters`` when given; for a timed
    metric, this machine's run-length choice (hakbench.experiments.runlength) when it has one;
    else the workload's own count. Command workloads and workloads without an iters_flag keep
    theirs."""
    from hakbench.experiments import runlength

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


def build_cells_why(spec: ABSpec, builds: dict, wls: dict | None = None) -> dict:
    """workload -> ((A, B), what its iteration count is and why). ``wls``: the spec's
    workloads resolved (``workloads_of``)."""
    cells = {}
    for resolved in (wls or workloads_of(spec)).values():
        w, why = run_length(spec, resolved)
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


def resolve_builds(spec: ABSpec, wls: dict | None = None) -> tuple[dict, dict]:
    """Each side's ``--rev`` built (only what the call runs, unless ``rev_build`` is full):
    (side -> build directory, side -> commit)."""
    builds, shas = {}, {}
    for side, rev in (("B", spec.rev), ("A", spec.baseline_rev)):
        if rev:
            from hakbench.engine.revs import build_at_rev

            rb = build_at_rev(rev, targets=rev_targets(spec, wls))
            builds[side], shas[side] = Path(rb.build_dir), rb.sha
    return builds, shas


def rev_targets(spec: ABSpec, wls: dict | None = None) -> tuple[str, ...] | None:
    """What a revision's build must make for this call (None: ``make build``, all of it):
    both sides' library variants, the stats variant when the call checks engagement in it,
    the options tool and the harness programs of its workloads. A revision is built in
    seconds, not the minute a whole build with its PGO training run takes."""
    if spec.rev_build == "full":
        return None
    from hakbench.engine.revs import fast_targets

    variants = {spec.variant, spec.baseline_variant or spec.variant}
    if spec.observe and spec.rev_build != "fast":
        variants.add("stats")
    found = list((wls or workloads_of(spec)).values())
    programs = tuple(sorted({w.program for w in found if not w.command}))
    return fast_targets(programs, tuple(variants))


def check_spec(spec: ABSpec, builds: dict | None = None) -> dict:
    """Validate everything a spec names (UsageError on the first problem); its cells."""
    return {w: ab for w, (ab, _) in check_spec_why(spec, builds).items()}


def check_spec_why(spec: ABSpec, builds: dict | None = None, wls: dict | None = None) -> dict:
    """``check_spec`` with each workload's iteration count and why (``build_cells_why``).
    ``wls``: the spec's workloads resolved (``workloads_of``)."""
    known = (*TIMED_METRICS, "instructions")
    if spec.metric not in known:
        raise UsageError(f"unknown metric '{spec.metric}'; known: {', '.join(known)}")
    check_layouts(spec)
    if spec.perf not in PERF_MODES:
        raise UsageError(f"unknown perf mode '{spec.perf}'; known: {', '.join(PERF_MODES)}")
    Launch.parse(spec.launch)
    if spec.metric == "task_clock_ms" and not (spec.perf == "each" and perf_usable()):
        raise UsageError(
            "--metric task-clock needs perf stat on every process (--perf each; perf missing?)"
        )
    wls = wls or workloads_of(spec)
    if spec.metric not in ("throughput", "cpu_throughput"):
        for name, w in wls.items():
            if w.command is not None:
                raise UsageError(
                    f"--metric {spec.metric} measures harness programs; command workload {name} "
                    f"is judged on its own {w.primary_metric} (drop --metric)"
                )
    if spec.extra_ops is not None and any(w.command is not None for w in wls.values()):
        raise UsageError("--extra-ops is a harness option: harness workloads only")
    return build_cells_why(spec, builds or {}, wls)


def check_set_types(spec: ABSpec) -> None:
    """``--set`` values of the options the work tree's table knows, checked against their
    types before any revision is built (each side's build checks its own table again, and
    the options it alone has)."""
    from hakbench.core import paths
    from hakbench.core.profiles import validate_env
    from hakbench.engine.probes import load_options

    if not spec.sets or not paths.options_binary().exists():
        return
    options = load_options()
    known = {o["name"] for o in options}
    validate_env({k: v for k, v in spec.sets.items() if k in known}, options, "--set")


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


def judged_metrics(spec: ABSpec, wls: dict | None = None) -> set:
    """The metrics the spec's workloads (``wls``: resolved) are judged on
    (``ab_spec.judged_metric``)."""
    from hakbench.experiments.ab_spec import judged_metric

    return {judged_metric(spec.metric, w) for w in (wls or workloads_of(spec)).values()}


def noise_warning_for(spec: ABSpec, wls: dict | None = None) -> str | None:
    """The latest calibration's warning when the threshold is below what a fixed count of
    pairs can see. A calibration measured the noise of one metric (its ``metric``: the one a
    default ab judges, ``throughput`` before it said), so only an A/B that judges a workload
    on that metric is warned."""
    if spec.sequential or spec.metric not in TIMED_METRICS:
        return None  # a sequential A/B says INCONCLUSIVE itself when the noise is too high
    from hakbench.experiments.calibration import noise_warning

    return noise_warning(spec.threshold_pct, spec.pairs, metrics=judged_metrics(spec, wls))


def sha256_of(path: Path | None) -> str | None:
    """Identity of a preloaded library: a rebuild during a run shows up as a changed hash."""
    if path is None or not Path(path).exists():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def slot_args(spec: ABSpec, cell: Cell, slot) -> list | None:
    """The harness arguments of a slot: the cell's own, or with calibration's --extra-ops."""
    if spec.extra_ops is None:
        return None
    from hakbench.experiments.calibrate import extra_ops_arg

    k = spec.extra_ops if slot.side == "B" else spec.baseline_extra_ops
    return [*cell.workload.args, *extra_ops_arg(k)]


def run_meta(spec: ABSpec, with_why: dict, shas: dict, command=None) -> dict:
    """The meta.json an A/B starts with: the spec, each side's cell (with the sha256 of its
    preloaded library), the revisions and each workload's run length."""
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
                    "preload_sha256": sha256_of(c.resolved_allocator().preload),
                    "argv": c.command()[0],
                }
                for side, c in (("A", a), ("B", b))
            }
            for w, ((a, b), _) in with_why.items()
        },
        rev_shas=shas,
    )
    meta["iterations"] = {w: why for w, (_, why) in with_why.items()}
    return meta


def changed_libraries(meta: dict) -> list[str]:
    """The preloaded libraries whose sha256 is no longer the one meta.json recorded."""
    return sorted(
        {
            side["preload"]
            for per_workload in meta["cells"].values()
            for side in per_workload.values()
            if side["preload"] and sha256_of(Path(side["preload"])) != side["preload_sha256"]
        }
    )


def perf_slots(spec: ABSpec, cells: dict) -> tuple[list, str]:
    """(the perf-wrapped counter runs of ``--perf observe``, interleaved A/B after the pairs;
    why there are none when perf cannot run here). Command workloads never run under perf
    (hakbench.engine.command_run)."""
    harness = [w for w, (a, _) in cells.items() if a.workload.command is None]
    if spec.metric not in TIMED_METRICS or spec.perf != "observe" or spec.perf_runs <= 0:
        return [], ""
    if not harness:
        return [], ""
    if not perf_usable():
        return [], "perf is not usable here: no perf counter runs"
    slots = ab_schedule(harness, spec.perf_runs, 0, spec.seed + 1)
    return [dataclasses.replace(s, phase="perf") for s in slots], ""


def observation(spec: ABSpec, cells: dict) -> tuple[dict, bool]:
    """(the workloads a stats-variant run can observe: harness workloads, whose counter dump
    it reads; whether they are observed: ``spec.observe`` and a hakmem side among them)."""
    harness = {w: ab for w, ab in cells.items() if ab[0].workload.command is None}
    hakmem = any("hakmem" in (a.allocator, b.allocator) for a, b in harness.values())
    return harness, spec.observe and hakmem


def planned_samples(spec: ABSpec, cells: dict, observed: dict, fixed: int) -> int:
    """The progress bar's total: the stats runs of the ``observed`` workloads, ``fixed``
    scheduled slots, the instruction counts, and for a sequential A/B (whose count is not
    known) DEFAULT_PAIRS a workload."""
    n = sum(c.allocator == "hakmem" for ab in observed.values() for c in ab) + fixed
    n += 2 * len(cells) if spec.metric == "instructions" else 0
    if spec.sequential:
        n += 2 * len(cells) * (spec.warmup_pairs + DEFAULT_PAIRS)
    return n


def check_layouts(spec: ABSpec) -> None:
    """``--layouts K`` > 1 needs libhakmem on both sides (a reference allocator is one
    binary, with no objects to relink) and a timed metric (instruction counts do not depend
    on the layout): else one line (UsageError)."""
    if spec.layouts is None:  # the default: chosen once the builds are known
        return
    if spec.layouts < 1:
        raise UsageError(f"--layouts must be at least 1 (got {spec.layouts})")
    if spec.layouts == 1:
        return
    others = {spec.allocator, spec.baseline_allocator or spec.allocator} - {"hakmem"}
    if others:
        raise UsageError(
            f"--layouts {spec.layouts}: {', '.join(sorted(others))} is a reference allocator "
            "with no code layouts (libhakmem on both sides only)"
        )
    if spec.metric not in TIMED_METRICS:
        raise UsageError(f"--layouts {spec.layouts}: a timed metric only (not {spec.metric})")


def two_binaries(spec: ABSpec, cells: dict) -> bool:
    """Whether some workload's A and B are different libhakmem binaries (two revisions or
    variants whose libraries differ), judged on a timed metric: where code layout is part
    of the difference."""
    if spec.metric not in TIMED_METRICS:
        return False
    for a, b in cells.values():
        pa, pb = (c.resolved_allocator().preload for c in (a, b))
        if a.allocator == b.allocator == "hakmem" and pa and pb and sha256_of(pa) != sha256_of(pb):
            return True
    return False


def resolve_layouts(spec: ABSpec, cells: dict) -> ABSpec:
    """The spec with its layouts a side decided: as given, or (the default, None)
    ``DEFAULT_BUILD_LAYOUTS`` when A and B are two different libhakmem binaries, else 1."""
    if spec.layouts is not None:
        return spec
    k = DEFAULT_BUILD_LAYOUTS if two_binaries(spec, cells) else 1
    return dataclasses.replace(spec, layouts=k)


def layout_seed(spec: ABSpec) -> int:
    """The seed of the call's layouts: ``--seed``'s (fresh per call, recorded) unless the spec
    names its own. Fresh layouts per call keep a layout that happens to favour one side from
    deciding every call the same way; a call replayed or resumed links the same ones."""
    if spec.layout_seed is not None:
        return spec.layout_seed
    if spec.seed is None:
        raise ValueError("the call's seed is drawn before its layouts")
    return spec.seed


def layout_cells(spec: ABSpec, cells: dict) -> dict:
    """workload -> {"A": [cell per layout], "B": [...]}: each side's cell in the K layouts
    of its own build (``engine.layouts.layouts_for_sides``; layout 0 is the cell itself)."""
    if spec.layouts == 1:
        return {w: {"A": [a], "B": [b]} for w, (a, b) in cells.items()}
    from hakbench.engine.layouts import layouts_for_sides, with_layout

    out = {}
    for w, (a, b) in cells.items():
        sides = layouts_for_sides(
            (a.build, a.variant), (b.build, b.variant), spec.layouts, seed=layout_seed(spec)
        )
        out[w] = {
            side: [with_layout(c, lay) for lay in sides[side]] for side, c in (("A", a), ("B", b))
        }
    return out


class LayoutDraws:
    """The layouts (of A, of B) of each pair of each workload: a warm-up pair cycles through
    them, the measured pairs follow ``engine.layouts.draw_layouts`` (every combination of a
    block's layouts once, shuffled; the first blocks take 2, 4, 8, ... layouts a side)
    seeded by the call's seed and the workload, so a resumed run draws the same layouts for
    the same slots."""

    def __init__(self, spec: ABSpec, layouts: dict):
        self.spec, self.drawn, self.iters = spec, {}, {}
        self.k = {w: (len(s["A"]), len(s["B"])) for w, s in layouts.items()}

    def of(self, workload: str, rnd: int) -> tuple[int, int]:
        k_a, k_b = self.k[workload]
        if rnd < self.spec.warmup_pairs:
            return rnd % k_a, rnd % k_b
        from hakbench.engine.layouts import draw_layouts

        digest = hashlib.sha256(f"{self.spec.seed}:{workload}".encode()).hexdigest()
        it = self.iters.setdefault(workload, draw_layouts(k_a, k_b, int(digest[:12], 16)))
        drawn = self.drawn.setdefault(workload, [])
        while len(drawn) <= rnd - self.spec.warmup_pairs:
            drawn.append(next(it))
        return drawn[rnd - self.spec.warmup_pairs]


def layout_note(spec: ABSpec, cells: dict) -> str:
    """One line when the two sides are different libhakmem binaries, each run in one layout:
    code layout is not controlled ('' otherwise)."""
    if spec.layouts > 1:
        return ""
    if two_binaries(spec, cells):
        return (
            "code layout is not controlled (--layouts 1): A and B are different binaries, "
            "each in one layout, so where the code landed is part of the difference (a "
            "relayout alone read up to +-2 % on tiny_hot here); the default between two "
            f"builds, --layouts {DEFAULT_BUILD_LAYOUTS}, draws it at random"
        )
    return ""


def _commands(workloads) -> list:
    """The command spec of every workload ``workloads`` names (None for a harness one)."""
    return [resolve_workload(w).command for w in expand_workloads(workloads or DEFAULT_WORKLOADS)]


def default_max_time(workloads) -> float:
    """ab's budget when --max-time is not given: the sum of the workloads' own ``budget``
    (a public suite's programs state theirs), at least DEFAULT_MAX_TIME_S."""
    total = sum(c.budget for c in _commands(workloads) if c is not None and c.budget)
    return max(DEFAULT_MAX_TIME_S, total)


def default_warmup(workloads) -> int:
    """ab's warm-up pairs when --warmup is not given: the most any workload of the call
    states (``warmup``, a public suite's programs: 1) when every one states it, else
    DEFAULT_WARMUP_PAIRS."""
    own = _commands(workloads)
    stated = [c.warmup for c in own if c is not None and c.warmup is not None]
    return max(stated) if stated and len(stated) == len(own) else DEFAULT_WARMUP_PAIRS
