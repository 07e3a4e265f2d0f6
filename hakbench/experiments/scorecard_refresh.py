"""A scorecard refresh: run a scorecard matrix (or the misuse probes), keep a compact copy
of what it measured in ``results/<dir>/`` (committed), append history, and rebuild the
files from it (``hakbench.experiments.scorecard.render``). The stored copy is replaced only
when the run finished and something succeeded.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from hakbench.core.errors import MeasurementError, UsageError
from hakbench.engine.store import load_samples, read_json, write_json, write_jsonl
from hakbench.experiments.matrix import run_matrix
from hakbench.experiments.matrix_spec import load_matrix
from hakbench.experiments.scorecard import (
    APPS_STORED_DIR,
    HISTORY_FIELDS,
    HISTORY_NAME,
    MISUSE_DIR,
    REPORT_METRICS,
    STORED_DIR,
    SUITE_STORED_DIR,
    apps_matrix,
    build_scorecard,
    default_matrix,
    history_rows,
    history_text,
    load_stored,
    read_history,
    refresh_id,
    render,
    stored_dir,
    suite_matrix,
)

# What a stored sample keeps; the rest (env, argv, allocator stats, stderr of good runs)
# is either in meta.json once per cell or not needed to rebuild the scorecard.
KEPT_FIELDS = ("seq", "cell", "round", "pair", "side", "phase", "status", "error", "metrics")
KEPT_IF_PRESENT = ("tool",)  # which instruction counter an "instructions" sample used
APPS_KEPT_METRICS = (
    "cpu_s",
    "wall_s",
    "app_time_s",
    "app_rate",
    "throughput",
    "maxrss_kb",
    "page_faults",
)


def replace_stored(d: Path, files: dict, *, keep_others: bool = False) -> Path:
    """Replace the stored directory ``d`` with ``files`` (name -> a list of rows for JSONL,
    else a JSON document) at once: written beside it, then renamed over it. ``keep_others``:
    files of ``d`` the refresh does not write (the gate's baseline, ``gate.json``) stay."""
    tmp = d.with_name(d.name + ".new")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in files.items():
        (write_jsonl if name.endswith(".jsonl") else write_json)(tmp / name, data)
    if d.exists():
        for kept in d.iterdir() if keep_others else ():
            if not (tmp / kept.name).exists():
                kept.rename(tmp / kept.name)
        shutil.rmtree(d)
    tmp.rename(d)
    return d


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
    compact = [compact_sample(s, metrics_kept) for s in samples]
    files = {"samples.jsonl": compact, "meta.json": meta}
    return replace_stored(stored_dir(results, name), files, keep_others=True)


def refresh(
    results: Path,
    *,
    matrix: Path | None = None,
    quick: bool = False,
    runs: int | None = None,
    command: list[str] | str | None = None,
    on_sample=None,
    apps: bool = False,
    suite: bool = False,
    allocators: tuple[str, ...] = (),
) -> Path:
    """Run the scorecard matrix, store its samples, append history, regenerate the files.

    ``quick`` runs the matrix's quick_runs rounds and skips its instruction counts.
    ``apps`` runs the applications-and-stress matrix (``profiles/matrices/apps.toml``) into
    ``results/scorecard-apps/`` instead; it has no history and no instruction counts.
    ``suite`` runs mimalloc-bench's programs (``profiles/matrices/mimalloc-bench.toml``) into
    ``results/scorecard-suite/`` the same way. ``allocators`` are added to the matrix's
    allocator axis (``NAME=PATH.so``: hardened_malloc, any allocator by path).

    The full run stays in ``results/runs/<id>/``; the stored scorecard is replaced only when
    the run finished and at least one sample succeeded.
    """
    from hakbench.engine.store import default_run_dir

    spec = load_matrix(
        matrix or (apps_matrix() if apps else suite_matrix() if suite else default_matrix())
    )
    if allocators:
        axes = {**spec.axes, "allocator": (*spec.axes["allocator"], *allocators)}
        spec = dataclasses.replace(spec, axes=axes)
    runs = runs or (spec.quick_runs if quick else spec.runs)
    run_dir = results / "runs" / default_run_dir(f"scorecard-{spec.name}").name
    run = run_matrix(
        spec,
        run_dir,
        runs=runs,
        command=command,
        on_sample=on_sample,
        instructions=spec.instructions and not quick and not apps and not suite,
    )
    if not any(s.status == "ok" for s in run.summaries):
        reasons = sorted({s.reason for s in run.summaries})
        raise MeasurementError(
            f"no cell of the scorecard succeeded ({'; '.join(reasons)[:300]}); "
            f"stored scorecard left as it was; samples in {run_dir}"
        )
    return adopt(run_dir, results, quick=quick, apps=apps, suite=suite)


def adopt(
    run_dir: Path, results: Path, *, quick: bool = False, apps: bool = False, suite: bool = False
) -> Path:
    """Store a finished run of the scorecard matrix (the one ``refresh`` just made, or
    ``hakbench merge`` of its shards run on several machines), append history, regenerate."""
    extra = {"quick": quick, "full_run": str(run_dir.name)}
    if apps or suite:
        name = APPS_STORED_DIR if apps else SUITE_STORED_DIR
        store_refresh(run_dir, results, extra, name, APPS_KEPT_METRICS)
        render(results)
        return run_dir
    history_file = results / HISTORY_NAME
    this = refresh_id(read_json(run_dir / "meta.json"))
    if this in {(r["date"], r["commit"]) for r in read_history(history_file)}:
        raise UsageError(
            f"{history_file} already holds the refresh of {this[0]} at {this[1]} "
            f"({run_dir.name} was adopted before); nothing changed"
        )
    store_refresh(run_dir, results, extra)
    samples, meta = load_stored(results)
    card = build_scorecard(samples, meta, [])
    existing = history_file.read_text() if history_file.exists() else ""
    new_rows = history_text(history_rows(card)).split("\n", 1)[1]
    history_file.write_text((existing or ",".join(HISTORY_FIELDS) + "\n") + new_rows)
    render(results)
    return run_dir


def adopt_finished(run_dir: Path, results: Path, *, matrix: Path | None = None) -> Path:
    """``scorecard --refresh --from DIR``: check that DIR holds a whole, finished run of the
    scorecard matrix (e.g. merged from its shards), then ``adopt`` it."""
    spec = load_matrix(matrix or default_matrix())
    if not (run_dir / "meta.json").exists():
        raise UsageError(f"{run_dir}: no meta.json (not a matrix run directory)")
    meta = read_json(run_dir / "meta.json")
    name = (meta.get("matrix") or {}).get("name")
    if meta.get("kind") != "matrix" or name != spec.name:
        raise UsageError(f"{run_dir} is not a run of the {spec.name} matrix (it ran {name!r})")
    shard = meta.get("shard")
    if isinstance(shard, dict) and shard.get("n", 1) > 1 and "merged_from" not in meta:
        raise UsageError(f"{run_dir} is one shard; `hakbench merge` all of them first")
    if meta.get("interrupted"):
        raise UsageError(f"{run_dir} was interrupted; finish it with --resume first")
    return adopt(run_dir, results)


def refresh_misuse(results: Path, *, command=None) -> Path:
    """Run every misuse pattern and the suite's security probes under the default
    allocators (hakmem once per variant of ``misuse.HAKMEM_VARIANTS``; hardened_malloc when
    ``$HAKBENCH_HARDENED_MALLOC`` names it), store the records in ``results/misuse/`` and
    regenerate. The suite is required (``$HAKBENCH_MIMALLOC_BENCH`` or ``make suites``'
    clone; none: exit 5). The stored section is replaced only when the run finished and
    some probe ran."""
    from hakbench.engine.meta import collect_meta
    from hakbench.engine.store import default_run_dir
    from hakbench.experiments import misuse

    targets, skipped = misuse.resolve_targets(misuse.default_allocators(), misuse.HAKMEM_VARIANTS)
    if not targets:
        raise MeasurementError("no allocator to probe: every default one is unavailable")
    patterns = misuse.list_patterns()
    suite, _ = misuse.suite_probes(required=True)
    run_dir = results / "runs" / default_run_dir("scorecard-misuse").name
    run = misuse.run_misuse(
        targets,
        patterns,
        run_dir,
        skipped=skipped,
        meta=collect_meta(command),
        label="misuse probes",
        suite=suite,
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
    # keep_others: the builds' costs (build_costs.csv, allocator/tools/build_costs.sh) are
    # measured apart and stay across a refresh of the probes
    replace_stored(
        stored_dir(results, MISUSE_DIR),
        {"probes.jsonl": run.records, "meta.json": meta},
        keep_others=True,
    )
    render(results)
    return run_dir
