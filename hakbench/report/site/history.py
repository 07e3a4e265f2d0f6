"""The scorecard across commits: one chart per workload and metric (throughput, Ir/op, peak
RSS), commits in first-parent order on the x axis, one line per allocator and machine
fingerprint, the 95 % CI of each point drawn; a click on a point opens the page of the commit
it measured (which links the run that measured it and, with a repository URL, the commit
upstream). Regressions an ``ab`` or the gate flagged are marked at their commit, the mark a
link to the run that flagged them. Pure: ``HistoryPoint`` and ``Flag`` rows in, HTML out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    table_html,
)
from hakbench.tables.history_model import HISTORY_METRICS, Flag, HistoryPoint, Machine, Refresh

MAX_TICK_LABELS = 24  # past this many commits, label every k-th so the labels never overlap


@dataclass
class History:
    points: list[HistoryPoint]
    order: list[str]  # commit labels (12 hex, +dirty), first-parent order, oldest first
    flags: list[Flag] = field(default_factory=list)
    reference: str = "mimalloc"
    repo_url: str | None = None
    published_runs: set[str] = field(default_factory=set)  # run ids that have a page
    # commit -> (run id, what the run concluded) of the published runs that measured it
    runs_at: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(p.workload for p in self.points))

    def refreshes(self) -> list[Refresh]:
        seen = dict.fromkeys(p.refresh for p in self.points)
        return sorted(seen, key=lambda r: (self.x(r.commit), r.date))

    def machines(self) -> list[Machine]:
        """Every machine, the one of the newest refresh first (drawn solid, with circles):
        a machine's marker is the same on every chart."""
        return list(dict.fromkeys(r.machine for r in reversed(self.refreshes())))

    def x(self, commit: str) -> int:
        return self.order.index(commit)

    def commits(self) -> list[str]:
        """Commits with a page: those measured and those flagged, in line order."""
        have = {p.refresh.commit for p in self.points} | {f.commit for f in self.flags}
        have |= set(self.runs_at)
        return [c for c in self.order if c in have]


def commit_file(commit: str) -> str:
    return "commits/" + commit.replace("+", "-") + ".html"


def run_file(run_id: str) -> str:
    return f"runs/{run_id}.html"


def history_file(workload: str) -> str:
    return f"history/{workload}.html"


def short(commit: str) -> str:
    return commit[:7] + ("*" if commit.endswith("+dirty") else "")


def is_highlighted(label: str, reference: str) -> bool:
    """Lines shown when a chart opens: libhakmem's and the reference's (click the legend for
    the others)."""
    return label.startswith("hakmem") or label == reference


def chart_of_flag(metric: str) -> str:
    """The history chart a flagged metric belongs on: memory on peak RSS, instruction
    counts on Ir/op, times and rates (and anything else) on throughput."""
    if "rss" in metric or "fault" in metric or metric == "minflt":
        return "maxrss_kb"
    if metric in ("instructions", "ir_per_op"):
        return "ir_per_op"
    return "throughput"


def _hover(p: HistoryPoint, metric: str) -> str:
    title, scale, _ = HISTORY_METRICS[metric]
    unit = title.split("(", 1)[1].split(",")[0].rstrip(")")
    value = f"{p.value * scale:,.3f} {unit}"
    if p.low is not None and p.high is not None:
        value += f" [{p.low * scale:,.3f}, {p.high * scale:,.3f}]"
    ratio = f"<br>ratio to reference {p.ratio:.3f}" if p.ratio is not None else ""
    r = p.refresh
    return (
        f"<b>{esc(p.label)}</b> · {esc(p.workload)}<br>{value}{ratio}<br>"
        f"commit {esc(r.commit)} · {esc(r.date)}<br>{esc(r.machine.description)} "
        f"({esc(r.machine.fingerprint)})<br>run {esc(r.run_id or DASH)} · n={p.n}"
        "<br><i>click: the commit's page</i>"
    )


def chart(history: History, workload: str, metric: str, *, depth: int, div_id: str) -> str | None:
    """One workload's chart of one metric; None when no refresh measured it."""
    title, scale, higher = HISTORY_METRICS[metric]
    mine = [p for p in history.points if p.workload == workload and p.metric == metric]
    if not mine:
        return None
    up = "../" * depth
    traces = _traces(history, mine, metric, scale, up)
    n = len(history.order)
    step = max(1, -(-n // MAX_TICK_LABELS))
    ticks = list(range(0, n, step))
    shapes, notes = _flag_marks(history, workload, metric, up)
    better = "higher is better" if higher else "lower is better"
    lay = charts.layout(
        f"{workload}: {title.split(' (')[0]} ({better})",
        "commit (first-parent order; * = uncommitted changes)",
        title,
        xaxis={
            "tickmode": "array",
            "tickvals": ticks,
            "ticktext": [short(history.order[t]) for t in ticks],
            "tickangle": -45,
            "range": [-0.5, n - 0.5],
        },
        shapes=shapes,
        annotations=notes,
        height=430,
        margin={"b": 100},
        legend={"orientation": "h", "y": -0.32, "yanchor": "top", "x": 0},
    )
    return charts.chart_html(div_id, traces, lay)


def _traces(history: History, mine: list, metric: str, scale: float, up: str) -> list[dict]:
    """One line per allocator and machine, an allocator's lines in one colour."""
    traces = []
    for i, label in enumerate(dict.fromkeys(p.label for p in mine)):
        colour = charts.PALETTE[i % len(charts.PALETTE)]
        named = False  # one legend entry per allocator: it shows and hides all its lines
        for j, machine in enumerate(history.machines()):
            pts = [p for p in mine if p.label == label and p.refresh.machine == machine]
            if not pts:
                continue
            pts.sort(key=lambda p: (history.x(p.refresh.commit), p.refresh.date))
            traces.append(
                charts.scatter(
                    label,
                    [history.x(p.refresh.commit) for p in pts],
                    [p.value * scale for p in pts],
                    low=[None if p.low is None else p.low * scale for p in pts],
                    high=[None if p.high is None else p.high * scale for p in pts],
                    colour=colour,
                    symbol=charts.SYMBOLS[j % len(charts.SYMBOLS)],
                    dash=charts.DASHES[j % len(charts.DASHES)],
                    customdata=[[up + commit_file(p.refresh.commit)] for p in pts],
                    hover=[_hover(p, metric) for p in pts],
                    visible=is_highlighted(label, history.reference),
                    group=label,
                    legend=not named,
                )
            )
            named = True
    return traces


def _flag_marks(history: History, workload: str, metric: str, up: str) -> tuple[list, list]:
    """A dotted line and a note (linking the run) at each commit a flag names. -> (shapes,
    annotations)"""
    shapes, notes = [], []
    flagged: dict[int, list[Flag]] = {}
    for f in history.flags:
        if f.workload == workload and chart_of_flag(f.metric) == metric:
            flagged.setdefault(history.x(f.commit), []).append(f)
    for x, fs in flagged.items():
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "x0": x,
                "x1": x,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": "#b71c1c", "width": 1.5, "dash": "dot"},
            }
        )
        run = fs[0].run_id
        target = up + run_file(run) if run in history.published_runs else None
        text = esc(fs[0].what.split(":")[0]) + (f" ×{len(fs)}" if len(fs) > 1 else "")
        notes.append(
            {
                "x": x,
                "xref": "x",
                "y": 1.0,
                "yref": "paper",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"color": "#b71c1c", "size": 10},
                "text": f'<a href="{esc(target)}">{text}</a>' if target else text,
                "hovertext": "<br>".join(esc(f"{f.what} (run {f.run_id})") for f in fs),
            }
        )
    return shapes, notes


def machine_key(history: History) -> str:
    """Which marker is which machine (one line per machine on every chart)."""
    items = [
        f"{charts.SYMBOL_GLYPHS[j % len(charts.SYMBOL_GLYPHS)]} {esc(m.description)} "
        f"({esc(m.fingerprint)})"
        for j, m in enumerate(history.machines())
    ]
    return "<p>Machines (marker and line style): " + " · ".join(items) + "</p>"


def charts_block(history: History, workload: str, metrics, *, depth: int) -> list[str]:
    out = []
    for metric in metrics:
        html = chart(history, workload, metric, depth=depth, div_id=f"h-{workload}-{metric}")
        if html:
            out.append(html)
    return out


def overview_section(history: History, *, depth: int = 0) -> Section:
    """The index page's history: each workload's throughput across commits."""
    parts = []
    for w in history.workloads():
        parts += charts_block(history, w, ["throughput"], depth=depth)
    pages = " · ".join(link(w, "../" * depth + history_file(w)) for w in history.workloads())
    return Section(
        "history",
        "History across commits",
        f"{len(history.refreshes())} stored refreshes. Each point is one refresh's median "
        "with its 95 % CI, on the line of the machine that measured it; a click opens the "
        "commit's page. Dotted red lines: a regression an ab or the gate flagged there. "
        "libhakmem and the reference are shown; click the legend for the others.",
        [
            f"<p>Ir/op and peak RSS per workload: {pages}</p>",
            machine_key(history),
            '<div class="charts">',
            *parts,
            "</div>",
        ],
    )


def workload_page_body(history: History, workload: str) -> list[str]:
    parts = charts_block(history, workload, list(HISTORY_METRICS), depth=1)
    flags = [f for f in history.flags if f.workload == workload]
    body = [machine_key(history), '<div class="charts">', *parts, "</div>"]
    if flags:
        body.append(
            Section("flags", "Flagged regressions", "", [flag_list(history, flags, 1)]).html()
        )
    return body


def flag_list(history: History, flags: list[Flag], depth: int) -> str:
    up = "../" * depth
    items = []
    for f in flags:
        run = (
            link(f.run_id, up + run_file(f.run_id))
            if f.run_id in history.published_runs
            else esc(f.run_id)
        )
        items.append(
            f"{link(f.commit, up + commit_file(f.commit))} · {esc(f.workload)} · "
            f"{esc(f.what)} · run {run}"
        )
    return bullet_list(items)


def refresh_table(history: History, depth: int) -> Table:
    up = "../" * depth
    rows = []
    for r in history.refreshes():
        run = (
            Cell(r.run_id, r.run_id, href=up + run_file(r.run_id))
            if r.run_id in history.published_runs
            else Cell(r.run_id or DASH, r.run_id or "", title="run directory not published")
        )
        rows.append(
            [
                Cell(r.date, r.date),
                Cell(r.commit, history.x(r.commit), href=up + commit_file(r.commit)),
                Cell(f"{r.machine.description} ({r.machine.fingerprint})", r.machine.fingerprint),
                num(r.load, ".2f"),
                run,
                Cell(r.stored_in[:12] if r.stored_in else "history.csv only", r.stored_in or ""),
            ]
        )
    return Table(["refreshed", "commit", "machine", "load", "run", "stored in commit"], rows)


def history_page_body(history: History) -> list[str]:
    pages = [link(w, history_file(w)) for w in history.workloads()]
    return [
        Section(
            "refreshes",
            "Refreshes",
            "Every stored refresh of the scorecard, in first-parent order of the commit it "
            "measured.",
            [table_html(refresh_table(history, 0))],
        ).html(),
        Section("workloads", "Per workload", "", [bullet_list(pages)]).html(),
        Section("flags", "Flagged regressions", "", [flag_list(history, history.flags, 0)]).html()
        if history.flags
        else "",
    ]


def commit_page_body(history: History, commit: str) -> list[str]:
    pts = [p for p in history.points if p.refresh.commit == commit]
    full = next((p.refresh.full_commit for p in pts if p.refresh.full_commit), None)
    full = full or next((f.full_commit for f in history.flags if f.commit == commit), None)
    links = []
    if commit.endswith("+dirty"):
        links.append("measured on a work tree with uncommitted changes on top of this commit")
    if history.repo_url and full:
        links.append(link(f"{commit} upstream", f"{history.repo_url.rstrip('/')}/commit/{full}"))
    refreshes = [r for r in history.refreshes() if r.commit == commit]
    for r in refreshes:
        run = (
            link(r.run_id, "../" + run_file(r.run_id))
            if r.run_id in history.published_runs
            else f"{esc(r.run_id or DASH)} (not published: pass its directory to --runs)"
        )
        links.append(
            f"refreshed {esc(r.date)} on {esc(r.machine.description)} "
            f"({esc(r.machine.fingerprint)}), load {fmt(r.load, '.2f')}; "
            f"run {run}"
        )
    rows = []
    by = {(p.workload, p.label, p.metric, p.refresh): p for p in pts}
    for r in refreshes:
        for w in history.workloads():
            for label in dict.fromkeys(p.label for p in pts if p.workload == w):
                t = by.get((w, label, "throughput", r))
                ir = by.get((w, label, "ir_per_op", r))
                rss = by.get((w, label, "maxrss_kb", r))
                if not (t or ir or rss):
                    continue
                rows.append(
                    [
                        Cell(w, w, href="../" + history_file(w)),
                        Cell(label, label),
                        num(t.value / 1e6 if t else None, ".2f"),
                        num(t.ratio if t else None, ".3f"),
                        num(ir.value if ir else None, ".1f"),
                        num(rss.value / 1024 if rss else None, ".1f"),
                        Cell(r.date, r.date),
                    ]
                )
    for run_id, headline in history.runs_at.get(commit, []):
        links.append(f"run {link(run_id, '../' + run_file(run_id))}: {esc(headline)}")
    flags = [f for f in history.flags if f.commit == commit]
    body = [bullet_list(links) if links else ""]
    if rows:
        body.append(
            table_html(
                Table(
                    [
                        "workload",
                        "allocator",
                        "Mops/s",
                        f"ratio to {history.reference}",
                        "Ir/op",
                        "peak RSS MiB",
                        "refreshed",
                    ],
                    rows,
                )
            )
        )
    if flags:
        body.append(Section("flags", "Flagged here", "", [flag_list(history, flags, 1)]).html())
    return body
