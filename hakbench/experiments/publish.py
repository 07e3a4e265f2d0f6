"""``hakbench publish OUT``: the static site, from what is stored only (nothing re-measured).

It reads the committed scorecard (``results/scorecard/``, ``scorecard-apps/``, ``misuse/``),
every version of the stored scorecard samples that git history holds (one refresh each: the
scorecard across commits, with intervals, Ir/op and peak RSS, on the line of the machine
that measured it), ``results/history.csv`` for any refresh whose samples were never
committed, and the run directories the user names; then ``hakbench.report.site`` draws it.
Regressions an ``ab`` (a NO-GO, primary or guardrail) or the gate (a rise) flagged in those
runs are marked at their commit.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine import git_history
from hakbench.engine.store import load_samples, read_json, read_jsonl
from hakbench.experiments import scorecard as sc
from hakbench.report.site.build import MARKER, Site, is_replaceable, write_site
from hakbench.report.site.history import History, history_file
from hakbench.report.site.html import Section
from hakbench.report.site.runs import RunView
from hakbench.report.site.scorecard import (
    apps_section,
    misuse_section,
    probes_section,
    standing_section,
    suite_section,
    workloads_section,
)
from hakbench.tables.history_model import (
    Flag,
    HistoryPoint,
    points_of,
    points_of_history_csv,
    points_of_summaries,
    summaries_of,
)
from hakbench.tables.scorecard_model import Scorecard

STORED_META = f"{sc.STORED_DIR}/meta.json"
STORED_SAMPLES = f"{sc.STORED_DIR}/samples.jsonl"


# ---- the scorecard's sections: one line each ----


# The public suites' stored samples (mimalloc-bench; the scorecard's SUITE_STORED_DIR), read
# like the applications-and-stress section's.
SUITE_STORED_DIR = "scorecard-suite"


def scorecard_sections(results: Path, card) -> list[Section]:
    """The index page's sections in order, each a function of its stored table, present
    when that table is stored: a new section is one more line here."""
    from hakbench.report.apps import apps_rows
    from hakbench.tables import misuse_suite_model
    from hakbench.tables.misuse_model import pattern_records, rows_of

    def stored(name: str) -> bool:
        return (sc.stored_dir(results, name) / "meta.json").exists()

    sections = [standing_section(card), workloads_section(card, history_file)]
    if stored(sc.APPS_STORED_DIR):
        samples, meta = sc.load_stored(results, sc.APPS_STORED_DIR)
        sections.append(apps_section(apps_rows(samples, meta), meta))
    if stored(SUITE_STORED_DIR):
        samples, meta = sc.load_stored(results, SUITE_STORED_DIR)
        sections.append(suite_section(apps_rows(samples, meta), meta))
    if stored(sc.MISUSE_DIR):
        records, meta = sc.load_misuse(results)
        sections.append(misuse_section(rows_of(pattern_records(records)), meta))
        suite_rows = misuse_suite_model.rows_of(records)
        if suite_rows:
            sections.append(probes_section(suite_rows, records, meta))
    return sections


# ---- the scorecard across commits ----


def _parse_jsonl(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn line: the rest of the refresh still counts
    return out


def stored_refreshes(results: Path, card) -> list[HistoryPoint]:
    """Every refresh whose samples git history holds, and the one on disk (``card``, its
    summaries made already; committed or not), as history points."""
    current = (card.meta.get("date"), card.meta.get("run_id"))
    on_disk = points_of_summaries(card.by_metric, card.meta)
    root = git_history.repo_of(results)
    if root is None:
        return on_disk
    points: list[HistoryPoint] = []
    seen = {current}
    stored_in = None  # the first commit that stored the refresh on disk
    rel = results.resolve().relative_to(root.resolve()).as_posix()
    for v in git_history.versions(root, f"{rel}/{STORED_META}"):
        try:
            meta = json.loads(git_history.show(root, v.commit, f"{rel}/{STORED_META}") or "")
        except json.JSONDecodeError:
            continue  # not a meta.json this reader knows: that version is left out
        key = (meta.get("date"), meta.get("run_id"))
        if key in seen:
            stored_in = stored_in or (v.commit if key == current else None)
            continue  # the same refresh committed again (a re-render, a move)
        samples_text = git_history.show(root, v.commit, f"{rel}/{STORED_SAMPLES}")
        if not samples_text or not isinstance(meta.get("cells"), list):
            continue
        seen.add(key)
        points += points_of(_parse_jsonl(samples_text), meta, stored_in=v.commit)
    if stored_in:  # the refresh on disk was committed: say by which commit
        on_disk = [replace(p, refresh=replace(p.refresh, stored_in=stored_in)) for p in on_disk]
    return points + on_disk


def commit_order(commits: list[tuple[str, str | None, str]], root: Path | None) -> list[str]:
    """Commit labels (12 hex, +dirty) in first-parent order of HEAD's history, a commit off
    the line where the merge that brought it in stands, a tree with uncommitted changes just
    after its commit; commits git does not know go last, by date. ``commits``: (label, full
    commit, date)."""
    line = git_history.first_parent_line(root) if root else []
    where = {sha: i for i, sha in enumerate(line)}
    keyed = {}
    for label, full, date in commits:
        pos = None
        if full and root:
            pos = where.get(full)
            if pos is None:
                pos = git_history.line_position(root, line, full)
        key = (math.inf if pos is None else pos, label.endswith("+dirty"), date)
        keyed[label] = min(keyed.get(label, key), key)
    return sorted(keyed, key=lambda c: keyed[c])


# ---- run directories ----


def run_dirs(given: list[Path]) -> list[Path]:
    """Each DIR is a run directory (it has meta.json) or holds run directories
    (``results/runs/``); anything else is bad input."""
    out = []
    for d in given:
        if not d.is_dir():
            raise UsageError(f"--runs {d}: no such directory")
        if (d / "meta.json").exists():
            out.append(d)
            continue
        found = sorted(p for p in d.iterdir() if (p / "meta.json").exists())
        if not found:
            raise UsageError(
                f"--runs {d}: neither a run directory (meta.json) nor a folder of them"
            )
        out += found
    return list(dict.fromkeys(out))


def _csv_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _gate_rows(run: Path, meta: dict, results: Path) -> list[dict]:
    """A gate run's cells judged against the baseline it ran against (``gate.run_baseline``)."""
    from hakbench.experiments import gate as g
    from hakbench.experiments import gate_verdict as gv

    cells = read_jsonl(run / "cells.jsonl") if (run / "cells.jsonl").exists() else []
    baseline = g.run_baseline(meta, results)
    if not cells or baseline is None or not meta.get("gate_spec"):
        return []
    spec = g.resumed_spec(meta, run)
    out = []
    for row in gv.compare(spec, baseline["cells"], cells):
        d = asdict(row)
        d["change_pct"] = row.change_pct
        out.append(d)
    return out


def read_run(path: Path, results: Path) -> RunView:
    meta = read_json(path / "meta.json")
    kind = meta.get("kind") or "run"
    report = path / "report.md"
    view = RunView(
        path.name, path, kind, meta, report_md=report.read_text() if report.exists() else ""
    )
    view.summary = _csv_rows(path / "summary.csv")
    if kind == "ab":
        samples = load_samples(path / "samples.jsonl") if (path / "samples.jsonl").exists() else []
        keep = ("cell", "workload", "phase", "round", "pair", "side", "status", "metrics")
        view.samples = [{k: s.get(k) for k in keep} for s in samples if s.get("phase") == "measure"]
        if (path / "engagement.json").exists():
            view.engagement = read_json(path / "engagement.json")
    elif kind == "soak":
        if (path / "summary.json").exists():
            view.soak = read_json(path / "summary.json")
        view.epochs = _csv_rows(path / "epochs.csv")
    elif kind == "gate":
        view.gate = _gate_rows(path, meta, results)
    return view


def flags_of(runs: list[RunView]) -> list[Flag]:
    """Regressions the runs flagged: an ab's NO-GO (its primary metric or a guardrail) and
    a gate's rise of instructions or page faults, each at the commit the run measured."""
    out = []
    for r in runs:
        full = r.full_commit
        date = r.meta.get("date", "")
        if r.kind == "ab":
            for row in r.summary:
                if row.get("verdict") == "NO-GO" and row.get("role") in ("primary", "guardrail"):
                    what = (
                        f"ab NO-GO: {row['metric']} B/A {float(row['ratio']):.4f} "
                        f"[{float(row['decide_low']):.4f}, {float(row['decide_high']):.4f}]"
                    )
                    flag = Flag(
                        r.commit, full, row["workload"], row["metric"], what, r.run_id, date
                    )
                    out.append(flag)
        elif r.kind == "gate":
            for g in r.gate:
                for status, metric, change in (
                    (g["status"], "ir_per_op", g.get("change_pct")),
                    (g.get("faults_status"), "minflt", None),
                ):
                    if status == "ROSE":
                        by = f" {change:+.2f} %" if change is not None else ""
                        what = f"gate ROSE: {metric}{by} ({g['profile']})"
                        flag = Flag(r.commit, full, g["workload"], metric, what, r.run_id, date)
                        out.append(flag)
    return out


# ---- the whole site ----


def stored_scorecard(results: Path) -> Scorecard:
    """The stored refresh's scorecard: what ``hakbench scorecard`` renders, the summaries
    made one workload at a time (``summaries_of``)."""
    samples, meta = sc.load_stored(results)
    by_metric = summaries_of(samples, meta, sc.REPORT_METRICS)
    return Scorecard(meta, meta["cells"], by_metric, len(samples), [], [])


def build(results: Path, runs: list[Path], repo_url: str | None) -> Site:
    views = [read_run(d, results) for d in run_dirs(runs)]  # bad input first: it is quick
    card = stored_scorecard(results)
    meta = card.meta
    points = stored_refreshes(results, card)
    known = {(p.refresh.date, p.refresh.commit) for p in points}
    points += points_of_history_csv(sc.read_history(results / sc.HISTORY_NAME), known)
    flags = flags_of(views)
    root = git_history.repo_of(results)
    commits = [(p.refresh.commit, p.refresh.full_commit, p.refresh.date) for p in points]
    commits += [(f.commit, f.full_commit, f.date) for f in flags]
    commits += [(v.commit, v.full_commit, v.meta.get("date", "")) for v in views]
    history = History(points, commit_order(commits, root), flags, card.reference, repo_url)
    git = meta.get("git") or {}
    subtitle = (
        f"Published {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')} from the stored "
        f"samples alone. Scorecard refreshed {meta.get('date')} at commit "
        f"{(git.get('commit') or '?')[:12]}{' (uncommitted changes)' if git.get('dirty') else ''} "
        f"on {meta.get('hostname')} ({meta.get('cpu_model')}, {meta.get('cpu_count')} CPUs)."
    )
    others = sorted({c["coords"]["allocator"] for c in card.cells} - {"hakmem"})
    return Site(
        f"Scorecard: hakmem against {', '.join(others)}",
        subtitle,
        scorecard_sections(results, card),
        history,
        views,
    )


def publish(
    out: Path, *, results: Path | None = None, runs=(), repo_url: str | None = None
) -> list[Path]:
    results = results or paths.results_dir()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a directory")
    if not is_replaceable(out):
        raise UsageError(
            f"{out} holds other files (no {MARKER} of an earlier publish); "
            "publish into a new or empty directory"
        )
    site = build(results, [Path(r) for r in runs], repo_url)
    return write_site(site, out)
