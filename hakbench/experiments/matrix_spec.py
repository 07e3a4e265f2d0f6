"""A matrix file: its format, parsed and checked (``parse_matrix``, ``load_matrix``), and its
axes crossed into the coordinates of its cells (``expand_coords``).

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
round rather than as one block after another: ``hakbench.experiments.matrix`` runs the
cells; the summary table (medians, CIs, ratios to the reference, summary.csv) is
``hakbench.tables.matrix_summary``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hakbench.core.allocators import VARIANTS, is_path_spec, resolve_allocator
from hakbench.core.errors import UsageError
from hakbench.core.profiles import (
    expand_workloads,
    load_profiles,
    load_workloads,
    resolve_profile,
    validate_env,
)
from hakbench.engine.probes import load_options

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


def ordered_coords(coord: Mapping[str, str]) -> list[tuple[str, str]]:
    first = [(a, coord[a]) for a in NAMED_AXES if a in coord]
    return first + [(k, v) for k, v in coord.items() if k not in NAMED_AXES]
