"""What each build costs, beside what it catches: the scorecard's misuse section shows, per
allocator that has both, the suite's probes caught and the instructions per operation and
peak RSS on the seed workloads (``results/misuse/build_costs.csv``, written by
``allocator/tools/build_costs.sh``), each also as a ratio to libhakmem's fast build. Drawn
from the cost rows and the misuse records alone, so regenerating gives the same bytes.
"""

from __future__ import annotations

from hakbench.tables import misuse_suite_model

COSTS_CSV = "build_costs.csv"
COSTS_COMMAND = (
    "allocator/tools/build_costs.sh /work/suites/hardened_malloc/out/libhardened_malloc.so "
    "> results/misuse/build_costs.csv"
)
BASE = "hakmem:fast"  # the build the others' costs are held against


def _number(text: str) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


def cost_table(costs: list[dict]) -> dict[str, dict[str, dict[str, float | None]]]:
    """allocator -> workload -> {"ir": Ir/op or None, "rss": peak RSS KiB or None}, in the
    CSV's order."""
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for row in costs:
        table.setdefault(row["allocator"], {})[row["workload"]] = {
            "ir": _number(row.get("ir_per_op", "")),
            "rss": _number(row.get("peak_rss_kb", "")),
        }
    return table


def _cell(value: float | None, base: float | None, fmt: str) -> str:
    if value is None:
        return "—"
    text = format(value, fmt)
    if base and base > 0:
        text += f" ({value / base:.2f}x)"
    return text


def costs_lines(costs: list[dict], records: list[dict]) -> list[str]:
    """Two tables (instructions per operation, peak RSS), one row per allocator of the cost
    file, its suite probes caught first; empty when there are no costs."""
    if not costs:
        return []
    table = cost_table(costs)
    workloads = list(dict.fromkeys(row["workload"] for row in costs))
    suite_rows = misuse_suite_model.rows_of(records)
    caught = {
        c.label: (f"{c.counted} of {c.total}" if c.usable is not None and c.usable.usable else "—")
        for c in misuse_suite_model.counts(suite_rows, records)
    }
    base = table.get(BASE, {})
    lines = [
        "What each build costs, beside what it catches: instructions per operation "
        "(callgrind, exact: the harness's own loop included, start-up and exit netted out) "
        f"and peak RSS on the seed workloads, each also as a ratio to `{BASE}`; "
        f"`results/misuse/{COSTS_CSV}`, written by `{COSTS_COMMAND}` (the script says how "
        "it measures). — : not measured (hardened_malloc does not start under valgrind).",
        "",
    ]
    for key, title, fmt in (
        ("ir", "Ir/op", ".2f"),
        ("rss", "peak RSS KiB", ".0f"),
    ):
        lines += [
            "| allocator | suite probes caught | "
            + " | ".join(f"{w} {title}" for w in workloads)
            + " |",
            "|---|---:|" + "---:|" * len(workloads),
        ]
        for label, by_workload in table.items():
            name = f"**{label}**" if label.startswith("hakmem") else label
            cells = [
                _cell(
                    by_workload.get(w, {}).get(key),
                    None if label == BASE else base.get(w, {}).get(key),
                    fmt,
                )
                for w in workloads
            ]
            lines.append(f"| {name} | {caught.get(label, '—')} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
