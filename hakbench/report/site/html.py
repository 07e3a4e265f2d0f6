"""The site's page shell and tables: plain HTML5, one stylesheet and one small script in
``assets/`` shared by every page (sortable tables; a click on a chart's point opens the page
it names). Pure: data in, text out."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

ASSETS = "assets"
PLOTLY_JS = "plotly.min.js"
SITE_JS = "site.js"
SITE_CSS = "site.css"
DASH = "—"

# The top of every page: (title, path from the site's root)
NAV = (("Scorecard", "index.html"), ("History", "history.html"), ("Runs", "runs/index.html"))


def esc(text) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Cell:
    """One table cell: what it shows, what it sorts by, and where it links (relative)."""

    text: str
    sort: float | str | None = None
    href: str | None = None
    title: str | None = None
    css: str | None = None  # a class: "good", "bad", "note"


def cell(value, sort=None, *, href=None, title=None, css=None) -> Cell:
    return value if isinstance(value, Cell) else Cell(str(value), sort, href, title, css)


def fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else DASH


def num(value: float | None, spec: str = ".3f", css: str | None = None) -> Cell:
    if value is None:
        return Cell(DASH, None)
    return Cell(format(value, spec), float(value), css=css)


@dataclass
class Table:
    header: list[str]
    rows: list[list] = field(default_factory=list)  # Cell or anything str() shows
    caption: str = ""
    sortable: bool = True


def table_html(table: Table) -> str:
    cls = "sortable" if table.sortable else "plain"
    out = [f'<table class="{cls}">']
    if table.caption:
        out.append(f"<caption>{esc(table.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in table.header))
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        tds = []
        for value in row:
            c = cell(value)
            attrs = ""
            if c.sort is not None:
                attrs += f' data-sort="{esc(c.sort)}"'
            if isinstance(c.sort, float | int):
                attrs += ' class="n"' if not c.css else f' class="n {esc(c.css)}"'
            elif c.css:
                attrs += f' class="{esc(c.css)}"'
            if c.title:
                attrs += f' title="{esc(c.title)}"'
            body = esc(c.text)
            if c.href:
                body = f'<a href="{esc(c.href)}">{body}</a>'
            tds.append(f"<td{attrs}>{body}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


@dataclass
class Section:
    """A titled part of a page: an anchor, a heading, prose, then tables and charts (HTML)."""

    anchor: str
    title: str
    intro: str = ""  # plain text; paragraphs separated by blank lines
    parts: list[str] = field(default_factory=list)  # HTML: tables, charts, lists

    def html(self) -> str:
        paras = "".join(f"<p>{esc(p)}</p>" for p in self.intro.split("\n\n") if p.strip())
        return (
            f'<section id="{esc(self.anchor)}"><h2>{esc(self.title)}</h2>{paras}'
            + "\n".join(self.parts)
            + "</section>"
        )


def link(text: str, href: str) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def bullet_list(items: Sequence[str]) -> str:
    """``items`` are HTML already (links, escaped text)."""
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def page(title: str, body: Sequence[str], *, depth: int, charts: bool, subtitle: str = "") -> str:
    """A whole page; ``depth`` is how many directories below the site's root it lives
    (its links to the assets and the other pages are relative, so the site opens from
    disk); ``charts``: whether it loads the plotting script."""
    up = "../" * depth
    nav = " · ".join(link(name, up + href) for name, href in NAV)
    scripts = f'<script src="{up}{ASSETS}/{PLOTLY_JS}"></script>' if charts else ""
    sub = f'<p class="sub">{esc(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · hakmem lab</title>"
        f'<link rel="stylesheet" href="{up}{ASSETS}/{SITE_CSS}">'
        f"{scripts}</head>\n<body><nav>{nav}</nav><main><h1>{esc(title)}</h1>{sub}\n"
        + "\n".join(body)
        + f'\n</main><script src="{up}{ASSETS}/{SITE_JS}"></script></body></html>\n'
    )


SITE_CSS_TEXT = """\
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #222; background: #fcfcfc; }
nav { background: #263238; padding: .6em 1.2em; }
nav a { color: #eceff1; margin-right: .8em; text-decoration: none; font-weight: 600; }
main { padding: .5em 1.5em 3em; max-width: 1300px; }
h1 { font-size: 1.6em; margin: .6em 0 .2em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; }
p.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: .2em 0; }
th, td { border: 1px solid #ddd; padding: .25em .55em; vertical-align: top; }
th { background: #eef1f4; text-align: left; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th.asc::after { content: " ▲"; }
table.sortable th.desc::after { content: " ▼"; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #f6f8fa; }
.good { color: #1b5e20; font-weight: 600; }
.bad { color: #b71c1c; font-weight: 600; }
.note { color: #666; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: .6em; }
.chart { min-width: 0; border: 1px solid #e3e3e3; background: #fff; }
pre { background: #f3f3f3; padding: .6em; overflow-x: auto; font-size: 12px; }
"""

# Sort a table by a click on its header (numbers by data-sort, text otherwise), and open the
# page a chart's point names (customdata[0], relative to the page) when it is clicked.
SITE_JS_TEXT = """\
(function () {
  function key(td) {
    var s = td.getAttribute('data-sort');
    if (s === null) return td.textContent.trim().toLowerCase();
    var f = parseFloat(s);
    return isNaN(f) ? s.toLowerCase() : f;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var asc = !th.classList.contains('asc');
        table.querySelectorAll('th').forEach(function (h) { h.classList.remove('asc', 'desc'); });
        th.classList.add(asc ? 'asc' : 'desc');
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
    if (!gd.on) return;
    gd.on('plotly_click', function (ev) {
      var p = ev.points && ev.points[0];
      var target = p && p.customdata && p.customdata[0];
      if (target) window.location.href = target;
    });
  });
})();
"""
