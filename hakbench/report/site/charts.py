"""The site's charts: plotly figures written as static HTML, their data inline, drawn by the
one ``assets/plotly.min.js`` that plotly's package ships (written once, shared by every page;
no CDN, so the site works offline and from disk).

Figures are plain dicts handed to ``plotly.io.to_html`` unvalidated: a figure of the site's
few trace kinds needs no schema check, and building it as a dict keeps the publish fast.
A point whose ``customdata[0]`` is a relative path opens that page when clicked
(``assets/site.js``).
"""

from __future__ import annotations

import math
from pathlib import Path

PALETTE = (
    "#d62728",
    "#1f77b4",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "star")
SYMBOL_GLYPHS = ("●", "■", "◆", "▲", "✚", "★")  # the same shapes, for a key in the text
DASHES = ("solid", "dash", "dot", "dashdot")
CONFIG = {"displaylogo": False, "responsive": True}


def write_plotly_js(path: Path) -> Path:
    """The plotting script plotly's package ships, vendored beside the pages."""
    from plotly.offline import get_plotlyjs

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(get_plotlyjs())
    return path


def finite(v) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def layout(title: str, x_title: str, y_title: str, *, height: int = 360, **extra) -> dict:
    base = {
        "title": {"text": title, "font": {"size": 14}, "x": 0.01},
        "height": height,
        "margin": {"l": 64, "r": 12, "t": 40, "b": 56},
        "xaxis": {
            "title": {"text": x_title, "standoff": 4, "font": {"size": 11}},
            "gridcolor": "#eee",
            "zeroline": False,
            "automargin": True,
        },
        "yaxis": {
            "title": {"text": y_title, "font": {"size": 11}},
            "gridcolor": "#eee",
            "zeroline": False,
            "automargin": True,
        },
        "legend": {"font": {"size": 10}},
        "hovermode": "closest",
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def scatter(
    name: str,
    x: list,
    y: list,
    *,
    low: list | None = None,
    high: list | None = None,
    colour: str | None = None,
    symbol: str = "circle",
    dash: str = "solid",
    mode: str = "lines+markers",
    customdata: list | None = None,
    hover: list[str] | None = None,
    visible: bool = True,
    group: str | None = None,
    legend: bool = True,
) -> dict:
    """One trace; ``low``/``high`` (absolute bounds) become asymmetric error bars."""
    trace = {
        "type": "scatter",
        "name": name,
        "x": x,
        "y": y,
        "mode": mode,
        "marker": {"symbol": symbol, "size": 7},
        "line": {"dash": dash, "width": 1.6},
    }
    if colour:
        trace["marker"]["color"] = colour
        trace["line"]["color"] = colour
    if low is not None and high is not None:
        plus = [h - v if finite(h) and finite(v) else None for v, h in zip(y, high, strict=True)]
        minus = [v - lo if finite(lo) and finite(v) else None for v, lo in zip(y, low, strict=True)]
        if any(p is not None for p in plus):
            trace["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": plus,
                "arrayminus": minus,
                "thickness": 1.2,
                "width": 3,
            }
            if colour:
                trace["error_y"]["color"] = colour
    if customdata is not None:
        trace["customdata"] = customdata
    if hover is not None:
        trace["text"] = hover
        trace["hovertemplate"] = "%{text}<extra></extra>"
    if not visible:
        trace["visible"] = "legendonly"
    if group:
        trace["legendgroup"] = group
    if not legend:
        trace["showlegend"] = False
    return trace


def band(y0: float, y1: float, colour: str = "#eee") -> dict:
    """A horizontal band across the plot (a threshold, an interval)."""
    return {
        "type": "rect",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": y0,
        "y1": y1,
        "fillcolor": colour,
        "opacity": 0.5,
        "line": {"width": 0},
        "layer": "below",
    }


def hline(y: float, colour: str = "#888", dash: str = "solid") -> dict:
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": y,
        "y1": y,
        "line": {"color": colour, "width": 1, "dash": dash},
    }


def chart_html(div_id: str, traces: list[dict], layout_: dict) -> str:
    """A chart's div and the inline script that draws it (the data inline)."""
    import plotly.io as pio

    fig = {"data": traces, "layout": layout_}
    body = pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config=CONFIG,
        validate=False,
        default_height=layout_.get("height", 360),
        default_width="100%",
    )
    return f'<div class="chart">{body}</div>'
