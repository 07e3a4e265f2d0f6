"""The scorecard page's sections, each a function of one table: the standing of every
allocator (``Scorecard``), the per-workload table, the applications-and-stress rows
(``hakbench.report.apps.Row``) and the heap-misuse rows (``hakbench.tables.misuse_model``).

A new section is one more function ``table -> Section`` here and one line in
``hakbench.experiments.publish.scorecard_sections`` that loads its table.
"""

from __future__ import annotations

from hakbench.report.site.html import DASH, Cell, Section, Table, num, table_html
from hakbench.tables.scorecard_model import MILESTONES, Scorecard, milestone_of


def _milestone_css(name: str | None) -> str | None:
    return "good" if name == "M3" else "bad" if name is None else None


def _interval(low: float | None, high: float | None, spec: str) -> str:
    return f"{low:{spec}}–{high:{spec}}" if low is not None and high is not None else DASH


def standing_section(card: Scorecard) -> Section:
    rows = []
    for st in card.standings():
        ms = st.milestone
        rows.append(
            [
                Cell(st.label, st.label),
                num(st.geomean),
                Cell(f"{len(st.matched)} of {len(card.workloads())}", len(st.matched)),
                Cell(ms or DASH, ms or "", css=_milestone_css(ms)),
                Cell(
                    " · ".join(str(st.at_least[m]) for m, _ in MILESTONES),
                    st.at_least.get("M3", 0),
                ),
                num(st.ir_geomean),
            ]
        )
    thresholds = ", ".join(f"{m} ≥ {t:.2f}" for m, t in MILESTONES)
    table = Table(
        [
            "allocator",
            f"geomean ratio to {card.reference}",
            "workloads matched",
            "milestone",
            "workloads at M1 · M2 · M3",
            f"Ir/op vs {card.reference} (geomean)",
        ],
        rows,
    )
    return Section(
        "standing",
        "Where we stand",
        f"Ratio of median throughput to {card.reference}'s on the same workload, geomean over "
        f"the workloads both have (milestones {thresholds}); Ir/op is exact instructions per "
        "operation relative to the reference, lower is fewer. Click a header to sort.",
        [table_html(table)],
    )


def workloads_section(card: Scorecard, history_href=None) -> Section:
    """Every cell: median throughput and its 95 % CI, the ratio to the reference with its
    CI and milestone, peak RSS, minor faults, Ir/op. ``history_href(workload)`` links a
    workload to its history page."""
    rows = []
    for workload, description in card.workloads():
        for label in card.labels():
            s = card.summary("throughput", workload, label)
            if s is None:
                continue
            rss = card.summary("maxrss_kb", workload, label)
            flt = card.summary("minflt", workload, label)
            ir = card.summary("ir_per_op", workload, label)
            href = history_href(workload) if history_href else None
            if s.status != "ok":
                ratio_cell = Cell(f"{s.status}: {s.reason}", None, css="bad")
            elif s.ratio is None:
                ratio_cell = Cell("reference", None, css="note")
            else:
                ms = milestone_of(s.ratio)
                ratio_cell = Cell(
                    f"{s.ratio:.3f} ({_interval(s.ratio_ci_low, s.ratio_ci_high, '.3f')}) "
                    f"{ms or ''}".strip(),
                    s.ratio,
                    css=_milestone_css(ms),
                )
            mops = None if s.median is None else s.median / 1e6
            rows.append(
                [
                    Cell(workload, workload, href=href, title=description),
                    Cell(label, label),
                    num(mops, ".2f"),
                    Cell(
                        _interval(
                            s.ci_low / 1e6 if s.ci_low else None,
                            s.ci_high / 1e6 if s.ci_high else None,
                            ".2f",
                        ),
                        None,
                    ),
                    ratio_cell,
                    num(rss.median / 1024 if rss and rss.median else None, ".1f"),
                    num(flt.median if flt else None, ",.0f"),
                    num(ir.median if ir else None, ".1f"),
                    num(s.n, "d"),
                ]
            )
    table = Table(
        [
            "workload",
            "allocator",
            "Mops/s (median)",
            "95 % CI",
            f"ratio to {card.reference} (95 % CI)",
            "peak RSS MiB",
            "minor faults",
            "Ir/op",
            "n",
        ],
        rows,
    )
    return Section(
        "workloads",
        "Per workload",
        "Median throughput over rounds; the ratio is the median of the ratios of adjacent "
        f"pairs with {card.reference} on the same workload, with its distribution-free 95 % "
        "CI and the milestone it reaches. A workload's name opens its history.",
        [table_html(table)],
    )


def apps_section(rows: list, meta: dict) -> Section:
    """``rows``: ``hakbench.report.apps.Row`` of the stored applications-and-stress refresh."""
    return ratios_section("apps", "Applications and stress", rows, meta, "scorecard-apps")


def suite_section(rows: list, meta: dict) -> Section:
    """The public suites (mimalloc-bench's programs): rows of the same kind, stored apart."""
    return ratios_section("suite", "Public suites", rows, meta, "scorecard-suite")


def ratios_section(anchor: str, title: str, rows: list, meta: dict, stored: str) -> Section:
    """Time and peak-RSS ratios to the reference per workload and allocator, with their
    CIs, failures, and each allocator's geomeans (``hakbench.report.apps.Row``)."""
    from hakbench.report.apps import geomeans

    ref = meta["matrix"]["reference"]["allocator"]

    def ratio(r) -> Cell:
        if r is None:
            return Cell(DASH)
        css = "good" if r[2] < 1 else "bad" if r[1] > 1 else None
        return Cell(f"{r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]", r[0], css=css)

    body = [
        [
            Cell(r.workload, r.workload),
            Cell(r.label, r.label),
            Cell(r.time_metric, r.time_metric),
            ratio(r.time_ratio),
            ratio(r.memory_ratio),
            Cell(r.failures or "", r.failures or "", css="bad" if r.failures else None),
        ]
        for r in rows
    ]
    time_g, mem_g = geomeans(rows, "time_ratio"), geomeans(rows, "memory_ratio")
    summary = [
        [
            Cell(label, label),
            num(time_g.get(label, (None, 0))[0]),
            num(time_g.get(label, (None, 0))[1], "d"),
            num(mem_g.get(label, (None, 0))[0]),
        ]
        for label in dict.fromkeys(r.label for r in rows)
    ]
    git = (meta.get("git") or {}).get("commit") or "?"
    return Section(
        anchor,
        title,
        f"Stored in results/{stored}/, refreshed {meta.get('date', '?')} at commit "
        f"{git[:10]}: time and peak RSS relative to {ref}, lower is better, each the median "
        "of adjacent-pair ratios with its 95 % CI.",
        [
            table_html(
                Table(
                    ["allocator", f"time vs {ref} (geomean)", "workloads", f"peak RSS vs {ref}"],
                    summary,
                )
            ),
            table_html(
                Table(
                    ["workload", "allocator", "time metric", "time ratio", "RSS ratio", "failures"],
                    body,
                )
            ),
        ],
    )


def misuse_section(rows: list[dict], meta: dict) -> Section:
    """The patterns × allocators matrix and the counts per allocator."""
    from hakbench.report.misuse_md import cell_text, legend
    from hakbench.tables.misuse_model import counts, labels_of, patterns_of

    labels = labels_of(rows)
    by = {(r["pattern"], r["label"]): r for r in rows}

    def outcome(r: dict | None) -> Cell:
        text = cell_text(r)
        css = None if r is None else "good" if r["outcome"] == "caught" else "bad"
        return Cell(text, text, css=css)

    matrix = [
        [Cell(p, p)] + [outcome(by.get((p, lbl))) for lbl in labels] for p in patterns_of(rows)
    ]
    tally = [
        [Cell(c.label, c.label), num(c.caught, "d"), num(c.total, "d"), num(c.exploitable, "d")]
        for c in counts(rows)
    ]
    return Section(
        "misuse",
        "Heap misuse",
        f"Which heap misuse each allocator stops (results/misuse/, {meta.get('date', '?')}). "
        + legend().replace("`", ""),
        [
            table_html(
                Table(
                    [
                        "allocator",
                        "caught",
                        "patterns",
                        "not caught, overlapping or chosen memory handed out",
                    ],
                    tally,
                )
            ),
            f"<details><summary>The matrix: {len(matrix)} patterns × {len(labels)} "
            "allocators</summary>" + table_html(Table(["pattern", *labels], matrix)) + "</details>",
        ],
    )


def probes_section(rows: list[dict], records: list[dict], meta: dict) -> Section:
    """The public suite's security probes: counts per allocator (caught in every run, by an
    allocator that ran the suite's benign programs) and the probes x allocators matrix."""
    from hakbench.report.misuse_suite_md import legend, mark
    from hakbench.tables.misuse_suite_model import counts, probe_order

    labels = list(dict.fromkeys(r["label"] for r in rows))
    by = {(r["probe"], r["label"]): r for r in rows}

    def outcome(r: dict | None) -> Cell:
        text = mark(r)
        css = None if r is None else "good" if r["outcome"] == "caught" else "bad"
        return Cell(text, text, css=css)

    probes = probe_order({r["probe"] for r in rows})
    matrix = [[Cell(p, p)] + [outcome(by.get((p, lbl))) for lbl in labels] for p in probes]
    tally = [
        [
            Cell(c.label, c.label),
            num(c.counted, "d"),
            num(c.total, "d"),
            num(c.crashed, "d"),
            num(c.finished, "d"),
            Cell(f"{c.share:.1%}", c.share),
        ]
        for c in counts(rows, records)
    ]
    return Section(
        "probes",
        "Public probes (mimalloc-bench security/)",
        f"Which of the public suite's misuse probes each allocator stops (results/misuse/, "
        f"{meta.get('date', '?')}). " + legend().replace("`", ""),
        [
            table_html(
                Table(
                    [
                        "allocator",
                        "caught (every run)",
                        "probes",
                        "of which a fault",
                        "of which no effect",
                        "share of runs caught",
                    ],
                    tally,
                )
            ),
            f"<details><summary>The matrix: {len(matrix)} probes × {len(labels)} "
            "allocators</summary>" + table_html(Table(["probe", *labels], matrix)) + "</details>",
        ],
    )
