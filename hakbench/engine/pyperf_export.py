"""pyperf JSON for the two sides of an A/B, so ``python -m pyperf compare_to a.json b.json``
and ``pyperf stats`` work on our numbers.

pyperf's rules (docs/measuring.md has the trap): values > 0; unit second, byte or integer; and
compare_to needs equal value counts per side, or its t-test raises and the pair is silently
called significant. So only complete pairs are exported (a pair where either side failed is
dropped whole), and a metric is exported only when every kept pair has it > 0 on both sides.
Throughput (ops/s) has no pyperf unit; it is exported as seconds per op, which pyperf
compares the right way round (lower is better).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hakbench.core.metrics import METRICS
from hakbench.engine.schedule import complete_pairs

if TYPE_CHECKING:
    import pyperf


def _value(metric: str, sample: dict) -> tuple[str, str, float] | None:
    """(benchmark name suffix, pyperf unit, value) or None when pyperf cannot hold it."""
    v = (sample.get("metrics") or {}).get(metric)
    if v is None:
        return None
    if metric == "throughput":
        return "seconds_per_op", "second", 1.0 / v if v > 0 else 0.0
    m = METRICS.get(metric)
    if m is None or m.pyperf_unit is None:
        return None
    value = v * m.pyperf_scale
    if m.pyperf_unit in ("integer", "byte"):
        value = int(round(value))
    return metric, m.pyperf_unit, value


def suites_for_workload(samples: list[dict], workload: str) -> dict[str, pyperf.BenchmarkSuite]:
    """{"A": suite, "B": suite}; empty when there is no complete pair."""
    import pyperf  # heavy imports live where they are used: `hakbench --help` stays fast

    pairs = complete_pairs(samples, workload)
    if not pairs:
        return {}
    metrics = sorted({m for a, b in pairs for m in (*a["metrics"], *b["metrics"])})
    benches: dict = {"A": [], "B": []}
    for metric in metrics:
        per_side = {"A": [], "B": []}
        for a, b in pairs:
            for side, s in (("A", a), ("B", b)):
                per_side[side].append(_value(metric, s))
        flat = per_side["A"] + per_side["B"]
        if any(v is None or v[2] <= 0 for v in flat):
            continue  # pyperf rejects zero values; a partial metric would break equal counts
        suffix, unit = flat[0][0], flat[0][1]
        for side in ("A", "B"):
            runs = [
                pyperf.Run(
                    [v[2]],
                    metadata={"name": f"{workload}/{suffix}", "unit": unit, "loops": 1},
                    collect_metadata=False,
                )
                for v in per_side[side]
            ]
            benches[side].append(pyperf.Benchmark(runs))
    if not benches["A"]:
        return {}
    return {side: pyperf.BenchmarkSuite(b) for side, b in benches.items()}


def export_ab(samples: list[dict], directory: Path) -> list[Path]:
    """Write ``directory/<workload>/a.json`` and ``b.json`` for every workload with data."""
    written = []
    workloads = sorted({s["workload"] for s in samples if s.get("side")})
    for workload in workloads:
        suites = suites_for_workload(samples, workload)
        if not suites:
            continue
        d = Path(directory) / workload
        d.mkdir(parents=True, exist_ok=True)
        for side, suite in suites.items():
            path = d / f"{side.lower()}.json"
            suite.dump(str(path), replace=True)
            written.append(path)
    return written
