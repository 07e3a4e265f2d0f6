"""Did the switch under test act? An A/B's engagement check: every ``HAKMEM_*`` switch that
differs between the two cells against the counters of its options table row
(allocator/src/options.h, ``hakmem-options --json``), read from one stats-variant run per
side. ``hakbench.experiments.ab`` stores the result as ``engagement.json`` and lets
NOT-ENGAGED override the timing verdict.
"""

from __future__ import annotations

from hakbench.collect.allocstats import counter
from hakbench.core.cell import Cell
from hakbench.engine.probes import load_options


def differing_switches(a: Cell, b: Cell) -> dict:
    """HAKMEM_* keys whose value differs between the two cells: key -> (A value, B value)."""
    if a.allocator != "hakmem" or b.allocator != "hakmem":
        return {}
    keys = {k for k in (*a.env, *b.env) if k.startswith("HAKMEM_")}
    return {k: (a.env.get(k), b.env.get(k)) for k in sorted(keys) if a.env.get(k) != b.env.get(k)}


def switch_counters(options=None) -> dict:
    """HAKMEM_* key -> the stats counters (``GROUP.key``) that prove the switch acted: the
    counters column of the options table (allocator/src/options.h, exported by
    ``hakmem-options --json``). A switch without counters (a stats or verbosity switch)
    changes what is printed, not what the allocator does."""
    rows = load_options() if options is None else options
    return {o["name"]: list(o.get("counters") or ()) for o in rows}


ENGAGED, NOT_ENGAGED, PARTIAL, UNKNOWN = "engaged", "not-engaged", "partial", "unknown"


def engagement(a: Cell, b: Cell, observed: dict, options=None) -> dict:
    """Did every switch that differs between A and B act? ``observed``: side -> the
    alloc_stats of that side's stats run (None when it failed). A switch acted when one of
    its counters differs between A and B (the path ran on one side only, the policy gave
    back more or less); it did not when each counter is the same on both sides (zero, or
    what both sides do anyway). ENGAGED when every switch with counters acted, NOT-ENGAGED
    when none did, PARTIAL when some did and some did not; unknown when a counter was not
    reported. Counters of multi-threaded workloads vary from run to run, so there a
    difference is weaker evidence than on the deterministic single-threaded programs."""
    switches = differing_switches(a, b)
    if not switches:
        return {"status": "n/a", "detail": "no switch differs", "switches": {}}
    declared = switch_counters(options)
    per: dict = {}
    notes = []
    for key in switches:
        names = declared.get(key, [])
        if not names:
            notes.append(f"{key}: no counter declared")
            continue
        values = {
            n: {s: counter(observed[s], n) if observed.get(s) else None for s in "AB"}
            for n in names
        }
        seen = [v for by_side in values.values() for v in by_side.values()]
        if any(v is None for v in seen):
            per[key] = UNKNOWN
        elif any(v["A"] != v["B"] for v in values.values()):
            per[key] = ENGAGED
        else:
            per[key] = NOT_ENGAGED
        counts = ", ".join(f"{n} A={v['A']} B={v['B']}" for n, v in values.items())
        notes.append(f"{key}: {per[key]} ({counts})")
    found = set(per.values())
    if not found:
        status = "n/a"
    elif ENGAGED in found and NOT_ENGAGED in found:
        status = PARTIAL
    elif UNKNOWN in found:
        status = UNKNOWN
    else:
        status = found.pop()
    return {"status": status, "detail": "; ".join(notes), "switches": per}
