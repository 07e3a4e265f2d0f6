"""The order of an A/B: interleaved pairs, each AB or BA at random (seeded).

Both runs of a pair are ~2 process lengths apart, so they share the machine's speed mode;
the random order within a pair keeps a systematic first/second-run effect out of the ratio.
Workloads are interleaved round by round, so a slow stretch hits every workload alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    phase: str  # "warmup" | "measure"
    workload: str
    pair: int  # measured pairs 0..n-1; warm-up pairs are negative
    round: int
    side: str  # "A" | "B"


def ab_schedule(workloads: list[str], pairs: int, warmup_pairs: int, seed: int) -> list[Slot]:
    """Every process of an A/B in run order."""
    rng = random.Random(seed)
    slots: list[Slot] = []
    for r in range(warmup_pairs + pairs):
        phase = "warmup" if r < warmup_pairs else "measure"
        pair = r - warmup_pairs
        order = list(workloads)
        rng.shuffle(order)
        for w in order:
            sides = ["A", "B"] if rng.random() < 0.5 else ["B", "A"]
            slots.extend(Slot(phase, w, pair, r, s) for s in sides)
    return slots
