"""Heap-misuse probes (issue #27): run ``build/bench/misuse_probe PATTERN`` under any
allocator and keep how each process ended.

The probe (harness/misuse_probe.c) performs one misuse (an overflow, an underflow, a use
after free, a double free, a free of a pointer that is no block), then a fixed amount of
ordinary malloc/free activity that would expose it, and prints ``key=value`` lines as it
goes. Each process gives a raw *record* (exit status, signal, its compacted stdout and the
head of its stderr); ``hakbench.tables.misuse_model.row_of`` classifies a record into a tidy row
(caught / crashed / hung / not-caught / error, and the effect).

A probe that dies is a result here, not a failed sample: this is why the probes are a
command of their own (``hakbench misuse``) and not workloads, whose samples ``ab``, matrices
and the scorecard judge FAILED when the process dies (``-w @misuse`` says so).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hakbench.core import paths, suites
from hakbench.core.allocators import Allocator, resolve_allocator
from hakbench.core.errors import MeasurementError, UsageError
from hakbench.core.procenv import clean_env
from hakbench.engine import process
from hakbench.experiments.misuse_suite import (
    SuiteProbes,
    open_suite,
    resumed_suite,
    run_benign,
    run_ended,
    run_suite_probe,
    select_names,
)
from hakbench.tables import misuse_suite_model
from hakbench.tables.misuse_model import (
    PROGRAM,
    compact_stderr,
    compact_stdout,
    pattern_records,
    rows_csv,
    rows_of,
)

# The allocators a misuse run covers by default: every known one; hakmem once per variant.
DEFAULT_ALLOCATORS = ("system", "mimalloc", "jemalloc", "tcmalloc", "tbbmalloc", "hakmem")
# libhakmem's builds the probes run against. Add "secure" here once build/secure exists
# (and allocators.VARIANTS knows it): one word.
HAKMEM_VARIANTS = ["fast", "debug", "secure"]
# An optional reference given by path: GrapheneOS's hardened_malloc (docs/misuse.md says
# how to build it). Set, the misuse runs and the scorecard's refresh add it to their
# allocators as `hardened_malloc`.
HARDENED_ENV = "HAKBENCH_HARDENED_MALLOC"
HARDENED_NAME = misuse_suite_model.HARDENED
TIMEOUT_S = 20.0  # the probe ends itself after 2 s of CPU or 10 s; this is the backstop
# Runs per allocator and pattern: most outcomes repeat exactly, a few depend on where ASLR
# put things (glibc's alignment check of a forged tcache link misses 1 time in 16).
RUNS = 3


# ---- patterns and allocators ----


def probe_path(build: Path | None = None) -> Path:
    return paths.bench_binary(PROGRAM, build=build)


def list_patterns(build: Path | None = None) -> list[str]:
    """The probe's pattern names, in its order (``misuse_probe --list``)."""
    probe = probe_path(build)
    if not probe.exists():
        raise UsageError(f"{probe} not built (run `make build`)")
    r = process.run([str(probe), "--list"], timeout=30)
    if not r.ok:
        raise MeasurementError(f"{probe} --list failed: {r.error or f'exit {r.returncode}'}")
    return [line for line in r.stdout.splitlines() if line]


def select_patterns(known: list[str], wanted: Iterable[str]) -> list[str]:
    """Names or shell globs (``'double-free-*'``) -> patterns, in the probe's order; one
    that matches nothing is a UsageError naming the closest pattern."""
    return select_names(known, wanted, "misuse pattern", "hakbench misuse --list names them")


def resolve_targets(
    allocators: Iterable[str], variants: Iterable[str], build: Path | None = None
) -> tuple[list[Allocator], list[dict]]:
    """Allocator specs -> (the available ones, hakmem once per variant; the skipped ones
    as ``{label, reason}``)."""
    found: list[Allocator] = []
    skipped: list[dict] = []
    variants = list(variants)
    for spec in allocators:
        first = resolve_allocator(spec, build=build)
        todo = (
            [resolve_allocator(spec, v, build) for v in variants]
            if first.name == "hakmem"
            else [first]
        )
        for alloc in todo:
            if any(a.label == alloc.label for a in found):
                continue
            if alloc.available:
                found.append(alloc)
            else:
                skipped.append({"label": alloc.label, "reason": alloc.missing_reason or "missing"})
    return found, skipped


def default_allocators() -> list[str]:
    """``DEFAULT_ALLOCATORS``, and hardened_malloc by path when ``$HAKBENCH_HARDENED_MALLOC``
    names it (a path that is no file: UsageError, one line)."""
    path = os.environ.get(HARDENED_ENV)
    return [*DEFAULT_ALLOCATORS, *([f"{HARDENED_NAME}={path}"] if path else [])]


def suite_probes(
    wanted: Iterable[str] = (), *, required: bool = False
) -> tuple[SuiteProbes | None, str]:
    """The suite's probes (``hakbench.core.suites.resolve_suite_dir``'s checkout) to run
    beside our patterns, or (None, why not) when no checkout is to be found and none was
    asked for (``required``: ``--suite-dir``, ``--set suite`` or ``--probe`` given, or
    ``$HAKBENCH_MIMALLOC_BENCH`` set; then the missing suite is the error, exit 5). A suite
    that fails to build is an error either way."""
    required = required or bool(os.environ.get(suites.ENV_VAR))
    try:
        return open_suite(None, wanted), ""
    except suites.SuiteMissingError as e:
        if required:
            raise
        return None, str(e)


# ---- running ----


def run_probe(
    alloc: Allocator, pattern: str, *, build: Path | None = None, timeout: float = TIMEOUT_S
) -> dict:
    """One probe process under ``alloc``: the raw record (never raises for a process that
    died; that is the result)."""
    ended = run_ended([str(probe_path(build)), pattern], clean_env({}, alloc.preload), timeout)
    return {
        "label": alloc.label,
        "allocator": alloc.name,
        "variant": alloc.variant or "",
        "pattern": pattern,
        "expect_impl": alloc.expect_impl,
        **ended,
        "stdout": compact_stdout(ended["stdout"]),
        "stderr": compact_stderr(ended["stderr"]),
    }


@dataclass
class MisuseRun:
    out: Path
    records: list[dict]
    rows: list[dict]  # our patterns: one per allocator and pattern
    skipped: list[dict]
    interrupted: bool = False
    suite_rows: list[dict] = field(default_factory=list)  # the suite's probes (none: not run)


PROBES_FILE = "probes.jsonl"
# what a record keeps: the engine's tags and sequence numbers stay in the run directory's
# probes.jsonl, out of the scorecard's copy
ENGINE_TAGS = ("phase", "cell", "workload", "round", "seq", "run_id")


def stored_record(sample: dict) -> dict:
    return {k: v for k, v in sample.items() if k not in ENGINE_TAGS}


def run_misuse(
    allocators: list[Allocator],
    patterns: list[str],
    out: Path,
    *,
    build: Path | None = None,
    timeout: float = TIMEOUT_S,
    runs: int = RUNS,
    skipped: list[dict] | None = None,
    meta: dict | None = None,
    label: str | None = "misuse",
    resume: bool = False,
    suite: SuiteProbes | None = None,
) -> MisuseRun:
    """Every pattern ``runs`` times under every allocator, and with ``suite`` the suite's
    benign programs once and each of its security probes ``runs`` times, through the
    engine (``hakbench.engine.engine.Session``: meta.json first, each record appended to
    ``out/probes.jsonl`` as its process ends, one progress bar, labelled ``label``, None: no
    bar); then ``misuse.csv`` (``suite-probes.csv``), ``misuse.md`` and ``meta.json``
    (``skipped``: allocators not run, ``{label, reason}``, for the report). A stop signal
    (``hakbench.engine.interrupts``) ends the run; the files are written from what finished
    and the result says ``interrupted``. ``resume``: ``out`` holds a stopped or killed run
    (``resumed`` gives its arguments): its records are kept, the other processes run, after
    the programs and the libraries are checked to be those it ran (one line, exit 2,
    otherwise)."""
    from hakbench.engine import engine, interrupts
    from hakbench.engine.progress import Progress

    if not resume and (out / PROBES_FILE).exists():
        raise UsageError(f"{out} already holds a misuse run ({PROBES_FILE}); pick another --out")
    meta = _run_meta(meta, allocators, patterns, build, runs, timeout, skipped, suite)
    programs = [probe_path(build)] if patterns else []
    files = [*programs, *(suite.files() if suite else []), *(a.preload for a in allocators)]
    ident = engine.identity_of(files, {}, out)
    store, meta, stored = engine.open_run(out, meta, resume=resume, ident=ident, name=PROBES_FILE)
    per_alloc = len(patterns) * runs
    if suite:
        per_alloc += len(suite.benign) + len(suite.probes) * runs
    bar = Progress(len(allocators) * per_alloc, label) if label else None

    def step(record: dict) -> None:
        ok, what = _progress_of(record)
        bar.step(ok, what)

    session = engine.Session(store, stored=stored, on_sample=step if bar else None)
    interrupted = False
    try:
        for alloc in allocators:
            for slot, run_one in _slots(alloc, patterns, runs, suite, build, timeout):
                session.take({**slot, "cell": alloc.label}, run_one)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar:
            bar.close()
    with interrupts.finishing():  # the report of what finished: a stop cuts nothing here
        return _write_outputs(out, meta, session.finished, interrupted, suite)


def _run_meta(meta, allocators, patterns, build, runs, timeout, skipped, suite) -> dict:
    """meta.json of a misuse run: what it runs, under which libraries, with which limits."""
    meta = dict(meta or {})
    meta.update(
        kind="misuse",
        probe=str(probe_path(build)) if patterns else None,
        allocators=[a.label for a in allocators],
        libraries={a.label: str(a.preload) if a.preload else "" for a in allocators},
        targets=[_target_record(a) for a in allocators],
        patterns=list(patterns),
        runs=runs,
        timeout=timeout,
        skipped=list(skipped or []),
        suite=suite.record() if suite else None,
    )
    return meta


def _write_outputs(out: Path, meta: dict, finished, interrupted: bool, suite) -> MisuseRun:
    """misuse.csv (suite-probes.csv), misuse.md and meta.json from the finished records."""
    from hakbench.engine.store import write_json, write_text
    from hakbench.report.misuse_md import run_markdown

    records = [stored_record(r) for r in finished]
    rows = rows_of(pattern_records(records))
    suite_rows = misuse_suite_model.rows_of(records)
    meta["interrupted"] = interrupted
    meta["probes_run"] = len(records)
    write_text(out / "misuse.csv", rows_csv(rows))
    if suite:
        write_text(out / misuse_suite_model.SUITE_CSV, misuse_suite_model.rows_csv(suite_rows))
    write_text(out / "misuse.md", run_markdown(rows, meta, records))
    write_json(out / "meta.json", meta)
    return MisuseRun(out, records, rows, meta["skipped"], interrupted, suite_rows)


def _slots(alloc, patterns, runs, suite, build, timeout):
    """(engine tags, run) of one allocator's processes, in order: the suite's benign
    programs first, then our patterns, then the suite's probes."""
    if suite:
        for b in suite.benign:
            yield (
                {"phase": "benign", "workload": b.program, "round": 0},
                lambda b=b: run_benign(alloc, suite, b),
            )
    for pattern in patterns:
        for run in range(runs):
            yield (
                {"phase": "probe", "workload": pattern, "round": run},
                lambda pattern=pattern, run=run: {
                    **run_probe(alloc, pattern, build=build, timeout=timeout),
                    "run": run,
                },
            )
    for probe in suite.probes if suite else ():
        for run in range(runs):
            yield (
                {"phase": "suite-probe", "workload": probe, "round": run},
                lambda probe=probe, run=run: {**run_suite_probe(alloc, suite, probe), "run": run},
            )


def _progress_of(record: dict) -> tuple[bool, str]:
    """(ran, what to show) of one record for the progress bar."""
    from hakbench.tables.misuse_model import row_of

    kind = record.get("set", "patterns")
    if kind == "benign":
        problem = misuse_suite_model.benign_problem(record)
        return not problem, f"{record['label']} {record['program']}: {problem or 'ok'}"
    if kind == "suite":
        outcome = misuse_suite_model.classify_run(record).outcome
        return outcome != "error", f"{record['label']} {record['probe']}: {outcome}"
    outcome = row_of(record)["outcome"]
    return outcome != "error", f"{record['label']} {record['pattern']}: {outcome}"


def _target_record(alloc: Allocator) -> dict:
    return {
        "name": alloc.name,
        "variant": alloc.variant,
        "preload": str(alloc.preload) if alloc.preload else None,
        "expect_impl": alloc.expect_impl,
    }


def resumed(out: Path) -> dict:
    """``run_misuse``'s arguments for ``--resume out``: the allocators (as the run resolved
    them), patterns, suite probes, runs, timeout and skipped ones its meta.json records."""
    from hakbench.engine import engine

    meta = engine.stored_meta(out, "misuse")
    if not isinstance(meta.get("targets"), list):
        raise UsageError(f"--resume {out}: a misuse run made before misuse could resume")
    allocators = [
        Allocator(t["name"], t["variant"], t["preload"] and Path(t["preload"]), t["expect_impl"])
        for t in meta["targets"]
    ]
    return {
        "allocators": allocators,
        "patterns": meta["patterns"],
        "runs": meta["runs"],
        "timeout": meta["timeout"],
        "skipped": meta["skipped"],
        "suite": resumed_suite(meta.get("suite")),
    }
