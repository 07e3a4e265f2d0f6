"""A page per run directory the user publishes (``--runs DIR``): an ``ab``'s verdict table,
its pairs over time, its paired-ratio plots, engagement and guardrails; a soak's RSS and
throughput trends with its verdicts; a gate's cells against its baseline; any other run's
provenance and report. Pure: a ``RunView`` (what ``hakbench.experiments.publish`` read from
the directory) in, HTML out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.report.site import charts
from hakbench.report.site.html import (
    DASH,
    Cell,
    Section,
    Table,
    bullet_list,
    esc,
    fmt,
    link,
    num,
    pre,
    table_html,
)

VERDICT_CSS = {"GO": "good", "NO-GO": "bad", "FAILED": "bad", "NOT-ENGAGED": "bad"}


@dataclass
class RunView:
    run_id: str
    path: Path
    kind: str  # meta.json's kind: "ab", "soak", "gate", "matrix", ...
    meta: dict
    summary: list[dict] = field(default_factory=list)  # ab: summary.csv rows
    samples: list[dict] = field(default_factory=list)  # ab: measured samples (stats dropped)
    engagement: dict = field(default_factory=dict)  # ab: engagement.json
    soak: dict = field(default_factory=dict)  # soak: summary.json
    epochs: list[dict] = field(default_factory=list)  # soak: epochs.csv rows
    gate: list[dict] = field(default_factory=list)  # gate: judged rows
    report_md: str = ""

    @property
    def full_commit(self) -> str | None:
        return (self.meta.get("git") or {}).get("commit")

    @property
    def commit(self) -> str:
        git = self.meta.get("git") or {}
        return (git.get("commit") or "unknown")[:12] + ("+dirty" if git.get("dirty") else "")

    def headline(self) -> str:
        """What the run concluded, in a few words, for the runs index."""
        if self.kind == "ab":
            v = self.meta.get("verdicts") or {}
            return ", ".join(f"{w} {x}" for w, x in v.items()) or "unfinished"
        if self.kind == "soak":
            worst = [
                f"{r['label']} {k} FAIL"
                for r in self.soak.get("runs", [])
                for k, x in (r.get("verdicts") or {}).items()
                if x == "FAIL"
            ]
            return "; ".join(worst) or ("every verdict PASS" if self.soak else "unfinished")
        if self.kind == "gate":
            bad = [
                f"{g['profile']} {g['workload']} {g['status']}"
                for g in self.gate
                if g["status"] != "ok" or g.get("faults_status") not in (None, "ok")
            ]
            return "; ".join(bad) or "within tolerance"
        return ""


def _f(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def provenance(run: RunView, commit_href: str | None) -> str:
    m = run.meta
    commit = link(run.commit, commit_href) if commit_href else esc(run.commit)
    items = [
        f"command <code>{esc(m.get('command', '?'))}</code>",
        f"started {esc(m.get('date', '?'))} at commit {commit}",
        f"host {esc(m.get('hostname'))}: {esc(m.get('cpu_model'))}, {esc(m.get('cpu_count'))} "
        f"CPUs, kernel {esc(m.get('kernel'))}; 1-min load at start "
        f"{fmt(m.get('load_avg_1min'), '.2f')}",
        f"directory <code>{esc(run.path)}</code>",
    ]
    return bullet_list(items)


# ---- ab ----


def _verdict_cell(v: str) -> Cell:
    return Cell(v or DASH, v or "", css=VERDICT_CSS.get(v))


def ab_verdict_table(run: RunView) -> Table:
    rows = []
    for r in run.summary:
        if r.get("role") not in ("primary", "guardrail"):
            continue
        ratio, lo, hi = _f(r["ratio"]), _f(r["decide_low"]), _f(r["decide_high"])
        interval = f"[{lo:.4f}, {hi:.4f}]" if lo is not None and hi is not None else DASH
        stop = r.get("stop") or ""
        if r.get("pairs_needed"):
            stop += f", ~{r['pairs_needed']} pairs would likely decide"
        rows.append(
            [
                Cell(r["workload"], r["workload"]),
                Cell(r["metric"], r["metric"]),
                Cell(r["role"], r["role"]),
                _verdict_cell(r.get("verdict", "")),
                num(ratio, ".4f"),
                Cell(interval, lo),
                num(_f(r["p_holm"]), ".3g"),
                num(_f(r["n_pairs"]), ".0f"),
                num(_f(r.get("seconds")), ".1f"),
                Cell(stop, stop),
                Cell(
                    (run.engagement.get(r["workload"]) or {}).get("status", DASH),
                    None,
                ),
            ]
        )
    return Table(
        [
            "workload",
            "metric",
            "role",
            "verdict",
            "B/A",
            "interval that decides",
            "p (Holm)",
            "pairs",
            "seconds",
            "stop",
            "engaged",
        ],
        rows,
    )


def _primary(run: RunView) -> dict[str, dict]:
    return {r["workload"]: r for r in run.summary if r.get("role") == "primary"}


def ab_pair_values(run: RunView, workload: str, metric: str) -> list[tuple[float, float]]:
    from hakbench.engine.schedule import complete_pairs

    out = []
    for a, b in complete_pairs(run.samples, workload):
        x, y = a["metrics"].get(metric), b["metrics"].get(metric)
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0:
            out.append((float(x), float(y)))
    return out


def ab_charts(run: RunView) -> list[str]:
    """Per workload: A and B of the judged metric pair by pair (over time), and each pair's
    B/A with the median, the interval that decided and the ±threshold band."""
    threshold = (run.meta.get("spec") or {}).get("threshold_pct") or 1.0
    out = []
    for i, (workload, prim) in enumerate(_primary(run).items()):
        metric = prim["metric"]
        pairs = ab_pair_values(run, workload, metric)
        if not pairs:
            continue
        idx = list(range(1, len(pairs) + 1))
        over_time = [
            charts.scatter("A", idx, [a for a, _ in pairs], colour=charts.PALETTE[1]),
            charts.scatter("B", idx, [b for _, b in pairs], colour=charts.PALETTE[0]),
        ]
        out.append(
            charts.chart_html(
                f"ab-pairs-{i}",
                over_time,
                charts.layout(
                    f"{workload}: {metric} per pair, A and B", "pair (run order)", metric
                ),
            )
        )
        ratios = [b / a for a, b in pairs]
        med, lo, hi = _f(prim["ratio"]), _f(prim["decide_low"]), _f(prim["decide_high"])
        t = threshold / 100
        shapes = [charts.band(1 - t, 1 + t), charts.hline(1.0)]
        if lo is not None and hi is not None:
            shapes.append(charts.band(lo, hi, "#f4a3a3"))
        if med is not None:
            shapes.append(charts.hline(med, "#b71c1c"))
        out.append(
            charts.chart_html(
                f"ab-ratio-{i}",
                [charts.scatter("pair B/A", idx, ratios, mode="markers", colour=charts.PALETTE[1])],
                charts.layout(
                    f"{workload}: B/A per pair — median {med if med is None else f'{med:.4f}'}, "
                    f"interval that decides (red band), ±{threshold:g} % (grey)",
                    "pair (run order)",
                    "B/A",
                    shapes=shapes,
                    showlegend=False,
                ),
            )
        )
    return out


def ab_body(run: RunView) -> list[str]:
    engaged = [
        f"<b>{esc(w)}</b>: {esc(e.get('status'))} — {esc(e.get('detail', ''))}"
        for w, e in run.engagement.items()
    ]
    guard = [r for r in run.summary if r.get("role") == "guardrail"]
    guard_items = [
        f"{esc(r['workload'])} {esc(r['metric'])}: "
        f'<span class="{VERDICT_CSS.get(r.get("verdict"), "")}">{esc(r.get("verdict") or DASH)}'
        f"</span> (B/A {_f(r['ratio']) or 0:.4f})"
        for r in guard
    ]
    spec = run.meta.get("spec") or {}
    what = (
        f"A = {spec.get('baseline_allocator') or spec.get('allocator', '?')} "
        f"{spec.get('baseline') or ''}, B = {spec.get('allocator', '?')} "
        f"{spec.get('profile') or ''}; judged on {spec.get('metric', '?')}"
    )
    return [
        Section(
            "verdicts",
            "Verdicts",
            what + ". Primary rows decide; guardrails judge memory and faults.",
            [table_html(ab_verdict_table(run))],
        ).html(),
        Section(
            "pairs",
            "Pairs over time and paired ratios",
            "",
            ['<div class="charts">', *ab_charts(run), "</div>"],
        ).html(),
        Section("engagement", "Engagement", "", [bullet_list(engaged) if engaged else "—"]).html(),
        Section(
            "guardrails", "Guardrails", "", [bullet_list(guard_items) if guard_items else "—"]
        ).html(),
    ]


# ---- soak ----


def soak_charts(run: RunView) -> list[str]:
    """RSS and ops/s per epoch, a line per allocator (RSS from /proc, else the harness's
    own reading when /proc was already gone, as the soak's figures do)."""
    groups: dict[str, list[dict]] = {}
    for e in run.epochs:
        groups.setdefault(f"{e['allocator']} {e.get('profile') or ''}".strip(), []).append(e)
    times = [t for e in run.epochs if (t := _f(e.get("t"))) is not None]
    minutes = bool(times) and max(times) > 300
    out = []
    for key, (title, axis, scale) in {
        "rss_kb": ("resident memory per epoch", "RSS (MiB, VmRSS)", 1 / 1024),
        "ops_s": ("throughput per epoch", "Mops/s", 1e-6),
    }.items():
        traces = []
        for i, (label, rows) in enumerate(groups.items()):
            pts = []
            for r in rows:
                t, v = _f(r.get("t")), _f(r.get(key))
                if v is None and key == "rss_kb":
                    v = _f(r.get("harness_rss_kb"))
                if t is not None and v is not None:
                    pts.append((t / 60 if minutes else t, v * scale))
            traces.append(
                charts.scatter(
                    label,
                    [t for t, _ in pts],
                    [v for _, v in pts],
                    colour=charts.PALETTE[i % len(charts.PALETTE)],
                )
            )
        x_title = "time (min)" if minutes else "time (s)"
        out.append(
            charts.chart_html(
                f"soak-{key}",
                traces,
                charts.layout(f"Soak: {title}", x_title, axis, showlegend=True),
            )
        )
    return out


def soak_body(run: RunView) -> list[str]:
    from hakbench.report.soak import verdict_lines

    thresholds = run.soak.get("thresholds") or {}
    items = []
    for fig in run.soak.get("runs", []):
        lines = verdict_lines(fig, thresholds) if fig.get("verdicts") and thresholds else []
        items.append(
            f"<b>{esc(fig['label'])}</b> ({esc(fig.get('status'))})"
            + bullet_list(
                [esc(line).replace("FAIL", '<span class="bad">FAIL</span>') for line in lines]
            )
        )
    return [
        Section(
            "trends",
            "RSS and throughput",
            f"{run.soak.get('duration_s', '?')} s per allocator, epochs of "
            f"{run.soak.get('epoch_ms', '?')} ms; trends are per hour with their 95 % CI.",
            ['<div class="charts">', *soak_charts(run), "</div>"],
        ).html(),
        Section("verdicts", "Verdicts", "", [bullet_list(items) if items else "unfinished"]).html(),
    ]


# ---- gate ----


def gate_body(run: RunView) -> list[str]:
    rows = []
    for g in run.gate:
        change = g.get("change_pct")
        rows.append(
            [
                Cell(g["profile"], g["profile"]),
                Cell(g["workload"], g["workload"]),
                num(g.get("baseline"), ".2f"),
                num(g.get("now"), ".2f"),
                num(change, "+.2f", css="bad" if g["status"] == "ROSE" else None),
                Cell(g["status"], g["status"], css="good" if g["status"] == "ok" else "bad"),
                num(g.get("faults_baseline"), ",.0f"),
                num(g.get("faults_now"), ",.0f"),
                Cell(g.get("faults_status") or DASH, g.get("faults_status") or ""),
            ]
        )
    table = Table(
        [
            "profile",
            "workload",
            "Ir/op baseline",
            "Ir/op now",
            "change %",
            "Ir/op",
            "faults baseline",
            "faults now",
            "faults",
        ],
        rows,
    )
    return [
        Section(
            "gate",
            "Instruction and page-fault gate",
            "Exact Ir/op and minor faults of libhakmem against the committed baseline "
            "(results/scorecard/gate.json).",
            [table_html(table)],
        ).html()
    ]


def summary_body(run: RunView) -> list[str]:
    """Any other run's summary.csv, as it is (a ``run``'s or a ``matrix``'s cells)."""
    if not run.summary:
        return []
    header = list(run.summary[0])

    def value(v: str) -> Cell:
        x = _f(v)
        if x is None or v.strip() == "":
            return Cell(v, v)
        return num(x, ",.0f" if abs(x) >= 1000 else ".4g")

    rows = [[value(r.get(h) or "") for h in header] for r in run.summary]
    return [Section("summary", "summary.csv", "", [table_html(Table(header, rows))]).html()]


def run_body(run: RunView, commit_href: str | None) -> list[str]:
    body = {"ab": ab_body, "soak": soak_body, "gate": gate_body}.get(run.kind, summary_body)
    parts = body(run)
    parts.append(Section("provenance", "Provenance", "", [provenance(run, commit_href)]).html())
    if run.report_md:
        parts.append(Section("report", "report.md", "", [pre(run.report_md)]).html())
    return parts


def runs_index_table(runs: list[RunView], commit_href) -> Table:
    """Newest first; ``commit_href(commit)``: the commit's page, or None."""
    rows = [
        [
            Cell(r.run_id, r.run_id, href=f"{r.run_id}.html"),
            Cell(r.kind, r.kind),
            Cell(r.meta.get("date", DASH), r.meta.get("date", "")),
            Cell(r.commit, r.commit, href=commit_href(r.commit)),
            Cell(r.headline(), r.headline()),
        ]
        for r in sorted(runs, key=lambda r: r.meta.get("date", ""), reverse=True)
    ]
    return Table(["run", "kind", "started", "commit", "result"], rows)
