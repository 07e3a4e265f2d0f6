"""hakbench publish, opened in a real browser: Debian's Chromium, headless, driven by
Playwright (its own browser download does not work here, so ``executable_path`` names the
system's). The site is published once from the committed scorecard samples and history and
three captured run directories (an ab, a soak that failed on an injected leak, a gate run);
then every page is opened from disk (file://, no server) and checked:

- it loads with no console error, no uncaught exception and no failed request;
- every local link resolves to a file: anchors, links drawn inside charts (the flagged
  regressions) and the page a chart's point opens when clicked;
- every chart drew one marker per data point of each visible trace (counted in plotly's
  SVG: ``.scatterlayer .trace`` → ``.points path.point``).

Screenshots of the main pages are kept in build/test-artifacts/publish/. The last test
shows the same checks failing on a page that is broken in each of those three ways.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import deque
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from hakbench.experiments.publish import publish
from hakbench.experiments.scorecard import load_stored

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
RUNS = REPO / "tests" / "data" / "publish-runs"
ARTIFACTS = REPO / "build" / "test-artifacts" / "publish"
SCREENSHOTS = {
    "index.html": "index.png",
    "history/mixed.html": "history-mixed.png",
    "runs/ab-lean-policy.html": "run-ab.png",
    "runs/soak-injected-leak.html": "run-soak.png",
}

pytestmark = pytest.mark.xdist_group("browser")

# Per chart: each trace of gd.data (its points, whether it is shown) and each trace plotly
# drew (the index of its data trace, the markers it drew); every link inside the charts.
CHARTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  id: gd.id,
  data: gd.data.map(t => ({
    points: (t.y || []).length,
    shown: t.visible === undefined || t.visible === true,
    markers: (t.mode || '').indexOf('markers') >= 0,
  })),
  drawn: Array.from(gd.querySelectorAll('.scatterlayer .trace')).map(el => ({
    index: el.__data__ && el.__data__[0] && el.__data__[0].trace
      ? el.__data__[0].trace.index : -1,
    markers: el.querySelectorAll('.points path.point').length,
  })),
}))"""

# Every link of the page, absolute: anchors (HTML and SVG) and the targets of chart points.
LINKS_JS = """() => {
  const out = [];
  document.querySelectorAll('a').forEach(a => {
    const h = a.getAttribute('href') || a.getAttribute('xlink:href');
    if (h) out.push(new URL(h, location.href).href);
  });
  document.querySelectorAll('.js-plotly-plot').forEach(gd => gd.data.forEach(t =>
    (t.customdata || []).forEach(c => {
      if (c && c[0]) out.push(new URL(c[0], location.href).href);
    })
  ));
  return out;
}"""


def chart_problems(charts: list[dict]) -> list[str]:
    """A chart whose shown trace drew no trace, or fewer or more markers than its points."""
    problems = []
    for chart in charts:
        drawn = {d["index"]: d["markers"] for d in chart["drawn"]}
        for i, t in enumerate(chart["data"]):
            if not (t["shown"] and t["markers"]):
                continue
            if i not in drawn:
                problems.append(f"{chart['id']}: trace {i} was not drawn")
            elif drawn[i] != t["points"]:
                problems.append(
                    f"{chart['id']}: trace {i} drew {drawn[i]} markers for {t['points']} points"
                )
    return problems


def local_file(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


TABS = 3  # pages opened at once: each tab renders in a process of its own


def crawl(browser, start: Path, shots: dict[str, str] | None = None, shot_dir: Path | None = None):
    """Open every page reachable from ``start`` by local links, once each, a few tabs at a
    time. Returns {page: {"errors": [...], "links": [...], "charts": [...]}} and saves the
    screenshots named in ``shots`` (page path relative to start's folder -> PNG name)."""
    root = start.parent.resolve()
    tabs = []
    for _ in range(TABS):
        tab = browser.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        tab.on(
            "console",
            lambda m, e=errors: e.append(f"console: {m.text}") if m.type == "error" else None,
        )
        tab.on("pageerror", lambda x, e=errors: e.append(f"exception: {x}"))
        tab.on("requestfailed", lambda r, e=errors: e.append(f"request failed: {r.url}"))
        tabs.append((tab, errors))
    seen: dict[Path, dict] = {}
    todo = deque([start.resolve()])
    while todo:
        batch: list[Path] = []
        while todo and len(batch) < TABS:
            path = todo.popleft()
            if path not in seen and path not in batch:
                batch.append(path)
        for (tab, errors), path in zip(tabs, batch, strict=False):
            errors.clear()
            tab.goto(path.as_uri(), wait_until="commit")  # the tabs load side by side
        for (tab, errors), path in zip(tabs, batch, strict=False):
            tab.wait_for_load_state("load")
            links = tab.evaluate(LINKS_JS)
            charts = tab.evaluate(CHARTS_JS)
            rel = path.relative_to(root).as_posix()
            if shots and rel in shots and shot_dir:
                tab.screenshot(path=str(shot_dir / shots[rel]))
            seen[path] = {"errors": list(errors), "links": links, "charts": charts}
            for url in links:
                target = local_file(url)
                if target and target.suffix == ".html" and target.exists() and target not in seen:
                    todo.append(target)
    for tab, _ in tabs:
        tab.close()
    return seen


def problems_of(report: dict) -> list[str]:
    out = []
    for path, r in report.items():
        out += [f"{path.name}: {e}" for e in r["errors"]]
        for url in r["links"]:
            target = local_file(url)
            if target is not None and not target.exists():
                out.append(f"{path.name}: dangling link {url}")
        out += [f"{path.name}: {p}" for p in chart_problems(r["charts"])]
    return out


# session scope: xdist may interleave another module's tests on this worker, and a module
# fixture would then be made again (the crawl takes ~20 s)
@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield b
        b.close()


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    publish(out, runs=[RUNS], repo_url="https://git.example.org/hakmem")
    return out, time.monotonic() - started


@pytest.fixture(scope="session")
def crawled(browser, site):
    out, _ = site
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    report = crawl(browser, out / "index.html", SCREENSHOTS, ARTIFACTS)
    print(f"\nscreenshots of the published site: {ARTIFACTS}")
    return report


def test_the_site_is_static_and_shares_one_vendored_script(site):
    out, seconds = site
    scripts = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.js"))
    assert scripts == ["assets/plotly.min.js", "assets/site.js"]
    for html in out.rglob("*.html"):
        text = html.read_text()
        assert 'src="http' not in text and "cdn." not in text, html
    index = (out / "index.html").read_text()
    assert '<script src="assets/plotly.min.js">' in index
    assert '<script src="../assets/plotly.min.js">' in (out / "history/mixed.html").read_text()
    print(f"published in {seconds:.1f} s")


def test_every_page_opens_without_an_error(crawled, site):
    out, _ = site
    every_page = {p.resolve() for p in out.rglob("*.html")}
    assert set(crawled) == every_page  # each one reachable from index.html
    assert [f"{p.name}: {e}" for p, r in crawled.items() for e in r["errors"]] == []


def test_every_local_link_resolves(crawled, site):
    out, _ = site
    links = [u for r in crawled.values() for u in r["links"]]
    local = [local_file(u) for u in links if local_file(u)]
    assert [p for p in local if not p.exists()] == []
    # the points of the history charts open their commit's page; the flagged regressions
    # (the ab's NO-GO guardrails on mixed) link the run that flagged them
    assert (out / "commits/462e6fa5ce3e-dirty.html").resolve() in local
    mixed = crawled[(out / "history/mixed.html").resolve()]["links"]
    assert any(u.endswith("/runs/ab-lean-policy.html") for u in mixed)
    upstream = [u for u in links if u.startswith("https://git.example.org/hakmem/commit/")]
    assert upstream


def test_every_chart_drew_a_marker_per_point(crawled, site):
    out, _ = site
    charts = {p.relative_to(out.resolve()).as_posix(): r["charts"] for p, r in crawled.items()}
    assert [p for r in crawled.values() for p in chart_problems(r["charts"])] == []
    # the index: one throughput chart per workload; a workload's page: three metrics
    _, meta = load_stored(REPO / "results")
    assert len(charts["index.html"]) == len({c["coords"]["workload"] for c in meta["cells"]})
    assert {c["id"] for c in charts["history/mixed.html"]} == {
        "h-mixed-throughput",
        "h-mixed-ir_per_op",
        "h-mixed-maxrss_kb",
    }
    drawn = sum(d["markers"] for c in charts["history/mixed.html"] for d in c["drawn"])
    assert drawn > 100  # 11 refreshes or more x the shown allocators x 3 metrics
    assert len(charts["runs/ab-lean-policy.html"]) == 4  # pairs and ratios per workload
    assert len(charts["runs/soak-injected-leak.html"]) == 2  # RSS and throughput
    for name in SCREENSHOTS.values():
        assert (ARTIFACTS / name).stat().st_size > 10_000


BROKEN = """<!DOCTYPE html><html><head><script src="plotly.min.js"></script></head><body>
<a href="ok.html">fine</a> <a href="gone.html">dangling</a>
<div id="c" class="plotly-graph-div"></div>
<script>
Plotly.newPlot("c", [{"type": "scatter", "mode": "lines+markers", "x": [1, 2, 3],
  "y": [1, null, 3]}], {});
</script>
<script>undefined_function();</script>
</body></html>
"""


def test_the_checks_fail_on_a_broken_page(browser, site, tmp_path):
    out, _ = site
    shutil.copy(out / "assets/plotly.min.js", tmp_path / "plotly.min.js")
    (tmp_path / "ok.html").write_text("<!DOCTYPE html><html><body>ok</body></html>")
    (tmp_path / "index.html").write_text(BROKEN)
    problems = problems_of(crawl(browser, tmp_path / "index.html"))
    assert len(problems) == 3, json.dumps(problems, indent=1)
    assert "undefined_function is not defined" in problems[0]
    assert problems[1].endswith("gone.html")
    assert problems[2] == "index.html: c: trace 0 drew 2 markers for 3 points"


def test_a_click_on_a_header_sorts_the_table(browser, site, tmp_path):
    from hakbench.report.site.html import Cell, Table, page, table_html

    out, _ = site
    rows = [
        [Cell(name, name), Cell(f"{v:.3f}", v)] for name, v in (("b", 1.5), ("a", 0.2), ("c", 10.0))
    ]
    html = page("t", [table_html(Table(["name", "ratio"], rows))], depth=0, charts=False)
    shutil.copytree(out / "assets", tmp_path / "assets")
    (tmp_path / "t.html").write_text(html)
    tab = browser.new_page()
    tab.goto((tmp_path / "t.html").as_uri())
    column = "() => Array.from(document.querySelectorAll('td:first-child'), c => c.textContent)"
    tab.click("th:nth-child(2)")
    assert tab.evaluate(column) == ["a", "b", "c"]  # by number: 0.2 < 1.5 < 10
    tab.click("th:nth-child(2)")
    assert tab.evaluate(column) == ["c", "b", "a"]
    tab.close()
