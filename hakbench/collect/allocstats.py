"""Parse libhakmem's stats lines: ``[GROUP] key=value key=value ...`` (integers).

One format for every group (ARCHITECTURE.md), so this one parser reads them all. Other
lines (the harness's, warnings) are ignored.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^\[([A-Z][A-Z0-9_]*)\]((?:\s+[a-z0-9_]+=-?\d+)*)\s*$")


def parse_alloc_stats(text: str) -> dict[str, dict[str, int]]:
    """Return ``{GROUP: {key: int}}``; a group seen twice has its counters summed."""
    groups: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        g = groups.setdefault(m.group(1), {})
        for tok in m.group(2).split():
            k, v = tok.split("=", 1)
            g[k] = g.get(k, 0) + int(v)
    return groups


def counter(groups: dict[str, dict[str, int]], name: str) -> int | None:
    """A counter named ``GROUP.key`` (the options table's counters column); None when the
    group was not reported or its build compiled it out (compiled=0)."""
    group, _, key = name.partition(".")
    g = groups.get(group)
    if g is None or g.get("compiled", 1) == 0:
        return None
    return g.get(key)


def route_hits(groups: dict[str, dict[str, int]], group: str) -> int | None:
    """Engagement of a front path: its group's ``route_hits``; None when not reported."""
    return counter(groups, f"{group}.route_hits")
