"""The scorecard: libhakmem against the reference allocators, rebuilt from stored samples.

``refresh`` runs ``profiles/matrices/scorecard.toml`` and keeps a compact copy of its
samples in ``results/scorecard/`` (samples.jsonl + meta.json, committed). ``render``
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
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine.store import load_samples, read_json, read_jsonl, write_json, write_jsonl
from hakbench.experiments.matrix import load_matrix, run_matrix
from hakbench.tables.matrix_summary import (
    SUMMARY_RATIO_FIELDS,
    SUMMARY_STATS_FIELDS,
    fmt,
    summarize,
    summary_values,
)
from hakbench.tables.misuse_model import rows_csv, rows_of
from hakbench.tables.scorecard_model import Scorecard

# metric -> decimals in the CSV; throughput is the primary, the others sit beside it.
REPORT_METRICS = {"throughput": 0, "maxrss_kb": 0, "minflt": 0, "ir_per_op": 2}
# What a stored sample keeps; the rest (env, argv, allocator stats, stderr of good runs)
# is either in meta.json once per cell or not needed to rebuild the scorecard.
KEPT_FIELDS = ("seq", "cell", "round", "pair", "side", "phase", "status", "error", "metrics")
KEPT_IF_PRESENT = ("tool",)  # which instruction counter an "instructions" sample used

# The applications-and-stress section: profiles/matrices/apps.toml, stored apart (its rounds
# are seconds long, so it is refreshed on its own: `scorecard --refresh --apps`).
APPS_STORED_DIR = "scorecard-apps"
APPS_KEPT_METRICS = ("cpu_s", "wall_s", "app_time_s", "app_rate", "throughput", "maxrss_kb")

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


def load_stored(results: Path, name: str = STORED_DIR) -> tuple[list[dict], dict]:
    """The stored samples and meta; none stored is bad input (exit 2) with the fix."""
    d = stored_dir(results, name)
    samples_file, meta_file = d / "samples.jsonl", d / "meta.json"
    if not samples_file.exists() or not meta_file.exists():
        flag = " --apps" if name == APPS_STORED_DIR else ""
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
    card = Scorecard(meta, cells, by_metric, len(samples), [], tools)
    card.history = merge_history(history, history_rows(card))
    return card


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
    if (stored_dir(results, MISUSE_DIR) / "meta.json").exists():
        section, table = misuse_section(results, out)
        markdown = markdown.rstrip("\n") + "\n\n" + section
        written.append(table)
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


def misuse_section(results: Path, out: Path) -> tuple[str, Path]:
    """The "Heap misuse" section of SCORECARD.md and its tidy table ``out/misuse/misuse.csv``,
    classified again from the records stored in ``results/misuse/`` alone."""
    from hakbench.report.misuse_md import scorecard_section

    records, meta = load_misuse(results)
    rows = rows_of(records)
    table = out / MISUSE_DIR / MISUSE_CSV
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(rows_csv(rows))
    return scorecard_section(rows, meta, MISUSE_DIR), table


def refresh_misuse(results: Path, *, command=None) -> Path:
    """Run every misuse pattern under the default allocators (hakmem once per variant of
    ``misuse.HAKMEM_VARIANTS``), store the records in ``results/misuse/`` and regenerate.
    The stored section is replaced only when the run finished and some probe ran."""
    from hakbench.engine.meta import collect_meta
    from hakbench.engine.store import default_run_dir
    from hakbench.experiments import misuse

    targets, skipped = misuse.resolve_targets(misuse.DEFAULT_ALLOCATORS, misuse.HAKMEM_VARIANTS)
    if not targets:
        raise MeasurementError("no allocator to probe: every default one is unavailable")
    patterns = misuse.list_patterns()
    run_dir = results / "runs" / default_run_dir("scorecard-misuse").name
    run = misuse.run_misuse(
        targets,
        patterns,
        run_dir,
        skipped=skipped,
        meta=collect_meta(command),
        label="misuse probes",
    )
    if run.interrupted:
        raise KeyboardInterrupt
    if all(r["outcome"] == "error" for r in run.rows):
        raise MeasurementError(
            f"every misuse probe failed to run; stored section left as it was; see {run_dir}"
        )
    meta = read_json(run_dir / "meta.json")
    meta.pop("cwd", None)
    meta["full_run"] = run_dir.name
    d = stored_dir(results, MISUSE_DIR)
    tmp = d.with_name(d.name + ".new")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write_jsonl(tmp / "probes.jsonl", run.records)
    write_json(tmp / "meta.json", meta)
    if d.exists():
        shutil.rmtree(d)
    tmp.rename(d)
    render(results)
    return run_dir


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


def compact_sample(sample: dict, metrics_kept=REPORT_METRICS) -> dict:
    """The part of a sample the scorecard needs; stderr only for a sample that failed."""
    out = {k: sample.get(k) for k in KEPT_FIELDS}
    out.update({k: sample[k] for k in KEPT_IF_PRESENT if sample.get(k)})
    if (sample.get("process") or {}).get("malloc_impl"):  # a command workload's preload probe
        out["process"] = {"malloc_impl": sample["process"]["malloc_impl"]}
    metrics = sample.get("metrics") or {}
    out["metrics"] = {k: v for k, v in metrics.items() if k in metrics_kept}
    if sample.get("status") != "ok":
        out["stderr_tail"] = sample.get("stderr_tail", "")
    return out


def store_refresh(
    run_dir: Path,
    results: Path,
    extra_meta: dict,
    name: str = STORED_DIR,
    metrics_kept=REPORT_METRICS,
) -> Path:
    """Copy a finished matrix run into ``results/<name>/``, compacted. Files the refresh does
    not write (the gate's baseline, ``gate.json``) are kept."""
    samples = load_samples(run_dir / "samples.jsonl")
    meta = read_json(run_dir / "meta.json")
    meta.update(extra_meta)
    meta["matrix"].pop("text", None)
    meta.pop("cwd", None)
    d = stored_dir(results, name)
    tmp = d.with_name(d.name + ".new")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write_jsonl(tmp / "samples.jsonl", [compact_sample(s, metrics_kept) for s in samples])
    write_json(tmp / "meta.json", meta)
    if d.exists():
        for kept in d.iterdir():
            if not (tmp / kept.name).exists():
                kept.rename(tmp / kept.name)
        shutil.rmtree(d)
    tmp.rename(d)
    return d


def refresh(
    results: Path,
    *,
    matrix: Path | None = None,
    quick: bool = False,
    runs: int | None = None,
    command: list[str] | str | None = None,
    on_sample=None,
    apps: bool = False,
) -> Path:
    """Run the scorecard matrix, store its samples, append history, regenerate the files.

    ``quick`` runs the matrix's quick_runs rounds and skips its instruction counts.
    ``apps`` runs the applications-and-stress matrix (``profiles/matrices/apps.toml``) into
    ``results/scorecard-apps/`` instead; it has no history and no instruction counts.

    The full run stays in ``results/runs/<id>/``; the stored scorecard is replaced only when
    the run finished and at least one sample succeeded.
    """
    from hakbench.engine.store import default_run_dir

    spec = load_matrix(matrix or (apps_matrix() if apps else default_matrix()))
    runs = runs or (spec.quick_runs if quick else spec.runs)
    run_dir = results / "runs" / default_run_dir(f"scorecard-{spec.name}").name
    run = run_matrix(
        spec,
        run_dir,
        runs=runs,
        command=command,
        on_sample=on_sample,
        instructions=spec.instructions and not quick and not apps,
    )
    if not any(s.status == "ok" for s in run.summaries):
        reasons = sorted({s.reason for s in run.summaries})
        raise MeasurementError(
            f"no cell of the scorecard succeeded ({'; '.join(reasons)[:300]}); "
            f"stored scorecard left as it was; samples in {run_dir}"
        )
    extra = {"quick": quick, "full_run": str(run_dir.name)}
    if apps:
        store_refresh(run_dir, results, extra, APPS_STORED_DIR, APPS_KEPT_METRICS)
        render(results)
        return run_dir
    store_refresh(run_dir, results, extra)
    samples, meta = load_stored(results)
    history_file = results / HISTORY_NAME
    card = build_scorecard(samples, meta, [])
    existing = history_file.read_text() if history_file.exists() else ""
    new_rows = history_text(history_rows(card)).split("\n", 1)[1]
    history_file.write_text((existing or ",".join(HISTORY_FIELDS) + "\n") + new_rows)
    render(results)
    return run_dir
