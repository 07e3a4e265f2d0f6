"""The scorecard: libhakmem against the reference allocators, rebuilt from stored samples.

``scorecard_refresh.refresh`` runs ``profiles/matrices/scorecard.toml`` and keeps a compact
copy of its samples in ``results/scorecard/`` (samples.jsonl + meta.json, committed). ``render``
rebuilds everything else from that directory alone — ``results/scorecard.csv``,
``results/SCORECARD.md``, ``results/plots/*.png`` and ``results/history.csv`` — so anyone
regenerates the same bytes, and ``check`` proves the committed files are what the committed
samples say.

history.csv keeps one block of rows per refresh. A refresh appends its block; ``render``
recomputes the block of the stored refresh from its samples and keeps the other blocks as
they are in the file, so the rebuild is deterministic and the trend survives refreshes.
"""

from __future__ import annotations

import csv
import difflib
import io
import shutil
import tempfile
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError
from hakbench.engine.store import load_samples, read_json, read_jsonl
from hakbench.tables.matrix_summary import (
    SUMMARY_RATIO_FIELDS,
    SUMMARY_STATS_FIELDS,
    fmt,
    summarize,
    summary_values,
)
from hakbench.tables.misuse_model import pattern_records, rows_csv, rows_of
from hakbench.tables.scorecard_model import Scorecard

# metric -> decimals in the CSV; throughput is the primary, the others sit beside it.
REPORT_METRICS = {"throughput": 0, "maxrss_kb": 0, "minflt": 0, "ir_per_op": 2}

# The applications-and-stress section: profiles/matrices/apps.toml, stored apart (its rounds
# are seconds long, so it is refreshed on its own: `scorecard --refresh --apps`).
APPS_STORED_DIR = "scorecard-apps"

# The public-suites section: mimalloc-bench's programs (profiles/matrices/mimalloc-bench.toml,
# the suite found by hakbench.core.suites), stored apart like the apps
# (`scorecard --refresh --suite`); rendered by hakbench.report.suite_md.
SUITE_STORED_DIR = "scorecard-suite"
REFRESH_FLAGS = {APPS_STORED_DIR: " --apps", SUITE_STORED_DIR: " --suite"}

# The heap-misuse section: the raw probe records of `hakbench misuse` (probes.jsonl +
# meta.json, committed), from which render classifies every probe again and writes the tidy
# table misuse.csv beside them (`scorecard --refresh --misuse`).
MISUSE_DIR = "misuse"
MISUSE_CSV = "misuse.csv"

CSV_NAME = "scorecard.csv"
MD_NAME = "SCORECARD.md"
HISTORY_NAME = "history.csv"
PLOTS_DIR = "plots"
STORED_DIR = "scorecard"
CSV_FIELDS = (
    "workload",
    "allocator",
    "variant",
    "profile",
    "switches",
    *SUMMARY_STATS_FIELDS,
    "reference",
    "ratio_to_reference",
    *SUMMARY_RATIO_FIELDS,
)
HISTORY_FIELDS = (
    "date",
    "commit",
    "workload",
    "allocator",
    "status",
    "median_ops_s",
    "reference",
    "ratio_to_reference",
)


def default_matrix() -> Path:
    return paths.profiles_dir() / "matrices" / "scorecard.toml"


def stored_dir(results: Path, name: str = STORED_DIR) -> Path:
    return results / name


def apps_matrix() -> Path:
    return paths.profiles_dir() / "matrices" / "apps.toml"


def suite_matrix() -> Path:
    return paths.profiles_dir() / "matrices" / "mimalloc-bench.toml"


def load_stored(results: Path, name: str = STORED_DIR) -> tuple[list[dict], dict]:
    """The stored samples and meta; none stored is bad input (exit 2) with the fix."""
    d = stored_dir(results, name)
    samples_file, meta_file = d / "samples.jsonl", d / "meta.json"
    if not samples_file.exists() or not meta_file.exists():
        flag = REFRESH_FLAGS.get(name, "")
        raise UsageError(
            f"no stored scorecard samples in {d} (samples.jsonl + meta.json); "
            f"run `hakbench scorecard --refresh{flag}` first"
        )
    samples = load_samples(samples_file)
    if not samples:
        raise UsageError(f"{samples_file} is empty; run `hakbench scorecard --refresh`")
    return samples, read_json(meta_file)


def build_scorecard(samples: list[dict], meta: dict, history: list[dict]) -> Scorecard:
    cells = meta["cells"]
    reference = {"allocator": meta["matrix"]["reference"]["allocator"]}
    present = {m for s in samples for m in s.get("metrics", {})}
    by_metric = {
        metric: summarize(samples, cells, metric, reference if metric == "throughput" else None)
        for metric in REPORT_METRICS
        if metric == "throughput" or metric in present
    }
    tools = sorted(
        {s["tool"] for s in samples if s.get("phase") == "instructions" and s.get("tool")}
    )
    card = Scorecard(meta, cells, by_metric, len(samples), [], tools, lab_calibration())
    card.history = merge_history(history, history_rows(card))
    return card


def lab_calibration() -> dict:
    """The lab machine's committed calibrations the scorecard shows: the noise floor
    (results/calibration/latest.json) and the layout spread (layouts.json); a missing one
    is left out."""
    from hakbench.experiments.calibration import reference_path

    out = {}
    for name, file in (("noise", "latest.json"), ("layouts", "layouts.json")):
        path = reference_path().with_name(file)
        if path.exists():
            out[name] = read_json(path)
    return out


def refresh_id(meta: dict) -> tuple[str, str]:
    git = meta.get("git") or {}
    commit = (git.get("commit") or "unknown")[:12] + ("+dirty" if git.get("dirty") else "")
    return meta["date"], commit


def history_rows(card: Scorecard) -> list[dict]:
    date, commit = refresh_id(card.meta)
    return [
        {
            "date": date,
            "commit": commit,
            "workload": s.coords["workload"],
            "allocator": s.label,
            "status": s.status,
            "median_ops_s": fmt(s.median, 0),
            "reference": card.reference,
            "ratio_to_reference": fmt(s.ratio, 4),
        }
        for s in card.throughput
    ]


def read_history(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def merge_history(existing: list[dict], current: list[dict]) -> list[dict]:
    """Other refreshes' rows as they are, then this refresh's rows, ordered by date."""
    if not current:
        return list(existing)
    this = (current[0]["date"], current[0]["commit"])
    kept = [r for r in existing if (r["date"], r["commit"]) != this]
    return sorted(kept + current, key=lambda r: r["date"])


def csv_text(card: Scorecard) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for i, c in enumerate(card.cells):
        coords = c["coords"]
        switches = ";".join(f"{k}={v}" for k, v in coords.items() if k.startswith("HAKMEM_"))
        for metric, summaries in card.by_metric.items():
            s = summaries[i]
            reference = card.reference if s.ratio is not None else ""
            w.writerow(
                [
                    coords["workload"],
                    coords["allocator"],
                    coords.get("variant", ""),
                    coords.get("profile", ""),
                    switches,
                    *summary_values(s, REPORT_METRICS[metric], reference),
                ]
            )
    return buf.getvalue()


def history_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, HISTORY_FIELDS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render(results: Path, out: Path | None = None) -> list[Path]:
    """Rebuild csv, Markdown, history and plots from ``results/scorecard/`` into ``out``.

    ``out`` defaults to ``results`` itself; history.csv is read from ``results``.
    """
    from hakbench.report.scorecard_md import scorecard_markdown
    from hakbench.report.scorecard_plots import draw_plots

    out = out or results
    samples, meta = load_stored(results)
    card = build_scorecard(samples, meta, read_history(results / HISTORY_NAME))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    plots = out / PLOTS_DIR
    if plots.exists():
        shutil.rmtree(plots)  # no stale plots of workloads that left the matrix
    plots.mkdir()
    markdown = scorecard_markdown(card)
    if (stored_dir(results, APPS_STORED_DIR) / "meta.json").exists():
        section, apps_plots = apps_section(results, plots)
        markdown = markdown.rstrip("\n") + "\n\n" + section
        written += apps_plots
    if (stored_dir(results, SUITE_STORED_DIR) / "meta.json").exists():
        section, suite_plots = suite_section(results, plots)
        markdown = markdown.rstrip("\n") + "\n\n" + section
        written += suite_plots
    if (stored_dir(results, MISUSE_DIR) / "meta.json").exists():
        section, tables = misuse_section(results, out)
        markdown = markdown.rstrip("\n") + "\n\n" + section
        written += tables
    for name, text in (
        (CSV_NAME, csv_text(card)),
        (HISTORY_NAME, history_text(card.history)),
        (MD_NAME, markdown),
    ):
        (out / name).write_text(text)
        written.append(out / name)
    written += draw_plots(card, plots)
    return written


def apps_section(results: Path, plots: Path) -> tuple[str, list[Path]]:
    """The applications-and-stress section of SCORECARD.md and its two charts, from the
    samples stored in ``results/scorecard-apps/`` alone."""
    from hakbench.report.apps import apps_markdown, apps_rows, linkage_notes, plot_ratios

    samples, meta = load_stored(results, APPS_STORED_DIR)
    rows = apps_rows(samples, meta)
    ref = meta["matrix"]["reference"]["allocator"]
    charts = [
        plot_ratios(rows, "time_ratio", f"time relative to {ref}", plots / "apps_time.png"),
        plot_ratios(rows, "memory_ratio", f"peak RSS relative to {ref}", plots / "apps_memory.png"),
    ]
    text = apps_markdown(rows, meta, linkage_notes(samples, meta))
    text = "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())
    text = text.replace("](apps_", f"]({PLOTS_DIR}/apps_")
    where = (
        f"Stored in `results/{APPS_STORED_DIR}/` (`hakbench scorecard --refresh --apps`, "
        f"{meta.get('date', '?')}, commit {(meta.get('git') or {}).get('commit', '?')[:10]})."
    )
    head, _, rest = text.partition("\n")
    return f"{head}\n\n{where}\n{rest}\n", charts


def suite_section(results: Path, plots: Path) -> tuple[str, list[Path]]:
    """The "Public suites" section of SCORECARD.md and its two charts, from the samples
    stored in ``results/scorecard-suite/`` alone."""
    from hakbench.report.apps import apps_rows, plot_ratios
    from hakbench.report.suite_md import suite_markdown

    samples, meta = load_stored(results, SUITE_STORED_DIR)
    rows = apps_rows(samples, meta)
    ref = meta["matrix"]["reference"]["allocator"]
    charts = [
        plot_ratios(rows, "time_ratio", f"time relative to {ref}", plots / "suite_time.png"),
        plot_ratios(
            rows, "memory_ratio", f"peak RSS relative to {ref}", plots / "suite_memory.png"
        ),
    ]
    return suite_markdown(rows, meta, f"{PLOTS_DIR}/suite_", samples), charts


def load_misuse(results: Path) -> tuple[list[dict], dict]:
    """The stored misuse records and meta; none stored is bad input (exit 2) with the fix."""
    d = stored_dir(results, MISUSE_DIR)
    records_file, meta_file = d / "probes.jsonl", d / "meta.json"
    if not records_file.exists():
        raise UsageError(
            f"no stored misuse probes in {d} (probes.jsonl + meta.json); "
            "run `hakbench scorecard --refresh --misuse` first"
        )
    records = read_jsonl(records_file)
    if not records:
        raise UsageError(f"{records_file} is empty; run `hakbench scorecard --refresh --misuse`")
    return records, read_json(meta_file)


def misuse_section(results: Path, out: Path) -> tuple[str, list[Path]]:
    """The "Heap misuse" section of SCORECARD.md and its tidy tables ``out/misuse/misuse.csv``
    (our patterns) and ``suite-probes.csv`` (the suite's probes, when stored), classified
    again from the records stored in ``results/misuse/`` alone."""
    from hakbench.report import misuse_costs_md
    from hakbench.report.misuse_md import scorecard_section
    from hakbench.tables import misuse_suite_model

    records, meta = load_misuse(results)
    rows = rows_of(pattern_records(records))
    tables = [out / MISUSE_DIR / MISUSE_CSV]
    tables[0].parent.mkdir(parents=True, exist_ok=True)
    tables[0].write_text(rows_csv(rows))
    if meta.get("suite"):
        tables.append(out / MISUSE_DIR / misuse_suite_model.SUITE_CSV)
        tables[1].write_text(misuse_suite_model.rows_csv(misuse_suite_model.rows_of(records)))
    costs_file = stored_dir(results, MISUSE_DIR) / misuse_costs_md.COSTS_CSV
    costs = list(csv.DictReader(io.StringIO(costs_file.read_text()))) if costs_file.exists() else []
    return scorecard_section(rows, meta, MISUSE_DIR, records, costs), tables


def check(results: Path) -> list[str]:
    """Regenerate into a temporary directory; one readable message per differing file."""
    from hakbench.report.scorecard_plots import same_maker

    problems = []
    with tempfile.TemporaryDirectory(prefix="hakbench-scorecard-") as tmp:
        fresh = Path(tmp)
        written = render(results, fresh)
        for path in written:
            rel = path.relative_to(fresh)
            committed = results / rel
            if not committed.exists():
                problems.append(f"{rel}: missing (run `hakbench scorecard` and commit it)")
                continue
            if path.suffix == ".png":
                if committed.read_bytes() == path.read_bytes():
                    continue
                if not same_maker(committed, path):
                    # Another matplotlib/Pillow draws other bytes; the numbers are in the
                    # text files, which are checked exactly.
                    continue
                problems.append(f"{rel}: differs from the plot the stored samples give")
                continue
            old, new = committed.read_text(), path.read_text()
            if old != new:
                diff = difflib.unified_diff(
                    old.splitlines(),
                    new.splitlines(),
                    f"committed {rel}",
                    f"regenerated {rel}",
                    lineterm="",
                    n=1,
                )
                lines = list(diff)
                if len(lines) > 40:
                    lines = lines[:40] + [f"... {len(lines) - 40} more diff lines"]
                problems.append("\n".join(lines))
        stale = sorted(
            p.relative_to(results)
            for p in (results / PLOTS_DIR).glob("*.png")
            if not (fresh / p.relative_to(results)).exists()
        )
        problems += [f"{rel}: not produced by the stored samples (delete it)" for rel in stale]
    return problems
