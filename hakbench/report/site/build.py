"""Write the whole site into a directory: ``index.html`` (the scorecard's sections and each
workload's throughput across commits), ``history.html`` and ``history/<workload>.html``
(every metric's chart), ``commits/<commit>.html``, ``runs/index.html`` and
``runs/<run>.html``, and ``assets/`` (plotly's script, the site's stylesheet and script),
every link relative so the site opens from disk.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.report.site import charts
from hakbench.report.site.history import (
    History,
    commit_file,
    commit_page_body,
    history_file,
    history_page_body,
    overview_section,
    run_file,
    workload_page_body,
)
from hakbench.report.site.html import (
    ASSETS,
    PLOTLY_JS,
    SITE_CSS,
    SITE_CSS_TEXT,
    SITE_JS,
    SITE_JS_TEXT,
    Section,
    page,
    table_html,
)
from hakbench.report.site.runs import RunView, run_body, runs_index_table


@dataclass
class Site:
    title: str
    subtitle: str
    sections: list[Section]  # the scorecard's, in page order
    history: History
    runs: list[RunView] = field(default_factory=list)


def _write(out: Path, rel: str, text: str, written: list[Path]) -> None:
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    written.append(path)


# Marks a directory as a site this module wrote: only such a directory is cleared before a
# new publish (OUT could be any folder the user names, results/ included).
MARKER = ".hakbench-site"


def is_replaceable(out: Path) -> bool:
    """Whether ``out`` may be written: absent, empty, or a site published before."""
    return not out.exists() or (out / MARKER).exists() or not any(out.iterdir())


def write_site(site: Site, out: Path) -> list[Path]:
    """Every page of ``site`` into ``out`` (the pages of an earlier publish there removed
    first); the paths written. The caller checks ``is_replaceable(out)``."""
    if (out / MARKER).exists():
        for sub in ("history", "commits", "runs", ASSETS):
            if (out / sub).is_dir():
                shutil.rmtree(out / sub)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by hakbench publish; the next publish replaces it\n")
    written: list[Path] = [charts.write_plotly_js(out / ASSETS / PLOTLY_JS)]
    _write(out, f"{ASSETS}/{SITE_CSS}", SITE_CSS_TEXT, written)
    _write(out, f"{ASSETS}/{SITE_JS}", SITE_JS_TEXT, written)
    h = site.history
    h.published_runs = {r.run_id for r in site.runs}
    for r in site.runs:
        if r.commit in h.order:
            h.runs_at.setdefault(r.commit, []).append((r.run_id, f"{r.kind}, {r.headline()}"))
    sections = [*site.sections[:1], overview_section(h), *site.sections[1:]]
    toc = " · ".join(f'<a href="#{s.anchor}">{s.title}</a>' for s in sections)
    index = [f"<p>{toc}</p>", *(s.html() for s in sections)]
    _write(
        out,
        "index.html",
        page(site.title, index, depth=0, charts=True, subtitle=site.subtitle),
        written,
    )
    _write(
        out,
        "history.html",
        page("History across commits", history_page_body(h), depth=0, charts=False),
        written,
    )
    for w in h.workloads():
        _write(
            out,
            history_file(w),
            page(f"History: {w}", workload_page_body(h, w), depth=1, charts=True),
            written,
        )
    for c in h.commits():
        _write(
            out,
            commit_file(c),
            page(f"Commit {c}", commit_page_body(h, c), depth=1, charts=False),
            written,
        )
    commits = h.commits()

    def commit_href(commit: str) -> str | None:
        return "../" + commit_file(commit) if commit in commits else None

    runs_body = (
        [table_html(runs_index_table(site.runs, commit_href))]
        if site.runs
        else ["<p>No run directories published: pass them with <code>--runs DIR</code>.</p>"]
    )
    _write(out, "runs/index.html", page("Runs", runs_body, depth=1, charts=False), written)
    for r in site.runs:
        body = run_body(r, commit_href(r.commit))
        charts_ = r.kind in ("ab", "soak")
        _write(
            out,
            run_file(r.run_id),
            page(f"Run {r.run_id} ({r.kind})", body, depth=1, charts=charts_),
            written,
        )
    return written
