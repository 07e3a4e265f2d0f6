"""The order every process of a measurement runs in: cells x rounds, interleaved and
randomised, with adjacent pairing whenever a comparison is wanted.

- **Rounds**: each round runs every cell, so a slow stretch of the machine hits every cell
  alike; the first ``warmup`` rounds are warm-up.
- **Random order**: the units of a round are shuffled, seeded by (seed, round), so a resumed
  run replays the same order for the rounds it still has to run.
- **Adjacent pairs**: a cell with a partner (ab's side A, a matrix cell's reference) runs
  back to back with it, AB or BA at random, so both runs of a pair are about two process
  lengths apart and share the machine's speed mode; the random order within the pair keeps
  a first/second-run effect out of the ratio. A partner of k cells runs k times a round,
  once beside each.

``plan`` is the general form; ``ab_schedule`` is ``ab``'s (and ``calibrate``'s) view of it.
``complete_pairs`` puts the samples of a plan's pairs back together.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

A, B = "A", "B"


@dataclass(frozen=True)
class Slot:
    """One process of a plan."""

    phase: str  # "warmup" | the measuring phase
    round: int  # 0..warmup+rounds-1, warm-up rounds first
    cell: int  # index into the caller's cells
    pair: int | None  # the compared cell's index when in a pair (the same for A and B)
    side: str | None  # "A" (the partner: baseline/reference) or "B" in a pair, else None


def _units(n_cells: int, partner: Sequence[int | None]) -> list[tuple[int, int | None]]:
    """(cell, partner) per unit of a round: every cell with a partner is a pair; every other
    cell runs alone unless it already runs as someone's partner."""
    paired = [(i, p) for i, p in enumerate(partner) if p is not None and p != i]
    busy = {i for i, _ in paired} | {p for _, p in paired}
    alone: list[tuple[int, int | None]] = [(i, None) for i in range(n_cells) if i not in busy]
    return alone + paired


def plan(
    n_cells: int,
    rounds: int,
    *,
    seed: int,
    warmup: int = 0,
    partner: Sequence[int | None] | None = None,
    phase: str = "measure",
    salt: str = "",
) -> list[Slot]:
    """Every process of ``rounds`` measured rounds (after ``warmup`` ones) in run order.

    ``partner[i]``: the cell that cell ``i`` is compared with (None or ``i`` itself: none).
    ``salt`` separates plans that share a seed (e.g. a matrix's instruction-count round).
    """
    return list(
        iter_plan(
            n_cells, rounds, seed=seed, warmup=warmup, partner=partner, phase=phase, salt=salt
        )
    )


def iter_plan(
    n_cells: int,
    rounds: int | None,
    *,
    seed: int,
    warmup: int = 0,
    partner: Sequence[int | None] | None = None,
    phase: str = "measure",
    salt: str = "",
) -> Iterator[Slot]:
    """``plan`` one slot at a time; ``rounds`` None: endless (a sequential A/B stops it).
    Round r's order depends only on (seed, salt, r), so both forms give the same slots."""
    partner = list(partner) if partner is not None else [None] * n_cells
    if len(partner) != n_cells:
        raise ValueError(f"partner has {len(partner)} entries for {n_cells} cells")
    units = _units(n_cells, partner)
    r = 0
    while rounds is None or r < warmup + rounds:
        rng = random.Random(f"hakbench:{seed}:{salt}:{r}")
        p = "warmup" if r < warmup else phase
        order = list(units)
        rng.shuffle(order)
        for cell, other in order:
            if other is None:
                yield Slot(p, r, cell, None, None)
                continue
            pair = [Slot(p, r, other, cell, A), Slot(p, r, cell, cell, B)]
            yield from (pair if rng.random() < 0.5 else pair[::-1])
        r += 1


@dataclass(frozen=True)
class ABSlot:
    """One process of an A/B, as ``ab`` records it."""

    phase: str  # "warmup" | "measure"
    workload: str
    pair: int  # measured pairs 0..n-1; warm-up pairs are negative
    round: int
    side: str  # "A" | "B"


def ab_schedule(workloads: list[str], pairs: int, warmup_pairs: int, seed: int) -> list[ABSlot]:
    """Every process of an A/B in run order: per workload, side B paired with side A."""
    return list(iter_ab_schedule(workloads, pairs, warmup_pairs, seed))


def iter_ab_schedule(
    workloads: list[str], pairs: int | None, warmup_pairs: int, seed: int
) -> Iterator[ABSlot]:
    """``ab_schedule`` one slot at a time; ``pairs`` None: endless, for a sequential A/B
    that stops each workload when its data decide (it skips the slots of stopped ones)."""
    n = len(workloads)
    cells = [(w, side) for w in workloads for side in (A, B)]
    partner = [None if side == A else 2 * (i // 2) for i, (_, side) in enumerate(cells)]
    for s in iter_plan(2 * n, pairs, seed=seed, warmup=warmup_pairs, partner=partner):
        yield ABSlot(s.phase, cells[s.cell][0], s.round - warmup_pairs, s.round, s.side or A)


def complete_pairs(
    samples: Iterable[dict],
    workload: str | None = None,
    *,
    pair: int | None = None,
    phase: str = "measure",
) -> list[tuple[dict, dict]]:
    """(A, B) samples of the pairs of ``phase`` whose two sides are both ok, in run order.

    Samples carry the ``round``, ``pair`` and ``side`` of their slot; a pair is the A and
    the B of one (round, pair). ``workload`` (ab: one workload's pairs) and ``pair`` (a
    matrix: one cell's pairs with its reference) keep only the matching samples.
    """
    by_pair: dict = defaultdict(dict)
    for s in samples:
        if s.get("phase") != phase or s.get("side") not in (A, B):
            continue
        if workload is not None and s.get("workload") != workload:
            continue
        if pair is not None and s.get("pair") != pair:
            continue
        by_pair[(s.get("round"), s.get("pair"))][s["side"]] = s
    return [
        (sides[A], sides[B])
        for _, sides in sorted(by_pair.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0))
        if all(sides.get(x, {}).get("status") == "ok" for x in (A, B))
    ]
